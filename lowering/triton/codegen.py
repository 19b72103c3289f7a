"""Tile IR -> the source of a `@triton.jit` kernel.

The output reads like a hand-written Triton kernel: constexprs are folded in, each named source
variable is a statement, and single-use pure values are written inline where they are used.
"""
from __future__ import annotations

import os
from functools import reduce

from ..errors import UnsupportedConstruct
from ..ir import ops
from ..ir.core import Block, KernelIR, Op, Value
from ..ir.ops import Trait, UnaryOp, ops_of, with_trait
from ..ir.types import broadcast_shapes
from ..ir.uses import Identifiers, users
from . import combine, expressions, statements
from .rules import RULES
from .syntax import BIN, PREC, full, literal

BACKEND = "triton"
RULES.include(combine.RULE_SET, expressions.RULE_SET, statements.RULE_SET)      # the op rules, listed here
# values written inline where they are used (when used once, or unnamed)
_INLINE = with_trait(Trait.ELEMENTWISE) | ops_of(ops.LOCAL_LOAD)
# ops whose Triton spelling (an operator, tl.where) broadcasts its operands itself
_IMPLICIT_BROADCAST_USERS = ops_of(ops.BINARY, ops.CMP, ops.WHERE, ops.ADDPTR)
# ops that only stretch their operand to a shape, which those users (and tl.load's `other`) do themselves
_STRETCHES = with_trait(Trait.STRETCH)


class TritonCodegen:
    def __init__(self, k: KernelIR):
        self.kernel = k
        self.ids = Identifiers(reserved={"tl", "triton", "libdevice"})
        self.users = users(k)
        self.lines: list[str] = []
        self.line_sources: list[int] = []    # the kernel source line of the op each line was emitted for (0: none)
        self.src = 0                         # that of the op being lowered
        self.line_map: dict[int, int] = {}   # generated line (from 1) -> source line, made by generate()
        self.imports: list[str] = []     # modules a rule's text needs beyond triton and tl
        self.functions: dict[tuple, str] = {}   # module-level helpers a rule's text calls: their text -> name
        self.function_lines: list[str] = []
        self.raw_library = None          # the LLVM IR of tle.raw.dialect calls (raw_dialect_call.RawLibrary)

    def need_import(self, line: str):
        if line not in self.imports:
            self.imports.append(line)

    def function(self, base: str, params: list[str], body: list[str]) -> str:
        """The name of a module-level `@triton.jit` function with this text (e.g. a combine function of
        tl.associative_scan), defined once however often the kernel calls it."""
        key = (base, tuple(params), tuple(body))
        if key not in self.functions:
            self.functions[key] = name = self.ids.fresh(base)
            self.function_lines += ["@triton.jit", f"def {name}({', '.join(params)}):", *body, "", ""]
        return self.functions[key]

    # -- which values become expressions instead of statements ------------------------------------
    def inline(self, op: Op) -> bool:
        if op.defn is ops.ALLOC:
            return True
        if op.defn not in _INLINE or len(op.results) != 1:
            return False
        v = op.result
        us = self.users.get(v.id, [])
        if op.defn is ops.CONST:
            return True
        if self.implicitly_broadcast(op):
            return True
        if v.name and op.defn is not ops.EXPAND_DIMS:
            return False
        return len(us) == 1 and us[0].parent is op.parent

    def implicitly_broadcast(self, op: Op) -> bool:
        """A splat/broadcast whose every user broadcasts its operands itself in Triton, to the same shape."""
        us = self.users.get(op.result.id, [])
        if op.defn not in _STRETCHES or not us or any(u.defn not in _IMPLICIT_BROADCAST_USERS for u in us):
            return False
        # written without it, the user's shape is the broadcast of what its operands render as: a scalar beside
        # scalars stays a scalar (`0.0 - float('inf')`; a loop-carried variable would change type in Triton),
        # and `tl.where(keep, 0.0, ...)` of a [1, N] mask would be [1, N], not the splat's [M, N]
        src = op.operand("x").type.shape
        return all(reduce(broadcast_shapes, [self._rendered_shape(o) for o in u.operands if o is not op.result], src)
                   == op.result.type.shape for u in us)

    def _rendered_shape(self, v: Value) -> tuple[int, ...]:
        """The shape `v` renders as at least: a splat or broadcast it may drop counts as its operand."""
        d = v.defining_op
        if v in self.ids or d is None or d.defn not in _STRETCHES:
            return v.type.shape
        return d.operand("x").type.shape

    def expr(self, v: Value) -> str:
        if v in self.ids:
            return self.ids[v]
        op = v.defining_op
        assert op is not None, f"value {v} has no name and no defining op"
        return self.render(op)

    def prec(self, v: Value) -> int:
        """Python precedence of the expression `v` renders to (higher binds tighter)."""
        if v in self.ids:
            return 100
        op = v.defining_op
        if op.defn is ops.BINARY and op.attrs["op"] in BIN:
            return PREC[BIN[op.attrs["op"]]]
        if op.defn is ops.CMP:
            return PREC["<"]
        if op.defn is ops.ADDPTR:
            return PREC["+"]
        if op.defn is ops.UNARY and op.attrs["op"] in (UnaryOp.NEG, UnaryOp.INVERT, UnaryOp.NOT):
            return PREC["unary"]
        if op.defn is ops.CONST and isinstance(op.attrs["value"], (int, float)) and op.attrs["value"] < 0:
            return PREC["unary"]
        if self.implicitly_broadcast(op):
            return self.prec(op.operand("x"))
        return 100

    def paren(self, v: Value, need: int = 100, right: bool = False) -> str:
        """`v` as an operand that needs precedence `need` (a right operand of equal precedence is
        parenthesized: a - (b - c))."""
        e = self.expr(v)
        p = self.prec(v)
        if p > need or (p == need and not right):
            return e
        return f"({e})"

    def binop(self, sym: str, a: Value, b: Value) -> str:
        p = PREC[sym]
        return f"{self.paren(a, p)} {sym} {self.paren(b, p, right=True)}"

    def render(self, op: Op) -> str:
        rule = RULES.get(op, "expression")
        if rule is None:
            raise UnsupportedConstruct(f"op '{op.name}'", BACKEND, op.loc)
        return rule(self, op)

    def other(self, v: Value) -> str:
        """tl.load casts `other` to the pointee type, so a constant can be written as a plain literal."""
        op = v.defining_op
        while op is not None and op.defn in _STRETCHES and v not in self.ids:
            v = op.operand("x")
            op = v.defining_op
        if op is not None and op.defn is ops.CONST and v not in self.ids:
            return literal(op.attrs["value"], v.type.elem)
        return self.expr(v)

    def typed_by_context(self, op: Op) -> bool:
        """A literal takes the dtype of the tile it meets in these users (Triton's scalar rule)."""
        us = self.users.get(op.result.id, [])
        if not us:
            return False
        for u in us:
            if u.defn not in (ops.BINARY, ops.CMP, ops.WHERE):
                return False
            others = [o for o in u.operands if o is not None and o is not op.result and
                      o.type.elem == op.result.type.elem]
            if not others or all((o.defining_op is not None and o.defining_op.defn is ops.CONST) for o in others):
                return False
        return True

    # -- statements -----------------------------------------------------------------------------------
    def emit(self, line: str, indent: int):
        self.lines.append("    " * indent + line)
        self.line_sources.extend([self.src] * (line.count("\n") + 1))

    def block(self, blk: Block, indent: int):
        for op in blk.ops:
            self.statement(op, indent)

    def statement(self, op: Op, indent: int):
        rule = RULES.get(op, "statement") or statements.value
        outer, self.src = self.src, op.loc.line or self.src      # what this op emits maps back to its line
        try:
            rule(self, op, indent)
        finally:
            self.src = outer

    def carried_expr(self, v: Value) -> str:
        """A value assigned to a loop-carried or branch-merged variable: constants are typed, so the
        variable is a tensor on every path (Triton's interpreter keeps bare literals as Python ints)."""
        op = v.defining_op
        if v not in self.ids and op is not None and op.defn is ops.CONST and v.type.is_scalar:
            return full([], op.attrs["value"], v.type.elem)
        return self.expr(v)

    def assign_many(self, names: list[str], values: list[Value], indent: int):
        pairs = [(nm, self.carried_expr(v)) for nm, v in zip(names, values) if self.expr(v) != nm]
        if not pairs:
            return
        if len(pairs) == 1:
            self.emit(f"{pairs[0][0]} = {pairs[0][1]}", indent)
        else:
            self.emit(f"{', '.join(p[0] for p in pairs)} = {', '.join(p[1] for p in pairs)}", indent)

    def can_write_in_place(self, carried: Value, out: Value, body: Block, order) -> bool:
        """Can the body's new value of a carried variable be assigned to the variable itself? Yes when it
        is a statement of the body's own block that comes after every use of the old value."""
        d = out.defining_op
        if d is None or d.parent is not body or out in self.ids or d.has(Trait.LOOP) or d.has(Trait.BRANCH) or \
                self.inline(d):
            return False
        if [u for u in self.users.get(out.id, []) if u is not body.terminator]:
            return False
        pos = order[id(d)]
        for u in self.users.get(carried.id, []):
            top = u
            while top.parent is not body:
                top = top.parent.parent_op
            if order[id(top)] >= pos and top is not d:
                return False
        return True

    def generate(self) -> str:
        k = self.kernel
        params = [self.ids.define(p.value, p.name) for p in k.params]
        body_start = len(self.lines)
        self.block(k.body, 1)
        body = self.lines[body_start:] or ["    pass"]
        head = [f"# Generated by tle from {os.path.basename(k.loc.file)}:{k.loc.line} ({k.name}); edit the source kernel, not this file.",
                "import triton",
                "import triton.language as tl",
                *self.imports,
                "",
                "",
                *self.function_lines]
        if k.constexprs:
            head.append("# constexprs: " + ", ".join(f"{n}={v!r}" for n, v in k.constexprs.items()))
        head.append(f"# launch: num_warps={k.num_warps}, num_stages={k.num_stages}")
        unspecialized = [n for p, n in zip(k.params, params) if p.name in k.unspecialized]
        # Triton would compile a kernel for each class (== 1, multiple of 16, other) of these ints' values
        head.append(f"@triton.jit(do_not_specialize={unspecialized!r})" if unspecialized else "@triton.jit")
        head.append(f"def {k.name}({', '.join(params)}):")
        first = sum(line.count("\n") + 1 for line in head) + 1
        self.line_map = {first + i: src for i, src in enumerate(self.line_sources) if src}
        return "\n".join(head + body) + "\n"


def generate(k: KernelIR) -> str:
    return TritonCodegen(k).generate()
