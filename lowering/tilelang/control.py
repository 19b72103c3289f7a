"""Structured control flow: `for` is `T.serial`, or `T.Pipelined` where the loop asks for stages (or
stages dot operands through shared memory, where pipelining pays); `if` is an `if`, with its merged
results in slots (slots.py). Loop-carried values live in slots written at the end of the body."""
from __future__ import annotations

from ..ir.core import Block, Op
from .context import Context
from .rules import RULES
from .slots import carry_slot, loop_slots_of, write_slots
from .staging import index_tiles_to_stage, stage_annotation
from .syntax import tl_dtype
from .values import const_value, is_const
from .versions import same_buffer


@RULES.rule("yield", role="statement")
def yield_(g: Context, op: Op, indent: int):
    """Nothing: the block's emitter writes what a loop body or a branch yields into its slots."""


@RULES.rule("for", role="statement")
def for_(g: Context, op: Op, indent: int):
    if g.warp_group is not None and id(op) in g.warp_plan.loops:
        from .warp_group_code import group_loop
        return group_loop(g, op, indent)
    lo, hi, step, *inits = op.operands
    iv, *carried = op.body.args
    slots = []
    for c, init, r in zip(carried, inits, op.results):
        slots.append(carry_slot(g, c, init, r, op, indent))
    trip = trip_count(g, lo, hi, step)
    stages = op.attrs.get("num_stages")
    pipelined = stages is not None and stages >= 2
    if stages is None and op.attrs.get("async_stages"):
        # the launch's num_stages, which pipeline_async_loads found enough for this loop's is_async loads
        stages, pipelined = op.attrs["async_stages"], True
    elif stages is None and _stages_operands(g, op.body):
        stages, pipelined = g.k.num_stages, g.k.num_stages >= 2
    ivn = g.ids.define(iv)
    simple = is_const(lo, 0) and is_const(step, 1)
    counter = ivn if simple else g.ids.fresh(ivn + "_it")
    if op.attrs.get("kind") == "tle.gpu.pipeline":
        g.report.append((op.loc.line, "tle.gpu.pipeline", "loop",
                         f"T.Pipelined(num_stages={stages})" if pipelined else
                         f"T.serial (num_stages={stages}: no pipelining)"))
    if pipelined and "[" in trip:
        # a bound that reads a buffer element (a reduction's result, say) is bound to a name first: TileLang's
        # pipeline planner does not take a loop extent that reads a fragment
        bound = g.ids.fresh("steps")
        g.let(bound, trip, indent)
        trip = g.out.read(bound)
    if pipelined:
        g.pipelined.add(id(op))
        if trip.isdigit():
            g.static_pipelined.add(id(op))
        header = g.emit(f"for {counter} in T.Pipelined({trip}, num_stages={stages}):", indent)
    else:
        header = g.emit(f"for {counter} in T.serial({trip}):", indent)
    if not simple:
        start = "" if is_const(lo, 0) else f"{g.scalar(lo)} + "
        stride = "" if is_const(step, 1) else f" * {g.scalar(step)}"
        g.let(ivn, f"{start}{counter}{stride}", indent + 1)
    g.scalars[iv.id] = ivn
    # Index tiles the loop's gathers read go to shared memory once per step; TileLang's pipeline planner
    # would put that write in the last stage, after the copies that need it, so the loop names each
    # statement's stage itself. The tiles are staged only where it can (staging.py decides it on the IR).
    staged = index_tiles_to_stage(g, op, slots) if pipelined else set()
    body_start = g.out.position()
    if staged:
        g.staged_index |= staged
        outer, g.staged_body = g.staged_body, op.body
    _emit_body(g, op.body, slots, indent + 1)
    if staged:
        g.staged_body = outer
        g.staged_index -= staged
        order, stage = stage_annotation(g.out.statements_at(indent + 1, body_start), stages)
        header.text = f"for {counter} in T.Pipelined({trip}, num_stages={stages}, order={order}, stage={stage}):"


@RULES.rule("while", role="statement")
def while_(g: Context, op: Op, indent: int):
    """`while cond:`, TIR's while. The carried values live in slots the body writes at its end. A condition
    that is one expression over them is the while's own, which TIR evaluates again before every step. A
    condition that needs statements (a reduction of a carried tile, say) is computed into a var before the
    loop, and computed again from the slots at the end of every step, as the Triton lowering does."""
    before, body = op.regions
    slots = []
    for a, b, init, r in zip(before.args, body.args, op.operands, op.results):
        if a.type.is_buffer:
            g.error("while loop", op, "a tle.gpu buffer carried by a while loop is not lowered to TileLang")
        slot = carry_slot(g, a, init, r, op, indent)
        (g.scalars if slot[0] == "var" else g.buffers)[b.id] = slot[1]
        slots.append(slot)
    cond = before.terminator.operands[0]
    start = g.out.position()
    flag = []           # the var holding the condition, where computing it takes statements

    def test() -> str:
        """The while's test: the condition itself, or, where computing it took statements, a var holding it."""
        if g.out.emitted_since(start):
            flag.append(g.ids.fresh("go"))
            g.emit(f"{flag[0]} = T.alloc_var('bool', init={g.scalar(cond)})", indent)
        g.emit(f"while {flag[0] if flag else g.scalar(cond)}:", indent)
    g.block(before, indent, then=test)
    if not flag:
        _emit_body(g, body, slots, indent + 1)
        return

    def condition_again():
        g.forget(before.ops)
        reported = len(g.report)          # the condition's accesses are reported once, from the first time
        g.block(before, indent + 1, then=lambda: g.emit(f"{flag[0]} = {g.scalar(cond)}", indent + 1))
        del g.report[reported:]
    _emit_body(g, body, slots, indent + 1, after=condition_again)


def _emit_body(g: Context, body: Block, slots, indent: int, after=None):
    """The loop body, then the writes of what it yields into the slots, then `after()`."""
    def then():
        write_slots(g, slots, body.terminator.operands if body.terminator else [], indent)
        if after is not None:
            after()
    start = g.out.position()
    g.block(body, indent, then=then)
    if not g.out.emitted_since(start):
        g.emit("pass", indent)


def trip_count(g: Context, lo, hi, step) -> str:
    if is_const(lo, 0) and is_const(step, 1):
        return g.scalar(hi)
    bounds = [const_value(v) for v in (lo, hi, step)]
    if None not in bounds and bounds[2] > 0:     # a constant trip count (it makes a T.Pipelined loop static)
        lo_, hi_, step_ = bounds
        return str(max(0, -(-(hi_ - lo_) // step_)))
    return f"T.ceildiv({g.scalar(hi)} - {g.scalar(lo)}, {g.scalar(step)})"


def _stages_operands(g: Context, body: Block) -> bool:
    """Does the loop bring dot operands into shared memory (where pipelining pays)?"""
    for o in body.walk():
        if o.name == "load" and any(u.name == "dot" for u in g.value_users(o.result)):
            return True
        if o.name == "copy_in":
            return True
    return False


@RULES.rule("if", role="statement")
def if_(g: Context, op: Op, indent: int):
    cond = op.operands[0]
    slots = []
    reuse = loop_slots_of(g, op)
    for i, r in enumerate(op.results):
        if r.type.is_buffer:
            ys = [blk.terminator.operands[i] for blk in op.regions]
            buf = same_buffer(g, ys, op, "a tle.gpu buffer written under a runtime condition")
            g.buffers[r.id] = buf
            slots.append(("buffer", buf, r))
            continue
        if i in reuse:
            # a branch whose else leaves a loop-carried value as it is: write the loop's own slot
            c = reuse[i]
            if c.id in g.scalars:
                g.scalars[r.id] = g.scalars[c.id]
                slots.append(("var", g.scalars[c.id], r))
            else:
                g.buffers[r.id] = g.buffers[c.id]
                slots.append(("buf", g.buffers[c.id], r))
            continue
        if r.type.is_scalar:
            name = g.ids.define(r)
            g.emit(f"{name} = T.alloc_var({tl_dtype(r.type.elem)!r})", indent)
            g.scalars[r.id] = name
            slots.append(("var", name, r))
        else:
            name = g.alloc(r.name or "t", r.type.shape, r.type.elem, "fragment")
            buf = g.fragment(name, r)
            g.buffers[r.id] = buf
            slots.append(("buf", buf, r))
    g.emit(f"if {g.scalar(cond)}:", indent)
    for i, blk in enumerate(op.regions):
        has_ops = any(o.name != "yield" for o in blk.ops)
        if i == 1:
            # TileLang splits an if without else into one statement per op, which would not match
            # the stage list the layer names; an empty else keeps the branch one statement
            if not has_ops and len(reuse) == len(slots) and op.parent is not g.staged_body:
                break
            g.out.clause("else:", indent)
        _emit_body(g, blk, slots, indent + 1)
