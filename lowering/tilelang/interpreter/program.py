"""A `@T.prim_func` (as TileLang's own parser reads it) compiled into closures and run block by block.

Execution model:
- Blocks run one after another; memory.py reports what would make the result depend on their order.
- Statements outside T.Parallel run on every thread of the block. Most are the same on every thread and
  run once; `T.get_thread_binding` gives a value per thread, and statements reading it run per thread,
  side by side, in step: TileLang puts a barrier wherever threads share data through shared memory.
- A T.Parallel nest runs all its iterations at once, one lane per iteration; statements in it see the
  lanes' values, `if` and `T.if_then_else` narrow the active lanes.
- Serial loops (T.serial, range, T.Pipelined) run in order; a T.Pipelined loop that names its stages runs
  in TileLang's schedule (pipeline.py).
- Roles (warp specialization): an `if tx < c: ... elif tx < d: ... else: ...` chain on the thread binding,
  outside T.Parallel, whose branches hold tile operators or mbarrier operations splits the block into
  roles, one per branch, on the thread ranges the conditions give. Inside a role the model above holds
  for the role's threads (`T.get_thread_binding()` gives their block-wide ids). Roles run one at a time,
  each until it waits on an mbarrier phase that has not completed, in a fixed order of preference
  (`Program.run(role_order=..., role_switch=...)`). T.alloc_barrier's mbarriers are fresh in every
  block and count the threads arriving per phase; a block whose roles all wait on phases nothing can
  complete is a Deadlock (roles.py). T.set_max_nreg and T.fence_proxy_async have nothing to model.
"""
from __future__ import annotations

import math
import os
import re

import torch

from . import dtypes, pipeline, roles, tileops
from .errors import DeviceAssertionFailed, InterpreterError, Misaligned, OutOfBounds, Unsupported
from .expressions import RETURNING_ATOMICS, ExprCompiler, extern_atomic, is_call_extern, key
from .printf import printf
from .memory import GLOBAL, BufferInfo, Memory, ParallelLog, Report, Storage, scope_of

_SERIAL_KINDS = (0, 3)      # ForKind SERIAL, UNROLLED
_PARALLEL, _THREAD_BINDING = 1, 4
_ATOMICS = {"tl.atomic_add_elem_op": "add", "tl.atomic_max_elem_op": "max", "tl.atomic_min_elem_op": "min",
            "tl.atomic_or_elem_op": "or"}
_ASSERTS = ("tl.device_assert", "tl.device_assert_with_msg")
_DECLARATION = re.compile(r"^\w+ = T\.(Buffer|handle|int32|int64|float32)\b")
_NO_OPS = ("tirx.tvm_storage_sync", "tir.tvm_storage_sync")
# register budgets and the ordering of generic-proxy writes before async-proxy reads: nothing to model
_HINTS = ("tl.set_max_nreg", "tl.no_set_max_nreg", "tl.fence_proxy_async")
_BARRIER_WAIT = "tl.mbarrier_wait_parity"
_BARRIER_ARRIVE = ("tirx.ptx_arrive_barrier", "tir.ptx_arrive_barrier",
                   # arrives once the thread's cp.async copies land: here they land when issued
                   "tl.ptx_cp_async_barrier_noinc")
_CP_ASYNC = "tl.ptx_cp_async"
_BARRIER_SCOPE = "shared.barrier"
# where set, the defaults of Program.run's role_order and role_switch
_ROLE_ORDER_ENV, _ROLE_SWITCH_ENV = "TLE_INTERPRETER_ROLE_ORDER", "TLE_INTERPRETER_ROLE_SWITCH"
# the threads [lo, hi) of `tx <op> c` in a block of n threads along x
_THREAD_RANGES = {"LT": lambda c, n: (0, c), "LE": lambda c, n: (0, c + 1), "GT": lambda c, n: (c + 1, n),
                  "GE": lambda c, n: (c, n), "EQ": lambda c, n: (c, c + 1)}
# `c <op> tx` is `tx <mirrored op> c`
_MIRRORED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ"}


class Frame:
    """The state a closure runs against: variable values, active lanes, memory, the block."""

    def __init__(self, memory: Memory, threads: int):
        self.env: dict[int, torch.Tensor] = {}
        self.mask = None            # bool tensor over the lanes, None when all are active
        self.lanes = ()             # the T.Parallel nest's shape in scope (() outside)
        self.in_parallel = False
        self.in_tile_op = False     # lanes are a tile operator's elements (T.copy, T.gemm, ...)
        self.varying = frozenset()  # variables holding one value per thread (read-only inside T.Parallel)
        self.log = None             # ParallelLog of the T.Parallel nest running
        self.ids = None             # lane ids of that nest
        self.memory = memory
        self.threads = threads
        self.block = -1
        self.block_index: dict[str, int] = {}
        self.barriers: dict[int, list] = {}     # the block's mbarriers, by allocation
        self.role = None                        # the roles.Role running, None outside a role split
        self.thread_range = None                # the role's threads, (lo, hi) of the block's
        self.role_order = roles.LOWEST_FIRST    # the scheduling policy of role splits (roles.py)
        self.role_switch = roles.AT_WAIT

    def thread_varying(self, t: torch.Tensor) -> bool:
        return not self.in_parallel and not self.in_tile_op and t.dim() > 0

    def lane_ids(self, shape) -> torch.Tensor:
        ids = self.ids[tuple(slice(0, s) for s in self.lanes)]
        return ids.expand(shape)


def _const_int(node, what: str) -> int:
    if type(node).__name__ != "IntImm":
        raise Unsupported(f"{what} that is not a constant ({node})")
    return int(node.value)


def _where(node, fr: Frame) -> str:
    # the printer declares the buffers a statement uses before the statement itself
    lines = [ln.strip() for ln in node.script().splitlines()]
    text = next((ln for ln in lines if ln and not ln.startswith("#") and not _DECLARATION.match(ln)),
                type(node).__name__)
    if len(text) > 160:
        text = text[:157] + "..."
    blk = ", ".join(f"{k}={v}" for k, v in fr.block_index.items())
    place = [f"in block ({blk})"] if blk else []
    if fr.role is not None:
        place.append(fr.role.name)
    return " ".join([f"`{text}`", ", ".join(place)]) if place else f"`{text}`"


def _located(node, run):
    def located(fr):
        try:
            run(fr)
        except InterpreterError as e:
            if not e.where:
                e.where = _where(node, fr)
                e.args = (f"{e.message} ({e.where})",)
            raise
    return located


class Program:
    """A compiled prim_func, runnable on CPU tensors as many times as wanted."""

    def __init__(self, func):
        self.func = func
        self.name = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs else "kernel"
        self.threads = _launch_threads(func.body)
        self._buffers: dict[int, BufferInfo] = {}
        self.expr = ExprCompiler(self.buffer, self._thread_index)
        self.params = []            # (name, key, BufferInfo | None, dtype)
        for p in func.params:
            buf = func.buffer_map.get(p) if func.buffer_map is not None else None
            if buf is not None:
                self.params.append((buf.name, key(buf.data), self.buffer(buf), str(buf.dtype)))
            else:
                self.params.append((p.name, key(p), None, str(p.dtype)))
        self._nest = None           # while compiling a T.Parallel nest: its extents per lane axis
        self._lane_depth = 0        # ... and the axis of the parallel loop being compiled
        self._thread_vars: set[int] = set()     # variables bound to the thread index along x
        self._in_role = False       # while compiling the branches of a role split
        self.body = self.stmt(func.body)

    # -- buffers ---------------------------------------------------------------------------------------
    def buffer(self, buf) -> BufferInfo:
        k = key(buf)
        info = self._buffers.get(k)
        if info is None:
            shape = tuple(_const_int(s, f"the shape of {buf.name}") for s in buf.shape)
            if buf.strides:
                strides = tuple(_const_int(s, f"a stride of {buf.name}") for s in buf.strides)
            else:
                strides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
            off = buf.elem_offset
            offset = int(off.value) if type(off).__name__ == "IntImm" else 0   # params start at their pointer
            info = BufferInfo(buf.name, key(buf.data), shape, strides, offset, str(buf.dtype), scope_of(buf.scope()))
            self._buffers[k] = info
        return info

    def _thread_index(self, axis: int):
        x, y, z = self.threads
        total = x * y * z
        if (x, y, z)[axis] == 1:
            zero = torch.tensor(0, dtype=torch.int32)
            return lambda fr: zero
        flat = torch.arange(total, dtype=torch.int32)
        value = (flat % x, (flat // x) % y, flat // (x * y))[axis]

        def index(fr):
            if fr.thread_range is None:
                return value
            lo, hi = fr.thread_range            # a role's threads
            return value[lo:hi]
        return index

    # -- statements ------------------------------------------------------------------------------------
    def stmt(self, node):
        kind = type(node).__name__
        method = getattr(self, "_" + kind, None)
        if method is None:
            raise Unsupported(f"the TIR statement {kind}")
        return _located(node, method(node))

    def _SeqStmt(self, node):
        parts = [self.stmt(s) for s in node.seq]

        def seq(fr):
            for p in parts:
                p(fr)
        return seq

    def _Bind(self, node):
        k, value = key(node.var), self.expr(node.value)
        if _is_thread_index(node.value):
            self._thread_vars.add(k)

        def bind(fr):
            # a let holds the value at its definition: a read of a buffer (a T.alloc_var) can come back as
            # a view of its storage, which a later store to the buffer would change
            v = value(fr)
            fr.env[k] = v.clone() if isinstance(v, torch.Tensor) else v
        return bind

    def _DeclBuffer(self, node):
        self.buffer(node.buffer)
        body = getattr(node, "body", None)
        return self.stmt(body) if body is not None else (lambda fr: None)

    def _AttrStmt(self, node):
        return self.stmt(node.body)

    def _SBlockRealize(self, node):
        if not (type(node.predicate).__name__ == "IntImm" and int(node.predicate.value) == 1):
            raise Unsupported("a block with a predicate")
        return self.stmt(node.block)

    def _SBlock(self, node):
        if node.match_buffers or node.init is not None:
            raise Unsupported(f"block {node.name_hint} with match_buffers or init")
        barriers = _barrier_counts(node)
        allocs = [self.buffer(b) for b in node.alloc_buffers if b.scope() != _BARRIER_SCOPE]
        body = self.stmt(node.body)

        def block(fr):
            for info in allocs:
                fr.memory.storages[info.data] = Storage.local(info.name, info.shape, info.dtype, info.scope)
            for data, (name, counts) in barriers.items():
                fr.barriers[data] = roles.new_barriers(name, counts)
            body(fr)
        return block

    def _BufferStore(self, node):
        info = self.buffer(node.buffer)
        idx = [self.expr(i) for i in node.indices]
        value = self.expr(node.value)
        if getattr(node, "predicate", None) is not None:
            raise Unsupported(f"a predicated store to {info.name}")

        def store(fr):
            fr.memory.store(info, [i(fr) for i in idx], value(fr), fr)
        return store

    def _IfThenElse(self, node):
        split = self._role_split(node)
        if split is not None:
            return split
        cond = self.expr(node.condition)
        then = self.stmt(node.then_case)
        other = self.stmt(node.else_case) if node.else_case is not None else None

        def branch(fr):
            c = cond(fr)
            if c.dim() == 0:
                if bool(c):
                    then(fr)
                elif other is not None:
                    other(fr)
                return
            saved = fr.mask
            try:
                for m, part in ((c, then), (~c, other)):
                    if part is None:
                        continue
                    active = m if saved is None else saved & m
                    if active.any():
                        fr.mask = active
                        part(fr)
            finally:
                fr.mask = saved
        return branch

    def _While(self, node):
        cond, body = self.expr(node.condition), self.stmt(node.body)

        def loop(fr):
            while True:
                c = cond(fr)
                if c.dim():
                    raise Unsupported("a while loop whose condition differs between lanes")
                if not bool(c):
                    return
                body(fr)
        return loop

    def _Evaluate(self, node):
        v = node.value
        if type(v).__name__ in ("IntImm", "FloatImm"):
            return lambda fr: None
        if type(v).__name__ != "Call":
            raise Unsupported(f"evaluating {v}")
        name, args = v.op.name, v.args
        region = lambda n: tileops.compile_region(n, self.expr, self.buffer)   # noqa: E731
        if name == "tl.tileop.copy":
            return tileops.copy(region(args[0]), region(args[1]))
        if name == "tl.tileop.fill":
            return tileops.fill(region(args[0]), self.expr(args[1]))
        if name in ("tl.tileop.gemm", "tl.tileop.wgmma_gemm"):     # wgmma_gemm: issued without a wait
            return tileops.gemm(region(args[0]), region(args[1]), region(args[2]), bool(args[3].value),
                                bool(args[4].value), int(args[5].value), int(args[6].value), int(args[7].value),
                                bool(args[9].value))
        if name == "tl.tileop.reduce":
            return tileops.reduce(region(args[0]), region(args[1]), str(args[2].value), int(args[3].value),
                                  bool(args[4].value))
        if name == "tl.tileop.cumsum":
            return tileops.cumsum(region(args[0]), region(args[1]), int(args[2].value), bool(args[3].value))
        fn = str(args[0].value) if is_call_extern(v) else None
        if fn == "printf":
            return self._printf(v)
        if fn is not None and extern_atomic(fn) is None:
            raise Unsupported(f"the extern function {fn}")
        if name in _ATOMICS or name in RETURNING_ATOMICS or fn is not None:   # a value nothing reads is dropped
            if fn is not None:
                run = self.expr.atomic(v, extern_atomic(fn), ret=False)
            else:
                run = self.expr.atomic(v, _ATOMICS.get(name) or RETURNING_ATOMICS[name],
                                       ret=name in RETURNING_ATOMICS)

            def update(fr):
                run(fr)
            return update
        if name in _ASSERTS:
            return self._device_assert(v)
        if name in _NO_OPS:
            return lambda fr: None          # threads run in step here (see the module docstring)
        if name in _HINTS:
            return lambda fr: None
        if name == _BARRIER_WAIT:
            return self._barrier_wait(v)
        if name == _CP_ASYNC:
            return self._cp_async(v)
        if name in _BARRIER_ARRIVE:
            return self._barrier_arrive(v)
        raise Unsupported(f"the operation {name}")

    def _device_assert(self, call):
        """tl.device_assert(cond) / tl.device_assert_with_msg(cond, msg): every active lane's (or thread's)
        condition must hold; on the GPU a false one prints the message and traps the kernel."""
        cond = self.expr(call.args[0])
        msg = str(call.args[1].value) if len(call.args) > 1 else ""

        def check(fr):
            c = cond(fr)
            failed = ~c.to(torch.bool)
            if fr.mask is not None:
                failed = failed & fr.mask
            if failed.any():
                where = ""
                if failed.dim():
                    first = torch.nonzero(failed)[0].tolist()
                    where = f" (lane {first})" if fr.in_parallel else f" (thread {first[0]})"
                raise DeviceAssertionFailed(f"device assertion failed{where}: {msg}")
        return check

    def _printf(self, call):
        """printf(fmt, *args): a line per active lane or thread (printf.py), on stdout."""
        fmt = str(call.args[1].value)
        args = [(lambda fr, s=str(a.value): s) if type(a).__name__ == "StringImm" else self.expr(a)
                for a in call.args[2:]]

        def run(fr):
            printf(fmt, [a(fr) for a in args], fr)
        return run

    # -- roles and mbarriers (roles.py) -----------------------------------------------------------------
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
        return _is_thread_index(node) or (type(node).__name__ == "Var" and key(node) in self._thread_vars)

    def _barrier(self, ref):
        """A closure giving the mbarrier `ref` (`buf[i]` of a T.alloc_barrier buffer) names."""
        if type(ref).__name__ != "BufferLoad" or ref.buffer.scope() != _BARRIER_SCOPE or len(ref.indices) != 1:
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
        n = _const_int(call.args[2], "a cp.async element count")
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

    def _For(self, node):
        kind = int(node.kind)
        if kind == _THREAD_BINDING:
            return self._grid_loop(node)
        if kind == _PARALLEL:
            return self._parallel(node)
        if kind not in _SERIAL_KINDS:
            raise Unsupported(f"a loop of kind {node.kind}")
        if node.step is not None and not (type(node.step).__name__ == "IntImm" and int(node.step.value) == 1):
            raise Unsupported(f"a loop with step {node.step}")
        if "tl_pipeline_stage" in node.annotations:
            body = list(node.body.seq) if type(node.body).__name__ == "SeqStmt" else [node.body]
            scheduled = pipeline.staged(node, body, self.stmt, self.buffer)
            return self._serial(node, scheduled=scheduled)
        return self._serial(node)

    def _serial(self, node, scheduled=None):
        k, dt = key(node.loop_var), str(node.loop_var.dtype)
        lo, extent = self.expr(node.min), self.expr(node.extent)
        body = None if scheduled is not None else self.stmt(node.body)

        def loop(fr):
            start, count = lo(fr), extent(fr)
            if start.dim() == 0 and count.dim() == 0:
                if scheduled is not None:
                    scheduled(fr, start.to(dtypes.storage(dt)), int(count))
                    return
                for i in range(int(count)):
                    fr.env[k] = (start + i).to(dtypes.storage(dt))
                    body(fr)
                return
            if scheduled is not None:
                raise Unsupported("a T.Pipelined loop whose trip count differs between lanes")
            # lanes run different trip counts: step them together, each active while it has iterations left
            saved = fr.mask
            try:
                for i in range(int(count.max()) if count.numel() else 0):
                    live = count > i
                    active = live if saved is None else saved & live
                    if not active.any():
                        continue
                    fr.mask = active
                    fr.env[k] = (start + i).to(dtypes.storage(dt))
                    body(fr)
            finally:
                fr.mask = saved
        return loop

    def _grid_loop(self, node):
        tag = str(node.thread_binding.thread_tag) if node.thread_binding is not None else ""
        if not tag.startswith("blockIdx."):
            raise Unsupported(f"a loop bound to {tag or 'a thread'}")
        k, extent, axis = key(node.loop_var), _const_int(node.extent, "a grid extent"), tag[-1]
        innermost = not _has_grid_loop(node.body)
        body = self.stmt(node.body)
        name = {"x": "bx", "y": "by", "z": "bz"}[axis]

        def blocks(fr):
            for b in range(extent):
                fr.env[k] = torch.tensor(b, dtype=torch.int32)
                fr.block_index[name] = b
                if innermost:
                    fr.block = fr.memory.report.blocks
                    fr.memory.report.blocks += 1
                body(fr)
        return blocks

    def _parallel(self, outer):
        """A T.Parallel nest: every parallel loop in it gets an axis of the lane grid, by depth."""
        nest = getattr(self, "_nest", None)
        if nest is not None:                # a parallel loop inside another: the next lane axis
            return self._lane_axis(outer, nest)
        extents: list[int] = []
        self._nest = extents
        try:
            run_outer = self._lane_axis(outer, extents)
        finally:
            self._nest = None
        reads, writes = pipeline.accesses(outer, self.buffer)
        # buffers whose elements two iterations could both touch: read and written, or written twice
        tracked = (reads & writes) | _stored_twice(outer)
        names = {i.data: i.name for i in self._buffers.values() if i.data in tracked}

        def nest_run(fr):
            if fr.mask is not None and fr.mask.dim():
                raise Unsupported("T.Parallel under a thread-dependent condition")
            state = fr.lanes, fr.in_parallel, fr.varying, fr.log, fr.ids, fr.env
            fr.env = dict(fr.env)           # the nest's loop variables and lets end with it
            fr.lanes = (1,) * len(extents)
            fr.in_parallel = True
            fr.varying = frozenset(k for k, v in fr.env.items() if v.dim() > 0)
            fr.log = ParallelLog(tracked, names) if tracked else None
            fr.ids = torch.arange(math.prod(extents)).reshape(extents)
            try:
                run_outer(fr)
                if fr.log is not None:
                    fr.log.check(fr.ids)
            finally:
                fr.lanes, fr.in_parallel, fr.varying, fr.log, fr.ids, fr.env = state
        return nest_run

    def _lane_axis(self, node, extents: list[int]):
        depth = self._lane_depth if extents else 0
        e = _const_int(node.extent, "a T.Parallel extent")
        start = _const_int(node.min, "a T.Parallel start")
        if depth == len(extents):
            extents.append(e)
        else:
            extents[depth] = max(extents[depth], e)
        k, dt = key(node.loop_var), dtypes.storage(str(node.loop_var.dtype))
        self._lane_depth = depth + 1
        try:
            body = self.stmt(node.body)
        finally:
            self._lane_depth = depth

        def run(fr):
            shape = [1] * len(extents)
            shape[depth] = e
            fr.env[k] = (start + torch.arange(e)).to(dt).reshape(shape)
            saved = fr.lanes
            fr.lanes = tuple(e if i == depth else s for i, s in enumerate(saved))
            try:
                body(fr)
            finally:
                fr.lanes = saved
        return run

    # -- running ---------------------------------------------------------------------------------------
    def run(self, args, strict_reads: bool = False, role_order: str | None = None,
            role_switch: str | None = None) -> Report:
        """Run on `args` (flat CPU tensors for tensor parameters, Python numbers for scalars, in the
        prim_func's parameter order). Tensors are written in place.

        The roles of a warp-specialized block run one at a time: `role_order` says which runnable role
        runs first ("lowest_first", the default, or "highest_first"), `role_switch` when the scheduler
        picks again ("wait": when the running role blocks, the default; "arrive": also when an arrive
        completes a phase). TLE_INTERPRETER_ROLE_ORDER and TLE_INTERPRETER_ROLE_SWITCH set the defaults."""
        role_order = _choice("role_order", role_order, _ROLE_ORDER_ENV, roles.ROLE_ORDERS)
        role_switch = _choice("role_switch", role_switch, _ROLE_SWITCH_ENV, roles.ROLE_SWITCHES)
        if len(args) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arguments, got {len(args)}")
        report = Report(strict_reads=strict_reads)
        memory = Memory(report)
        fr = Frame(memory, math.prod(self.threads))
        fr.role_order, fr.role_switch = role_order, role_switch
        for (name, k, info, dt), a in zip(self.params, args):
            if info is not None:
                _check_tensor(name, a, info)
                memory.storages[k] = Storage(name, a, dt, GLOBAL)
            else:
                if isinstance(a, torch.Tensor):
                    raise TypeError(f"argument '{name}' is a scalar ({dt}), got a tensor")
                fr.env[k] = dtypes.const(a, dt)
        # the tensors are small and the ops many: one thread avoids the cost of waking others per op
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            self.body(fr)
        finally:
            torch.set_num_threads(threads)
        return report


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


def _choice(what: str, value: str | None, env: str, choices: tuple[str, ...]) -> str:
    """`value`, else the environment's `env`, else the first of `choices`; one of `choices`."""
    value = value or os.environ.get(env) or choices[0]
    if value not in choices:
        raise ValueError(f"{what} {value!r}: expected one of {', '.join(choices)}")
    return value


def _check_tensor(name: str, a, info: BufferInfo):
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"argument '{name}' is a tensor ({info.dtype}{list(info.shape)}), got {type(a).__name__}")
    if a.device.type != "cpu":
        raise TypeError(f"argument '{name}': the interpreter runs on CPU tensors, got one on {a.device}")
    if a.dim() != 1 or a.numel() != math.prod(info.shape) or (a.numel() > 1 and a.stride(0) != 1):
        raise TypeError(f"argument '{name}': expected a flat contiguous tensor of {math.prod(info.shape)} "
                        f"elements, got shape {tuple(a.shape)} with strides {a.stride()}")
    want = info.dtype
    got = str(a.dtype).replace("torch.", "")
    if got != want:
        raise TypeError(f"argument '{name}': expected dtype {want}, got {got}")


def _launch_threads(node) -> tuple[int, int, int]:
    """The block's thread counts, from TileLang's root block annotation."""
    found = []

    def visit(n):
        kind = type(n).__name__
        if kind == "SBlock":
            t = n.annotations.get("tl.launch_threads") if n.annotations else None
            if t is not None:
                found.append(tuple(int(x) for x in t))
            visit(n.body)
        elif kind == "SBlockRealize":
            visit(n.block)
        elif kind == "SeqStmt":
            for s in n.seq:
                visit(s)
        elif kind in ("For", "AttrStmt", "DeclBuffer") and getattr(n, "body", None) is not None:
            visit(n.body)
    visit(node)
    if not found:
        raise Unsupported("a prim_func without T.Kernel's thread annotation")
    t = found[0] + (1, 1)
    return t[0], t[1], t[2]


def _is_thread_index(node) -> bool:
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
        return name.startswith("tl.tileop.") or name == _BARRIER_WAIT or name in _BARRIER_ARRIVE
    if kind == "SeqStmt":
        return any(_role_work(s) for s in node.seq)
    children = (getattr(node, a, None) for a in ("body", "then_case", "else_case", "block"))
    return any(_role_work(c) for c in children if c is not None)


def _barrier_counts(block) -> dict[int, tuple[str, list[int]]]:
    """The mbarriers a block allocates (T.alloc_barrier): allocation -> (name, expected arrivals of each)."""
    init = block.annotations.get("barrier_init") if block.annotations else None
    counts = {key(v): [_const_int(c, "an mbarrier arrive count") for c in cs] for v, cs in (init or {}).items()}
    out = {}
    for b in block.alloc_buffers:
        if b.scope() != _BARRIER_SCOPE:
            continue
        n = _const_int(b.shape[0], f"the number of mbarriers in {b.name}")
        if len(counts.get(key(b.data), ())) != n:
            raise Unsupported(f"mbarriers {b.name} without an arrive count for each")
        out[key(b.data)] = (b.name, counts[key(b.data)])
    return out


def _stored_twice(node) -> set[int]:
    """Allocations that more than one store statement under `node` writes."""
    seen, twice = set(), set()

    def visit(n):
        kind = type(n).__name__
        if kind == "BufferStore":
            k = key(n.buffer.data)
            (twice if k in seen else seen).add(k)
        elif kind == "SeqStmt":
            for s in n.seq:
                visit(s)
        else:
            for attr in ("body", "then_case", "else_case"):
                child = getattr(n, attr, None)
                if child is not None:
                    visit(child)
    visit(node)
    return twice


def _has_grid_loop(node) -> bool:
    kind = type(node).__name__
    if kind == "For":
        return int(node.kind) == _THREAD_BINDING or _has_grid_loop(node.body)
    if kind == "SeqStmt":
        return any(_has_grid_loop(s) for s in node.seq)
    return False
