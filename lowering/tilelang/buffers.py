"""tle.gpu buffers: `tle.gpu.alloc` is one `T.alloc_shared` that every version of the buffer lives in;
`local_load` reads it in place where nothing writes it again while the tile is in use, else copies it to a
fragment; `local_store` writes a tile into it. (The copies between a buffer and global memory are in
memory.py.)"""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Op
from ..ir.ops import Trait
from .context import Buffer, Context
from ..rules import RuleSet
from .sorting import BARRIER, check_placement
from .syntax import element, loop_indices, mentions, parallel_header
from .values import nested
from .versions import root

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table


@RULE_SET.rule(ops.ALLOC, role="statement")
def alloc(gen: Context, op: Op, indent: int):
    v = op.result
    # each warp group writes its own copy of the loop: the groups share its buffers, and a buffer handed from one
    # group to others inside the loop has a version per pipeline stage (warp_groups.py), in a leading axis
    versions, version = (1, None) if gen.warp_group is None else gen.warp_plan.versions_of(v, gen.warp_step)
    name = gen.warp_allocs.get(id(op))
    if name is None:
        name = gen.alloc(v.name or "buf", ((versions,) if versions > 1 else ()) + v.type.shape, v.type.elem, "shared")
        gen.report.append((op.loc.line, "tle.gpu.alloc", "buffer", f"T.alloc_shared {name}" +
                           (f", {versions} versions" if versions > 1 else "")))
        if gen.warp_group is not None:
            gen.warp_allocs[id(op)] = name
    gen.buffers[v.id] = Buffer(name, v.type.shape, v.type.elem, "shared", gen.kernel.body, version=version)


@RULE_SET.rule(ops.LOCAL_LOAD, role="statement")
def local_load(gen: Context, op: Op, indent: int):
    v = op.result
    buf = gen.buffers[op.operand("buf").id]
    if read_before_next_write(gen, op):
        gen.buffers[v.id] = buf
        how = f"reads {buf.name} in place"
    else:       # the buffer is written again while this tile is still in use: keep a copy
        name = gen.alloc(v.name or buf.name + "_tile", v.type.shape, v.type.elem, "fragment")
        gen.emit(f"T.copy({buf.region()}, {name})", indent)
        gen.buffers[v.id] = gen.fragment(name, v)
        how = f"T.copy {buf.name} into a fragment (the buffer is written again while the tile is in use)"
    gen.report.append((op.loc.line, "tle.gpu.local_load", "buffer", how))


def read_before_next_write(gen: Context, op: Op) -> bool:
    """Are all reads of `op`'s tile (through the element-wise ops written inline at their use) in
    its block, before the next op there that writes the same buffer?"""
    blk = op.parent
    alloc_value = root(op.operand("buf"))
    pos = blk.ops.index(op)
    limit = len(blk.ops)
    for i in range(pos + 1, len(blk.ops)):
        o = blk.ops[i]
        if any(w.has(Trait.BUFFER_WRITE) and root(w.results[0]) is alloc_value for w in [o, *nested(o)]) or \
                (o.defn in (ops.FOR, ops.IF) and any(r.type.is_buffer and root(r) is alloc_value for r in o.results)):
            limit = i
            break
    pending, seen = [op.result], set()
    while pending:
        v = pending.pop()
        for u in gen.users.get(v.id, []):
            if id(u) in seen:
                continue
            seen.add(id(u))
            top = u
            while top.parent is not blk:
                if top.parent is None or top.parent.parent_op is None:
                    return False
                top = top.parent.parent_op
            if blk.ops.index(top) >= limit:
                return False
            if u.has(Trait.ELEMENTWISE) and u.results and u.results[0].id not in gen.buffers:
                pending.append(u.results[0])
    return True


@RULE_SET.rule(ops.LOCAL_STORE, role="statement")
def local_store(gen: Context, op: Op, indent: int):
    bv, val = op.operand("buf"), op.operand("value")
    buf = gen.buffers[bv.id]
    gen.buffers[op.result.id] = buf
    src = gen.buffers.get(val.id)
    if src is buf:
        how = "nothing to do (the tile is the buffer's own contents)"
    elif src is not None and gen.visible(src) and src.perm is None and src.dtype == buf.dtype:
        gen.emit(f"T.copy({src.region()}, {buf.region()})", indent)
        how = f"T.copy from a {src.scope} buffer"
    else:
        idx = loop_indices(len(buf.shape))
        if mentions(gen.elem(val, idx), buf.name):
            # the new contents read the buffer itself: compute them aside first
            tmp = gen.alloc(buf.name + "_next", buf.shape, buf.dtype, "fragment")
            gen.fill(tmp, val, indent)
            gen.emit(f"T.copy({tmp}, {buf.region()})", indent)
            how = "T.Parallel into a fragment, then T.copy (the value reads the buffer)"
        else:
            gen.fill(buf, val, indent)
            how = "T.Parallel into the buffer"
    gen.report.append((op.loc.line, "tle.gpu.local_store", "buffer", how))


# -- tle.gpu.local_ptr: loads and stores at flat element offsets of the shared buffer ------------------------
# Any thread may name any element, so each access is separated from the buffer's other reads and writes by
# block barriers written out (as sorting.py does): before a load (earlier writes land), before a store
# (earlier reads are done) and after it (later reads see it). Not inside a pipelined loop, whose producer and
# consumer warps would not all reach them.
def _element_at(buf: Buffer, flat: str) -> list[str]:
    """The buffer's element at row-major offset `flat`, as an index in its own axes (the leading axis not
    wrapped: an offset past the buffer stays past it, as a pointer would)."""
    idx, stride = [], 1
    for axis, extent in reversed(list(enumerate(buf.shape))):
        whole = f"{flat} // {stride}" if stride > 1 else flat
        idx.append(whole if axis == 0 else f"{whole} % {extent}")
        stride *= extent
    return list(reversed(idx))


def _flat(gen: Context, offsets, idx: list[str], indent: int) -> str:
    """The offset of element `idx` of the pointers, computed once where it is an expression."""
    return gen.once(gen.elem(offsets, idx), "offset", indent)


@RULE_SET.rule(ops.LOCAL_GATHER, role="statement")
def local_gather(gen: Context, op: Op, indent: int):
    buf, offsets, mask, other = (op.operand(n) for n in ("buf", "offsets", "mask", "other"))
    v = op.result
    check_placement(gen, op, "a tl.load through tle.gpu.local_ptr")
    shared = gen.buffers[buf.id]
    out = gen.alloc(v.name or "local", v.type.shape, v.type.elem, "fragment")
    gen.emit(BARRIER, indent)
    idx = loop_indices(len(v.type.shape))
    gen.emit(parallel_header(idx, v.type.shape), indent)
    at = shared.at(_element_at(shared, _flat(gen, offsets, idx, indent + 1)))
    if mask is not None:
        fill = gen.elem(other, idx) if other is not None else "0"
        at = f"T.if_then_else({gen.elem(mask, idx)}, {at}, {fill})"
    gen.emit(f"{element(out, idx)} = {at}", indent + 1)
    gen.buffers[v.id] = Buffer(out, tuple(v.type.shape), v.type.elem, "fragment", gen.blocks[-1])
    gen.report.append((op.loc.line, "tl.load", "buffer", f"reads {shared.name} at the pointers' offsets"))


@RULE_SET.rule(ops.LOCAL_SCATTER, role="statement")
def local_scatter(gen: Context, op: Op, indent: int):
    buf, offsets, value, mask = (op.operand(n) for n in ("buf", "offsets", "value", "mask"))
    check_placement(gen, op, "a tl.store through tle.gpu.local_ptr")
    shared = gen.buffers[buf.id]
    gen.buffers[op.result.id] = shared
    shape = offsets.type.shape if offsets is not None else shared.shape
    gen.emit(BARRIER, indent)
    idx = loop_indices(len(shape))
    gen.emit(parallel_header(idx, shape), indent)
    body = indent + 1
    if mask is not None:
        gen.emit(f"if {gen.elem(mask, idx)}:", body)
        body += 1
    at = shared.at(_element_at(shared, _flat(gen, offsets, idx, body)) if offsets is not None else idx)
    gen.emit(f"{at} = {gen.elem(value, idx)}", body)
    gen.emit(BARRIER, indent)
    gen.report.append((op.loc.line, "tl.store", "buffer", f"writes {shared.name} at the pointers' offsets"))
