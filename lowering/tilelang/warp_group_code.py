"""Writes a kernel with tle.gpu.warp_group blocks (planned in warp_groups.py): the prologue, then one branch
per warp group, each with its copy of the group section and of the loops holding several groups, and the
mbarrier waits and arrives around each hand-off and each tle.gpu.turn block."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Block, Op
from ..ir.ops import Trait
from .async_gathers import emit_row_gather, row_gather
from .context import Buffer, Context, GroupWriter
from .control import trip_count
from .slots import carry_slot, write_slots
from .values import is_const, is_zero, nested
from .views import box, region, tensor_map_fits
from .versions import root
from .warp_groups import GROUP_THREADS, HandOff, Plan, Turns, Wait


def emit_kernel_body(gen: Context, plan: Plan, indent: int):
    body = gen.kernel.body
    gen.blocks.append(body)
    for op in body.ops[:plan.split]:
        gen.statement(op, indent)
    _declare_barriers(gen, plan)
    _declare_turns(gen, plan)
    tx = gen.ids.fresh("tx")
    gen.let(tx, "T.get_thread_binding()", indent)
    last = len(plan.groups) - 1
    for n, group in enumerate(plan.groups):
        test = f"{tx} < {GROUP_THREADS * (group + 1)}"
        if n == 0:
            gen.emit(f"if {test}:", indent, reads=(tx,))
        elif n < last:
            gen.out.clause(f"elif {test}:", indent, reads=(tx,))
        else:
            gen.out.clause("else:", indent)
        _emit_group(gen, plan, group, tx, indent + 1)
    gen.blocks.pop()
    gen.report.append((gen.kernel.loc.line, "tle.gpu.warp_group", "warp groups",
                       f"{len(plan.groups)} branches of {GROUP_THREADS} threads; "
                       f"{sum(len(h) for h in plan.hand_offs.values())} buffer hand-offs through mbarriers"))


def _emit_group(gen: Context, plan: Plan, group: int, tx: str, indent: int):
    gen.warp_group = group
    gen.group_writer = GroupWriter(block_ops=emit_ops, loop=group_loop, copy_in=group_copy_in)
    for vid in plan.recompute:          # the prologue's fragments are laid out over every thread
        gen.buffers.pop(vid, None)
    gen.warp_thread, gen.group_threads = gen.ids.fresh("thread"), GROUP_THREADS
    gen.let(gen.warp_thread, f"{tx} - {GROUP_THREADS * group}", indent, reads=(tx,))
    registers = plan.registers.get(group)
    if registers is not None:
        grow = int(registers > plan.default_registers())
        gen.emit(f"T.set_max_nreg({registers}, {grow})", indent)
    start = gen.out.position()
    emit_ops(gen, plan, gen.kernel.body, plan.section, indent)
    if not gen.out.emitted_since(start):
        gen.emit("pass", indent)
    gen.forget(plan.section)
    gen.warp_group = gen.warp_thread = None
    gen.group_writer = None


def emit_ops(gen: Context, plan: Plan, blk: Block, ops: list[Op], indent: int, then=None):
    """The ops of `ops` (a block's, or the group section) that the current group runs, with the waits before
    and the arrives after the ops that start and end its accesses to each hand-off. `then` (the writes of
    what the block yields) runs right after the terminator: a tile read from a buffer and carried to the next
    step is read there, so the arrives that release the buffer follow it."""
    group = gen.warp_group
    offs = plan.hand_offs.get(id(blk), ())
    turns = plan.turns.get(id(blk))
    spans = turns.spans.get(group, []) if turns else []
    turn_waits = [_turn_wait_at(plan, ops, offs, group, first, last) for first, last in spans]
    product_waits = plan.waits(blk, group) if ops is blk.ops else {}
    for pos, op in enumerate(ops):
        if not plan.runs(op, group):
            for r in op.results:        # a version another group writes: the same allocation here
                if r.type.is_buffer and root(r).id in gen.buffers:
                    gen.buffers[r.id] = gen.buffers[root(r).id]
            continue
        if pos in product_waits:
            _wait_for_products(gen, product_waits[pos], indent)
        for h in offs:
            if h.first.get(group) == pos:
                _wait(gen, h, group, blk is gen.kernel.body, indent)
        for j, at in enumerate(turn_waits):
            if at == pos:
                _wait_turn(gen, turns, group, j, indent)
        gen.statement(op, indent)
        if then is not None and op is blk.terminator:
            then()
            then = None
        if any(last == pos for _, last in spans):
            _pass_turn(gen, turns, group, indent)
        for h in offs:
            if h.last.get(group) == pos:
                _arrive(gen, h, group, blk is gen.kernel.body, indent)
    if then is not None:
        then()


def _turn_wait_at(plan: Plan, ops: list[Op], offs: list[HandOff], group: int, first: int, last: int) -> int:
    """Where a group waits for its turn block at positions first..last: once the block's data is in (after the
    hand-off waits inside it), unless the block writes something before that: then at its start, so that
    every write of the block is made in its turn."""
    data = max([first] + [h.first[group] for h in offs if first <= h.first.get(group, -1) <= last])
    early = [o for op in ops[first:data] for o in (op, *nested(op)) if plan.runs(o, group)]
    return first if any(o.defn.has_effect and not o.has(Trait.READS) for o in early) else data


# -- barriers ------------------------------------------------------------------------------------------------
def _declare_barriers(gen: Context, plan: Plan):
    for offs in plan.hand_offs.values():
        for h in offs:
            if h.level is not gen.kernel.body:
                writes = plan.writes(h)
                h.tma = bool(writes) and all(tma_box(gen, o) is not None for o in writes)
                h.cp_async = not h.tma and bool(writes) and all(
                    o.defn is ops.COPY_IN and row_gather(gen, o, GROUP_THREADS) is not None for o in writes)
            base = h.alloc.name or "buf"
            h.full = gen.ids.fresh(base + "_full")
            gen.allocs.append(f"{h.full} = T.alloc_barrier(arrive_count={[GROUP_THREADS] * h.versions})")
            if h.level is not gen.kernel.body:
                h.empty = gen.ids.fresh(base + "_empty")
                gen.allocs.append(f"{h.empty} = T.alloc_barrier(arrive_count="
                                  f"{[GROUP_THREADS * len(h.readers)] * h.versions})")


def _declare_turns(gen: Context, plan: Plan):
    for turns in plan.turns.values():
        for group in turns.groups:
            turns.barriers[group] = gen.ids.fresh(f"turn_{group}")
            gen.allocs.append(f"{turns.barriers[group]} = T.alloc_barrier(arrive_count=[{GROUP_THREADS}])")


def _wait_turn(gen: Context, turns: Turns, group: int, j: int, indent: int):
    """Wait for turn j of this step. Group i's barrier completes a phase when group i - 1 ends a turn; the first
    group's when the last group ends one, and its first wait passes at once (a fresh barrier's parity 1)."""
    # turn n = step * per_step + j waits for the barrier's phase n, of parity (step + j) & 1 when a step has an
    # odd number of turns, j & 1 when even; the first group's waits are one phase behind (flipped parity)
    flip = int(group == turns.groups[0])
    if len(turns.spans[group]) % 2 == 0:
        parity = str((j + flip) % 2)
    else:
        n = gen.warp_step if j == 0 else f"({gen.warp_step} + {j})"
        parity = f"({n} & 1) ^ 1" if flip else f"{n} & 1"
    gen.emit(f"T.barrier_wait({turns.barriers[group]}[0], {parity})", indent, reads=_names(gen))


def _pass_turn(gen: Context, turns: Turns, group: int, indent: int):
    nxt = turns.groups[(turns.groups.index(group) + 1) % len(turns.groups)]
    gen.emit(f"T.barrier_arrive({turns.barriers[nxt]}[0])", indent)


def _version_and_phase(gen: Context, h: HandOff, section: bool) -> tuple[str, str]:
    """Which version of `h` this step uses, and the parity of that version's current phase."""
    if section:                          # written once: the first phase
        return "0", "0"
    step = gen.warp_step
    if h.versions == 1:                  # one version, written again every step
        return "0", f"{step} & 1"
    return f"{step} % {h.versions}", f"({step} // {h.versions}) & 1"


def _wait(gen: Context, h: HandOff, group: int, section: bool, indent: int):
    version, phase = _version_and_phase(gen, h, section)
    if group == h.writer:
        if h.empty:
            gen.emit(f"T.barrier_wait({h.empty}[{version}], ({phase}) ^ 1)", indent, reads=_names(gen))
    else:
        gen.emit(f"T.barrier_wait({h.full}[{version}], {phase})", indent, reads=_names(gen))


def _arrive(gen: Context, h: HandOff, group: int, section: bool, indent: int):
    version, _ = _version_and_phase(gen, h, section)
    if group == h.writer and h.tma:
        # the phase completes once every writer thread has arrived and the TMA loads' bytes have landed
        gen.emit(f"T.barrier_arrive({h.full}[{version}])", indent, reads=_names(gen))
    elif group == h.writer and h.cp_async:
        # arrives when this thread's cp.async copies have landed
        gen.emit(f"T.cp_async_barrier_noinc({h.full}[{version}])", indent, reads=_names(gen))
    elif group == h.writer:
        # the readers may read through the async proxy (wgmma): make the writes visible to it first
        gen.emit("T.fence_proxy_async()", indent)
        gen.emit(f"T.barrier_arrive({h.full}[{version}])", indent, reads=_names(gen))
    elif h.empty:
        gen.emit(f"T.barrier_arrive({h.empty}[{version}])", indent, reads=_names(gen))


def _wait_for_products(gen: Context, wait: Wait, indent: int):
    """Wait for deferred products (product_waits.py), then fence their results' registers: the compiler must
    not read them before the wait."""
    gen.emit(f"T.wait_wgmma({wait.newer})", indent)
    for p in wait.products:
        out = gen.buffers[p.result.id]
        shape, bits = p.result.type.shape, p.result.type.elem.bits
        regs = shape[0] * shape[1] * bits // 32 // GROUP_THREADS      # a warp group's accumulator, per thread
        gen.emit(f"T.warpgroup_fence_operand({out.name}, num_regs={regs})", indent)


def _names(gen: Context) -> tuple[str, ...]:
    return () if gen.warp_step is None else (gen.warp_step,)


# -- a loop holding several groups' ops ----------------------------------------------------------------------
def group_loop(gen: Context, op: Op, indent: int):
    """`op` in the current group: only the values this group carries."""
    plan: Plan = gen.warp_plan
    group = gen.warp_group
    lo, hi, step = op.operand("lower"), op.operand("upper"), op.operand("step")
    inits = op.operand_group("inits")
    iv, *carried = op.body.args
    outs = op.body.terminator.operands
    mine = [k for k in range(len(carried)) if plan.carries(op, k, group)]
    slots = [carry_slot(gen, carried[k], inits[k], op.results[k], op, indent) for k in mine]
    simple = is_const(lo, 0) and is_const(step, 1)
    counter = gen.ids.define(iv) if simple else gen.ids.fresh("it")
    gen.emit(f"for {counter} in T.serial({trip_count(gen, lo, hi, step)}):", indent)
    if simple:
        gen.scalars[iv.id] = counter
    else:
        ivn = gen.ids.fresh(iv.name or "k")
        start = "" if is_const(lo, 0) else f"{gen.scalar(lo)} + "
        stride = "" if is_const(step, 1) else f" * {gen.scalar(step)}"
        gen.let(ivn, f"{start}{counter}{stride}", indent + 1, reads=(counter,))
        gen.scalars[iv.id] = ivn
    saved, gen.warp_step = gen.warp_step, counter
    _emit_body_of_group(gen, op.body, slots, [outs[k] for k in mine], indent + 1)
    gen.forget(op.body.ops)
    gen.warp_step = saved
    gen.report.append((op.loc.line, "tle.gpu.warp_group", "loop", f"warp group {group}: T.serial"))


def _emit_body_of_group(gen: Context, body: Block, slots, outs, indent: int):
    start = gen.out.position()
    gen.block(body, indent, then=lambda: write_slots(gen, slots, outs, indent))
    if not gen.out.emitted_since(start):
        gen.emit("pass", indent)


def group_copy_in(gen: Context, op: Op, buf: Buffer, indent: int) -> str | None:
    """Emit `op`, a copy into a hand-off this group writes as TMA loads or cp.async, if it is one, and say how;
    else None."""
    h = gen.warp_plan.hand_off_written_by(op)
    if h is not None and h.tma:
        version, _ = _version_and_phase(gen, h, False)
        src = region(gen, gen.access(op).param.value, tma_box(gen, op))
        gen.emit(f"T.tma_copy({src}, {buf.region()}, barrier={h.full}[{version}])", indent, reads=_names(gen))
        return f"TMA load into {buf.name} (rows past the argument's edge zero-filled)"
    if h is None or not h.cp_async:
        return None
    emit_row_gather(gen, op, row_gather(gen, op, GROUP_THREADS), buf, gen.warp_thread, GROUP_THREADS, indent)
    return f"cp.async rows into {buf.name} (16 bytes a copy, zero-filled where masked off)"


def tma_box(gen: Context, op: Op):
    """The box of its argument a copy into a hand-off covers, where a TMA load can copy it: a box whose mask is
    at most the argument's edge (past which TMA reads zeros), zero `other`, and an argument whose address and
    strides (but the last, 1) are multiples of 16 bytes. None otherwise."""
    if op.defn is not ops.COPY_IN:
        return None
    mask, other = op.operand("mask"), op.operand("other")
    acc = gen.access(op)
    if acc.param is None or (other is not None and not is_zero(other)):
        return None
    if not tensor_map_fits(gen, acc.param.value, op.operand("ptr").type.elem.elem.bits // 8):
        return None
    return box(gen, op, acc, mask)
