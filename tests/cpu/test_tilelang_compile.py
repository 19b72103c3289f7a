"""Every kernel's TileLang lowering, compiled for sm_90a without a GPU: CUDA source and PTX (needs nvcc).
A cold compile takes seconds per kernel; TileLang's disk cache makes repeats fast. Below, what the backend
does without compiling."""
import pytest
import torch

import tle
from kernel_cases import example_kernels, lower_example
from tilelang_oracle import needs_tilelang

KERNELS = example_kernels()


@pytest.mark.slow
@pytest.mark.parametrize("name, kernel", KERNELS, ids=[n for n, _ in KERNELS])
def test_tilelang_compiles_to_cuda_and_ptx(name, kernel):
    lowered = lower_example(kernel, "tilelang")
    assert lowered.backend == "tilelang"
    assert {"cuda", "ptx"} <= set(lowered.stages)
    cuda = lowered.stage("cuda")
    assert "__global__" in cuda
    ptx = lowered.stage("ptx")
    assert ".entry" in ptx and "sm_90" in ptx


# -- what needs no compile: the stages' names, nvcc detection, the refusal to launch on CPU ----------------
def vector_add_lowered():
    kernel = dict(KERNELS)["vector_add.add_kernel"]
    launch = kernel.example("cpu", "small")
    return lower_example(kernel, "tilelang", launch), kernel, launch


@needs_tilelang
def test_source_stage_and_unknown_stage():
    lowered, _, _ = vector_add_lowered()
    assert lowered.stage("source") == lowered.source and "@T.prim_func" in lowered.source
    with pytest.raises(KeyError, match="tilelang stages are source, cuda, ptx; got 'sass'"):
        lowered.stage("sass")


def test_backend_needs_nvcc(monkeypatch, tmp_path):
    pytest.importorskip("tilelang")
    from tle.lowering.tilelang.backend import Backend
    monkeypatch.setenv("PATH", str(tmp_path))                    # no nvcc on PATH
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert "needs nvcc" in Backend().unavailable_reason()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")                   # found under CUDA_HOME only
    assert Backend().unavailable_reason() is None
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "elsewhere"))
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)                                            # found on PATH only
    assert Backend().unavailable_reason() is None


@needs_tilelang
def test_launch_on_cpu_tensors_is_refused():
    from tle.lowering.tilelang.backend import Backend
    assert "CUDA tensors only" in Backend().launch_unavailable_reason(torch.device("cpu"))
    _, kernel, launch = vector_add_lowered()
    with pytest.raises(tle.LaunchError, match="tensors x_ptr, y_ptr, out_ptr on cpu: TileLang kernels run on CUDA"):
        kernel[launch.grid](*launch.args, backend="tilelang", **launch.kwargs)
