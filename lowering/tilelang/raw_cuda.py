"""A tle.raw.dialect function as one CUDA `__device__` function, for TileLang kernels to import and call.

The function runs on every thread of the block as written (the programmer writes the barriers). Its
parameters follow the body's arguments: a tile is a pointer to its row-major shared-memory copy (the shapes
are the call's, so `memref.dim` is a constant), a global pointer is a pointer of the kernel's element type,
already offset, and a scalar is passed by value. It returns 0, as `T.call_extern` wants a result.

Every SSA scalar becomes a local of the body's name (`v12`), each line commented with its MLIR op and
source line. Types are spelled as TileLang's CUDA spells them (`half_t`, `bfloat16_t`, `signed char`,
`int64_t`, ...), and `index` is `int`, as in the TIR renderer (tilelang/raw_render.py), whose meaning this
follows op for op: fp16 / bf16 compute in float and round back, C's `/` and `%` truncate, unsigned ops read
their operands through the unsigned type of the same width, and a bitcast copies the bits.
"""
from __future__ import annotations

import math
import re
import struct

from ..errors import LoweringError, UnsupportedConstruct
from ..raw.body import BARRIERS, CMP_OPERATORS, SPECIAL, RawBody, Region, Stmt, cmpi_relation
from ..raw.meanings import MEANINGS, Form

BACKEND = "tilelang"
C_TYPE = {"i1": "bool", "i8": "signed char", "i16": "short", "i32": "int", "i64": "int64_t", "index": "int",
          "fp16": "half_t", "bf16": "bfloat16_t", "fp32": "float", "fp64": "double"}
UNSIGNED = {"i1": "unsigned int", "i8": "unsigned char", "i16": "unsigned short", "i32": "unsigned int",
            "index": "unsigned int", "i64": "uint64_t"}
HALVES = ("fp16", "bf16")
_REGISTER = {"thread_id": "threadIdx", "block_dim": "blockDim", "block_id": "blockIdx", "grid_dim": "gridDim"}
# a TileLang block is one-dimensional: past x, the thread id is 0 and the block's extent 1
_FLAT = {"thread_id": "0", "block_dim": "1"}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "fdiv": "/", "div": "/", "rem": "%", "and": "&", "or": "|",
          "xor": "^", "shl": "<<", "shr": ">>", "udiv": "/", "urem": "%", "ushr": ">>"}
_LOGICAL = {"and": "&&", "or": "||", "xor": "!="}          # bitwise ops on i1
# math ops by their float (fp32, and fp16 / bf16 through fp32) and double names
_MATH = {n: (n + "f", n) for n in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "erf", "sin", "cos",
                                   "floor", "ceil", "fma")}
_MATH.update(absf=("fabsf", "fabs"), powf=("powf", "pow"))
_FMINMAX = {"max": ("fmaxf", "fmax"), "min": ("fminf", "fmin")}
# ordered predicates are C's comparisons (false on NaN); unordered ones negate the opposite comparison
_CMPF = {"oeq": "{a} == {b}", "ogt": "{a} > {b}", "oge": "{a} >= {b}", "olt": "{a} < {b}", "ole": "{a} <= {b}",
         "une": "{a} != {b}", "one": "{a} < {b} || {a} > {b}", "ueq": "!({a} < {b} || {a} > {b})",
         "ugt": "!({a} <= {b})", "uge": "!({a} < {b})", "ult": "!({a} >= {b})", "ule": "!({a} > {b})",
         "ord": "{a} == {a} && {b} == {b}", "uno": "{a} != {a} || {b} != {b}", "false": "false", "true": "true"}
_COMMENT_COLUMN = 64
_C_KEYWORDS = set("""alignas alignof asm auto bool break case catch char class const constexpr continue default
    delete do double else enum explicit extern false float for friend goto if inline int long mutable namespace new
    operator private protected public register return short signed sizeof static struct switch template this throw
    true try typedef typename union unsigned using virtual void volatile while half_t bfloat16_t""".split())


def device_function(body: RawBody, name: str, shapes: list, pointees: dict[int, str]) -> str:
    """CUDA text of `__device__ __forceinline__ int <name>(<params>) { ... return 0; }`.
    Parameters, in body.args order: a tile (kind "tile") is `<C type>* <arg name>`: a pointer to its shared-memory
    copy, row-major with shape `shapes[k]` (a tuple of ints; memref.dim reads it); a pointer (kind "pointer") is
    `<C type>* <arg name>` where the C type is that of pointees[k] (a tle dtype name such as "fp32", "i32":
    the kernel's pointer's element type), already offset by the caller; a scalar (kind "scalar") is
    `<C type> <arg name>` by value."""
    body.check(BACKEND)
    if len(shapes) != len(body.args):
        raise ValueError(f"raw function '{body.name}' takes {len(body.args)} arguments, got {len(shapes)} shapes")
    return _Writer(body, name, list(shapes), dict(pointees)).function()


def c_type(dtype: str) -> str:
    return C_TYPE[dtype]


def is_float(dtype: str) -> bool:
    return dtype.startswith(("fp", "bf"))


def literal(value, dtype: str) -> str:
    """A C constant of `dtype`: floats in hex (exact), infinities and NaNs from their bits."""
    if dtype == "i1":
        return "true" if value else "false"
    if not is_float(dtype):
        bits = 64 if dtype == "i64" else 8 if dtype == "i8" else 16 if dtype == "i16" else 32
        v = int(value) & ((1 << bits) - 1)
        v = v - (1 << bits) if v >= 1 << (bits - 1) else v
        if bits == 64:       # the most negative value has no literal of its own
            return f"(int64_t)({v + 1}LL - 1)" if v == -2**63 else f"(int64_t){v}LL"
        if bits == 32:
            return "(-2147483647 - 1)" if v == -2**31 else str(v)
        return f"({C_TYPE[dtype]}){v}"
    value = float(value)
    if dtype == "fp64":
        if math.isinf(value) or math.isnan(value):
            return f"__longlong_as_double({struct.unpack('<q', struct.pack('<d', value))[0]}LL)"
        return value.hex()
    if math.isinf(value) or math.isnan(value):
        text = f"__int_as_float({struct.unpack('<i', struct.pack('<f', value))[0]})"
    else:
        text = struct.unpack("<f", struct.pack("<f", value))[0].hex() + "f"
    return text if dtype == "fp32" else f"{C_TYPE[dtype]}({text})"


def c_string(text: str) -> str:
    """A C string literal of `text` (UTF-8), non-printable bytes as 3-digit octal escapes."""
    out = []
    for b in text.encode("utf-8"):
        c = chr(b)
        if c in "\\\"":
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif 32 <= b < 127 and c != "?":      # '?' escaped: no trigraph can form
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def param_name(name: str) -> str:
    """An argument's name as a C identifier that no local (v<n>) and no keyword takes."""
    name = re.sub(r"\W", "_", name)
    if not name or name[0].isdigit() or name in _C_KEYWORDS or re.fullmatch(r"v\d+", name) or name.startswith("__"):
        name = "a_" + name
    return name


class _Writer:
    def __init__(self, body: RawBody, name: str, shapes: list, pointees: dict[int, str]):
        self.body, self.name, self.shapes, self.pointees = body, name, shapes, pointees
        self.dt = body.dtype
        self.lines: list[str] = []
        self.expr: dict[str, str] = {}          # SSA name -> the C name holding it (a parameter, or itself)
        self.pointee: dict[str, str] = {}       # pointer SSA name -> its element's tle dtype

    # -- the function ------------------------------------------------------------------------------------
    def function(self) -> str:
        params = []
        for k, a in enumerate(self.body.args):
            pname = param_name(a.name)
            if a.kind == "tile":
                self.check_tile(k)
                params.append(f"{self.ctype(a.dtype, None)}* {pname}")
            elif a.kind == "pointer":
                dtype = self.pointees.get(k)
                if dtype not in C_TYPE or dtype == "index":
                    raise UnsupportedConstruct(f"a pointer to {dtype} elements", BACKEND, self.body.loc,
                                               f"in raw function '{self.body.name}': argument '{a.name}'")
                params.append(f"{C_TYPE[dtype]}* {pname}")
                self.pointee[a.value] = dtype
                self.expr[a.value] = pname
            else:
                params.append(f"{self.ctype(a.dtype, None)} {pname}")
                self.expr[a.value] = pname
        head = f"__device__ __forceinline__ int {self.name}({', '.join(params)}) {{"
        where = self.where(self.body.loc)
        self.lines.append(head + (f"  // raw function {self.body.name}" + (f"  {where}" if where else "")))
        self.stmts(self.body.stmts, 1)
        self.lines.append("  return 0;")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def check_tile(self, k: int):
        a, shape = self.body.args[k], self.shapes[k]
        if shape is None or len(shape) != len(a.shape):
            raise LoweringError(f"raw function '{self.body.name}': tile argument '{a.name}' has {len(a.shape)} "
                                f"axes, but the tile passed has shape {shape}", self.body.loc)
        for d, (declared, passed) in enumerate(zip(a.shape, shape)):
            if declared is not None and int(declared) != int(passed):
                raise LoweringError(f"raw function '{self.body.name}': tile argument '{a.name}' has extent "
                                    f"{declared} along axis {d}, but the tile passed has shape {list(shape)}",
                                    self.body.loc)

        def error(j, message):
            return UnsupportedConstruct(f"tile argument '{self.body.args[j].name}'", BACKEND, self.body.loc, message)
        self.body.check_strides(error, [s if b.kind == "tile" else () for s, b in zip(self.shapes, self.body.args)])

    def ctype(self, dtype: str, s: Stmt | None) -> str:
        if dtype not in C_TYPE:
            where = s.loc if s is not None and s.loc else self.body.loc
            raise UnsupportedConstruct(f"a value of type {dtype}", BACKEND, where,
                                       f"in raw function '{self.body.name}'")
        return C_TYPE[dtype]

    def where(self, loc) -> str:
        return f"line {loc.line}" if loc is not None and getattr(loc, "line", 0) else ""

    def emit(self, code: str, indent: int, s: Stmt | None = None, note: str | None = None):
        text = "  " * indent + code
        what = note if note is not None else s.op if s is not None else None
        if what:
            where = self.where(s.loc if s is not None else None)
            text = text.ljust(_COMMENT_COLUMN) + f"  // {what}" + (f"  {where}" if where else "")
        self.lines.append(text.rstrip())

    def error(self, s: Stmt, construct: str, detail: str):
        raise UnsupportedConstruct(construct, BACKEND, s.loc or self.body.loc,
                                   f"in raw function '{self.body.name}': {detail}")

    def define(self, s: Stmt, expr: str, indent: int, const: bool = False, note: str | None = None):
        name = s.name
        self.emit(f"{'const ' if const else ''}{self.ctype(self.dt[name], s)} {name} = {expr};", indent, s, note)
        self.expr[name] = name

    # -- statements --------------------------------------------------------------------------------------
    def stmts(self, stmts: list[Stmt], indent: int):
        for s in stmts:
            self.stmt(s, indent)

    def stmt(self, s: Stmt, indent: int):
        a = [self.expr[o] for o in s.operands]
        if s.op == "arith.constant":
            self.define(s, literal(s.attrs["value"], self.dt[s.name]), indent, const=True)
        elif s.op in SPECIAL:
            kind, axis = SPECIAL[s.op]
            value = _FLAT[kind] if axis > 0 and kind in _FLAT else f"{_REGISTER[kind]}.{'xyz'[axis]}"
            self.define(s, f"({self.ctype(self.dt[s.name], s)}){value}", indent)
        elif s.op == "tensor.extract":
            self.define(s, f"{self.tile(s)}[{self.flat(s, a)}]", indent, note=s.attrs.get("spelled", s.op))
        elif s.op == "tensor.insert":
            self.emit(f"{self.tile(s)}[{self.flat(s, a[1:])}] = {a[0]};", indent, s, s.attrs.get("spelled", s.op))
        elif s.op in BARRIERS:
            self.barrier(s, indent)
        elif s.op in _OPS:
            _OPS[s.op](self, s, a, indent)
        elif s.op in MEANINGS:
            self.scalar(s, a, indent)
        else:
            self.error(s, s.op, "not an op of raw functions")

    def tile(self, s: Stmt) -> str:
        return param_name(self.body.args[s.attrs["arg"]].name)

    def flat(self, s: Stmt, indices: list[str]) -> str:
        """The row-major element offset of `indices` in the tile passed."""
        shape = [int(d) for d in self.shapes[s.attrs["arg"]]]
        if len(indices) != len(shape):
            self.error(s, f"{s.op} with {len(indices)} indices", f"the tile has {len(shape)} axes")
        terms = []
        for d, i in enumerate(indices):
            stride = math.prod(shape[d + 1:])
            terms.append(i if stride == 1 else f"{i} * {stride}")
        return " + ".join(terms) or "0"

    def barrier(self, s: Stmt, indent: int):
        ident, count = s.attrs.get("id"), s.attrs.get("count")
        if ident is None and count is None:
            return self.emit("__syncthreads();", indent, s)
        for x in (ident, count):
            if x is not None and is_float(self.dt[x]):
                self.error(s, f"{s.op} with a {self.dt[x]} operand", "barrier ids and counts are integers")
        regs = [f'"r"((int){self.expr[x]})' for x in (ident, count) if x is not None]
        text = "bar.sync %0, %1;" if len(regs) == 2 else "bar.sync %0;"
        if ident is None:          # a thread count alone: barrier 0
            text = "bar.sync 0, %0;"
        self.emit(f'asm volatile("{text}" :: {", ".join(regs)} : "memory");', indent, s)

    # -- FlagTree's memory, printing and assertion ops ------------------------------------------------------
    def memref_dim(self, s: Stmt, a, indent: int):
        shape, axis = self.shapes[s.attrs["arg"]], s.attrs["axis"]
        if not 0 <= axis < len(shape):
            self.error(s, f"memref.dim {axis}", f"the tile '{self.body.args[s.attrs['arg']].name}' has "
                                                f"{len(shape)} axes")
        self.define(s, literal(int(shape[axis]), self.dt[s.name]), indent, const=True)

    def atomic_rmw(self, s: Stmt, a, indent: int):
        """CUDA's atomics on the shared copy, returning the previous value."""
        kind, dtype = s.attrs["kind"], self.body.args[s.attrs["arg"]].dtype
        target = f"&{self.tile(s)}[{self.flat(s, a[1:])}]"
        value = a[0]
        if kind == "add" and dtype in ("i32", "fp32", "fp64"):
            expr = f"atomicAdd({target}, {value})"
        elif kind == "add" and dtype == "i64":        # two's complement: the unsigned add is the signed one
            expr = f"(int64_t)atomicAdd((unsigned long long*){target}, (unsigned long long){value})"
        elif kind == "add" and dtype in HALVES:
            native, to_native, from_native = (("__half", "__float2half", "__half2float") if dtype == "fp16" else
                                              ("__nv_bfloat16", "__float2bfloat16", "__bfloat162float"))
            expr = (f"{C_TYPE[dtype]}({from_native}(atomicAdd(reinterpret_cast<{native}*>({target}), "
                    f"{to_native}((float){value}))))")
        elif kind in ("max", "min") and dtype == "i32":
            expr = f"atomic{kind.capitalize()}({target}, {value})"
        elif kind in ("max", "min") and dtype == "i64":
            expr = f"(int64_t)atomic{kind.capitalize()}((long long*){target}, (long long){value})"
        else:
            self.error(s, f"memref.atomic_rmw {kind} on {dtype}",
                       "CUDA's atomics add i32, i64, fp16, bf16, fp32 and fp64, and take the max / min of i32 and i64")
        self.define(s, expr, indent)

    def getelementptr(self, s: Stmt, a, indent: int):
        dtype = self.pointee[s.operands[0]]
        if s.attrs["elem"] != dtype:
            self.error(s, f"llvm.getelementptr over {s.attrs['elem']} elements",
                       f"the pointer points to {dtype} elements (the kernel's pointer's element type)")
        step = a[1] if len(a) > 1 else str(s.attrs["constant"])
        self.pointee[s.name] = dtype
        self.emit(f"{C_TYPE[dtype]}* {s.name} = {a[0]} + {step};", indent, s)
        self.expr[s.name] = s.name

    def llvm_load(self, s: Stmt, a, indent: int):
        dtype = self.pointee[s.operands[0]]
        if self.dt[s.name] != dtype:
            self.error(s, f"llvm.load of {self.dt[s.name]}", f"the pointer points to {dtype} elements")
        self.define(s, f"*{a[0]}", indent)

    def llvm_store(self, s: Stmt, a, indent: int):
        dtype = self.pointee[s.operands[1]]
        if self.dt[s.operands[0]] != dtype:
            self.error(s, f"llvm.store of {self.dt[s.operands[0]]}", f"the pointer points to {dtype} elements")
        self.emit(f"*{a[1]} = {a[0]};", indent, s)

    def printf(self, s: Stmt, a, indent: int):
        """C's variadic promotions: floats (and halves) as double, narrow integers and i1 as int."""
        args = []
        for o, x in zip(s.operands, a):
            dtype = self.dt[o]
            if dtype in HALVES:
                args.append(f"(double)(float){x}")
            elif dtype == "fp32":
                args.append(f"(double){x}")
            elif dtype in ("i1", "i8", "i16"):
                args.append(f"(int){x}")
            else:
                args.append(x)
        self.emit(f"printf({', '.join([c_string(s.attrs['format'])] + args)});", indent, s)

    def assertion(self, s: Stmt, a, indent: int):
        """As CUDA's assert: where the condition is false, the message is printed and the thread traps."""
        self.emit(f"if (!{a[0]}) {{", indent, s)
        self.emit(f'printf("%s", {c_string(s.attrs["message"])});', indent + 1)
        self.emit("__trap();", indent + 1)
        self.emit("}", indent)

    # -- arith and math ----------------------------------------------------------------------------------
    def f(self, x: str, dtype: str) -> str:
        """An operand as the type it computes in (fp16 / bf16 in float)."""
        return f"(float){x}" if dtype in HALVES else x

    def back(self, expr: str, dtype: str) -> str:
        """A result computed in int (narrow integers) or float (fp16 / bf16) as its own type."""
        if dtype in HALVES:
            return f"{C_TYPE[dtype]}({expr})"
        if dtype in ("i8", "i16"):
            return f"({C_TYPE[dtype]})({expr})"
        return expr

    def u(self, x: str, dtype: str) -> str:
        return f"({UNSIGNED[dtype]}){x}"

    def scalar(self, s: Stmt, a: list[str], indent: int):
        form, meaning = MEANINGS[s.op]
        src, dst = self.dt[s.operands[0]], self.dt[s.name]
        for o in (*s.operands, s.name):
            self.ctype(self.dt[o], s)
        if form is Form.CAST and meaning == "bitcast":
            self.emit(f"{C_TYPE[dst]} {s.name};", indent, s)
            self.emit(f"__builtin_memcpy(&{s.name}, &{a[0]}, sizeof({s.name}));", indent)
            self.expr[s.name] = s.name
            return
        self.define(s, self.expression(s, form, meaning, a, src, dst), indent)

    def expression(self, s: Stmt, form: Form, meaning: str, a: list[str], src: str, dst: str) -> str:
        if form is Form.CAST:
            return self.cast(meaning, a[0], src, dst)
        if form is Form.SELECT:
            return f"{a[0]} ? {a[1]} : {a[2]}"
        if form is Form.CMPI:
            relation, unsigned = cmpi_relation(s.attrs["predicate"])
            x, y = (self.u(a[0], src), self.u(a[1], src)) if unsigned else a
            return f"{x} {CMP_OPERATORS[relation]} {y}"
        if form is Form.CMPF:
            return _CMPF[s.attrs["predicate"]].format(a=self.f(a[0], src), b=self.f(a[1], src))
        if form is Form.MATH:
            return self.math(s, meaning, a, src, dst)
        floating = is_float(src)
        x = [self.f(v, src) for v in a]
        if form is Form.NEG:
            return self.back(f"-{x[0]}", dst)
        if form is Form.ARITH:
            if src == "i1":       # arithmetic modulo 2
                return f"{a[0]} && {a[1]}" if meaning == "mul" else f"{a[0]} != {a[1]}"
            return self.back(f"{x[0]} {_INFIX[meaning]} {x[1]}", dst)
        if form is Form.SIGNED_DIV:
            return self.back(f"{x[0]} {_INFIX[meaning]} {x[1]}", dst)
        if form is Form.BITWISE:
            if src == "i1":
                return f"{a[0]} {_LOGICAL[meaning]} {a[1]}"
            return self.back(f"{a[0]} {_INFIX[meaning]} {a[1]}", dst)
        if form is Form.SHIFT:
            if meaning == "shl":    # shifted unsigned: a negative operand is no undefined behaviour
                return f"({C_TYPE[dst]})({self.u(a[0], src)} << {a[1]})"
            return self.back(f"{a[0]} >> {a[1]}", dst)
        if form is Form.MINMAX:
            if floating:
                fn = _FMINMAX[meaning][src == "fp64"]
                return self.back(f"{fn}({x[0]}, {x[1]})", dst)
            return f"{a[0]} {'>' if meaning == 'max' else '<'} {a[1]} ? {a[0]} : {a[1]}"
        if form is Form.NAN_MINMAX:    # NaN in, NaN out (fmaxf / fminf take the number over a NaN)
            fn = _FMINMAX[meaning][src == "fp64"]
            return self.back(f"({x[0]} != {x[0]} || {x[1]} != {x[1]}) ? {x[0]} + {x[1]} : {fn}({x[0]}, {x[1]})", dst)
        if form is Form.UNSIGNED:
            ux, uy = self.u(a[0], src), self.u(a[1], src)
            if meaning in ("umax", "umin"):
                return f"{ux} {'>' if meaning == 'umax' else '<'} {uy} ? {a[0]} : {a[1]}"
            return f"({C_TYPE[dst]})({ux} {_INFIX[meaning]} {uy})"
        if form is Form.ROUNDED_DIV:
            return self.rounded_div(meaning, a[0], a[1], src, dst)
        self.error(s, s.op, f"no CUDA spelling of {form.value} {meaning}")

    def math(self, s: Stmt, meaning: str, a: list[str], src: str, dst: str) -> str:
        if meaning == "absi":
            return self.back(f"{a[0]} < 0 ? -{a[0]} : {a[0]}", dst)
        if not is_float(src):
            self.error(s, f"{s.op} on {src}", "the math dialect's functions take floats")
        fn = _MATH[meaning][src == "fp64"]
        return self.back(f"{fn}({', '.join(self.f(x, src) for x in a)})", dst)

    def rounded_div(self, meaning: str, x: str, y: str, src: str, dst: str) -> str:
        """The truncating quotient, moved by one where the remainder is not 0 and the exact quotient lies the
        other way (ceil: positive, floor: negative)."""
        if meaning == "uceil":
            ux, uy = self.u(x, src), self.u(y, src)
            return f"({C_TYPE[dst]})({ux} / {uy} + ({ux} % {uy} != 0 ? 1 : 0))"
        relation = "==" if meaning == "ceil" else "!="
        moved = f"({x} % {y} != 0 && (({x} < 0) {relation} ({y} < 0)) ? 1 : 0)"
        return self.back(f"{x} / {y} {'+' if meaning == 'ceil' else '-'} {moved}", dst)

    def cast(self, op: str, x: str, src: str, dst: str) -> str:
        t = C_TYPE[dst]
        if op in ("extf", "truncf"):
            if dst in HALVES:
                return f"{t}((float){x})"
            return self.f(x, src) if dst == "fp32" and src in HALVES else f"({t}){self.f(x, src)}"
        if dst == "i1":                     # the low bit
            return f"(({self.f(x, src) if not is_float(src) else f'(int){self.f(x, src)}'}) & 1) != 0"
        if src == "i1" and op in ("extsi", "sitofp", "index_cast"):      # a signed i1 is 0 or -1
            if dst in HALVES:
                return f"{t}(-(float){x})"
            return self.back(f"-(int){x}", dst) if dst in ("i8", "i16") else f"-({t}){x}"
        if op in ("extui", "uitofp") and src != "i1":
            x = self.u(x, src)
        elif op == "fptoui":
            return f"({t})({UNSIGNED[dst]}){self.f(x, src)}"
        if dst in HALVES:
            return f"{t}((float){x})"
        return f"({t}){self.f(x, src)}"

    # -- structured control flow -------------------------------------------------------------------------
    def declare(self, names, values, indent: int, s: Stmt, note: str):
        for n, v in zip(names, values):
            self.emit(f"{self.ctype(self.dt[n], s)} {n}" + (f" = {v};" if v is not None else ";"), indent, s, note)
            self.expr[n] = n

    def assign(self, slots: list[str], values: list[str], indent: int):
        """Write yielded values to their slots at once: where one reads a slot written here, all are staged."""
        pending = [(slot, v) for slot, v in zip(slots, values) if slot != v]
        names = {slot for slot, _ in pending}
        if len(pending) > 1 and any(v in names and v != slot for slot, v in pending):
            staged = []
            for slot, v in pending:
                self.emit(f"{C_TYPE[self.dt[slot]]} {slot}_next = {v};", indent)
                staged.append((slot, f"{slot}_next"))
            pending = staged
        for slot, v in pending:
            self.emit(f"{slot} = {v};", indent)

    def scf_for(self, s: Stmt, a: list[str], indent: int):
        lo, hi, step, inits = a[0], a[1], a[2], a[3:]
        region = s.regions[0]
        iv, carried = region.args[0], list(region.args[1:])
        self.declare(carried, inits, indent, s, "scf.for iter_arg")
        t = self.ctype(self.dt[iv], s)
        self.emit(f"for ({t} {iv} = {lo}; {iv} < {hi}; {iv} += {step}) {{", indent, s)
        self.expr[iv] = iv
        self.region(region, carried, indent + 1)
        self.emit("}", indent)
        for r, c in zip(s.results, carried):
            self.emit(f"{C_TYPE[self.dt[r]]} {r} = {c};", indent, s, "scf.for result")
            self.expr[r] = r

    def scf_if(self, s: Stmt, a: list[str], indent: int):
        results = list(s.results)
        self.declare(results, [None] * len(results), indent, s, "scf.if result")
        self.emit(f"if ({a[0]}) {{", indent, s)
        self.region(s.regions[0], results, indent + 1)
        if len(s.regions) > 1 and (s.regions[1].stmts or results):
            self.emit("} else {", indent)
            self.region(s.regions[1], results, indent + 1)
        self.emit("}", indent)

    def scf_while(self, s: Stmt, a: list[str], indent: int):
        """`before` computes the condition and the values passed on from the carried ones; where the condition
        is false they are the loop's results, else `after` computes the next carried values from them."""
        before, after = s.regions
        self.declare(list(before.args), a, indent, s, "scf.while carried")
        self.declare(list(s.results), [None] * len(s.results), indent, s, "scf.while result")
        self.emit("while (true) {", indent, s)
        self.stmts(before.stmts, indent + 1)
        cond, *passed = [self.expr[y] for y in before.yields]
        self.emit(f"if (!{cond}) {{", indent + 1, s, "scf.condition")
        self.assign(list(s.results), passed, indent + 2)
        self.emit("break;", indent + 2)
        self.emit("}", indent + 1)
        self.declare(list(after.args), passed, indent + 1, s, "scf.while after")
        self.region(after, list(before.args), indent + 1)
        self.emit("}", indent)

    def region(self, region: Region, slots: list[str], indent: int):
        self.stmts(region.stmts, indent)
        self.assign(slots, [self.expr[y] for y in region.yields], indent)


_OPS = {"memref.dim": _Writer.memref_dim, "memref.atomic_rmw": _Writer.atomic_rmw,
        "llvm.getelementptr": _Writer.getelementptr, "llvm.load": _Writer.llvm_load, "llvm.store": _Writer.llvm_store,
        "gpu.printf": _Writer.printf, "cf.assert": _Writer.assertion, "scf.for": _Writer.scf_for,
        "scf.if": _Writer.scf_if, "scf.while": _Writer.scf_while}
