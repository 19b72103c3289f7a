"""Where a warp group waits for a tensor-core product: at the first use of its result, not at its issue.

Hopper's wgmma runs asynchronously: a warp group issues it, goes on, and waits for it (wgmma.wait_group n: until
at most n of its later products are in flight). T.gemm waits at once; T.wgmma_gemm leaves the wait to the code.
A product in a loop body that holds several warp groups is issued without a wait (a deferred product) when

- both its operands are tiles loaded from shared memory (a register operand could be reused by the compiler
  while the tensor cores still read it),
- it is not in a chain of products accumulating onto each other (reductions.py issues those), and
- tile work of its group (a reduction, another product, an `if` holding one: not an element-wise op, which may
  be written at its use) stands between it and the first op that reads its result, or that writes a buffer it
  reads, or the end of the body: that work overlaps the product.

Before that op the group waits with a count of the products issued after it (T.wait_wgmma), then fences the
result's registers so that the compiler reads them after the wait. A release of a buffer the product reads
follows the wait (warp_groups.py). A later product that is issued with a wait of its own (T.gemm) completes it
earlier; the count stays right, as wgmma.wait_group waits in issue order.

On Triton the products are the program's: its compiler pipelines them itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import ops
from ..ir.core import Block, Op
from ..ir.ops import Trait
from .values import nested
from .versions import root


@dataclass
class Wait:
    """The wait before the op at a position of a block, for one group."""
    products: list[Op] = field(default_factory=list)    # the deferred products whose results are read from here
    newer: int = 0                                        # products issued after the latest of them, left running


def shared_tile(v) -> Op | None:
    """The local_load `v` reads (through a transpose), if it is a tile loaded from a tle.gpu buffer."""
    d = v.defining_op
    if d is not None and d.defn is ops.TRANS:
        d = d.operand("x").defining_op
    return d if d is not None and d.defn is ops.LOCAL_LOAD else None


def deferred_products(blk: Block, group_of, runs, in_chain) -> dict[int, int]:
    """id(product) -> the position in `blk` of the op before which its group waits for it."""
    out = {}
    for pos, op in enumerate(blk.ops):
        g = group_of(op)
        if op.defn is not ops.DOT or g is None or in_chain(op):
            continue
        loads = [shared_tile(op.operand("a")), shared_tile(op.operand("b"))]
        if None in loads or op.operand("a").type.elem.is_fp8:
            continue
        read = {root(ld.operand("buf")).id for ld in loads}
        wait = _first_touch(blk, pos, op, read, lambda o: runs(o, g))
        if any(_tile_work(o) for o in blk.ops[pos + 1:wait] if runs(o, g)):
            out[id(op)] = wait
    return out


def _first_touch(blk: Block, pos: int, product: Op, read: set[int], mine) -> int:
    """The first position after `pos` whose op (or an op in it) reads the product's result or writes a buffer
    it reads; the terminator's at the latest."""
    for p in range(pos + 1, len(blk.ops)):
        top = blk.ops[p]
        if not mine(top) and top is not blk.terminator:
            continue
        for o in (top, *nested(top)):
            if any(v is product.result for v in o.operands if v is not None):
                return p
            if o.has(Trait.BUFFER_WRITE) and root(o.results[0]).id in read:
                return p
    return len(blk.ops) - 1


def _tile_work(op: Op) -> bool:
    """Whether `op` computes a tile where it stands (an element-wise op may be written inline at its use)."""
    return (not op.has(Trait.ELEMENTWISE) and any(r.type.rank >= 1 for r in op.results if not r.type.is_buffer)) \
        or any(_tile_work(o) for o in nested(op))


def waits_in(blk: Block, group: int, deferred: dict[int, int], runs) -> dict[int, Wait]:
    """position -> the wait `group` makes before the op there."""
    waits: dict[int, Wait] = {}
    issued = [p for p, top in enumerate(blk.ops) if runs(top, group)
              for o in (top, *nested(top)) if o.defn is ops.DOT]       # a position per product issued
    latest: dict[int, int] = {}                                        # wait position -> its latest product's
    for p, op in enumerate(blk.ops):
        if id(op) in deferred and runs(op, group):
            at = deferred[id(op)]
            waits.setdefault(at, Wait()).products.append(op)
            latest[at] = p
    for at, w in waits.items():
        w.newer = sum(1 for p in issued if latest[at] < p < at)
    return waits
