"""`tle.load(..., is_async=True)`: the tile should arrive ahead of its use, overlapped with the work of
the loop around it. Both backends get that from a pipelined loop, so this pass makes the innermost loop
around each asynchronous load pipelined: at least ASYNC_STAGES stages, raising a loop that asked for
fewer (`tl.range(n, num_stages=0)`). TileLang then copies the tile in stage 0 of T.Pipelined (the layer
writes that copy); Triton's software pipeliner chooses by itself which of the loop's loads it issues
ahead as cp.async (it skips, for instance, a gather whose tile feeds two dots in different layouts),
and the lowering says so rather than promising it.

Each load gets attrs["async"]: PIPELINED (with the loop's stage count in attrs["async_stages"]), or
plain(why), the reason it stays a plain load: no enclosing loop, or a branch between it and the loop
(neither pipeliner reaches into branches).
"""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Block, KernelIR, Op
from ..ir.ops import PIPELINED, Trait, plain

ASYNC_STAGES = 2


def _enclosing(op: Op) -> tuple[Op | None, bool]:
    """(innermost enclosing loop, whether an if lies between it and op)."""
    branch = False
    blk: Block | None = op.parent
    while blk is not None and blk.parent_op is not None:
        parent = blk.parent_op
        if parent.has(Trait.LOOP):
            return parent, branch
        if parent.has(Trait.BRANCH):
            branch = True
        blk = parent.parent
    return None, branch


def pipeline_async_loads(k: KernelIR, default_stages: int) -> list[str]:
    """Mark every is_async load with how it will be issued; raise loop stages where needed. Returns
    notes for the reader, one per load."""
    notes = []
    for op in k.walk():
        if op.defn is not ops.LOAD or not op.attrs.get("is_async"):
            continue
        line = op.loc.line
        loop, branch = _enclosing(op)
        if loop is None:
            op.attrs["async"] = plain("not inside a loop, nothing to overlap it with")
        elif loop.defn is ops.WHILE:
            op.attrs["async"] = plain("inside a while loop, which no pipeliner reaches")
        elif branch:
            op.attrs["async"] = plain("inside a branch of its loop, which no pipeliner reaches")
        else:
            asked = loop.attrs.get("num_stages")
            stages = default_stages if asked is None else asked
            if stages < ASYNC_STAGES:
                loop.attrs["num_stages"] = ASYNC_STAGES
                loop.attrs["async_raised_from"] = stages
                notes.append(f"line {loop.loc.line}: loop pipelined with {ASYNC_STAGES} stages (it asked for "
                             f"num_stages={stages}) for tle.load(is_async=True) at line {line}")
                stages = ASYNC_STAGES
            op.attrs["async"] = PIPELINED
            op.attrs["async_stages"] = stages
            loop.attrs["async_stages"] = max(stages, loop.attrs.get("async_stages", 0))
            continue
        notes.append(f"line {line}: tle.load(is_async=True) issued as a plain load ({op.attrs['async'].why})")
    return notes
