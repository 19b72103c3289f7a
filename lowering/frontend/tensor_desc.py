"""Tensor descriptors (`tl.make_tensor_descriptor`, `desc.load`, `desc.store`, `desc.atomic_add`) as the
block windows they read and write.

A descriptor names a tensor (base, shape, strides) and a `block_shape`; `desc.load(offsets)` reads the block
at `offsets`, elements outside the tensor reading as the descriptor's padding ("zero" or "nan"), and
`desc.store` / `desc.atomic_add` leave the elements outside the tensor alone. That is a block pointer at
those offsets with every axis boundary-checked, so both backends receive the masked pointer tiles of
block_ptr.py. On Hopper, Triton would issue these accesses through TMA; here they are ordinary loads and
stores (docs/language.md says so).
"""
from __future__ import annotations

from dataclasses import dataclass

import triton.language as tl

from ..errors import LoweringError
from ..ir import types as T
from .block_ptr import BlockPtr, _scalars, pointers_and_mask, window_offsets
from .semantics import TV, is_num

_NAME = "tl.make_tensor_descriptor"


@dataclass(frozen=True, eq=False)
class TensorDescriptor:
    tr: object                      # the tracer: the methods below are called from the kernel's text
    base: TV
    shape: tuple                    # i64 scalars (TV) per axis
    strides: tuple                  # i64 scalars (TV) per axis
    block_shape: tuple[int, ...]
    padding: str                    # "zero" or "nan"

    def _window(self, offsets, what) -> BlockPtr:
        if len(offsets) != len(self.block_shape):
            raise LoweringError(f"{what}: {len(offsets)} offsets for a descriptor of rank {len(self.block_shape)}",
                                self.tr.b.loc)
        rank = len(self.block_shape)
        return BlockPtr(self.base, self.shape, self.strides, window_offsets(self.tr, offsets, "offsets", what),
                        self.block_shape, tuple(range(rank - 1, -1, -1)))

    def _every_axis(self):
        return tuple(range(len(self.block_shape)))

    # the accesses are the kernel's own tl.load / tl.store / tl.atomic_add of the window, through the tracer
    def load(self, offsets):
        return self.tr.call(tl.load, [self._window(offsets, "desc.load")],
                            {"boundary_check": self._every_axis(), "padding_option": self.padding})

    def store(self, offsets, value):
        self.tr.call(tl.store, [self._window(offsets, "desc.store"), value], {"boundary_check": self._every_axis()})

    def atomic_add(self, offsets, value):
        pointers, mask = pointers_and_mask(self.tr, self._window(offsets, "desc.atomic_add"), self._every_axis())
        return self.tr.call(tl.atomic_add, [pointers, value], {"mask": mask})


def make_tensor_descriptor(tr, base, shape, strides, block_shape, padding_option="zero"):
    """Checked as Triton checks it: rank 1 to 5, a contiguous last axis of at least 16 bytes per block row."""
    loc = tr.b.loc
    if not isinstance(base, TV) or not base.type.is_pointer or not base.type.is_scalar:
        raise LoweringError(f"{_NAME}: base must be a pointer argument, got {base!r}", loc)
    rank = len(shape)
    if not 1 <= rank <= 5:
        raise LoweringError(f"{_NAME}: a tensor of rank 1 to 5, got rank {rank}", loc)
    for name, seq in (("strides", strides), ("block_shape", block_shape)):
        if len(seq) != rank:
            raise LoweringError(f"{_NAME}: {name} has {len(seq)} entries for a tensor of rank {rank}", loc)
    block_shape = tuple(int(getattr(b, "value", b)) for b in block_shape)
    if any(b <= 0 or b & (b - 1) for b in block_shape):
        raise LoweringError(f"{_NAME}: block_shape {list(block_shape)} must be powers of two", loc)
    elem = base.dtype.elem
    row_bytes = block_shape[-1] * elem.bits // 8
    if row_bytes < 16:
        raise LoweringError(f"{_NAME}: the last axis of block_shape must span at least 16 bytes, got "
                            f"{block_shape[-1]} x {elem.bits // 8} = {row_bytes}", loc)
    last = getattr(strides[-1], "value", strides[-1])
    if is_num(last) and last != 1:
        raise LoweringError(f"{_NAME}: the last axis must be contiguous (stride 1), got stride {last}", loc)
    padding = str(getattr(padding_option, "value", padding_option)).lower()
    if padding not in ("zero", "nan"):
        raise LoweringError(f"{_NAME}: padding_option must be 'zero' or 'nan', got {padding_option!r}", loc)
    if padding == "nan" and not elem.is_float:
        raise LoweringError(f"{_NAME}: padding_option='nan' on an integer tensor", loc)
    return TensorDescriptor(tr, base, _scalars(tr, shape, T.i64, "shape", _NAME),
                            _scalars(tr, strides, T.i64, "strides", _NAME),
                            block_shape, padding)
