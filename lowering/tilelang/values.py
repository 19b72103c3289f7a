"""Facts about tile-IR values that several TileLang rules decide on: which are constants, which are zero
tiles, which ops sit inside another. Read from the IR alone, never from generated text."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Op, Value
from ..ir.ops import Trait


def const_value(v: Value):
    """The value of an integer constant, else None."""
    op = v.defining_op
    if op is None or op.defn is not ops.CONST or not v.type.elem.is_int:
        return None
    return int(op.attrs["value"])


def is_const(v: Value, value) -> bool:
    return v.defining_op is not None and v.defining_op.defn is ops.CONST and v.defining_op.attrs["value"] == value


def is_zero(v: Value) -> bool:
    """A zero constant, splat or broadcast to a tile."""
    op = v.defining_op
    while op is not None and op.has(Trait.STRETCH):
        op = op.operand("x").defining_op
    return op is not None and op.defn is ops.CONST and op.attrs["value"] == 0


def nested(op: Op) -> list[Op]:
    """The ops inside `op`'s regions."""
    return [o for r in op.regions for o in r.walk()]
