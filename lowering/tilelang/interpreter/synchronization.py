"""How the interpreter runs roles and their mbarriers (a mixin of Program): the role chain on the thread
binding, barrier waits and arrives, and cp.async copies (checked for alignment)."""
from __future__ import annotations


import torch

from . import dtypes, roles
from .errors import Misaligned, OutOfBounds, Unsupported
from .expressions import key
from .frame import Frame, const_int
from .memory import GLOBAL, BufferInfo

BARRIER_WAIT = "tl.mbarrier_wait_parity"
BARRIER_ARRIVE = ("tirx.ptx_arrive_barrier", "tir.ptx_arrive_barrier",
                   # arrives once the thread's cp.async copies land: here they land when issued
                   "tl.ptx_cp_async_barrier_noinc")
BARRIER_SCOPE = "shared.barrier"
# the threads [lo, hi) of `tx <op> c` in a block of n threads along x
_THREAD_RANGES = {"LT": lambda c, n: (0, c), "LE": lambda c, n: (0, c + 1), "GT": lambda c, n: (c + 1, n),
                  "GE": lambda c, n: (c, n), "EQ": lambda c, n: (c, c + 1)}
# `c <op> tx` is `tx <mirrored op> c`
_MIRRORED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ"}


class Synchronization:
    """Program's roles, mbarriers and cp.async (see the module doc)."""

    def _role_split(self, node):
        """The closure running an if/elif/else chain on the thread index as roles, or None where the chain
        is thread-level code (see the module docstring)."""
        if self._nest is not None or self._in_role:
            return None
        chain = self._role_chain(node)
        if chain is None or not any(_role_work(branch) for _, _, branch in chain):
            return None
        if self.threads[1] * self.threads[2] != 1:
            raise Unsupported("a split into roles in a block with more than one thread axis")
        self._in_role = True
        try:
            branches = [(lo, hi, self.stmt(branch)) for lo, hi, branch in chain]
        finally:
            self._in_role = False
        return roles.split(branches)

    def _role_chain(self, node):
        """[(lo, hi, branch)]: the threads each branch of an if/elif/else chain on the thread index runs on,
        or None where the first condition is not a thread range or the threads left are not a range."""
        lo, hi = 0, self.threads[0]             # the threads no branch has taken yet
        chain = []
        while type(node).__name__ == "IfThenElse":
            taken = self._thread_range(node.condition)
            if taken is None:
                if not chain:
                    return None
                break                           # an if on something else: the last branch's code
            a, b = max(taken[0], lo), min(taken[1], hi)
            if a < b:
                if a == lo:
                    lo = b
                elif b == hi:
                    hi = a
                else:
                    return None
                chain.append((a, b, node.then_case))
            node = node.else_case
        if node is not None and lo < hi:
            chain.append((lo, hi, node))
        return chain

    def _thread_range(self, cond):
        """The threads [lo, hi) a condition comparing the thread index with constants holds on, or None."""
        kind = type(cond).__name__
        if kind == "And":
            a, b = self._thread_range(cond.a), self._thread_range(cond.b)
            return None if a is None or b is None else (max(a[0], b[0]), min(a[1], b[1]))
        if kind not in _THREAD_RANGES:
            return None
        if self._is_thread_index(cond.a) and type(cond.b).__name__ == "IntImm":
            return _THREAD_RANGES[kind](int(cond.b.value), self.threads[0])
        if self._is_thread_index(cond.b) and type(cond.a).__name__ == "IntImm":
            return _THREAD_RANGES[_MIRRORED[kind]](int(cond.a.value), self.threads[0])
        return None

    def _is_thread_index(self, node) -> bool:
        return is_thread_index(node) or (type(node).__name__ == "Var" and key(node) in self._thread_vars)

    def _barrier(self, ref):
        """A closure giving the mbarrier `ref` (`buf[i]` of a T.alloc_barrier buffer) names."""
        if type(ref).__name__ != "BufferLoad" or ref.buffer.scope() != BARRIER_SCOPE or len(ref.indices) != 1:
            raise Unsupported(f"the mbarrier operand {ref}")
        data, name, index = key(ref.buffer.data), ref.buffer.name, self.expr(ref.indices[0])

        def barrier(fr):
            i = index(fr)
            if i.dim():
                raise Unsupported(f"an index into the mbarriers {name} that differs between threads")
            barriers = fr.barriers.get(data)
            if barriers is None:
                raise Unsupported(f"the mbarriers {name} outside the block that allocates them")
            if not 0 <= int(i) < len(barriers):
                raise OutOfBounds(f"mbarrier {name}[{int(i)}] outside its {len(barriers)} mbarriers")
            return barriers[int(i)]
        return barrier

    def _barrier_wait(self, call):
        """T.barrier_wait(b, parity) (tl.mbarrier_wait_parity): the threads wait together, so they must agree."""
        barrier, parity = self._barrier(call.args[0]), self.expr(call.args[1])

        def wait(fr):
            if fr.in_parallel or (fr.mask is not None and fr.mask.dim()):
                raise Unsupported("T.barrier_wait inside T.Parallel or under a thread-dependent condition")
            p = parity(fr)
            if p.dim():
                raise Unsupported("a T.barrier_wait parity that differs between threads")
            roles.wait(fr, barrier(fr), int(p) & 1)     # PTX reads the parity's lowest bit
        return wait

    def _cp_async(self, call):
        """T.ptx_cp_async(dst, src, n[, predicate]): n consecutive elements from src to dst (shared), per thread;
        zeros where the predicate is false. The copy lands at once here: a reader that waits on the barrier
        the copies arrive on sees it, as on the GPU."""
        if len(call.args) not in (3, 4) or any(a.op.name != "tl.access_ptr" for a in call.args[:2]):
            raise Unsupported(f"{call.op.name} with operands {list(call.args)}")
        n = const_int(call.args[2], "a cp.async element count")
        ends = []
        for ptr in call.args[:2]:
            load = ptr.args[0]
            info = self.buffer(load.buffer)
            ends.append((info, [self.expr(i) for i in load.indices]))
        (dst, dst_idx), (src, src_idx) = ends
        pred = self.expr(call.args[3]) if len(call.args) == 4 else None
        width = n * dtypes.bits(src.dtype) // 8      # TileLang issues cp.async of n elements of the source's dtype

        def copy(fr):
            if fr.in_parallel:
                raise Unsupported("T.ptx_cp_async inside T.Parallel")
            d = [i(fr) for i in dst_idx]
            s_ = [i(fr) for i in src_idx]
            # both addresses are the instruction's operands, read or not: a false predicate only zero-fills
            _check_aligned(fr, dst, d, width, "cp.async")
            _check_aligned(fr, src, s_, width, "cp.async")
            keep = pred(fr) if pred is not None else None
            for k in range(n):      # the elements follow each other along the last axis
                d_k, s_k = d[:-1] + [d[-1] + k], s_[:-1] + [s_[-1] + k]
                if keep is None:
                    value = fr.memory.load(src, s_k, fr)
                else:
                    saved = fr.mask
                    fr.mask = keep if saved is None else keep & saved
                    try:
                        value = fr.memory.load(src, s_k, fr)
                    finally:
                        fr.mask = saved
                    value = torch.where(keep, value, torch.zeros((), dtype=value.dtype))
                fr.memory.store(dst, d_k, value, fr)
        return copy

    def _barrier_arrive(self, call):
        """T.barrier_arrive(b) (ptx_arrive_barrier): one arrival per active thread."""
        if len(call.args) != 1:
            raise Unsupported(f"{call.op.name} with {len(call.args)} operands")
        barrier = self._barrier(call.args[0])

        def arrive(fr):
            if fr.in_parallel:
                raise Unsupported("T.barrier_arrive inside T.Parallel")
            count = fr.threads if fr.mask is None else int(fr.mask.expand(fr.threads).sum())
            if count:
                roles.arrive(fr, barrier(fr), count)
        return arrive


def _check_aligned(fr: Frame, info: BufferInfo, idx, width: int, what: str):
    """A `width`-byte access at `info[idx]` must start at a multiple of `width` bytes in every active thread.
    A global tensor's address is the CPU tensor's own (a misaligned view is caught); shared buffers start
    16-byte aligned (TileLang's shared-memory planner aligns each buffer to 16 bytes at least)."""
    st = fr.memory.storage(info)
    size = dtypes.bits(info.dtype) // 8
    flat, _ = info.address(idx)
    addr = (st.data.data_ptr() if st.scope == GLOBAL else 0) + flat * size
    bad = addr % width != 0
    if fr.mask is not None:
        bad = bad & fr.mask
    if not bad.any():
        return
    k = int(torch.nonzero(bad.reshape(-1))[0]) if bad.dim() else None

    def at(v):
        return int(v.expand(bad.shape).reshape(-1)[k]) if k is not None else int(v)
    thread = "" if k is None else f" in thread {k + (fr.thread_range[0] if fr.thread_range else 0)}"
    raise Misaligned(f"{what} of {width} bytes at {info.name}[{', '.join(str(at(i)) for i in idx)}]{thread}: address "
                     f"{hex(at(addr))} (byte {at(flat) * size} of {st.scope} {st.name}) is not a multiple of {width}")


def is_thread_index(node) -> bool:
    """`T.launch_thread_idx(0)`: what T.get_thread_binding() reads."""
    if type(node).__name__ != "Call" or node.op.name.split(".", 1)[-1] != "launch_thread_idx":
        return False
    return type(node.args[0]).__name__ == "IntImm" and int(node.args[0].value) == 0


def _role_work(node) -> bool:
    """Whether `node` holds what makes a thread-range `if` a split into roles: a tile operator (whole
    tiles, on the branch's threads) or an mbarrier operation."""
    kind = type(node).__name__
    if kind == "Evaluate":
        v = node.value
        if type(v).__name__ != "Call":
            return False
        name = v.op.name
        return name.startswith("tl.tileop.") or name == BARRIER_WAIT or name in BARRIER_ARRIVE
    if kind == "SeqStmt":
        return any(_role_work(s) for s in node.seq)
    children = (getattr(node, a, None) for a in ("body", "then_case", "else_case", "block"))
    return any(_role_work(c) for c in children if c is not None)


def barrier_counts(block) -> dict[int, tuple[str, list[int]]]:
    """The mbarriers a block allocates (T.alloc_barrier): allocation -> (name, expected arrivals of each)."""
    init = block.annotations.get("barrier_init") if block.annotations else None
    counts = {key(v): [const_int(c, "an mbarrier arrive count") for c in cs] for v, cs in (init or {}).items()}
    out = {}
    for b in block.alloc_buffers:
        if b.scope() != BARRIER_SCOPE:
            continue
        n = const_int(b.shape[0], f"the number of mbarriers in {b.name}")
        if len(counts.get(key(b.data), ())) != n:
            raise Unsupported(f"mbarriers {b.name} without an arrive count for each")
        out[key(b.data)] = (b.name, counts[key(b.data)])
    return out
