"""Scans, and reductions with the kernel's own combine function: `tl.cumsum`, `tl.cumprod`,
`tl.associative_scan` and `tl.reduce`.

TileLang 0.1.15 scans with T.cumsum and reduces with T.reduce_sum/max/min; none takes a combine function.
Those are kept where they compute the same thing: `tl.cumsum` and an associative scan of one tile whose
combine function is `a + b` are T.cumsum, a `tl.reduce` of one tile whose combine function is a plain sum,
maximum or minimum is T.reduce_* (reductions.py). Everything else is written out here, on shared memory:

- a scan is a log-step (Hillis-Steele) inclusive scan. The tile is copied into a shared buffer; step
  d = 1, 2, 4, ... (while d < n, n the axis' length) is one `T.Parallel` loop over the tile writing a
  second shared buffer from the first: element i >= d is combine(element i - d, element i), the first d
  elements are copied (an `if` in the loop: the shifted read happens only where it is in bounds, and every
  loop has the tile's own power-of-two shape, which TileLang's loop partitioning takes in any rank). The
  two buffers swap roles at every step, so each step reads only what the step before wrote (TileLang puts
  a barrier between loops that touch shared memory). A reverse scan runs from the end of the axis: element
  i < n - d is combine(element i + d, element i), the last d are copied; its left operand is the part
  nearer the end, as in Triton (which flips the axis, scans, and flips it back).
- a reduction is a tree of neighbours: each level halves the axis, element j being combine(element 2j,
  element 2j + 1) of the level before, into a shared buffer of the halved shape; the last level's one
  element is the result, stored without the axis.

Operands are never reordered: the left operand is always the part of the axis that comes first in the
scan's or the reduction's order, so a combine function need only be associative (as Triton requires), not
commutative. Several input tiles are combined as groups: one loop writes every tile's buffer of a step.

The combine function is the op's region (pure scalar code, checked by the frontend). It is written as TIR
expressions by the expression rules of the element-wise ops: its arguments stand for the element reads
of the left and right groups, a value it uses more than once is a let in the loop body, and a runtime `if`
on scalars is `T.if_then_else` of what its branches yield (both are pure)."""
from __future__ import annotations

import re

from ..ir import ops
from ..ir import types as ir_types
from ..ir.core import Op, Value
from ..ir.ops import BinaryOp, ReduceKind, ScanKind, Trait
from .context import Buffer, Context
from .reductions import _reduce
from ..rules import RuleSet
from .syntax import element, loop_indices, parallel_header

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table


# -- the rules -------------------------------------------------------------------------------------------
@RULE_SET.rule(ops.SCAN, role="statement")
def scan(gen: Context, op: Op, indent: int):
    """tl.cumsum: T.cumsum (1-D and 2-D tiles), else a log-step scan of `+`; tl.cumprod: a log-step scan
    of `*`."""
    x, v = op.operand("x"), op.result
    kind = op.attrs["kind"]
    if kind is ScanKind.SUM and x.type.rank <= 2:
        _cumsum(gen, op, x, v, indent)
        return
    _scan(gen, op, [x], [v], _Operator("+" if kind is ScanKind.SUM else "*"), indent)


@RULE_SET.rule(ops.COMBINE_SCAN, role="statement")
def combine_scan(gen: Context, op: Op, indent: int):
    """tl.associative_scan: T.cumsum where the combine function is a plain sum of one 1-D or 2-D tile,
    else a log-step scan of the combine function."""
    inputs = op.operand_group("inputs")
    if _combine_kind(op) is ReduceKind.SUM and inputs[0].type.rank <= 2:
        _cumsum(gen, op, inputs[0], op.result, indent)
        return
    _scan(gen, op, inputs, op.results, _Region(gen, op, "tl.associative_scan"), indent)


@RULE_SET.rule(ops.COMBINE_REDUCE, role="statement")
def combine_reduce(gen: Context, op: Op, indent: int):
    """tl.reduce: T.reduce_sum/max/min where the combine function is one of those of one tile, else a
    tree of the combine function."""
    kind = _combine_kind(op)
    if kind is not None:
        _reduce(gen, op.operand_group("inputs")[0], op.result, kind, op.attrs["axis"], op.attrs["keep_dims"], indent)
        return
    _tree(gen, op, _Region(gen, op, "tl.reduce"), indent)


# -- T.cumsum ------------------------------------------------------------------------------------------------
def _cumsum(gen: Context, op: Op, x: Value, v: Value, indent: int):
    """`v` = the inclusive prefix sums of `x` along the op's axis: `x` is copied into a shared buffer, which
    T.cumsum scans in place (TileLang's scan works on shared memory; given a fragment, it makes this copy
    itself)."""
    name = gen.alloc(v.name or "cumsum", x.type.shape, x.type.elem, "shared")
    gen.fill(name, x, indent)
    gen.emit(f"T.cumsum({name}, dim={op.attrs['axis']}, reverse={bool(op.attrs['reverse'])})", indent)
    gen.buffers[v.id] = Buffer(name, x.type.shape, x.type.elem, "shared", gen.blocks[-1])


_SUM_DTYPES = "(floats, or integers of 32 or 64 bits)"
_KINDS = {BinaryOp.ADD: ReduceKind.SUM, BinaryOp.MAXIMUM: ReduceKind.MAX, BinaryOp.MINIMUM: ReduceKind.MIN}


def _combine_kind(op: Op) -> ReduceKind | None:
    """'sum', 'max' or 'min' where the combine function of a one-tile combine op is `a + b`,
    `tl.maximum(a, b)` or `tl.minimum(a, b)` of its two arguments, on a dtype where TileLang's own scan or
    reduction is known to give Triton's result: float sums (in another order, as tl.sum's), integer sums of
    32 or 64 bits (narrower ones take the general path: how TileLang accumulates them is not checked here),
    and max/min of integers or of fp32, where T.reduce_max/min ignore NaN as tl.maximum/minimum do
    (fmaxf / fminf). None: the general path."""
    region = op.regions[0]
    body = [o for o in region.ops if o.defn is not ops.YIELD]
    if len(op.operands) != 1 or len(body) != 1 or body[0].defn is not ops.BINARY:
        return None
    combine = body[0]
    a, b = region.args
    if {id(v) for v in combine.operands} != {id(a), id(b)} or region.terminator.operands != [combine.result]:
        return None
    kind, elem = _KINDS.get(combine.attrs["op"]), a.type.elem
    if kind is ReduceKind.SUM and (elem.is_float or (elem.is_int and elem.bits >= 32)):
        return kind
    if kind in (ReduceKind.MAX, ReduceKind.MIN) and (elem == ir_types.fp32 or (elem.is_int and not elem.is_bool)):
        return kind
    return None


# -- combine functions as TIR --------------------------------------------------------------------------------
class _Operator:
    """The combine function of tl.cumsum / tl.cumprod: one TIR operator."""

    def __init__(self, symbol: str):
        self.symbol = symbol

    def group(self, gen: Context, lefts: list[str], rights: list[str], indent: int) -> list[str]:
        return [f"({lefts[0]} {self.symbol} {rights[0]})"]


class _Region:
    """The kernel's combine function, the op's region, written through the expression rules."""

    def __init__(self, gen: Context, op: Op, construct: str):
        self.region = op.regions[0]
        for o in self.region.walk():
            if o.has(Trait.LOOP):
                gen.error(construct, op, f"its combine function '{op.attrs['fn']}' has a loop (line {o.loc.line}); "
                                         f"the TileLang lowering writes a combine function as expressions, with "
                                         f"no loops")
        # the values of the function's own body used more than once: each is a let, computed once
        uses: dict[int, int] = {}
        for o in self.region.walk():
            for v in o.operands:
                if v is not None:
                    uses[v.id] = uses.get(v.id, 0) + 1
        self.lets = [r for o in self.region.ops if o.defn not in (ops.CONST, ops.YIELD)
                     for r in o.results if uses.get(r.id, 0) > 1]
        self.branches = [o for o in self.region.walk() if o.defn is ops.IF]

    def group(self, gen: Context, lefts: list[str], rights: list[str], indent: int) -> list[str]:
        """The expressions of the combined group, for the element reads `lefts` and `rights`; the lets
        it needs are emitted at `indent` first."""
        region = self.region
        saved = gen.substitutes
        gen.substitutes = dict(saved)
        for a, read in zip(region.args, lefts + rights):
            gen.substitutes[a.id] = lambda idx, read=read: read
        for o in self.branches:
            for i in range(len(o.results)):
                gen.substitutes[o.results[i].id] = lambda idx, o=o, i=i: _select(gen, o, i)
        try:
            for v in self.lets:
                name = gen.ids.fresh(_let_name(v))
                gen.let(name, gen.elem(v, []), indent)
                gen.scalars[v.id] = name
            return [gen.elem(y, []) for y in region.terminator.operands]
        finally:
            gen.substitutes = saved
            for v in self.lets:
                gen.scalars.pop(v.id, None)


def _select(gen: Context, op: Op, i: int) -> str:
    """Result `i` of a runtime `if` of the combine function: both branches are pure, so a select."""
    then, other = (blk.terminator.operands[i] for blk in op.regions)
    return f"T.if_then_else({gen.elem(op.operand('cond'), [])}, {gen.elem(then, [])}, {gen.elem(other, [])})"


def _let_name(v: Value) -> str:
    """The let's name: the combine function's own, never one of the loop indices i0, i1, ..."""
    base = v.name or "c"
    return base + "_" if re.fullmatch(r"i\d+", base) else base


# -- the log-step scan ---------------------------------------------------------------------------------------
def _scan(gen: Context, op: Op, xs: list[Value], vs: list[Value], combine, indent: int):
    """`vs` = the inclusive scans of the tiles `xs` (one shape) along the op's axis with `combine`."""
    axis, reverse = op.attrs["axis"], bool(op.attrs["reverse"])
    shape = tuple(xs[0].type.shape)
    n = shape[axis]
    steps = []
    while (1 << len(steps)) < n:
        steps.append(1 << len(steps))
    # per tile, the buffers its steps go through: the tile's own shared buffer where it has one, else a
    # copy of it; then two buffers in turn, the last one named after the result
    chains, copies = [], []
    for x, v in zip(xs, vs):
        start = _own_shared(gen, x) if steps else None
        count = len(steps) + (start is None)         # buffers written: the copy, if any, and one per step
        base = v.name if v.name and v.name != "_" else "cumprod" if op.defn is ops.SCAN else "scan"
        last = gen.alloc(base, shape, x.type.elem, "shared")
        other = gen.alloc(base + "_tmp", shape, x.type.elem, "shared") if count > 1 else None
        names = [(last if (count - 1 - j) % 2 == 0 else other) for j in range(count)]
        if start is None:
            copies.append((names[0], x))
        chains.append(([start.name] if start is not None else []) + names)
    idx = loop_indices(len(shape))
    if copies:          # the tiles without a shared buffer, copied into one (one loop for all)
        gen.emit(parallel_header(idx, shape), indent)
        for name, x in copies:
            gen.emit(f"{element(name, idx)} = {gen.elem(x, idx)}", indent + 1)
    i = idx[axis]
    for s, d in enumerate(steps):
        src, dst = [c[s] for c in chains], [c[s + 1] for c in chains]
        # one loop over the whole tile: element i takes element i - d (from the end: i + d) as its left
        # operand where there is one; the d elements without a partner are final already, copied as they are
        partner = idx[:axis] + [f"{i} + {d}" if reverse else f"{i} - {d}"] + idx[axis + 1:]
        gen.emit(parallel_header(idx, shape), indent)
        gen.emit(f"if {i} < {n - d}:" if reverse else f"if {i} >= {d}:", indent + 1)
        group = combine.group(gen, [element(b, partner) for b in src], [element(b, idx) for b in src], indent + 2)
        for b, e in zip(dst, group):
            gen.emit(f"{element(b, idx)} = {e}", indent + 2)
        gen.out.clause("else:", indent + 1)
        for a, b in zip(src, dst):
            gen.emit(f"{element(b, idx)} = {element(a, idx)}", indent + 2)
    for c, x, v in zip(chains, xs, vs):
        gen.buffers[v.id] = Buffer(c[-1], shape, x.type.elem, "shared", gen.blocks[-1])


# -- the tree reduction ----------------------------------------------------------------------------------------
def _tree(gen: Context, op: Op, combine, indent: int):
    """The results of `op` = its tiles reduced along its axis, neighbours combined level by level (tile
    extents are powers of two: the frontend checks it, as Triton does)."""
    xs, vs = op.operand_group("inputs"), op.results
    axis = op.attrs["axis"]
    shape = tuple(xs[0].type.shape)
    out_shape = _without(shape, axis) or (1,)
    src = _in_shared(gen, xs, indent)
    bases = [v.name if v.name and v.name != "_" else "reduced" for v in vs]
    m = shape[axis]
    while True:
        final = m <= 2
        if final:       # the last level writes the result, which has no axis
            dst = [gen.alloc(b, out_shape, x.type.elem, "shared") for b, x in zip(bases, xs)]
            loop = out_shape
            idx = loop_indices(len(loop))
            pair = idx[:axis] + ["0"] + idx[axis:] if len(shape) > 1 else ["0"]
        else:
            loop = _with(shape, axis, m // 2)
            dst = [gen.alloc(f"{b}_{m // 2}", loop, x.type.elem, "shared") for b, x in zip(bases, xs)]
            idx = loop_indices(len(loop))
            pair = idx[:axis] + [f"2 * {idx[axis]}"] + idx[axis + 1:]
        gen.emit(parallel_header(idx, loop), indent)
        if m == 1:      # an axis of one element: the element itself
            group = [element(b, pair) for b in src]
        else:
            right = pair[:axis] + [_plus_one(pair[axis])] + pair[axis + 1:]
            group = combine.group(gen, [element(b, pair) for b in src], [element(b, right) for b in src], indent + 1)
        for b, e in zip(dst, group):
            gen.emit(f"{element(b, idx)} = {e}", indent + 1)
        if final:
            break
        src, m = dst, m // 2
    for name, x, v in zip(dst, xs, vs):
        gen.buffers[v.id] = Buffer(name, out_shape, x.type.elem, "shared", gen.blocks[-1])
        if op.attrs["keep_dims"]:
            gen.keepdims[v.id] = axis      # same data with a unit axis: element access drops it


def _own_shared(gen: Context, x: Value) -> Buffer | None:
    """The shared buffer holding tile `x` as it is (visible here, its dtype, axes in order, no kept unit
    axis), which a scan or a tree can read in place of a copy; None where there is none."""
    b = gen.buffers.get(x.id)
    if b is not None and b.scope == "shared" and b.perm is None and gen.visible(b) and b.dtype == x.type.elem \
            and x.id not in gen.keepdims:
        return b
    return None


def _in_shared(gen: Context, xs: list[Value], indent: int) -> list[str]:
    """A shared buffer holding each tile: its own, else a copy (one loop copies all that need one)."""
    names, copies = [], []
    for x in xs:
        own = _own_shared(gen, x)
        if own is not None:
            names.append(own.name)
            continue
        name = gen.alloc(x.name or "t", x.type.shape, x.type.elem, "shared")
        names.append(name)
        copies.append((name, x))
    if copies:
        idx = loop_indices(xs[0].type.rank)
        gen.emit(parallel_header(idx, xs[0].type.shape), indent)
        for name, x in copies:
            gen.emit(f"{element(name, idx)} = {gen.elem(x, idx)}", indent + 1)
        for name, x in copies:
            if x.id not in gen.buffers or not gen.visible(gen.buffers[x.id]):
                gen.buffers[x.id] = Buffer(name, x.type.shape, x.type.elem, "shared", gen.blocks[-1])
    return names


# -- shapes ------------------------------------------------------------------------------------------------------
def _with(shape: tuple, axis: int, n: int) -> tuple:
    return shape[:axis] + (n,) + shape[axis + 1:]


def _without(shape: tuple, axis: int) -> tuple:
    return shape[:axis] + shape[axis + 1:]


def _plus_one(i: str) -> str:
    return str(int(i) + 1) if i.isdigit() else f"{i} + 1"
