"""A correction to Triton 3.6's CPU interpreter (TRITON_INTERPRET=1), applied when the Triton backend runs
kernels there.

The interpreter keeps bf16 tiles as their raw 16-bit patterns (NumPy has no bf16) and its `tl.dot`
multiplies those integers as if they were the numbers. Here a bf16 operand is widened to fp32 first
(exact: a bf16 value is an fp32 value with the low 16 bits zero), so the products are exact and the sum
is accumulated in fp32, as on the GPU.
"""
from __future__ import annotations

_applied = False


def apply() -> None:
    global _applied
    if _applied:
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == tl.bfloat16 and b.dtype.scalar == tl.bfloat16:
            wide = [(x.data.astype(np.uint32) << 16).view(np.float32) for x in (a, b)]
            product = np.matmul(wide[0], wide[1], dtype=np.float32)
            return interpreter.TensorHandle(product.astype(d.data.dtype) + d.data, d.dtype.scalar)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    interpreter.InterpreterBuilder.create_dot = create_dot
    _applied = True
