"""Loads read where they are used: a tile loaded only to be turned, element by element, into a product's operand.

Such a tile (q in `q * exp(g) * scale`, cast to fp32 for a TF32 product) is held by nothing but that expression,
whose result goes to shared memory for the product. As a fragment of its own, TileLang lays it out from the
expression's loop and replicates it across the threads that share a row (each of them loads the whole row, and
only one writes the result: a 4x load and a branch on `tx % 4`). Read inside the expression instead, each
element is loaded once, by the thread that writes it.

The expression's loop then takes its layout from the fragments it still reads. A vector broadcast along the
rows (`exp(g)[:, None]`) whose fragment is laid out by nothing but its own 1-D loop lays the loop out one row a
thread, replicated: TileLang runs the loop on a part of the threads only, and puts the barrier the shared write
needs inside that branch, where the other threads never arrive (the launch hangs). So a tile is read inside
its expression only where each such vector is also combined, somewhere in the kernel, with a full tile held in
a fragment (a product's accumulator, a tile loaded for another use), which lays the vector out over all the
threads."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Op, Value
from .context import Context, innermost_loop
from .control import loop_stages
from .gathers import written_arguments
from .row_products import SAME_LAYOUT

# ops that stretch a vector along new axes: the result has no layout of its own
_STRETCH = ops.ops_of(ops.BROADCAST, ops.EXPAND_DIMS)
# tiles made of indices and constants: an expression, held by no fragment
_LAYOUT_FREE = ops.ops_of(ops.ARANGE, ops.CONST, ops.SPLAT)


def product_feeds(gen: Context) -> set[int]:
    """Ids of the 2-D loads whose one use is an element-wise chain (one use at each step, the same shape, the
    same block) that ends as a product's operand, from an argument nothing in the kernel writes, and whose
    chain's broadcast vectors are laid out over all the threads (see above)."""
    written = written_arguments(gen)
    chains = {}
    for o in gen.kernel.walk():
        if o.defn is ops.LOAD and o.result.type.rank == 2 and not o.attrs.get("is_async") and \
                o.result.id not in gen.index_loads and id(gen.access(o).param) not in written and \
                not _in_a_pipelined_loop(gen, o):
            chain = _chain_to_product(gen, o, o.result)
            if chain is not None:
                chains[o.result.id] = chain
    inline = {v.id for chain in chains.values() for v in chain}      # the values no fragment will hold
    return {vid for vid, chain in chains.items()
            if all(_laid_out_elsewhere(gen, vec, inline) for vec in _broadcast_vectors(chain))}


def _in_a_pipelined_loop(gen: Context, op: Op) -> bool:
    """Is the innermost loop around `op` emitted as T.Pipelined? There TileLang takes the operand's shared tile,
    written from global memory, for a stage of the pipeline and keeps one per stage: in the gated delta rule's
    backward walk, two fp32 tiles of 64 x 128 three times over, more shared memory than a block may have."""
    loop = innermost_loop(op)            # a while loop is never pipelined
    return loop is not None and loop.defn is ops.FOR and loop_stages(gen, loop)[1]


def _chain_to_product(gen: Context, load: Op, v: Value) -> list[Value] | None:
    """The values from `load`'s result to the product's operand, or None if it does not feed one."""
    chain = [v]
    while len(chain) <= 16:
        users = gen.value_users(v)           # through a transpose
        if len(users) != 1 or users[0].parent is not load.parent:
            return None
        (user,) = users
        if user.defn is ops.DOT:
            # an operand a or b, staged in shared memory (a load that is the operand itself is copied there as
            # it is, memory.py); the accumulator is a fragment of the product's own layout
            return chain if len(chain) > 1 and user.operand("acc") is not v else None
        if user.defn not in SAME_LAYOUT or not user.results or user.result.type.shape != v.type.shape:
            return None
        v = user.result
        chain.append(v)
    return None


def _broadcast_vectors(chain: list[Value]) -> list[Value]:
    """The lower-rank tiles the chain's ops stretch into their operands (g in `q * exp(g)[:, None]`)."""
    out = []
    for prev, v in zip(chain, chain[1:]):
        for operand in v.defining_op.operands:
            if operand is None or operand is prev:
                continue
            vec = _unstretched(operand)
            if 0 < vec.type.rank < v.type.rank:
                out.append(vec)
    return out


def _unstretched(v: Value) -> Value:
    while v.defining_op is not None and v.defining_op.defn in _STRETCH:
        v = v.defining_op.operand("x")
    return v


def _laid_out_elsewhere(gen: Context, vec: Value, inline: set[int]) -> bool:
    """Is vector `vec` held by no fragment (an expression of indices and constants), or is something of its
    family (the vectors element-wise ops make from it and it from them) combined with a full tile that a
    fragment holds?"""
    family, todo, held = set(), [vec], False
    while todo:
        u = todo.pop()
        if u.id in family or u.type.shape != vec.type.shape:
            continue
        family.add(u.id)
        op = u.defining_op
        if op is None or op.defn not in SAME_LAYOUT:
            held = held or (op is not None and op.defn not in _LAYOUT_FREE)
        else:
            todo.extend(x for x in op.operands if x is not None)
        todo.extend(r for user in gen.users.get(u.id, []) if user.defn in SAME_LAYOUT for r in user.results)
    if not held:
        return True
    for f in family:
        for stretch in (x for x in gen.users.get(f, []) if x.defn in _STRETCH):
            if _meets_a_held_tile(gen, stretch.result, inline):
                return True
    return False


def _in_a_fragment(gen: Context, v: Value) -> bool:
    """Is `v` a tile of its own in a fragment (not a vector stretched, a constant, an arange, nor a load that a
    product reads, which goes to shared memory)?"""
    op = v.defining_op
    if op is not None and op.defn is ops.LOAD:
        return not any(u.defn is ops.DOT for u in gen.value_users(v))
    return op is None or op.defn not in _STRETCH | _LAYOUT_FREE


def _meets_a_held_tile(gen: Context, stretched: Value, inline: set[int]) -> bool:
    """Does an element-wise op combine the stretched vector with a full tile of its shape that is held?"""
    for user in gen.users.get(stretched.id, []):
        if user.defn in _STRETCH:
            if _meets_a_held_tile(gen, user.result, inline):
                return True
        elif user.defn in SAME_LAYOUT and user.results:
            for x in user.operands:
                if x is not None and x is not stretched and x.id not in inline and \
                        x.type.shape == user.result.type.shape and _in_a_fragment(gen, x):
                    return True
    return False
