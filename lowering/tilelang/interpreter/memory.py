"""Memory as the interpreter keeps it: one flat tensor per allocation, with what it takes to report
accesses that have no defined result.

- Global tensors are the caller's (flat views, so writes land in them). Each remembers, per element,
  which block stored it and whether an atomic touched it, so that two blocks storing different values
  to one element, a read of what another block stored, and a read of an atomically updated element are
  races, not an accident of the order the interpreter runs blocks in.
- Shared and fragment buffers are logical tiles of the block (a fragment's spread over threads is
  TileLang's business). They start unwritten: reading an element nothing wrote is an error.
- `local.var` slots (T.alloc_var) belong to each thread: they hold one value while all threads agree
  and one per thread once thread-level code makes them differ.

Out of bounds: an index outside a buffer's shape is an error, except where TileLang itself defines the
result: T.copy predicates the global side of a copy (reads give zero, writes are skipped), and TileLang's
safe-memory pass predicates reads of global tensors in the same way; those reads are zero and counted
(`Report.predicated_reads`), or errors with `strict_reads`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from . import dtypes
from .errors import OutOfBounds, Race, UninitializedRead, Unsupported

GLOBAL, SHARED, FRAGMENT, VAR = "global", "shared", "fragment", "var"
_SCOPES = {"global": GLOBAL, "shared": SHARED, "shared.dyn": SHARED, "local.fragment": FRAGMENT,
           "local.var": VAR, "local": VAR}
ATOMIC = -2          # writer mark of an element an atomic updated


def scope_of(tir_scope: str) -> str:
    try:
        return _SCOPES[tir_scope]
    except KeyError:
        raise Unsupported(f"buffers in scope '{tir_scope}'") from None


@dataclass
class Report:
    """What a run did that a test may want to look at."""
    blocks: int = 0
    predicated_reads: dict = field(default_factory=dict)   # global tensor -> reads outside it, zero-filled
    strict_reads: bool = False


class Storage:
    """One allocation: a flat tensor of its elements."""

    def __init__(self, name: str, data: torch.Tensor, dtype: str, scope: str):
        self.name, self.data, self.dtype, self.scope = name, data, dtype, scope
        n = data.numel()
        self.written = None if scope == GLOBAL else torch.zeros(n, dtype=torch.bool)
        self.writer = None          # global: int32 per element, -1 untouched (allocated on the first write)
        self.per_thread = False     # var: one row of values per thread

    @classmethod
    def local(cls, name: str, shape, dtype: str, scope: str) -> "Storage":
        n = math.prod(shape)
        return cls(name, torch.zeros(n, dtype=dtypes.storage(dtype)), dtype, scope)

    def clone(self) -> "Storage":
        s = Storage(self.name, self.data.clone(), self.dtype, self.scope)
        s.written = None if self.written is None else self.written.clone()
        s.per_thread = self.per_thread
        return s

    def assign(self, other: "Storage"):
        """Take `other`'s contents (a pipeline version handing its buffer back)."""
        self.data, self.written, self.per_thread = other.data, other.written, other.per_thread


@dataclass(frozen=True)
class BufferInfo:
    """A TIR buffer's static description: which allocation it addresses and how."""
    name: str
    data: int                   # handle of the buffer's data variable (the allocation)
    shape: tuple
    strides: tuple
    offset: int
    dtype: str
    scope: str

    def address(self, idx: list[torch.Tensor]):
        """(flat element offsets, in-bounds mask or None when all are in bounds)."""
        if len(idx) != len(self.shape):
            raise Unsupported(f"indexing {self.name} (rank {len(self.shape)}) with {len(idx)} indices")
        flat, ok = None, None
        for i, extent, stride in zip(idx, self.shape, self.strides):
            i = i.to(torch.int64)
            inside = (i >= 0) & (i < extent)
            ok = inside if ok is None else ok & inside
            term = i * stride if stride != 1 else i
            flat = term if flat is None else flat + term
        if flat is None:
            flat, ok = torch.tensor(0), torch.tensor(True)
        if self.offset:
            flat = flat + self.offset
        return flat, ok


def _lanes(*shapes) -> tuple:
    """The broadcast of `shapes` (numpy's rules)."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, n in enumerate(s, rank - len(s)):
            if n != 1:
                if out[i] not in (1, n):
                    raise Unsupported(f"lanes of shapes {list(map(tuple, shapes))} that do not broadcast")
                out[i] = n
    return tuple(out)


def _index_text(info: BufferInfo, idx, bad) -> str:
    """`name[i, j]` of the first lane that `bad` marks."""
    shape = bad.shape
    first = [int(i.expand(shape)[bad][0]) for i in idx]
    return f"{info.name}[{', '.join(map(str, first))}]"


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    eq = a == b
    if a.is_floating_point():
        eq = eq | (torch.isnan(a) & torch.isnan(b))
    return eq


class Memory:
    """The allocations of one launch: global tensors, and the current block's buffers."""

    def __init__(self, report: Report):
        self.storages: dict[int, Storage] = {}
        self.report = report

    def storage(self, info: BufferInfo) -> Storage:
        return self.storages[info.data]

    # -- reads ------------------------------------------------------------------------------------------
    def load(self, info: BufferInfo, idx, fr, predicated: bool = False) -> torch.Tensor:
        """Elements at `idx` in the lanes `fr.mask` leaves active. `predicated`: a T.copy source, where
        TileLang defines an out-of-bounds read of a global tensor as zero."""
        st = self.storages[info.data]
        if st.scope == VAR:
            return self._load_var(st, info, idx, fr)
        flat, ok = info.address(idx)
        act = fr.mask
        partial = not bool(ok.all())
        if partial:
            bad = ~ok if act is None else ~ok & act
            if bad.any():
                if st.scope == GLOBAL and not predicated:
                    _check_not_wrapped(info, idx, act)
                if st.scope != GLOBAL or (self.report.strict_reads and not predicated):
                    raise OutOfBounds(f"read of {_index_text(info, idx, bad)} outside its shape {list(info.shape)}")
                if not predicated:
                    n = int(bad.sum())
                    self.report.predicated_reads[info.name] = self.report.predicated_reads.get(info.name, 0) + n
            flat = torch.where(ok, flat, 0)          # lanes outside read element 0, then zero
            live = ok if act is None else ok & act
        else:
            live = act
        if st.scope == FRAGMENT and fr.thread_varying(flat):
            raise Unsupported(f"thread-level code indexing fragment {info.name} (its layout decides which thread "
                              f"holds an element)")
        value = st.data[flat]
        if st.written is not None:
            missing = ~st.written[flat] if live is None else ~st.written[flat] & live
            if missing.any():
                raise UninitializedRead(f"read of {_index_text(info, idx, missing)} before anything wrote it")
        elif st.writer is not None:
            w = st.writer[flat]
            other = (w != -1) & (w != fr.block)
            if live is not None:
                other = other & live
            if other.any():
                w0 = int(w.expand(other.shape)[other][0])
                what = "an atomic updated" if w0 == ATOMIC else f"block {w0} stored"
                raise Race(f"block {fr.block} reads {_index_text(info, idx, other)}, which {what} in the same launch")
        if fr.log is not None and info.data in fr.log.tracked:
            fr.log.read(info.data, flat, live)
        if partial:
            value = torch.where(ok, value, torch.zeros((), dtype=value.dtype))
        want = dtypes.storage(info.dtype)
        return value if value.dtype == want else value.to(want)

    def _load_var(self, st: Storage, info: BufferInfo, idx, fr):
        flat, ok = info.address(idx)
        if flat.dim() or not bool(ok):
            raise Unsupported(f"a lane-dependent index into the thread-local variable {info.name}")
        if not bool(st.written[flat]):
            raise UninitializedRead(f"read of {info.name} before anything wrote it")
        if st.per_thread:
            if fr.in_parallel:
                raise Unsupported(f"reading the thread-local variable {info.name}, which differs between "
                                  f"threads, inside T.Parallel")
            return st.data.view(fr.threads, -1)[:, flat]
        return st.data[flat]

    # -- writes -----------------------------------------------------------------------------------------
    def store(self, info: BufferInfo, idx, value: torch.Tensor, fr, predicated: bool = False):
        """Write `value` at `idx` in the active lanes. `predicated`: a T.copy destination, where TileLang
        skips elements outside a global tensor."""
        st = self.storages[info.data]
        if st.scope == VAR:
            return self._store_var(st, info, idx, value, fr)
        flat, ok, value, act, shape = _write_lanes(info, idx, value, fr)
        bad = ~ok & act
        if bad.any():
            if not (predicated and st.scope == GLOBAL):
                raise OutOfBounds(f"write of {_index_text(info, idx, bad)} outside its shape {list(info.shape)}")
            act = act & ok
        if st.scope == FRAGMENT and fr.thread_varying(flat):
            raise Unsupported(f"thread-level code indexing fragment {info.name} (its layout decides which thread "
                              f"holds an element)")
        pos, val = flat[act], value[act].to(st.data.dtype)
        lanes = fr.lane_ids(shape)[act] if fr.log is not None else None
        if pos.numel() > 1:
            _check_one_writer(info, pos, val, idx, act)
        if st.scope == GLOBAL:
            self._claim(st, info, pos, val, fr, idx, act)
        else:
            st.written[pos] = True
        if fr.log is not None and info.data in fr.log.tracked:
            fr.log.write(info.data, pos, lanes, val)
        st.data[pos] = val

    def _claim(self, st: Storage, info, pos, val, fr, idx, act):
        """Mark global elements as this block's; another block's element with a different value is a race."""
        if st.writer is None:
            st.writer = torch.full((st.data.numel(),), -1, dtype=torch.int32)
        w = st.writer[pos]
        other = (w != -1) & (w != fr.block)
        if other.any():
            clash = other & ~_same(st.data[pos], val) if (w[other] != ATOMIC).all() else other
            if clash.any():
                w0 = int(w[clash][0])
                what = "an atomic updated it" if w0 == ATOMIC else f"block {w0} stored a different value"
                raise Race(f"block {fr.block} stores {info.name}[{int(pos[clash][0]) - info.offset}] (flat), "
                           f"where {what} in the same launch")
        st.writer[pos] = fr.block

    def _store_var(self, st: Storage, info: BufferInfo, idx, value, fr):
        flat, ok = info.address(idx)
        if flat.dim() or not bool(ok):
            raise Unsupported(f"a lane-dependent index into the thread-local variable {info.name}")
        if fr.in_parallel:
            raise Unsupported(f"writing the thread-local variable {info.name} inside T.Parallel")
        value = value.to(st.data.dtype)
        varying = value.dim() > 0 or (fr.mask is not None and fr.mask.dim() > 0)
        if varying and not st.per_thread:
            # threads start to disagree: one row per thread from here on
            st.data = st.data.repeat(fr.threads)
            st.written = st.written.repeat(fr.threads)
            st.per_thread = True
        if st.per_thread:
            rows = st.data.view(fr.threads, -1)
            done = st.written.view(fr.threads, -1)
            act = torch.ones(fr.threads, dtype=torch.bool) if fr.mask is None else fr.mask.expand(fr.threads)
            rows[:, flat] = torch.where(act, value.expand(fr.threads), rows[:, flat])
            done[:, flat] |= act
        elif fr.mask is None or bool(fr.mask):
            st.data[flat] = value
            st.written[flat] = True

    # -- atomics ----------------------------------------------------------------------------------------
    def atomic(self, info: BufferInfo, idx, value, kind: str, fr, ret: bool = False, cmp=None,
               predicated: bool = False):
        """An atomic update of every active lane's element (`kind`: add, max, min, and, or, xor, xchg, or cas,
        which writes `value` where the element holds `cmp`'s bits). Outside T.Parallel a statement whose lanes all
        agree still runs on every thread of the block: the update happens once per thread.

        `ret` (return_prev=True, or the value of a device function's atomic): returns, per lane, the value the
        element held just before the lane's own update. Lanes run one after another in lane order (row-major
        over the T.Parallel nest, or by thread): one order the GPU may choose. Inactive lanes get 0 (what they
        hold is the program's business). `predicated`: a region's atomic (T.atomic_add of a buffer), which skips
        elements outside a global tensor."""
        st = self.storages[info.data]
        if st.scope not in (GLOBAL, SHARED):
            raise Unsupported(f"atomics on {st.scope} buffer {info.name}")
        flat, ok, value, act, shape = _write_lanes(info, idx, value, fr)
        if cmp is not None:
            shape = _lanes(shape, cmp.shape)
            flat, ok, value, act = (t.expand(shape) for t in (flat, ok, value, act))
            cmp = cmp.expand(shape)
        repeat = fr.threads if not fr.in_parallel and shape == () else 1
        if ret and repeat != 1:
            # each thread's update returns its own previous value: one lane per thread
            shape, repeat = (fr.threads,), 1
            flat, ok, value, act = (t.expand(shape) for t in (flat, ok, value, act))
            cmp = None if cmp is None else cmp.expand(shape)
        bad = ~ok & act
        if bad.any():
            if not (predicated and st.scope == GLOBAL):
                raise OutOfBounds(f"atomic on {_index_text(info, idx, bad)} outside its shape {list(info.shape)}")
            act = act & ok
        pos, val = flat[act], value[act].to(st.data.dtype)
        cmp = None if cmp is None else cmp[act].to(st.data.dtype)
        if st.scope == SHARED:          # the block's own buffer: only an element nothing wrote is an error
            missing = ~st.written[pos]
            if missing.any():
                raise UninitializedRead(f"atomic on {info.name}[{int(pos[missing][0]) - info.offset}] (flat) "
                                        f"before anything wrote it")
        else:
            if st.writer is None:
                st.writer = torch.full((st.data.numel(),), -1, dtype=torch.int32)
            w = st.writer[pos]
            stored = (w >= 0) & (w != fr.block)
            if stored.any():
                raise Race(f"block {fr.block} updates {info.name}[{int(pos[stored][0]) - info.offset}] (flat) "
                           f"atomically, which block {int(w[stored][0])} stored in the same launch")
            st.writer[pos] = ATOMIC
        if ret:
            old = _atomic_in_order(st.data, pos, val, kind, cmp, info.dtype)
            out = torch.zeros(shape, dtype=st.data.dtype)
            out[act] = old
            want = dtypes.storage(info.dtype)
            return out if out.dtype == want else out.to(want)
        if kind == "add":
            st.data.index_add_(0, pos, val * repeat if repeat != 1 else val)
        elif kind in ("max", "min"):
            st.data.scatter_reduce_(0, pos, val, reduce="amax" if kind == "max" else "amin", include_self=True)
        elif kind == "or":      # idempotent: once per thread is once
            for p, v in zip(pos.tolist(), val.tolist()):
                st.data[p] |= v
        elif kind in _UPDATES or kind == "cas":      # each thread's update in turn
            rep = (lambda t: t.repeat(repeat)) if repeat != 1 else (lambda t: t)
            _atomic_in_order(st.data, rep(pos), rep(val), kind, None if cmp is None else rep(cmp), info.dtype)
        else:
            raise Unsupported(f"atomic {kind}")
        return None


# what each atomic writes, from the element's value and the lane's
_UPDATES = {"add": torch.add, "max": torch.maximum, "min": torch.minimum, "and": torch.bitwise_and,
            "or": torch.bitwise_or, "xor": torch.bitwise_xor, "xchg": lambda old, v: v}


def _atomic_in_order(data: torch.Tensor, pos: torch.Tensor, val: torch.Tensor, kind: str, cmp=None,
                     dtype: str = "") -> torch.Tensor:
    """Apply the updates one after another (in the dtype of `data`: fp32 sums round at each step, as on the
    GPU); the value each one found. A compare-and-swap compares bits, as the GPU's does (-0.0 is not 0.0,
    a NaN matches its own bits)."""
    if kind != "cas" and kind not in _UPDATES:
        raise Unsupported(f"atomic {kind} returning its previous value")
    old = torch.empty_like(val)
    bits = _same_bits(data.dtype) if kind == "cas" else None
    for k in range(pos.numel()):
        p = int(pos[k])
        old[k] = data[p]
        if kind == "cas":
            if bits(data[p:p + 1], cmp[k:k + 1]):
                data[p] = val[k]
        else:
            data[p] = dtypes.wrap(_UPDATES[kind](data[p], val[k]), dtype)
    return old


def _same_bits(dt: torch.dtype):
    """Whether two one-element tensors of dtype `dt` hold the same bits."""
    if not dt.is_floating_point:
        return lambda a, b: bool(a == b)
    as_int = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
              torch.float64: torch.int64}[dt]
    return lambda a, b: bool(a.view(as_int) == b.view(as_int))


def _write_lanes(info: BufferInfo, idx, value, fr):
    """A write's lanes: (flat offsets, in bounds, value, active, shape), all expanded to its shape (the
    statement's lanes: a value the same in every lane is still written by each)."""
    flat, ok = info.address(idx)
    shape = _lanes(flat.shape, value.shape, fr.lanes, *(() if fr.mask is None else (fr.mask.shape,)))
    act = torch.ones(shape, dtype=torch.bool) if fr.mask is None else fr.mask.expand(shape)
    return flat.expand(shape), ok.expand(shape), value.expand(shape), act, shape


def _check_not_wrapped(info: BufferInfo, idx, act):
    """TileLang reads a global index it can prove negative from the end of the tensor (Python style) and
    predicates the others to zero. An index negative in every lane (or the same in all) is one its analysis
    may prove negative: which of the two happens is not the program's to say, so it is not modelled."""
    for i in idx:
        neg = i < 0
        live = neg if act is None else neg & act
        if live.any() and (i.dim() == 0 or bool(neg.all())):
            v = int(i.expand(live.shape)[live][0]) if i.dim() else int(i)
            raise Unsupported(f"a read of {info.name} at the negative index {v} in every lane: TileLang reads an "
                              f"index it can prove negative from the end of the tensor, as Python does, and as "
                              f"zero one it cannot; which applies depends on its analysis")


def _check_one_writer(info: BufferInfo, pos, val, idx, act):
    """Two lanes of one statement writing different values to one element: the result depends on which
    thread runs last."""
    order = torch.argsort(pos, stable=True)
    p, v = pos[order], val[order]
    clash = (p[1:] == p[:-1]) & ~_same(v[1:], v[:-1])
    if clash.any():
        k = int(torch.nonzero(clash)[0])
        raise Race(f"one statement writes different values to {info.name} at flat element "
                   f"{int(p[k]) - info.offset} from two of its lanes")


class ParallelLog:
    """The accesses of one T.Parallel loop to the buffers it writes: an element one iteration writes and
    another reads or writes differently has no defined result (iterations run on different threads)."""

    def __init__(self, tracked: set[int], names: dict[int, str]):
        self.tracked = tracked
        self.names = names
        self.writes: dict[int, list] = {}
        self.reads: dict[int, list] = {}

    def read(self, key, flat, live):
        self.reads.setdefault(key, []).append((flat, live))

    def write(self, key, pos, lanes, val):
        self.writes.setdefault(key, []).append((pos, lanes, val))

    def check(self, lane_ids):
        for key, ws in self.writes.items():
            pos = torch.cat([w[0] for w in ws])
            lane = torch.cat([w[1] for w in ws])
            val = torch.cat([w[2] for w in ws])
            order = torch.argsort(pos, stable=True)
            pos, lane, val = pos[order], lane[order], val[order]
            clash = (pos[1:] == pos[:-1]) & (lane[1:] != lane[:-1]) & ~_same(val[1:], val[:-1])
            if clash.any():
                raise Race(f"two iterations of one T.Parallel loop write different values to "
                           f"{self.names[key]} (flat element {int(pos[1:][clash][0])})")
            for flat, live in self.reads.get(key, []):
                shape = _lanes(flat.shape, *(() if live is None else (live.shape,)), lane_ids.shape)
                f = flat.expand(shape)
                readers = lane_ids.expand(shape)
                if live is not None:
                    sel = live.expand(shape)
                    f, readers = f[sel], readers[sel]
                else:
                    f, readers = f.reshape(-1), readers.reshape(-1)
                at = torch.searchsorted(pos, f).clamp(max=pos.numel() - 1)
                hit = pos[at] == f
                other = hit & (lane[at] != readers)
                if other.any():
                    raise Race(f"an iteration of a T.Parallel loop reads {self.names[key]} (flat element "
                               f"{int(f[other][0])}), which another iteration of the loop writes")
