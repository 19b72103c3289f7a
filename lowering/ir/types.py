"""Types of the tile IR: element dtypes, pointer element types, and shaped types.

A value's type is a shape (the empty tuple for a scalar) and an element type. The element type is a
DType, or a PointerType for pointers into a kernel argument. Names follow Triton's ("fp32", "bf16",
"i32", ...) so that the textual IR reads like the kernels people already know.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str          # "fp32", "bf16", "i32", "i1", ...
    kind: str          # "float", "int", "uint", "bool"
    bits: int

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_fp8(self) -> bool:
        return self.kind == "float" and self.bits == 8

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint", "bool")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name


_ALL = [
    DType("i1", "bool", 1),
    DType("i8", "int", 8), DType("i16", "int", 16), DType("i32", "int", 32), DType("i64", "int", 64),
    DType("u8", "uint", 8), DType("u16", "uint", 16), DType("u32", "uint", 32), DType("u64", "uint", 64),
    DType("fp16", "float", 16), DType("bf16", "float", 16), DType("fp32", "float", 32), DType("fp64", "float", 64),
    # fp8 as NVIDIA GPUs have it: e4m3 without infinities (max 448; Triton's float8e4nv) and e5m2 (float8e5)
    DType("fp8e4nv", "float", 8), DType("fp8e5", "float", 8),
]
DTYPES = {d.name: d for d in _ALL}
i1, i8, i16, i32, i64 = (DTYPES[n] for n in ("i1", "i8", "i16", "i32", "i64"))
u8, u16, u32, u64 = (DTYPES[n] for n in ("u8", "u16", "u32", "u64"))
fp16, bf16, fp32, fp64 = (DTYPES[n] for n in ("fp16", "bf16", "fp32", "fp64"))
fp8e4nv, fp8e5 = DTYPES["fp8e4nv"], DTYPES["fp8e5"]

# Triton's dtype names -> ours (Triton spells booleans int1 and unsigned ints uint8 ...).
_TRITON_ALIASES = {"int1": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
                   "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}


# torch's dtype names (str(torch.float32) is "torch.float32") -> ours; the compiler never imports torch
_TORCH_NAMES = {"bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
                "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "fp16", "bfloat16": "bf16",
                "float32": "fp32", "float64": "fp64", "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}


def dtype_from_torch_name(text: str) -> DType | None:
    """Our DType for the text of a torch dtype ("torch.float32"); None if it is not one we have."""
    if not text.startswith("torch."):
        return None
    name = _TORCH_NAMES.get(text[len("torch."):])
    return DTYPES[name] if name else None


def dtype_from_name(name: str) -> DType:
    name = _TRITON_ALIASES.get(name, name)
    if name not in DTYPES:
        raise KeyError(name)
    return DTYPES[name]


@dataclass(frozen=True)
class PointerType:
    """A pointer into global memory whose elements have dtype `elem`."""
    elem: DType

    @property
    def name(self) -> str:
        return f"ptr<{self.elem}>"

    @property
    def element_ty(self) -> DType:     # Triton's spelling: x_ptr.dtype.element_ty
        return self.elem

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class DescriptorType:
    """A tensor descriptor (tl.make_tensor_descriptor): a window of `block_shape` elements of dtype `elem`
    into a tensor in global memory; a `padding` ("zero" or "nan") is what elements outside it read."""
    elem: DType
    block_shape: tuple[int, ...]
    padding: str

    @property
    def name(self) -> str:
        return f"desc<{'x'.join(map(str, self.block_shape))}x{self.elem}, {self.padding}>"

    def __str__(self) -> str:
        return self.name


ElemType = DType | PointerType | DescriptorType


@dataclass(frozen=True)
class Type:
    """A value's type. `space` is empty for values (scalars and tiles); "smem" for a tle.gpu buffer, a
    block of on-chip memory holding a tile of this shape and dtype, rewritten by the buffer ops."""
    shape: tuple[int, ...]
    elem: ElemType
    space: str = ""

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    @property
    def is_pointer(self) -> bool:
        return isinstance(self.elem, PointerType)

    @property
    def is_descriptor(self) -> bool:
        return isinstance(self.elem, DescriptorType)

    @property
    def is_buffer(self) -> bool:
        return bool(self.space)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def with_shape(self, shape) -> "Type":
        return Type(tuple(shape), self.elem)

    def with_elem(self, elem) -> "Type":
        return Type(self.shape, elem)

    def __str__(self) -> str:
        if self.space:
            return f"{self.space}<{'x'.join(map(str, self.shape))}x{self.elem}>"
        if not self.shape:
            return str(self.elem)
        return f"tile<{'x'.join(map(str, self.shape))}x{self.elem}>"


def scalar(elem: ElemType) -> Type:
    return Type((), elem)


def tile(shape, elem: ElemType) -> Type:
    return Type(tuple(shape), elem)


def buffer(shape, elem: DType, space: str = "smem") -> Type:
    return Type(tuple(shape), elem, space)


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting of two shapes; raises ValueError when they are incompatible."""
    if len(a) < len(b):
        a = (1,) * (len(b) - len(a)) + a
    if len(b) < len(a):
        b = (1,) * (len(a) - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ValueError(f"shapes {a} and {b} cannot be broadcast together")
    return tuple(out)


# Triton's promotion rules for binary arithmetic between two tensors of different element types.
_FLOAT_RANK = {"fp8e4nv": 0, "fp8e5": 0, "fp16": 1, "bf16": 1, "fp32": 2, "fp64": 3}


def promote(a: DType, b: DType) -> DType:
    if a == b:
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            if {a.name, b.name} == {"fp16", "bf16"}:
                return fp32
            if a.is_fp8 and b.is_fp8:          # two fp8 kinds meet in fp16
                return fp16
            return a if _FLOAT_RANK[a.name] >= _FLOAT_RANK[b.name] else b
        return a if a.is_float else b
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    bits = max(a.bits, b.bits)
    if a.bits == b.bits and a.kind != b.kind:
        return DTYPES[f"u{bits}"]
    wider = a if a.bits > b.bits else b
    return wider
