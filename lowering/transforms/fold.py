"""Folds integer and boolean scalar arithmetic whose operands are all constants (after a backend has
compiled runtime integers in as constants), with Triton's semantics: // and % truncate toward zero; and the
integer identities x * 1, x + 0, x - 0, x // 1 (to x) and x % 1 (to 0), so that a runtime integer compiled in
as 1 (one column block, a unit stride) leaves no arithmetic behind in the generated code."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import KernelIR, Op
from ..ir.integers import CMP_OPS, INT_OPS, fits
from ..ir.ops import BinaryOp


def _const(v):
    op = v.defining_op if v is not None else None
    if op is not None and op.defn is ops.CONST:
        return op.attrs["value"]
    return None


def _fold(op: Op):
    if not op.results or not op.results[0].type.is_scalar:
        return None
    elem = op.operands[0].type.elem if op.operands and op.operands[0] is not None else None
    if elem is None or not getattr(elem, "is_int", False):
        return None
    vals = [_const(v) for v in op.operands]
    if any(v is None for v in vals):
        return None
    if op.defn is ops.BINARY and op.attrs["op"] in INT_OPS:
        r = INT_OPS[op.attrs["op"]](*vals)
        return None if r is None or not fits(r, op.results[0].type.elem) else r
    if op.defn is ops.CMP:
        return CMP_OPS[op.attrs["pred"]](*vals)
    if op.defn is ops.CAST and op.attrs["dtype"].is_int and not op.attrs.get("bitcast"):
        return int(vals[0]) if fits(int(vals[0]), op.attrs["dtype"]) else None
    return None


def _identity(op: Op):
    """The operand that a scalar integer op x * 1, 1 * x, x + 0, 0 + x, x - 0 or x // 1 returns unchanged, or
    None."""
    if op.defn is not ops.BINARY or not op.results or not op.results[0].type.is_scalar:
        return None
    a, b = op.operand("lhs"), op.operand("rhs")
    if a is None or b is None or not getattr(a.type.elem, "is_int", False) or a.type != op.results[0].type:
        return None
    kind, ca, cb = op.attrs["op"], _const(a), _const(b)
    if (kind is BinaryOp.MUL and cb == 1) or (kind in (BinaryOp.ADD, BinaryOp.SUB) and cb == 0) or \
            (kind is BinaryOp.DIV and cb == 1):
        return a
    if b.type == op.results[0].type and ((kind is BinaryOp.MUL and ca == 1) or (kind is BinaryOp.ADD and ca == 0)):
        return b
    return None


def _is_rem_by_one(op: Op) -> bool:
    return (op.defn is ops.BINARY and op.attrs["op"] is BinaryOp.REM and op.results[0].type.is_scalar
            and getattr(op.results[0].type.elem, "is_int", False) and _const(op.operand("rhs")) == 1)


def fold_constants(k: KernelIR) -> KernelIR:
    """In place: turns foldable scalar ops into constants (their uses then see the constant), and makes the
    uses of an identity's result use its operand (the op is left without uses)."""
    same: dict[int, object] = {}          # result id -> the value it equals
    for op in list(k.walk()):
        if same:
            op.operands = [same.get(v.id, v) if v is not None else None for v in op.operands]
        r = 0 if _is_rem_by_one(op) else _fold(op)
        if r is None:
            kept = _identity(op)
            if kept is not None:
                same[op.results[0].id] = kept
            continue
        name = op.results[0].name
        op.become(ops.CONST, [], {"value": bool(r) if op.results[0].type.elem.is_bool else int(r)})
        op.results[0].name = name
    return k
