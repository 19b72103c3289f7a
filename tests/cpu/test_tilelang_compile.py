"""Every kernel's TileLang lowering, compiled for sm_90a without a GPU: CUDA source and PTX (needs nvcc).
A cold compile takes seconds per kernel; TileLang's disk cache makes repeats fast."""
import pytest

from kernel_cases import example_kernels
from tle.cli import meta_copy

KERNELS = example_kernels()


@pytest.mark.slow
@pytest.mark.parametrize("name, kernel", KERNELS, ids=[n for n, _ in KERNELS])
def test_tilelang_compiles_to_cuda_and_ptx(name, kernel):
    launch = kernel.example("cpu", "small")
    args = [meta_copy(a) for a in launch.args]
    lowered = kernel.lower(*args, grid=launch.grid, backend="tilelang", **launch.kwargs)
    assert lowered.backend == "tilelang"
    assert {"cuda", "ptx"} <= set(lowered.stages)
    cuda = lowered.stage("cuda")
    assert "__global__" in cuda
    ptx = lowered.stage("ptx")
    assert ".entry" in ptx and "sm_90" in ptx
