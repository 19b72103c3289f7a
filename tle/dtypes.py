"""torch dtypes -> tile-IR dtypes."""
from __future__ import annotations

import torch

from tle.lowering.ir import types as ir_types

_TORCH = {torch.bool: ir_types.i1, torch.int8: ir_types.i8, torch.int16: ir_types.i16, torch.int32: ir_types.i32,
          torch.int64: ir_types.i64, torch.uint8: ir_types.u8, torch.float16: ir_types.fp16,
          torch.bfloat16: ir_types.bf16, torch.float32: ir_types.fp32, torch.float64: ir_types.fp64}
for _name, _dt in (("uint16", ir_types.u16), ("uint32", ir_types.u32), ("uint64", ir_types.u64),
                   ("float8_e4m3fn", ir_types.fp8e4nv), ("float8_e5m2", ir_types.fp8e5)):
    if hasattr(torch, _name):
        _TORCH[getattr(torch, _name)] = _dt


def from_torch(dtype: torch.dtype) -> ir_types.DType:
    try:
        return _TORCH[dtype]
    except KeyError:
        raise TypeError(f"torch dtype {dtype} is not supported by tle") from None
