"""Warp-specialized blocks: roles (contiguous thread ranges, each running its own branch of an
`if tx < c: ... elif ...: ... else: ...` chain) and the mbarriers they synchronise through.

- An mbarrier expects a number of arrivals per phase (`T.alloc_barrier(arrive_count=...)`). An arrive by
  a role (or the block, or the active threads of a thread-level `if`) adds its thread count; the phase
  completes when the count is reached. `T.barrier_wait(b, parity)` returns once the parity of the number
  of completed phases differs from `parity` (PTX's mbarrier.try_wait.parity).
- Roles run as cooperative tasks, one at a time: the scheduler runs the first runnable role in its order
  until it waits on a phase that has not completed (or finishes), then picks again. Each role runs in a
  Python thread that holds the baton only while it runs, so the compiled closures need no rewriting; the
  order is fixed, the run deterministic. ROLE_ORDERS: "lowest_first" takes the roles in thread order,
  "highest_first" in reverse (usually: the producer first), so a missing wait shows under one of them.
  ROLE_SWITCHES: with "wait" a role runs until it blocks; with "arrive" the scheduler also picks again
  whenever an arrive completes a phase, so a role that releases a buffer before its last read of it
  sees the buffer overwritten by the role it released it to.
- When every unfinished role waits on a phase nothing can complete any more, the block deadlocks: an
  error naming what each role waits on.
- A role's fragments and thread-local variables are its threads' registers: each role starts from the
  block's values and writes its own copy. After the roles, a fragment one role wrote holds that role's
  values, one that several roles wrote is unwritten (no thread holds the whole tile); a variable holds
  each role's value on the role's threads. Shared and global memory are common to all roles.
"""
from __future__ import annotations

import copy
import threading

import torch

from .errors import BarrierOverflow, Deadlock, ProductNeverWaited, Unsupported
from .memory import FRAGMENT, VAR, Memory, Storage

LOWEST_FIRST, HIGHEST_FIRST = "lowest_first", "highest_first"
ROLE_ORDERS = (LOWEST_FIRST, HIGHEST_FIRST)
AT_WAIT, AT_ARRIVE = "wait", "arrive"
ROLE_SWITCHES = (AT_WAIT, AT_ARRIVE)


class Barrier:
    """One mbarrier of a block."""

    def __init__(self, name: str, expected: int):
        self.name, self.expected = name, expected
        self.pending = 0            # arrivals in the current phase
        self.phases = 0             # phases completed

    def arrive(self, count: int) -> bool:
        """Add `count` arrivals; whether they complete the phase."""
        if self.pending + count > self.expected:
            raise BarrierOverflow(f"{count} threads arrive on {self.name}, which expects {self.expected} arrivals "
                                  f"a phase and has {self.pending} in this one")
        self.pending += count
        if self.pending < self.expected:
            return False
        self.pending = 0
        self.phases += 1
        return True

    def passes(self, parity: int) -> bool:
        return (self.phases & 1) != parity

    def state(self) -> str:
        done = f"{self.phases} phase{'s' if self.phases != 1 else ''} completed"
        return f"{done}, {self.pending} of {self.expected} arrivals in the current one"


def new_barriers(name: str, counts: list[int]) -> list[Barrier]:
    """The mbarriers of one `T.alloc_barrier` (a fresh set for every block)."""
    return [Barrier(f"{name}[{i}]", c) for i, c in enumerate(counts)]


def arrive(fr, barrier: Barrier, count: int):
    """`T.barrier_arrive` by `count` threads; with the "arrive" switch, a completed phase lets the scheduler
    choose again, since it may have made a role it prefers runnable."""
    if barrier.arrive(count) and fr.role is not None and fr.role.scheduler.switch == AT_ARRIVE:
        fr.role.hand_over()


def wait(fr, barrier: Barrier, parity: int):
    """`T.barrier_wait`: return once `barrier` passes `parity`, letting the other roles run meanwhile."""
    if barrier.passes(parity):
        return
    if fr.role is None:             # the whole block waits: nothing else runs that could arrive
        raise Deadlock(f"all {fr.threads} threads of the block wait on {barrier.name} for parity {parity} "
                       f"({barrier.state()}), and no other thread runs to complete it")
    fr.role.block_on(barrier, parity)


# -- roles -------------------------------------------------------------------------------------------------
class _Cancelled(BaseException):
    """Unwinds a role the scheduler stops (another role failed, or the block deadlocked)."""


class Role:
    """One branch of a role split, running on threads [lo, hi) in a thread of its own."""

    def __init__(self, lo: int, hi: int, body, scheduler: "Scheduler"):
        self.lo, self.hi, self.body, self.scheduler = lo, hi, body, scheduler
        # torch's grad mode is per thread: the role's thread runs under the caller's (a custom op's forward
        # runs without grad; a new thread would start with it on, and record a graph on the op's inputs)
        self.grad_enabled = torch.is_grad_enabled()
        self.name = f"threads [{lo}, {hi})"
        self.frame = None
        self.waiting = None         # (barrier, parity) while blocked
        self.finished = False
        self.cancelled = False
        self.error: BaseException | None = None
        self._go = threading.Semaphore(0)
        self._thread: threading.Thread | None = None

    def runnable(self) -> bool:
        return not self.finished and (self.waiting is None or self.waiting[0].passes(self.waiting[1]))

    def block_on(self, barrier: Barrier, parity: int):
        """In the role's thread: wait until the phase passes, other roles running meanwhile."""
        while not barrier.passes(parity):
            self.waiting = (barrier, parity)
            self.hand_over()
        self.waiting = None

    def hand_over(self):
        """In the role's thread: give the baton back until the scheduler resumes the role."""
        self.scheduler.baton.release()
        self._go.acquire()
        if self.cancelled:
            raise _Cancelled()

    def resume(self):
        """In the scheduler's thread: let the role run; it hands the baton back when it blocks or ends."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name=f"tle-role-{self.lo}-{self.hi}", daemon=True)
            self._thread.start()
        else:
            self._go.release()
        self.scheduler.baton.acquire()

    def stop(self):
        """End the role's thread: a role that is blocked unwinds (one never started has no thread)."""
        if self._thread is None:
            return
        if not self.finished:
            self.cancelled = True
            self._go.release()
            self.scheduler.baton.acquire()
        self._thread.join()

    def _main(self):
        try:
            with torch.set_grad_enabled(self.grad_enabled):
                self.body(self.frame)
            if self.frame.products_in_flight:
                raise ProductNeverWaited(f"{len(self.frame.products_in_flight)} product(s) issued with "
                                         f"T.wgmma_gemm and never waited for", self.name)
        except _Cancelled:
            pass
        except BaseException as e:      # handed to the caller's thread
            self.error = e
        finally:
            self.finished = True
            self.scheduler.baton.release()

    def describe(self) -> str:
        if self.finished:
            return f"{self.name} finished"
        barrier, parity = self.waiting
        return f"{self.name} wait on {barrier.name} for parity {parity} ({barrier.state()})"


class Scheduler:
    """Runs a split's roles one at a time, in a fixed order of preference, each until it blocks or ends."""

    def __init__(self, order: str, switch: str):
        self.order, self.switch = order, switch
        self.baton = threading.Semaphore(0)     # released by the running role when it stops running

    def run(self, roles: list[Role]):
        preference = roles if self.order == LOWEST_FIRST else roles[::-1]
        try:
            while True:
                unfinished = [r for r in preference if not r.finished]
                if not unfinished:
                    return
                role = next((r for r in unfinished if r.runnable()), None)
                if role is None:
                    raise Deadlock("every unfinished role waits on an mbarrier phase that nothing can complete: "
                                   + "; ".join(r.describe() for r in roles))
                role.resume()
                if role.error is not None:
                    raise role.error
        finally:
            for r in roles:
                r.stop()


def split(branches: list[tuple[int, int, object]]):
    """A closure running `branches` ((lo, hi, compiled body) each) as the roles of the block."""
    def run(fr):
        if fr.mask is not None and fr.mask.dim():
            raise Unsupported("a split of the block into roles under a thread-dependent condition")
        if fr.role is not None:
            raise Unsupported("a split into roles inside a role")
        scheduler = Scheduler(fr.role_order, fr.role_switch)
        roles = [Role(lo, hi, body, scheduler) for lo, hi, body in branches]
        kept = _registers(fr.memory)
        for r in roles:
            r.frame = _role_frame(fr, r, kept)
        scheduler.run(roles)
        _join_registers(fr, roles, kept)
    return run


def _registers(memory: Memory) -> dict[int, Storage]:
    return {k: st for k, st in memory.storages.items() if st.scope in (FRAGMENT, VAR)}


def _role_frame(fr, role: Role, registers: dict[int, Storage]):
    """The frame a role runs in: the role's threads, its own registers, everything else the block's."""
    sub = copy.copy(fr)
    sub.role, sub.threads, sub.thread_range = role, role.hi - role.lo, (role.lo, role.hi)
    sub.env = {k: _role_value(v, fr.threads, role) for k, v in fr.env.items()}
    sub.block_index = dict(fr.block_index)
    sub.products_in_flight = []         # a warp group waits for its own products
    sub.memory = Memory(fr.memory.report)
    sub.memory.storages = dict(fr.memory.storages)
    for k, st in registers.items():
        sub.memory.storages[k] = _role_rows(st, fr.threads, role) if st.per_thread else st.clone()
    return sub


def _role_value(v, threads: int, role: Role):
    """A variable's value on the role's threads (one per thread where the block's threads differ)."""
    if not isinstance(v, torch.Tensor) or v.dim() == 0:
        return v
    if v.shape != (threads,):
        raise Unsupported(f"a value of shape {tuple(v.shape)} where the block splits into roles")
    return v[role.lo:role.hi]


def _role_rows(st: Storage, threads: int, role: Role) -> Storage:
    """A per-thread variable's rows of the role's threads: a view, so its writes land in the block's rows."""
    rows = Storage(st.name, st.data.view(threads, -1)[role.lo:role.hi].reshape(-1), st.dtype, st.scope)
    rows.written = st.written.view(threads, -1)[role.lo:role.hi].reshape(-1)
    rows.per_thread = True
    return rows


def _join_registers(fr, roles: list[Role], kept: dict[int, Storage]):
    """After the roles: the block's registers as the roles left them (see the module docstring)."""
    for k, st in kept.items():
        if st.per_thread:
            continue                    # the roles wrote the block's rows in place
        copies = [r.frame.memory.storages[k] for r in roles]
        changed = [(r, c) for r, c in zip(roles, copies) if not _same_contents(c, st)]
        if not changed:
            continue
        if st.scope == FRAGMENT:
            if len(changed) == 1:
                st.assign(changed[0][1])
            else:
                st.written = torch.zeros_like(st.written)
            continue
        _merge_variable(st, changed, fr.threads)


def _merge_variable(st: Storage, changed, threads: int):
    """A variable one value before the split: one row per thread, each role's value on its threads."""
    data = st.data.repeat(threads).view(threads, -1)
    written = st.written.repeat(threads).view(threads, -1)
    for role, c in changed:
        n = role.hi - role.lo
        data[role.lo:role.hi] = c.data.view(n if c.per_thread else 1, -1)
        written[role.lo:role.hi] = c.written.view(n if c.per_thread else 1, -1)
    if bool((data == data[0]).all()) and bool((written == written[0]).all()):
        st.data, st.written = data[0].clone(), written[0].clone()       # the threads agree again
    else:
        st.data, st.written, st.per_thread = data.reshape(-1), written.reshape(-1), True


def _same_contents(a: Storage, b: Storage) -> bool:
    if a.per_thread != b.per_thread or a.data.shape != b.data.shape or not torch.equal(a.written, b.written):
        return False
    return torch.equal(a.data.view(torch.uint8), b.data.view(torch.uint8))     # bits: a NaN equals itself
