"""tle.gpu.warp_group on TileLang: the block's threads split into warp groups of 128, each running its own
branch of the kernel, handing tle.gpu buffers to each other through mbarriers.

The kernel's top-level ops up to the first one a warp group runs (the prologue) run on every thread. From
there on (the group section), each group gets a branch `if tx < 128 * (k + 1):` holding the ops it runs:
the ops of its `with tle.gpu.warp_group(k)` blocks, the loops and branches around them, and the pure ops
those read. A loop holding several groups' ops is emitted once per group, each copy carrying only that
group's values.

A hand-off is a buffer one group writes and others read. Its meaning is the program's: in each step, the
readers see what the writer wrote in that step. Two mbarriers per version keep it: the writer waits until
the readers have released the version (`empty`), writes, and arrives on `full`; each reader waits on
`full`, reads, and arrives on `empty`. The waits and arrives sit around the top-level ops of the loop body
(or group section) that hold the accesses. A buffer allocated inside the loop is new in every step, so it
gets one version per pipeline stage (a leading axis; step i uses version i % stages) and the writer can run
that many steps ahead. A buffer allocated outside the loop is one version, written again each step once its
readers are done. A buffer written only before the loop and read in it is handed over before the loop: its
readers wait once, at the loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import ops
from ..ir.core import Block, KernelIR, Op, Value
from ..ir.ops import Trait, with_trait
from ..ir.uses import users as all_users
from .product_waits import Wait, deferred_products, waits_in
from .values import nested
from .versions import root

GROUP_THREADS = 128
_RECOMPUTABLE = with_trait(Trait.ELEMENTWISE)
_REGISTER_FILE = 65536      # 32-bit registers per SM, shared by the block's threads


class WarpGroupError(Exception):
    """A kernel's warp groups that TileLang cannot lower: (construct, op, detail)."""

    def __init__(self, construct: str, op: Op | None, detail: str):
        super().__init__(construct, detail)
        self.construct, self.op, self.detail = construct, op, detail


@dataclass
class HandOff:
    """A buffer allocation that one group writes and others read, at one level (a loop body or the section)."""
    alloc: Value
    level: Block          # the loop body (or the kernel body, for the group section) whose ops hand it over
    writer: int
    readers: tuple[int, ...]
    versions: int
    first: dict[int, int] = field(default_factory=dict)   # group -> position of its first access at the level
    # group -> position after which it is done: a reader's last read; the writer's last write (its own reads
    # after that need no one's leave: the readers only read too, and its next write waits for them)
    last: dict[int, int] = field(default_factory=dict)
    full: str = ""        # barrier names, set when emitted
    empty: str = ""
    cp_async: bool = False   # every write is a row gather issued as cp.async (async_gathers.py)
    tma: bool = False        # every write is a box copied by TMA loads (warp_group_code.tma_box)


@dataclass
class Turns:
    """The tle.gpu.turn blocks of one loop holding several groups: the groups that take turns, in order, and
    for each group the (first, last) positions in the loop body of its turn blocks, in program order."""
    spans: dict[int, list[tuple[int, int]]]
    barriers: dict[int, str] = field(default_factory=dict)    # group -> the barrier it waits on, set when emitted

    @property
    def groups(self) -> tuple[int, ...]:
        return tuple(sorted(self.spans))


class Plan:
    """What each group runs, and the hand-offs between groups, read from the IR once."""

    def __init__(self, k: KernelIR):
        self.kernel = k
        self.groups = sorted(k.warp_groups)
        self.registers = dict(k.warp_groups)
        self.users = all_users(k)
        self.runs_in: dict[int, frozenset[int]] = {}      # id(op) -> groups that emit it
        top = k.body.ops
        self.split = next((i for i, op in enumerate(top) if self._stamped_within(op)), len(top))
        self.section = top[self.split:]
        self.loops: dict[int, Op] = {}                    # id -> loops holding several groups' ops
        self.hand_offs: dict[int, list[HandOff]] = {}     # id(block) -> hand-offs at that level
        self._check_groups()
        self._assign(self.section)
        self._check_values()
        self.deferred: dict[int, int] = {}     # id(product) -> where its group waits for it (product_waits.py)
        for loop in self.loops.values():
            self.deferred.update(deferred_products(loop.body, self._group, self.runs, self.in_chain))
        # the buffers allocated or written in a loop holding groups (_written_only_outside_loops)
        self._loop_buffers = {root(o.results[0]).id for loop in self.loops.values() for o in nested(loop)
                              if o.defn is ops.ALLOC or o.has(Trait.BUFFER_WRITE)}
        self._find_hand_offs()
        self.turns: dict[int, Turns] = self._find_turns()     # id(loop body) -> its turns

    # -- which group runs what ---------------------------------------------------------------------------
    @staticmethod
    def _group(op: Op) -> int | None:
        return op.attrs.get("warp_group")

    def _stamped_within(self, op: Op) -> bool:
        return self._group(op) is not None or any(self._group(o) is not None for o in nested(op))

    def _check_groups(self):
        n = len(self.groups)
        if self.groups != list(range(n)):
            raise WarpGroupError("tle.gpu.warp_group", None, f"the kernel's warp groups are {self.groups}; number "
                                 f"them 0 to {n - 1}")
        if self.kernel.num_warps != 4 * n:
            raise WarpGroupError("tle.gpu.warp_group", None, f"{n} warp groups need num_warps={4 * n}, the "
                                 f"launch has num_warps={self.kernel.num_warps}")
        asked = sum(r if r is not None else self.default_registers() for r in self.registers.values())
        if asked * GROUP_THREADS > _REGISTER_FILE:
            raise WarpGroupError("tle.gpu.warp_group(registers=...)", None,
                                 f"the groups ask for {self.registers} registers per thread: more than the "
                                 f"{_REGISTER_FILE} registers of the SM for {n} groups of {GROUP_THREADS} threads")

    def default_registers(self) -> int:
        return _REGISTER_FILE // (GROUP_THREADS * len(self.groups)) // 8 * 8

    def _assign(self, block_ops: list[Op]):
        """runs_in for `block_ops` and everything nested, walking each block backwards so that a pure op knows
        the groups of the ops that read it."""
        for op in reversed(block_ops):
            for blk in op.regions:
                self._assign(blk.ops)
            g = self._group(op)
            if g is not None:
                groups = {g}
            elif op.regions:
                groups = set().union(*(self.runs_in.get(id(o), frozenset()) for blk in op.regions for o in blk.ops))
                if len(groups) > 1 and op.defn is ops.FOR:
                    self.loops[id(op)] = op
                elif len(groups) > 1 and op.defn is not ops.IF:
                    raise WarpGroupError(f"a {op.name} loop holding several warp groups' code", op,
                                         "only a for loop (tle.gpu.pipeline, range, tl.range) can")
            elif op.defn is ops.ALLOC:       # every group names the buffer; it is allocated once
                groups = set(self.groups)
            elif op.defn is ops.YIELD:
                continue                     # a terminator goes wherever its parent goes (below)
            else:
                groups = set()
                for r in op.results:
                    for u in self.users.get(r.id, []):
                        groups |= self._user_groups(u)
                if op.defn.has_effect and len(groups) != 1:
                    raise WarpGroupError(f"'{op.name}' outside every tle.gpu.warp_group block", op,
                                         "once a kernel's warp groups start, put each load, store or buffer write "
                                         "inside a `with tle.gpu.warp_group(k):` block, or before the first one")
            self.runs_in[id(op)] = frozenset(groups)
        for op in block_ops:   # a block's terminator goes wherever its parent goes
            for blk in op.regions:
                t = blk.terminator
                if t is not None and self._group(t) is None:
                    self.runs_in[id(t)] = self.runs_in[id(op)]

    def _user_groups(self, u: Op) -> set[int]:
        if u.defn is ops.YIELD:
            parent = u.parent.parent_op
            return set(self.runs_in.get(id(parent), ())) if parent is not None else set()
        return set(self.runs_in.get(id(u), ()))

    def runs(self, op: Op, group: int) -> bool:
        return group in self.runs_in.get(id(op), ())

    def carries(self, loop: Op, k: int, group: int) -> bool:
        """Does `group`'s copy of `loop` carry its k-th value (the group reads it, computes it, or reads the
        loop's result)?"""
        c = loop.body.args[1 + k]
        if c.type.is_buffer:
            return True
        readers = [u for u in [*self.users.get(c.id, []), *self.users.get(loop.results[k].id, [])]
                   if not (u.defn is ops.YIELD and u.parent is loop.body)]      # not the loop passing it on
        producer = loop.body.terminator.operands[k].defining_op
        return any(group in self._user_groups(u) for u in readers) or \
            (producer is not None and self.runs(producer, group))

    # -- values crossing groups ----------------------------------------------------------------------------
    def _check_values(self):
        """A tile a group reads must be computed in that group (or be recomputable from such values, or from
        scalars): registers are per thread, so one group cannot read another's, nor the prologue's."""
        prologue = {id(op) for op in self.kernel.body.ops[:self.split]}
        self.recompute: set[int] = set()      # prologue tiles the groups compute again from their expression
        for op in self.kernel.walk():
            inits = op.operand_group("inits") if id(op) in self.loops else []
            for g in self.runs_in.get(id(op), ()):
                for k, v in enumerate(op.operands):
                    if v is None or (op.defn is ops.YIELD and id(op.parent.parent_op) in self.loops
                                     and not self.carries(op.parent.parent_op, k, g)):
                        continue        # a group's copy of the loop writes only the values it carries
                    if any(v is init and not self.carries(op, j, g) for j, init in enumerate(inits)):
                        continue        # ... and starts only those
                    self._readable(v, g, op, prologue)

    def _readable(self, v: Value, g: int, reader: Op, prologue: set[int]):
        d = v.defining_op
        if d is None or v.type.is_buffer or (v.type.is_pointer and d.defn is not ops.ADDPTR):
            return
        where = None
        if id(d) in prologue:
            where = "before the warp groups start"
        elif g not in self.runs_in.get(id(d), ()):
            where = f"in warp group {self._group(d)}"
        if where is None:
            return
        if v.type.is_scalar and id(d) in prologue:
            return
        if d.defn in _RECOMPUTABLE:
            if id(d) in prologue:
                self.recompute.add(v.id)
            for o in d.operands:
                if o is not None:
                    self._readable(o, g, reader, prologue)
            return
        raise WarpGroupError(f"a tile computed {where} ('{d.name}', line {d.loc.line}) and read in warp group {g}",
                             reader, "registers belong to one warp group: hand the tile over in a tle.gpu "
                                     "buffer (tle.gpu.local_store, then tle.gpu.local_load in the reader)")

    # -- hand-offs -----------------------------------------------------------------------------------------
    def _find_hand_offs(self):
        for blk in [self.kernel.body] + [loop.body for loop in self.loops.values()]:
            level_ops = self.section if blk is self.kernel.body else blk.ops
            offs = self._hand_offs_at(blk, level_ops)
            if offs:
                self.hand_offs[id(blk)] = offs

    def _hand_offs_at(self, blk: Block, level_ops: list[Op]) -> list[HandOff]:
        accesses: dict[int, dict[int, list[tuple[int, bool]]]] = {}    # alloc id -> group -> [(position, write)]
        allocs: dict[int, Value] = {}
        for pos, top in enumerate(level_ops):
            if top.defn is ops.FOR and id(top) in self.loops:
                # a nested group loop's hand-offs are its own; a buffer written only out here and read in the loop
                # is handed over here, before the loop (its readers wait once, at the loop)
                for o in nested(top):
                    for alloc, write in self._buffer_accesses(o):
                        if not write and self._written_only_outside_loops(alloc):
                            allocs[alloc.id] = alloc
                            for g in self.runs_in.get(id(o), ()):
                                accesses.setdefault(alloc.id, {}).setdefault(g, []).append((pos, False))
                continue
            for o in [top, *nested(top)]:
                for alloc, write in self._buffer_accesses(o):
                    allocs[alloc.id] = alloc
                    for g in self.runs_in.get(id(o), ()):
                        accesses.setdefault(alloc.id, {}).setdefault(g, []).append((pos, write))
                        if not write:
                            for last in self._in_place_uses(o, blk, level_ops):
                                accesses[alloc.id][g].append((last, False))
        out = []
        for aid, per_group in accesses.items():
            writers = sorted(g for g, acc in per_group.items() if any(w for _, w in acc))
            readers = tuple(sorted(g for g in per_group if g not in writers))
            if len(per_group) < 2:
                continue
            alloc = allocs[aid]
            if not writers and blk is not self.kernel.body and self._written_only_outside_loops(alloc):
                continue            # written before the loop: handed over at the outer level
            if len(writers) != 1:
                raise WarpGroupError(f"tle.gpu buffer '{alloc.name or 'buf'}' written by warp groups {writers}",
                                     alloc.defining_op, "one warp group writes a buffer the others read")
            w = writers[0]
            versions = 1
            if blk is not self.kernel.body and alloc.defining_op.parent is blk:
                versions = max(1, blk.parent_op.attrs.get("num_stages") or 2)
            h = HandOff(alloc, blk, w, readers, versions)
            for g, acc in per_group.items():
                h.first[g] = min(p for p, _ in acc)
                h.last[g] = max(p for p, wr in acc if wr or g != w)
            for r in readers:
                if h.first[r] < min(p for p, wr in per_group[w] if wr):
                    raise WarpGroupError(f"tle.gpu buffer '{alloc.name or 'buf'}' read by warp group {r} before "
                                         f"warp group {w} writes it", level_ops[h.first[r]],
                                         "in each step the readers see what the writer wrote in that step: write "
                                         "it first in program order")
            if blk is self.kernel.body and any(self._inside_loop_write(alloc)):
                raise WarpGroupError(f"tle.gpu buffer '{alloc.name or 'buf'}' handed over both inside a loop and "
                                     f"after it", alloc.defining_op, "use a separate buffer after the loop")
            out.append(h)
        return out

    # -- turns ---------------------------------------------------------------------------------------------
    def _find_turns(self) -> dict[int, Turns]:
        blocks: dict[int, dict[int, dict[int, list[int]]]] = {}   # body -> group -> turn number -> positions
        bodies: dict[int, Block] = {}
        for op in self.kernel.walk():
            number = op.attrs.get("turn")
            if number is None:
                continue
            top = op
            while top.parent is not None and top.parent.parent_op is not None \
                    and id(top.parent.parent_op) not in self.loops:
                top = top.parent.parent_op
            loop = top.parent.parent_op if top.parent is not None else None
            if loop is None or id(loop) not in self.loops:
                raise WarpGroupError("tle.gpu.turn", op, "a turn block goes in a loop that holds several warp "
                                     "groups (the groups take turns once a step)")
            body = loop.body
            bodies[id(body)] = body
            per_turn = blocks.setdefault(id(body), {}).setdefault(self._group(op), {})
            per_turn.setdefault(number, []).append(body.ops.index(top))
        out = {}
        for bid, per_group in blocks.items():
            spans = {g: sorted((min(p), max(p)) for p in per_turn.values()) for g, per_turn in per_group.items()}
            counts = {g: len(sp) for g, sp in spans.items()}
            first_op = bodies[bid].ops[min(p for sp in spans.values() for p, _ in sp)]
            if len(spans) < 2:
                raise WarpGroupError("tle.gpu.turn", first_op, f"only warp group {next(iter(spans))} has turn "
                                     "blocks in this loop: turns are taken between two groups or more")
            if len(set(counts.values())) != 1:
                raise WarpGroupError("tle.gpu.turn", first_op, f"the groups have different numbers of turn blocks "
                                     f"in this loop ({counts}): each takes the same turns each step")
            out[bid] = Turns(spans)
        return out

    def versions_of(self, alloc: Value, step: str | None) -> tuple[int, str | None]:
        """(versions, the index of this step's) of a buffer allocated inside a loop holding several groups, where
        it is handed from one group to others: a version per pipeline stage, step i using version i % stages."""
        blk = alloc.defining_op.parent
        h = next((h for h in self.hand_offs.get(id(blk), ()) if h.alloc is alloc), None)
        if h is None or h.versions == 1 or step is None:
            return 1, None
        return h.versions, f"{step} % {h.versions}"

    @staticmethod
    def writes(h: HandOff) -> list[Op]:
        """The ops at `h`'s level (or nested in them) that write its buffer."""
        return [o for o in h.level.walk() if o.has(Trait.BUFFER_WRITE) and root(o.results[0]) is h.alloc]

    def hand_off_written_by(self, op: Op) -> HandOff | None:
        """The loop-level hand-off whose buffer `op` writes, if any."""
        alloc = root(op.results[0])
        blk = op.parent
        while blk is not None and blk.parent_op is not None and id(blk) not in self.hand_offs:
            blk = blk.parent_op.parent
        return next((h for h in self.hand_offs.get(id(blk), ()) if h.alloc is alloc), None) if blk else None

    def next_in_chain(self, op: Op) -> Op | None:
        """The product that accumulates onto `op`'s result, where `op` is a product whose result nothing else
        reads and that product follows it in the same block: a warp group issues `op` asynchronously, and its
        operands are read until the chain's last product waits for it."""
        if op.defn is not ops.DOT:
            return None
        us = self.users.get(op.result.id, [])
        if len(us) != 1 or us[0].defn is not ops.DOT or us[0].operand("acc") is not op.result \
                or us[0].parent is not op.parent or us[0].operand("a") is op.result or us[0].operand("b") is op.result:
            return None
        return us[0]

    def in_chain(self, op: Op) -> bool:
        """Is `op` a product of a chain (reductions.py issues those), as its head or a later link?"""
        acc = op.operand("acc").defining_op if op.defn is ops.DOT else None
        return self.next_in_chain(op) is not None or (acc is not None and self.next_in_chain(acc) is op)

    def waits(self, blk: Block, group: int) -> dict[int, Wait]:
        """position in `blk` -> the wait for deferred products `group` makes before the op there."""
        return waits_in(blk, group, self.deferred, self.runs)

    def reads_operands_until(self, op: Op, level_ops: list[Op]) -> int:
        """The position (in `level_ops`, which holds `op`) up to which `op` reads its operands: its own, or for a
        deferred product the op its group waits for it before (the release of a buffer it reads follows)."""
        return self.deferred.get(id(op), level_ops.index(op))

    def chain_end(self, op: Op) -> Op:
        while (nxt := self.next_in_chain(op)) is not None:
            op = nxt
        return op

    def _written_only_outside_loops(self, alloc: Value) -> bool:
        """Is `alloc` allocated outside every loop holding groups and written in none of them?"""
        return alloc.id not in self._loop_buffers

    def _inside_loop_write(self, alloc: Value):
        for loop in self.loops.values():
            for o in nested(loop):
                if o.has(Trait.BUFFER_WRITE) and root(o.results[0]) is alloc:
                    yield o

    @staticmethod
    def _buffer_accesses(o: Op):
        """(allocation, is_write) for each buffer op `o` accesses itself."""
        if o.has(Trait.BUFFER_WRITE):
            yield root(o.results[0]), True
        elif o.defn in (ops.LOCAL_LOAD, ops.COPY_OUT):
            yield root(o.operand("buf")), False

    def _in_place_uses(self, o: Op, blk: Block, level_ops: list[Op]):
        """Positions (in `level_ops`) of the ops reading a local_load's tile where it may be read in place: its
        users, through element-wise ops written inline at their use."""
        if o.defn is not ops.LOCAL_LOAD:
            return
        pending, seen = [o.result], set()
        while pending:
            v = pending.pop()
            for u in self.users.get(v.id, []):
                if id(u) in seen:
                    continue
                seen.add(id(u))
                top = self.chain_end(u)      # an asynchronous product reads its operands until the chain's end
                while top.parent is not blk and top.parent is not None and top.parent.parent_op is not None:
                    top = top.parent.parent_op
                if top in level_ops:
                    yield self.reads_operands_until(top, level_ops)
                if u.defn in _RECOMPUTABLE and u.results:
                    pending.append(u.results[0])
