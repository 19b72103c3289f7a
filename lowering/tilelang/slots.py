"""Slots: where a loop-carried or branch-merged value lives (a fragment for a tile, a `T.alloc_var` for a
scalar, the allocation itself for a tle.gpu buffer), and the writes of what a loop body or a branch
yields into them. A slot is a tuple (kind, storage, value) with kind "buf", "var" or "buffer"."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Op, Value
from .context import Context
from .syntax import copied_value, loop_indices, mentions, parallel_header, tl_dtype
from .values import is_zero
from .versions import same_buffer


def carry_slot(gen: Context, c: Value, init: Value, r: Value, loop: Op, indent: int):
    """Storage for a loop-carried (or branch-merged) value: a fragment for tiles, a var for scalars."""
    if c.type.is_pointer:
        gen.error("a pointer carried through a loop that is not advanced by a loop-invariant step", loop)
    if c.type.is_buffer:       # every version of a tle.gpu buffer is its one shared allocation
        out = loop.body.terminator.operands[loop.body.args.index(c) - 1]
        buf = same_buffer(gen, [init, out], loop, "a tle.gpu buffer carried by a loop")
        gen.buffers[c.id] = gen.buffers[r.id] = buf
        return ("buffer", buf, c)
    if c.type.is_scalar:
        name = gen.ids.define(c)
        gen.emit(f"{name} = T.alloc_var({tl_dtype(c.type.elem)!r}, init={gen.scalar(init)})", indent)
        gen.scalars[c.id] = name
        gen.scalars[r.id] = name
        return ("var", name, c)
    # reuse the init's fragment when nothing else reads the init
    b = gen.buffers.get(init.id)
    if b is not None and b.scope == "fragment" and gen.visible(b) and \
            all(u is loop for u in gen.users.get(init.id, [])):
        buf = b
    elif is_zero(init):
        name = gen.alloc(c.name or "acc", c.type.shape, c.type.elem, "fragment")
        gen.emit(f"T.clear({name})", indent)
        buf = gen.fragment(name, c)
    else:
        name = gen.alloc(c.name or "acc", c.type.shape, c.type.elem, "fragment")
        gen.fill(name, init, indent)
        buf = gen.fragment(name, c)
    gen.buffers[c.id] = buf
    gen.buffers[r.id] = buf
    return ("buf", buf, c)


def write_slots(gen: Context, slots, outs: list[Value], indent: int):
    """Write the values a loop body (or branch) yields into their slots. Writes that read another
    slot written here are staged through temporaries first, so every write sees the old values."""
    pending = []
    for (kind, slot, c), out in zip(slots, outs):
        if kind == "buffer":
            continue
        if kind == "var":
            if gen.scalars.get(out.id) != slot:
                pending.append((kind, slot, gen.scalar(out), out))
        elif gen.buffers.get(out.id) is not slot:
            idx = loop_indices(out.type.rank)
            pending.append((kind, slot, gen.elem(out, idx), out))
    names = [s if k == "var" else s.name for k, s, _, _ in pending]
    # a slot's name read as a whole word (`acc` is not read by `acc1[i0] + t[i0]`)
    hazard = len(pending) > 1 and any(
        any(mentions(expr, n) for n in names if n != own)
        for (own, (_, _, expr, _)) in zip(names, pending))
    staged = []
    for kind, slot, expr, out in pending:
        if hazard:
            if kind == "var":
                tmp = gen.ids.fresh(slot + "_next")
                gen.let(tmp, expr, indent)
                staged.append((kind, slot, tmp, out))
            else:
                tmp = gen.alloc(slot.name + "_next", out.type.shape, out.type.elem, "fragment")
                gen.fill(tmp, out, indent)
                staged.append((kind, slot, tmp, out))
        else:
            staged.append((kind, slot, expr, out))
    for kind, slot, expr, out in staged:
        if kind == "var":
            # a staged write reads its temporary, a let
            gen.emit(f"{slot} = {expr}", indent, reads=(expr,) if hazard else ())
        elif hazard:
            idx = loop_indices(out.type.rank)
            gen.emit(parallel_header(idx, out.type.shape), indent)
            at = ", ".join(idx)
            gen.emit(f"{slot.name}[{at}] = {copied_value(f'{expr}[{at}]', out.type.elem)}", indent + 1)
        else:
            gen.fill(slot.name, out, indent)


def loop_slots_of(gen: Context, branch: Op) -> dict[int, Value]:
    """result index -> carried value, for results of `branch` that its loop yields back in the same
    position while the else branch yields that carried value unchanged."""
    blk = branch.parent
    loop = blk.parent_op if blk is not None else None
    if loop is None or loop.defn is not ops.FOR or blk.terminator is None or len(branch.regions) < 2:
        return {}
    carried = loop.body.args[1:]
    loop_yield = list(blk.terminator.operands)
    else_y = branch.regions[1].terminator
    else_vals = list(else_y.operands) if else_y else []
    out = {}
    for i, r in enumerate(branch.results):
        if r in loop_yield:
            j = loop_yield.index(r)
            if i < len(else_vals) and else_vals[i] is carried[j] and loop_yield.count(r) == 1 and \
                    (carried[j].id in gen.buffers or carried[j].id in gen.scalars):
                out[i] = carried[j]
    return out


def yields_back(gen: Context, u: Op, v: Value) -> bool:
    """Is `u` an else-branch yield handing loop-carried `v` back to its own slot (no read)?"""
    if u.defn is not ops.YIELD or u.parent is None or u.parent.parent_op is None:
        return False
    branch = u.parent.parent_op
    if branch.defn is not ops.IF or u.parent is not branch.regions[-1]:
        return False
    slots = loop_slots_of(gen, branch)
    return any(c is v for c in slots.values())
