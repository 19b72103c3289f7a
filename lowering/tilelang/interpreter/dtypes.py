"""TIR dtypes as torch tensors: which torch dtype holds a value of each TIR dtype, and TIR's casts.

Values keep their own dtype's rounding: bf16 and fp16 arithmetic runs on torch tensors of that dtype,
which compute each operation in fp32 and round once, as CUDA's bf16/half operators do. Unsigned
types wider than 8 bits are held in int64 and wrapped after every operation (torch's uint16/32/64
lack most arithmetic). fp8 values are held in fp32 (torch's fp8 tensors lack most operations), rounded
to their fp8 type by every conversion into it: to nearest even, saturating at the largest finite value
as CUDA's conversions do (`cvt.rn.satfinite`).
"""
from __future__ import annotations

import torch

from .errors import Unsupported

STORAGE = {"bool": torch.bool, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
           "int64": torch.int64, "uint8": torch.uint8, "uint16": torch.int64, "uint32": torch.int64,
           "uint64": torch.int64, "float16": torch.float16, "bfloat16": torch.bfloat16,
           "float32": torch.float32, "float64": torch.float64, "float8_e4m3fn": torch.float32,
           "float8_e5m2": torch.float32}
# fp8 types, held in fp32 (STORAGE): the torch dtype that rounds a value to each
FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
# unsigned types held in a wider signed torch dtype: the mask that wraps them
_WRAP = {"uint16": 0xFFFF, "uint32": 0xFFFFFFFF}
_BITS_DTYPE = {8: {"int": torch.int8, "float": None}, 16: {"int": torch.int16, "float": None},
               32: {"int": torch.int32, "float": torch.float32}, 64: {"int": torch.int64, "float": torch.float64}}


def name(dtype) -> str:
    """The TIR dtype's name ('float32', 'bool', ...) from a tvm DataType or a string."""
    return str(dtype)


def storage(dtype) -> torch.dtype:
    try:
        return STORAGE[name(dtype)]
    except KeyError:
        raise Unsupported(f"values of dtype {name(dtype)}") from None


def is_float(dtype) -> bool:
    return name(dtype).startswith(("float", "bfloat"))


def is_int(dtype) -> bool:
    return name(dtype).startswith(("int", "uint"))


def bits(dtype) -> int:
    n = name(dtype)
    if n in FP8:
        return 8
    return 1 if n == "bool" else 16 if n == "bfloat16" else int("".join(c for c in n if c.isdigit()))


def wrap(t: torch.Tensor, dtype) -> torch.Tensor:
    """Bring a result into its dtype's range (unsigned types held in int64 wrap around)."""
    m = _WRAP.get(name(dtype))
    return t & m if m is not None else t


def const(value, dtype) -> torch.Tensor:
    """A 0-d tensor holding a TIR literal."""
    n = name(dtype)
    if is_int(n) and n in _WRAP:
        value = int(value) & _WRAP[n]
    if n in FP8:
        return cast(torch.tensor(float(value)), n)
    return torch.tensor(value, dtype=storage(n))


def cast(t: torch.Tensor, dtype) -> torch.Tensor:
    """TIR's Cast: floats to integers truncate toward zero, integers narrow by wrapping, anything to bool
    is `!= 0`, floats round to nearest even."""
    n = name(dtype)
    target = storage(n)
    if n in FP8:
        return to_fp8(t, FP8[n])
    if n in _WRAP:
        if t.is_floating_point():
            t = t.to(torch.int64)
        return t.to(torch.int64) & _WRAP[n]
    if n == "uint64" and t.is_floating_point():
        return t.to(torch.float64).to(torch.int64)
    return t.to(target)


def to_fp8(t: torch.Tensor, fp8: torch.dtype) -> torch.Tensor:
    """`t` rounded to the fp8 type (nearest even, saturating; NaN stays NaN), held in fp32."""
    wide = t if t.dtype == torch.float64 else t.to(torch.float32)
    limit = torch.finfo(fp8).max
    return wide.clamp(-limit, limit).to(fp8).to(torch.float32)


def reinterpret(t: torch.Tensor, src, dst) -> torch.Tensor:
    """The same bits read as another dtype of the same width."""
    s, d = name(src), name(dst)
    if bits(s) != bits(d):
        raise Unsupported(f"T.reinterpret from {s} to {d} (different widths)")
    if s in FP8:                                   # the fp8 bits of a value held in fp32
        t = t.to(FP8[s]).view(torch.int8)
    if d in FP8:
        raw = t.contiguous().view(torch.int8) if t.dtype != torch.int8 else t
        return raw.view(FP8[d]).to(torch.float32)
    width = bits(s)
    raw = t.to(_BITS_DTYPE[width]["int"]) if s in _WRAP else t      # unsigned: the low bits, as signed
    raw = raw.contiguous().view(_BITS_DTYPE[width]["int"]) if raw.dtype != _BITS_DTYPE[width]["int"] else raw
    if d in _WRAP:
        return raw.to(torch.int64) & _WRAP[d]
    return raw.view(storage(d))


def zero(dtype) -> torch.Tensor:
    return const(False if name(dtype) == "bool" else 0, dtype)
