"""Index tiles staged in shared memory by a pipelined loop, and the stage of each statement of its body.

A masked index tile whose `other` is not zero (TileLang reads it synchronously) that the loop's
asynchronous gathers read is written to shared memory once per step, in stage 0, and the loop names
every statement's stage itself (`order=[...], stage=[...]`): TileLang's planner would put that write in
the last stage, after the copies that need it. A named stage list needs the body's statements to be
the loop's own statements, and a scalar let (`x = expr`, a TIR LetStmt) nests every statement after it:
so the tiles are staged only when no let comes after a statement at the top of the body. That is
decided here on the IR of the body, before it is emitted, by following what each top-level op will
emit (the same decisions the rules take); where that cannot be known before the body is emitted, the
tiles are not staged (they are then read again at each use, as without a pipelined loop).

TileLang counts the statements of the body after its simplifier has run. That simplifier replaces an `if`
whose condition it proves by the branch taken (the guarded block's statements, or nothing) and removes a
loop it proves empty: in a loop of one step (`ck` is 0 there, so a guard `ck * 64 <= i_sq` always holds),
or one whose guard holds at every step, the body would have more or fewer statements than the list
names, which TileLang rejects. No prover shows constant a condition that holds at one point the program
reaches and fails at another, nor empty a loop that runs at one: so the tiles are staged only when each
`if` at the top of the body is seen to go both ways, and each loop there to run, at points the program
reaches (a step of the loop and of the loops around it, a block of the grid, a value of each runtime
integer the kernel was not compiled for, of which TileLang knows nothing)."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Op, Value
from ..ir.ops import PLAIN_LOAD, Trait, UnaryOp, ops_of
from ..ir.integers import CMP_OPS, INT_OPS, fits
from .buffers import read_before_next_write
from .context import Context
from .emission import Stmt
from .expressions import binds_let, materializes
from .gathers import stays_synchronous
from .slots import loop_slots_of
from .values import nested
from .versions import root

# what an op emits at the top of the body: a let, a statement, or possibly a statement
LET, STATEMENT, MAYBE = "let", "statement", "maybe"
# ops that always emit a statement at the level they stand
_STATEMENTS = ops_of(ops.STORE, ops.COPY_OUT, ops.ATOMIC, ops.COPY_IN, ops.REDUCE, ops.DOT, ops.FOR, ops.IF)


def index_tiles_to_stage(gen: Context, loop: Op, slots) -> set[int]:
    """The index loads at the top of pipelined `loop`'s body that it stages in shared memory (see above);
    `slots`: the loop's carried slots."""
    body = loop.body
    gathered = set()
    for o in body.ops:
        if o.defn is ops.COPY_IN or (o.defn is ops.LOAD and o.attrs.get("async", PLAIN_LOAD).pipelined):
            acc = gen.access(o)
            if acc.offset is not None:
                gathered.update(vid for vid, _, _ in acc.offset.data)
    staged = {o.result.id for o in body.ops if o.defn is ops.LOAD and o.result.id in gen.index_loads and
              o.result.id in gathered and stays_synchronous(gen, o)}
    if not staged or _lets_may_nest_statements(gen, loop, staged, slots) or not _statements_kept(gen, loop):
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


def _lets_may_nest_statements(gen: Context, loop: Op, staged: set[int], slots) -> bool:
    """Could a let come after a statement at the top of `loop`'s body, emitted with `staged` staged?"""
    sim = _Simulation(gen, staged)
    seen = None             # None, MAYBE or STATEMENT: what was emitted before
    for op in loop.body.ops:
        for emitted in sim.emits(op):
            if emitted == LET and seen is not None:
                return True
            if emitted == STATEMENT or (emitted == MAYBE and seen is None):
                seen = emitted
    # the staged tiles are statements, so any let at the end (the writes of carried values staged
    # through temporaries) comes after one
    return _slot_writes_may_let(gen, loop, slots, sim)


class _Simulation:
    """Follows the top-level ops of a body in order, with what each leaves in a buffer or a scalar (which
    decides whether an element-wise tile is worth materializing)."""

    def __init__(self, gen: Context, staged: set[int]):
        self.gen = gen
        self.staged = staged
        self.surely: set[int] = set()       # values of the body held in a buffer or a scalar
        self.maybe: set[int] = set()        # ... or possibly held

    def held(self, v: Value, possibly: bool) -> bool:
        gen = self.gen
        return v.id in gen.buffers or v.id in gen.scalars or v.id in self.surely or (possibly and v.id in self.maybe)

    def emits(self, op: Op) -> list[str]:
        gen, n = self.gen, op.defn
        results = [r.id for r in op.results]
        if op.has(Trait.ELEMENTWISE):
            v = op.result
            # a split may first copy the tile it halves to shared memory (expressions.stage_split_operand)
            first = [MAYBE] if n is ops.SPLIT else []
            if v.type.is_scalar:
                if binds_let(gen, op):
                    self.surely.add(v.id)
                    return first + [LET]
                return first
            # more values held: a lower cost. Materialized whatever else is held: surely; with only what is
            # surely held: possibly
            if materializes(gen, op, held=lambda u: self.held(u, possibly=True)):
                self.surely.add(v.id)
                return first + [STATEMENT]
            if materializes(gen, op, held=lambda u: self.held(u, possibly=False)):
                self.maybe.add(v.id)
                return first + [MAYBE]
            return first
        if n is ops.LOAD:
            v = op.result
            if v.id in self.staged:
                self.surely.add(v.id)
                return [STATEMENT]
            if v.id in gen.index_loads or v.id in gen.product_feeds:
                return []
            self.surely.add(v.id)
            return [LET] if v.type.is_scalar else [STATEMENT]
        self.surely.update(results)
        if n is ops.REDUCE:
            self.surely.add(op.operand("x").id)        # buffer_of(x): a fragment holds it from here on
        elif n is ops.DOT:                             # the operands, or what they transpose, in shared memory
            self.maybe.update(v.id for v in _through_transposes([op.operand("a"), op.operand("b")]))
        elif n is ops.STORE:
            self.maybe.add(op.operand("value").id)     # a box store may put the value in a fragment
        elif n is ops.COPY_OUT:
            self.maybe.add(op.operand("buf").id)
        elif n in (ops.FOR, ops.IF):                   # the ops inside may hold what they read in a buffer
            self.maybe.update(v.id for o in nested(op) for v in o.operands if v is not None)
        if n in _STATEMENTS:
            return [STATEMENT]
        if n is ops.RAW_CALL:
            # fills of the written arguments' copies, then the thread-index lets, then the body
            self.maybe.update(o.id for o in op.operands)
            return [STATEMENT if op.attrs["outputs"] else MAYBE, LET, MAYBE]
        if n is ops.LOCAL_LOAD:
            return [] if read_before_next_write(gen, op) else [STATEMENT]
        if n is ops.LOCAL_STORE:
            return [] if _stores_own_contents(gen, op) else [STATEMENT]
        return []                                      # alloc, yield


def _through_transposes(values) -> list[Value]:
    """`values` and, for each made by trans, the values it transposes (a dot operand's buffer holds those)."""
    out = []
    for v in values:
        while v is not None:
            out.append(v)
            op = v.defining_op
            v = op.operand("x") if op is not None and op.defn is ops.TRANS else None
    return out


def _stores_own_contents(gen: Context, op: Op) -> bool:
    """Does local_store `op` store a tile read in place from the same buffer (nothing to emit)?"""
    bv, val = op.operand("buf"), op.operand("value")
    src = val.defining_op
    if src is None or src.defn is not ops.LOCAL_LOAD:
        return False
    if val.id in gen.buffers:                # read before the loop
        return gen.buffers[val.id] is gen.buffers.get(root(bv).id)
    return root(src.operand("buf")) is root(bv) and read_before_next_write(gen, src)


def _slot_writes_may_let(gen: Context, loop: Op, slots, sim: _Simulation) -> bool:
    """Could the writes of the body's carried values into their slots be staged through temporaries
    (lets, for scalars), because one of them reads the slot of another?"""
    body = loop.body
    outs = body.terminator.operands if body.terminator else []
    reused = {}                  # if-results of the body written into a loop slot in place
    for o in body.ops:
        if o.defn is ops.IF:
            for i, c in loop_slots_of(gen, o).items():
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
            held = [vid for vid, name in gen.scalars.items() if name == slot]
        else:
            held = [vid for vid, b in gen.buffers.items() if b is slot] if kind == "buf" else []
        for vid in held:
            storage.setdefault(vid, set()).add(k)
    for rid, cid in reused.items():
        storage[rid] = storage[cid]
    for o in body.ops:          # a product accumulated in place in a carried fragment
        if o.defn is ops.DOT and (reached := _slots_reached(o.operand("acc"), storage, gen, sim)):
            storage[o.result.id] = reached
    for k, _, out in pending:
        others = {j for j, _, _ in pending if j != k}
        if _slots_reached(out, storage, gen, sim) & others:
            return True
    return False


def _slots_reached(v: Value, storage: dict[int, set[int]], gen: Context, sim: _Simulation) -> set[int]:
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
        if v.id in gen.scalars or (v.id in gen.buffers and gen.visible(gen.buffers[v.id])) or v.id in sim.surely:
            continue                 # written by its own name
        op = v.defining_op
        if op is not None and (op.has(Trait.ELEMENTWISE) or op.defn is ops.LOAD):
            todo.extend(op.operands)
    return out


# -- branches and loops at the top of the body, as TileLang's simplifier leaves them -------------------------
# values tried for a runtime integer the kernel was not compiled for; for a block index, a step of a loop
_RUNTIME_INTS = (-1, 0, 1, 2, 64, 1000)
_MAX_POINTS = 4096          # beyond this many points, the body is not examined (its tiles are not staged)
_Point = dict           # value id (or ("pid", axis)) -> its integer value at one point of the program


def _statements_kept(gen: Context, loop: Op) -> bool:
    """Is every `if` at the top of `loop`'s body seen to go both ways, and every loop there to run, at points
    the program reaches (see above)? Then TileLang's simplifier keeps each of them one statement."""
    checked = [o for o in loop.body.ops if o.defn in (ops.IF, ops.FOR)]
    if not checked:
        return True
    points = _points(gen, loop)
    if points is None:
        return False
    for o in checked:
        if o.defn is ops.IF:
            seen = {_eval(gen, o.operand("cond"), p) for p in points}
            if not {True, False} <= seen:
                return False
        elif not any((n := _steps(gen, o, p)) is not None and n > 0 for p in points):
            return False
    return True


def _points(gen: Context, loop: Op) -> list[_Point] | None:
    """Points that reach the body of `loop`: each block index, runtime integer and counter of an enclosing
    loop given a value, inside the loops' bounds and the branches taken. None: not enumerable here."""
    chain = []                  # (op, index of the region on the way to the body), outermost first
    op, region = loop, 0
    while op is not None:
        chain.append((op, region))
        blk = op.parent
        op = blk.parent_op if blk is not None else None
        region = op.regions.index(blk) if op is not None else 0
    chain.reverse()
    # the block indices and runtime integers the bounds and conditions read
    read = [v for op, _ in chain for v in _decisive(op)]
    read += [v for o in loop.body.ops if o.defn in (ops.IF, ops.FOR) for v in _decisive(o)]
    grid_axes, runtime = _inputs(gen, read)
    choices = [[(("pid", a), v) for v in _samples(gen.grid[a] if a < len(gen.grid) else 1)] for a in grid_axes]
    choices += [[(vid, v) for v in _RUNTIME_INTS] for vid in runtime]
    points: list[_Point] = [{}]
    for options in choices:
        points = [{**p, k: v} for p in points for k, v in options]
        if len(points) > _MAX_POINTS:
            return None
    for op, region in chain:
        reached = []
        for p in points:
            if op.defn is ops.FOR:
                n = _steps(gen, op, p)
                if n is None:
                    return None
                lo, step = _eval(gen, op.operand("lower"), p), _eval(gen, op.operand("step"), p)
                reached += [{**p, op.body.args[0].id: lo + k * step} for k in _samples(n)]
            elif op.defn is ops.IF:
                cond = _eval(gen, op.operand("cond"), p)
                if cond is None:
                    return None
                if cond == (region == 0):
                    reached.append(p)
            else:
                return None
        points = reached
        if len(points) > _MAX_POINTS:
            return None
    return points


def _decisive(op: Op) -> list[Value]:
    """The operands that decide how often a for loop runs (its bounds and step) or which way an if goes (its
    condition); none for another op, whose points are not enumerated (_points)."""
    if op.defn is ops.FOR:
        return [op.operand("lower"), op.operand("upper"), op.operand("step")]
    if op.defn is ops.IF:
        return [op.operand("cond")]
    return []


def _inputs(gen: Context, values) -> tuple[list[int], list[int]]:
    """(grid axes, ids of runtime integer parameters) that the expressions of `values` read."""
    axes, params, seen, todo = set(), set(), set(), list(values)
    while todo:
        v = todo.pop()
        if v is None or v.id in seen:
            continue
        seen.add(v.id)
        p = gen.params.get(v.id)
        if p is not None:
            if v.type.is_scalar and not v.type.is_pointer and v.type.elem.is_int and not v.type.elem.is_bool:
                params.add(v.id)
            continue
        op = v.defining_op
        if op is None:
            continue
        if op.defn is ops.PROGRAM_ID:
            axes.add(op.attrs["axis"])
        todo.extend(op.operands)
    return sorted(axes), sorted(params)


def _samples(n: int) -> list[int]:
    """A few of 0 .. n-1: both ends, the second, the middle."""
    return sorted({k for k in (0, 1, n // 2, n - 1) if 0 <= k < n})


def _steps(gen: Context, loop: Op, p: _Point) -> int | None:
    """How many steps `loop` runs at point `p` (None: not known here)."""
    lo, hi, step = (_eval(gen, loop.operand(name), p) for name in ("lower", "upper", "step"))
    if None in (lo, hi, step) or step <= 0:
        return None
    return max(0, -(-(hi - lo) // step))


def _eval(gen: Context, v: Value, p: _Point, memo: dict | None = None):
    """The value of integer or boolean scalar `v` at point `p`, or None where it is not known here (it
    reads memory, a carried value, a float)."""
    if v is None or not v.type.is_scalar or v.type.is_pointer or not v.type.elem.is_int:
        return None
    if v.id in p:
        return p[v.id]
    memo = {} if memo is None else memo
    if v.id not in memo:
        memo[v.id] = _eval_op(gen, v, p, memo)
    return memo[v.id]


def _eval_op(gen: Context, v: Value, p: _Point, memo: dict):
    op = v.defining_op
    if op is None:
        return None
    d = op.defn
    if d is ops.CONST:
        value = op.attrs["value"]
        return value if isinstance(value, int) else None          # bool is an int
    if d is ops.PROGRAM_ID:
        return p.get(("pid", op.attrs["axis"]))
    if d is ops.NUM_PROGRAMS:
        axis = op.attrs["axis"]
        return gen.grid[axis] if axis < len(gen.grid) else 1
    if d is ops.HINT:
        return _eval(gen, op.operand("x"), p, memo)
    if d not in (ops.CMP, ops.BINARY, ops.UNARY, ops.CAST, ops.WHERE):
        return None
    args = [_eval(gen, o, p, memo) for o in op.operands]
    if None in args:
        return None
    if d is ops.CMP:
        return CMP_OPS[op.attrs["pred"]](*args)
    if d is ops.BINARY and op.attrs["op"] in INT_OPS:
        return _fit(INT_OPS[op.attrs["op"]](*args), v.type.elem)
    if d is ops.UNARY and op.attrs["op"] in (UnaryOp.NOT, UnaryOp.NEG, UnaryOp.ABS, UnaryOp.INVERT):
        (a,) = args
        kind = op.attrs["op"]
        if v.type.elem.is_bool:
            return not a if kind in (UnaryOp.NOT, UnaryOp.INVERT) else None
        return _fit({UnaryOp.NOT: int(not a), UnaryOp.NEG: -a, UnaryOp.ABS: abs(a), UnaryOp.INVERT: ~a}[kind],
                    v.type.elem)
    if d is ops.CAST and not op.attrs.get("bitcast"):
        return bool(args[0]) if v.type.elem.is_bool else _fit(int(args[0]), v.type.elem)
    if d is ops.WHERE:
        return args[1] if args[0] else args[2]
    return None


def _fit(value, elem):
    """`value` as a value of integer type `elem`; None where it does not fit (no wrap-around is followed)."""
    if value is None or elem.is_bool:
        return None if value is None else bool(value)
    return value if fits(value, elem) else None
