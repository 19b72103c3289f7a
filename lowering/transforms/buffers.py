"""tle.gpu buffers carried by loops whose previous contents are never read.

The frontend carries every buffer a loop body writes (a buffer is a value, each write its next
version). When each iteration overwrites the buffer before any read and nothing after the loop reads
it, the carried version is dead: the body can start from the allocation itself. Dropping it keeps a
register tile out of Triton's loop state, and the IR says what the program means.
"""
from __future__ import annotations

from ..ir import ops
from ..ir.core import KernelIR, Op, Value
from ..ir.ops import Trait


def _overwrites(op: Op, v: Value) -> bool:
    """Whether `op` uses `v` only as the buffer it writes (operand "buf" of a buffer write), which replaces the
    buffer's whole contents (a store through tle.gpu.local_ptr writes some elements and keeps the rest)."""
    if not op.has(Trait.BUFFER_WRITE) or op.defn is ops.LOCAL_SCATTER:
        return False
    buf = op.defn.operand_slots(len(op.operands))["buf"]
    return all(o is not v or i == buf for i, o in enumerate(op.operands))


def _only_overwritten(v: Value, body) -> bool:
    for op in body.walk():
        if any(o is v for o in op.operands) and not _overwrites(op, v):
            return False
    return True


def _used(k: KernelIR, v: Value) -> bool:
    return any(v in op.operands for op in k.walk())


def _drop_in(k: KernelIR, loop: Op) -> bool:
    body = loop.body
    lo, hi, step = loop.operand("lower"), loop.operand("upper"), loop.operand("step")
    inits = loop.operand_group("inits")
    iv, *carried = body.args
    y = body.terminator
    keep = []
    for j, (c, init, res) in enumerate(zip(carried, inits, loop.results)):
        if c.type.is_buffer and not _used(k, res) and _only_overwritten(c, body):
            for op in body.walk():
                op.operands = [init if o is c else o for o in op.operands]
        else:
            keep.append(j)
    if len(keep) == len(carried):
        return False
    body.args = [iv] + [carried[j] for j in keep]
    loop.operands = [lo, hi, step] + [inits[j] for j in keep]
    y.operands = [y.operands[j] for j in keep]
    loop.results = [loop.results[j] for j in keep]
    return True


def drop_overwritten_buffer_carries(k: KernelIR) -> KernelIR:
    """In place; returns the kernel for chaining."""
    changed = True
    while changed:
        changed = False
        for loop in reversed([op for op in k.walk() if op.defn is ops.FOR]):   # inner loops first
            changed |= _drop_in(k, loop)
    return k
