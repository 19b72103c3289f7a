"""Index tiles staged in shared memory by a pipelined loop, and the stage of each statement of its body.

A masked index tile whose `other` is not zero (TileLang reads it synchronously) that the loop's
asynchronous gathers read is written to shared memory once per step, in stage 0, and the loop names
every statement's stage itself (`order=[...], stage=[...]`): TileLang's planner would put that write in
the last stage, after the copies that need it. A named stage list needs the body's statements to be
the loop's own statements, and a scalar let (`x = expr`, a TIR LetStmt) nests every statement after it:
so the tiles are staged only when no let comes after a statement at the top of the body. That is
decided here on the IR of the body, before it is emitted, by following what each top-level op will
emit (the same decisions the rules take); where that cannot be known before the body is emitted, the
tiles are not staged (they are then read again at each use, as without a pipelined loop)."""
from __future__ import annotations

from ..ir.core import Op, Value
from ..ir.ops import ELEMENTWISE, with_trait
from .buffers import read_before_next_write
from .context import Context
from .emission import Stmt
from .expressions import binds_let, materializes
from .gathers import stays_synchronous
from .slots import loop_slots_of
from .values import nested
from .versions import root

_ELEMENTWISE = with_trait(ELEMENTWISE)
# what an op emits at the top of the body: a let, a statement, or possibly a statement
LET, STATEMENT, MAYBE = "let", "statement", "maybe"
# ops that always emit a statement at the level they stand
_STATEMENTS = {"store", "copy_out", "atomic", "copy_in", "reduce", "dot", "for", "if"}


def index_tiles_to_stage(g: Context, loop: Op, slots) -> set[int]:
    """The index loads at the top of pipelined `loop`'s body that it stages in shared memory (see above);
    `slots`: the loop's carried slots."""
    body = loop.body
    gathered = set()
    for o in body.ops:
        if o.name == "copy_in" or (o.name == "load" and o.attrs.get("async") == "pipelined"):
            acc = g.access(o)
            if acc.offset is not None:
                gathered.update(vid for vid, _, _ in acc.offset.data)
    staged = {o.result.id for o in body.ops if o.name == "load" and o.result.id in g.index_loads and
              o.result.id in gathered and stays_synchronous(g, o)}
    if not staged or _lets_may_nest_statements(g, loop, staged, slots):
        return set()
    return staged


def stage_annotation(statements: list[Stmt], stages: int) -> tuple[list[int], list[int]]:
    """T.Pipelined's (order, stage) for the body's top-level statements: stage-0 copies in the first
    stage, the rest in the last. Lets precede every statement (index_tiles_to_stage saw to it)."""
    stmts = [s for s in statements if s.defines is None]
    assert all(s.defines is None for s in statements[len(statements) - len(stmts):]), \
        "a let among the statements of a loop with named stages"
    stage = [0 if s.stage0 else stages - 1 for s in stmts]
    return list(range(len(stage))), stage


def _lets_may_nest_statements(g: Context, loop: Op, staged: set[int], slots) -> bool:
    """Could a let come after a statement at the top of `loop`'s body, emitted with `staged` staged?"""
    sim = _Simulation(g, staged)
    seen = None             # None, MAYBE or STATEMENT: what was emitted before
    for op in loop.body.ops:
        for emitted in sim.emits(op):
            if emitted == LET and seen is not None:
                return True
            if emitted == STATEMENT or (emitted == MAYBE and seen is None):
                seen = emitted
    # the staged tiles are statements, so any let at the end (the writes of carried values staged
    # through temporaries) comes after one
    return _slot_writes_may_let(g, loop, slots, sim)


class _Simulation:
    """Follows the top-level ops of a body in order, with what each leaves in a buffer or a scalar (which
    decides whether an element-wise tile is worth materializing)."""

    def __init__(self, g: Context, staged: set[int]):
        self.g = g
        self.staged = staged
        self.surely: set[int] = set()       # values of the body held in a buffer or a scalar
        self.maybe: set[int] = set()        # ... or possibly held

    def held(self, v: Value, possibly: bool) -> bool:
        g = self.g
        return v.id in g.buffers or v.id in g.scalars or v.id in self.surely or (possibly and v.id in self.maybe)

    def emits(self, op: Op) -> list[str]:
        g, n = self.g, op.name
        results = [r.id for r in op.results]
        if n in _ELEMENTWISE:
            v = op.result
            if v.type.is_scalar:
                if binds_let(g, op):
                    self.surely.add(v.id)
                    return [LET]
                return []
            # more values held: a lower cost. Materialized whatever else is held: surely; with only what is
            # surely held: possibly
            if materializes(g, op, held=lambda u: self.held(u, possibly=True)):
                self.surely.add(v.id)
                return [STATEMENT]
            if materializes(g, op, held=lambda u: self.held(u, possibly=False)):
                self.maybe.add(v.id)
                return [MAYBE]
            return []
        if n == "load":
            v = op.result
            if v.id in self.staged:
                self.surely.add(v.id)
                return [STATEMENT]
            if v.id in g.index_loads:
                return []
            self.surely.add(v.id)
            return [LET] if v.type.is_scalar else [STATEMENT]
        self.surely.update(results)
        if n == "reduce":
            self.surely.add(op.operands[0].id)         # buffer_of(x): a fragment holds it from here on
        elif n == "dot":                               # the operands, or what they transpose, in shared memory
            self.maybe.update(v.id for v in _through_transposes(op.operands[:2]))
        elif n in ("store", "copy_out"):
            self.maybe.add(op.operands[1].id)         # a box store may put the value in a fragment
        elif n in ("for", "if"):                       # the ops inside may hold what they read in a buffer
            self.maybe.update(v.id for o in nested(op) for v in o.operands if v is not None)
        if n in _STATEMENTS:
            return [STATEMENT]
        if n == "raw_call":
            # fills of the written arguments' copies, then the thread-index lets, then the body
            self.maybe.update(o.id for o in op.operands)
            return [STATEMENT if op.attrs["outputs"] else MAYBE, LET, MAYBE]
        if n == "local_load":
            return [] if read_before_next_write(g, op) else [STATEMENT]
        if n == "local_store":
            return [] if _stores_own_contents(g, op) else [STATEMENT]
        return []                                      # alloc, yield


def _through_transposes(values) -> list[Value]:
    """`values` and, for each made by trans, the values it transposes (a dot operand's buffer holds those)."""
    out = []
    for v in values:
        while v is not None:
            out.append(v)
            op = v.defining_op
            v = op.operands[0] if op is not None and op.name == "trans" else None
    return out


def _stores_own_contents(g: Context, op: Op) -> bool:
    """Does local_store `op` store a tile read in place from the same buffer (nothing to emit)?"""
    bv, val = op.operands
    src = val.defining_op
    if src is None or src.name != "local_load":
        return False
    if val.id in g.buffers:                # read before the loop
        return g.buffers[val.id] is g.buffers.get(root(bv).id)
    return root(src.operands[0]) is root(bv) and read_before_next_write(g, src)


def _slot_writes_may_let(g: Context, loop: Op, slots, sim: _Simulation) -> bool:
    """Could the writes of the body's carried values into their slots be staged through temporaries
    (lets, for scalars), because one of them reads the slot of another?"""
    body = loop.body
    outs = body.terminator.operands if body.terminator else []
    reused = {}                  # if-results of the body written into a loop slot in place
    for o in body.ops:
        if o.name == "if":
            for i, c in loop_slots_of(g, o).items():
                reused[o.results[i].id] = c.id
    pending = []                 # (slot index, yielded value) of the writes that may be emitted
    for k, ((kind, _, c), out) in enumerate(zip(slots, outs)):
        if kind != "buffer" and out.id != c.id and reused.get(out.id) != c.id:
            pending.append((k, kind, out))
    if len(pending) < 2 or all(kind != "var" for _, kind, _ in pending):
        return False
    storage: dict[int, set[int]] = {}       # value id -> the slots it lives in, or may live in
    for k, (kind, slot, _) in enumerate(slots):
        if kind == "var":
            held = [vid for vid, name in g.scalars.items() if name == slot]
        else:
            held = [vid for vid, b in g.buffers.items() if b is slot] if kind == "buf" else []
        for vid in held:
            storage.setdefault(vid, set()).add(k)
    for rid, cid in reused.items():
        storage[rid] = storage[cid]
    for o in body.ops:          # a product accumulated in place in a carried fragment
        if o.name == "dot" and (reached := _slots_reached(o.operands[2], storage, g, sim)):
            storage[o.result.id] = reached
    for k, _, out in pending:
        others = {j for j, _, _ in pending if j != k}
        if _slots_reached(out, storage, g, sim) & others:
            return True
    return False


def _slots_reached(v: Value, storage: dict[int, set[int]], g: Context, sim: _Simulation) -> set[int]:
    """The slots whose name the expression of `v` may be written with."""
    out, seen, todo = set(), set(), [v]
    while todo:
        v = todo.pop()
        if v is None or v.id in seen:
            continue
        seen.add(v.id)
        if v.id in storage:
            out |= storage[v.id]
            continue
        if v.id in g.scalars or (v.id in g.buffers and g.visible(g.buffers[v.id])) or v.id in sim.surely:
            continue                 # written by its own name
        op = v.defining_op
        if op is not None and (op.name in _ELEMENTWISE or op.name == "load"):
            todo.extend(op.operands)
    return out
