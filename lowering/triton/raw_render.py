"""A raw function on Triton: only when it is element-wise over its tile.

Triton has no threads to program, only whole tiles. A raw function is element-wise when every
tensor.extract / tensor.insert uses one and the same index vector, that index is computed from the
nvvm registers and constants alone, and it maps the call's threads one to one onto the elements of the
tile (e.g. the thread id, or blockid*blockdim+threadid, with as many threads as tile elements). Then
thread t computes element idx(t) from element idx(t) of its inputs and nothing else, so the function is
the same computation applied to whole tiles: one Triton statement per op, over the argument tiles.
This is decided by evaluating the index arithmetic for every thread of the launch domain (block ids are
0, block dims are the thread counts). Loops, branches, barriers, and thread ids used as data are not
element-wise.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedConstruct
from ..raw.body import BARRIERS, CMP_OPERATORS, SPECIAL, RawBody, Stmt, cmpi_relation
from ..raw.meanings import MEANINGS, Form

BACKEND = "triton"
TL_DTYPE = {"i1": "tl.int1", "i8": "tl.int8", "i16": "tl.int16", "i32": "tl.int32", "i64": "tl.int64",
            "index": "tl.int32", "fp16": "tl.float16", "bf16": "tl.bfloat16", "fp32": "tl.float32",
            "fp64": "tl.float64"}
_UNSIGNED = {"i8": "tl.uint8", "i16": "tl.uint16", "i32": "tl.uint32", "index": "tl.uint32", "i64": "tl.uint64"}
_INTS = {"i1", "i8", "i16", "i32", "i64", "index"}
# each meaning of lowering/raw/meanings.py, by form, as Triton spells it
_INFIX = {"add": "+", "sub": "-", "mul": "*", "fdiv": "/", "div": "//", "rem": "%", "and": "&", "or": "|",
          "xor": "^", "shl": "<<", "shr": ">>", "udiv": "//", "urem": "%", "ushr": ">>"}
_CALL2 = {"max": "tl.maximum", "min": "tl.minimum", "umax": "tl.maximum", "umin": "tl.minimum"}
_MATH = {n: f"tl.{n}" for n in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "erf", "sin", "cos", "floor",
                                "ceil", "fma")}
_MATH.update(absf="tl.abs", absi="tl.abs", tanh="(2 * tl.sigmoid(2 * {0}) - 1)")
# ordered predicates are C's comparisons (false on NaN); unordered ones negate the opposite comparison
_CMPF = {"oeq": "({a} == {b})", "ogt": "({a} > {b})", "oge": "({a} >= {b})", "olt": "({a} < {b})",
         "ole": "({a} <= {b})", "une": "({a} != {b})", "one": "(({a} < {b}) | ({a} > {b}))",
         "ueq": "~(({a} < {b}) | ({a} > {b}))", "ugt": "~({a} <= {b})", "uge": "~({a} < {b})",
         "ult": "~({a} >= {b})", "ule": "~({a} > {b})", "ord": "(({a} == {a}) & ({b} == {b}))",
         "uno": "(({a} != {a}) | ({b} != {b}))", "false": "False", "true": "True"}


@dataclass
class Elementwise:
    """A raw function seen as whole-tile computation: `stmts` are its data statements in order (the index
    arithmetic is gone), `static` the thread-uniform integers it uses (constants, block dims)."""
    body: RawBody
    shape: tuple[int, ...]
    stmts: list[Stmt]
    static: dict[str, int]

    @property
    def outputs(self) -> tuple[int, ...]:
        return self.body.outputs


def elementwise(body: RawBody, threads) -> tuple[Elementwise | None, str]:
    """(Elementwise, "") when `body`, run by `threads` (hardware["threads"]), is element-wise over its
    tile; else (None, the reason). Raises UnsupportedConstruct for ops outside the supported set."""
    body.check(BACKEND)
    return _Analysis(body, tuple(int(t) for t in threads)).run()


def require_elementwise(body: RawBody, threads) -> Elementwise:
    """elementwise(), raising UnsupportedConstruct (backend 'triton') with the reason when it is not."""
    ew, why = elementwise(body, threads)
    if ew is None:
        raise UnsupportedConstruct(f"raw function '{body.name}' (not element-wise over its tile)", BACKEND,
                                   body.loc, why + "; Triton lowers a raw function only when it is element-wise, "
                                   "TileLang runs any raw function as written")
    return ew


class _Analysis:
    def __init__(self, body: RawBody, threads: tuple[int, ...]):
        self.body = body
        self.threads = threads + (1,) * (3 - len(threads))
        n = math.prod(self.threads)
        lin = np.arange(n, dtype=np.int64)
        x, y = self.threads[0], self.threads[1]
        self.tid = (lin % x, (lin // x) % y, lin // (x * y))
        self.n = n
        self.vals: dict[str, np.ndarray] = {}    # integer values known for every thread
        self.varying: set[str] = set()           # ... that differ between threads
        self.index = None                        # the index vector every access uses

    def run(self) -> tuple[Elementwise | None, str]:
        data = []
        for s in self.body.stmts:
            why = self.stmt(s, data)
            if why:
                return None, why
        shape = self.shape()
        if isinstance(shape, str):
            return None, shape
        static = {k: int(v[0]) for k, v in self.vals.items() if k not in self.varying}
        return Elementwise(self.body, shape, data, static), ""

    def stmt(self, s: Stmt, data: list[Stmt]) -> str:
        if s.op in ("scf.for", "scf.if") or s.op in BARRIERS:
            return f"it uses {s.op}"
        if s.op in ("tensor.extract", "tensor.insert"):
            idx = s.operands if s.op == "tensor.extract" else s.operands[1:]
            why = self.access(s, idx)
            if why:
                return why
            if s.op == "tensor.insert" and s.operands[0] in self.varying:
                return "tensor.insert writes a value computed from the thread id"
            data.append(s)
            return ""
        v = self.evaluate(s)
        if v is not None:
            self.vals[s.name] = v
            if SPECIAL.get(s.op, ("",))[0] == "thread_id" or any(o in self.varying for o in s.operands):
                self.varying.add(s.name)
            return ""
        used = [o for o in s.operands if o in self.varying]
        if used:
            return f"{s.op} computes with the thread id (only tile indices may depend on it)"
        data.append(s)
        return ""

    def access(self, s: Stmt, idx) -> str:
        arg = self.body.args[s.attrs["arg"]].name
        if any(i not in self.vals for i in idx):
            return f"{s.op} of '{arg}' at a data-dependent index"
        vec = tuple(self.vals[i] for i in idx)
        if self.index is None:
            self.index = vec
        elif len(vec) != len(self.index) or not all(np.array_equal(a, b) for a, b in zip(vec, self.index)):
            return f"{s.op} of '{arg}' at a thread-dependent index other than the tile element"
        return ""

    def shape(self):
        """The tile shape every access covers, or the reason the index does not cover it."""
        if self.index is None:
            return ()
        used = {self.body.args[s.attrs["arg"]] for s in self.body.walk() if "arg" in s.attrs}
        shapes = {a.shape for a in used}
        if len(shapes) != 1:
            return "its tiles have different shapes: " + ", ".join(f"'{a.name}' {a.shape}" for a in used)
        shape = shapes.pop()
        if len(shape) != len(self.index):
            return f"the index has {len(self.index)} coordinates for tiles of rank {len(shape)}"
        if math.prod(shape) != self.n:
            return f"{self.n} threads do not match the {math.prod(shape)} elements of its tiles {shape}"
        inside = all(((c >= 0) & (c < d)).all() for c, d in zip(self.index, shape))
        if not inside or len(np.unique(np.ravel_multi_index(self.index, shape))) != self.n:
            return "its index does not reach every tile element exactly once"
        return shape

    def evaluate(self, s: Stmt):
        """The op's value for every thread when it is integer arithmetic on known values, else None."""
        if s.op in SPECIAL:
            kind, axis = SPECIAL[s.op]
            value = {"thread_id": self.tid[axis], "block_dim": self.threads[axis], "block_id": 0,
                     "grid_dim": 1}[kind]
            return np.broadcast_to(np.int64(value), (self.n,)) if np.ndim(value) == 0 else value
        dt = self.body.dtype.get(s.name)
        if s.op == "arith.constant":
            return np.full(self.n, int(s.attrs["value"]), np.int64) if dt in _INTS else None
        if dt not in _INTS or not all(o in self.vals for o in s.operands):
            return None
        a = [self.vals[o] for o in s.operands]
        op = s.op.split(".")[1]
        with np.errstate(all="ignore"):
            if op in ("divsi", "divui", "remsi", "remui") and (a[1] == 0).any():
                return None
            f = _INT_EVAL.get(op)
            if op == "cmpi":
                return _CMPI[cmpi_relation(s.attrs["predicate"])[0]](*a).astype(np.int64)
            return None if f is None else np.asarray(f(*a), dtype=np.int64)


def _tdiv(a, b):
    return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))


_INT_EVAL = {"addi": np.add, "subi": np.subtract, "muli": np.multiply, "divsi": _tdiv, "divui": np.floor_divide,
             "remsi": lambda a, b: a - b * _tdiv(a, b), "remui": np.remainder, "minsi": np.minimum,
             "maxsi": np.maximum, "minui": np.minimum, "maxui": np.maximum, "andi": np.bitwise_and,
             "ori": np.bitwise_or, "xori": np.bitwise_xor, "shli": np.left_shift, "shrsi": np.right_shift,
             "shrui": np.right_shift, "index_cast": lambda a: a, "extsi": lambda a: a, "extui": lambda a: a,
             "trunci": lambda a: a, "select": lambda c, a, b: np.where(c != 0, a, b), "absi": np.abs}
_CMPI = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
         "ge": np.greater_equal}


# -- rendering ------------------------------------------------------------------------------------------
def render_triton(ew: Elementwise, arg_exprs: list[str], names=None) -> tuple[list[str], dict[int, str]]:
    """Triton statements computing the written tiles: (lines, {output arg index: name of its final tile}).
    `arg_exprs[k]` is the Triton expression of argument k's tile; `names` gives fresh identifiers: a
    callable (hint -> name), a prefix string, or None for `raw_<function>_<n>`. An output that no
    statement writes element-wise (a constant) is broadcast to the tile shape."""
    body = ew.body
    if len(arg_exprs) != len(body.args):
        raise ValueError(f"raw function '{body.name}' takes {len(body.args)} tiles, got {len(arg_exprs)}")
    fresh = _namer(names, "raw_" + re.sub(r"\W", "_", body.name) + "_")
    r = _Triton(body, ew.static, fresh)
    current = list(arg_exprs)
    tiled = set(arg_exprs)
    for s in ew.stmts:
        if s.op == "tensor.extract":           # every access is at the tile element: no index to render
            r.expr[s.name] = current[s.attrs["arg"]]
        elif s.op == "tensor.insert":
            current[s.attrs["arg"]] = r.value(s.operands[0])
        elif s.op == "arith.constant":
            r.expr[s.name] = literal(s.attrs["value"], body.dtype[s.name])
        else:
            a = [r.value(o) for o in s.operands]
            r.op(s, a)
            if any(x in tiled for x in a):
                tiled.add(r.expr[s.name])
    finals = {}
    for k in ew.outputs:
        v, arg = current[k], body.args[k]
        if v not in tiled:           # a scalar: give it the tile's shape
            n = fresh("out")
            fill = "|" if arg.dtype == "i1" else "+"
            r.lines.append(f"{n} = tl.zeros({list(ew.shape)!r}, dtype={TL_DTYPE[arg.dtype]}) {fill} {v}")
            v = n
        finals[k] = v
    return r.lines, finals


def _namer(names, default_prefix: str):
    if callable(names):
        return names
    prefix = default_prefix if names is None else names
    count = iter(range(1 << 62))
    return lambda hint=None: f"{prefix}{next(count)}"


def literal(value, dtype: str) -> str:
    if dtype == "i1":
        return "True" if value else "False"
    if dtype.startswith(("fp", "bf")):
        text = f"float('{value}')" if math.isinf(value) or math.isnan(value) else repr(float(value))
        return text if dtype == "fp32" else f"tl.cast({text}, {TL_DTYPE[dtype]})"
    return str(int(value)) if dtype in ("i32", "index") else f"tl.cast({int(value)}, {TL_DTYPE[dtype]})"


def _to(x: str, t: str, bitcast: bool = False) -> str:
    """`x` converted to Triton dtype `t` (tl.cast for a literal, where `.to` does not parse)."""
    extra = ", bitcast=True" if bitcast else ""
    return f"{x}.to({t}{extra})" if _atomic(x) else f"tl.cast({x}, {t}{extra})"


def _atomic(x: str) -> bool:
    """Is `x` an identifier, or one parenthesized expression (so that `x.to(...)` applies to all of it)?"""
    if re.fullmatch(r"[A-Za-z_]\w*", x):
        return True
    if not x.startswith("("):
        return False
    depth = 0
    for i, ch in enumerate(x):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return i == len(x) - 1
    return False


class _Triton:
    def __init__(self, body: RawBody, static: dict[str, int], fresh):
        self.dt = body.dtype
        self.static = static
        self.fresh = fresh
        self.expr: dict[str, str] = {}
        self.lines: list[str] = []

    def value(self, name: str) -> str:
        if name in self.expr:
            return self.expr[name]
        return literal(self.static[name], self.dt[name])    # a thread-uniform integer

    def op(self, s: Stmt, a: list[str]):
        src, dst = self.dt[s.operands[0]], self.dt[s.name]
        if MEANINGS[s.op] == (Form.CAST, "index_cast") and {src, dst} <= {"i32", "index"}:
            self.expr[s.name] = a[0]
            return
        if MEANINGS[s.op] == (Form.MATH, "powf"):
            e = self.powf(*a)
        else:
            e = self.scalar(s, a, src, dst)
        name = self.fresh(s.op.split(".")[1])
        self.lines.append(f"{name} = {e}")
        self.expr[s.name] = name

    def unsigned(self, x: str, dtype: str) -> str:
        return _to(x, "tl.int32") if dtype == "i1" else _to(x, _UNSIGNED[dtype], bitcast=True)

    def scalar(self, s: Stmt, a: list[str], src: str, dst: str) -> str:
        form, meaning = MEANINGS[s.op]
        if form is Form.MATH:
            f = _MATH[meaning]
            return f.format(*a) if "{" in f else f"{f}({', '.join(a)})"
        if form in (Form.ARITH, Form.SIGNED_DIV, Form.BITWISE, Form.SHIFT):   # Triton's // and % truncate
            return f"({a[0]} {_INFIX[meaning]} {a[1]})"
        if form is Form.MINMAX:
            return f"{_CALL2[meaning]}({a[0]}, {a[1]})"
        if form is Form.ROUNDED_DIV:
            return self.rounded_div(meaning, a[0], a[1], src)
        if form is Form.UNSIGNED:
            x, y = self.unsigned(a[0], src), self.unsigned(a[1], src)
            e = f"{_CALL2[meaning]}({x}, {y})" if meaning in _CALL2 else f"({x} {_INFIX[meaning]} {y})"
            return _to(e, TL_DTYPE[dst], bitcast=True)
        if form is Form.NAN_MINMAX:
            return f"tl.{meaning}imum({a[0]}, {a[1]}, propagate_nan=tl.PropagateNan.ALL)"
        if form is Form.NEG:
            return f"(-{a[0]})"
        if form is Form.SELECT:
            return f"tl.where({a[0]}, {a[1]}, {a[2]})"
        if form is Form.CMPI:
            relation, unsigned = cmpi_relation(s.attrs["predicate"])
            x, y = (self.unsigned(a[0], src), self.unsigned(a[1], src)) if unsigned else a
            return f"({x} {CMP_OPERATORS[relation]} {y})"
        if form is Form.CMPF:
            return _CMPF[s.attrs["predicate"]].format(a=a[0], b=a[1])
        return self.cast(meaning, a[0], src, dst)

    def rounded_div(self, meaning: str, x: str, y: str, src: str) -> str:
        """The truncating quotient, moved by one where the remainder is not 0 and the exact quotient lies the
        other way (ceil: positive, floor: negative)."""
        t = TL_DTYPE[src]
        if meaning == "uceil":
            ux, uy = self.unsigned(x, src), self.unsigned(y, src)
            return _to(f"(({ux} // {uy}) + (({ux} % {uy}) != 0).to({_UNSIGNED[src]}))", t, bitcast=True)
        same_sign = f"(({x} < 0) == ({y} < 0))"
        moved = f"((({x} % {y}) != 0) & {same_sign if meaning == 'ceil' else f'~{same_sign}'})"
        return f"(({x} // {y}) {'+' if meaning == 'ceil' else '-'} {moved}.to({t}))"

    def cast(self, op: str, x: str, src: str, dst: str) -> str:
        t = TL_DTYPE[dst]
        if op == "bitcast":
            return _to(x, t, bitcast=True)
        if op == "trunci" and dst == "i1":
            return f"(({x} & 1) == 1)"
        if src == "i1" and op in ("extsi", "sitofp"):     # a signed i1 is 0 or -1
            return f"(-{_to(x, t)})"
        if op in ("extui", "uitofp") and src != "i1":
            return _to(self.unsigned(x, src), t)
        if op == "fptoui":
            return _to(_to(x, _UNSIGNED[dst]), t, bitcast=True)
        return _to(x, t)

    def powf(self, x: str, y: str) -> str:
        """x ** y from exp2/log2 (Triton's language has no pow outside libdevice), with C's results for
        y == 0 and for a negative x with an integral y."""
        mag = self.fresh("pow")
        self.lines.append(f"{mag} = tl.exp2({y} * tl.log2(tl.abs({x})))")
        odd = f"(tl.floor({y} * 0.5) * 2 != {y})"
        neg = f"tl.where(tl.floor({y}) == {y}, tl.where({odd}, -{mag}, {mag}), float('nan'))"
        return f"tl.where({y} == 0, 1.0, tl.where({x} < 0, {neg}, {mag}))"
