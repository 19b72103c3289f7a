"""torch dtypes -> tile-IR dtypes."""
from __future__ import annotations

import torch

from tle.lowering.ir import types as T

_TORCH = {torch.bool: T.i1, torch.int8: T.i8, torch.int16: T.i16, torch.int32: T.i32, torch.int64: T.i64,
          torch.uint8: T.u8, torch.float16: T.fp16, torch.bfloat16: T.bf16, torch.float32: T.fp32,
          torch.float64: T.fp64}
for _name, _dt in (("uint16", T.u16), ("uint32", T.u32), ("uint64", T.u64), ("float8_e4m3fn", T.fp8e4nv),
                   ("float8_e5m2", T.fp8e5)):
    if hasattr(torch, _name):
        _TORCH[getattr(torch, _name)] = _dt


def from_torch(dtype: torch.dtype) -> T.DType:
    try:
        return _TORCH[dtype]
    except KeyError:
        raise TypeError(f"torch dtype {dtype} is not supported by tle") from None
