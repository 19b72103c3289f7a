"""Writes a kernel with tle.gpu.warp_group blocks (planned in warp_groups.py): the prologue, then one branch
per warp group, each with its copy of the group section and of the loops holding several groups, and the
mbarrier waits and arrives around each hand-off and each tle.gpu.turn block."""
from __future__ import annotations

from ..ir.core import Block, Op
from .async_gathers import emit_row_gather, row_gather
from .context import Buffer, Context
from .control import trip_count
from .slots import carry_slot, write_slots
from .values import is_const
from .versions import root
from .warp_groups import GROUP_THREADS, HandOff, Plan, Turns


def emit_kernel_body(g: Context, plan: Plan, indent: int):
    body = g.k.body
    g.blocks.append(body)
    for op in body.ops[:plan.split]:
        g.statement(op, indent)
    _declare_barriers(g, plan)
    _declare_turns(g, plan)
    tx = g.ids.fresh("tx")
    g.let(tx, "T.get_thread_binding()", indent)
    last = len(plan.groups) - 1
    for n, group in enumerate(plan.groups):
        test = f"{tx} < {GROUP_THREADS * (group + 1)}"
        if n == 0:
            g.emit(f"if {test}:", indent, reads=(tx,))
        elif n < last:
            g.out.clause(f"elif {test}:", indent, reads=(tx,))
        else:
            g.out.clause("else:", indent)
        _emit_group(g, plan, group, tx, indent + 1)
    g.blocks.pop()
    g.report.append((g.k.loc.line, "tle.gpu.warp_group", "warp groups",
                     f"{len(plan.groups)} branches of {GROUP_THREADS} threads; "
                     f"{sum(len(h) for h in plan.hand_offs.values())} buffer hand-offs through mbarriers"))


def _emit_group(g: Context, plan: Plan, group: int, tx: str, indent: int):
    g.warp_group = group
    for vid in plan.recompute:          # the prologue's fragments are laid out over every thread
        g.buffers.pop(vid, None)
    g.warp_thread = g.ids.fresh("thread")
    g.let(g.warp_thread, f"{tx} - {GROUP_THREADS * group}", indent, reads=(tx,))
    registers = plan.registers.get(group)
    if registers is not None:
        grow = int(registers > plan.default_registers())
        g.emit(f"T.set_max_nreg({registers}, {grow})", indent)
    start = g.out.position()
    emit_ops(g, plan, g.k.body, plan.section, indent)
    if not g.out.emitted_since(start):
        g.emit("pass", indent)
    g.forget(plan.section)
    g.warp_group = None


def emit_ops(g: Context, plan: Plan, blk: Block, ops: list[Op], indent: int):
    """The ops of `ops` (a block's, or the group section) that the current group runs, with the waits before
    and the arrives after the ops that start and end its accesses to each hand-off."""
    group = g.warp_group
    offs = plan.hand_offs.get(id(blk), ())
    turns = plan.turns.get(id(blk))
    spans = turns.spans.get(group, []) if turns else []
    # a group waits for its turn once the turn block's data is in: after the hand-off waits inside the block
    turn_waits = [max([first] + [h.first[group] for h in offs if first <= h.first.get(group, -1) <= last])
                  for first, last in spans]
    for pos, op in enumerate(ops):
        if not plan.runs(op, group):
            for r in op.results:        # a version another group writes: the same allocation here
                if r.type.is_buffer and root(r).id in g.buffers:
                    g.buffers[r.id] = g.buffers[root(r).id]
            continue
        for h in offs:
            if h.first.get(group) == pos:
                _wait(g, h, group, blk is g.k.body, indent)
        for j, at in enumerate(turn_waits):
            if at == pos:
                _wait_turn(g, turns, group, j, indent)
        g.statement(op, indent)
        if any(last == pos for _, last in spans):
            _pass_turn(g, turns, group, indent)
        for h in offs:
            if h.last.get(group) == pos:
                _arrive(g, h, group, blk is g.k.body, indent)


# -- barriers ------------------------------------------------------------------------------------------------
def _declare_barriers(g: Context, plan: Plan):
    for offs in plan.hand_offs.values():
        for h in offs:
            if h.level is not g.k.body:
                writes = plan.writes(h)
                h.cp_async = bool(writes) and all(
                    o.name == "copy_in" and row_gather(g, o, GROUP_THREADS) is not None for o in writes)
            base = h.alloc.name or "buf"
            h.full = g.ids.fresh(base + "_full")
            g.allocs.append(f"{h.full} = T.alloc_barrier(arrive_count={[GROUP_THREADS] * h.versions})")
            if h.level is not g.k.body:
                h.empty = g.ids.fresh(base + "_empty")
                g.allocs.append(f"{h.empty} = T.alloc_barrier(arrive_count="
                                f"{[GROUP_THREADS * len(h.readers)] * h.versions})")


def _declare_turns(g: Context, plan: Plan):
    for turns in plan.turns.values():
        for group in turns.groups:
            turns.barriers[group] = g.ids.fresh(f"turn_{group}")
            g.allocs.append(f"{turns.barriers[group]} = T.alloc_barrier(arrive_count=[{GROUP_THREADS}])")


def _wait_turn(g: Context, turns: Turns, group: int, j: int, indent: int):
    """Wait for turn j of this step. Group i's barrier completes a phase when group i - 1 ends a turn; the first
    group's when the last group ends one, and its first wait passes at once (a fresh barrier's parity 1)."""
    # turn n = step * per_step + j waits for the barrier's phase n, of parity (step + j) & 1 when a step has an
    # odd number of turns, j & 1 when even; the first group's waits are one phase behind (flipped parity)
    flip = int(group == turns.groups[0])
    if len(turns.spans[group]) % 2 == 0:
        parity = str((j + flip) % 2)
    else:
        n = g.warp_step if j == 0 else f"({g.warp_step} + {j})"
        parity = f"({n} & 1) ^ 1" if flip else f"{n} & 1"
    g.emit(f"T.barrier_wait({turns.barriers[group]}[0], {parity})", indent, reads=_names(g))


def _pass_turn(g: Context, turns: Turns, group: int, indent: int):
    nxt = turns.groups[(turns.groups.index(group) + 1) % len(turns.groups)]
    g.emit(f"T.barrier_arrive({turns.barriers[nxt]}[0])", indent)


def _version_and_phase(g: Context, h: HandOff, section: bool) -> tuple[str, str]:
    """Which version of `h` this step uses, and the parity of that version's current phase."""
    if section:                          # written once: the first phase
        return "0", "0"
    step = g.warp_step
    if h.versions == 1:                  # one version, written again every step
        return "0", f"{step} & 1"
    return f"{step} % {h.versions}", f"({step} // {h.versions}) & 1"


def _wait(g: Context, h: HandOff, group: int, section: bool, indent: int):
    version, phase = _version_and_phase(g, h, section)
    if group == h.writer:
        if h.empty:
            g.emit(f"T.barrier_wait({h.empty}[{version}], ({phase}) ^ 1)", indent, reads=_names(g))
    else:
        g.emit(f"T.barrier_wait({h.full}[{version}], {phase})", indent, reads=_names(g))


def _arrive(g: Context, h: HandOff, group: int, section: bool, indent: int):
    version, _ = _version_and_phase(g, h, section)
    if group == h.writer and h.cp_async:
        # arrives when this thread's cp.async copies have landed
        g.emit(f"T.cp_async_barrier_noinc({h.full}[{version}])", indent, reads=_names(g))
    elif group == h.writer:
        # the readers may read through the async proxy (wgmma): make the writes visible to it first
        g.emit("T.fence_proxy_async()", indent)
        g.emit(f"T.barrier_arrive({h.full}[{version}])", indent, reads=_names(g))
    elif h.empty:
        g.emit(f"T.barrier_arrive({h.empty}[{version}])", indent, reads=_names(g))


def _names(g: Context) -> tuple[str, ...]:
    return () if g.warp_step is None else (g.warp_step,)


# -- a loop holding several groups' ops ----------------------------------------------------------------------
def group_loop(g: Context, op: Op, indent: int):
    """`op` in the current group: only the values this group carries."""
    plan: Plan = g.warp_plan
    group = g.warp_group
    lo, hi, step, *inits = op.operands
    iv, *carried = op.body.args
    outs = op.body.terminator.operands
    mine = [k for k in range(len(carried)) if plan.carries(op, k, group)]
    slots = [carry_slot(g, carried[k], inits[k], op.results[k], op, indent) for k in mine]
    simple = is_const(lo, 0) and is_const(step, 1)
    counter = g.ids.define(iv) if simple else g.ids.fresh("it")
    g.emit(f"for {counter} in T.serial({trip_count(g, lo, hi, step)}):", indent)
    if simple:
        g.scalars[iv.id] = counter
    else:
        ivn = g.ids.fresh(iv.name or "k")
        start = "" if is_const(lo, 0) else f"{g.scalar(lo)} + "
        stride = "" if is_const(step, 1) else f" * {g.scalar(step)}"
        g.let(ivn, f"{start}{counter}{stride}", indent + 1, reads=(counter,))
        g.scalars[iv.id] = ivn
    saved, g.warp_step = g.warp_step, counter
    _emit_body_of_group(g, op.body, slots, [outs[k] for k in mine], indent + 1)
    g.forget(op.body.ops)
    g.warp_step = saved
    g.report.append((op.loc.line, "tle.gpu.warp_group", "loop", f"warp group {group}: T.serial"))


def _emit_body_of_group(g: Context, body: Block, slots, outs, indent: int):
    start = g.out.position()
    g.block(body, indent, then=lambda: write_slots(g, slots, outs, indent))
    if not g.out.emitted_since(start):
        g.emit("pass", indent)


def group_copy_in(g: Context, op: Op, buf: Buffer, indent: int) -> bool:
    """Emit `op`, a copy into a hand-off this group writes as cp.async, if it is one; else False."""
    h = g.warp_plan.hand_off_written_by(op)
    if h is None or not h.cp_async:
        return False
    emit_row_gather(g, op, row_gather(g, op, GROUP_THREADS), buf, g.warp_thread, GROUP_THREADS, indent)
    return True
