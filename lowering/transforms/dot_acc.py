"""`acc + tl.dot(a, b)` as `tl.dot(a, b, acc)`.

Triton's compiler makes this rewrite itself (an add of a dot with a zero accumulator becomes the dot into the
other operand), so a kernel written `acc += tl.dot(a, b)` accumulates in place there. A backend that writes the
IR as it stands (TileLang: `T.gemm` into a second fragment, then an element-wise add per step, twice the
accumulator registers) runs this pass first, to compute what Triton computes the way Triton computes it."""
from __future__ import annotations

from ..ir.core import Block, KernelIR, Op, Value
from ..ir.uses import users


def _is_zero(v: Value) -> bool:
    op = v.defining_op
    while op is not None and op.name in ("splat", "broadcast"):
        op = op.operands[0].defining_op
    return op is not None and op.name == "const" and op.attrs["value"] == 0


def _foldable(add: Op, uses) -> tuple[Op, Value] | None:
    """(the dot, the value to accumulate into) where `add` adds a dot only it reads to a tile of its type."""
    if add.name != "binary" or add.attrs["op"] != "add":
        return None
    for i in (0, 1):
        dot, acc = add.operands[i].defining_op, add.operands[1 - i]
        if dot is None or dot.name != "dot" or dot.parent is not add.parent or not _is_zero(dot.operands[2]):
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
        dot.operands[2] = acc
        dot.result.name = add.result.name or dot.result.name
        renamed[add.result.id] = dot.result
    if renamed:
        for op in k.walk():
            op.operands = [renamed.get(v.id, v) if v is not None else None for v in op.operands]
    return k
