"""How the tracer evaluates a kernel's expressions: names, literals, operators on tiles and constexprs, and
calls (builtins by identity, other jit functions inlined, plain Python on constexprs)."""
from __future__ import annotations

import ast
import builtins as py_builtins
import inspect
import operator

import triton.language as tl

from ..errors import LoweringError
from ..ir.ops import BinaryOp, CmpPred
from . import semantics as S
from .builtins import tensor_method
from .environment import ReturnSignal, hashable
from .extensions import TLE_RANGES
from .gpu import Buffer
from .jit_functions import unwrap_jit
from .semantics import TV, as_tv
from .source import function_source
from .tensor_desc import TensorDescriptor


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.BitAnd: operator.and_,
           ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift, ast.Pow: operator.pow}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
# Python builtins a kernel may call on constexprs.
_PY_CALLABLE_OK = {min, max, int, float, bool, len, abs, range, isinstance, tuple, list, str, print, round,
                   getattr, hasattr, divmod, pow, enumerate, zip}


class Expressions:
    """The tracer's expressions (a mixin of Tracer): names, literals, operators, calls and inlining."""

    # -- expressions --------------------------------------------------------------------------------
    def _eval(self, node, env):
        m = getattr(self, "_ex_" + type(node).__name__, None)
        if m is None:
            raise self._err(f"expression '{type(node).__name__}' is not supported in kernels", node)
        return m(node, env)

    def _lookup(self, name, env, node):
        if name in env:
            return env[name]
        g = self._src.globals
        if name in g:
            return g[name]
        if hasattr(py_builtins, name):
            return getattr(py_builtins, name)
        raise self._err(f"name '{name}' is not defined", node)

    def _ex_Name(self, node, env):
        return self._lookup(node.id, env, node)

    def _ex_Constant(self, node, env):
        return node.value

    def _ex_Tuple(self, node, env):
        return tuple(self._eval(e, env) for e in node.elts)

    def _ex_List(self, node, env):
        return [self._eval(e, env) for e in node.elts]

    def _ex_Dict(self, node, env):
        """A dict of Python values (tiles may be keys: they hash by identity), e.g. tle.call's layout."""
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                out.update(self._eval(v, env))
            else:
                key = self._eval(k, env)
                if not hashable(key):
                    raise self._err(f"a dict key must be hashable, got {type(key).__name__}", node)
                out[key] = self._eval(v, env)
        return out

    def _ex_Slice(self, node, env):
        parts = [self._eval(p, env) if p is not None else None for p in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def _ex_JoinedStr(self, node, env):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value))
            else:
                out.append(format(self._eval(v.value, env)))
        return "".join(out)

    def _ex_Attribute(self, node, env):
        obj = self._eval(node.value, env)
        if isinstance(obj, TV) and (method := tensor_method(node.attr)) is not None:
            return _TileMethod(self, method, obj)
        try:
            return getattr(obj, node.attr)
        except AttributeError:
            raise self._err(f"{type(obj).__name__} has no attribute '{node.attr}'", node)

    def _ex_Subscript(self, node, env):
        obj = self._eval(node.value, env)
        idx = self._eval(node.slice, env)
        return obj[idx]

    def _ex_BinOp(self, node, env):
        return self._binop(type(node.op), self._eval(node.left, env), self._eval(node.right, env), node)

    def _binop(self, optype, a, b, node):
        self._loc(node)
        if optype is ast.Pow and (isinstance(a, TV) or isinstance(b, TV)):
            raise self._err("** on runtime values is not supported (Triton semantics)", node)
        if optype is ast.MatMult:
            raise self._err("use tl.dot for matrix products", node)
        return _BINOPS[optype](a, b)

    def _ex_UnaryOp(self, node, env):
        x = self._eval(node.operand, env)
        self._loc(node)
        if isinstance(node.op, ast.Not):
            if isinstance(x, TV):
                return S.compare(CmpPred.EQ, x, 0) if not x.dtype.is_bool else ~x
            return not x
        return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[type(node.op)](x)

    def _ex_Compare(self, node, env):
        left = self._eval(node.left, env)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            right = self._eval(comp, env)
            self._loc(node)
            r = _CMPOPS[type(op)](left, right)
            result = r if result is None else self._logical(BinaryOp.AND, result, r)
            left = right
        return result

    def _ex_BoolOp(self, node, env):
        kind = BinaryOp.AND if isinstance(node.op, ast.And) else BinaryOp.OR
        result = self._eval(node.values[0], env)
        for v in node.values[1:]:
            if not isinstance(result, TV):     # Python short-circuit on constexprs
                if (kind is BinaryOp.AND and not result) or (kind is BinaryOp.OR and result):
                    return result
                result = self._eval(v, env)
                continue
            result = self._logical(kind, result, self._eval(v, env))
        return result

    def _logical(self, kind, a, b):
        if not isinstance(a, TV) and not isinstance(b, TV):
            return (a and b) if kind is BinaryOp.AND else (a or b)
        tv = a if isinstance(a, TV) else b
        a = as_tv(tv.b, a)
        b = as_tv(tv.b, b)
        a = a if a.dtype.is_bool else S.compare(CmpPred.NE, a, 0)
        b = b if b.dtype.is_bool else S.compare(CmpPred.NE, b, 0)
        return S.bitwise(kind, a, b)

    def _ex_IfExp(self, node, env):
        cond = self._eval(node.test, env)
        if isinstance(cond, TV):
            return S.where(cond, self._eval(node.body, env), self._eval(node.orelse, env))
        return self._eval(node.body if cond else node.orelse, env)

    def _ex_Call(self, node, env):
        fn = self._eval(node.func, env)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self._eval(a.value, env))
            else:
                args.append(self._eval(a, env))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                kwargs.update(self._eval(k.value, env))
            else:
                kwargs[k.arg] = self._eval(k.value, env)
        self._loc(node)
        return self.call(fn, args, kwargs, node)

    def call(self, fn, args, kwargs, node=None):
        impl = self.builtins.get(fn) if hashable(fn) else None
        if impl is not None:
            if not getattr(impl, "takes_buffers", False):
                _reject_buffers(fn, list(args) + list(kwargs.values()), self.b.loc)
            try:
                return impl(self, *args, **kwargs)
            except TypeError as e:
                raise self._err(f"bad arguments to {getattr(fn, '__name__', fn)}: {e}", node)
        inner = unwrap_jit(fn)
        if inner is not None:
            return self._inline(inner, args, kwargs, node)
        if getattr(fn, "__self__", None) is not None and isinstance(fn.__self__, TV):
            return fn(*args, **kwargs)
        if isinstance(getattr(fn, "__self__", None), TensorDescriptor):
            try:
                return fn(*args, **kwargs)
            except TypeError as e:
                raise self._err(f"bad arguments to desc.{fn.__name__}: {e}", node)
        if isinstance(fn, _TileMethod):
            return fn(*args, **kwargs)
        if fn is tl.range or fn is tl.static_range or (hashable(fn) and fn in TLE_RANGES):
            raise self._err(f"{fn.__name__} can only be used as the iterable of a for loop", node)
        if any(isinstance(a, TV) for a in list(args) + list(kwargs.values())):
            name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
            mod = getattr(fn, "__module__", "") or ""
            if mod.startswith("triton"):
                raise self._err(f"Triton builtin '{mod}.{name}' is not supported by tle yet", node)
            raise self._err(f"call to '{name}' on runtime values: only tle/Triton builtins and "
                            f"@tle.jit functions can take tiles", node)
        if fn in _PY_CALLABLE_OK or _is_plain_python(fn):
            return fn(*args, **kwargs)
        raise self._err(f"call to {fn!r} is not supported in kernels", node)

    def _inline(self, fn, args, kwargs, node):
        if self._depth > 32:
            raise self._err("call depth over 32: recursive @jit functions are not supported", node)
        src = function_source(fn)
        sig = inspect.signature(fn)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise self._err(f"calling {fn.__name__}: {e}", node)
        bound.apply_defaults()
        saved, saved_loc = self._src, self.b.loc
        self._src = src
        self._depth += 1
        try:
            self._exec_body(src.tree.body, dict(bound.arguments))
            result = None
        except ReturnSignal as r:
            result = r.value
        finally:
            self._src = saved
            self._depth -= 1
            self.b.loc = saved_loc
        return result


class _TileMethod:
    """`x.sum(axis)` and friends: a Triton builtin bound to the tile it was looked up on."""

    def __init__(self, tracer, impl, tile):
        self.tracer, self.impl, self.tile = tracer, impl, tile

    def __call__(self, *args, **kwargs):
        return self.impl(self.tracer, self.tile, *args, **kwargs)


def _is_plain_python(fn) -> bool:
    """Pure-Python helpers on constexprs (math.log2, triton.next_power_of_2, user functions...)."""
    mod = getattr(fn, "__module__", "") or ""
    return callable(fn) and not mod.startswith("triton.language")


def _reject_buffers(fn, args, loc):
    for a in args:
        items = a if isinstance(a, (list, tuple)) else [a]
        for x in items:
            if isinstance(x, Buffer):
                name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or str(fn)
                raise LoweringError(f"{name} got a tle.gpu buffer ({x.v.type}); it takes tiles: read the buffer "
                                    f"with tle.gpu.local_load(buf)", loc)
