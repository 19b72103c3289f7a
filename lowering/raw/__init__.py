"""TLE-Raw: functions written in MLIR (arith, math, scf, tensor, nvvm) that a kernel calls on tiles.

`body.read_body` reads a verified function into a backend-neutral form; `tilelang.render_tilelang` runs
it thread by thread; `triton.elementwise` / `triton.render_triton` lower it to whole-tile Triton code
when it is element-wise. The semantics of a call are in tle/raw/__init__.py.
"""
from .body import RawBody, Region, Stmt, TileArg, check_constraints, read_body
from .tilelang import render_tilelang
from .triton import Elementwise, elementwise, render_triton, require_elementwise

__all__ = ["RawBody", "Region", "Stmt", "TileArg", "check_constraints", "read_body", "render_tilelang",
           "Elementwise", "elementwise", "render_triton", "require_elementwise"]
