"""TLE-Raw: functions written in MLIR (arith, math, scf, tensor, nvvm) that a kernel calls on tiles.

`body.read_body` reads a verified function into a backend-neutral form; `meanings.py` says what each of its
scalar ops means (a form and an operation), once. Each backend renders it in its own folder, spelling those
meanings: `tilelang/raw_render.py` runs it thread by thread; `triton/raw_render.py` lowers it to whole-tile
Triton code when it is element-wise. The semantics of a call are in tle/raw/__init__.py.
"""
from .body import RawBody, Region, Stmt, TileArg, check_constraints, read_body

__all__ = ["RawBody", "Region", "Stmt", "TileArg", "check_constraints", "read_body"]
