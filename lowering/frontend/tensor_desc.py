"""Tensor descriptors (`tl.make_tensor_descriptor`, `desc.load`, `desc.store`, `desc.atomic_add`).

A descriptor names a tensor (base, shape, strides) and a `block_shape`; `desc.load(offsets)` reads the block
at `offsets`, elements outside the tensor reading as the descriptor's padding ("zero" or "nan"), and
`desc.store` / `desc.atomic_add` leave the elements outside the tensor alone. The IR keeps them as
descriptor ops, so that the Triton backend writes them back as descriptors (TMA on Hopper); a backend
without descriptors expands each access into the block window it stands for (transforms/descriptors.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import LoweringError
from ..ir import ops
from ..ir import types as ir_types
from ..ir.ops import AtomicKind
from .block_ptr import _scalars
from .semantics import TV, as_tv, broadcast_to, cast, is_num

_NAME = "tl.make_tensor_descriptor"
_ATOMIC_ADD_DTYPES = ("u32", "i32", "u64", "fp32", "fp16", "bf16")     # what Triton's desc.atomic_add takes


@dataclass(frozen=True)
class DescriptorParam:
    """A kernel parameter whose launch value is a host tensor descriptor: in the kernel it is the descriptor
    `tl.make_tensor_descriptor` makes of parameters of its own, `<name>_base` (a pointer), `<name>_shape<k>`
    and `<name>_stride<k>` (ints, the last stride 1), with this block shape and padding."""
    name: str
    rank: int
    block_shape: tuple[int, ...]
    padding: str

    def part_names(self) -> list[str]:
        return ([f"{self.name}_base"] + [f"{self.name}_shape{k}" for k in range(self.rank)]
                + [f"{self.name}_stride{k}" for k in range(self.rank - 1)])

    def build(self, tr, parts: dict) -> "TensorDescriptor":
        """The descriptor, from the parts' traced values by name."""
        names = self.part_names()
        shape = [parts[n] for n in names[1:1 + self.rank]]
        strides = [parts[n] for n in names[1 + self.rank:]] + [1]
        desc = make_tensor_descriptor(tr, parts[names[0]], shape, strides, self.block_shape, self.padding)
        desc.desc.v.name = self.name
        return desc


@dataclass(frozen=True, eq=False)
class TensorDescriptor:
    tr: object                      # the tracer: the methods below are called from the kernel's text
    desc: TV                        # the make_descriptor value

    @property
    def block_shape(self) -> tuple[int, ...]:
        return self.desc.type.elem.block_shape

    @property
    def dtype(self):
        return self.desc.type.elem.elem

    def _offsets(self, offsets, what) -> list:
        if isinstance(offsets, TV) or not isinstance(offsets, (list, tuple)):
            raise LoweringError(f"{what}: offsets must be a list with one integer per axis, got {offsets!r}",
                                self.tr.b.loc)
        if len(offsets) != len(self.block_shape):
            raise LoweringError(f"{what}: {len(offsets)} offsets for a descriptor of rank {len(self.block_shape)}",
                                self.tr.b.loc)
        return [o.v for o in _scalars(self.tr, offsets, ir_types.i32, "offsets", what)]

    def _block(self, value, what) -> TV:
        """The value stored: cast to the descriptor's dtype and broadcast to its block."""
        elem = self.dtype
        value = cast(as_tv(self.tr.b, value, elem if is_num(value) else None), elem)
        try:
            return broadcast_to(value, self.block_shape)
        except LoweringError:
            raise LoweringError(f"{what}: a value of shape {list(value.type.shape)} for a block of "
                                f"{list(self.block_shape)}", self.tr.b.loc) from None

    # called from the kernel's text
    def load(self, offsets):
        offsets = self._offsets(offsets, "desc.load")
        return TV(self.tr.b.descriptor_load(self.desc.v, offsets), self.tr.b)

    def store(self, offsets, value):
        offsets = self._offsets(offsets, "desc.store")
        self.tr.b.descriptor_store(self.desc.v, self._block(value, "desc.store").v, offsets)

    def atomic_add(self, offsets, value):
        """Returns nothing, as in Triton (a TMA reduction has no result)."""
        offsets = self._offsets(offsets, "desc.atomic_add")
        if self.dtype.name not in _ATOMIC_ADD_DTYPES:
            raise LoweringError(f"desc.atomic_add on {self.dtype} memory: Triton's descriptor reductions add "
                                f"{', '.join(_ATOMIC_ADD_DTYPES)}", self.tr.b.loc)
        self.tr.b.descriptor_atomic(AtomicKind.ADD, self.desc.v, self._block(value, "desc.atomic_add").v, offsets)


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
    if isinstance(last, TV) and last.v.defining_op is not None and last.v.defining_op.defn is ops.CONST:
        last = last.v.defining_op.attrs["value"]          # an argument compiled in as a constant
    if is_num(last) and last != 1:
        raise LoweringError(f"{_NAME}: the last axis must be contiguous (stride 1), got stride {last}", loc)
    padding = str(getattr(padding_option, "value", padding_option)).lower()
    if padding not in ("zero", "nan"):
        raise LoweringError(f"{_NAME}: padding_option must be 'zero' or 'nan', got {padding_option!r}", loc)
    if padding == "nan" and not elem.is_float:
        raise LoweringError(f"{_NAME}: padding_option='nan' on an integer tensor", loc)
    shape = _scalars(tr, shape, ir_types.i32, "shape", _NAME)            # Triton's types: i32 extents, i64 strides
    strides = _scalars(tr, strides, ir_types.i64, "strides", _NAME)
    desc = tr.b.make_descriptor(base.v, [x.v for x in shape], [x.v for x in strides], block_shape, padding)
    return TensorDescriptor(tr, TV(desc, tr.b))
