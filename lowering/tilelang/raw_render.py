"""A raw function's body as TileLang statements, run by every thread of the block as written.

TileLang code is thread-level when it wants to be, so the body maps one op to one statement: lets
(`name = expr`, a TIR LetStmt, evaluated once where it stands) for scalar ops, `buf[i] = v` for
tensor.insert, `buf[i]` for tensor.extract, `for .. in T.serial` with `T.alloc_var` slots for scf.for
iter_args, `if` with `T.alloc_var` slots for scf.if results, and `T.sync_threads()` for the barrier.
The nvvm registers read the launch domain of the call (one block of `hardware["threads"]` threads):
ThreadId is the given thread variable (0 past the given axes), BlockDim the given extent (1 past them),
BlockId 0 and GridDim 1. `index` values are int32.

FlagTree's form (tle.raw.dialect) adds: scalar and pointer arguments (`values`: an expression per SSA name;
`pointers`: a pointer argument's flat kernel argument, element offset and dtype), memref.dim (the extent of
the tile passed, `shapes`), memref.atomic_rmw (TileLang's atomics on the shared copy, returning the previous
value), llvm.getelementptr / load / store (elements of the flat kernel argument), scf.while (the `before`
region written before the loop and again at the end of each step), barriers with an id and a thread count
(`T.sync_threads(id, count)`), gpu.printf (CUDA's printf) and cf.assert (TileLang's assertion builtin, which
prints the message and traps). Block ids and the grid are the program's (`block_ids`, `grid_dims`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import UnsupportedConstruct
from ..raw.body import BARRIERS, CMP_OPERATORS, SPECIAL, RawBody, Region, Stmt, cmpi_relation
from ..raw.meanings import MEANINGS, Form

BACKEND = "tilelang"
TL_DTYPE = {"i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "index": "int32",
            "fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}
UNSIGNED = {"i1": "int32", "i8": "uint8", "i16": "uint16", "i32": "uint32", "index": "uint32", "i64": "uint64"}
# each meaning of lowering/raw/meanings.py, by form, as TileLang spells it
_INFIX = {"add": "+", "sub": "-", "mul": "*", "fdiv": "/"}
_BITS = {"and": ("&", "T.And"), "or": ("|", "T.Or"), "xor": ("^", None)}      # (on integers, on i1)
_CALL2 = {"div": "T.truncdiv", "rem": "T.truncmod", "max": "T.max", "min": "T.min", "shl": "T.shift_left",
          "shr": "T.shift_right", "udiv": "T.truncdiv", "urem": "T.truncmod", "umax": "T.max", "umin": "T.min",
          "ushr": "T.shift_right"}
_MATH = {n: f"T.{n}" for n in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "erf", "sin", "cos",
                              "floor", "ceil", "fma")}
_MATH.update(absf="T.abs", absi="T.abs", powf="T.pow")
# ordered predicates are C's comparisons (false on NaN); unordered ones negate the opposite comparison
_CMPF = {"oeq": "({a} == {b})", "ogt": "({a} > {b})", "oge": "({a} >= {b})", "olt": "({a} < {b})",
         "ole": "({a} <= {b})", "une": "({a} != {b})", "one": "T.Or({a} < {b}, {a} > {b})",
         "ueq": "T.Not(T.Or({a} < {b}, {a} > {b}))", "ugt": "T.Not({a} <= {b})", "uge": "T.Not({a} < {b})",
         "ult": "T.Not({a} >= {b})", "ule": "T.Not({a} > {b})", "ord": "T.And({a} == {a}, {b} == {b})",
         "uno": "T.Or({a} != {a}, {b} != {b})", "false": "False", "true": "True"}


def render_tilelang(body: RawBody, buffers: list[str], thread_vars: list[str], block_dims: list[int],
                    indent: int = 0, prefix: str | None = None) -> list[str]:
    """Lines of TileLang for one call of `body`: `buffers[k]` names argument k's tile buffer,
    `thread_vars[a]` / `block_dims[a]` the thread index and thread count along axis a. Lets are named
    `<prefix><n>` (default `raw_<function>_<n>`); pass a distinct prefix for each call site."""
    return render_tilelang_rows(body, buffers, thread_vars, block_dims, indent, prefix).lines()


@dataclass
class Rendered:
    """One call's statements as (indentation level, text) rows, with what the caller needs to know of
    them without reading their text: the names they define, the thread variables they read, and which
    rows are `else:` clauses (part of the `if` above them)."""
    rows: list[tuple[int, str]]
    defined: list[str]
    threads_read: set[str]
    clauses: set[int]
    imports_tvm: bool = False        # the rows call a builtin by its tvm.ir.Op (cf.assert)

    def lines(self) -> list[str]:
        return ["    " * indent + text for indent, text in self.rows]


@dataclass
class Program:
    """What a tle.raw.dialect function reads of the program: `shapes[k]` the shape of tile argument k,
    `values` an expression per scalar argument's SSA name, `pointers` per pointer argument's SSA name its
    (flat kernel argument, element offset, dtype), and the program's block ids and grid extents."""
    shapes: list
    values: dict
    pointers: dict
    block_ids: list[str]
    grid_dims: list[int]


def render_tilelang_rows(body: RawBody, buffers: list[str | None], thread_vars: list[str], block_dims: list[int],
                         indent: int = 0, prefix: str | None = None, program: Program | None = None) -> Rendered:
    """`render_tilelang`, as rows (see Rendered). `program`: for a tle.raw.dialect function (buffers[k] is None
    for its pointer and scalar arguments)."""
    body.check(BACKEND)
    if len(buffers) != len(body.args):
        raise ValueError(f"raw function '{body.name}' takes {len(body.args)} tiles, got {len(buffers)} buffers")
    if prefix is None:
        prefix = "raw_" + re.sub(r"\W", "_", body.name) + "_"
    r = _Renderer(body, list(buffers), list(thread_vars), list(block_dims), prefix, program)
    r.stmts(body.stmts, indent)
    return Rendered(r.rows, [f"{prefix}{n}" for n in range(r.count)], r.threads_read, r.clauses, r.imports_tvm)


def literal(value, dtype: str) -> str:
    if dtype == "i1":
        return "True" if value else "False"
    t = TL_DTYPE[dtype]
    if dtype.startswith(("fp", "bf")):
        if math.isinf(value):
            return f"{'-' if value < 0 else ''}T.infinity({t!r})"
        if math.isnan(value):
            return f"T.{t}(float('nan'))"
        return f"T.{t}({float(value)!r})"
    return str(int(value)) if t == "int32" else f"T.{t}({int(value)})"


def _fold(op: str, a: list[str]) -> str | None:
    """Integer arithmetic with a literal 0 or 1 (e.g. blockid * blockdim + threadid with blockid 0), folded;
    None when there is nothing to fold. Plain int literals are int32 (or index) values."""
    if op not in ("arith.addi", "arith.subi", "arith.muli"):
        return None
    if all(re.fullmatch(r"-?\d+", x) for x in a):
        x, y = int(a[0]), int(a[1])
        v = x + y if op == "arith.addi" else x - y if op == "arith.subi" else x * y
        return str(v) if -2**31 <= v < 2**31 else None
    if op == "arith.addi" and "0" in a:
        return a[1] if a[0] == "0" else a[0]
    if op == "arith.subi" and a[1] == "0":
        return a[0]
    if op == "arith.muli" and "0" in a:
        return "0"
    if op == "arith.muli" and "1" in a:
        return a[1] if a[0] == "1" else a[0]
    return None


_ASSERT = 'T.call_intrin("void", tvm.ir.Op.get("tl.device_assert_with_msg"), {cond}, {msg})'
_ATOMIC = {"add": "T.atomic_add", "max": "T.atomic_max", "min": "T.atomic_min"}


class _Renderer:
    def __init__(self, body: RawBody, buffers, thread_vars, block_dims, prefix: str, program: Program | None = None):
        self.body, self.buffers, self.prefix = body, buffers, prefix
        self.thread_vars, self.block_dims = thread_vars, block_dims
        self.program = program
        self.dt = body.dtype
        self.expr: dict[str, str] = dict(program.values) if program else {}
        self.pointers: dict[str, tuple[str, str, str]] = dict(program.pointers) if program else {}
        self.imports_tvm = False
        self.rows: list[tuple[int, str]] = []
        self.count = 0
        self.threads_read: set[str] = set()     # thread variables written into the statements
        self.threads_in: dict[str, set[str]] = {}  # value -> thread variables its expression is written with
        self.clauses: set[int] = set()

    def fresh(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count - 1}"

    def emit(self, line: str, indent: int):
        self.rows.append((indent, line))

    def let(self, name: str, expr: str, indent: int):
        var = self.fresh()
        self.emit(f"{var} = {expr}", indent)
        self.expr[name] = var

    def stmts(self, stmts: list[Stmt], indent: int):
        for s in stmts:
            self.stmt(s, indent)

    def stmt(self, s: Stmt, indent: int):
        a = [self.expr[o] for o in s.operands]
        if s.op == "arith.constant":
            self.expr[s.name] = literal(s.attrs["value"], self.dt[s.name])
        elif s.op in SPECIAL:
            self.expr[s.name] = self.special(*SPECIAL[s.op])
            if self.expr[s.name] in self.thread_vars:
                self.threads_in[s.name] = {self.expr[s.name]}
        elif MEANINGS.get(s.op) == (Form.CAST, "index_cast") and self._same_width(s):
            self.expr[s.name] = a[0]           # index is int32 here
            self.threads_in[s.name] = self.threads_in.get(s.operands[0], set())
        elif (folded := _fold(s.op, a)) is not None:
            self.expr[s.name] = folded
            kept = [o for o, x in zip(s.operands, a) if x == folded]     # the operand the fold kept, if any
            self.threads_in[s.name] = self.threads_in.get(kept[0], set()) if kept else set()
        else:
            # a statement (or a let): the expressions of its operands are written into it
            for o in s.operands:
                self.threads_read |= self.threads_in.get(o, set())
            if s.op == "tensor.extract":
                self.let(s.name, f"{self.buffers[s.attrs['arg']]}[{', '.join(a)}]", indent)
            elif s.op == "tensor.insert":
                self.emit(f"{self.buffers[s.attrs['arg']]}[{', '.join(a[1:])}] = {a[0]}", indent)
            elif s.op in BARRIERS:
                ident = [self.expr[s.attrs[k]] for k in ("id", "count") if s.attrs.get(k) is not None]
                self.emit(f"T.sync_threads({', '.join(ident)})", indent)
            elif s.op in _PROGRAM_OPS:
                _PROGRAM_OPS[s.op](self, s, a, indent)
            elif s.op == "scf.for":
                self.scf_for(s, a, indent)
            elif s.op == "scf.if":
                self.scf_if(s, a, indent)
            else:
                self.let(s.name, self.scalar(s, a), indent)

    def _same_width(self, s: Stmt) -> bool:
        """An index_cast between i32 and index, which are both int32 here."""
        return {self.dt[s.operands[0]], self.dt[s.name]} <= {"i32", "index"}

    def special(self, kind: str, axis: int) -> str:
        if kind == "thread_id":
            return self.thread_vars[axis] if axis < len(self.thread_vars) else "0"
        if kind == "block_dim":
            return str(int(self.block_dims[axis])) if axis < len(self.block_dims) else "1"
        if self.program is not None:          # the program's block ids and grid
            if kind == "block_id":
                return self.program.block_ids[axis] if axis < len(self.program.block_ids) else "0"
            return str(int(self.program.grid_dims[axis])) if axis < len(self.program.grid_dims) else "1"
        return "0" if kind == "block_id" else "1"

    # -- FlagTree's memory, printing and assertion ops ----------------------------------------------------------
    def error(self, s: Stmt, construct: str, detail: str):
        raise UnsupportedConstruct(construct, BACKEND, s.loc or self.body.loc, f"in raw function '{self.body.name}': "
                                                                               f"{detail}")

    def memref_dim(self, s: Stmt, a, indent: int):
        shape = self.program.shapes[s.attrs["arg"]] if self.program else self.body.args[s.attrs["arg"]].shape
        axis = s.attrs["axis"]
        if not 0 <= axis < len(shape):
            self.error(s, f"memref.dim {axis}", f"the tile '{self.body.args[s.attrs['arg']].name}' has "
                                                f"{len(shape)} axes")
        self.expr[s.name] = str(int(shape[axis]))

    def atomic_rmw(self, s: Stmt, a, indent: int):
        slot = self.fresh()
        self.emit(f"{slot} = T.alloc_var({TL_DTYPE[self.dt[s.name]]!r})", indent)
        target = f"{self.buffers[s.attrs['arg']]}[{', '.join(a[1:])}]"
        self.emit(f"{slot} = {_ATOMIC[s.attrs['kind']]}({target}, {a[0]}, return_prev=True)", indent)
        self.expr[s.name] = slot

    def getelementptr(self, s: Stmt, a, indent: int):
        param, offset, dtype = self.pointers[s.operands[0]]
        if s.attrs["elem"] != dtype:
            self.error(s, f"llvm.getelementptr over {s.attrs['elem']} elements", f"the pointer points to {dtype} "
                       f"elements ('{param}'); TileLang reads a kernel argument only as its own element type")
        step = a[1] if len(a) > 1 else str(s.attrs["constant"])
        self.pointers[s.name] = (param, step if offset == "0" else f"({offset} + {step})", dtype)
        self.expr[s.name] = param          # never written as a value: loads and stores read `pointers`

    def llvm_load(self, s: Stmt, a, indent: int):
        param, offset, dtype = self.pointers[s.operands[0]]
        if self.dt[s.name] != dtype:
            self.error(s, f"llvm.load of {self.dt[s.name]}", f"the pointer points to {dtype} elements")
        self.let(s.name, f"{param}[{offset}]", indent)

    def llvm_store(self, s: Stmt, a, indent: int):
        param, offset, dtype = self.pointers[s.operands[1]]
        if self.dt[s.operands[0]] != dtype:
            self.error(s, f"llvm.store of {self.dt[s.operands[0]]}", f"the pointer points to {dtype} elements")
        self.emit(f"{param}[{offset}] = {a[0]}", indent)

    def printf(self, s: Stmt, a, indent: int):
        self.emit(f"T.evaluate(T.call_extern('int32', 'printf', {s.attrs['format']!r}{''.join(', ' + x for x in a)}))",
                  indent)

    def assertion(self, s: Stmt, a, indent: int):
        self.imports_tvm = True
        self.emit(_ASSERT.format(cond=a[0], msg=repr(s.attrs["message"])), indent)

    def unsigned(self, e: str, dtype: str) -> str:
        return f"T.cast({e}, {UNSIGNED[dtype]!r})"

    def scalar(self, s: Stmt, a: list[str]) -> str:
        """The TIR expression of one arith or math op."""
        form, meaning = MEANINGS[s.op]
        src = self.dt[s.operands[0]]
        t = TL_DTYPE[self.dt[s.name]]
        if form is Form.MATH:
            return f"{_MATH[meaning]}({', '.join(a)})"
        if form is Form.ARITH:
            return f"({a[0]} {_INFIX[meaning]} {a[1]})"
        if form is Form.BITWISE:
            sym, logical = _BITS[meaning]
            if src != "i1":
                return f"({a[0]} {sym} {a[1]})"
            return f"{logical}({a[0]}, {a[1]})" if logical else f"({a[0]} != {a[1]})"
        if form in (Form.SIGNED_DIV, Form.SHIFT, Form.MINMAX):
            return f"{_CALL2[meaning]}({a[0]}, {a[1]})"
        if form is Form.UNSIGNED:
            return f"T.cast({_CALL2[meaning]}({self.unsigned(a[0], src)}, {self.unsigned(a[1], src)}), {t!r})"
        if form is Form.ROUNDED_DIV:
            return self.rounded_div(meaning, a[0], a[1], src, t)
        if form is Form.NAN_MINMAX:     # NaN in, NaN out (T.max / T.min drop a NaN)
            return f"T.if_then_else(T.Or({a[0]} != {a[0]}, {a[1]} != {a[1]}), {a[0]} + {a[1]}, " \
                   f"T.{meaning}({a[0]}, {a[1]}))"
        if form is Form.NEG:
            return f"(-{a[0]})"
        if form is Form.SELECT:
            return f"T.if_then_else({a[0]}, {a[1]}, {a[2]})"
        if form is Form.CMPI:
            relation, unsigned = cmpi_relation(s.attrs["predicate"])
            x, y = (self.unsigned(a[0], src), self.unsigned(a[1], src)) if unsigned else a
            return f"({x} {CMP_OPERATORS[relation]} {y})"
        if form is Form.CMPF:
            return _CMPF[s.attrs["predicate"]].format(a=a[0], b=a[1])
        return self.cast(meaning, a[0], src, self.dt[s.name])

    def rounded_div(self, meaning: str, x: str, y: str, src: str, t: str) -> str:
        """The truncating quotient, moved by one where the remainder is not 0 and the exact quotient lies the
        other way (ceil: positive, floor: negative)."""
        if meaning == "uceil":
            x, y = self.unsigned(x, src), self.unsigned(y, src)
            return f"T.cast(T.truncdiv({x}, {y}) + T.if_then_else(T.truncmod({x}, {y}) != 0, 1, 0), {t!r})"
        same_sign = f"(({x} < 0) == ({y} < 0))"
        moved = f"T.And(T.truncmod({x}, {y}) != 0, {same_sign if meaning == 'ceil' else f'T.Not({same_sign})'})"
        return f"(T.truncdiv({x}, {y}) {'+' if meaning == 'ceil' else '-'} T.if_then_else({moved}, 1, 0))"

    def cast(self, op: str, x: str, src: str, dst: str) -> str:
        t = TL_DTYPE[dst]
        if op == "bitcast":
            return f"T.reinterpret({x}, {t!r})"
        if op == "trunci" and dst == "i1":
            return f"(({x} & 1) == 1)"
        if src == "i1" and op in ("extsi", "sitofp"):     # a signed i1 is 0 or -1
            return f"(-T.cast({x}, {t!r}))"
        if op in ("extui", "uitofp") and src != "i1":
            return f"T.cast({self.unsigned(x, src)}, {t!r})"
        if op == "fptoui":
            return f"T.cast(T.cast({x}, {UNSIGNED[dst]!r}), {t!r})"
        return f"T.cast({x}, {t!r})"

    # -- structured control flow -------------------------------------------------------------------------
    def scf_while(self, s: Stmt, a: list[str], indent: int):
        """`before` computes the condition and the values passed on from the carried ones; it is written once
        ahead of the loop and again at the end of each step, into the same slots."""
        before, after = s.regions
        carried = [self.fresh() for _ in before.args]
        for var, init, arg in zip(carried, a, before.args):
            self.emit(f"{var} = T.alloc_var({TL_DTYPE[self.dt[arg]]!r}, init={init})", indent)
            self.expr[arg] = var
        go = self.fresh()
        passed = [self.fresh() for _ in after.args]
        self.stmts(before.stmts, indent)
        cond, *fwd = [self.expr[y] for y in before.yields]
        self.emit(f"{go} = T.alloc_var('bool', init={cond})", indent)
        for var, v, arg in zip(passed, fwd, after.args):
            self.emit(f"{var} = T.alloc_var({TL_DTYPE[self.dt[arg]]!r}, init={v})", indent)
            self.expr[arg] = var
        self.emit(f"while {go}:", indent)
        self.stmts(after.stmts, indent + 1)
        self.write_slots(carried, [self.expr[y] for y in after.yields], indent + 1)
        self.stmts(before.stmts, indent + 1)        # the condition again, from the new carried values
        cond, *fwd = [self.expr[y] for y in before.yields]
        self.write_slots([go, *passed], [cond, *fwd], indent + 1)
        for r, var in zip(s.results, passed):
            self.expr[r] = var

    def scf_for(self, s: Stmt, a: list[str], indent: int):
        lo, hi, step, inits = a[0], a[1], a[2], a[3:]
        region = s.regions[0]
        iv, carried = region.args[0], region.args[1:]
        slots = []
        for c, init, r in zip(carried, inits, s.results):
            var = self.fresh()
            self.emit(f"{var} = T.alloc_var({TL_DTYPE[self.dt[c]]!r}, init={init})", indent)
            self.expr[c] = self.expr[r] = var
            slots.append(var)
        counter = self.fresh()
        self.expr[iv] = counter
        bounds = hi if (lo, step) == ("0", "1") else f"{lo}, {hi}" if step == "1" else f"{lo}, {hi}, {step}"
        self.emit(f"for {counter} in T.serial({bounds}):", indent)
        self.region(region, slots, indent + 1)

    def scf_if(self, s: Stmt, a: list[str], indent: int):
        slots = []
        for r in s.results:
            var = self.fresh()
            self.emit(f"{var} = T.alloc_var({TL_DTYPE[self.dt[r]]!r})", indent)
            self.expr[r] = var
            slots.append(var)
        self.emit(f"if {a[0]}:", indent)
        self.region(s.regions[0], slots, indent + 1)
        if len(s.regions) > 1 and (s.regions[1].stmts or slots):
            self.clauses.add(len(self.rows))
            self.emit("else:", indent)
            self.region(s.regions[1], slots, indent + 1)

    def region(self, region: Region, slots: list[str], indent: int):
        before = len(self.rows)
        self.stmts(region.stmts, indent)
        for slot, y in zip(slots, region.yields):
            if slot != self.expr[y]:           # written into its slot
                self.threads_read |= self.threads_in.get(y, set())
        self.write_slots(slots, [self.expr[y] for y in region.yields], indent)
        if len(self.rows) == before:
            self.emit("pass", indent)

    def write_slots(self, slots: list[str], values: list[str], indent: int):
        """Assign yielded values to their slots; when one value reads another slot written here, all are
        first staged in lets, so every write sees the values of the previous iteration."""
        pending = [(slot, v) for slot, v in zip(slots, values) if slot != v]
        names = [slot for slot, _ in pending]
        hazard = any(re.search(rf"\b{re.escape(n)}\b", v) for own, v in pending for n in names if n != own)
        if hazard and len(pending) > 1:
            staged = []
            for slot, v in pending:
                tmp = self.fresh()
                self.emit(f"{tmp} = {v}", indent)
                staged.append((slot, tmp))
            pending = staged
        for slot, v in pending:
            self.emit(f"{slot} = {v}", indent)


_PROGRAM_OPS = {"memref.dim": _Renderer.memref_dim, "memref.atomic_rmw": _Renderer.atomic_rmw,
                "llvm.getelementptr": _Renderer.getelementptr, "llvm.load": _Renderer.llvm_load,
                "llvm.store": _Renderer.llvm_store, "gpu.printf": _Renderer.printf, "cf.assert": _Renderer.assertion,
                "scf.while": _Renderer.scf_while}
