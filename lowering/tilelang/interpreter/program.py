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
"""
from __future__ import annotations

import math
import re

import torch

from . import dtypes, pipeline, tileops
from .errors import DeviceAssertionFailed, InterpreterError, Unsupported
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
    return f"`{text}`" + (f" in block ({blk})" if blk else "")


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
        return lambda fr: value

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
        allocs = [self.buffer(b) for b in node.alloc_buffers]
        body = self.stmt(node.body)

        def block(fr):
            for info in allocs:
                fr.memory.storages[info.data] = Storage.local(info.name, info.shape, info.dtype, info.scope)
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
        if name == "tl.tileop.gemm":
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
    def run(self, args, strict_reads: bool = False) -> Report:
        """Run on `args` (flat CPU tensors for tensor parameters, Python numbers for scalars, in the
        prim_func's parameter order). Tensors are written in place."""
        if len(args) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arguments, got {len(args)}")
        report = Report(strict_reads=strict_reads)
        memory = Memory(report)
        fr = Frame(memory, math.prod(self.threads))
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
