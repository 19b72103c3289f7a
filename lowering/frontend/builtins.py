"""Implementations of the Triton builtins (and `tle.load`) over the tile IR.

The frontend resolves a call by the identity of the called object: `tl.exp`, `tl.math.exp` and any
alias of them are the same function object, so they find the same entry here.
"""
from __future__ import annotations

import builtins as py_builtins

import triton.language as tl

from ..errors import LoweringError
from ..ir import ops
from ..ir import types as ir_types
from ..ir.ops import (AtomicKind, BinaryOp, CmpPred, HintKind, InputPrecision, MemScope, MemSem, ReduceKind,
                      ScanKind, UnaryOp)
from . import block_ptr, tensor_desc
from . import semantics as S
from .combine import trace_combine
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


def _hint(kind):
    def impl(tr, input, values):
        x = as_tv(tr.b, input)
        values = (values,) if isinstance(values, int) else tuple(values)
        values = tuple(_int(tr, v, f"tl.{kind} value") for v in values)
        if len(values) != max(x.type.rank, 1):
            raise LoweringError(f"tl.{kind} takes one value per axis of its operand ({x.type}), got {list(values)}",
                                tr.b.loc)
        if not x.type.is_pointer and (x.dtype.is_float or x.dtype.is_bool):
            raise LoweringError(f"tl.{kind} applies to integers and pointers, got {x.dtype}", tr.b.loc)
        return TV(tr.b.hint(kind, x.v, values), tr.b)
    return impl


# promises about the values (alignment, contiguity): kept for Triton, which uses them to vectorize
BUILTINS[tl.multiple_of] = _hint(HintKind.MULTIPLE_OF)
BUILTINS[tl.max_contiguous] = _hint(HintKind.MAX_CONTIGUOUS)


BUILTINS[tl.make_block_ptr] = block_ptr.make_block_ptr
BUILTINS[tl.advance] = block_ptr.advance
BUILTINS[tl.make_tensor_descriptor] = tensor_desc.make_tensor_descriptor


# -- memory -------------------------------------------------------------------------------------------
def as_mask(tr, mask) -> TV:
    """A load's or store's mask as a boolean tile (a non-bool mask compared with 0)."""
    mask = as_tv(tr.b, mask)
    return mask if mask.dtype.is_bool else S.compare(CmpPred.NE, mask, 0)


def mask_and_pointer(tr, pointer, mask):
    """The pointer tile and a boolean mask, broadcast together."""
    if not isinstance(pointer, TV) or not pointer.type.is_pointer:
        raise LoweringError(f"expected a pointer or pointer tile, got {pointer!r}", tr.b.loc)
    if mask is not None:
        pointer, mask = S.broadcast_pair(pointer, as_mask(tr, mask))
    return pointer, mask


def _block_pointer(tr, pointer, mask, other, boundary_check, what):
    """For a block pointer: its pointer tile and boundary mask (`mask`/`other` are not taken with one)."""
    if mask is not None or other is not None:
        raise LoweringError(f"{what} through a block pointer takes boundary_check, not mask/other", tr.b.loc)
    return block_ptr.pointers_and_mask(tr, pointer, boundary_check)


def _local_access(tr, what, boundary_check, padding_option, cache_modifier, eviction_policy, volatile,
                  is_async=False):
    """Refuse what applies to global memory only, for a load or store through a tle.gpu.local_ptr."""
    asked = [name for name, v in (("boundary_check", boundary_check), ("padding_option", padding_option),
                                  ("cache_modifier", cache_modifier), ("eviction_policy", eviction_policy),
                                  ("volatile", volatile), ("is_async", is_async)) if v]
    if asked:
        raise LoweringError(f"{what} through a tle.gpu.local_ptr takes mask and other only; {', '.join(asked)} "
                            f"apply to global memory", tr.b.loc)


def _load(tr, pointer, mask, other, boundary_check, padding_option, cache_modifier, eviction_policy,
          volatile, is_async):
    if getattr(pointer, "is_local_pointer", False):
        _local_access(tr, "tl.load", boundary_check, padding_option, cache_modifier, eviction_policy, volatile,
                      is_async)
        return pointer.load(tr, mask, other)
    if isinstance(pointer, block_ptr.BlockPtr):
        bp = pointer
        pointer, mask = _block_pointer(tr, pointer, mask, other, boundary_check, "tl.load")
        other = block_ptr.padding(tr, bp, padding_option, mask is not None)
    elif boundary_check or padding_option:
        raise LoweringError("boundary_check / padding_option apply to block pointers (tl.make_block_ptr), "
                            "not to a tile of pointers", tr.b.loc)
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
    if getattr(pointer, "is_local_pointer", False):
        _local_access(tr, "tl.store", boundary_check, "", cache_modifier, eviction_policy, False)
        return pointer.store(tr, value, mask)
    if isinstance(pointer, block_ptr.BlockPtr):
        pointer, mask = _block_pointer(tr, pointer, mask, None, boundary_check, "tl.store")
    elif boundary_check:
        raise LoweringError("boundary_check applies to block pointers (tl.make_block_ptr), not to a tile of "
                            "pointers", tr.b.loc)
    pointer, mask = mask_and_pointer(tr, pointer, mask)
    elem = pointer.dtype.elem
    value = S.broadcast_to(S.cast(as_tv(tr.b, value, elem if is_num(value) else None), elem), pointer.type.shape)
    attrs = {"cache_modifier": cache_modifier or "", "eviction_policy": eviction_policy or ""}
    halves = _cat_operands(pointer)
    if halves is not None:      # through tl.cat of two pointer tiles (into two arguments, say): a store per half
        for p, v, m in zip(halves, _halves(tr, value), _halves(tr, mask) if mask is not None else (None, None)):
            tr.b.store(p.v, v.v, m.v if m is not None else None, dict(attrs))
        return
    tr.b.store(pointer.v, value.v, mask.v if mask is not None else None, attrs)


def _cat_operands(x: TV) -> tuple[TV, TV] | None:
    """(input, other) where `x` is tl.cat(input, other) as cat() writes it (join, transpose, reshape)."""
    r = x.v.defining_op
    if r is None or r.defn is not ops.RESHAPE or x.type.rank != 1:
        return None
    t = r.operand("x").defining_op
    if t is None or t.defn is not ops.TRANS or tuple(t.attrs["perm"]) != (1, 0):
        return None
    j = t.operand("x").defining_op
    if j is None or j.defn is not ops.JOIN:
        return None
    return TV(j.operand("a"), x.b), TV(j.operand("b"), x.b)


def _halves(tr, x: TV) -> tuple[TV, TV]:
    """The first and second halves of the 1-D tile `x`: cat()'s operands where it is one, else split out."""
    known = _cat_operands(x)
    if known is not None:
        return known
    n = x.type.shape[0] // 2
    pairs = TV(tr.b.trans(tr.b.reshape(x.v, (2, n)), (1, 0)), tr.b)       # [n, 2]: (x[i], x[n + i])
    return TV(tr.b.split(pairs.v, 0), tr.b), TV(tr.b.split(pairs.v, 1), tr.b)


_SEMS = tuple(MemSem)            # the default ("") first
_SCOPES = tuple(MemScope)


def _atomic_attrs(tr, kind, sem, scope) -> dict:
    sem, scope = sem or "", scope or ""
    if sem not in _SEMS:
        raise LoweringError(f"tl.atomic_{kind}: sem must be one of {list(_SEMS[1:])}, got {sem!r}", tr.b.loc)
    if scope not in _SCOPES:
        raise LoweringError(f"tl.atomic_{kind}: scope must be one of {list(_SCOPES[1:])}, got {scope!r}", tr.b.loc)
    return {"sem": MemSem(sem), "scope": MemScope(scope)}


def _atomic_operand(tr, pointer, val):
    elem = pointer.dtype.elem
    return S.broadcast_to(S.cast(as_tv(tr.b, val, elem if is_num(val) else None), elem), pointer.type.shape)


def _atomic(kind):
    def impl(tr, pointer, val, mask=None, sem=None, scope=None):
        pointer, mask = mask_and_pointer(tr, pointer, mask)
        elem = pointer.dtype.elem
        if kind in (AtomicKind.AND, AtomicKind.OR, AtomicKind.XOR) and not elem.is_int:
            raise LoweringError(f"tl.atomic_{kind} takes integer memory, got {elem}", tr.b.loc)
        if elem.is_fp8:
            raise LoweringError(f"tl.atomic_{kind} on {elem} memory: Triton's atomics take no fp8", tr.b.loc)
        val = _atomic_operand(tr, pointer, val)
        attrs = _atomic_attrs(tr, kind, sem, scope)
        return TV(tr.b.atomic(kind, pointer.v, val.v, mask.v if mask is not None else None, attrs), tr.b)
    return impl


for _kind in AtomicKind:
    BUILTINS[getattr(tl, f"atomic_{_kind}")] = _atomic(_kind)


@builtin(tl.atomic_cas)
def atomic_cas(tr, pointer, cmp, val, sem=None, scope=None):
    pointer, _ = mask_and_pointer(tr, pointer, None)
    cmp, val = _atomic_operand(tr, pointer, cmp), _atomic_operand(tr, pointer, val)
    attrs = _atomic_attrs(tr, "cas", sem, scope)
    return TV(tr.b.atomic_cas(pointer.v, cmp.v, val.v, attrs), tr.b)


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


for _op in (UnaryOp.EXP, UnaryOp.EXP2, UnaryOp.LOG, UnaryOp.LOG2, UnaryOp.SQRT, UnaryOp.SIN, UnaryOp.COS,
            UnaryOp.FLOOR, UnaryOp.CEIL):
    BUILTINS[getattr(tl, _op.value)] = _math(_op)
BUILTINS[tl.rsqrt] = _math(UnaryOp.RSQRT)
BUILTINS[tl.erf] = _math(UnaryOp.ERF)


# CUDA libdevice (tl.extra.cuda.libdevice, or tl.extra.libdevice): float functions by arity
LIBDEVICE_ARITY = {
    **dict.fromkeys(("tanh", "sinh", "cosh", "tan", "asin", "acos", "atan", "asinh", "acosh", "atanh", "exp",
                     "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "cbrt", "erf",
                     "erfc", "erfinv", "lgamma", "tgamma", "floor", "ceil", "trunc", "round", "rint",
                     "nearbyint", "sin", "cos", "sinpi", "cospi", "normcdf", "j0", "j1", "y0", "y1"), 1),
    **dict.fromkeys(("pow", "fmod", "atan2", "hypot", "copysign", "fdim", "nextafter", "remainder"), 2),
    "fma": 3,
}


def _libdevice(name):
    def impl(tr, *args):
        if len(args) != LIBDEVICE_ARITY[name]:
            raise LoweringError(f"libdevice.{name} takes {LIBDEVICE_ARITY[name]} arguments, got {len(args)}",
                                tr.b.loc)
        tiles = [as_tv(tr.b, a) for a in args if isinstance(a, TV)]
        if not tiles:
            raise LoweringError(f"libdevice.{name} needs a runtime operand", tr.b.loc)
        dtype = tiles[0].dtype
        if dtype.name not in ("fp32", "fp64") or any(t.dtype != dtype for t in tiles):
            raise LoweringError(f"libdevice.{name} takes fp32 or fp64 operands of one dtype, got "
                                f"{', '.join(str(t.dtype) for t in tiles)} (cast with .to())", tr.b.loc)
        vals = S.broadcast_all([S.cast(as_tv(tr.b, a, dtype), dtype) for a in args])
        return TV(tr.b.libdevice(name, [v.v for v in vals]), tr.b)
    return impl


def _register_libdevice():
    import triton.language.extra.cuda.libdevice as cuda_libdevice
    import triton.language.extra.libdevice as libdevice
    for name in LIBDEVICE_ARITY:
        for module in (libdevice, cuda_libdevice):
            if hasattr(module, name):
                BUILTINS[getattr(module, name)] = _libdevice(name)
    BUILTINS[tl.fma] = _libdevice("fma")


_register_libdevice()


@builtin(tl.umulhi)
def umulhi(tr, x, y):
    x, y = as_tv(tr.b, x), as_tv(tr.b, y)
    if x.dtype != y.dtype or x.dtype.name not in ("i32", "u32", "i64", "u64"):
        raise LoweringError(f"tl.umulhi takes two 32- or 64-bit integer operands of one dtype, got {x.dtype} and "
                            f"{y.dtype}", tr.b.loc)
    x, y = S.broadcast_pair(x, y)
    return TV(tr.b.binary(BinaryOp.UMULHI, x.v, y.v), tr.b)


@builtin(tl.clamp)
def clamp(tr, x, min, max, propagate_nan=tl.PropagateNan.NONE):
    _no_nan_propagation(tr, propagate_nan, "tl.clamp")
    return S.minmax(BinaryOp.MINIMUM, S.minmax(BinaryOp.MAXIMUM, x, min), max)


def _no_nan_propagation(tr, propagate_nan, what):
    if propagate_nan not in (None, tl.PropagateNan.NONE):
        raise LoweringError(f"{what}(propagate_nan={propagate_nan}) is not supported: tle's maximum and minimum "
                            f"return the other operand when one is NaN (Triton's default)", tr.b.loc)


@builtin(tl.sigmoid)
def sigmoid(tr, x):
    x = as_tv(tr.b, x)
    if not x.dtype.is_float:
        raise LoweringError(f"tl.sigmoid expects a float tile, got {x.dtype}", tr.b.loc)
    S.refuse_fp8_compute(x.dtype, "tl.sigmoid", tr.b.loc)
    return TV(tr.b.unary(UnaryOp.SIGMOID, x.v), tr.b)


@builtin(tl.abs)
def abs_(tr, x):
    x = as_tv(tr.b, x)
    if x.dtype.is_bool or x.dtype.kind == "uint":
        return x
    return TV(tr.b.unary(UnaryOp.ABS, x.v), tr.b)


@builtin(tl.maximum)
def maximum(tr, x, y, propagate_nan=None):
    _no_nan_propagation(tr, propagate_nan, "tl.maximum")
    return S.minmax(BinaryOp.MAXIMUM, x, y)


@builtin(tl.minimum)
def minimum(tr, x, y, propagate_nan=None):
    _no_nan_propagation(tr, propagate_nan, "tl.minimum")
    return S.minmax(BinaryOp.MINIMUM, x, y)


def _python_extremum(kind: BinaryOp, name: str, python_fn):
    """Python's min/max in a kernel, as Triton reads them: on constexprs Python's own, with a runtime value
    among the arguments tl.minimum / tl.maximum folded left to right (NaN not propagated, as there)."""
    def impl(tr, *args, **kwargs):
        if not any(isinstance(a, TV) for a in args):
            return python_fn(*args, **kwargs)
        if kwargs or len(args) < 2:
            raise LoweringError(f"{name}() of runtime values takes two or more values and no keywords", tr.b.loc)
        out = args[0]
        for a in args[1:]:
            out = S.minmax(kind, out, a)
        return out
    return impl


BUILTINS[py_builtins.min] = _python_extremum(BinaryOp.MINIMUM, "min", py_builtins.min)
BUILTINS[py_builtins.max] = _python_extremum(BinaryOp.MAXIMUM, "max", py_builtins.max)


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
    return S.cast(as_tv(tr.b, input), dtype, bitcast, fp_downcast_rounding)


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


@builtin(tl.join)
def join(tr, a, b):
    if is_num(a) or is_num(b):          # a number takes the tile's dtype, as in Triton's arithmetic
        a, b = S._operands(a, b)
    a, b = as_tv(tr.b, a), as_tv(tr.b, b)
    if a.dtype != b.dtype:
        raise LoweringError(f"tl.join of {a.dtype} and {b.dtype}: the operands must have one dtype", tr.b.loc)
    a, b = S.broadcast_pair(a, b)
    return TV(tr.b.join(a.v, b.v), tr.b)


@builtin(tl.cat)
def cat(tr, input, other, can_reorder=False):
    """Two 1-D tiles of one shape and dtype end to end: `input`'s elements, then `other`'s. Triton's tl.cat
    asks can_reorder=True, leaving the order to the compiler; tle fixes it to this one on every backend
    (written as join, transpose and reshape, which keep their order), so a program means the same on both."""
    if not S.constexpr_value(can_reorder):
        raise LoweringError("tl.cat(..., can_reorder=False): Triton's tl.cat takes can_reorder=True only (tle "
                            "concatenates in order either way: input's elements, then other's)", tr.b.loc)
    a, b = as_tv(tr.b, input), as_tv(tr.b, other)
    if a.type.rank != 1 or a.type != b.type:
        raise LoweringError(f"tl.cat takes two 1-D tiles of one shape and dtype, got {a.type} and {b.type}",
                            tr.b.loc)
    pairs = TV(tr.b.join(a.v, b.v), tr.b)                          # [N, 2]: (input[i], other[i])
    rows = TV(tr.b.trans(pairs.v, (1, 0)), tr.b)                   # [2, N]: input, then other
    return TV(tr.b.reshape(rows.v, (2 * a.type.shape[0],)), tr.b)


@builtin(tl.split)
def split(tr, a):
    a = as_tv(tr.b, a)
    if a.type.is_scalar or a.type.shape[-1] != 2:
        raise LoweringError(f"tl.split needs a last axis of extent 2, got {a.type}", tr.b.loc)
    return TV(tr.b.split(a.v, 0), tr.b), TV(tr.b.split(a.v, 1), tr.b)


@builtin(tl.interleave)
def interleave(tr, a, b):
    joined = join(tr, a, b)
    shape = joined.type.shape
    return TV(tr.b.reshape(joined.v, tuple(shape[:-2]) + (shape[-2] * 2,)), tr.b)


# -- reductions ---------------------------------------------------------------------------------------
def _axis(tr, x: TV, axis, what: str = "reduction axis"):
    rank = x.type.rank
    axis = _int(tr, axis, what)
    if axis < 0:
        axis += rank
    if not 0 <= axis < rank:
        raise LoweringError(f"{what} {axis} out of range for rank {rank}", tr.b.loc)
    return axis


def _reduce(tr, kind, x, axis, keep_dims):
    x = as_tv(tr.b, x)
    if x.type.is_scalar:
        raise LoweringError(f"tl.{kind} of a scalar", tr.b.loc)
    S.refuse_fp8_compute(x.dtype, f"tl.{kind}", tr.b.loc)
    if axis is None:
        if x.type.rank != 1:
            if kind in (ReduceKind.ARGMAX, ReduceKind.ARGMIN):
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
        input = S.cast(input, ir_types.i32 if input.dtype.is_signed or input.dtype.is_bool else ir_types.u32)
    return _reduce(tr, ReduceKind.SUM, input, axis, keep_dims)


def _promote_small(x: TV) -> TV:
    if x.dtype.bits < 32:
        return S.cast(x, ir_types.fp32 if x.dtype.is_float else ir_types.i32)
    return x


@builtin(tl.max)
def max_(tr, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    input = _promote_small(as_tv(tr.b, input))
    if return_indices:
        return (_reduce(tr, ReduceKind.MAX, input, axis, keep_dims),
                _reduce(tr, ReduceKind.ARGMAX, input, axis, keep_dims))
    return _reduce(tr, ReduceKind.MAX, input, axis, keep_dims)


@builtin(tl.min)
def min_(tr, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    input = _promote_small(as_tv(tr.b, input))
    if return_indices:
        return (_reduce(tr, ReduceKind.MIN, input, axis, keep_dims),
                _reduce(tr, ReduceKind.ARGMIN, input, axis, keep_dims))
    return _reduce(tr, ReduceKind.MIN, input, axis, keep_dims)


@builtin(tl.argmax)
def argmax(tr, input, axis, tie_break_left=True, keep_dims=False):
    return _reduce(tr, ReduceKind.ARGMAX, _promote_small(as_tv(tr.b, input)), axis, keep_dims)


@builtin(tl.argmin)
def argmin(tr, input, axis, tie_break_left=True, keep_dims=False):
    return _reduce(tr, ReduceKind.ARGMIN, _promote_small(as_tv(tr.b, input)), axis, keep_dims)


# -- scans, sorting, counting -------------------------------------------------------------------------
def _scan(kind):
    def impl(tr, input, axis=0, reverse=False, dtype=None):
        x = as_tv(tr.b, input)
        if x.dtype == ir_types.bf16:                           # Triton scans bf16 in fp32
            x = S.cast(x, ir_types.fp32)
        if dtype is not None:
            x = S.cast(x, dtype)
        elif kind is ScanKind.SUM and x.dtype.is_int and x.dtype.bits < 32:      # as tl.sum does (not tl.cumprod)
            x = S.cast(x, ir_types.i32 if x.dtype.is_signed or x.dtype.is_bool else ir_types.u32)
        if x.type.is_scalar:
            raise LoweringError(f"tl.cum{kind} of a scalar", tr.b.loc)
        S.refuse_fp8_compute(x.dtype, f"tl.cum{kind}", tr.b.loc)
        return TV(tr.b.scan(kind, x.v, _axis(tr, x, axis), bool(reverse)), tr.b)
    return impl


BUILTINS[tl.cumsum] = _scan(ScanKind.SUM)
BUILTINS[tl.cumprod] = _scan(ScanKind.PROD)


def _combine_inputs(tr, input, what: str) -> tuple[list[TV], bool]:
    """The input tiles of tl.associative_scan / tl.reduce, and whether the kernel gave one tile (not a tuple)."""
    single = not isinstance(input, (tuple, list))
    tiles = [as_tv(tr.b, x) for x in ([input] if single else input)]
    if not tiles or any(t.type.is_scalar or t.type.is_pointer for t in tiles):
        raise LoweringError(f"{what} takes a tile or a tuple of tiles, got {input!r}", tr.b.loc)
    if len({tuple(t.shape) for t in tiles}) != 1:
        raise LoweringError(f"{what}: the input tiles must have one shape, got {[t.shape for t in tiles]}", tr.b.loc)
    return tiles, single


@builtin(tl.associative_scan)
def associative_scan(tr, input, axis, combine_fn, reverse=False):
    tiles, single = _combine_inputs(tr, input, "tl.associative_scan")
    axis = _axis(tr, tiles[0], axis)
    region, name = trace_combine(tr, combine_fn, [t.dtype for t in tiles], "tl.associative_scan")
    op = tr.b.combine(ops.COMBINE_SCAN, [t.v for t in tiles], [t.type for t in tiles], region,
                      {"axis": axis, "reverse": bool(reverse), "fn": name})
    results = tuple(TV(r, tr.b) for r in op.results)
    return results[0] if single else results


@builtin(tl.reduce)
def reduce_with(tr, input, axis, combine_fn, keep_dims=False):
    tiles, single = _combine_inputs(tr, input, "tl.reduce")
    rank = tiles[0].type.rank
    if axis is None and rank > 1:       # over every axis: the tiles flattened in row-major order, as Triton does
        tiles = [TV(tr.b.reshape(t.v, (t.type.numel,)), tr.b) for t in tiles]
    red_axis = 0 if axis is None else _axis(tr, tiles[0], axis)
    keep = bool(keep_dims) and axis is not None
    shape = list(tiles[0].shape)
    if keep:
        shape[red_axis] = 1
    else:
        del shape[red_axis]
    region, name = trace_combine(tr, combine_fn, [t.dtype for t in tiles], "tl.reduce")
    op = tr.b.combine(ops.COMBINE_REDUCE, [t.v for t in tiles], [ir_types.Type(tuple(shape), t.dtype) for t in tiles],
                      region, {"axis": red_axis, "keep_dims": keep, "fn": name})
    results = tuple(TV(r, tr.b) for r in op.results)
    if keep_dims and axis is None:      # every axis kept, with extent 1
        results = tuple(S.broadcast_to(r, (1,) * rank) for r in results)
    return results[0] if single else results


def _last_axis(tr, x: TV, axis, what):
    axis = x.type.rank - 1 if axis is None else _axis(tr, x, axis)
    if axis != x.type.rank - 1:
        raise LoweringError(f"{what} sorts along the last axis only (as Triton), got axis {axis}", tr.b.loc)
    return axis


@builtin(tl.sort)
def sort(tr, x, dim=None, descending=False):
    x = as_tv(tr.b, x)
    return TV(tr.b.sort(x.v, _last_axis(tr, x, dim, "tl.sort"), bool(descending)), tr.b)


@builtin(tl.gather)
def gather(tr, src, index, axis):
    """src's elements at `index` along `axis` (Triton's tl.gather and the tensor method src.gather(index, axis)):
    index is an integer tile of src's rank, with src's extents on the other axes. An index outside
    [0, src.shape[axis]) reads no defined value, as in Triton."""
    src, index = as_tv(tr.b, src), as_tv(tr.b, index)
    if src.type.is_scalar or index.type.is_scalar or not index.dtype.is_int or index.dtype.is_bool:
        raise LoweringError(f"tl.gather takes a source tile and an integer index tile, got {src.type} and "
                            f"{index.type}", tr.b.loc)
    rank = src.type.rank
    axis = _axis(tr, src, axis, "tl.gather axis")
    off_axis = [d for d in range(rank) if d != axis]
    if index.type.rank != rank or any(index.type.shape[d] != src.type.shape[d] for d in off_axis):
        raise LoweringError(f"tl.gather: the index ({index.type}) must have the source's rank and its extents "
                            f"off axis {axis} ({src.type})", tr.b.loc)
    return TV(tr.b.gather(src.v, index.v, axis), tr.b)


@builtin(tl.topk)
def topk(tr, x, k, dim=None):
    x = as_tv(tr.b, x)
    axis = _last_axis(tr, x, dim, "tl.topk")
    k = _int(tr, k, "tl.topk k")
    if k <= 0 or k & (k - 1) or k > x.type.shape[axis]:
        raise LoweringError(f"tl.topk: k must be a power of two no larger than the axis ({x.type.shape[axis]}), "
                            f"got {k}", tr.b.loc)
    return TV(tr.b.topk(x.v, k, axis), tr.b)


@builtin(tl.histogram)
def histogram(tr, input, num_bins, mask=None):
    x = as_tv(tr.b, input)
    if x.type.rank != 1 or not x.dtype.is_int:
        raise LoweringError(f"tl.histogram takes a 1-D integer tile, got {x.type}", tr.b.loc)
    num_bins = _int(tr, num_bins, "tl.histogram num_bins")
    if mask is not None:
        mask = as_tv(tr.b, mask)
        mask = S.broadcast_to(mask if mask.dtype.is_bool else S.compare(CmpPred.NE, mask, 0), x.type.shape)
    return TV(tr.b.histogram(x.v, mask.v if mask is not None else None, num_bins), tr.b)


# -- inline assembly, printing, assertions --------------------------------------------------------------
@builtin(tl.inline_asm_elementwise)
def inline_asm_elementwise(tr, asm, constraints, args, dtype, is_pure, pack):
    if isinstance(dtype, (tuple, list)):
        raise LoweringError("tl.inline_asm_elementwise with several results is not supported", tr.b.loc)
    tiles = S.broadcast_all([as_tv(tr.b, a) for a in args])
    shape = tiles[0].type.shape if tiles else ()
    result = ir_types.Type(tuple(shape), to_dtype(dtype))
    attrs = {"asm": str(asm), "constraints": str(constraints), "is_pure": bool(is_pure), "pack": _int(tr, pack, "pack")}
    return TV(tr.b.inline_asm([t.v for t in tiles], result, attrs), tr.b)


@builtin(tl.device_print)
def device_print(tr, prefix, *args, hex=False):
    tr.b.print_(str(prefix), [as_tv(tr.b, a).v for a in args], bool(hex))


@builtin(tl.device_assert)
def device_assert(tr, cond, msg="", mask=None):
    if not isinstance(cond, TV):
        if not cond:
            raise LoweringError(f"tl.device_assert on a constant false condition: {msg}", tr.b.loc)
        return
    if not cond.dtype.is_bool:
        cond = S.compare(CmpPred.NE, cond, 0)
    if mask is not None:      # asserted where the mask holds
        cond = S.bitwise(BinaryOp.OR, cond, S.compare(CmpPred.EQ, as_tv(tr.b, mask), 0))
    tr.b.assert_(cond.v, str(msg))


@builtin(tl.assume)
def assume(tr, cond):
    """A promise about runtime scalars (tl.assume(stride > 0)); a constexpr condition must hold."""
    if not isinstance(cond, TV):
        if not cond:
            raise LoweringError("tl.assume on a constant false condition", tr.b.loc)
        return
    if not cond.type.is_scalar or not cond.dtype.is_bool:
        raise LoweringError(f"tl.assume takes a scalar condition (a comparison), got {cond.type}", tr.b.loc)
    tr.b.assume(cond.v)


@builtin(tl.debug_barrier)
def debug_barrier(tr):
    tr.b.barrier()


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
    fp8 = a.dtype.is_fp8 and b.dtype.is_fp8            # Triton takes any two fp8 kinds together
    if a.dtype != b.dtype and not fp8:
        raise LoweringError(f"tl.dot operands differ in dtype: {a.dtype} and {b.dtype}", tr.b.loc)
    if a.dtype.bits == 8 and k < 32:
        raise LoweringError(f"tl.dot of {a.dtype} operands needs K >= 32 (Triton's smallest 8-bit product), "
                            f"got {m}x{k} @ {k}x{n}", tr.b.loc)
    out = to_dtype(out_dtype)
    if a.dtype.is_int:
        out = ir_types.i32
    if acc is None:
        acc = full(tr, (m, n), 0, out)
    else:
        acc = as_tv(tr.b, acc)
        if acc.type.shape != (m, n):
            raise LoweringError(f"tl.dot accumulator shape {acc.type.shape} != {(m, n)}", tr.b.loc)
        out = acc.dtype
    if fp8 and out not in (ir_types.fp16, ir_types.fp32):
        raise LoweringError(f"tl.dot of fp8 operands accumulates in fp32 or fp16, got {out}", tr.b.loc)
    if input_precision is None and allow_tf32 is not None:
        input_precision = InputPrecision.TF32 if allow_tf32 else InputPrecision.IEEE
    # input_precision applies to fp32 operands only (Triton ignores it for the others)
    fp32 = a.dtype == ir_types.fp32
    attrs = {"input_precision": (input_precision or InputPrecision.TF32) if fp32 else InputPrecision.NONE,
             "max_num_imprecise_acc": _imprecise_accumulation(tr, max_num_imprecise_acc, fp8, k)}
    return TV(tr.b.dot(a.v, b.v, acc.v, out, attrs), tr.b)


def _imprecise_accumulation(tr, value, fp8: bool, k: int) -> int | None:
    """tl.dot's max_num_imprecise_acc, which applies to fp8 operands only (Triton ignores it for the others):
    None where the backend's default holds."""
    if value is None or not fp8:
        return None
    value = _int(tr, value, "max_num_imprecise_acc")
    if value > k:
        raise LoweringError(f"tl.dot: max_num_imprecise_acc ({value}) must be <= K ({k})", tr.b.loc)
    return value


# Triton's tensor member functions (x.sum(axis), x.max(0), ...)
TENSOR_METHODS = {"sum": sum_, "max": max_, "min": min_, "argmax": argmax, "argmin": argmin,
                  "reshape": reshape, "expand_dims": expand_dims, "broadcast_to": broadcast_to,
                  "reduce": reduce_with, "associative_scan": associative_scan, "gather": gather}


def tensor_method(name: str):
    """The builtin behind `x.<name>(...)`: TENSOR_METHODS, else the tl function of that name where Triton makes
    it a tensor member function too (x.cast, x.cumsum, x.histogram, ...); None where there is none."""
    if name in TENSOR_METHODS:
        return TENSOR_METHODS[name]
    fn = getattr(tl, name, None)
    if fn is None or not hasattr(tl.tensor, name) or name.startswith("_"):
        return None
    try:
        return BUILTINS.get(fn)
    except TypeError:           # not hashable: not a builtin
        return None
