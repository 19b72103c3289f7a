"""Block pointers (`tl.make_block_ptr`, `tl.advance`) as the pointer tiles and masks they stand for.

A block pointer names a `block_shape` window at `offsets` into a tensor of `shape` and `strides`. Loading
through it is loading the pointer tile `base + sum_d (offsets[d] + arange(block_shape[d])) * strides[d]`,
masked, on the axes named by `boundary_check`, to the indices inside `[0, shape[d])`; `padding_option`
says what a masked-off element reads ("zero", "nan", or "" for any value). That is how Triton itself
rewrites block pointers for the GPUs without TMA, so both backends receive ordinary loads and stores.
As in Triton, shapes and strides are 64-bit, and the offsets given to `tl.make_block_ptr` and `tl.advance`
32-bit; like Triton's rewrite, the block pointer keeps its offsets, and builds its indices, in 64 bits
(sign-extended), so that an advanced offset does not wrap and the address arithmetic is the one Triton's
compiler is tuned for (with 32-bit offsets the block-pointer matmul runs ~17% slower on an H200).

A block pointer is a Python value of the tracer holding IR values; a loop carries its offsets (the only
part `tl.advance` changes).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import triton.language as tl

from ..errors import LoweringError
from ..ir import types as ir_types
from ..ir.ops import BinaryOp, CmpPred
from . import semantics as S
from .semantics import TV, as_tv, is_num


@dataclass(frozen=True, eq=False)
class BlockPtr:
    base: TV                        # the scalar pointer argument
    shape: tuple                    # i64 scalars (TV) per axis
    strides: tuple                  # i64 scalars (TV) per axis
    offsets: tuple                  # i64 scalars (TV) per axis
    block_shape: tuple[int, ...]
    order: tuple[int, ...]

    def with_offsets(self, offsets) -> "BlockPtr":
        return replace(self, offsets=tuple(offsets))

    def same_block(self, other) -> bool:
        """Is `other` this block pointer, at any offsets? (Fields are compared by identity: they hold IR.)"""
        return isinstance(other, BlockPtr) and self.base is other.base and self.block_shape == other.block_shape \
            and self.order == other.order and all(a is b for a, b in zip(self.shape + self.strides,
                                                                         other.shape + other.strides))

    @property
    def elem(self) -> ir_types.DType:
        return self.base.dtype.elem


def window_offsets(tr, values, what, construct="tl.make_block_ptr") -> tuple:
    """32-bit offsets, as Triton takes them, sign-extended to the 64 bits the block pointer keeps."""
    return tuple(S.cast(o, ir_types.i64) for o in _scalars(tr, values, ir_types.i32, what, construct))


def _scalars(tr, values, dtype, what, construct="tl.make_block_ptr") -> tuple:
    out = []
    for x in values:
        x = getattr(x, "value", x)          # a tl.constexpr
        if isinstance(x, TV) and not (x.type.is_scalar and x.dtype.is_int):
            raise LoweringError(f"{construct}: {what} must be integer scalars, got {x.type}", tr.b.loc)
        if not isinstance(x, TV) and not is_num(x):
            raise LoweringError(f"{construct}: {what} must be integers, got {x!r}", tr.b.loc)
        out.append(S.cast(as_tv(tr.b, x, dtype if is_num(x) else None), dtype))
    return tuple(out)


def make_block_ptr(tr, base, shape, strides, offsets, block_shape, order):
    if not isinstance(base, TV) or not base.type.is_pointer or not base.type.is_scalar:
        raise LoweringError(f"tl.make_block_ptr: base must be a pointer argument, got {base!r}", tr.b.loc)
    rank = len(block_shape)
    for name, seq in (("shape", shape), ("strides", strides), ("offsets", offsets), ("order", order)):
        if len(seq) != rank:
            raise LoweringError(f"tl.make_block_ptr: {name} has {len(seq)} entries for a block of rank {rank}",
                                tr.b.loc)
    block_shape = tuple(int(b) for b in block_shape)
    if any(b <= 0 or b & (b - 1) for b in block_shape):
        raise LoweringError(f"tl.make_block_ptr: block_shape {list(block_shape)} must be powers of two", tr.b.loc)
    if sorted(int(o) for o in order) != list(range(rank)):
        raise LoweringError(f"tl.make_block_ptr: order {list(order)} is not a permutation of the axes", tr.b.loc)
    return BlockPtr(base, _scalars(tr, shape, ir_types.i64, "shape"), _scalars(tr, strides, ir_types.i64, "strides"),
                    window_offsets(tr, offsets, "offsets"), block_shape, tuple(int(o) for o in order))


def advance(tr, base, offsets):
    if not isinstance(base, BlockPtr):
        raise LoweringError(f"tl.advance takes a block pointer, got {base!r}", tr.b.loc)
    if len(offsets) != len(base.offsets):
        raise LoweringError(f"tl.advance: {len(offsets)} offsets for a block pointer of rank {len(base.offsets)}",
                            tr.b.loc)
    step = window_offsets(tr, offsets, "advance offsets", "tl.advance")
    return base.with_offsets(S.binary(BinaryOp.ADD, o, d) for o, d in zip(base.offsets, step))


def _check_axes(tr, bp: BlockPtr, boundary_check) -> tuple[int, ...]:
    axes = tuple(int(a) for a in (boundary_check or ()))
    for a in axes:
        if not 0 <= a < len(bp.block_shape):
            raise LoweringError(f"boundary_check axis {a} out of range for a block of rank {len(bp.block_shape)}",
                                tr.b.loc)
    return axes


def pointers_and_mask(tr, bp: BlockPtr, boundary_check):
    """The pointer tile the block pointer stands for, and the mask of `boundary_check` (None without it)."""
    rank = len(bp.block_shape)
    checked = _check_axes(tr, bp, boundary_check)
    offset, mask = None, None
    for d, (size, off) in enumerate(zip(bp.block_shape, bp.offsets)):
        idx = S.binary(BinaryOp.ADD, off, S.cast(TV(tr.b.arange(0, size), tr.b), ir_types.i64))   # i64 indices along d
        for _ in range(d):
            idx = TV(tr.b.expand_dims(idx.v, 0), tr.b)
        for _ in range(rank - 1 - d):
            idx = TV(tr.b.expand_dims(idx.v, idx.type.rank), tr.b)
        term = S.binary(BinaryOp.MUL, idx, bp.strides[d])
        offset = term if offset is None else S.binary(BinaryOp.ADD, offset, term)
        if d in checked:
            inside = S.bitwise(BinaryOp.AND, S.compare(CmpPred.GE, idx, 0), S.compare(CmpPred.LT, idx, bp.shape[d]))
            mask = inside if mask is None else S.bitwise(BinaryOp.AND, mask, inside)
    offset = S.broadcast_to(offset, bp.block_shape)
    pointers = S.binary(BinaryOp.ADD, bp.base, offset)
    return pointers, (S.broadcast_to(mask, bp.block_shape) if mask is not None else None)


def padding(tr, bp: BlockPtr, padding_option, masked: bool):
    """The value a masked-off element reads, as `other`."""
    option = padding_option or ""
    if isinstance(option, tl.constexpr):
        option = option.value
    option = getattr(option, "name", option)
    option = str(option).lower().removeprefix("padding_option.")
    if option not in ("", "zero", "nan"):
        raise LoweringError(f"padding_option must be '', 'zero' or 'nan', got {padding_option!r}", tr.b.loc)
    if not masked or option == "":
        return None
    if option == "nan" and not bp.elem.is_float:
        raise LoweringError("padding_option='nan' on an integer block", tr.b.loc)
    return 0 if option == "zero" else float("nan")
