"""Folds integer and boolean scalar arithmetic whose operands are all constants (after a backend has
compiled runtime integers in as constants), with Triton's semantics: // and % truncate toward zero."""
from __future__ import annotations

from ..ir.core import KernelIR, Op


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


_INT = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: _trunc_div(a, b) if b else None,
    "rem": lambda a, b: a - _trunc_div(a, b) * b if b else None,
    "maximum": max, "minimum": min, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b, "shl": lambda a, b: a << b if 0 <= b < 64 else None,
    "shr": lambda a, b: a >> b if 0 <= b < 64 else None,
}
_CMP = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def _const(v):
    op = v.defining_op if v is not None else None
    if op is not None and op.name == "const":
        return op.attrs["value"]
    return None


def _fits(value: int, elem) -> bool:
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
    if op.name == "binary" and op.attrs["op"] in _INT:
        r = _INT[op.attrs["op"]](*vals)
        return None if r is None or not _fits(r, op.results[0].type.elem) else r
    if op.name == "cmp":
        return _CMP[op.attrs["pred"]](*vals)
    if op.name == "cast" and op.attrs["dtype"].is_int and not op.attrs.get("bitcast"):
        return int(vals[0]) if _fits(int(vals[0]), op.attrs["dtype"]) else None
    return None


def fold_constants(k: KernelIR) -> KernelIR:
    """In place: turns foldable scalar ops into constants (their uses then see the constant)."""
    for op in list(k.walk()):
        r = _fold(op)
        if r is not None:
            name = op.results[0].name
            op.name, op.operands, op.attrs = "const", [], {"value": bool(r) if op.results[0].type.elem.is_bool else int(r)}
            op.results[0].name = name
    return k
