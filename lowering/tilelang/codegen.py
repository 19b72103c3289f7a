"""Tile IR -> the source of a TileLang `@T.prim_func`.

Mapping (docs/lowering.md has the table):
- the kernel takes each tensor as a flat 1-D buffer; box accesses go through a view with the tensor's
  shape and strides (T.view / T.StridedTensor) and become `T.copy` of a region (bounds-predicated);
  gathers and general accesses are `T.Parallel` loops indexing the flat buffer, masked with
  `T.if_then_else` (loads) or `if` (stores);
- element-wise chains are written inline, one T.Parallel loop per materialized tile; loads, reductions,
  dot results and loop-carried tiles live in fragments (registers), dot operands in shared memory;
- `tl.dot` is `T.gemm` into a fragment accumulator (`trans` becomes transpose_A/B);
- `tl.sum/max/min` are `T.reduce_*`; argmax/argmin are a max/min reduction then a min over indices;
- a loop with num_stages (or one that stages dot operands through shared memory) is `T.Pipelined`.
"""
from __future__ import annotations

import os

import re
from dataclasses import dataclass

from ..analysis.access import Access, BoxPlan, classify, mask_always_true, plan_box
from ..analysis.affine import Affine, AffineAnalysis
from ..errors import UnsupportedConstruct
from ..ir import types as T
from ..ir.core import BUFFER_WRITES, Block, KernelIR, Op, Value
from ..ir.uses import Identifiers, users
from ..spec import Spec

BACKEND = "tilelang"
TL_DTYPE = {"i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
            "u16": "uint16", "u32": "uint32", "u64": "uint64", "fp16": "float16", "bf16": "bfloat16",
            "fp32": "float32", "fp64": "float64"}
_BIN = {"add": "+", "sub": "-", "mul": "*", "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_MATH = {"exp": "T.exp", "exp2": "T.exp2", "log": "T.log", "log2": "T.log2", "sqrt": "T.sqrt",
         "rsqrt": "T.rsqrt", "sigmoid": "T.sigmoid", "abs": "T.abs", "erf": "T.erf", "sin": "T.sin",
         "cos": "T.cos", "floor": "T.floor", "ceil": "T.ceil"}
_EXPENSIVE = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "erf", "sin", "cos", "fdiv", "div", "rem"}
_ELEMENTWISE = {"const", "arange", "splat", "broadcast", "expand_dims", "reshape", "trans", "binary", "cmp",
                "unary", "cast", "where", "addptr", "program_id", "num_programs"}
_GRID_VARS = ("bx", "by", "bz")
_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453
_PY_BUILTINS = {"sum", "max", "min", "abs", "range", "len", "int", "float", "bool", "pow", "round", "all", "any"}


def tl_dtype(d: T.DType) -> str:
    return TL_DTYPE[d.name]


def literal(value, dtype: T.DType) -> str:
    name = tl_dtype(dtype)
    if dtype.is_bool:
        return "True" if value else "False"
    if dtype.is_float:
        if value in (float("inf"), float("-inf")):
            return f"{'-' if value < 0 else ''}T.infinity({name!r})"
        if value != value:
            return f"T.cast(T.float32(float('nan')), {name!r})" if name != "float32" else "T.float32(float('nan'))"
        text = repr(float(value))
        return text if name == "float32" else f"T.{name}({text})"
    return repr(int(value)) if name == "int32" else f"T.{name}({int(value)})"


@dataclass
class Buffer:
    name: str
    shape: tuple[int, ...]
    dtype: T.DType
    scope: str            # "fragment" | "shared"
    block: Block          # where it was filled (its contents are valid there and in nested blocks)
    perm: tuple | None = None   # stored with its axes permuted: buffer axis i is the tile's axis perm[i]


class TileLangCodegen:
    def __init__(self, k: KernelIR, spec: Spec, grid: tuple[int, ...]):
        self.k = k
        self.spec = spec
        self.grid = tuple(grid)
        self.ids = Identifiers(reserved={"T", "tilelang", *_GRID_VARS, *_PY_BUILTINS})
        self.users = users(k)
        self.aff = AffineAnalysis(k)
        self.params = {p.value.id: p for p in k.params}
        self.arg = {p.value.id: spec.arg(p.name) for p in k.params}
        self.allocs: list[str] = []
        self.views: dict[str, str] = {}         # param name -> view name
        self.view_lines: list[str] = []
        self.lines: list[str] = []
        self.buffers: dict[int, Buffer] = {}
        self.scalars: dict[int, str] = {}      # value id -> identifier of a let or alloc_var
        self.notes: list[str] = []
        self.accesses: dict[int, Access] = {}
        self.report: list[tuple[int, str, str, str]] = []   # (line, op, kind, how it was lowered)
        self.blocks: list[Block] = []
        self._keepdims: dict[int, int] = {}   # value id -> the unit axis of a keep_dims reduction
        self._lets: list[tuple[int, str]] = []  # (line index, name) of scalar lets, for dead-let removal
        self.index_loads = self._index_loads()
        self.substitutes: dict = {}            # value id -> idx -> expression, while rendering one access
        self._all_values: dict[int, Value] | None = None
        self._pipelined: set[int] = set()      # id() of the for ops emitted as T.Pipelined
        self._staged_index: set[int] = set()   # index loads staged in shared memory by their pipelined loop
        self._stage0: set[int] = set()         # line numbers of the copies that are a pipeline's stage 0
        self._static_pipelined: set[int] = set()   # id() of T.Pipelined loops with a constant trip count
        self._staged_body: Block | None = None     # body of the loop whose statements get named stages

    # -- naming and allocation --------------------------------------------------------------------------
    def alloc(self, base: str, shape, dtype: T.DType, scope: str) -> str:
        name = self.ids.fresh(base)
        shape = tuple(shape) or (1,)
        fn = "T.alloc_shared" if scope == "shared" else "T.alloc_fragment"
        self.allocs.append(f"{name} = {fn}({shape!r}, {tl_dtype(dtype)!r})")
        return name

    def emit(self, line: str, indent: int):
        self.lines.append("    " * indent + line)

    def let(self, name: str, expr: str, indent: int):
        """Emit `name = expr`, a scalar let: the stage planner and the dead-let removal know it by its line."""
        self.emit(f"{name} = {expr}", indent)
        self._lets.append((len(self.lines) - 1, name))

    def error(self, construct: str, op: Op, detail: str = ""):
        raise UnsupportedConstruct(construct, BACKEND, op.loc, detail)

    # -- element expressions ------------------------------------------------------------------------------
    def scalar(self, v: Value) -> str:
        assert v.type.is_scalar, v
        return self.elem(v, [])

    def elem(self, v: Value, idx: list[str]) -> str:
        """A TIR expression for element `idx` of value `v` (idx is [] for scalars)."""
        if v.id in self.scalars:
            return self.scalars[v.id]
        if v.id in self.substitutes:
            return self.substitutes[v.id](idx)
        b = self.buffers.get(v.id)
        # a buffer filled in a block that does not enclose this point (the body of a loop that may run no
        # steps) holds nothing here: compute the value again
        if b is not None and self._visible(b):
            if v.id in self._keepdims:          # a keep_dims reduction: its buffer has no unit axis
                ax = self._keepdims[v.id]
                idx = idx[:ax] + idx[ax + 1:]
            if b.perm is not None:
                idx = [idx[p] for p in b.perm]
            ix = idx if idx else ["0"]
            return f"{b.name}[{', '.join(ix)}]"
        op = v.defining_op
        if op is None:
            raise AssertionError(f"value {v} has no expression")
        return self._render(op, idx)

    def _render(self, op: Op, idx: list[str]) -> str:
        a, o, n = op.attrs, op.operands, op.name
        if n == "const":
            return literal(a["value"], op.result.type.elem)
        if n == "program_id":
            return _GRID_VARS[a["axis"]]
        if n == "num_programs":
            return str(self.grid[a["axis"]] if a["axis"] < len(self.grid) else 1)
        if n == "arange":
            return idx[0] if a["start"] == 0 else f"({idx[0]} + {a['start']})"
        if n in _LAYOUT_OPS:
            return self.elem(o[0], _operand_index(op, idx))
        if n == "reshape":
            return self.elem(o[0], _reindex(idx, op.result.type.shape, o[0].type.shape))
        if n == "binary":
            x, y = self.elem(o[0], idx), self.elem(o[1], idx)
            k = a["op"]
            if k in _BIN:
                return f"({x} {_BIN[k]} {y})"
            if k == "fdiv":
                return f"({x} / {y})"
            if k == "div":
                return f"T.truncdiv({x}, {y})"    # Triton's integer division truncates, like C
            if k == "rem":
                return f"T.truncmod({x}, {y})" if o[0].type.elem.is_int else f"T.fmod({x}, {y})"
            if k == "maximum":
                return f"T.max({x}, {y})"
            if k == "minimum":
                return f"T.min({x}, {y})"
            self.error(f"binary op '{k}'", op)
        if n == "cmp":
            return f"({self.elem(o[0], idx)} {_CMP[a['pred']]} {self.elem(o[1], idx)})"
        if n == "unary":
            k = a["op"]
            x = self.elem(o[0], idx)
            if k == "neg":
                return f"(-{x})"
            if k in ("invert", "not"):
                return f"T.Not({x})" if o[0].type.elem.is_bool else f"(~{x})"
            if k == "exp" and o[0].type.elem == T.fp32:     # as Triton lowers tl.exp: 2^(x*log2(e))
                return f"T.exp2({x} * {_LOG2E})"
            if k == "log" and o[0].type.elem == T.fp32:     # as Triton lowers tl.log: log2(x)*ln(2)
                return f"(T.log2({x}) * {_LN2})"
            return f"{_MATH[k]}({x})"
        if n == "cast":
            if a.get("bitcast"):
                return f"T.reinterpret({self.elem(o[0], idx)}, {tl_dtype(a['dtype'])!r})"
            return f"T.cast({self.elem(o[0], idx)}, {tl_dtype(a['dtype'])!r})"
        if n == "where":
            return f"T.if_then_else({self.elem(o[0], idx)}, {self.elem(o[1], idx)}, {self.elem(o[2], idx)})"
        if n == "addptr":
            return self.offset(op.result, idx)
        if n == "load" and op.result.id in self.index_loads:
            return self._load_expr(op, idx)
        self.error(f"'{n}' as a value", op)

    def offset(self, ptr: Value, idx: list[str]) -> str:
        """Flat element offset of a pointer value from its argument's data pointer."""
        op = ptr.defining_op
        if ptr.id in self.params:
            return "0"
        if op is None:
            raise UnsupportedConstruct("a pointer carried through a loop or branch", BACKEND, None,
                                       "write the pointer as base + offsets computed from the loop counter")
        if op.name == "addptr":
            base = self.offset(op.operands[0], idx)
            off = self.elem(op.operands[1], idx)
            return off if base == "0" else f"({base} + {off})"
        if op.name in _LAYOUT_OPS:
            return self.offset(op.operands[0], _operand_index(op, idx))
        self.error(f"pointer produced by '{op.name}'", op)

    # -- materialization -------------------------------------------------------------------------------
    def _visible(self, b: Buffer) -> bool:
        return b.block in self.blocks

    def buffer_of(self, v: Value, indent: int, scope: str = "fragment", dtype: T.DType | None = None,
                  allow_perm: bool = False) -> Buffer:
        """A buffer holding `v` (filled here if it has none visible, or of another scope/dtype)."""
        dtype = dtype or v.type.elem
        b = self.buffers.get(v.id)
        if b is not None and self._visible(b) and b.dtype == dtype and (b.scope == scope or scope == "any") and \
                (b.perm is None or allow_perm):
            return b
        scope = "fragment" if scope == "any" else scope
        name = self.alloc(v.name or "t", v.type.shape, dtype, scope)
        self.fill(name, v, indent, dtype)
        nb = Buffer(name, v.type.shape or (1,), dtype, scope, self.blocks[-1])
        if b is None or not self._visible(b):
            self.buffers[v.id] = nb
        return nb

    def fill(self, name: str, v: Value, indent: int, dtype: T.DType | None = None):
        shape = v.type.shape or (1,)
        idx = [f"i{d}" for d in range(len(shape))]
        expr = self.elem(v, idx if v.type.shape else [])
        if dtype is not None and dtype != v.type.elem:
            expr = f"T.cast({expr}, {tl_dtype(dtype)!r})"
        self.emit(f"for {', '.join(idx)} in T.Parallel({', '.join(map(str, shape))}):", indent)
        self.emit(f"{name}[{', '.join(idx)}] = {expr}", indent + 1)

    def _cost(self, v: Value, seen=None) -> int:
        """Rough cost of recomputing `v` inline (expensive ops count more)."""
        if v.id in self.buffers or v.id in self.scalars:
            return 0
        op = v.defining_op
        if op is None or op.name not in _ELEMENTWISE:
            return 0
        if op.name in ("const", "program_id", "num_programs", "arange", "splat", "broadcast", "expand_dims",
                       "trans", "reshape"):
            c = 0
        else:
            c = 4 if op.attrs.get("op") in _EXPENSIVE else 1
        return c + sum(self._cost(o) for o in op.operands if o is not None)

    # -- accesses ----------------------------------------------------------------------------------------
    def access(self, op: Op) -> Access:
        if id(op) not in self.accesses:
            self.accesses[id(op)] = classify(op, self.aff, self.params)
        return self.accesses[id(op)]

    def view(self, param_value: Value) -> str:
        p = self.params[param_value.id]
        if p.name in self.views:
            return self.views[p.name]
        a = self.arg[param_value.id]
        name = self.ids.fresh(p.name + "_v")
        dt = tl_dtype(a.type.elem.elem)
        contiguous = _contiguous_strides(a.shape) == tuple(a.strides)
        if contiguous and len(a.shape) == 1:
            self.views[p.name] = self.ids[param_value]      # the flat buffer is already this view
            return self.views[p.name]
        # T.StridedTensor rather than T.view: T.view checks sizes in bits with an int32 and overflows
        # on tensors of 2^31 bits or more
        self.view_lines.append(f"{name} = T.StridedTensor({tuple(a.shape)!r}, {tuple(a.strides)!r}, {dt!r}, "
                               f"data={self.ids[param_value]}.data)")
        self.views[p.name] = name
        return name

    def box(self, op: Op, acc: Access, mask: Value | None) -> BoxPlan | None:
        if acc.kind != "box" or acc.param is None:
            return None
        a = self.arg[acc.param.value.id]
        plan, why = plan_box(acc, mask, op.operands[0].type.shape, a.shape, a.strides, self.aff)
        if plan is None:
            acc.reason = why
        return plan

    def region(self, view: str, plan: BoxPlan) -> str:
        parts = []
        for d in plan.dims:
            s = self.affine_expr(d.start)
            parts.append(s if d.axis is None else f"{s}:{s} + {d.extent}" if s != "0" else f"0:{d.extent}")
        return f"{view}[{', '.join(parts)}]"

    def affine_expr(self, f: Affine) -> str:
        """Render a scalar affine form, preferring the kernel's own named scalars (pid_m * 64) over
        the program ids and quotients they were computed from."""
        named = []
        for vid, name in self.scalars.items():
            form = self.aff.memo.get(vid)
            if form is not None and form.syms and form.is_scalar_form and not (len(form.syms) == 1 and
                                                                              form.syms[0][1] == 1 and not form.const):
                named.append((name, form))
        named.sort(key=lambda nf: -len(nf[1].syms))
        prefix = []
        for name, form in named:
            sym0, c0 = form.syms[0]
            fc = dict(f.syms).get(sym0)
            if fc is None or fc % c0:
                continue
            k = fc // c0
            if k <= 0:
                continue
            rest = f - form.scale(k)
            if all(s not in dict(rest.syms) for s, _ in form.syms) and \
                    len(rest.syms) < len(f.syms):
                prefix.append(name if k == 1 else f"{name} * {k}")
                f = rest
        terms = list(prefix)
        for sym, c in f.syms:
            v = self.aff.symbols[sym]
            e = self.scalar(v)
            terms.append(e if c == 1 else f"{e} * {c}")
        if f.const or not terms:
            terms.append(str(f.const))
        return " + ".join(terms)

    # -- statements --------------------------------------------------------------------------------------
    def block(self, blk: Block, indent: int, slots=None):
        """Emit `blk`'s ops; with `slots` (of a loop or branch), then write what it yields into them, while
        the block's own buffers are still visible."""
        self.blocks.append(blk)
        for op in blk.ops:
            self.statement(op, indent)
        if slots is not None:
            self._write_slots(slots, blk.terminator.operands if blk.terminator else [], indent)
        self.blocks.pop()

    def statement(self, op: Op, indent: int):
        n = op.name
        if n == "yield":
            return
        handler = getattr(self, "_st_" + n, None)
        if handler is not None:
            handler(op, indent)
            return
        if n not in _ELEMENTWISE:
            self.error(f"op '{n}'", op)
        v = op.result
        us = self.users.get(v.id, [])
        if v.type.is_scalar:
            if v.type.is_pointer or n == "const":
                return
            if v.name or len(us) > 1 or any(u.parent is not op.parent for u in us):
                name = self.ids.define(v)
                self.let(name, self._render(op, []), indent)
                self.scalars[v.id] = name
            return
        if v.type.is_pointer or v.type.elem.is_bool:
            return
        # a tile: inline unless it is costly and used more than once, or inside a loop it is not in
        cost = self._cost(v)
        nested = any(u.parent is not op.parent for u in us)
        if cost >= 4 and (len(us) > 1 or nested):
            self.buffer_of(v, indent)

    # memory
    def _st_load(self, op: Op, indent: int):
        ptr, mask, other = op.operands[:3]
        v = op.result
        acc = self.access(op)
        param = self.ids[acc.param.value] if acc.param is not None else None
        if acc.param is None:
            self.error("a load through a pointer that is not base + offsets of one argument", op)
        if v.id in self._staged_index:
            self._stage0.add(len(self.lines))
            name, _, _ = self._read_global(op, None, "shared", False, indent)
            self.buffers[v.id] = Buffer(name, v.type.shape, v.type.elem, "shared", self.blocks[-1])
            self.report.append((op.loc.line, "load", acc.kind, "T.Parallel into shared in stage 0 of T.Pipelined "
                                "(an index tile the stage's gathers read)"))
            return
        if v.id in self.index_loads:
            self.report.append((op.loc.line, "load", acc.kind, "read at each use (an index tile of a gather)"))
            return
        if v.type.is_scalar:
            self.report.append((op.loc.line, "load", acc.kind, "scalar expression"))
            e = f"{param}[{self.offset(ptr, [])}]"
            if mask is not None:
                e = f"T.if_then_else({self.scalar(mask)}, {e}, {self.scalar(other) if other is not None else literal(0, v.type.elem)})"
            name = self.ids.define(v)
            self.let(name, e, indent)
            self.scalars[v.id] = name
            return
        pipelined_async = op.attrs.get("async") == "pipelined"
        dot_operand = any(u.name == "dot" for u in self._value_users(v))
        scope = "shared" if pipelined_async or dot_operand else "fragment"
        # a plain load of a dot operand at the top of a pipelined loop is, to TileLang, one more copy of
        # the loop's stage 0 (as a T.copy there would be); only where the trip count is a constant:
        # TileLang 0.1.15 fails on a loop of dynamic length holding asynchronous copies
        plain_copy = not pipelined_async and dot_operand and self._in_static_pipelined_body(op)
        ahead = pipelined_async or plain_copy
        if ahead:
            self._stage0.add(len(self.lines))
        name, how, perm = self._read_global(op, None, scope, ahead, indent)
        kind = "TMA or cp.async bulk copy" if how.startswith("T.copy") else "cp.async per thread"
        if pipelined_async:
            how += f", is_async: stage 0 of T.Pipelined (num_stages={op.attrs['async_stages']}), {kind}"
        elif plain_copy:
            how += f", stage 0 of its T.Pipelined loop like the loop's other copies, {kind}"
        elif op.attrs.get("is_async"):
            how += f", is_async: {op.attrs.get('async', 'plain')}"
        self.report.append((op.loc.line, "load", acc.kind, how))
        self.buffers[v.id] = Buffer(name, v.type.shape, v.type.elem, scope, self.blocks[-1], perm)

    def _read_global(self, op: Op, into: str | None, scope: str, asynchronous: bool, indent: int):
        """Emit the read of a load's (or a tle.gpu.copy's) pointer tile into a buffer: `into`, or a new
        one of `scope`. `asynchronous`: the read is a stage of a pipelined loop, so write it in the form
        TileLang issues as cp.async where that keeps its meaning. Returns (buffer name, how, storage
        permutation or None)."""
        ptr, mask, other = op.operands[:3]
        shape, elem = ptr.type.shape, ptr.type.elem.elem
        acc = self.access(op)
        param = self.ids[acc.param.value]
        plan = self.box(op, acc, mask)
        # `other` only matters where the mask can be false
        zero_other = other is None or _is_zero(other) or mask_always_true(mask, shape, self.aff)
        perm = None
        # a read into a fragment inside T.Pipelined stays element-wise: TileLang 0.1.15 gives a T.copy from global
        # into a fragment to the producer warps of its warp-specialized pipeline, and the consumer warps that read
        # the fragment never see it (they read it uninitialized)
        fragment_in_pipeline = scope == "fragment" and self._in_pipelined_loop(op)
        if plan is not None and zero_other and not fragment_in_pipeline:
            name = into or self.alloc(op.results[0].name or "t", shape, elem, scope)
            self.emit(f"T.copy({self.region(self.view(acc.param.value), plan)}, {name})", indent)
            return name, f"T.copy into {scope}", None
        if plan is None:
            why = acc.reason
        elif not zero_other:
            why = "`other` is not zero where the mask can be false"
        else:
            why = "a plain read in T.Pipelined, kept with the warps that use it"
        tile = op.results[0] if op.name == "load" else ptr
        perm = self._storage_order(acc, tile) if scope == "shared" and into is None else None
        stored = shape if perm is None else tuple(shape[p] for p in perm)
        name = into or self.alloc(op.results[0].name or "t", stored, elem, scope)
        idx = [f"i{d}" for d in range(len(shape))]
        # only reads that are a stage of a pipelined loop take the copy form TileLang issues as cp.async;
        # elsewhere a load stays a synchronous masked read
        fill = self._zero_filled_rows(op, acc, idx) if asynchronous and zero_other and mask is not None \
            else None
        if fill is not None:
            # masked-off rows are sent out of bounds: TileLang's bounds predication zero-fills them,
            # and the copy stays a plain (vectorizable, asynchronous) global-to-shared copy
            self.substitutes = fill
            e = f"{param}[{self.offset(ptr, idx)}]"
            self.substitutes = {}
            why = ""
        else:
            e = self._load_expr(op, idx)
        # loop over the buffer's own axes: the innermost one is where consecutive threads go
        order = list(range(len(shape))) if perm is None else list(perm)
        self.emit(f"for {', '.join(idx[d] for d in order)} in T.Parallel({', '.join(map(str, stored))}):", indent)
        self.emit(f"{name}[{', '.join(idx[d] for d in order)}] = {e}", indent + 1)
        how = f"T.Parallel into {scope}" + (" (stored transposed: its contiguous axis is the first)"
                                            if perm is not None else "") + (f" ({why})" if why else "")
        if fill is not None:
            how += ", masked rows zero-filled by bounds predication"
        return name, how, perm

    def _zero_filled_rows(self, op: Op, acc: Access, idx: list[str]) -> dict | None:
        """For a gather `x[rows[j], ...]` masked by a condition on the gathered rows only (other
        conjuncts provably true) with zero for `other`: substitute for `rows` an index that points
        past the argument where the mask is false. TileLang predicates every out-of-bounds global read
        to zero, so the result is the masked load's, while the copy keeps the plain form that its
        pipeliner issues as cp.async. None where this does not apply."""
        mask = op.operands[1]
        if acc.offset is None or len(acc.offset.data) != 1:
            return None
        vid, axes, coef = acc.offset.data[0]
        if coef <= 0 or len(axes) != 1:
            return None
        extent = self.arg[acc.param.value.id].extent
        out_row = -(-2 * extent // coef)        # row * coef >= 2 * extent: past the end from any base
        if out_row * coef + extent >= 2 ** 31:
            return None
        row_terms = []
        for leaf in _conjuncts(mask):
            used = _axes_used(leaf, op.operands[0].type.rank)
            if used is None:
                return None
            if used <= set(axes):
                row_terms.append(leaf)
            elif not mask_always_true(leaf, leaf.type.shape, self.aff):
                return None
        if not row_terms:
            return None
        rows = self._values_by_id().get(vid)
        if rows is None:
            return None
        cond = " & ".join(self.elem(t, idx) for t in row_terms)
        return {vid: lambda ix, rows=rows, cond=cond: (
            f"T.if_then_else({cond}, {self._without_substitutes(rows, ix)}, {out_row})")}

    def _without_substitutes(self, v: Value, idx: list[str]) -> str:
        saved, self.substitutes = self.substitutes, {}
        try:
            return self.elem(v, idx)
        finally:
            self.substitutes = saved

    def _values_by_id(self) -> dict[int, Value]:
        if self._all_values is None:
            vals = {p.value.id: p.value for p in self.k.params}
            for o in self.k.walk():
                vals.update((r.id, r) for r in o.results)
                for blk in o.regions:
                    vals.update((a.id, a) for a in blk.args)
            self._all_values = vals
        return self._all_values

    def _storage_order(self, acc: Access, v: Value) -> tuple | None:
        """(1, 0) when a 2-D tile read element by element is contiguous in memory along its first axis
        and not its last: stored transposed, consecutive threads read consecutive addresses."""
        if v.type.rank != 2 or acc.offset is None:
            return None
        if acc.offset.axis_coef(0) == 1 and acc.offset.axis_coef(1) != 1:
            return (1, 0)
        return None

    def _load_expr(self, op: Op, idx: list[str]) -> str:
        ptr, mask, other = op.operands[:3]
        acc = self.access(op)
        e = f"{self.ids[acc.param.value]}[{self.offset(ptr, idx)}]"
        if mask is not None:
            oth = self.elem(other, idx) if other is not None else literal(0, ptr.type.elem.elem)
            e = f"T.if_then_else({self.elem(mask, idx)}, {e}, {oth})"
        return e

    def _index_loads(self) -> set[int]:
        """Loads of 1-D index tiles (values that other accesses gather through) that are read again at
        each use rather than held in a fragment: a fragment's layout follows the first loop that
        writes it, and every gather indexing it from another layout would then run on the few threads
        that own each element. Only when nothing in the kernel writes the indexed argument."""
        written = {id(self.access(o).param) for o in self.k.walk() if o.name in ("store", "atomic", "copy_out")}
        gathered = set()
        for o in self.k.walk():
            if o.name in ("load", "store", "atomic", "copy_in", "copy_out"):
                a = self.access(o)
                if a.offset is not None:
                    gathered.update(vid for vid, _, _ in a.offset.data)
        out = set()
        for o in self.k.walk():
            if o.name == "load" and o.result.id in gathered and o.result.type.rank == 1 and \
                    not o.attrs.get("is_async") and id(self.access(o).param) not in written and \
                    all(u.name in _ELEMENTWISE or u.name in ("load", "store", "copy_in", "copy_out")
                        for u in self.users.get(o.result.id, [])):
                out.add(o.result.id)
        return out

    def _value_users(self, v: Value) -> list[Op]:
        """Users of `v`, looking through layout-only ops (trans, cast) to the ops that consume them."""
        out = []
        for u in self.users.get(v.id, []):
            if u.name in ("trans",) and u.results:
                out.extend(self._value_users(u.result))
            else:
                out.append(u)
        return out

    def _st_store(self, op: Op, indent: int, site: str = "store"):
        ptr, val, mask = op.operands
        acc = self.access(op)
        if acc.param is None:
            self.error("a store through a pointer that is not base + offsets of one argument", op)
        param = self.ids[acc.param.value]
        elem = ptr.type.elem.elem
        if ptr.type.is_scalar:
            self.report.append((op.loc.line, site, acc.kind, "scalar statement"))
            # every thread of the block runs a scalar statement; they all store the same value
            st = f"{param}[{self.offset(ptr, [])}] = {self.scalar(val)}"
            if mask is not None:
                self.emit(f"if {self.scalar(mask)}:", indent)
                self.emit(st, indent + 1)
            else:
                self.emit(st, indent)
            return
        plan = self.box(op, acc, mask)
        if plan is not None:
            src = val
            cast = val.defining_op
            if cast is not None and cast.name == "cast" and not cast.attrs.get("bitcast") and \
                    cast.operands[0].id in self.buffers and self._visible(self.buffers[cast.operands[0].id]) and \
                    self.buffers[cast.operands[0].id].perm is None:
                src = cast.operands[0]          # T.copy converts to the destination's dtype itself
            b = self.buffers[src.id] if src is not val else self.buffer_of(val, indent, "any", dtype=elem)
            self.emit(f"T.copy({b.name}, {self.region(self.view(acc.param.value), plan)})", indent)
            self.report.append((op.loc.line, site, acc.kind, f"T.copy from {b.scope}" if site == "store"
                                else f"T.copy from {b.name}"))
            return
        self.report.append((op.loc.line, site, acc.kind,
                            "T.Parallel" + (f" ({acc.reason})" if acc.reason else "")))
        self._masked_parallel(ptr.type.shape, mask, lambda idx: f"{param}[{self.offset(ptr, idx)}] = "
                              f"{self.elem(val, idx)}", indent)

    def _masked_parallel(self, shape, mask: Value | None, statement, indent: int):
        """`for i.. in T.Parallel(shape): [if mask[i..]:] statement(i..)`."""
        idx = [f"i{d}" for d in range(len(shape))]
        self.emit(f"for {', '.join(idx)} in T.Parallel({', '.join(map(str, shape))}):", indent)
        if mask is not None:
            self.emit(f"if {self.elem(mask, idx)}:", indent + 1)
            self.emit(statement(idx), indent + 2)
        else:
            self.emit(statement(idx), indent + 1)

    def _st_atomic(self, op: Op, indent: int):
        ptr, val, mask = op.operands
        if self.users.get(op.result.id):
            self.error(f"using the value returned by tl.atomic_{op.attrs['kind']}", op)
        acc = self.access(op)
        if acc.param is None:
            self.error("an atomic through a pointer that is not base + offsets of one argument", op)
        param = self.ids[acc.param.value]
        fn = f"T.atomic_{op.attrs['kind']}"
        self.report.append((op.loc.line, "atomic", acc.kind, f"{fn} per element" if ptr.type.shape else f"{fn} on one thread"))
        if ptr.type.is_scalar:
            # a scalar statement runs on every thread: let one thread do the atomic
            self.emit("if T.get_thread_binding() == 0:", indent)
            cond = f"{self.scalar(mask)}" if mask is not None else None
            st = f"{fn}({param}[{self.offset(ptr, [])}], {self.scalar(val)})"
            if cond:
                self.emit(f"if {cond}:", indent + 1)
                self.emit(st, indent + 2)
            else:
                self.emit(st, indent + 1)
            return
        self._masked_parallel(ptr.type.shape, mask, lambda idx: f"{fn}({param}[{self.offset(ptr, idx)}], "
                              f"{self.elem(val, idx)})", indent)

    # reductions and products
    def _st_reduce(self, op: Op, indent: int):
        x = op.operands[0]
        kind, axis = op.attrs["kind"], op.attrs["axis"]
        v = op.result
        src = self.buffer_of(x, indent, "fragment")
        out_shape = tuple(s for i, s in enumerate(x.type.shape) if i != axis) or (1,)
        out = self.alloc(v.name or kind, out_shape, v.type.elem, "fragment")
        if kind in ("sum", "max", "min"):
            self.emit(f"T.reduce_{kind}({src.name}, {out}, dim={axis})", indent)
        else:
            # arg-reductions: the extreme value, then the smallest index holding it (Triton's tie-break)
            ext = self.alloc((v.name or kind) + "_val", out_shape, x.type.elem, "fragment")
            self.emit(f"T.reduce_{'max' if kind == 'argmax' else 'min'}({src.name}, {ext}, dim={axis})", indent)
            cand = self.alloc((v.name or kind) + "_idx", x.type.shape, T.i32, "fragment")
            idx = [f"i{d}" for d in range(x.type.rank)]
            ridx = [i for d, i in enumerate(idx) if d != axis] or ["0"]
            n = x.type.shape[axis]
            self.emit(f"for {', '.join(idx)} in T.Parallel({', '.join(map(str, x.type.shape))}):", indent)
            self.emit(f"{cand}[{', '.join(idx)}] = T.if_then_else({src.name}[{', '.join(idx)}] == "
                      f"{ext}[{', '.join(ridx)}], {idx[axis]}, {n})", indent + 1)
            self.emit(f"T.reduce_min({cand}, {out}, dim={axis})", indent)
        self.buffers[v.id] = Buffer(out, out_shape, v.type.elem, "fragment", self.blocks[-1])
        if op.attrs["keep_dims"]:
            self._keepdims[v.id] = axis      # same data with a unit axis: element access drops it

    def _operand(self, v: Value, indent: int) -> tuple[Buffer, bool]:
        """A shared-memory buffer for a dot operand, and whether it is transposed."""
        op = v.defining_op
        if op is not None and op.name == "trans" and v.id not in self.buffers and op.attrs["perm"] == (1, 0):
            b, t = self._operand(op.operands[0], indent)
            return b, not t
        b = self.buffer_of(v, indent, "shared", allow_perm=True)
        return b, b.perm == (1, 0)

    def _st_dot(self, op: Op, indent: int):
        a, b, accv = op.operands
        v = op.result
        ab, ta = self._operand(a, indent)
        bb, tb = self._operand(b, indent)
        out = self._accumulator(op, accv, indent)
        flags = []
        if ta:
            flags.append("transpose_A=True")
        if tb:
            flags.append("transpose_B=True")
        self.emit(f"T.gemm({', '.join([ab.name, bb.name, out.name] + flags)})", indent)
        self.buffers[v.id] = out

    def _accumulator(self, op: Op, accv: Value, indent: int) -> Buffer:
        """The fragment T.gemm accumulates into: the accumulator's own buffer when nothing reads it later,
        a cleared fragment for a zero accumulator, else a fresh copy (a value still read after the dot)."""
        v = op.result
        if _is_zero(accv):
            name = self.alloc(v.name or "acc", v.type.shape, v.type.elem, "fragment")
            self.emit(f"T.clear({name})", indent)
            return Buffer(name, v.type.shape, v.type.elem, "fragment", self.blocks[-1])
        target = self._in_place_target(accv, op)
        if target is not None:
            if target.id != accv.id:     # an element-wise update of the old accumulator: write it in place
                tb = self.buffers[target.id]
                self.fill(tb.name, accv, indent)
            return self.buffers[target.id]
        # T.gemm overwrites its accumulator: a fresh fragment, never the one other uses of `accv` read
        return self._copy_fragment(accv, indent)

    def _copy_fragment(self, v: Value, indent: int) -> Buffer:
        name = self.alloc(v.name or "acc", v.type.shape, v.type.elem, "fragment")
        self.fill(name, v, indent)
        return Buffer(name, v.type.shape, v.type.elem, "fragment", self.blocks[-1])

    def _in_place_target(self, v: Value, consumer: Op) -> Value | None:
        """A fragment-held value that `v` is an element-wise, single-use function of (reading it at the
        same index), which nothing reads after `consumer`: `v` can overwrite it."""
        while True:
            us = [u for u in self.users.get(v.id, []) if not self._yields_back(u, v)]
            if len(us) != 1 or us[0] is not consumer:
                return None
            if v.id in self.buffers:
                b = self.buffers[v.id]
                return v if b.scope == "fragment" and self._visible(b) else None
            op = v.defining_op
            if op is None or op.name not in ("binary", "unary", "cast", "where"):
                return None
            same = [o for o in op.operands if o is not None and o.type.shape == v.type.shape and
                    (o.id in self.buffers or (o.defining_op is not None and o.defining_op.name in
                                              ("binary", "unary", "cast", "where")))]
            if len(same) != 1 or (op.name == "cast"):
                return None
            consumer, v = op, same[0]

    # control flow
    def _st_for(self, op: Op, indent: int):
        lo, hi, step, *inits = op.operands
        iv, *carried = op.body.args
        slots = []
        for c, init, r in zip(carried, inits, op.results):
            slots.append(self._carry_slot(c, init, r, op, indent))
        trip = self._trip(lo, hi, step)
        stages = op.attrs.get("num_stages")
        pipelined = stages is not None and stages >= 2
        if stages is None and op.attrs.get("async_stages"):
            # the launch's num_stages, which pipeline_async_loads found enough for this loop's is_async loads
            stages, pipelined = op.attrs["async_stages"], True
        elif stages is None and self._stages_operands(op.body):
            stages, pipelined = self.k.num_stages, self.k.num_stages >= 2
        ivn = self.ids.define(iv)
        simple = _is_const(lo, 0) and _is_const(step, 1)
        counter = ivn if simple else self.ids.fresh(ivn + "_it")
        if op.attrs.get("kind") == "tle.gpu.pipeline":
            self.report.append((op.loc.line, "tle.gpu.pipeline", "loop",
                                f"T.Pipelined(num_stages={stages})" if pipelined else
                                f"T.serial (num_stages={stages}: no pipelining)"))
        header = len(self.lines)
        if pipelined:
            self._pipelined.add(id(op))
            if trip.isdigit():
                self._static_pipelined.add(id(op))
            self.emit(f"for {counter} in T.Pipelined({trip}, num_stages={stages}):", indent)
        else:
            self.emit(f"for {counter} in T.serial({trip}):", indent)
        if not simple:
            start = "" if _is_const(lo, 0) else f"{self.scalar(lo)} + "
            stride = "" if _is_const(step, 1) else f" * {self.scalar(step)}"
            self.let(ivn, f"{start}{counter}{stride}", indent + 1)
        self.scalars[iv.id] = ivn
        staged = self._index_tiles_to_stage(op.body) if pipelined else set()
        if staged:
            # Index tiles the loop's gathers read go to shared memory once per step; TileLang's pipeline
            # planner would put that write in the last stage, after the copies that need it, so the
            # loop names each statement's stage itself. Where that cannot be done, emit it again without.
            saved = self._checkpoint()
            self._staged_index |= staged
            outer, self._staged_body = self._staged_body, op.body
            self._emit_loop_body(op, slots, indent + 1)
            self._staged_body = outer
            plan = self._stage_plan(header + 1, indent + 1, stages)
            self._staged_index -= staged
            if plan is not None:
                order, stage = plan
                self.lines[header] = self.lines[header][:-2] + f", order={order}, stage={stage}):"
                return
            self._restore(saved)
        self._emit_loop_body(op, slots, indent + 1)

    def _emit_loop_body(self, op: Op, slots, indent: int):
        before = len(self.lines)
        self.block(op.body, indent, slots)
        if len(self.lines) == before:
            self.emit("pass", indent)

    def _index_tiles_to_stage(self, body: Block) -> set[int]:
        """Index loads at the top of a pipelined loop's body that its asynchronous gathers read."""
        gathered = set()
        for o in body.ops:
            if (o.name == "copy_in" or (o.name == "load" and o.attrs.get("async") == "pipelined")):
                acc = self.access(o)
                if acc.offset is not None:
                    gathered.update(vid for vid, _, _ in acc.offset.data)
        return {o.result.id for o in body.ops if o.name == "load" and o.result.id in self.index_loads and
                o.result.id in gathered and self._stays_synchronous(o)}

    def _stays_synchronous(self, load: Op) -> bool:
        """Does TileLang keep this read of global memory into shared synchronous inside T.Pipelined? It
        issues a plain or zero-filled copy as cp.async, and its software pipeline does not wait for one
        before a statement of the same stage: an index tile read that way and then gathered through in
        its own stage would be read before it lands. A masked read whose `other` is not zero stays a
        plain read."""
        ptr, mask, other = load.operands[:3]
        return mask is not None and other is not None and not _is_zero(other) and \
            not mask_always_true(mask, ptr.type.shape, self.aff)

    def _stage_plan(self, start: int, indent: int, stages: int):
        """(order, stage) for T.Pipelined over the statements emitted at `indent` from line `start`: the
        stage-0 copies first stage, the rest the last; None when lets come between statements (they nest
        the statements after them) or no copy is in stage 0."""
        pad = "    " * indent
        lets = {i for i, _ in self._lets}
        stage, seen = [], False
        for i in range(start, len(self.lines)):
            ln = self.lines[i]
            if not ln.startswith(pad) or ln.startswith(pad + " ") or ln[len(pad):].startswith("else:"):
                continue
            if i in lets:
                if seen:
                    return None
                continue
            seen = True
            stage.append(0 if i in self._stage0 else stages - 1)
        if 0 not in stage:
            return None
        return list(range(len(stage))), stage

    def _checkpoint(self):
        return (len(self.lines), len(self.allocs), len(self.view_lines), len(self.report), len(self.notes),
                dict(self.buffers), dict(self.scalars), dict(self._keepdims), list(self._lets), dict(self.views),
                dict(self.ids.names), set(self.ids.used), set(self._pipelined), set(self._stage0))

    def _restore(self, saved):
        (n_lines, n_allocs, n_views, n_report, n_notes, self.buffers, self.scalars, self._keepdims, self._lets,
         self.views, self.ids.names, self.ids.used, self._pipelined, self._stage0) = saved
        del self.lines[n_lines:], self.allocs[n_allocs:], self.view_lines[n_views:], self.report[n_report:]
        del self.notes[n_notes:]

    def _trip(self, lo, hi, step) -> str:
        if _is_const(lo, 0) and _is_const(step, 1):
            return self.scalar(hi)
        bounds = [_const_value(v) for v in (lo, hi, step)]
        if None not in bounds and bounds[2] > 0:     # a constant trip count (it makes a T.Pipelined loop static)
            lo_, hi_, step_ = bounds
            return str(max(0, -(-(hi_ - lo_) // step_)))
        return f"T.ceildiv({self.scalar(hi)} - {self.scalar(lo)}, {self.scalar(step)})"

    def _stages_operands(self, body: Block) -> bool:
        """Does the loop bring dot operands into shared memory (where pipelining pays)?"""
        for o in body.walk():
            if o.name == "load" and any(u.name == "dot" for u in self._value_users(o.result)):
                return True
            if o.name == "copy_in":
                return True
        return False

    def _carry_slot(self, c: Value, init: Value, r: Value, loop: Op, indent: int):
        """Storage for a loop-carried (or branch-merged) value: a fragment for tiles, a var for scalars."""
        if c.type.is_pointer:
            self.error("a pointer carried through a loop that is not advanced by a loop-invariant step",
                       loop)
        if c.type.is_buffer:       # every version of a tle.gpu buffer is its one shared allocation
            out = loop.body.terminator.operands[loop.body.args.index(c) - 1]
            buf = self._same_buffer([init, out], loop, "a tle.gpu buffer carried by a loop")
            self.buffers[c.id] = self.buffers[r.id] = buf
            return ("buffer", buf, c)
        if c.type.is_scalar:
            name = self.ids.define(c)
            self.emit(f"{name} = T.alloc_var({tl_dtype(c.type.elem)!r}, init={self.scalar(init)})", indent)
            self.scalars[c.id] = name
            self.scalars[r.id] = name
            return ("var", name, c)
        # reuse the init's fragment when nothing else reads the init
        b = self.buffers.get(init.id)
        if b is not None and b.scope == "fragment" and self._visible(b) and \
                all(u is loop for u in self.users.get(init.id, [])):
            buf = b
        elif _is_zero(init):
            name = self.alloc(c.name or "acc", c.type.shape, c.type.elem, "fragment")
            self.emit(f"T.clear({name})", indent)
            buf = Buffer(name, c.type.shape, c.type.elem, "fragment", self.blocks[-1])
        else:
            name = self.alloc(c.name or "acc", c.type.shape, c.type.elem, "fragment")
            self.fill(name, init, indent)
            buf = Buffer(name, c.type.shape, c.type.elem, "fragment", self.blocks[-1])
        self.buffers[c.id] = buf
        self.buffers[r.id] = buf
        return ("buf", buf, c)

    def _write_slots(self, slots, outs: list[Value], indent: int):
        """Write the values a loop body (or branch) yields into their slots. Writes that read another
        slot written here are staged through temporaries first, so every write sees the old values."""
        pending = []
        for (kind, slot, c), out in zip(slots, outs):
            if kind == "buffer":
                continue
            if kind == "var":
                if self.scalars.get(out.id) != slot:
                    pending.append((kind, slot, self.scalar(out), out))
            elif self.buffers.get(out.id) is not slot:
                idx = [f"i{d}" for d in range(out.type.rank)]
                pending.append((kind, slot, self.elem(out, idx), out))
        names = [s if k == "var" else s.name for k, s, _, _ in pending]
        # a slot's name read as a whole word (`acc` is not read by `acc1[i0] + t[i0]`)
        hazard = len(pending) > 1 and any(
            any(_mentions(expr, n) for n in names if n != own)
            for (own, (_, _, expr, _)) in zip(names, pending))
        staged = []
        for kind, slot, expr, out in pending:
            if hazard:
                if kind == "var":
                    tmp = self.ids.fresh(slot + "_next")
                    self.let(tmp, expr, indent)
                    staged.append((kind, slot, tmp, out))
                else:
                    tmp = self.alloc(slot.name + "_next", out.type.shape, out.type.elem, "fragment")
                    self.fill(tmp, out, indent)
                    staged.append((kind, slot, tmp, out))
            else:
                staged.append((kind, slot, expr, out))
        for kind, slot, expr, out in staged:
            if kind == "var":
                self.emit(f"{slot} = {expr}", indent)
            elif hazard:
                idx = [f"i{d}" for d in range(out.type.rank)]
                self.emit(f"for {', '.join(idx)} in T.Parallel({', '.join(map(str, out.type.shape))}):", indent)
                self.emit(f"{slot.name}[{', '.join(idx)}] = {expr}[{', '.join(idx)}]", indent + 1)
            else:
                self.fill(slot.name, out, indent)

    def _st_if(self, op: Op, indent: int):
        cond = op.operands[0]
        slots = []
        reuse = self._loop_slots_of(op)
        for i, r in enumerate(op.results):
            if r.type.is_buffer:
                ys = [blk.terminator.operands[i] for blk in op.regions]
                buf = self._same_buffer(ys, op, "a tle.gpu buffer written under a runtime condition")
                self.buffers[r.id] = buf
                slots.append(("buffer", buf, r))
                continue
            if i in reuse:
                # a branch whose else leaves a loop-carried value as it is: write the loop's own slot
                c = reuse[i]
                if c.id in self.scalars:
                    self.scalars[r.id] = self.scalars[c.id]
                    slots.append(("var", self.scalars[c.id], r))
                else:
                    self.buffers[r.id] = self.buffers[c.id]
                    slots.append(("buf", self.buffers[c.id], r))
                continue
            if r.type.is_scalar:
                name = self.ids.define(r)
                self.emit(f"{name} = T.alloc_var({tl_dtype(r.type.elem)!r})", indent)
                self.scalars[r.id] = name
                slots.append(("var", name, r))
            else:
                name = self.alloc(r.name or "t", r.type.shape, r.type.elem, "fragment")
                buf = Buffer(name, r.type.shape, r.type.elem, "fragment", self.blocks[-1])
                self.buffers[r.id] = buf
                slots.append(("buf", buf, r))
        self.emit(f"if {self.scalar(cond)}:", indent)
        for i, blk in enumerate(op.regions):
            has_ops = any(o.name != "yield" for o in blk.ops)
            if i == 1:
                # TileLang splits an if without else into one statement per op, which would not match
                # the stage list the layer names; an empty else keeps the branch one statement
                if not has_ops and len(reuse) == len(slots) and op.parent is not self._staged_body:
                    break
                self.emit("else:", indent)
            before = len(self.lines)
            self.block(blk, indent + 1, slots)
            if len(self.lines) == before:
                self.emit("pass", indent + 1)

    def _yields_back(self, u: Op, v: Value) -> bool:
        """Is `u` an else-branch yield handing loop-carried `v` back to its own slot (no read)?"""
        if u.name != "yield" or u.parent is None or u.parent.parent_op is None:
            return False
        branch = u.parent.parent_op
        if branch.name != "if" or u.parent is not branch.regions[-1]:
            return False
        slots = self._loop_slots_of(branch)
        return any(c is v for c in slots.values())

    def _loop_slots_of(self, branch: Op) -> dict[int, Value]:
        """result index -> carried value, for results of `branch` that its loop yields back in the same
        position while the else branch yields that carried value unchanged."""
        blk = branch.parent
        loop = blk.parent_op if blk is not None else None
        if loop is None or loop.name != "for" or blk.terminator is None or len(branch.regions) < 2:
            return {}
        carried = loop.body.args[1:]
        loop_yield = list(blk.terminator.operands)
        else_y = branch.regions[1].terminator
        else_vals = list(else_y.operands) if else_y else []
        out = {}
        for i, r in enumerate(branch.results):
            if r in loop_yield:
                j = loop_yield.index(r)
                if i < len(else_vals) and else_vals[i] is carried[j] and loop_yield.count(r) == 1 and \
                        (carried[j].id in self.buffers or carried[j].id in self.scalars):
                    out[i] = carried[j]
        return out

    # tle.gpu buffers
    def _same_buffer(self, versions: list[Value], op: Op, what: str) -> Buffer:
        """The one shared allocation that all `versions` are versions of."""
        roots = {id(self._root(v)) for v in versions}
        if len(roots) != 1:
            self.error(f"{what} that stands for different allocations on different paths", op,
                       "TileLang keeps each tle.gpu.alloc in one shared buffer; write the same buffer on every "
                       "path (swap buffers by index, not by rebinding names)")
        return self.buffers[self._root(versions[0]).id]

    def _root(self, v: Value) -> Value:
        """The tle.gpu.alloc result that buffer version `v` descends from."""
        while True:
            op = v.defining_op
            if op is None:                                   # a loop's carried version: its init
                blk = v.owner
                loop = blk.parent_op
                v = loop.operands[3 + blk.args.index(v) - 1]
            elif op.name == "alloc":
                return v
            elif op.name == "copy_in":
                v = op.operands[3]
            elif op.name == "local_store":
                v = op.operands[0]
            elif op.name == "for":
                v = op.operands[3 + op.results.index(v)]
            elif op.name == "if":
                v = op.regions[0].terminator.operands[op.results.index(v)]
            else:
                raise AssertionError(f"buffer version from '{op.name}'")

    def _st_alloc(self, op: Op, indent: int):
        v = op.result
        name = self.alloc(v.name or "buf", v.type.shape, v.type.elem, "shared")
        self.buffers[v.id] = Buffer(name, v.type.shape, v.type.elem, "shared", self.k.body)
        self.report.append((op.loc.line, "tle.gpu.alloc", "buffer", f"T.alloc_shared {name}"))

    def _st_copy_in(self, op: Op, indent: int):
        acc = self.access(op)
        if acc.param is None:
            self.error("a tle.gpu.copy from a pointer that is not base + offsets of one argument", op)
        buf = self.buffers[op.operands[3].id]       # every version maps to its allocation's buffer
        staged = self._in_pipelined_loop(op)
        if staged:
            self._stage0.add(len(self.lines))
        _, how, _ = self._read_global(op, buf.name, "shared", staged, indent)
        if staged:
            how += ", a stage of T.Pipelined (cp.async or TMA where TileLang can)"
        self.buffers[op.result.id] = buf
        self.report.append((op.loc.line, "tle.gpu.copy", acc.kind, how.replace("into shared", f"into {buf.name}")))

    def _in_static_pipelined_body(self, op: Op) -> bool:
        """Is `op` a top-level statement of a T.Pipelined loop with a constant trip count?"""
        loop = op.parent.parent_op if op.parent is not None else None
        return loop is not None and loop.name == "for" and id(loop) in self._static_pipelined

    def _in_pipelined_loop(self, op: Op) -> bool:
        blk = op.parent
        while blk is not None and blk.parent_op is not None:
            if blk.parent_op.name == "for":
                return id(blk.parent_op) in self._pipelined
            blk = blk.parent_op.parent
        return False

    def _st_copy_out(self, op: Op, indent: int):
        self._st_store(op, indent, site="tle.gpu.copy")

    def _st_local_load(self, op: Op, indent: int):
        v = op.result
        buf = self.buffers[op.operands[0].id]
        if self._read_before_next_write(op):
            self.buffers[v.id] = buf
            how = f"reads {buf.name} in place"
        else:       # the buffer is written again while this tile is still in use: keep a copy
            name = self.alloc(v.name or buf.name + "_tile", v.type.shape, v.type.elem, "fragment")
            self.emit(f"T.copy({buf.name}, {name})", indent)
            self.buffers[v.id] = Buffer(name, v.type.shape, v.type.elem, "fragment", self.blocks[-1])
            how = f"T.copy {buf.name} into a fragment (the buffer is written again while the tile is in use)"
        self.report.append((op.loc.line, "tle.gpu.local_load", "buffer", how))

    def _read_before_next_write(self, op: Op) -> bool:
        """Are all reads of `op`'s tile (through the element-wise ops written inline at their use) in
        its block, before the next op there that writes the same buffer?"""
        blk = op.parent
        root = self._root(op.operands[0])
        pos = blk.ops.index(op)
        limit = len(blk.ops)
        for i in range(pos + 1, len(blk.ops)):
            o = blk.ops[i]
            if any(w.name in BUFFER_WRITES and self._root(w.results[0]) is root for w in [o, *_nested(o)]) or \
                    (o.name in ("for", "if") and any(r.type.is_buffer and self._root(r) is root for r in o.results)):
                limit = i
                break
        pending, seen = [op.result], set()
        while pending:
            v = pending.pop()
            for u in self.users.get(v.id, []):
                if id(u) in seen:
                    continue
                seen.add(id(u))
                top = u
                while top.parent is not blk:
                    if top.parent is None or top.parent.parent_op is None:
                        return False
                    top = top.parent.parent_op
                if blk.ops.index(top) >= limit:
                    return False
                if u.name in _ELEMENTWISE and u.results and u.results[0].id not in self.buffers:
                    pending.append(u.results[0])
        return True

    def _st_local_store(self, op: Op, indent: int):
        bv, val = op.operands
        buf = self.buffers[bv.id]
        self.buffers[op.result.id] = buf
        src = self.buffers.get(val.id)
        if src is buf:
            how = "nothing to do (the tile is the buffer's own contents)"
        elif src is not None and self._visible(src) and src.perm is None and src.dtype == buf.dtype:
            self.emit(f"T.copy({src.name}, {buf.name})", indent)
            how = f"T.copy from a {src.scope} buffer"
        else:
            idx = [f"i{d}" for d in range(len(buf.shape))]
            if _mentions(self.elem(val, idx), buf.name):
                # the new contents read the buffer itself: compute them aside first
                tmp = self.alloc(buf.name + "_next", buf.shape, buf.dtype, "fragment")
                self.fill(tmp, val, indent)
                self.emit(f"T.copy({tmp}, {buf.name})", indent)
                how = "T.Parallel into a fragment, then T.copy (the value reads the buffer)"
            else:
                self.fill(buf.name, val, indent)
                how = "T.Parallel into the buffer"
        self.report.append((op.loc.line, "tle.gpu.local_store", "buffer", how))

    def _st_raw_call(self, op: Op, indent: int):
        """tle.call: the raw function's body runs as written, thread by thread, on shared-memory copies of
        its argument tiles; the copies of the written arguments are the call's results (their other
        positions keep the argument's value). Its threads are the kernel's own; TileLang's thread
        synchronization pass puts the barriers between the copies and the thread-level code."""
        from .raw_render import render_tilelang
        fn, threads, outputs = op.attrs["fn"], tuple(op.attrs["threads"]), tuple(op.attrs["outputs"])
        body = fn.body()
        body.check(BACKEND)
        count, kernel_threads = _raw_thread_count(threads), 32 * self.k.num_warps
        if count != kernel_threads:
            warps = count // 32
            hint = f"launch the kernel with num_warps={warps}" if count % 32 == 0 and warps & (warps - 1) == 0 \
                else "give the call 32 * 2**k threads and launch the kernel with num_warps=2**k"
            self.error(f"tle.call({fn.name}) with hardware threads {threads}", op,
                       f"on TileLang the raw function's threads are the kernel's threads, and the kernel runs "
                       f"{kernel_threads} (32 * num_warps={self.k.num_warps}), not {count}; {hint}")
        for k, v in enumerate(op.operands):
            if not v.type.shape:
                self.error(f"tle.call({fn.name}) on a rank-0 tile ('{fn.params[k]}')", op,
                           "pass tiles of rank 1 or more")
        names = []
        for k, v in enumerate(op.operands):
            if k in outputs:               # a fresh copy: the function writes it, the argument stays as it was
                r = op.results[outputs.index(k)]
                name = self.alloc(r.name or fn.params[k], v.type.shape, v.type.elem, "shared")
                self.fill(name, v, indent)
            else:
                name = self.buffer_of(v, indent, "shared").name
            names.append(name)
        tid = self.ids.fresh("tid")
        self.let(tid, "T.get_thread_binding(0)", indent)
        thread_vars = [tid]
        if len(threads) > 1:               # axis x varies fastest over the kernel's flat thread index
            thread_vars = []
            for axis, expr in enumerate(_raw_thread_axes(tid, threads)):
                name = self.ids.fresh(f"{tid}_{'xyz'[axis]}")
                self.let(name, expr, indent)
                thread_vars.append(name)
        prefix = self.ids.fresh(fn.name) + "_"
        lines = render_tilelang(body, names, thread_vars=thread_vars, block_dims=list(threads), indent=indent,
                                prefix=prefix)
        self.ids.used.update(re.findall(rf"\b{re.escape(prefix)}\d+\b", "\n".join(lines)))
        self.lines.extend(lines)
        for k, r in zip(outputs, op.results):
            self.buffers[r.id] = Buffer(names[k], tuple(r.type.shape), r.type.elem, "shared", self.blocks[-1])
        self.report.append((op.loc.line, "tle.call", "raw", "thread-level code on shared buffers"))
        for k, spec in enumerate(op.attrs.get("layout") or ()):
            order = spec.get("order") if spec else None
            if order is not None and tuple(order) != _raw_row_major(len(order)):
                self.notes.append(f"line {op.loc.line}: tle.call({fn.name}): the order {list(order)} of "
                                  f"'{fn.params[k]}' is a layout hint; TileLang infers shared layouts itself")

    # -- the module ----------------------------------------------------------------------------------------
    def _drop_dead_lets(self):
        """Remove scalar lets nothing reads (e.g. a bound the mask analysis folded into a T.copy region)."""
        while True:
            text = "\n".join(self.lines)
            dead = {i for i, name in self._lets
                    if i < len(self.lines) and self.lines[i] is not None
                    and len(re.findall(rf"\b{re.escape(name)}\b", text)) == 1}
            if not dead:
                break
            for i in dead:
                self.lines[i] = None
            self.lines = [ln for ln in self.lines if ln is not None]
            kept = [(i, n) for i, n in self._lets if i not in dead]
            # re-index the remaining lets after removal
            self._lets = [(i - sum(1 for d in dead if d < i), n) for i, n in kept]

    def generate(self) -> str:
        k = self.k
        sig = []
        for p in k.params:
            a = self.arg[p.value.id]
            name = self.ids.define(p.value, p.name)
            if a.is_tensor:
                sig.append(f"{name}: T.Tensor(({max(a.extent, 1)},), {tl_dtype(a.type.elem.elem)!r})")
            else:
                sig.append(f"{name}: T.{tl_dtype(a.type.elem)}")
                self.scalars[p.value.id] = name
        body_indent = 2
        self.block(k.body, body_indent)
        self._drop_dead_lets()
        threads = 32 * k.num_warps
        grid = ", ".join(map(str, self.grid))
        gvars = _GRID_VARS[:len(self.grid)]
        as_ = gvars[0] if len(gvars) == 1 else f"({', '.join(gvars)})"
        out = [f"# Generated by tle from {os.path.basename(k.loc.file)}:{k.loc.line} ({k.name}); edit the source kernel, not this file.",
               "import tilelang.language as T",
               ""]
        if getattr(k, "specialized", None):
            out.append("# compiled for: " + ", ".join(f"{n}={v}" for n, v in k.specialized.items()))
        if k.constexprs:
            out.append("# constexprs: " + ", ".join(f"{n}={v!r}" for n, v in k.constexprs.items()))
        for p in k.params:
            a = self.arg[p.value.id]
            if a.is_tensor:
                out.append(f"# {p.name}: shape {tuple(a.shape)}, strides {tuple(a.strides)}")
        out.append("")
        out.append("")
        out.append("@T.prim_func")
        out.append(f"def {k.name}(")
        for s in sig:
            out.append(f"    {s},")
        out.append("):")
        out.append(f"    with T.Kernel({grid}, threads={threads}) as {as_}:")
        for line in self.view_lines + self.allocs:
            out.append("        " + line)
        out.extend(self.lines)
        if not self.lines and not self.allocs:
            out.append("        pass")
        return "\n".join(out) + "\n"


_LAYOUT_OPS = ("splat", "broadcast", "expand_dims", "trans")


def _operand_index(op: Op, idx: list[str]) -> list[str]:
    """For a layout op (splat, broadcast, expand_dims, trans): the index into its operand that element
    `idx` of its result reads."""
    a = op.attrs
    if op.name == "splat":
        return []
    if op.name == "broadcast":
        src = op.operands[0].type.shape
        off = len(idx) - len(src)
        return [("0" if s == 1 else idx[off + i]) for i, s in enumerate(src)]
    if op.name == "expand_dims":
        return idx[:a["axis"]] + idx[a["axis"] + 1:]
    src = [None] * len(a["perm"])          # trans: result axis i is operand axis perm[i]
    for i, p in enumerate(a["perm"]):
        src[p] = idx[i]
    return src


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def _reindex(idx: list[str], new_shape, old_shape) -> list[str]:
    flat_terms = []
    stride = 1
    for i in reversed(range(len(new_shape))):
        flat_terms.append(idx[i] if stride == 1 else f"{idx[i]} * {stride}")
        stride *= new_shape[i]
    flat = "(" + " + ".join(reversed(flat_terms)) + ")"
    out = []
    stride = 1
    strides = []
    for s in reversed(old_shape):
        strides.append(stride)
        stride *= s
    strides = list(reversed(strides))
    for s, st in zip(old_shape, strides):
        out.append(f"({flat} // {st} % {s})" if st > 1 else f"({flat} % {s})")
    return out


def _conjuncts(mask: Value) -> list[Value]:
    """The leaves of an `a & b & ...` tree of boolean tiles."""
    op = mask.defining_op
    if op is not None and op.name == "binary" and op.attrs["op"] == "and":
        return _conjuncts(op.operands[0]) + _conjuncts(op.operands[1])
    return [mask]


def _axes_used(v: Value, rank: int) -> set[int] | None:
    """The axes of a broadcast-to-`rank` tile that `v` varies along (None if unknown)."""
    op = v.defining_op
    if op is not None and op.name in ("broadcast", "splat"):
        src = op.operands[0]
        inner = _axes_used(src, src.type.rank) if src.type.rank else set()
        if inner is None:
            return None
        off = rank - src.type.rank
        return {off + a for a in inner if src.type.shape[a] != 1}
    if v.type.rank != rank:
        return None
    return {a for a, s in enumerate(v.type.shape) if s != 1}


def _nested(op: Op) -> list[Op]:
    """The ops inside `op`'s regions."""
    return [o for r in op.regions for o in r.walk()]


def _mentions(text: str, name: str) -> bool:
    """Does generated `text` read identifier `name` (as a whole word)?"""
    return re.search(rf"\b{re.escape(name)}\b", text) is not None


def _const_value(v: Value):
    """The value of an integer constant, else None."""
    op = v.defining_op
    if op is None or op.name != "const" or not v.type.elem.is_int:
        return None
    return int(op.attrs["value"])


def _is_const(v: Value, value) -> bool:
    return v.defining_op is not None and v.defining_op.name == "const" and v.defining_op.attrs["value"] == value


def _is_zero(v: Value) -> bool:
    op = v.defining_op
    while op is not None and op.name in ("splat", "broadcast"):
        op = op.operands[0].defining_op
    return op is not None and op.name == "const" and op.attrs["value"] == 0


def generate(k: KernelIR, spec: Spec, grid) -> tuple[str, list[str], list]:
    """(source, notes, access report: (line, op, kind, how it was lowered) per load/store/atomic)."""
    g = TileLangCodegen(k, spec, grid)
    src = g.generate()
    return src, g.notes, sorted(g.report)


def _raw_thread_count(threads) -> int:
    """The number of threads a tle.call asks for (the product over its thread axes)."""
    n = 1
    for t in threads:
        n *= int(t)
    return n


def _raw_thread_axes(tid: str, threads) -> list[str]:
    """Per thread axis of a tle.call, its index from the flat thread index `tid` (axis x fastest)."""
    out, stride = [], 1
    for axis, t in enumerate(threads):
        e = tid if stride == 1 else f"{tid} // {stride}"
        out.append(e if axis == len(threads) - 1 else f"{e} % {t}" if stride == 1 else f"({e}) % {t}")
        stride *= int(t)
    return out


def _raw_row_major(rank: int) -> tuple[int, ...]:
    """A layout `order` (axes fastest-varying first, as Triton writes it) that is plain row-major."""
    return tuple(reversed(range(rank)))
