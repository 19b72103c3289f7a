"""The state of one TileLang code generation, which every rule reads and extends: identifiers, the
allocations and statements emitted so far, the buffer or scalar each value lives in, the notes and the
access report; and the two dispatches through the rule table, `statement` (emit an op) and `elem` (write
one element of a value as a TIR expression).

A value that lives nowhere is recomputed where it is read: `elem` renders its defining op's expression
rule, down to the values that do live in a buffer or a scalar."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, NamedTuple

from ..analysis.access import Access, classify
from ..analysis.affine import AffineAnalysis
from ..errors import UnsupportedConstruct
from ..ir import ops
from ..ir import types as ir_types
from ..ir.core import Block, KernelIR, Op, Value
from ..ir.ops import Trait
from ..ir.uses import Identifiers, users
from ..spec import Spec
from .emission import Emission, Stmt
from .rules import RULES
from .syntax import GRID_VARS, PY_BUILTINS, copied_value, loop_indices, operand_index, parallel_header, tl_dtype

BACKEND = "tilelang"


@dataclass
class Buffer:
    name: str
    shape: tuple[int, ...]
    dtype: ir_types.DType
    scope: str            # "fragment" | "shared"
    block: Block          # where it was filled (its contents are valid there and in nested blocks)
    perm: tuple | None = None   # stored with its axes permuted: buffer axis i is the tile's axis perm[i]
    version: str | None = None  # one of several versions in a leading axis: the index expression of this one

    def region(self) -> str:
        """The buffer as a T.copy / T.gemm operand."""
        if self.version is None:
            return self.name
        return f"{self.name}[{', '.join([self.version] + [':'] * len(self.shape))}]"

    def at(self, idx: list[str]) -> str:
        """Element `idx` (in the buffer's own axes)."""
        return f"{self.name}[{', '.join(([self.version] if self.version is not None else []) + idx)}]"


class GroupWriter(NamedTuple):
    """How one warp group's branch writes a block's ops (the ones the group runs, with its hand-offs' waits and
    arrives), a loop that holds several groups' work and a tle.gpu.copy: warp_group_code.py's functions, handed
    to the context while it writes a group."""
    block_ops: Callable            # (gen, plan, block, ops, indent, then): `then` right after the terminator
    loop: Callable                 # (gen, for op, indent)
    copy_in: Callable              # (gen, copy_in op, buffer, indent) -> how it wrote the copy (TMA, cp.async) or None


class Context:
    def __init__(self, k: KernelIR, spec: Spec, grid: tuple[int, ...], debug: bool = False, raw_form: str = "cuda"):
        self.kernel = k
        self.raw_form = raw_form                # how tle.raw.dialect functions are written (codegen.generate)
        self.spec = spec
        self.grid = tuple(grid)
        self.ids = Identifiers(reserved={"T", "tilelang", "tvm", *GRID_VARS, *PY_BUILTINS})
        self.users = users(k)
        self.splits = [o for o in k.walk() if o.defn is ops.SPLIT]     # expressions.py: what they read
        # Triton's debug mode, when the kernel is lowered: tl.device_assert is checked only then (debug.py)
        self.debug = debug
        self.imports_tvm = False               # the module needs `import tvm` (tvm.ir.Op.get of a TileLang op)
        # what the loops' warp_specialize ask (control.py); one asking False turns TileLang's producer/consumer
        # split off for the whole kernel, which the loads of every loop must know before they are lowered
        self.warp_split_asked = {bool(o.attrs["warp_specialize"]) for o in k.walk()
                                 if o.defn is ops.FOR and o.attrs.get("warp_specialize") is not None}
        self.warp_split_off = False in self.warp_split_asked
        # does any atomic's returned value reach the kernel (then a block can acquire what another released)
        self.reads_atomic_results = any(o.defn in (ops.ATOMIC, ops.ATOMIC_CAS) and self.users.get(o.result.id)
                                        for o in k.walk())
        self.aff = AffineAnalysis(k)
        self.params = {p.value.id: p for p in k.params}
        self.arg = {p.value.id: spec.arg(p.name) for p in k.params}
        self.allocs: list[str] = []
        self.alloc_sources: dict[str, int] = {}     # an alloc line -> the source line of the op it is for
        self.device_sources: list[str] = []     # CUDA the kernel's calls need: one T.import_source for all
        self.views: dict[str, str] = {}         # param name -> view name
        self.view_lines: list[str] = []
        self.out = Emission()                  # the kernel body's statements
        self.buffers: dict[int, Buffer] = {}
        self.copies: dict[tuple, Buffer] = {}  # (value id, scope, dtype) -> a second buffer holding the value
        self.row_products = None               # reductions.py: the warp policy of each product, made once
        self.scalars: dict[int, str] = {}      # value id -> identifier of a let or alloc_var
        self.notes: list[str] = []
        self.accesses: dict[int, Access] = {}
        self.report: list[tuple[int, str, str, str]] = []   # (line, op, kind, how it was lowered)
        self.blocks: list[Block] = []
        self.keepdims: dict[int, int] = {}     # value id -> the unit axis of a keep_dims reduction
        self.index_loads: set[int] = set()     # loads of index tiles read again at each use (memory.py)
        self.product_feeds: set[int] = set()   # loads read inside the expression that stages a product's operand
        self.substitutes: dict = {}            # value id -> idx -> expression, while rendering one access
        self._all_values: dict[int, Value] | None = None
        self.pipelined: set[int] = set()       # id() of the for ops emitted as T.Pipelined
        self.static_pipelined: set[int] = set()   # id() of T.Pipelined loops with a constant trip count
        self.staged_index: set[int] = set()    # index loads staged in shared memory by their pipelined loop
        self.staged_body: Block | None = None  # body of the loop whose statements get named stages
        # tle.gpu.warp_group (warp_groups.py plans, warp_group_code.py writes): the plan, the group whose
        # branch is being written, the step counter of the loop holding several groups being written, and the
        # allocation each tle.gpu.alloc inside such a loop has (id(op) -> name), which every group's copy shares
        self.warp_plan = None
        self.warp_group: int | None = None
        self.warp_step: str | None = None
        self.warp_allocs: dict[int, str] = {}
        self.warp_thread: str | None = None    # the thread's index within its group
        self.group_threads = 0                  # and how many threads the group has
        # while a group's branch is written, warp_group_code.py's writers of its blocks, loops and copies: it sets them,
        # so that this module and the rule modules (below it) never import it
        self.group_writer: GroupWriter | None = None

    # -- naming, allocation, emission ---------------------------------------------------------------------
    def import_device_source(self, text: str):
        """CUDA text (device functions T.call_extern calls) for the kernel's source, once: TileLang takes one
        T.import_source per kernel, so the texts are joined (codegen.py)."""
        if text not in self.device_sources:
            self.device_sources.append(text)

    def alloc(self, base: str, shape, dtype: ir_types.DType, scope: str, static: bool = False) -> str:
        """A fresh buffer; `static`: a shared buffer of its own (scope 'shared'), outside the one dynamic
        buffer TileLang merges its other shared buffers into."""
        name = self.ids.fresh(base)
        shape = tuple(shape) or (1,)
        fn = "T.alloc_shared" if scope == "shared" else "T.alloc_fragment"
        where = ", scope='shared'" if static else ""
        self.allocs.append(f"{name} = {fn}({shape!r}, {tl_dtype(dtype)!r}{where})")
        self.alloc_sources[self.allocs[-1]] = self.out.src
        return name

    def emit(self, line: str, indent: int, reads=()) -> Stmt:
        """Emit a statement; `reads`: let names it reads that were not rendered through `elem`."""
        return self.out.statement(line, indent, reads)

    def let(self, name: str, expr: str, indent: int, reads=()):
        """Emit `name = expr`, a scalar let: the stage planner and the dead-let removal know it as one."""
        self.out.let(name, expr, indent, reads)

    def once(self, expr: str, base: str, indent: int) -> str:
        """`expr` as read where it is used: itself when it is a name or an element, else the name of a let that
        computes it once."""
        if re.fullmatch(r"[\w.]+(\[[^\[\]]*\])?", expr):
            return expr
        name = self.ids.fresh(base)
        self.let(name, expr, indent)
        return self.out.read(name)

    def thread(self) -> tuple[str, int]:
        """(this thread's index, how many threads run the statement): inside a warp group's branch the
        group's own threads, numbered from 0, else the block's."""
        if self.warp_thread is not None:
            return self.out.read(self.warp_thread), self.group_threads
        return "T.get_thread_binding()", 32 * self.kernel.num_warps

    def error(self, construct: str, op: Op, detail: str = ""):
        raise UnsupportedConstruct(construct, BACKEND, op.loc, detail)

    # -- statements ------------------------------------------------------------------------------------------
    def block(self, blk: Block, indent: int, then=None):
        """Emit `blk`'s ops; then call `then()` (a loop's or branch's writes of what it yields), while the
        block's own buffers are still visible."""
        self.blocks.append(blk)
        if self.warp_group is not None:         # one warp group's branch: its ops, and its hand-offs' barriers
            self.group_writer.block_ops(self, self.warp_plan, blk, blk.ops, indent, then=then)
        else:
            for op in blk.ops:
                self.statement(op, indent)
            if then is not None:
                then()
        self.blocks.pop()

    def statement(self, op: Op, indent: int):
        rule = RULES.get(op, "statement")
        if rule is None:
            self.error(f"op '{op.name}'", op)
        outer = self.out.src
        self.out.src = op.loc.line or outer       # what this op emits maps back to its line
        try:
            rule(self, op, indent)
        finally:
            self.out.src = outer

    # -- element expressions ------------------------------------------------------------------------------
    def scalar(self, v: Value) -> str:
        assert v.type.is_scalar, v
        return self.elem(v, [])

    def elem(self, v: Value, idx: list[str]) -> str:
        """A TIR expression for element `idx` of value `v` (idx is [] for scalars)."""
        if v.id in self.scalars:
            return self.out.read(self.scalars[v.id])
        if v.id in self.substitutes:
            return self.substitutes[v.id](idx)
        b = self.buffers.get(v.id)
        # a buffer filled in a block that does not enclose this point (the body of a loop that may run no
        # steps) holds nothing here: compute the value again
        if b is not None and self.visible(b):
            if v.id in self.keepdims:           # a keep_dims reduction: its buffer has no unit axis
                ax = self.keepdims[v.id]
                idx = idx[:ax] + idx[ax + 1:]
            if b.perm is not None:
                idx = [idx[p] for p in b.perm]
            return b.at(idx if idx else ["0"])
        op = v.defining_op
        if op is None:
            raise AssertionError(f"value {v} has no expression")
        return self.render(op, idx)

    def render(self, op: Op, idx: list[str]) -> str:
        """Element `idx` of `op`'s result, by its expression rule."""
        rule = RULES.get(op, "expression")
        if rule is None:
            self.error(f"'{op.name}' as a value", op)
        return rule(self, op, idx)

    def offset(self, ptr: Value, idx: list[str]) -> str:
        """Flat element offset of a pointer value from its argument's data pointer."""
        op = ptr.defining_op
        if ptr.id in self.params:
            return "0"
        if op is None:
            raise UnsupportedConstruct("a pointer carried through a loop or branch", BACKEND, None,
                                       "write the pointer as base + offsets computed from the loop counter")
        if op.defn is ops.ADDPTR:
            base = self.offset(op.operand("ptr"), idx)
            off = self.elem(op.operand("offset"), idx)
            return off if base == "0" else f"({base} + {off})"
        if op.has(Trait.LAYOUT):
            return self.offset(op.operand("x"), operand_index(op, idx))
        self.error(f"pointer produced by '{op.name}'", op)

    def forget(self, ops: list[Op], rewritten: tuple[Value, ...] = ()):
        """Drop what the values `ops` (a block's) define were bound to, before they are emitted a second time (a
        while loop's condition, computed again at the end of each step; a warp group's copy of the code the
        groups share): their second emission computes them anew. `rewritten`: values whose storage was
        written since (a loop's carried values): they keep it, but their copies are stale."""
        defined = {r.id for o in ops for n in (o, *(x for blk in o.regions for x in blk.walk())) for r in n.results}
        for table in (self.buffers, self.scalars, self.keepdims):
            for vid in defined:
                table.pop(vid, None)
        stale = defined | {v.id for v in rewritten}
        self.copies = {k: b for k, b in self.copies.items() if k[0] not in stale}

    # -- buffers ---------------------------------------------------------------------------------------------
    def visible(self, b: Buffer) -> bool:
        return b.block in self.blocks

    def buffer_of(self, v: Value, indent: int, scope: str = "fragment", dtype: ir_types.DType | None = None,
                  allow_perm: bool = False) -> Buffer:
        """A buffer holding `v` (filled here if it has none visible, or of another scope/dtype)."""
        dtype = dtype or v.type.elem
        b = self.buffers.get(v.id)
        if b is not None and self.visible(b) and b.dtype == dtype and (b.scope == scope or scope == "any") and \
                (b.perm is None or allow_perm):
            return b
        scope = "fragment" if scope == "any" else scope
        # a copy made for an earlier use (a product's operand staged in shared memory, say) serves again: the
        # value is immutable and nothing writes such a copy
        copy = self.copies.get((v.id, scope, dtype))
        if copy is not None and self.visible(copy):
            return copy
        name = self.alloc(v.name or "t", v.type.shape, dtype, scope)
        self.fill(name, v, indent, dtype)
        nb = Buffer(name, v.type.shape or (1,), dtype, scope, self.blocks[-1])
        if b is None or not self.visible(b):
            self.buffers[v.id] = nb
        else:
            self.copies[(v.id, scope, dtype)] = nb
        return nb

    def fill(self, name, v: Value, indent: int, dtype: ir_types.DType | None = None):
        """`for i.. in T.Parallel(shape): name[i..] = v[i..]`; `name` a buffer's name, or a Buffer."""
        shape = v.type.shape or (1,)
        idx = loop_indices(len(shape))
        expr = self.elem(v, idx if v.type.shape else [])
        if dtype is not None and dtype != v.type.elem:
            expr = f"T.cast({expr}, {tl_dtype(dtype)!r})"
        expr = copied_value(expr, dtype or v.type.elem)
        self.emit(parallel_header(idx, shape), indent)
        target = name.at(idx) if isinstance(name, Buffer) else f"{name}[{', '.join(idx)}]"
        self.emit(f"{target} = {expr}", indent + 1)

    def fragment(self, name: str, v: Value) -> Buffer:
        """The fragment `name`, filled here with `v`."""
        return Buffer(name, v.type.shape, v.type.elem, "fragment", self.blocks[-1])

    # -- accesses and uses -----------------------------------------------------------------------------------
    def access(self, op: Op) -> Access:
        if id(op) not in self.accesses:
            self.accesses[id(op)] = classify(op, self.aff, self.params)
        return self.accesses[id(op)]

    def value_users(self, v: Value) -> list[Op]:
        """Users of `v`, looking through layout-only ops (trans, cast) to the ops that consume them."""
        out = []
        for u in self.users.get(v.id, []):
            if u.defn is ops.TRANS and u.results:
                out.extend(self.value_users(u.result))
            else:
                out.append(u)
        return out

    def values_by_id(self) -> dict[int, Value]:
        if self._all_values is None:
            vals = {p.value.id: p.value for p in self.kernel.params}
            for o in self.kernel.walk():
                vals.update((r.id, r) for r in o.results)
                for blk in o.regions:
                    vals.update((a.id, a) for a in blk.args)
            self._all_values = vals
        return self._all_values

    def in_pipelined_loop(self, op: Op) -> bool:
        """Is `op` inside a loop emitted as T.Pipelined (the innermost loop around it)?"""
        loop = innermost_loop(op)
        return loop is not None and id(loop) in self.pipelined

    def in_static_pipelined_body(self, op: Op) -> bool:
        """Is `op` a top-level statement of a T.Pipelined loop with a constant trip count?"""
        loop = op.parent.parent_op if op.parent is not None else None
        return loop is not None and loop.defn is ops.FOR and id(loop) in self.static_pipelined


def enclosing_loops(op: Op):
    """The loops (for or while) around `op`, innermost first."""
    blk = op.parent
    while blk is not None and blk.parent_op is not None:
        if blk.parent_op.has(Trait.LOOP):
            yield blk.parent_op
        blk = blk.parent_op.parent


def innermost_loop(op: Op) -> Op | None:
    """The innermost loop around `op`, or None."""
    return next(enclosing_loops(op), None)
