"""Every kernel's TileLang lowering, compiled for sm_90a without a GPU: CUDA source and PTX (needs nvcc).
A cold compile takes seconds per kernel; TileLang's disk cache makes repeats fast. Below, what the backend
does without compiling."""
import pytest
import torch
import triton.language as tl

import tle
from kernel_cases import example_kernels, lower_example
from tilelang_oracle import interpret_tilelang, needs_tilelang

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


@tle.jit
def _exp2_kernel(x_ptr, y_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(y_ptr + i, tl.math.exp2(tl.load(x_ptr + i)))


@pytest.mark.slow
@needs_tilelang
def test_the_ptx_stage_is_the_build_that_runs():
    """TileLang builds the kernels with fast math (backend.PASS_CONFIGS): the ptx stage is compiled the same way,
    so exp2 shows as the one ex2.approx.ftz.f32 the kernel runs (and Triton's PTX has), not exp2f's exact form."""
    x, y = torch.zeros(128), torch.zeros(128)
    for backend in ("tilelang", "triton"):
        ptx = _exp2_kernel.lower(x, y, N=128, grid=(1,), backend=backend).stage("ptx")
        assert "ex2.approx.ftz.f32" in ptx and "ex2.approx.f32" not in ptx, backend


# -- what needs no compile: the stages' names, nvcc detection, the refusal to launch on CPU ----------------
def vector_add_lowered():
    kernel = dict(KERNELS)["examples.vector_add.add_kernel"]
    launch = kernel.example("cpu", "small")
    return lower_example(kernel, "tilelang", launch), kernel, launch


@needs_tilelang
def test_source_stage_and_unknown_stage():
    lowered, _, _ = vector_add_lowered()
    assert lowered.stage("source") == lowered.source and "@T.prim_func" in lowered.source
    with pytest.raises(KeyError, match="tilelang stages are source, cuda, ptx; got 'sass'"):
        lowered.stage("sass")


def test_compiling_needs_nvcc_and_lowering_does_not(monkeypatch, tmp_path):
    """Without nvcc the backend still lowers (source, interpreter); its compiling stages and launches say why
    they cannot run."""
    pytest.importorskip("tilelang")
    from tle.lowering.errors import CompilerUnavailable
    from tle.lowering.tilelang.backend import Backend
    monkeypatch.setenv("PATH", str(tmp_path))                    # no nvcc on PATH
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert Backend().unavailable_reason() is None
    assert Backend().compile_unavailable_reason().startswith("no nvcc:")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert Backend().launch_unavailable_reason(torch.device("cuda")).startswith("no nvcc:")
    _, kernel, launch = vector_add_lowered()
    lowered = lower_example(tle.jit(kernel.fn), "tilelang", launch)     # a new kernel: nothing compiled yet
    assert "@T.prim_func" in lowered.stage("source")
    with pytest.raises(CompilerUnavailable, match=r"\[tilelang\] cannot compile here: no nvcc"):
        lowered.stage("cuda")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")                   # found under CUDA_HOME only
    assert Backend().compile_unavailable_reason() is None
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "elsewhere"))
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)                                            # found on PATH only
    assert Backend().compile_unavailable_reason() is None


@needs_tilelang
def test_launch_on_cpu_tensors_is_refused():
    from tle.lowering.tilelang.backend import Backend
    assert "CUDA tensors only" in Backend().launch_unavailable_reason(torch.device("cpu"))
    _, kernel, launch = vector_add_lowered()
    with pytest.raises(tle.LaunchError, match="tensors x_ptr, y_ptr, out_ptr on cpu: TileLang kernels run on CUDA"):
        kernel[launch.grid](*launch.args, backend="tilelang", **launch.kwargs)


def test_launch_refusal_with_a_gpu_present(monkeypatch):
    pytest.importorskip("tilelang")
    from tle.lowering.tilelang.backend import Backend
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "CUDA tensors only" in Backend().launch_unavailable_reason(torch.device("cpu"))
    assert Backend().launch_unavailable_reason(torch.device("cuda")) is None


@pytest.mark.parametrize("capability, arch", [((9, 0), "sm_90a"), ((8, 0), "sm_80"), ((10, 0), "sm_100")])
def test_target_follows_the_gpu(monkeypatch, capability, arch):
    pytest.importorskip("tilelang")
    from tle.lowering.tilelang import backend
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    assert backend._target() == {"kind": "cuda", "arch": arch}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backend._target() == {"kind": "cuda", "arch": "sm_90a"}     # no GPU: compile for the H100/H200


@needs_tilelang
def test_compiled_once_per_lowering(monkeypatch):
    from tle.lowering.tilelang import backend
    lowered, _, _ = vector_add_lowered()
    c = lowered.compiled
    fresh = backend.TileLangCompiled(c.ir, c.spec, c.source, c.path, c.notes)
    calls = []

    class Compiler:       # stands in for tilelang.compile: records what it is asked to build
        @staticmethod
        def compile(prim_func, out_idx, target, pass_configs):
            calls.append(prim_func)
            assert pass_configs == {"tl.enable_fast_math": True}      # the approximate fp32 math Triton uses
            return object()
    monkeypatch.setattr(backend, "_import_tilelang", lambda: Compiler)
    monkeypatch.setattr(backend, "load_module", lambda path, name: type("M", (), {c.ir.name: "prim_func"}))
    first = fresh.kernel
    assert fresh.kernel is first and calls == ["prim_func"]


@needs_tilelang
def test_each_tensor_shape_gets_its_own_lowering():
    """TileLang compiles for the tensors' shapes: the same integers with a larger tensor are another
    program (the kernel declares each tensor's size)."""
    kernel = dict(KERNELS)["examples.vector_add.add_kernel"]
    for size in (256, 512):
        x, y = torch.randn(size), torch.randn(size)
        out = torch.full((size,), float("nan"))
        interpret_tilelang(kernel, (2,), x, y, out, 200, BLOCK_SIZE=128)
        torch.testing.assert_close(out[:200], x[:200] + y[:200])
        assert out[200:].isnan().all()


# -- the block size TileLang compiled for, checked before a launch -------------------------------------------
def _pipelined_norm_backward(num_warps):
    from test_ops_norms import _rms_norm_bwd_lowered
    from tle.oplib.rows import BackwardRows
    return _rms_norm_bwd_lowered(4096, 8192, BackwardRows(1, 8192, num_warps, 1, False, True, 3), 132)


@needs_tilelang
def test_block_size_over_cuda_limit_is_a_lowering_error_naming_the_loop():
    from tle.lowering.errors import LoweringError
    from tle.lowering.tilelang.block_size import check_block_size
    lowered = _pipelined_norm_backward(32)                   # source only: nothing compiled
    ir = lowered.compiled.ir
    assert ir.num_warps == 32                                 # what the check reads
    check_block_size("__launch_bounds__(1024, 1) kernel(", ir)
    with pytest.raises(LoweringError, match=r"rms_norm\.py:\d+: \[tilelang\] TileLang compiled rms_norm_bwd_kernel "
                       r"for 1152 threads a block, more than CUDA's 1024: it warp-specialized the pipelined loop at "
                       r"line \d+, adding 128 producer threads to the 1024 of num_warps=32; launch it with "
                       r"num_warps <= 28"):
        check_block_size("extern \"C\" __global__ void __launch_bounds__(1152, 1) k(", ir)


@pytest.mark.slow
def test_tilelang_warp_specializes_a_pipelined_loop_past_the_block_limit():
    """What the check above is about: 32 warps and a pipelined loop compile to 1152 threads a block."""
    from tle.lowering.errors import LoweringError
    from tle.lowering.tilelang.block_size import check_block_size
    lowered = _pipelined_norm_backward(32)
    cuda = lowered.stage("cuda")
    assert "__launch_bounds__(1152" in cuda
    with pytest.raises(LoweringError, match="1152 threads a block"):
        check_block_size(cuda, lowered.compiled.ir)


@tle.jit
def _carried_bool_tile_kernel(x_ptr, y_ptr, N: tl.constexpr, STEPS: tl.constexpr):
    i = tl.arange(0, N)
    x = tl.load(x_ptr + i)
    keep = x > 0
    n = 0
    while n < STEPS:
        kept = tl.sum(keep.to(tl.int32), 0)
        keep = (x > n) & (i < kept)  # the new tile reads the old one: carried through a second buffer
        n += 1
    tl.store(y_ptr + i, keep.to(tl.int32))


@pytest.mark.slow
@needs_tilelang
def test_a_bool_tile_copied_between_buffers_compiles():
    """TileLang vectorizes a copy of bool elements into a type its CUDA writer cannot name (boolx8, one warp over
    256 elements); the lowering writes the copy as a select, element by element."""
    x, y = torch.randn(256) * 4, torch.zeros(256, dtype=torch.int32)
    interpret_tilelang(_carried_bool_tile_kernel, (1,), x, y, N=256, STEPS=3, num_warps=1, compile_cuda=True)
    keep = x > 0
    for n in range(3):
        keep = (x > n) & (torch.arange(256) < keep.sum())
    assert torch.equal(y, keep.to(torch.int32))
