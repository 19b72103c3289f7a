"""Structured control flow: `for` is `T.serial`, or `T.Pipelined` where the loop asks for stages (or
stages dot operands through shared memory, where pipelining pays); `if` is an `if`, with its merged
results in slots (slots.py). Loop-carried values live in slots written at the end of the body."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Block, Op
from ..ir.ops import InputPrecision, LoopKind
from .context import Context
from ..rules import RuleSet
from .slots import carry_slot, loop_slots_of, write_slots
from .staging import index_tiles_to_stage, stage_annotation
from .syntax import tl_dtype
from .values import const_value, is_const
from .versions import same_buffer

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table


@RULE_SET.rule(ops.YIELD, role="statement")
def yield_(gen: Context, op: Op, indent: int):
    """Nothing: the block's emitter writes what a loop body or a branch yields into its slots."""


@RULE_SET.rule(ops.FOR, role="statement")
def for_(gen: Context, op: Op, indent: int):
    if gen.warp_group is not None and id(op) in gen.warp_plan.loops:
        return gen.group_writer.loop(gen, op, indent)
    lo, hi, step = op.operand("lower"), op.operand("upper"), op.operand("step")
    inits = op.operand_group("inits")
    iv, *carried = op.body.args
    slots = []
    for c, init, r in zip(carried, inits, op.results):
        slots.append(carry_slot(gen, c, init, r, op, indent))
    trip = trip_count(gen, lo, hi, step)
    stages, pipelined = loop_stages(gen, op)
    _warp_specialization(gen, op)
    ivn = gen.ids.define(iv)
    simple = is_const(lo, 0) and is_const(step, 1)
    counter = ivn if simple else gen.ids.fresh(ivn + "_it")
    if op.attrs.get("kind") is LoopKind.PIPELINE:
        gen.report.append((op.loc.line, "tle.gpu.pipeline", "loop",
                           f"T.Pipelined(num_stages={stages})" if pipelined else
                           f"T.serial (num_stages={stages}: no pipelining)"))
    if pipelined and "[" in trip:
        # a bound that reads a buffer element (a reduction's result, say) is bound to a name first: TileLang's
        # pipeline planner does not take a loop extent that reads a fragment
        bound = gen.ids.fresh("steps")
        gen.let(bound, trip, indent)
        trip = gen.out.read(bound)
    if pipelined:
        gen.pipelined.add(id(op))
        if trip.isdigit():
            gen.static_pipelined.add(id(op))
        header = gen.emit(f"for {counter} in T.Pipelined({trip}, num_stages={stages}):", indent)
    else:
        header = gen.emit(f"for {counter} in T.serial({trip}):", indent)
    if not simple:
        start = "" if is_const(lo, 0) else f"{gen.scalar(lo)} + "
        stride = "" if is_const(step, 1) else f" * {gen.scalar(step)}"
        gen.let(ivn, f"{start}{counter}{stride}", indent + 1)
    gen.scalars[iv.id] = ivn
    # Index tiles the loop's gathers read go to shared memory once per step; TileLang's pipeline planner
    # would put that write in the last stage, after the copies that need it, so the loop names each
    # statement's stage itself. The tiles are staged only where it can (staging.py decides it on the IR).
    staged = index_tiles_to_stage(gen, op, slots) if pipelined else set()
    body_start = gen.out.position()
    if staged:
        gen.staged_index |= staged
        outer, gen.staged_body = gen.staged_body, op.body
    _emit_body(gen, op.body, slots, indent + 1)
    if staged:
        gen.staged_body = outer
        gen.staged_index -= staged
        order, stage = stage_annotation(gen.out.statements_at(indent + 1, body_start), stages)
        header.text = f"for {counter} in T.Pipelined({trip}, num_stages={stages}, order={order}, stage={stage}):"


def _warp_specialization(gen: Context, op: Op):
    """A loop's warp_specialize=False turns TileLang's producer/consumer warp split off for the kernel (a pass
    config of the whole kernel there). One kernel asking both ways cannot be honored."""
    asked = op.attrs.get("warp_specialize")
    if asked is None:
        return
    if len(gen.warp_split_asked) > 1:
        gen.error("tl.range(warp_specialize=...)", op, "loops of one kernel ask for and against warp "
                  "specialization; TileLang splits the warps of a whole kernel or of none")
    if not asked:
        gen.report.append((op.loc.line, "for", "loop", f"warp_specialize=False: the kernel compiles with "
                           f"{WARP_SPLIT_OFF}"))


WARP_SPLIT_OFF = "tl.disable_warp_specialized"


def kernel_pass_configs(gen: Context) -> dict[str, object]:
    """The TileLang compile settings the kernel's loops ask for (per kernel in TileLang)."""
    return {WARP_SPLIT_OFF: True} if gen.warp_split_off else {}


@RULE_SET.rule(ops.WHILE, role="statement")
def while_(gen: Context, op: Op, indent: int):
    """`while cond:`, TIR's while. The carried values live in slots the body writes at its end. A condition
    that is one expression over them is the while's own, which TIR evaluates again before every step. A
    condition that needs statements (a reduction of a carried tile, say) is computed into a var before the
    loop, and computed again from the slots at the end of every step, as the Triton lowering does."""
    before, body = op.regions
    slots = []
    for a, b, init, r in zip(before.args, body.args, op.operand_group("inits"), op.results):
        if a.type.is_buffer:
            gen.error("while loop", op, "a tle.gpu buffer carried by a while loop is not lowered to TileLang")
        slot = carry_slot(gen, a, init, r, op, indent)
        (gen.scalars if slot[0] == "var" else gen.buffers)[b.id] = slot[1]
        slots.append(slot)
    cond = before.terminator.operands[0]
    start = gen.out.position()
    flag = []           # the var holding the condition, where computing it takes statements

    def test() -> str:
        """The while's test: the condition itself, or, where computing it took statements, a var holding it."""
        if gen.out.emitted_since(start):
            flag.append(gen.ids.fresh("go"))
            gen.emit(f"{flag[0]} = T.alloc_var('bool', init={gen.scalar(cond)})", indent)
        gen.emit(f"while {flag[0] if flag else gen.scalar(cond)}:", indent)
    gen.block(before, indent, then=test)
    if not flag:
        _emit_body(gen, body, slots, indent + 1)
        return

    def condition_again():
        gen.forget(before.ops, rewritten=tuple(before.args))     # the body wrote the carried values' slots
        reported = len(gen.report)          # the condition's accesses are reported once, from the first time
        gen.block(before, indent + 1, then=lambda: gen.emit(f"{flag[0]} = {gen.scalar(cond)}", indent + 1))
        del gen.report[reported:]
    _emit_body(gen, body, slots, indent + 1, after=condition_again)


def _emit_body(gen: Context, body: Block, slots, indent: int, after=None):
    """The loop body, then the writes of what it yields into the slots, then `after()`."""
    def then():
        write_slots(gen, slots, body.terminator.operands if body.terminator else [], indent)
        if after is not None:
            after()
    start = gen.out.position()
    gen.block(body, indent, then=then)
    if not gen.out.emitted_since(start):
        gen.emit("pass", indent)


def trip_count(gen: Context, lo, hi, step) -> str:
    if is_const(lo, 0) and is_const(step, 1):
        return gen.scalar(hi)
    bounds = [const_value(v) for v in (lo, hi, step)]
    if None not in bounds and bounds[2] > 0:     # a constant trip count (it makes a T.Pipelined loop static)
        lo_, hi_, step_ = bounds
        return str(max(0, -(-(hi_ - lo_) // step_)))
    return f"T.ceildiv({gen.scalar(hi)} - {gen.scalar(lo)}, {gen.scalar(step)})"


def loop_stages(gen: Context, op: Op) -> tuple[int | None, bool]:
    """(num_stages, whether it is emitted as T.Pipelined) of for loop `op`."""
    stages = op.attrs.get("num_stages")
    if stages is None and op.attrs.get("async_stages"):
        # the launch's num_stages, which pipeline_async_loads found enough for this loop's is_async loads
        return op.attrs["async_stages"], True
    if stages is None and _stages_operands(gen, op.body):
        return gen.kernel.num_stages, gen.kernel.num_stages >= 2
    return stages, stages is not None and stages >= 2


_FENCED = (ops.LOCAL_GATHER, ops.LOCAL_SCATTER)


def _stages_operands(gen: Context, body: Block) -> bool:
    """Does the loop bring dot operands into shared memory (where pipelining pays)? Not a loop with an IEEE
    product or an access through tle.gpu.local_ptr: those are fenced by block barriers (reductions.py,
    buffers.py), which a pipelined loop's producer and consumer warps would not all reach."""
    if any(o.defn in _FENCED or (o.defn is ops.DOT and o.attrs.get("input_precision") is InputPrecision.IEEE)
           for o in body.walk()):
        return False
    for o in body.walk():
        if o.defn is ops.LOAD and any(u.defn is ops.DOT for u in gen.value_users(o.result)):
            return True
        if o.defn is ops.COPY_IN:
            return True
    return False


@RULE_SET.rule(ops.IF, role="statement")
def if_(gen: Context, op: Op, indent: int):
    cond = op.operand("cond")
    slots = []
    reuse = loop_slots_of(gen, op)
    for i, r in enumerate(op.results):
        if r.type.is_buffer:
            ys = [blk.terminator.operands[i] for blk in op.regions]
            buf = same_buffer(gen, ys, op, "a tle.gpu buffer written under a runtime condition")
            gen.buffers[r.id] = buf
            slots.append(("buffer", buf, r))
            continue
        if i in reuse:
            # a branch whose else leaves a loop-carried value as it is: write the loop's own slot
            c = reuse[i]
            if c.id in gen.scalars:
                gen.scalars[r.id] = gen.scalars[c.id]
                slots.append(("var", gen.scalars[c.id], r))
            else:
                gen.buffers[r.id] = gen.buffers[c.id]
                slots.append(("buf", gen.buffers[c.id], r))
            continue
        if r.type.is_scalar:
            name = gen.ids.define(r)
            gen.emit(f"{name} = T.alloc_var({tl_dtype(r.type.elem)!r})", indent)
            gen.scalars[r.id] = name
            slots.append(("var", name, r))
        else:
            name = gen.alloc(r.name or "t", r.type.shape, r.type.elem, "fragment")
            buf = gen.fragment(name, r)
            gen.buffers[r.id] = buf
            slots.append(("buf", buf, r))
    gen.emit(f"if {gen.scalar(cond)}:", indent)
    for i, blk in enumerate(op.regions):
        has_ops = any(o.defn is not ops.YIELD for o in blk.ops)
        if i == 1:
            # TileLang splits an if without else into one statement per op, which would not match
            # the stage list the layer names; an empty else keeps the branch one statement
            if not has_ops and len(reuse) == len(slots) and op.parent is not gen.staged_body:
                break
            gen.out.clause("else:", indent)
        _emit_body(gen, blk, slots, indent + 1)
