"""The IR's scalar integer semantics (Triton's): // and % truncate toward zero, shifts past the width are
undefined; what every pass that evaluates an integer expression at compile time computes (transforms/fold.py,
tilelang/staging.py)."""
from __future__ import annotations

from .ops import BinaryOp, CmpPred


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


# each integer operator and comparison on Python ints (None where the result is undefined)
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


def fits(value: int, elem) -> bool:
    """Whether `value` is representable in the integer (or bool) dtype `elem`."""
    if elem.is_bool:
        return True
    lo, hi = (-(2 ** (elem.bits - 1)), 2 ** (elem.bits - 1) - 1) if elem.is_signed else (0, 2 ** elem.bits - 1)
    return lo <= value <= hi
