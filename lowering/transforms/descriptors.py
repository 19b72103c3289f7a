"""Tensor-descriptor ops expanded into the block windows they stand for, for a backend without descriptors.

`desc.load(offsets)` reads what a block pointer at `offsets` over the descriptor's tensor reads with every
axis boundary-checked and the descriptor's padding; `desc.store` and `desc.atomic_add` write through the
same masked window. The expansion is the frontend's own (block_ptr.py and the tl.load / tl.store /
tl.atomic_add builtins), run with a builder that writes the ops in place of the descriptor op, so that a
descriptor access and the block-pointer access it equals lower to the same code (on TileLang, T.copy boxes).
"""
from __future__ import annotations

from types import SimpleNamespace

import triton.language as tl

from ..frontend import builtins
from ..frontend.block_ptr import BlockPtr, pointers_and_mask, window_offsets
from ..frontend.semantics import TV
from ..ir import ops
from ..ir import types as ir_types
from ..ir.builder import Builder
from ..ir.core import Block, KernelIR, Op, Value
from ..ir.ops import Trait

# the ops that access memory through a tensor descriptor (operand "desc")


def _next_id(k: KernelIR) -> int:
    """An id no value of the kernel has (params, op results, region arguments)."""
    ids = [p.value.id for p in k.params]
    for op in k.walk():
        ids += [r.id for r in op.results] + [a.id for region in op.regions for a in region.args]
    return max(ids, default=-1) + 1


def _window(b: Builder, op: Op, offsets: list[Value]) -> BlockPtr:
    """The block pointer (row-major, 64-bit extents) at `offsets` over the tensor of `op`'s descriptor."""
    desc = op.operand("desc")
    block_shape, rank = desc.type.elem.block_shape, len(desc.type.elem.block_shape)
    make = desc.defining_op
    base, shape, strides = make.operand("base"), make.operand_group("shape"), make.operand_group("strides")
    return BlockPtr(TV(base, b), tuple(TV(b.cast(s, ir_types.i64), b) for s in shape), tuple(TV(s, b) for s in strides),
                    window_offsets(SimpleNamespace(b=b), [TV(o, b) for o in offsets], "offsets",
                                   "tl.make_tensor_descriptor"),
                    block_shape, tuple(range(rank - 1, -1, -1)))


def _expand(b: Builder, op: Op) -> Value | None:
    """Write the window access of `op` at the builder; its result value, if it has one."""
    tr = SimpleNamespace(b=b)
    desc_type = op.operand("desc").type.elem
    every_axis = tuple(range(len(desc_type.block_shape)))
    if op.defn is ops.DESCRIPTOR_LOAD:
        bp = _window(b, op, op.operand_group("offsets"))
        return builtins.load(tr, bp, boundary_check=every_axis, padding_option=desc_type.padding).v
    value, offsets = TV(op.operand("value"), b), op.operand_group("offsets")
    bp = _window(b, op, offsets)
    if op.defn is ops.DESCRIPTOR_STORE:
        builtins.store(tr, bp, value, boundary_check=every_axis)
        return None
    pointers, mask = pointers_and_mask(tr, bp, every_axis)
    builtins.BUILTINS[getattr(tl, f"atomic_{op.attrs['kind']}")](tr, pointers, value, mask=mask)
    return None


def expand_descriptors(k: KernelIR) -> KernelIR:
    """In place: each descriptor access becomes its window's ops (its result keeps its value, so its uses
    stand); the make_descriptor ops, used by nothing then, are removed."""
    accesses = [op for op in k.walk() if op.has(Trait.DESCRIPTOR)]
    if not accesses:
        return k
    b = Builder()
    b.ids.next = _next_id(k)
    for op in accesses:
        block = op.parent
        with b.insert_into(Block()) as scratch:
            b.loc = op.loc
            result = _expand(b, op)
        if result is not None:
            # the new op producing `result` takes over the old result value, which the uses name
            new_op, old = result.defining_op, op.result
            new_op.results[new_op.results.index(result)] = old
            old.owner = new_op
        at = block.ops.index(op)
        block.ops[at:at + 1] = scratch.ops
        for new in scratch.ops:
            new.parent = block
    for op in [op for op in k.walk() if op.defn is ops.MAKE_DESCRIPTOR]:
        op.parent.ops.remove(op)
    return k
