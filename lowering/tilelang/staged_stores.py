"""Which stores of a product's tile go to global memory through shared memory.

A product's accumulator lives in the fragment layout of the tensor-core instruction: each thread holds
pairs of elements scattered over rows, so a direct `T.copy(fragment, global)` writes 4- or 8-byte pieces
that coalesce poorly. Staged through shared memory, TileLang writes the fragment with `stmatrix` and sends
the box out as one bulk (TMA) store: the epilogue TileLang's own GEMM and attention examples are written
with. Measured on an H100 against the direct store: +1-2% on flash_attention's forward at B4 H32 S8192
D128, +1-4% on silu_attention's forward and backward at S4096 (docs/benchmark/flash_attention.md).

Only where it costs no shared memory the kernel needs elsewhere: a store outside every loop and every
warp-group branch, after the loops whose buffers TileLang's shared-memory planner then reuses (their
lifetimes have ended), of a box of two or more axes whose rows are a multiple of 16 bytes, at a 16-byte
aligned address."""
from __future__ import annotations

from math import prod

from ..ir import ops
from ..ir.core import Op, Value
from ..ir.ops import Trait
from .context import Buffer, Context
from .row_products import SAME_LAYOUT

# below this many elements a tile's direct store is a handful of instructions per thread
MIN_STAGED_ELEMENTS = 64 * 64


def stages_through_shared(gen: Context, op: Op, src: Buffer, param_value: Value) -> bool:
    """Does the box store `op` of fragment `src` go through a shared buffer?"""
    if op.defn is not ops.STORE:
        return False
    shape = op.operand("value").type.shape
    if src.scope != "fragment" or src.perm is not None or len(shape) < 2:
        return False
    bits = op.operand("ptr").type.elem.elem.bits
    if prod(shape) < MIN_STAGED_ELEMENTS or bits < 8 or shape[-1] * bits // 8 % 16:
        return False
    if not gen.arg[param_value.id].aligned16:
        return False                # a bulk store's global address is 16-byte aligned
    if gen.warp_group is not None or _in_loop(gen):
        return False
    return from_product(op.operand("value"))


def _in_loop(gen: Context) -> bool:
    """Is the op being lowered inside a loop?"""
    return any(b.parent_op is not None and b.parent_op.has(Trait.LOOP) for b in gen.blocks)


def from_product(v: Value) -> bool:
    """Is `v` computed element-wise from a product (tl.dot) of its shape, through loops' results and
    branches, so that it has the product's fragment layout?"""
    shape = v.type.shape
    todo, seen = [v], set()
    while todo:
        v = todo.pop()
        if v is None or v.id in seen or v.type.shape != shape:
            continue
        seen.add(v.id)
        op = v.defining_op
        if op is None:
            continue
        if op.defn is ops.DOT:
            return True
        if op.defn in SAME_LAYOUT:
            todo.extend(op.operands)
        elif op.defn in (ops.FOR, ops.IF):
            i = op.results.index(v)
            todo.extend(blk.terminator.operands[i] for blk in op.regions if blk.terminator is not None)
    return False


def product_operand_twin(gen: Context, stored: Value) -> Value | None:
    """A cast tile that is stored and also, cast again the same way, a product's operand (a state stored in
    bf16 and multiplied in bf16): the operand's cast, whose shared buffer the store can copy from, or None."""
    cast = stored.defining_op
    if cast is None or cast.defn is not ops.CAST or cast.attrs.get("bitcast") or len(stored.type.shape) < 2:
        return None
    source = cast.operand("x")
    for user in gen.users.get(source.id, []):
        if user is not cast and user.defn is ops.CAST and not user.attrs.get("bitcast") and \
                user.result.type == stored.type and user.result.id not in gen.buffers and \
                any(u.defn is ops.DOT for u in gen.value_users(user.result)) and \
                user.parent is cast.parent:
            return user.result
    return None


def masked_product_store(gen: Context, op: Op, acc) -> bool:
    """Does the masked store `op` of a product's tile, a box its mask bounds inside the argument (a sequence's
    end), go through a shared buffer? In a loop, where it is written at every step (a state walk's updates);
    rows of at least 16 bytes, outside warp-group branches."""
    if op.defn is not ops.STORE or acc.kind != "box" or op.operand("mask") is None or gen.warp_group is not None:
        return False
    if not _in_loop(gen):
        return False
    shape = op.operand("value").type.shape
    bits = op.operand("ptr").type.elem.elem.bits
    return len(shape) == 2 and bits >= 8 and shape[-1] * bits // 8 >= 16 and from_product(op.operand("value"))
