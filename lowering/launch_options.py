"""The options a kernel is launched with, decided once per lowering, after tracing and before any backend
transforms or generates code: `settle_launch_options` writes them into the KernelIR (`ir.options`), and
everything downstream (both backends' code generation and launches, the IR printer, inspection) reads them
there.

num_warps: the launch's where it gave one, else the one the kernel's tle.call sites ask for (their threads /
32), else 4; then the number the backend can launch (Triton: a power of two), with a note where that differs.
num_stages: the launch's, else 3.
"""
from __future__ import annotations

from .frontend.raw_call import warps_for_calls
from .ir.core import DEFAULT_NUM_STAGES, KernelIR, LaunchOptions


def settle_launch_options(ir: KernelIR, backend, num_warps: int | None, num_stages: int | None) -> LaunchOptions:
    """Decide `ir`'s launch options for `backend` from what the launch asked (None: not given)."""
    asked = warps_for_calls(ir, num_warps)
    launched, why = backend.launched_warps(asked)
    if launched != asked:
        ir.notes.append(f"num_warps={asked}: {why}, so {launched}")
    ir.options = LaunchOptions(launched, DEFAULT_NUM_STAGES if num_stages is None else num_stages)
    return ir.options
