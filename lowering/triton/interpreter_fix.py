"""Corrections to Triton 3.6's CPU interpreter (TRITON_INTERPRET=1), applied when the Triton backend runs
kernels there.

- The interpreter keeps bf16 tiles as their raw 16-bit patterns (NumPy has no bf16) and its `tl.dot`
  multiplies those integers as if they were the numbers. Here a bf16 operand is widened to fp32 first
  (exact: a bf16 value is an fp32 value with the low 16 bits zero), so the products are exact and the sum
  is accumulated in fp32, as on the GPU.
- Its `tl.umulhi` widens a negative 32-bit operand by sign extension; on the GPU the operands are unsigned
  (`mul.hi.u32`). Here they are reinterpreted as unsigned first.
- It cannot call libdevice functions (`create_extern_elementwise` is not implemented). Here the float
  functions tle lowers to libdevice are computed with NumPy, by the function's libdevice symbol.
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
    original_umulhi = interpreter.InterpreterBuilder.create_umulhi

    def create_umulhi(self, lhs, rhs):
        signed = lhs.data.dtype
        if signed.kind != "i" or signed.itemsize == 8:
            return original_umulhi(self, lhs, rhs)
        unsigned = np.dtype(f"uint{signed.itemsize * 8}")
        out = original_umulhi(self, interpreter.TensorHandle(lhs.data.view(unsigned), lhs.dtype.scalar),
                              interpreter.TensorHandle(rhs.data.view(unsigned), rhs.dtype.scalar))
        return interpreter.TensorHandle(out.data.view(signed), lhs.dtype.scalar)

    interpreter.InterpreterBuilder.create_umulhi = create_umulhi
    interpreter.InterpreterBuilder.create_extern_elementwise = _extern_elementwise
    patch_lang = interpreter._patch_lang

    def patch_lang_and_libdevice(fn):
        # the interpreter binds the builtins of triton.language only; libdevice's need binding too
        from triton.language.extra.cuda import libdevice
        scope = patch_lang(fn)
        if any(v is libdevice for v in fn.__globals__.values()):
            interpreter._patch_builtin(libdevice, interpreter.interpreter_builder, scope)
        return scope

    interpreter._patch_lang = patch_lang_and_libdevice
    _applied = True


def _numpy_libdevice():
    import math

    import numpy as np

    def each(f):
        return np.vectorize(f, otypes=[np.float64])

    def round_half_away(x):
        return np.sign(x) * np.floor(np.abs(x) + 0.5)

    return {
        "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
        "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "exp": np.exp,
        "exp2": np.exp2, "exp10": lambda x: np.power(10.0, x), "expm1": np.expm1, "log": np.log, "log2": np.log2,
        "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt,
        "erf": each(math.erf), "erfc": each(math.erfc), "lgamma": each(math.lgamma), "tgamma": each(math.gamma),
        "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": round_half_away, "rint": np.rint,
        "nearbyint": np.rint, "sin": np.sin, "cos": np.cos, "sinpi": lambda x: np.sin(np.pi * x),
        "cospi": lambda x: np.cos(np.pi * x), "pow": np.power, "fmod": np.fmod, "atan2": np.arctan2,
        "hypot": np.hypot, "copysign": np.copysign, "fdim": lambda x, y: np.maximum(x - y, 0),
        "nextafter": np.nextafter, "remainder": each(math.remainder), "fma": lambda x, y, z: x * y + z,
    }


def _extern_elementwise(self, lib_name, lib_path, symbol, args, ret_type, is_pure):
    from triton.runtime import interpreter
    table = _numpy_libdevice()
    name = symbol.removeprefix("__nv_")
    if name not in table and name.endswith("f"):
        name = name[:-1]                      # the fp32 variant: __nv_tanhf
    if name not in table:
        raise NotImplementedError(f"libdevice function {symbol} in Triton's interpreter")
    out = table[name](*[a.data for a in args])
    return interpreter.TensorHandle(out.astype(args[0].data.dtype), args[0].dtype.scalar)
