"""Implementations of the Triton builtins (and `tle.load`) over the tile IR.

The frontend resolves a call by the identity of the called object: `tl.exp`, `tl.math.exp` and any
alias of them are the same function object, so they find the same entry here.
"""
from __future__ import annotations

import triton.language as tl

from ..errors import LoweringError
from ..ir import types as T
from . import semantics as S
from .semantics import TV, as_tv, is_num, to_dtype

BUILTINS: dict = {}


def builtin(*fns):
    def deco(impl):
        for f in fns:
            BUILTINS[f] = impl
        return impl
    return deco


def _int(tr, x, what: str) -> int:
    if isinstance(x, TV):
        raise LoweringError(f"{what} must be a constexpr, got a runtime value", tr.b.loc)
    return int(x)


def _shape(tr, shape) -> tuple[int, ...]:
    if isinstance(shape, (int,)):
        shape = (shape,)
    return tuple(_int(tr, s, "a tile dimension") for s in shape)


# -- program and index space -------------------------------------------------------------------------
@builtin(tl.program_id)
def program_id(tr, axis=0):
    axis = _int(tr, axis, "program_id axis")
    if axis not in (0, 1, 2):
        raise LoweringError(f"program_id axis must be 0, 1 or 2, got {axis}", tr.b.loc)
    return TV(tr.b.program_id(axis), tr.b)


@builtin(tl.num_programs)
def num_programs(tr, axis=0):
    axis = _int(tr, axis, "num_programs axis")
    return TV(tr.b.num_programs(axis), tr.b)


@builtin(tl.arange)
def arange(tr, start, end=None):
    if end is None:
        start, end = 0, start
    start, end = _int(tr, start, "arange start"), _int(tr, end, "arange end")
    n = end - start
    if n <= 0 or n & (n - 1):
        raise LoweringError(f"arange({start}, {end}): the length must be a power of two (Triton semantics)",
                            tr.b.loc)
    return TV(tr.b.arange(start, end), tr.b)       # the range as written: tl.arange(3, 11) stays one op


@builtin(tl.full)
def full(tr, shape, value, dtype):
    shape, dtype = _shape(tr, shape), to_dtype(dtype)
    v = S.cast(as_tv(tr.b, value, dtype if is_num(value) else None), dtype)
    return S.broadcast_to(v, shape) if shape else v


@builtin(tl.zeros)
def zeros(tr, shape, dtype):
    return full(tr, shape, 0, dtype)


@builtin(tl.zeros_like)
def zeros_like(tr, input):
    return full(tr, input.shape, 0, input.dtype)


@builtin(tl.cdiv)
def cdiv(tr, x, div):
    if is_num(x) and is_num(div):
        return -(-x // div)
    return (x + div - 1) // div


@builtin(tl.constexpr)
def constexpr(tr, value):
    return value


@builtin(tl.static_assert)
def static_assert(tr, cond, msg=""):
    if isinstance(cond, TV):
        raise LoweringError("static_assert needs a constexpr condition", tr.b.loc)
    if not cond:
        raise LoweringError(f"static_assert failed: {msg}", tr.b.loc)


@builtin(tl.static_print)
def static_print(tr, *args, **kw):
    tr.notes.append(" ".join(str(a) for a in args))


@builtin(tl.multiple_of, tl.max_contiguous)
def _passthrough_hint(tr, input, values):
    return input   # alignment hints: Triton re-derives them; no semantic effect


# -- memory -------------------------------------------------------------------------------------------
def mask_and_pointer(tr, pointer, mask):
    """The pointer tile and a boolean mask (a non-bool mask compared with 0), broadcast together."""
    if not isinstance(pointer, TV) or not pointer.type.is_pointer:
        raise LoweringError(f"expected a pointer or pointer tile, got {pointer!r}", tr.b.loc)
    if mask is not None:
        mask = as_tv(tr.b, mask)
        if not mask.dtype.is_bool:
            mask = S.compare("ne", mask, 0)
        pointer, mask = S.broadcast_pair(pointer, mask)
    return pointer, mask


def _load(tr, pointer, mask, other, boundary_check, padding_option, cache_modifier, eviction_policy,
          volatile, is_async):
    if boundary_check or padding_option:
        raise LoweringError("block pointers (boundary_check / padding_option) are not supported", tr.b.loc)
    pointer, mask = mask_and_pointer(tr, pointer, mask)
    elem = pointer.dtype.elem
    if other is not None:
        if mask is None:
            raise LoweringError("`other` given without `mask`", tr.b.loc)
        other = S.broadcast_to(S.cast(as_tv(tr.b, other, elem if is_num(other) else None), elem),
                               pointer.type.shape)
    hints = {"cache_modifier": cache_modifier or "", "eviction_policy": eviction_policy or "",
             "volatile": bool(volatile), "is_async": bool(is_async)}
    return TV(tr.b.load(pointer.v, mask.v if mask is not None else None,
                        other.v if other is not None else None, hints), tr.b)


@builtin(tl.load)
def load(tr, pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False):
    return _load(tr, pointer, mask, other, boundary_check, padding_option, cache_modifier, eviction_policy,
                 volatile, False)


def tle_load(tr, pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
             eviction_policy="", volatile=False, is_async=False):
    return _load(tr, pointer, mask, other, boundary_check, padding_option, cache_modifier, eviction_policy,
                 volatile, _bool_constexpr(tr, is_async, "is_async"))


def _bool_constexpr(tr, x, what):
    if isinstance(x, TV):
        raise LoweringError(f"{what} must be a constexpr", tr.b.loc)
    return bool(x)


@builtin(tl.store)
def store(tr, pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    if boundary_check:
        raise LoweringError("block pointers (boundary_check) are not supported", tr.b.loc)
    pointer, mask = mask_and_pointer(tr, pointer, mask)
    elem = pointer.dtype.elem
    value = S.broadcast_to(S.cast(as_tv(tr.b, value, elem if is_num(value) else None), elem), pointer.type.shape)
    tr.b.store(pointer.v, value.v, mask.v if mask is not None else None,
               {"cache_modifier": cache_modifier or "", "eviction_policy": eviction_policy or ""})


def _atomic(kind):
    def impl(tr, pointer, val, mask=None, sem=None, scope=None):
        pointer, mask = mask_and_pointer(tr, pointer, mask)
        elem = pointer.dtype.elem
        val = S.broadcast_to(S.cast(as_tv(tr.b, val, elem if is_num(val) else None), elem), pointer.type.shape)
        attrs = {"sem": sem or "", "scope": scope or ""}
        return TV(tr.b.atomic(kind, pointer.v, val.v, mask.v if mask is not None else None, attrs), tr.b)
    return impl


BUILTINS[tl.atomic_add] = _atomic("add")
BUILTINS[tl.atomic_max] = _atomic("max")
BUILTINS[tl.atomic_min] = _atomic("min")


# -- element-wise math ---------------------------------------------------------------------------------
def _math(op, fp32_only=False):
    def impl(tr, x):
        x = as_tv(tr.b, x)
        allowed = ("fp32",) if fp32_only else ("fp32", "fp64")
        if x.dtype.name not in allowed:
            raise LoweringError(f"tl.{op} expects {' or '.join(allowed)}, got {x.dtype} (cast with .to())",
                                tr.b.loc)
        return TV(tr.b.unary(op, x.v), tr.b)
    return impl


for _name in ("exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "floor", "ceil"):
    BUILTINS[getattr(tl, _name)] = _math(_name)
BUILTINS[tl.rsqrt] = _math("rsqrt")
BUILTINS[tl.erf] = _math("erf")


@builtin(tl.sigmoid)
def sigmoid(tr, x):
    x = as_tv(tr.b, x)
    if not x.dtype.is_float:
        raise LoweringError(f"tl.sigmoid expects a float tile, got {x.dtype}", tr.b.loc)
    return TV(tr.b.unary("sigmoid", x.v), tr.b)


@builtin(tl.abs)
def abs_(tr, x):
    x = as_tv(tr.b, x)
    if x.dtype.is_bool or x.dtype.kind == "uint":
        return x
    return TV(tr.b.unary("abs", x.v), tr.b)


@builtin(tl.maximum)
def maximum(tr, x, y, propagate_nan=None):
    return S.minmax("maximum", x, y)


@builtin(tl.minimum)
def minimum(tr, x, y, propagate_nan=None):
    return S.minmax("minimum", x, y)


@builtin(tl.where)
def where(tr, condition, x, y):
    return S.where(condition, x, y)


@builtin(tl.fdiv)
def fdiv(tr, x, y, ieee_rounding=False):
    return S.truediv(x, y)


@builtin(tl.div_rn)
def div_rn(tr, x, y):
    return S.truediv(x, y)


@builtin(tl.cast)
def cast(tr, input, dtype, fp_downcast_rounding=None, bitcast=False):
    return S.cast(as_tv(tr.b, input), dtype, bitcast)


# -- shapes -------------------------------------------------------------------------------------------
@builtin(tl.trans, tl.permute)
def trans(tr, input, *dims):
    return S.trans(input, *dims)


@builtin(tl.expand_dims)
def expand_dims(tr, input, axis):
    axis = _int(tr, axis, "expand_dims axis")
    rank = input.type.rank
    if axis < 0:
        axis += rank + 1
    return TV(tr.b.expand_dims(input.v, axis), tr.b)


@builtin(tl.broadcast_to)
def broadcast_to(tr, input, *shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return S.broadcast_to(as_tv(tr.b, input), _shape(tr, shape))


@builtin(tl.reshape)
def reshape(tr, input, *shape, can_reorder=False):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    shape = _shape(tr, shape)
    n = 1
    for s in shape:
        n *= s
    if n != input.type.numel:
        raise LoweringError(f"reshape to {shape} changes the number of elements ({input.type.numel})", tr.b.loc)
    return TV(tr.b.reshape(input.v, shape), tr.b)


# -- reductions ---------------------------------------------------------------------------------------
def _axis(tr, x: TV, axis):
    rank = x.type.rank
    axis = _int(tr, axis, "reduction axis")
    if axis < 0:
        axis += rank
    if not 0 <= axis < rank:
        raise LoweringError(f"reduction axis {axis} out of range for rank {rank}", tr.b.loc)
    return axis


def _reduce(tr, kind, x, axis, keep_dims):
    x = as_tv(tr.b, x)
    if x.type.is_scalar:
        raise LoweringError(f"tl.{kind} of a scalar", tr.b.loc)
    if axis is None:
        if x.type.rank != 1:
            if kind in ("argmax", "argmin"):
                raise LoweringError(f"tl.{kind} over all axes of a rank-{x.type.rank} tile", tr.b.loc)
            while x.type.rank > 1:
                x = TV(tr.b.reduce(kind, x.v, x.type.rank - 1, False), tr.b)
        axis = 0
    return TV(tr.b.reduce(kind, x.v, _axis(tr, x, axis), bool(keep_dims)), tr.b)


@builtin(tl.sum)
def sum_(tr, input, axis=None, keep_dims=False, dtype=None):
    if dtype is not None:
        input = S.cast(input, dtype)
    elif input.dtype.is_int and input.dtype.bits < 32:
        input = S.cast(input, T.i32 if input.dtype.is_signed or input.dtype.is_bool else T.u32)
    return _reduce(tr, "sum", input, axis, keep_dims)


def _promote_small(x: TV) -> TV:
    if x.dtype.bits < 32:
        return S.cast(x, T.fp32 if x.dtype.is_float else T.i32)
    return x


@builtin(tl.max)
def max_(tr, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    input = _promote_small(as_tv(tr.b, input))
    if return_indices:
        return (_reduce(tr, "max", input, axis, keep_dims), _reduce(tr, "argmax", input, axis, keep_dims))
    return _reduce(tr, "max", input, axis, keep_dims)


@builtin(tl.min)
def min_(tr, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    input = _promote_small(as_tv(tr.b, input))
    if return_indices:
        return (_reduce(tr, "min", input, axis, keep_dims), _reduce(tr, "argmin", input, axis, keep_dims))
    return _reduce(tr, "min", input, axis, keep_dims)


@builtin(tl.argmax)
def argmax(tr, input, axis, tie_break_left=True, keep_dims=False):
    return _reduce(tr, "argmax", _promote_small(as_tv(tr.b, input)), axis, keep_dims)


@builtin(tl.argmin)
def argmin(tr, input, axis, tie_break_left=True, keep_dims=False):
    return _reduce(tr, "argmin", _promote_small(as_tv(tr.b, input)), axis, keep_dims)


# -- matrix product -----------------------------------------------------------------------------------
@builtin(tl.dot)
def dot(tr, input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=tl.float32):
    a, b = input, other
    if a.type.rank != 2 or b.type.rank != 2:
        raise LoweringError(f"tl.dot needs 2-D tiles, got {a.type} and {b.type}", tr.b.loc)
    (m, k), (k2, n) = a.type.shape, b.type.shape
    if k != k2:
        raise LoweringError(f"tl.dot: inner dimensions differ ({a.type} @ {b.type})", tr.b.loc)
    if min(m, n, k) < 16:
        raise LoweringError(f"tl.dot needs every dimension >= 16, got {m}x{k} @ {k}x{n}", tr.b.loc)
    if a.dtype != b.dtype:
        raise LoweringError(f"tl.dot operands differ in dtype: {a.dtype} and {b.dtype}", tr.b.loc)
    out = to_dtype(out_dtype)
    if a.dtype.is_int:
        out = T.i32
    if acc is None:
        acc = full(tr, (m, n), 0, out)
    else:
        acc = as_tv(tr.b, acc)
        if acc.type.shape != (m, n):
            raise LoweringError(f"tl.dot accumulator shape {acc.type.shape} != {(m, n)}", tr.b.loc)
        out = acc.dtype
    if input_precision is None and allow_tf32 is not None:
        input_precision = "tf32" if allow_tf32 else "ieee"
    # input_precision applies to fp32 operands only (Triton ignores it for the others)
    attrs = {"input_precision": (input_precision or "tf32") if a.dtype == T.fp32 else "",
             "max_num_imprecise_acc": max_num_imprecise_acc}
    return TV(tr.b.dot(a.v, b.v, acc.v, out, attrs), tr.b)


# Triton's tensor member functions (x.sum(axis), x.max(0), ...)
TENSOR_METHODS = {"sum": sum_, "max": max_, "min": min_, "argmax": argmax, "argmin": argmin,
                  "reshape": reshape, "expand_dims": expand_dims, "broadcast_to": broadcast_to}
