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
from .syntax import loop_indices, mentions
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
