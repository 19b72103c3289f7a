"""Running a kernel's TileLang lowering through the interpreter of TileLang programs (the CPU oracle of
tle.lowering.tilelang.interpreter), as the CPU and GPU tests do.

A read outside a global tensor is zero in TileLang (its safe-memory pass predicates it). The generator
relies on that in one place: gathers whose masked-off rows it sends past the end, which its access
report says are "zero-filled by bounds predication". Everywhere else such a read is a bug, so runs are
strict unless the lowering says it relies on it."""
import math

import pytest

import tle

ZERO_FILL = "zero-filled by bounds predication"

# tests that lower to TileLang skip where the backend cannot lower (tilelang not importable); a test that
# compiles TileLang without nvcc skips at the compile (tests/conftest.py)
needs_tilelang = pytest.mark.skipif(tle.available_backends().get("tilelang") is not None,
                                    reason="TileLang backend unavailable")


def interpret_tilelang(kernel, grid, *args, num_warps=None, compile_cuda=False, **kwargs):
    """Run on CPU tensors (written in place); return the interpreter's report. num_warps None: as a launch
    that leaves it out (the kernel's tle.call sites choose it, else 4). compile_cuda: also build the lowering
    for sm_90a first (nvcc), where TileLang refuses what the interpreter runs (a warp partition it cannot
    make, say)."""
    lowered = kernel.lower(*args, grid=grid, backend="tilelang", num_warps=num_warps, **kwargs)
    if compile_cuda:
        assert "__global__" in lowered.stage("cuda")
    relies = any(ZERO_FILL in how for _, _, _, how in lowered.compiled.access_report)
    report = kernel.interpret_tilelang(grid, *args, strict_reads=not relies, num_warps=num_warps, **kwargs)
    assert report.blocks == math.prod(grid)
    if relies:
        assert report.predicated_reads, "the lowering says it zero-fills reads, and none was out of bounds"
    return report


def interpret_launch(kernel, launch):
    return interpret_tilelang(kernel, launch.grid, *launch.args, **launch.kwargs)


def run_on(backend, kernel, grid, *args, **kwargs):
    """Run on CPU tensors: "triton" in Triton's interpreter, "tilelang" through the interpreter of TileLang
    programs (skipped where the TileLang backend is unavailable)."""
    if backend == "tilelang":
        import pytest

        import tle
        why = tle.available_backends().get("tilelang")
        if why is not None:
            pytest.skip(f"TileLang backend unavailable here ({why})")
        interpret_tilelang(kernel, grid, *args, **kwargs)
    else:
        kernel[grid](*args, backend=backend, **kwargs)


class tilelang_through_interpreter:
    """Within this context, launches on backend "tilelang" with CPU tensors run the TileLang lowering
    through the interpreter of TileLang programs, and the operators of tle.ops accept "tilelang" on the CPU:
    the operator tests check the TileLang lowering's numbers without a GPU. The oracle stays a test tool:
    nothing outside the tests launches through it."""

    def __init__(self, compile_cuda=False):
        self.compile_cuda = compile_cuda        # also build each launch's lowering for sm_90a (nvcc)

    def __enter__(self):
        import tle.oplib.backend as op_backend
        from tle.jit import Kernel
        self.saved = real_launch, real_reason = Kernel._launch, op_backend.kernel_unusable_reason

        def launch(kernel, grid, args, kwargs, warmup=False):
            if kwargs.get("backend") != "tilelang":
                return real_launch(kernel, grid, args, kwargs, warmup)
            interpret_tilelang(kernel, grid, *args, compile_cuda=self.compile_cuda,
                               **{k: v for k, v in kwargs.items() if k != "backend"})

        def reason(name, device):
            return None if name == "tilelang" and device.type == "cpu" else real_reason(name, device)

        Kernel._launch, op_backend.kernel_unusable_reason = launch, reason
        return self

    def __exit__(self, *exc):
        import tle.oplib.backend as op_backend
        from tle.jit import Kernel
        Kernel._launch, op_backend.kernel_unusable_reason = self.saved
