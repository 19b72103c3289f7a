"""Folds integer and boolean scalar arithmetic whose operands are all constants (after a backend has
compiled runtime integers in as constants), with Triton's semantics: // and % truncate toward zero; and the
integer identities x * 1, x + 0, x - 0, x // 1 (to x) and x % 1 (to 0), so that a runtime integer compiled in
as 1 (one column block, a unit stride) leaves no arithmetic behind in the generated code."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import KernelIR, Op
from ..ir.ops import BinaryOp, CmpPred


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


# Triton's scalar integer semantics, shared with the passes that evaluate integer expressions
INT_OPS = {
    BinaryOp.ADD: lambda a, b: a + b, BinaryOp.SUB: lambda a, b: a - b, BinaryOp.MUL: lambda a, b: a * b,
    BinaryOp.DIV: lambda a, b: _trunc_div(a, b) if b else None,
    BinaryOp.REM: lambda a, b: a - _trunc_div(a, b) * b if b else None,
    BinaryOp.MAXIMUM: max, BinaryOp.MINIMUM: min, BinaryOp.AND: lambda a, b: a & b,
    BinaryOp.OR: lambda a, b: a | b, BinaryOp.XOR: lambda a, b: a ^ b,
    BinaryOp.SHL: lambda a, b: a << b if 0 <= b < 64 else None,
    BinaryOp.SHR: lambda a, b: a >> b if 0 <= b < 64 else None,
}
CMP_OPS = {CmpPred.LT: lambda a, b: a < b, CmpPred.LE: lambda a, b: a <= b, CmpPred.GT: lambda a, b: a > b,
           CmpPred.GE: lambda a, b: a >= b, CmpPred.EQ: lambda a, b: a == b, CmpPred.NE: lambda a, b: a != b}


def _const(v):
    op = v.defining_op if v is not None else None
    if op is not None and op.defn is ops.CONST:
        return op.attrs["value"]
    return None


def fits(value: int, elem) -> bool:
    if elem.is_bool:
        return True
    lo, hi = (-(2 ** (elem.bits - 1)), 2 ** (elem.bits - 1) - 1) if elem.is_signed else (0, 2 ** elem.bits - 1)
    return lo <= value <= hi


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
