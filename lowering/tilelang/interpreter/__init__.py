"""A CPU interpreter for the TileLang programs the TileLang backend generates: a test oracle.

It reads a generated `@T.prim_func` with TileLang's own parser (so dtypes, implicit casts and the tile
operators are TileLang's) and runs the TIR on CPU tensors, reporting what has no defined result on the
GPU (out-of-bounds accesses, reads of unwritten memory, data races between blocks or between the
iterations of a T.Parallel loop) as errors. It never stands in for TileLang in a launch: the runtime's
launch path does not know it. `tests/gpu` checks it against compiled TileLang on the GPU.

    program = Program(load_prim_func(path, "kernel_name"))
    report = program.run([x.view(-1), y.view(-1), n])       # tensors are written in place
"""
from __future__ import annotations

from .errors import (BarrierOverflow, Deadlock, DeviceAssertionFailed, DivisionByZero, InterpreterError,
                     Misaligned, OutOfBounds, Race, UninitializedRead, Unsupported)
from .memory import Report
from .program import Program

__all__ = ["Program", "Report", "load_prim_func", "InterpreterError", "OutOfBounds", "UninitializedRead",
           "Race", "DivisionByZero", "DeviceAssertionFailed", "Unsupported", "Deadlock", "BarrierOverflow",
           "Misaligned"]


def load_prim_func(path: str, name: str):
    """The prim_func `name` defined by the generated source file at `path` (TileLang parses it)."""
    import os

    from ...files import load_module
    mod = load_module(path, f"tle_interpreted_{os.path.basename(path)[:-3]}")
    func = getattr(mod, name, None)
    if func is None or type(func).__name__ != "PrimFunc":
        raise Unsupported(f"{path} defines no prim_func named {name}")
    return func
