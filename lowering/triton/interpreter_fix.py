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
- Its conversions to fp8 (fp8e4nv, fp8e5) truncate bits: a carry out of the mantissa is lost, ties do not go
  to even, and values past the largest finite one become garbage or infinity. On the GPU (both backends'
  `cvt.rn.satfinite`) they round to nearest even and saturate to the largest finite value (NaN stays NaN).
  Here every conversion from or to these two fp8 types goes through torch's, after saturating.
- It has no descriptor reductions (`desc.atomic_add`, a TMA reduction on the GPU). Here the descriptor's
  window is added to atomically, element by element, where it lies inside the tensor.
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
    interpreter.InterpreterBuilder.create_descriptor_reduce = _descriptor_reduce
    patch_lang = interpreter._patch_lang

    def patch_lang_and_libdevice(fn):
        # the interpreter binds the builtins of triton.language only; libdevice's need binding too
        from triton.language.extra.cuda import libdevice
        scope = patch_lang(fn)
        if any(v is libdevice for v in fn.__globals__.values()):
            interpreter._patch_builtin(libdevice, interpreter.interpreter_builder, scope)
        return scope

    interpreter._patch_lang = patch_lang_and_libdevice
    interpreter._convert_float = _fp8_faithful(interpreter._convert_float)
    _applied = True


# the fp8 types tle has: Triton's name -> torch's
_TORCH_FP8 = {"fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2"}
_TORCH_FLOAT = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64", **_TORCH_FP8}


def _fp8_faithful(convert):
    """`convert` (the interpreter's float conversion, on NumPy arrays: raw bits for bf16 and fp8) with the
    conversions from and to tle's fp8 types done as the GPU does them (tle converts to nearest even only)."""
    def convert_float(data, src, dst, rounding_mode):
        names = (src.name, dst.name)
        if not any(n in _TORCH_FP8 for n in names) or not all(n in _TORCH_FLOAT for n in names):
            return convert(data, src, dst, rounding_mode)
        return _convert_with_torch(data, src.name, dst.name)
    return convert_float


def _convert_with_torch(data, src: str, dst: str):
    import numpy as np
    import torch
    src_t, dst_t = getattr(torch, _TORCH_FLOAT[src]), getattr(torch, _TORCH_FLOAT[dst])
    raw = np.array(data, copy=True)           # torch shares the memory, which may be read-only
    if src in ("bf16", *_TORCH_FP8):          # held as raw bits
        x = torch.from_numpy(raw.view(np.int16 if src == "bf16" else np.int8)).view(src_t)
    else:
        x = torch.from_numpy(raw)
    if dst in _TORCH_FP8:
        limit = torch.finfo(dst_t).max          # satfinite: beyond the largest finite value (inf too) -> it
        wide = x.double() if src == "fp64" else x.float()
        return wide.clamp(-limit, limit).to(dst_t).view(torch.int8).numpy().view(np.uint8)
    y = x.to(dst_t)
    return y.view(torch.int16).numpy().view(np.uint16) if dst == "bf16" else y.numpy()


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


def _descriptor_reduce(self, kind, desc, value, indices):
    from triton._C.libtriton import ir
    if kind != ir.DESCRIPTOR_REDUCE_KIND.ADD:
        raise NotImplementedError(f"descriptor reduction {kind} in the interpreter")
    ptrs, mask = desc.materialize_pointers(indices)
    add = ir.ATOMIC_OP.FADD if value.dtype.scalar.is_floating() else ir.ATOMIC_OP.ADD
    self.create_atomic_rmw(add, ptrs, value, mask, ir.MEM_SEMANTIC.RELAXED, ir.MEM_SYNC_SCOPE.GPU)
