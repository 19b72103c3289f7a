"""Triton's value semantics over the tile IR: the traced-value wrapper, implicit conversions,
broadcasting, and the arithmetic that Python operators map to.

A kernel is traced with real Python evaluation: constexprs and Python numbers stay Python values (so
they fold), and anything that depends on runtime data is a `TV`, whose operators emit IR.
"""
from __future__ import annotations

import numbers

import triton.language as tl

from ..errors import LoweringError
from ..ir import types as ir_types
from ..ir.builder import Builder
from ..ir.core import Value
from ..ir.ops import BinaryOp, CmpPred, UnaryOp


class TV:
    """A traced value: an IR value plus the builder that emits ops on it."""

    __slots__ = ("v", "b")

    def __init__(self, v: Value, b: Builder):
        self.v = v
        self.b = b

    # -- introspection used by kernels ------------------------------------------------------------
    @property
    def dtype(self):
        return self.v.type.elem

    @property
    def type(self):
        return self.v.type

    @property
    def shape(self):
        return list(self.v.type.shape)

    @property
    def numel(self):
        return self.v.type.numel

    @property
    def T(self):
        return trans(self)

    def __repr__(self):
        return f"TV({self.v!r}: {self.v.type})"

    def __bool__(self):
        raise LoweringError("a runtime value was used as a Python bool (use an `if` on a scalar, or tl.where)",
                            self.b.loc)

    def __iter__(self):
        raise LoweringError("a tile cannot be iterated in Python", self.b.loc)

    # -- operators --------------------------------------------------------------------------------
    def __add__(self, o): return binary(BinaryOp.ADD, self, o)
    def __radd__(self, o): return binary(BinaryOp.ADD, o, self)
    def __sub__(self, o): return binary(BinaryOp.SUB, self, o)
    def __rsub__(self, o): return binary(BinaryOp.SUB, o, self)
    def __mul__(self, o): return binary(BinaryOp.MUL, self, o)
    def __rmul__(self, o): return binary(BinaryOp.MUL, o, self)
    def __truediv__(self, o): return truediv(self, o)
    def __rtruediv__(self, o): return truediv(o, self)
    def __floordiv__(self, o): return floordiv(self, o)
    def __rfloordiv__(self, o): return floordiv(o, self)
    def __mod__(self, o): return mod(self, o)
    def __rmod__(self, o): return mod(o, self)
    def __and__(self, o): return bitwise(BinaryOp.AND, self, o)
    def __rand__(self, o): return bitwise(BinaryOp.AND, o, self)
    def __or__(self, o): return bitwise(BinaryOp.OR, self, o)
    def __ror__(self, o): return bitwise(BinaryOp.OR, o, self)
    def __xor__(self, o): return bitwise(BinaryOp.XOR, self, o)
    def __rxor__(self, o): return bitwise(BinaryOp.XOR, o, self)
    def __lshift__(self, o): return bitwise(BinaryOp.SHL, self, o)
    def __rlshift__(self, o): return bitwise(BinaryOp.SHL, o, self)
    def __rshift__(self, o): return bitwise(BinaryOp.SHR, self, o)
    def __rrshift__(self, o): return bitwise(BinaryOp.SHR, o, self)
    def __lt__(self, o): return compare(CmpPred.LT, self, o)
    def __le__(self, o): return compare(CmpPred.LE, self, o)
    def __gt__(self, o): return compare(CmpPred.GT, self, o)
    def __ge__(self, o): return compare(CmpPred.GE, self, o)
    def __eq__(self, o): return compare(CmpPred.EQ, self, o)
    def __ne__(self, o): return compare(CmpPred.NE, self, o)
    __hash__ = object.__hash__

    def __neg__(self):
        if self.dtype.is_bool:
            raise LoweringError("negation of a boolean tile", self.b.loc)
        refuse_fp8_compute(self.dtype, "negation", self.b.loc)
        return self._wrap(self.b.unary(UnaryOp.NEG, self.v))

    def __pos__(self):
        return self

    def __invert__(self):
        if not self.dtype.is_int:
            raise LoweringError(f"~ needs an integer or boolean value, got {self.dtype}", self.b.loc)
        return self._wrap(self.b.unary(UnaryOp.INVERT, self.v))

    def __getitem__(self, idx):
        return subscript(self, idx)

    # -- methods Triton tensors have ---------------------------------------------------------------
    def to(self, dtype, bitcast=False, fp_downcast_rounding=None):
        return cast(self, dtype, bitcast, fp_downcast_rounding)

    def trans(self, *dims):
        return trans(self, *dims)

    def _wrap(self, v: Value) -> "TV":
        return TV(v, self.b)


def constexpr_value(x):
    """The Python value of a tl.constexpr (anything else as it is)."""
    return x.value if isinstance(x, tl.constexpr) else x


def is_num(x) -> bool:
    return isinstance(x, numbers.Number) and not isinstance(x, TV)


def to_dtype(x) -> ir_types.DType:
    """Our DType from ours, Triton's (tl.float32), torch's, or a name."""
    if isinstance(x, ir_types.DType):
        return x
    name = getattr(x, "name", None)
    if isinstance(x, str):
        name = x
    if name is None:
        if type(x).__name__ == "dtype" and type(x).__module__ == "torch":
            dtype = ir_types.dtype_from_torch_name(str(x))
            if dtype is None:
                raise TypeError(f"torch dtype {x} is not supported by tle")
            return dtype
        raise TypeError(f"not a dtype: {x!r}")
    try:
        return ir_types.dtype_from_name(name)
    except KeyError:
        raise TypeError(f"dtype {name} is not supported by tle (its fp8 types are tl.float8e4nv and "
                        f"tl.float8e5)") from None


def num_dtype(x) -> ir_types.DType:
    """The dtype Triton gives a Python number used as an operand."""
    if isinstance(x, bool):
        return ir_types.i1
    if isinstance(x, int):
        if -2**31 <= x < 2**31:
            return ir_types.i32
        if 2**31 <= x < 2**32:           # as Triton types it: a uint32 keeps a uint32 tile's type
            return ir_types.u32
        if -2**63 <= x < 2**63:
            return ir_types.i64
        return ir_types.u64
    return ir_types.fp32


_KIND_RANK = {"bool": 0, "uint": 1, "int": 2, "float": 3}


def computation_type(a: ir_types.DType, a_num: bool, b: ir_types.DType, b_num: bool,
                     div_or_mod: bool) -> ir_types.DType:
    """Triton's implicit type of a binary operation (python numbers don't promote tensors of their
    own kind or above; half types compute / and % in fp32)."""
    if a_num != b_num:
        s, t = (a, b) if a_num else (b, a)
        if _KIND_RANK[s.kind] <= _KIND_RANK[t.kind]:
            if div_or_mod and t.name in ("fp16", "bf16"):
                return ir_types.fp32
            return t
    if "fp64" in (a.name, b.name):
        return ir_types.fp64
    if "fp32" in (a.name, b.name):
        return ir_types.fp32
    if "fp16" in (a.name, b.name):
        return ir_types.fp32 if div_or_mod else ir_types.fp16
    if a.name == "bf16" and b.name == "bf16":
        return ir_types.fp32 if div_or_mod else ir_types.bf16
    if "bf16" in (a.name, b.name):
        return ir_types.fp32
    if a.is_fp8 and b.is_fp8:                 # one fp8 kind stays fp8; two kinds meet in fp16
        return a if a == b else ir_types.fp16
    if a.is_fp8 or b.is_fp8:
        raise TypeError(f"cannot combine {a} and {b}: Triton combines fp8 values only with other floats")
    if div_or_mod and a.is_int and b.is_int and a.is_signed != b.is_signed and not (a.is_bool or b.is_bool):
        raise TypeError(f"cannot use /, // or % with {a} and {b}: they differ in signedness")
    return ir_types.promote(a, b)


def _builder(*xs) -> Builder:
    for x in xs:
        if isinstance(x, TV):
            return x.b
    raise AssertionError("no traced value among operands")


def const(b: Builder, x, dtype: ir_types.DType) -> TV:
    if dtype.is_int and not dtype.is_bool and isinstance(x, numbers.Number):
        lo, hi = (-(2 ** (dtype.bits - 1)), 2 ** (dtype.bits - 1) - 1) if dtype.is_signed else (0, 2 ** dtype.bits - 1)
        if isinstance(x, float):
            x = int(x)
        if not (lo <= x <= hi):
            raise LoweringError(f"scalar {x} is out of range for type {dtype}", b.loc)
    return TV(b.const(x, dtype), b)


def as_tv(b: Builder, x, dtype: ir_types.DType | None = None) -> TV:
    if isinstance(x, TV):
        return x
    if is_num(x):
        return const(b, x, dtype or num_dtype(x))
    raise LoweringError(f"expected a number or a tile, got {type(x).__name__} {x!r}", b.loc)


def cast(x, dtype, bitcast=False, fp_downcast_rounding=None) -> TV:
    if not isinstance(x, TV):
        raise LoweringError(".to() on a Python value", None)
    try:
        dtype = to_dtype(dtype)
    except TypeError as e:
        raise LoweringError(str(e), x.b.loc) from None
    if fp_downcast_rounding not in (None, "rtne"):
        raise LoweringError(f"fp_downcast_rounding={fp_downcast_rounding!r} is not supported: tle's conversions "
                            f"round to nearest even ('rtne')", x.b.loc)
    if x.type.is_pointer:
        raise LoweringError("casting pointers is not supported", x.b.loc)
    if bitcast and dtype.bits != x.dtype.bits:
        raise LoweringError(f"bitcast from {x.dtype} to {dtype} changes the bit width", x.b.loc)
    if not bitcast and x.dtype != dtype and (x.dtype.is_fp8 or dtype.is_fp8):
        return _fp8_cast(x, dtype)
    return TV(x.b.cast(x.v, dtype, bitcast), x.b)


def _fp8_cast(x: TV, dtype: ir_types.DType) -> TV:
    """A conversion to or from fp8. Triton converts fp8 only to and from floats, and its GPU code only
    between fp8 and fp16, bf16 or fp32: fp8 to the other fp8 kind or to fp64 goes through fp32 (exact), and
    fp64 to fp8, which would round twice that way, is refused."""
    src = x.dtype
    if not (src.is_float and dtype.is_float):
        raise LoweringError(f"cannot convert {src} to {dtype}: Triton converts fp8 only to and from floats "
                            f"(convert through tl.float32)", x.b.loc)
    if src == ir_types.fp64:
        raise LoweringError(f"cannot convert fp64 to {dtype}: Triton cannot compile it for the GPU, and going "
                            f"through fp32 rounds twice (write .to(tl.float32).to(...) if that is meant)", x.b.loc)
    if (src.is_fp8 and dtype.is_fp8) or dtype == ir_types.fp64:
        x = TV(x.b.cast(x.v, ir_types.fp32), x.b)
    return TV(x.b.cast(x.v, dtype), x.b)


def refuse_fp8_compute(dtype: ir_types.DType, what: str, loc):
    """Triton computes on fp8 values in fp8 (x + y, x * 2.0, tl.sum(x)), which no GPU instruction does:
    Triton fails to compile it. tle says so at the construct instead."""
    if dtype.is_fp8:
        raise LoweringError(f"{what} on {dtype} values: Triton computes it in fp8, which it cannot compile for "
                            f"the GPU; convert first (e.g. x.to(tl.float32))", loc)


def broadcast_to(x: TV, shape) -> TV:
    shape = tuple(shape)
    if x.type.shape == shape:
        return x
    b = x.b
    v = x.v
    try:
        fits = ir_types.broadcast_shapes(tuple(x.type.shape), shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise LoweringError(f"a tile of shape {list(x.type.shape)} does not broadcast to {list(shape)}", b.loc)
    if not v.type.is_scalar and len(v.type.shape) < len(shape):
        for _ in range(len(shape) - len(v.type.shape)):
            v = b.expand_dims(v, 0)
    return TV(b.broadcast(v, shape), b)


def broadcast_pair(a: TV, b_: TV) -> tuple[TV, TV]:
    try:
        shape = ir_types.broadcast_shapes(a.type.shape, b_.type.shape)
    except ValueError as e:
        raise LoweringError(str(e), a.b.loc)
    return broadcast_to(a, shape), broadcast_to(b_, shape)


def broadcast_all(xs: list[TV]) -> list[TV]:
    shape = ()
    try:
        for x in xs:
            shape = ir_types.broadcast_shapes(shape, x.type.shape)
    except ValueError as e:
        raise LoweringError(str(e), xs[0].b.loc)
    return [broadcast_to(x, shape) for x in xs]


def _operand_dtype(b: Builder, x) -> ir_types.DType:
    if is_num(x):
        return num_dtype(x)
    if isinstance(x, TV):
        return x.dtype
    # None, a string, a torch tensor given as a constexpr, ...: not a value a tile operation can take
    raise LoweringError(f"expected a number or a tile, got {type(x).__name__} {x!r}", b.loc)


def _operands(x, y, div_or_mod=False, computes: str = "") -> tuple[TV, TV]:
    """The operands converted to the type Triton computes `x op y` in, and broadcast. `computes` names the
    computation, which fp8 operands cannot be (tl.where only selects: no name)."""
    b = _builder(x, y)
    xd, yd = _operand_dtype(b, x), _operand_dtype(b, y)
    if isinstance(xd, ir_types.PointerType) or isinstance(yd, ir_types.PointerType):
        raise LoweringError("invalid operation on pointers", b.loc)
    try:
        ct = computation_type(xd, is_num(x), yd, is_num(y), div_or_mod)
    except TypeError as e:
        raise LoweringError(str(e), b.loc)
    if computes:
        refuse_fp8_compute(ct, computes, b.loc)
    x = const(b, x, ct) if is_num(x) else cast(x, ct)
    y = const(b, y, ct) if is_num(y) else cast(y, ct)
    return broadcast_pair(x, y)


def binary(op: BinaryOp, x, y) -> TV:
    b = _builder(x, y)
    xp = isinstance(x, TV) and x.type.is_pointer
    yp = isinstance(y, TV) and y.type.is_pointer
    if xp or yp:
        if op is BinaryOp.ADD or (op is BinaryOp.SUB and xp and not yp):
            ptr, off = (x, y) if xp else (y, x)
            if yp and xp:
                raise LoweringError("adding two pointers", b.loc)
            off = as_tv(b, off)
            if not off.dtype.is_int:
                raise LoweringError(f"pointer offset must be an integer, got {off.dtype}", b.loc)
            if op is BinaryOp.SUB:
                off = TV(b.unary(UnaryOp.NEG, off.v), b)
            ptr, off = broadcast_pair(ptr, off)
            return TV(b.addptr(ptr.v, off.v), b)
        raise LoweringError(f"operation '{op}' on pointers is not supported", b.loc)
    x, y = _operands(x, y, computes=f"arithmetic '{op}'")
    if op in (BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL) and x.dtype.is_bool:
        raise LoweringError(f"arithmetic '{op}' on booleans", b.loc)
    return TV(b.binary(op, x.v, y.v), b)


def truediv(x, y) -> TV:
    b = _builder(x, y)
    xd = num_dtype(x) if is_num(x) else x.dtype
    yd = num_dtype(y) if is_num(y) else y.dtype
    if xd.is_int and yd.is_int:
        x = float(x) if is_num(x) else cast(x, ir_types.fp32)
        y = float(y) if is_num(y) else cast(y, ir_types.fp32)
    x, y = _operands(x, y, div_or_mod=True, computes="division '/'")
    return TV(b.binary(BinaryOp.FDIV, x.v, y.v), b)


def floordiv(x, y) -> TV:
    b = _builder(x, y)
    x, y = _operands(x, y, div_or_mod=True, computes="division '//'")
    if not x.dtype.is_int:
        raise LoweringError(f"// needs integers, got {x.dtype} (Triton semantics)", b.loc)
    return TV(b.binary(BinaryOp.DIV, x.v, y.v), b)   # truncating, like Triton and C


def mod(x, y) -> TV:
    b = _builder(x, y)
    x, y = _operands(x, y, div_or_mod=True, computes="remainder '%'")
    return TV(b.binary(BinaryOp.REM, x.v, y.v), b)   # remainder with the dividend's sign


def bitwise(op: BinaryOp, x, y) -> TV:
    b = _builder(x, y)
    x, y = _operands(x, y, computes=f"bitwise '{op}'")
    if not x.dtype.is_int:
        raise LoweringError(f"bitwise '{op}' needs integer or boolean operands, got {x.dtype}", b.loc)
    return TV(b.binary(op, x.v, y.v), b)


def compare(pred: CmpPred, x, y) -> TV:
    b = _builder(x, y)
    x, y = _operands(x, y, computes=f"comparison '{pred}'")
    return TV(b.cmp(pred, x.v, y.v), b)


def minmax(op: BinaryOp, x, y) -> TV:
    b = _builder(x, y)
    x, y = _operands(x, y, computes=f"tl.{op}")
    return TV(b.binary(op, x.v, y.v), b)


def where(cond, x, y) -> TV:
    b = _builder(cond, x, y)
    cond = as_tv(b, cond)
    if not cond.dtype.is_bool:
        cond = compare(CmpPred.NE, cond, 0)
    if is_num(x) and is_num(y):
        x = as_tv(b, x)
    if isinstance(x, TV) or isinstance(y, TV):
        x, y = _operands(x, y)
    shape = ir_types.broadcast_shapes(cond.type.shape, x.type.shape)
    cond, x, y = broadcast_to(cond, shape), broadcast_to(x, shape), broadcast_to(y, shape)
    return TV(b.where(cond.v, x.v, y.v), b)


def trans(x: TV, *dims) -> TV:
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    rank = x.type.rank
    if not dims:
        if rank != 2:
            raise LoweringError(f"trans() without dims needs a 2-D tile, got rank {rank}", x.b.loc)
        dims = (1, 0)
    if sorted(dims) != list(range(rank)):
        raise LoweringError(f"trans dims {dims} are not a permutation of 0..{rank - 1}", x.b.loc)
    return TV(x.b.trans(x.v, dims), x.b)


def subscript(x: TV, idx) -> TV:
    """Triton tile indexing: only `None` (new axis) and `:` are allowed."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    b = x.b
    v = x.v
    dim = 0
    for item in idx:
        if item is None:
            v = b.expand_dims(v, dim)
            dim += 1
        elif isinstance(item, slice) and item == slice(None):
            dim += 1
        else:
            raise LoweringError(f"tile index {item!r}: only None and ':' are supported (Triton semantics)", b.loc)
    return TV(v, b)
