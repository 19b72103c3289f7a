"""Affine forms of integer (and pointer-offset) values over a tile's axes and scalar symbols.

An offset tile such as `pid * 128 + offs_m[:, None] * 64 + offs_k[None, :]` becomes
    const + sum(coef * symbol) + sum(coef * index_of_axis_a) + sum(coef * loaded_index_tile)
Coefficients are ints. Scalar values that are not affine in others (program ids, loop variables,
products of two runtime scalars, quotients, loaded scalars, parameters) are symbols themselves.
Values that are neither (a tile quotient, say) have no affine form: None.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import ops
from ..ir.core import KernelIR, Value
from ..ir.ops import BinaryOp, UnaryOp


@dataclass(frozen=True)
class Affine:
    const: int = 0
    syms: tuple = ()          # ((value_id, coef), ...) sorted
    axes: tuple = ()          # ((axis, coef), ...) sorted; axis of the value's own tile shape
    data: tuple = ()          # ((value_id, axes_tuple, coef), ...): a loaded int tile placed on axes

    @staticmethod
    def _merge(a: tuple, b: tuple, sign: int) -> tuple:
        d = dict(a)
        for k, c in b:
            d[k] = d.get(k, 0) + sign * c
        return tuple(sorted((k, c) for k, c in d.items() if c != 0))

    def __add__(self, o: "Affine") -> "Affine":
        return Affine(self.const + o.const, self._merge(self.syms, o.syms, 1), self._merge(self.axes, o.axes, 1),
                      _merge_data(self.data, o.data, 1))

    def __sub__(self, o: "Affine") -> "Affine":
        return Affine(self.const - o.const, self._merge(self.syms, o.syms, -1), self._merge(self.axes, o.axes, -1),
                      _merge_data(self.data, o.data, -1))

    def scale(self, k: int) -> "Affine":
        if k == 0:
            return Affine()
        return Affine(self.const * k, tuple((s, c * k) for s, c in self.syms),
                      tuple((a, c * k) for a, c in self.axes), tuple((v, ax, c * k) for v, ax, c in self.data))

    @property
    def is_const(self) -> bool:
        return not self.syms and not self.axes and not self.data

    @property
    def is_scalar_form(self) -> bool:
        return not self.axes and not self.data

    def axis_coef(self, axis: int) -> int:
        return dict(self.axes).get(axis, 0)

    def at_origin(self) -> "Affine":
        """The same form with every axis index at 0 (the tile's base)."""
        return Affine(self.const, self.syms, (), self.data)

    def map_axes(self, f) -> "Affine":
        """Renumber axes (f: old axis -> new axis)."""
        return Affine(self.const, self.syms, tuple(sorted((f(a), c) for a, c in self.axes)),
                      tuple((v, tuple(f(x) for x in ax), c) for v, ax, c in self.data))


def _merge_data(a, b, sign):
    d = {}
    for v, ax, c in a:
        d[(v, ax)] = d.get((v, ax), 0) + c
    for v, ax, c in b:
        d[(v, ax)] = d.get((v, ax), 0) + sign * c
    return tuple(sorted((v, ax, c) for (v, ax), c in d.items() if c != 0))


def _const(k) -> Affine:
    return Affine(int(k))


class AffineAnalysis:
    """Computes affine forms on demand, memoized. `known` maps value ids of scalars to ints."""

    def __init__(self, kernel: KernelIR, known: dict[int, int] | None = None):
        self.kernel = kernel
        self.known = known or {}
        self.memo: dict[int, Affine | None] = {}
        self.values: dict[int, Value] = {}        # the values memo holds forms of, by id
        self.symbols: dict[int, Value] = {}

    def of(self, v: Value) -> Affine | None:
        if v.id in self.memo:
            return self.memo[v.id]
        r = self._compute(v)
        self.memo[v.id] = r
        self.values[v.id] = v
        return r

    def _sym(self, v: Value) -> Affine | None:
        if not v.type.is_scalar:
            return None
        if v.id in self.known:
            return _const(self.known[v.id])
        self.symbols[v.id] = v
        return Affine(0, ((v.id, 1),))

    def _compute(self, v: Value) -> Affine | None:
        op = v.defining_op
        if op is None:                      # parameter or block argument
            if v.type.is_pointer:
                return Affine()             # a pointer parameter is its own base: offset 0
            return self._sym(v) if v.type.elem.is_int else None
        defn = op.defn
        if not v.type.is_pointer and not v.type.elem.is_int:
            return None
        a = op.attrs
        if defn is ops.CONST:
            return _const(a["value"])
        if defn is ops.ARANGE:
            return Affine(a["start"], (), ((0, 1),))
        if defn in (ops.PROGRAM_ID, ops.NUM_PROGRAMS):
            return self._sym(v)
        if defn in (ops.SPLAT, ops.HINT):
            return self.of(op.operand("x"))
        if defn is ops.BROADCAST:
            return self.of(op.operand("x"))
        if defn is ops.EXPAND_DIMS:
            x = self.of(op.operand("x"))
            ax = a["axis"]
            return None if x is None else x.map_axes(lambda i: i + 1 if i >= ax else i)
        if defn is ops.TRANS:
            x = self.of(op.operand("x"))
            perm = a["perm"]
            inv = {old: new for new, old in enumerate(perm)}
            return None if x is None else x.map_axes(lambda i: inv[i])
        if defn is ops.CAST:
            return self.of(op.operand("x")) if op.operand("x").type.elem.is_int else None
        if defn is ops.ADDPTR:
            p, o = self.of(op.operand("ptr")), self.of(op.operand("offset"))
            return None if p is None or o is None else p + o
        if defn is ops.BINARY:
            x, y = self.of(op.operand("lhs")), self.of(op.operand("rhs"))
            kind = a["op"]
            if x is not None and y is not None:
                if kind is BinaryOp.ADD:
                    return x + y
                if kind is BinaryOp.SUB:
                    return x - y
                if kind is BinaryOp.MUL:
                    if x.is_const:
                        return y.scale(x.const)
                    if y.is_const:
                        return x.scale(y.const)
                if x.is_const and y.is_const and kind in (BinaryOp.DIV, BinaryOp.REM) and y.const != 0:
                    q = abs(x.const) // abs(y.const) * (1 if (x.const >= 0) == (y.const > 0) else -1)
                    return _const(q if kind is BinaryOp.DIV else x.const - q * y.const)
            return self._sym(v)             # opaque scalar, or None for a tile
        if defn is ops.UNARY and a["op"] is UnaryOp.NEG:
            x = self.of(op.operand("x"))
            return None if x is None else x.scale(-1)
        if defn is ops.LOAD:
            if v.type.is_scalar:
                return self._sym(v)
            return Affine(0, (), (), ((v.id, tuple(range(v.type.rank)), 1),))
        return self._sym(v)
