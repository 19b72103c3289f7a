"""Out-of-range tile accesses of a raw function, found at lowering time where they certainly happen.

The integer values of a raw function are followed as ranges over the threads and programs of one call: the
thread index runs over 0 .. threads-1, block ids over the grid, constants and tile extents are themselves. A
range is "exact" when its lowest and highest values are each taken by some thread (a sum of multiples of
independent registers, say), and "dense" when every value between is taken too (a register plus a constant);
an `if` on `x < c` (or <=, >, >=) with a constant c narrows x inside its branches, keeping a dense range
exact. A tile access whose index range is exact and reaches past the tile's extent (or
below 0) happens on the GPU for some thread, whatever the data: a LoweringError at the access's line names the
function, the op, the tile, the index range and the extent. Ranges that depend on data, loop counters or
anything else this does not follow are not judged (the interpreter of TileLang programs still reports an access
out of range when it runs one)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import LoweringError
from .body import SPECIAL, RawBody, Stmt


@dataclass(frozen=True)
class Span:
    lo: int
    hi: int
    exact: bool         # lo and hi are each taken by some thread
    varying: frozenset = frozenset()    # the registers it varies with
    dense: bool = True  # every value in lo..hi is taken by some thread

    @property
    def constant(self) -> bool:
        return self.lo == self.hi and not self.varying


_NARROW = {"slt": (None, -1), "sle": (None, 0), "sgt": (1, None), "sge": (0, None)}
_FLIP = {"slt": "sgt", "sle": "sge", "sgt": "slt", "sge": "sle"}
_ACCESSES = {"tensor.extract": 0, "tensor.insert": 1, "memref.atomic_rmw": 1}   # where the indices start


def check_bounds(body: RawBody, shapes, threads: int, grid=None) -> None:
    """Raise LoweringError for a tile access of `body` that certainly falls outside its tile, run by `threads`
    threads in each program of `grid` (None: not known; `shapes[k]`: the shape of tile argument k)."""
    _Ranges(body, shapes, threads, None if grid is None else tuple(grid)).stmts(body.stmts, {}, True)


class _Ranges:
    def __init__(self, body: RawBody, shapes, threads: int, grid):
        self.body, self.shapes, self.threads, self.grid = body, shapes, threads, grid

    def register(self, kind: str, axis: int) -> Span | None:
        """The range of an nvvm register (None for block registers where the grid is not known)."""
        if kind == "thread_id":
            return Span(0, self.threads - 1, True, frozenset({("tid", axis)})) if axis == 0 else Span(0, 0, True)
        if kind == "block_dim":
            return Span(self.threads, self.threads, True) if axis == 0 else Span(1, 1, True)
        if self.grid is None:
            return None
        extent = self.grid[axis] if axis < len(self.grid) else 1
        if kind == "block_id":
            return Span(0, extent - 1, True, frozenset({("ctaid", axis)})) if extent > 1 else Span(0, 0, True)
        return Span(extent, extent, True)

    def stmts(self, stmts, env: dict, certain: bool):
        """`certain`: these statements run (for the threads the ranges describe), not maybe."""
        for s in stmts:
            self.stmt(s, env, certain)

    def stmt(self, s: Stmt, env: dict, certain: bool):
        a = [env.get(o) for o in s.operands]
        if s.op == "arith.constant" and isinstance(s.attrs.get("value"), int) and not isinstance(s.attrs["value"],
                                                                                                   bool):
            env[s.name] = Span(s.attrs["value"], s.attrs["value"], True)
        elif s.op in SPECIAL:
            env[s.name] = self.register(*SPECIAL[s.op])
        elif s.op == "memref.dim":
            d = int(self.shapes[s.attrs["arg"]][s.attrs["axis"]])
            env[s.name] = Span(d, d, True)
        elif s.op in ("arith.index_cast", "arith.extsi", "arith.trunci") and a[0] is not None:
            env[s.name] = a[0]
        elif s.op in ("arith.addi", "arith.subi", "arith.muli", "arith.divsi") and None not in a:
            env[s.name] = _arith(s.op, *a)
        if s.op in _ACCESSES and certain:
            self.access(s, a[_ACCESSES[s.op]:])
        if s.op == "scf.if":
            then_env, else_env = dict(env), dict(env)
            narrowed = self.narrow(s.operands[0], then_env, else_env)
            self.stmts(s.regions[0].stmts, then_env, certain and narrowed)
            if len(s.regions) > 1:
                self.stmts(s.regions[1].stmts, else_env, certain and narrowed)
        elif s.op in ("scf.for", "scf.while"):
            for r in s.regions:          # may run no step; counters and carried values are not followed
                self.stmts(r.stmts, {k: v for k, v in env.items() if k not in r.args}, False)

    def narrow(self, cond: str, then_env: dict, else_env: dict) -> bool:
        """x < c and the like, with a constant c and x a dense range, narrow x in each branch: then each branch
        runs for the threads its range says (True); False where the condition is not one of these."""
        s = self._defining(cond)
        if s is None or s.op != "arith.cmpi" or s.attrs.get("predicate") not in _NARROW:
            return False
        pred = s.attrs["predicate"]
        x, c = (then_env.get(o) for o in s.operands)
        name = s.operands[0]
        if c is None or not c.constant:
            x, c, name, pred = c, x, s.operands[1], _FLIP[pred]
            if c is None or not c.constant:
                return False
        if x is None or not (x.exact and x.dense):
            return False
        opposite = {"slt": "sge", "sle": "sgt", "sgt": "sle", "sge": "slt"}[pred]
        for env, p in ((then_env, pred), (else_env, opposite)):
            below, above = _NARROW[p]
            lo, hi = x.lo, x.hi
            if below is None:
                hi = min(hi, c.lo + above)
            else:
                lo = max(lo, c.lo + below)
            env[name] = Span(lo, hi, True, x.varying, True)
        return True

    def _defining(self, name: str) -> Stmt | None:
        for s in self.body.walk():
            if s.name == name:
                return s
        return None

    def access(self, s: Stmt, indices):
        k = s.attrs["arg"]
        shape = self.shapes[k]
        for axis, (span, extent) in enumerate(zip(indices, shape)):
            if span is None or span.lo > span.hi:
                continue
            certain = span.lo >= extent or span.hi < 0 or (span.exact and (span.hi >= extent or span.lo < 0))
            if certain:
                arg = self.body.args[k].name
                op = s.attrs.get("spelled", s.op)
                where = f" along axis {axis}" if len(shape) > 1 else ""
                raise LoweringError(f"raw function '{self.body.name}': {op} of tile '{arg}'{where} at indices "
                                    f"{span.lo}..{span.hi} (taken by the threads that run it), outside its "
                                    f"{extent} elements", s.loc or self.body.loc, construct=op)


def _arith(op: str, a: Span, b: Span) -> Span | None:
    """The range of a op b; exact where the result still takes every value at its ends (one operand constant,
    or operands varying with different registers)."""
    independent = not (a.varying & b.varying)
    exact = a.exact and b.exact and independent
    dense = exact and a.dense and b.dense
    varying = a.varying | b.varying
    if op == "arith.addi":
        return Span(a.lo + b.lo, a.hi + b.hi, exact, varying, dense)
    if op == "arith.subi":
        return Span(a.lo - b.hi, a.hi - b.lo, exact, varying, dense)
    if op == "arith.muli":
        if b.constant or a.constant:
            x, c = (a, b.lo) if b.constant else (b, a.lo)
            lo, hi = sorted((x.lo * c, x.hi * c))
            return Span(lo, hi, x.exact, x.varying, x.dense and abs(c) <= 1)
        return None
    if b.constant and b.lo > 0 and a.lo >= 0:       # divsi by a positive constant, of a non-negative value
        return Span(a.lo // b.lo, a.hi // b.lo, a.exact, a.varying, a.dense)
    return None
