"""A tle.raw.dialect function as LLVM IR text, linked into the Triton kernel that calls it.

Per call site: the function itself, run once by every thread of the program (`define i32 @<symbol>(...)`:
its pointer and scalar arguments are parameters, it returns a dummy 0 because Triton's extern calls need a
result); one shared-memory global per tile argument (`@<symbol>_<param>`, `internal addrspace(3)`); and a
store and a load of one element of that global per tile (`@<symbol>_store_<param>(value, index)`,
`@<symbol>_load_<param>(index)`), which the kernel calls element-wise over the tile to copy it in and out.

Structured control flow becomes basic blocks; loop-carried values, branch results and the loop counter live
in allocas (LLVM's mem2reg, in Triton's O3, turns them back into registers). `index` values are 64-bit, as
MLIR's own lowering to NVVM has them. Each instruction ends with a comment naming its MLIR op and source line.
The text depends only on the body and the call's facts, so the same kernel always gets the same text.
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field

from ..errors import UnsupportedConstruct
from ..raw.body import BARRIERS, SPECIAL, RawBody, Region, Stmt, cmpi_relation
from ..raw.meanings import MEANINGS, Form

BACKEND = "triton"
ATTRIBUTES = "attributes #0 = { alwaysinline convergent nounwind }"
STATIC_SHARED_LIMIT = 48 * 1024      # static shared memory a kernel may declare without an opt-in at launch

LLVM_TYPE = {"fp32": "float", "fp16": "half", "bf16": "bfloat", "fp64": "double", "i1": "i1", "i8": "i8",
             "i16": "i16", "i32": "i32", "i64": "i64", "index": "i64", "ptr": "ptr addrspace(1)"}
BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8, "i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
         "index": 8, "ptr": 8}
BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "index": 64}
_REGISTER = {"thread_id": "tid", "block_dim": "ntid", "block_id": "ctaid", "grid_dim": "nctaid"}
_INT_ARITH = {"add": "add", "sub": "sub", "mul": "mul"}
_FLOAT_ARITH = {"add": "fadd", "sub": "fsub", "mul": "fmul", "fdiv": "fdiv"}
_INT_OPS = {"div": "sdiv", "rem": "srem", "and": "and", "or": "or", "xor": "xor", "shl": "shl", "shr": "ashr",
            "udiv": "udiv", "urem": "urem", "ushr": "lshr"}
_INT_MINMAX = {"max": "smax", "min": "smin", "umax": "umax", "umin": "umin"}
_CASTS = {"sitofp": "sitofp", "uitofp": "uitofp", "fptosi": "fptosi", "fptoui": "fptoui", "extf": "fpext",
          "truncf": "fptrunc", "extsi": "sext", "extui": "zext", "trunci": "trunc", "bitcast": "bitcast"}
# math ops that NVPTX selects from LLVM's intrinsics; the others call libdevice (linked by Triton)
_MATH_INTRINSICS = {"sqrt": "llvm.sqrt", "absf": "llvm.fabs", "floor": "llvm.floor", "ceil": "llvm.ceil",
                    "fma": "llvm.fma"}
_LIBDEVICE = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "rsqrt": "rsqrt", "tanh": "tanh",
              "erf": "erf", "sin": "sin", "cos": "cos", "powf": "pow"}
_ATOMIC = {("add", False): "add", ("add", True): "fadd", ("max", False): "max", ("max", True): "fmax",
           ("min", False): "min", ("min", True): "fmin"}


def is_float(dtype: str) -> bool:
    return dtype.startswith(("fp", "bf"))


def storage(dtype: str) -> str:
    """The LLVM type a tile's element is kept in shared memory as (i1 as a byte)."""
    return "i8" if dtype == "i1" else LLVM_TYPE[dtype]


def tile_bytes(shape, dtype: str) -> int:
    return math.prod(shape) * BYTES[dtype]


def literal(value, dtype: str) -> str:
    """An LLVM constant of `dtype`: floats in decimal where LLVM reads that exactly, else in hex."""
    if dtype == "i1":
        return "true" if value else "false"
    if not is_float(dtype):
        bits = BITS[dtype]
        v = int(value) & ((1 << bits) - 1)
        return str(v - (1 << bits) if v >= 1 << (bits - 1) else v)
    value = float(value)
    if dtype == "fp16":
        return "0xH" + struct.pack(">e", value).hex().upper()
    if dtype == "bf16":
        bits = struct.unpack(">I", struct.pack(">f", value))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 if not math.isnan(value) else 0x7FC0
        return f"0xR{bits & 0xFFFF:04X}"
    if dtype == "fp32":
        value = struct.unpack(">f", struct.pack(">f", value))[0]
    text = repr(value)
    if math.isfinite(value) and float(text) == value:
        mantissa, _, exponent = text.partition("e")
        if "." not in mantissa:
            mantissa += ".0"
        return mantissa + (f"e{exponent}" if exponent else "")
    return "0x" + struct.pack(">d", value).hex().upper()


def c_string(text: str) -> tuple[str, int]:
    """(LLVM's c"..." spelling with the closing NUL, its length in bytes)."""
    data = text.encode() + b"\0"
    out = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:02X}" for b in data)
    return f'c"{out}"', len(data)


@dataclass(frozen=True)
class CallFacts:
    """What a call site fixes about the function: `symbol` names its LLVM function (and prefixes its
    helpers and globals); `shapes[k]` is the shape of the tile passed for argument k (() for pointers and
    scalars); `site` says where the call is (for comments); `num_warps` how many warps run it."""
    symbol: str
    shapes: tuple[tuple[int, ...], ...]
    site: str
    num_warps: int


@dataclass
class LoweredCall:
    """One call's LLVM IR: `text` (globals, helpers and the function), the declarations it needs, the
    helper symbols per tile argument, the function's parameters (argument positions, in order) and the
    shared memory its tiles take."""
    text: str
    declarations: set[str]
    stores: dict[int, str]
    loads: dict[int, str]
    params: list[int]
    shared_bytes: int


def lower_call(body: RawBody, facts: CallFacts) -> LoweredCall:
    body.check(BACKEND)
    writer = _Writer(body, facts)
    return writer.lower()


def module_text(calls: list[LoweredCall], title: str) -> str:
    """The .ll file of a kernel: its calls' functions, then every declaration they need, once."""
    declarations = sorted(set().union(*(c.declarations for c in calls)))
    parts = [f"; {title}", "; Generated by tle; Triton links it into the kernel (extern_libs), which sets the target.",
             ""]
    for c in calls:
        parts += [c.text, ""]
    parts += declarations + ["", ATTRIBUTES, ""]
    return "\n".join(parts)


@dataclass
class _Block:
    """Where a structured op's blocks are named: one counter per kind of op."""
    counts: dict = field(default_factory=dict)

    def label(self, kind: str) -> str:
        n = self.counts.get(kind, 0)
        self.counts[kind] = n + 1
        return f"{kind}{n}"


class _Writer:
    def __init__(self, body: RawBody, facts: CallFacts):
        self.body, self.facts, self.symbol = body, facts, facts.symbol
        self.dt = body.dtype
        self.value: dict[str, str] = {}      # SSA name -> LLVM operand (a %register or a constant)
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.globals: list[str] = []
        self.declarations: set[str] = set()
        self.labels = _Block()
        self.temps = 0

    # -- the call's pieces ---------------------------------------------------------------------------------
    def lower(self) -> LoweredCall:
        f, body = self.facts, self.body
        header = [f"; ---- {body.name} ({self._where(body.loc)}), called at {f.site}: run by each of the program's "
                  f"{32 * f.num_warps} threads"]
        stores, loads, params, signature, helpers, shared = {}, {}, [], [], [], 0
        for k, arg in enumerate(body.args):
            if arg.kind == "tile":
                shape, n = f.shapes[k], math.prod(f.shapes[k])
                shared += tile_bytes(shape, "i8" if arg.dtype == "i1" else arg.dtype)
                g = self._tile_global(k)
                header.append(f"{g} = internal addrspace(3) global [{n} x {storage(arg.dtype)}] undef, align 16"
                              f"   ; '{arg.name}': {list(shape)} {arg.dtype}")
                stores[k], loads[k] = f"{self.symbol}_store_{arg.name}", f"{self.symbol}_load_{arg.name}"
                helpers += self._copy_helpers(k, stores[k], loads[k])
            else:
                reg = f"%{arg.name}" if not re.fullmatch(r"v\d+", arg.name) else f"%{arg.name}.arg"
                self.value[arg.value] = reg
                params.append(k)
                signature.append(f"{LLVM_TYPE[arg.dtype]} {reg}")
        self.stmts(body.stmts)
        function = [f"define i32 @{self.symbol}({', '.join(signature)}) #0 {{", "entry:"]
        function += ["  " + a for a in self.allocas] + self.lines + ["  ret i32 0", "}"]
        text = "\n".join(header + self.globals + [""] + helpers + function)
        return LoweredCall(text, self.declarations, stores, loads, params, shared)

    def _tile_global(self, k: int) -> str:
        return f"@{self.symbol}_{self.body.args[k].name}"

    def _copy_helpers(self, k: int, store: str, load: str) -> list[str]:
        arg = self.body.args[k]
        n, t, s = math.prod(self.facts.shapes[k]), LLVM_TYPE[arg.dtype], storage(arg.dtype)
        g, align = self._tile_global(k), BYTES[arg.dtype]
        put = ["  %byte = zext i1 %value to i8", f"  store i8 %byte, ptr addrspace(3) %addr, align 1"] \
            if arg.dtype == "i1" else [f"  store {t} %value, ptr addrspace(3) %addr, align {align}"]
        get = [f"  %byte = load i8, ptr addrspace(3) %addr, align 1", "  %value = trunc i8 %byte to i1"] \
            if arg.dtype == "i1" else [f"  %value = load {t}, ptr addrspace(3) %addr, align {align}"]
        address = f"  %addr = getelementptr [{n} x {s}], ptr addrspace(3) {g}, i32 0, i32 %index"
        return [f"define i32 @{store}({t} %value, i32 %index) #0 {{", address, *put, "  ret i32 0", "}", "",
                f"define {t} @{load}(i32 %index) #0 {{", address, *get, f"  ret {t} %value", "}", ""]

    # -- emitting ------------------------------------------------------------------------------------------
    def _where(self, loc) -> str:
        return f"{loc.file.rsplit('/', 1)[-1]}:{loc.line}" if loc is not None else "?"

    def emit(self, text: str, s: Stmt | None = None, note: str | None = None):
        comment = note if note is not None else (s.attrs.get("spelled", s.op) if s is not None else "")
        if comment and s is not None and s.loc is not None:
            comment += f"  line {s.loc.line}"
        self.lines.append(f"  {text}" + (f"   ; {comment}" if comment else ""))

    def label(self, name: str):
        self.lines.append(f"{name}:")

    def declare(self, ret: str, name: str, params: list[str]) -> str:
        self.declarations.add(f"declare {ret} @{name}({', '.join(params)})")
        return f"@{name}"

    def call(self, ret: str, name: str, args: list[tuple[str, str]], result: str | None, s: Stmt, note=None):
        fn = self.declare(ret, name, [t for t, _ in args])
        text = f"call {ret} {fn}({', '.join(f'{t} {v}' for t, v in args)})"
        self.emit(f"{result} = {text}" if result else text, s, note)

    def temp(self, hint: str) -> str:
        self.temps += 1
        return f"%{hint}.{self.temps}"

    def error(self, s: Stmt, construct: str, detail: str):
        raise UnsupportedConstruct(construct, BACKEND, s.loc or self.body.loc,
                                   f"in raw function '{self.body.name}': {detail}")

    def ty(self, name: str) -> str:
        return LLVM_TYPE[self.dt[name]]

    def reg(self, name: str) -> str:
        return f"%{name}"

    # -- statements ----------------------------------------------------------------------------------------
    def stmts(self, stmts: list[Stmt]):
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: Stmt):
        a = [self.value[o] for o in s.operands]
        if s.op == "arith.constant":
            self.value[s.name] = literal(s.attrs["value"], self.dt[s.name])
        elif s.op in SPECIAL:
            kind, axis = SPECIAL[s.op]
            register = f"llvm.nvvm.read.ptx.sreg.{_REGISTER[kind]}.{'xyz'[axis]}"
            self.value[s.name] = self.reg(s.name)
            self.call("i32", register, [], self.reg(s.name), s)
        elif s.op in _HANDLERS:
            _HANDLERS[s.op](self, s, a)
        elif s.op in BARRIERS:
            self.barrier(s)
        elif s.op in MEANINGS:
            self.scalar(s, a)
        else:
            self.error(s, s.op, "the Triton lowering has no LLVM IR for this op")

    def define(self, s: Stmt, text: str):
        self.value[s.name] = self.reg(s.name)
        self.emit(f"{self.reg(s.name)} = {text}", s)

    # -- scalar ops ----------------------------------------------------------------------------------------
    def scalar(self, s: Stmt, a: list[str]):
        form, meaning = MEANINGS[s.op]
        src = self.dt[s.operands[0]]
        t = LLVM_TYPE[src]
        if form is Form.CAST:
            return self.cast(s, meaning, a[0], src, self.dt[s.name])
        if form is Form.MATH:
            return self.math(s, meaning, a)
        if form is Form.SELECT:
            return self.define(s, f"select i1 {a[0]}, {self.ty(s.name)} {a[1]}, {self.ty(s.name)} {a[2]}")
        if form is Form.NEG:
            return self.define(s, f"fneg {t} {a[0]}")
        if form is Form.CMPI:
            relation, unsigned = cmpi_relation(s.attrs["predicate"])
            pred = relation if relation in ("eq", "ne") else ("u" if unsigned else "s") + relation
            return self.define(s, f"icmp {pred} {t} {a[0]}, {a[1]}")
        if form is Form.CMPF:
            return self.define(s, f"fcmp {s.attrs['predicate']} {t} {a[0]}, {a[1]}")
        if form is Form.ARITH:
            op = _FLOAT_ARITH[meaning] if is_float(src) else _INT_ARITH[meaning]
            return self.define(s, f"{op} {t} {a[0]}, {a[1]}")
        if form in (Form.SIGNED_DIV, Form.BITWISE, Form.SHIFT) or (form is Form.UNSIGNED and meaning in _INT_OPS):
            return self.define(s, f"{_INT_OPS[meaning]} {t} {a[0]}, {a[1]}")
        if form in (Form.MINMAX, Form.UNSIGNED):
            if is_float(src):
                name = f"llvm.{'maxnum' if meaning == 'max' else 'minnum'}.{self.suffix(src)}"
            else:
                name = f"llvm.{_INT_MINMAX[meaning]}.{t}"
            self.value[s.name] = self.reg(s.name)
            return self.call(t, name, [(t, a[0]), (t, a[1])], self.reg(s.name), s)
        if form is Form.NAN_MINMAX:     # NaN in, NaN out: maxnum / minnum, unless either operand is NaN
            nan, num = self.temp(f"{s.name}.nan"), self.temp(f"{s.name}.num")
            self.emit(f"{nan} = fcmp uno {t} {a[0]}, {a[1]}", s)
            self.call(t, f"llvm.{'maxnum' if meaning == 'max' else 'minnum'}.{self.suffix(src)}",
                      [(t, a[0]), (t, a[1])], num, s)
            both = self.temp(f"{s.name}.sum")
            self.emit(f"{both} = fadd {t} {a[0]}, {a[1]}", s)
            return self.define(s, f"select i1 {nan}, {t} {both}, {t} {num}")
        if form is Form.ROUNDED_DIV:
            return self.rounded_div(s, meaning, a, t)
        self.error(s, s.op, f"no LLVM IR for the form {form.value}")

    def suffix(self, dtype: str) -> str:
        return {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "fp64": "f64"}[dtype]

    def rounded_div(self, s: Stmt, meaning: str, a: list[str], t: str):
        """The truncating quotient, moved by one where the remainder is not 0 and the exact quotient lies the
        other way (ceil: positive, floor: negative)."""
        q, r, nz = self.temp(f"{s.name}.q"), self.temp(f"{s.name}.r"), self.temp(f"{s.name}.inexact")
        unsigned = meaning == "uceil"
        self.emit(f"{q} = {'udiv' if unsigned else 'sdiv'} {t} {a[0]}, {a[1]}", s)
        self.emit(f"{r} = {'urem' if unsigned else 'srem'} {t} {a[0]}, {a[1]}", s)
        self.emit(f"{nz} = icmp ne {t} {r}, 0", s)
        move = nz
        if not unsigned:
            rneg, bneg, same, move = (self.temp(f"{s.name}.{h}") for h in ("rneg", "bneg", "side", "move"))
            self.emit(f"{rneg} = icmp slt {t} {r}, 0", s)
            self.emit(f"{bneg} = icmp slt {t} {a[1]}, 0", s)
            self.emit(f"{same} = icmp {'eq' if meaning == 'ceil' else 'ne'} i1 {rneg}, {bneg}", s)
            self.emit(f"{move} = and i1 {nz}, {same}", s)
        step = self.temp(f"{s.name}.step")
        self.emit(f"{step} = zext i1 {move} to {t}", s)
        self.define(s, f"{'sub' if meaning == 'floor' else 'add'} {t} {q}, {step}")

    def cast(self, s: Stmt, meaning: str, x: str, src: str, dst: str):
        ts, td = LLVM_TYPE[src], LLVM_TYPE[dst]
        if meaning == "index_cast":
            if ts == td:
                self.value[s.name] = x        # i64 <-> index: the same LLVM value
                return
            op = "sext" if BITS[dst] > BITS[src] else "trunc"
        else:
            op = _CASTS[meaning]
        self.define(s, f"{op} {ts} {x} to {td}")

    def math(self, s: Stmt, meaning: str, a: list[str]):
        dtype = self.dt[s.name]
        t = LLVM_TYPE[dtype]
        self.value[s.name] = self.reg(s.name)
        if meaning == "absi":
            return self.call(t, f"llvm.abs.{t}", [(t, a[0]), ("i1", "false")], self.reg(s.name), s)
        if meaning in _MATH_INTRINSICS:
            name = f"{_MATH_INTRINSICS[meaning]}.{self.suffix(dtype)}"
            return self.call(t, name, [(t, x) for x in a], self.reg(s.name), s)
        if meaning not in _LIBDEVICE or not is_float(dtype):
            self.error(s, s.op, f"no LLVM IR for math.{meaning} on {dtype}")
        if dtype == "fp64":
            return self.call(t, f"__nv_{_LIBDEVICE[meaning]}", [(t, x) for x in a], self.reg(s.name), s)
        args = a                      # libdevice computes in f32: f16 and bf16 go through it
        if dtype != "fp32":
            args = []
            for x in a:
                wide = self.temp(f"{s.name}.f32")
                self.emit(f"{wide} = fpext {t} {x} to float", s)
                args.append(wide)
        out = self.reg(s.name) if dtype == "fp32" else self.temp(f"{s.name}.f32")
        self.call("float", f"__nv_{_LIBDEVICE[meaning]}f", [("float", x) for x in args], out, s)
        if dtype != "fp32":
            self.emit(f"{self.reg(s.name)} = fptrunc float {out} to {t}", s)

    # -- memory --------------------------------------------------------------------------------------------
    def tile_address(self, s: Stmt, indices: list[str], hint: str) -> str:
        k = s.attrs["arg"]
        shape, arg = self.facts.shapes[k], self.body.args[k]
        if len(indices) != len(shape):
            self.error(s, f"{s.attrs.get('spelled', s.op)} with {len(indices)} indices",
                       f"the tile '{arg.name}' has {len(shape)} axes")
        linear = indices[0]
        for d in range(1, len(shape)):
            scaled, summed = self.temp(f"{hint}.row"), self.temp(f"{hint}.at")
            self.emit(f"{scaled} = mul i64 {linear}, {shape[d]}", s)
            self.emit(f"{summed} = add i64 {scaled}, {indices[d]}", s)
            linear = summed
        addr = self.temp(f"{hint}.addr")
        self.emit(f"{addr} = getelementptr [{math.prod(shape)} x {storage(arg.dtype)}], ptr addrspace(3) "
                  f"{self._tile_global(k)}, i64 0, i64 {linear}", s, note=f"'{arg.name}'[{', '.join(indices)}]")
        return addr

    def extract(self, s: Stmt, a: list[str]):
        dtype = self.body.args[s.attrs["arg"]].dtype
        addr = self.tile_address(s, a, s.name)
        if dtype == "i1":
            byte = self.temp(f"{s.name}.byte")
            self.emit(f"{byte} = load i8, ptr addrspace(3) {addr}, align 1", s)
            return self.define(s, f"trunc i8 {byte} to i1")
        self.define(s, f"load {LLVM_TYPE[dtype]}, ptr addrspace(3) {addr}, align {BYTES[dtype]}")

    def insert(self, s: Stmt, a: list[str]):
        dtype = self.body.args[s.attrs["arg"]].dtype
        addr = self.tile_address(s, a[1:], "st")
        value = a[0]
        if dtype == "i1":
            value = self.temp("st.byte")
            self.emit(f"{value} = zext i1 {a[0]} to i8", s)
        self.emit(f"store {storage(dtype)} {value}, ptr addrspace(3) {addr}, align {BYTES[dtype]}", s)

    def dim(self, s: Stmt, a: list[str]):
        shape, axis = self.facts.shapes[s.attrs["arg"]], s.attrs["axis"]
        if not 0 <= axis < len(shape):
            self.error(s, f"memref.dim {axis}", f"the tile '{self.body.args[s.attrs['arg']].name}' has "
                                                f"{len(shape)} axes")
        self.value[s.name] = str(int(shape[axis]))

    def atomic(self, s: Stmt, a: list[str]):
        dtype = self.body.args[s.attrs["arg"]].dtype
        if dtype == "i1":
            self.error(s, "memref.atomic_rmw on an i1 tile", "atomics take integers or floats")
        addr = self.tile_address(s, a[1:], s.name)
        op = _ATOMIC[(s.attrs["kind"], is_float(dtype))]
        # relaxed, as the tile is only shared within the program: barriers order it against other accesses
        self.define(s, f"atomicrmw {op} ptr addrspace(3) {addr}, {LLVM_TYPE[dtype]} {a[0]} monotonic, "
                       f"align {BYTES[dtype]}")

    def getelementptr(self, s: Stmt, a: list[str]):
        elem = LLVM_TYPE[s.attrs["elem"]]
        offset = f"{self.ty(s.operands[1])} {a[1]}" if len(a) > 1 else f"i64 {s.attrs['constant']}"
        self.define(s, f"getelementptr {elem}, ptr addrspace(1) {a[0]}, {offset}")

    def load(self, s: Stmt, a: list[str]):
        dtype = self.dt[s.name]
        self.define(s, f"load {LLVM_TYPE[dtype]}, ptr addrspace(1) {a[0]}, align {BYTES[dtype]}")

    def store(self, s: Stmt, a: list[str]):
        dtype = self.dt[s.operands[0]]
        self.emit(f"store {LLVM_TYPE[dtype]} {a[0]}, ptr addrspace(1) {a[1]}, align {BYTES[dtype]}", s)

    # -- synchronization, printing, assertions -------------------------------------------------------------
    def barrier(self, s: Stmt):
        ident, count = (s.attrs.get(k) for k in ("id", "count"))
        if ident is None and count is None:
            return self.call("void", "llvm.nvvm.barrier0", [], None, s, note="nvvm.barrier0" if s.op ==
                             "nvvm.barrier0" else None)
        args = [("i32", self.i32(s, ident) if ident is not None else "0")]
        if count is None:              # a named barrier that all the program's threads meet at
            return self.call("void", "llvm.nvvm.barrier.sync", args, None, s)
        self.call("void", "llvm.nvvm.barrier.sync.cnt", args + [("i32", self.i32(s, count))], None, s)

    def i32(self, s: Stmt, name: str) -> str:
        if self.dt[name] == "i32":
            return self.value[name]
        if is_float(self.dt[name]):
            self.error(s, f"{s.op} with a {self.dt[name]} operand", "barrier ids and counts are integers")
        t = self.temp(f"{name}.i32")
        self.emit(f"{t} = {'trunc' if BITS[self.dt[name]] > 32 else 'zext'} {self.ty(name)} {self.value[name]} "
                  f"to i32", s)
        return t

    def string(self, kind: str, text: str) -> str:
        name = f"@{self.symbol}_{kind}{len(self.globals)}"
        spelled, n = c_string(text)
        self.globals.append(f"{name} = private unnamed_addr constant [{n} x i8] {spelled}, align 1")
        return name

    def printf(self, s: Stmt, a: list[str]):
        """CUDA's vprintf: the arguments packed in a local struct, promoted as C promotes variadic ones."""
        fmt = self.string("format", s.attrs["format"])
        label = self.labels.label("printf")
        if not a:
            return self.call("i32", "vprintf", [("ptr", fmt), ("ptr", "null")], f"%{label}", s)
        fields, values = [], []
        for name, v in zip(s.operands, a):
            dtype = self.dt[name]
            if is_float(dtype) and dtype != "fp64":
                wide = self.temp(f"{label}.double")
                self.emit(f"{wide} = fpext {LLVM_TYPE[dtype]} {v} to double", s)
                fields.append("double"), values.append(wide)
            elif dtype in ("i1", "i8", "i16"):
                wide = self.temp(f"{label}.int")
                self.emit(f"{wide} = {'zext' if dtype == 'i1' else 'sext'} {LLVM_TYPE[dtype]} {v} to i32", s)
                fields.append("i32"), values.append(wide)
            else:
                fields.append(LLVM_TYPE[dtype]), values.append(v)
        struct_type = "{ " + ", ".join(fields) + " }"
        self.allocas.append(f"%{label}.args = alloca {struct_type}, align 8   ; gpu.printf's arguments")
        for i, (t, v) in enumerate(zip(fields, values)):
            slot = self.temp(f"{label}.arg")
            self.emit(f"{slot} = getelementptr {struct_type}, ptr %{label}.args, i32 0, i32 {i}", s)
            self.emit(f"store {t} {v}, ptr {slot}, align 8", s)
        self.call("i32", "vprintf", [("ptr", fmt), ("ptr", f"%{label}.args")], f"%{label}", s)

    def assertion(self, s: Stmt, a: list[str]):
        """CUDA's __assertfail where the condition is false: it prints the message and traps."""
        label = self.labels.label("assert")
        message = self.string("message", s.attrs["message"])
        loc = s.loc or self.body.loc
        file = self.string("file", loc.file if loc is not None else "?")
        func = self.string("function", self.body.name)
        self.emit(f"br i1 {a[0]}, label %{label}.ok, label %{label}.fail", s)
        self.label(f"{label}.fail")
        self.call("void", "__assertfail", [("ptr", message), ("ptr", file), ("i32", str(loc.line if loc else 0)),
                                           ("ptr", func), ("i64", "1")], None, s)
        self.emit(f"br label %{label}.ok", s)
        self.label(f"{label}.ok")

    # -- structured control flow ---------------------------------------------------------------------------
    def slot(self, name: str) -> str:
        """An alloca holding the SSA value `name` across blocks."""
        self.allocas.append(f"%{name}.slot = alloca {self.ty(name)}")
        return f"%{name}.slot"

    def put(self, slot: str, name: str, value: str, s: Stmt):
        self.emit(f"store {self.ty(name)} {value}, ptr {slot}", s, note="")

    def get(self, slot: str, name: str, s: Stmt):
        self.value[name] = self.reg(name)
        self.emit(f"{self.reg(name)} = load {self.ty(name)}, ptr {slot}", s, note="")

    def scf_for(self, s: Stmt, a: list[str]):
        lo, hi, step, inits = a[0], a[1], a[2], a[3:]
        region = s.regions[0]
        iv, carried = region.args[0], region.args[1:]
        label = self.labels.label("for")
        t = self.ty(iv)
        counter = self.slot(iv)
        slots = [self.slot(c) for c in carried]
        self.put(counter, iv, lo, s)
        for slot, c, init in zip(slots, carried, inits):
            self.put(slot, c, init, s)
        self.emit(f"br label %{label}.cond", s, note=f"scf.for {label}")
        self.label(f"{label}.cond")
        self.get(counter, iv, s)
        self.emit(f"%{label}.go = icmp slt {t} {self.reg(iv)}, {hi}", s)
        self.emit(f"br i1 %{label}.go, label %{label}.body, label %{label}.end", s, note="")
        self.label(f"{label}.body")
        for slot, c in zip(slots, carried):
            self.get(slot, c, s)
        self.region(region, slots, carried, s)
        self.emit(f"%{label}.next = add {t} {self.reg(iv)}, {step}", s)
        self.put(counter, iv, f"%{label}.next", s)
        self.emit(f"br label %{label}.cond", s, note="")
        self.label(f"{label}.end")
        for slot, c, r in zip(slots, carried, s.results):
            self.value[r] = self.reg(r)
            self.emit(f"{self.reg(r)} = load {self.ty(r)}, ptr {slot}", s, note="")

    def scf_if(self, s: Stmt, a: list[str]):
        label = self.labels.label("if")
        slots = [self.slot(r) for r in s.results]
        otherwise = len(s.regions) > 1 and (s.regions[1].stmts or slots)
        self.emit(f"br i1 {a[0]}, label %{label}.then, label %{label}.{'else' if otherwise else 'end'}", s)
        self.label(f"{label}.then")
        self.region(s.regions[0], slots, s.results, s)
        self.emit(f"br label %{label}.end", s, note="")
        if otherwise:
            self.label(f"{label}.else")
            self.region(s.regions[1], slots, s.results, s)
            self.emit(f"br label %{label}.end", s, note="")
        self.label(f"{label}.end")
        for slot, r in zip(slots, s.results):
            self.get(slot, r, s)

    def scf_while(self, s: Stmt, a: list[str]):
        """`before` computes the condition and the values passed on from the carried ones, `after` the next
        carried values; the results are the values passed on when the condition fails."""
        before, after = s.regions
        label = self.labels.label("while")
        carried = [self.slot(x) for x in before.args]
        passed = [self.slot(x) for x in after.args]
        for slot, x, init in zip(carried, before.args, a):
            self.put(slot, x, init, s)
        self.emit(f"br label %{label}.before", s, note=f"scf.while {label}")
        self.label(f"{label}.before")
        for slot, x in zip(carried, before.args):
            self.get(slot, x, s)
        self.stmts(before.stmts)
        cond, *forward = [self.value[y] for y in before.yields]
        for slot, x, v in zip(passed, after.args, forward):
            self.put(slot, x, v, s)
        self.emit(f"br i1 {cond}, label %{label}.after, label %{label}.end", s, note="scf.condition")
        self.label(f"{label}.after")
        for slot, x in zip(passed, after.args):
            self.get(slot, x, s)
        self.stmts(after.stmts)
        for slot, x, y in zip(carried, before.args, after.yields):
            self.put(slot, x, self.value[y], s)
        self.emit(f"br label %{label}.before", s, note="")
        self.label(f"{label}.end")
        for slot, x, r in zip(passed, after.args, s.results):
            self.value[r] = self.reg(r)
            self.emit(f"{self.reg(r)} = load {self.ty(r)}, ptr {slot}", s, note="")

    def region(self, region: Region, slots: list[str], names, s: Stmt):
        self.stmts(region.stmts)
        for slot, name, y in zip(slots, names, region.yields):
            self.put(slot, name, self.value[y], s)


_HANDLERS = {"tensor.extract": _Writer.extract, "tensor.insert": _Writer.insert, "memref.dim": _Writer.dim,
             "memref.atomic_rmw": _Writer.atomic, "llvm.getelementptr": _Writer.getelementptr,
             "llvm.load": _Writer.load, "llvm.store": _Writer.store, "gpu.printf": _Writer.printf,
             "cf.assert": _Writer.assertion, "scf.for": _Writer.scf_for, "scf.if": _Writer.scf_if,
             "scf.while": _Writer.scf_while}
