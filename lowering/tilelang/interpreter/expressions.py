"""TIR expressions compiled once into closures `f(frame) -> torch.Tensor`.

A value is a tensor over the frame's lanes: 0-d where every lane agrees, the T.Parallel loop's shape
inside one, (threads,) for thread-level code. Every node's result has the node's own TIR dtype (TVM's
parser made every implicit conversion an explicit Cast). `T.if_then_else` and `Select` are lazy as in
CUDA: each side runs only in the lanes that take it, so a guarded out-of-bounds read is no error.
"""
from __future__ import annotations

import math
import re

import torch

from . import dtypes
from .errors import DivisionByZero, Unsupported

_COMPARE = {"EQ": torch.eq, "NE": torch.ne, "LT": torch.lt, "LE": torch.le, "GT": torch.gt, "GE": torch.ge}
_ARITH = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul}
_UNARY = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "log10": torch.log10,
          "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
          "sigmoid": torch.sigmoid, "fabs": torch.abs, "abs": torch.abs, "erf": torch.erf, "sin": torch.sin,
          "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh, "sinh": torch.sinh, "cosh": torch.cosh,
          "asin": torch.asin, "acos": torch.acos, "atan": torch.atan, "floor": torch.floor, "ceil": torch.ceil,
          "trunc": torch.trunc, "nearbyint": torch.round, "exp10": lambda x: torch.pow(10.0, x).to(x.dtype)}
# T.atomic_*(..., return_prev=True): the element atomics that give the previous value
RETURNING_ATOMICS = {"tl.atomic_add_ret_elem_op": "add", "tl.atomic_max_ret_elem_op": "max",
                     "tl.atomic_min_ret_elem_op": "min"}
# the atomics a generated kernel brings as device functions (the TileLang backend's ATOMIC_HELPERS), called as
# T.call_extern(dtype, "tle_atomic_<kind><cuda::memory_order_<order>>", T.access_ptr(buf[i..], "rw"), [cmp,] value)
_EXTERN_ATOMIC = re.compile(r"tle_atomic_(and|or|xor|xchg|cas)<cuda::memory_order_(relaxed|acquire|release|acq_rel)>")
_PREDICATES = {"isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite}
_BINARY = {"pow": torch.pow, "fmod": torch.fmod, "atan2": torch.atan2, "hypot": torch.hypot,
           "copysign": torch.copysign, "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
           "bitwise_xor": torch.bitwise_xor, "shift_left": torch.bitwise_left_shift,
           "shift_right": torch.bitwise_right_shift}


def extern_atomic(name: str) -> str | None:
    """The kind of atomic an extern function of that name is ('and', ..., 'cas'), or None."""
    m = _EXTERN_ATOMIC.fullmatch(name)
    return m.group(1) if m else None


def is_call_extern(node) -> bool:
    return node.op.name.split(".", 1)[-1] == "call_extern"


def key(var) -> int:
    """A variable's identity (Python wrappers of one TIR variable differ; its handle does not)."""
    return var.__chandle__()


def _round_half_away(x):
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


class ExprCompiler:
    """Compiles expressions; `buffer(tir_buffer)` gives a buffer's static description."""

    def __init__(self, buffer, thread_index):
        self.buffer = buffer
        self.thread_index = thread_index      # axis -> closure giving the thread index along it

    def __call__(self, node):
        kind = type(node).__name__
        method = getattr(self, "_" + kind, None)
        if method is None:
            raise Unsupported(f"the TIR expression {kind} ({node})")
        return method(node)

    # -- leaves ----------------------------------------------------------------------------------------
    def _Var(self, node):
        k, name = key(node), node.name

        def var(fr):
            try:
                v = fr.env[k]
            except KeyError:
                raise Unsupported(f"variable {name} read where it has no value") from None
            if fr.in_parallel and k in fr.varying:
                raise Unsupported(f"the thread-dependent value {name} inside T.Parallel")
            return v
        return var

    _SizeVar = _Var

    def _IntImm(self, node):
        c = dtypes.const(int(node.value), node.dtype)
        return lambda fr: c

    def _FloatImm(self, node):
        c = dtypes.const(float(node.value), node.dtype)
        return lambda fr: c

    def _BufferLoad(self, node):
        info = self.buffer(node.buffer)
        idx = [self(i) for i in node.indices]
        if getattr(node, "predicate", None) is not None:
            raise Unsupported(f"a predicated load from {info.name}")

        def load(fr):
            return fr.memory.load(info, [i(fr) for i in idx], fr)
        return load

    # -- arithmetic ------------------------------------------------------------------------------------
    def _arith(self, node):
        a, b, fn, dt = self(node.a), self(node.b), _ARITH[type(node).__name__], str(node.dtype)
        if dt in ("uint16", "uint32"):
            return lambda fr: dtypes.wrap(fn(a(fr), b(fr)), dt)
        return lambda fr: fn(a(fr), b(fr))

    _Add = _Sub = _Mul = _arith

    def _division(self, node, integer, floating):
        a, b = self(node.a), self(node.b)
        if dtypes.is_float(node.dtype):
            return lambda fr: floating(a(fr), b(fr))

        def divide(fr):
            x, y = a(fr), b(fr)
            zero = y == 0
            if zero.any():
                live = zero if fr.mask is None else zero & fr.mask
                if live.any():
                    raise DivisionByZero(f"integer division by zero in {node}")
                y = torch.where(zero, torch.ones((), dtype=y.dtype), y)
            return integer(x, y)
        return divide

    def _Div(self, node):        # T.truncdiv; `/` on floats
        return self._division(node, lambda x, y: torch.div(x, y, rounding_mode="trunc"), torch.div)

    def _Mod(self, node):        # T.truncmod: C's remainder, the sign of the dividend
        return self._division(node, torch.fmod, torch.fmod)

    def _FloorDiv(self, node):   # `//`
        return self._division(node, lambda x, y: torch.div(x, y, rounding_mode="floor"),
                              lambda x, y: torch.floor(x / y))

    def _FloorMod(self, node):   # `%`
        return self._division(node, torch.remainder, torch.remainder)

    def _Min(self, node):
        # CUDA's min/max on floats return the other operand when one is NaN (fminf/fmaxf)
        a, b = self(node.a), self(node.b)
        fn = torch.fmin if dtypes.is_float(node.dtype) else torch.minimum
        return lambda fr: fn(a(fr), b(fr))

    def _Max(self, node):
        a, b = self(node.a), self(node.b)
        fn = torch.fmax if dtypes.is_float(node.dtype) else torch.maximum
        return lambda fr: fn(a(fr), b(fr))

    def _compare(self, node):
        a, b, fn = self(node.a), self(node.b), _COMPARE[type(node).__name__]
        return lambda fr: fn(a(fr), b(fr))

    _EQ = _NE = _LT = _LE = _GT = _GE = _compare

    def _And(self, node):
        a, b = self(node.a), self(node.b)
        return lambda fr: torch.logical_and(a(fr), b(fr))

    def _Or(self, node):
        a, b = self(node.a), self(node.b)
        return lambda fr: torch.logical_or(a(fr), b(fr))

    def _Not(self, node):
        a = self(node.a)
        return lambda fr: torch.logical_not(a(fr))

    def _Cast(self, node):
        v, dt = self(node.value), str(node.dtype)
        return lambda fr: dtypes.cast(v(fr), dt)

    def _Select(self, node):
        return self._lazy_select(self(node.condition), self(node.true_value), self(node.false_value),
                                 str(node.dtype))

    def _Let(self, node):
        k, value, body = key(node.var), self(node.value), self(node.body)

        def let(fr):
            fr.env[k] = value(fr)
            return body(fr)
        return let

    @staticmethod
    def _lazy_select(cond, then, other, dtype):
        """`cond ? then : other`, each side evaluated only in the lanes (under the frame's mask) that take it."""
        def select(fr):
            c = cond(fr)
            saved = fr.mask
            take = c if saved is None else saved & c
            skip = ~c if saved is None else saved & ~c
            try:
                fr.mask = take
                a = then(fr) if take.any() else None
                fr.mask = skip
                b = other(fr) if skip.any() else None
            finally:
                fr.mask = saved
            if a is None and b is None:
                return dtypes.zero(dtype)                   # no active lane takes either side
            if a is None:
                return b
            if b is None:
                return a
            return torch.where(c, a, b)
        return select

    def atomic(self, node, kind: str, ret: bool):
        """An element atomic: TileLang's `op(T.access_ptr(buf[i..]), value[, memory_order])`, or a device
        function of the kernel's, `T.call_extern(dtype, name, T.access_ptr(buf[i..], "rw"), [cmp,] value)`: the update
        (the interpreter runs one launch at a time, so the memory order has nothing to order); with `ret`, its
        previous value."""
        args = node.args[1:] if is_call_extern(node) else node.args
        ptr = args[0]
        if type(ptr).__name__ != "Call" or type(ptr.args[0]).__name__ != "BufferLoad":
            raise Unsupported(f"an atomic on {ptr}")
        load = ptr.args[0]
        info, idx = self.buffer(load.buffer), [self(i) for i in load.indices]
        cmp, value = (self(args[1]), self(args[2])) if kind == "cas" else (None, self(args[1]))

        def run(fr):
            return fr.memory.atomic(info, [i(fr) for i in idx], value(fr), kind, fr, ret=ret,
                                    cmp=None if cmp is None else cmp(fr))
        return run

    # -- calls -----------------------------------------------------------------------------------------
    def _Call(self, node):
        name = node.op.name
        short = name.split(".", 1)[1] if name.startswith(("tir.", "tirx.", "tl.")) else name
        args = node.args
        dt = str(node.dtype)
        if name in RETURNING_ATOMICS:
            return self.atomic(node, RETURNING_ATOMICS[name], ret=True)
        if short == "call_extern":
            fn = str(args[0].value)
            if extern_atomic(fn) is None:
                raise Unsupported(f"the extern function {fn} as a value")
            return self.atomic(node, extern_atomic(fn), ret=True)
        if short == "if_then_else":
            return self._lazy_select(self(args[0]), self(args[1]), self(args[2]), dt)
        if short == "launch_thread_idx":
            axis = int(args[0].value)
            return self.thread_index(axis)
        if short in _UNARY and len(args) == 1:
            x, fn = self(args[0]), _UNARY[short]
            return lambda fr: fn(x(fr))
        if short == "round":
            x = self(args[0])
            return lambda fr: _round_half_away(x(fr))
        if short in _PREDICATES:
            x, fn = self(args[0]), _PREDICATES[short]
            return lambda fr: fn(x(fr))
        if short == "bitwise_not":
            x = self(args[0])
            return lambda fr: dtypes.wrap(torch.bitwise_not(x(fr)), dt)
        if short in _BINARY and len(args) == 2:
            x, y, fn = self(args[0]), self(args[1]), _BINARY[short]
            return lambda fr: dtypes.wrap(fn(x(fr), y(fr)), dt)
        if short == "fma":
            x, y, z = (self(a) for a in args)
            return lambda fr: x(fr) * y(fr) + z(fr)
        if short == "reinterpret":
            x, src = self(args[0]), str(args[0].dtype)
            return lambda fr: dtypes.reinterpret(x(fr), src, dt)
        if short in ("infinity", "max_value", "min_value"):
            value = {"infinity": math.inf, "max_value": None, "min_value": None}[short]
            if value is None:
                info = torch.finfo(dtypes.storage(dt)) if dtypes.is_float(dt) else torch.iinfo(dtypes.storage(dt))
                value = info.max if short == "max_value" else info.min
            c = dtypes.const(value, dt)
            return lambda fr: c
        raise Unsupported(f"the call {name}")
