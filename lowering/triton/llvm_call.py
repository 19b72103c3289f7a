"""Calls from generated Triton kernels to functions of a linked LLVM IR file (a tle.raw.dialect function and
its tiles' copy helpers; see raw_llvm.py).

`tl.extern_elementwise` refuses pointer arguments (its broadcasting checks operand types), so the call is
built with Triton's builder directly: each argument converted to the function's parameter type (None: a
pointer, passed as it is), all broadcast to one shape, the call marked impure so Triton neither drops nor
merges it. A call on scalars only runs once per thread.
"""
from __future__ import annotations

from triton.language import core

LIBRARY = "tle_raw"          # the key of the linked file in Triton's extern_libs


def call_llvm(path: str, symbol: str, args: list, param_types: list, ret_type, _semantic):
    values = []
    for a, t in zip(args, param_types):
        v = _semantic.to_tensor(a)
        if t is not None and v.dtype != t:
            v = _semantic.cast(v, t)
        values.append(v)
    for i in range(1, len(values)):
        values[0], values[i] = _semantic.broadcast_impl_value(values[0], values[i])
    for i in range(1, len(values)):
        values[i], _ = _semantic.broadcast_impl_value(values[i], values[0])
    ret = values[0].type.with_element_ty(ret_type) if values and values[0].type.is_block() else ret_type
    builder = _semantic.builder
    handle = builder.create_extern_elementwise(LIBRARY, path, symbol, [v.handle for v in values], ret.to_ir(builder),
                                               False)
    return core.tensor(handle, ret)
