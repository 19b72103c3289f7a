"""`acc + tl.dot(a, b)` as `tl.dot(a, b, acc)`.

Triton's compiler makes this rewrite itself (an add of a dot with a zero accumulator becomes the dot into the
other operand), so a kernel written `acc += tl.dot(a, b)` accumulates in place there. A backend that writes the
IR as it stands (TileLang: `T.gemm` into a second fragment, then an element-wise add per step, twice the
accumulator registers) runs this pass first, to compute what Triton computes the way Triton computes it."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Block, KernelIR, Op, Value
from ..ir.ops import BinaryOp, Trait
from ..ir.uses import users


def _is_zero(v: Value) -> bool:
    op = v.defining_op
    while op is not None and op.has(Trait.STRETCH):
        op = op.operand("x").defining_op
    return op is not None and op.defn is ops.CONST and op.attrs["value"] == 0


def _foldable(add: Op, uses) -> tuple[Op, Value] | None:
    """(the dot, the value to accumulate into) where `add` adds a dot only it reads to a tile of its type."""
    if add.defn is not ops.BINARY or add.attrs["op"] is not BinaryOp.ADD:
        return None
    lhs, rhs = add.operand("lhs"), add.operand("rhs")
    for product, acc in ((lhs, rhs), (rhs, lhs)):
        dot = product.defining_op
        if dot is None or dot.defn is not ops.DOT or dot.parent is not add.parent or not _is_zero(dot.operand("acc")):
            continue
        if uses.get(dot.result.id) == [add] and acc.type == dot.result.type == add.result.type:
            return dot, acc
    return None


def fold_dot_accumulators(k: KernelIR) -> KernelIR:
    """In place: each such add becomes the dot (at the add's place, taking its result's name); the uses of
    the add's result use the dot's."""
    uses = users(k)
    renamed: dict[int, Value] = {}
    for add in list(k.walk()):
        found = _foldable(add, uses)
        if found is None:
            continue
        dot, acc = found
        block: Block = add.parent
        block.ops.remove(dot)
        block.ops[block.ops.index(add)] = dot
        dot.set_operand("acc", acc)
        dot.result.name = add.result.name or dot.result.name
        renamed[add.result.id] = dot.result
    if renamed:
        for op in k.walk():
            op.operands = [renamed.get(v.id, v) if v is not None else None for v in op.operands]
    return k
