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
  complete is a Deadlock (roles.py). T.set_max_nreg, T.fence_proxy_async and T.warpgroup_fence_operand
  have nothing to model.
- Products: T.wgmma_gemm is issued without a wait; it runs, reading its operands and accumulator then, when
  its threads wait for it (T.wait_wgmma(n): all but the n issued last; T.gemm: all, then itself). A result
  read before its wait, or an operand written before it, gives other numbers than the program's.

Program compiles the buffers and statements and runs the blocks here; its loops (loops.py) and its roles,
mbarriers and cp.async copies (synchronization.py) are mixins; Frame (frame.py) is what a statement sees.
"""
from __future__ import annotations

import math
import os

import torch

from . import dtypes, roles, tileops
from .errors import DeviceAssertionFailed, FalseAssumption, Unsupported
from .expressions import RETURNING_ATOMICS, ExprCompiler, extern_atomic, is_call_extern, key
from .frame import Frame, const_int, located
from .loops import Loops
from .memory import GLOBAL, BufferInfo, Memory, Report, Storage, scope_of
from .printf import printf
from .synchronization import (BARRIER_ARRIVE, BARRIER_SCOPE, BARRIER_WAIT, Synchronization, barrier_counts,
                              is_thread_index)

_ATOMICS = {"tl.atomic_add_elem_op": "add", "tl.atomic_max_elem_op": "max", "tl.atomic_min_elem_op": "min",
            "tl.atomic_or_elem_op": "or"}
_ASSERTS = ("tl.device_assert", "tl.device_assert_with_msg")
_ASSUME = "tirx.assume"
_NO_OPS = ("tirx.tvm_storage_sync", "tir.tvm_storage_sync")
# register budgets and the ordering of generic-proxy writes before async-proxy reads: nothing to model
_HINTS = ("tl.set_max_nreg", "tl.no_set_max_nreg", "tl.fence_proxy_async", "tl.warpgroup_fence_operand")
_CP_ASYNC = "tl.ptx_cp_async"
# where set, the defaults of Program.run's role_order and role_switch
_ROLE_ORDER_ENV, _ROLE_SWITCH_ENV = "TLE_INTERPRETER_ROLE_ORDER", "TLE_INTERPRETER_ROLE_SWITCH"


class Program(Synchronization, Loops):
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
            shape = tuple(const_int(s, f"the shape of {buf.name}") for s in buf.shape)
            if buf.strides:
                strides = tuple(const_int(s, f"a stride of {buf.name}") for s in buf.strides)
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
        return located(node, method(node))

    def _SeqStmt(self, node):
        parts = [self.stmt(s) for s in node.seq]

        def seq(fr):
            for p in parts:
                p(fr)
        return seq

    def _Bind(self, node):
        k, value = key(node.var), self.expr(node.value)
        if is_thread_index(node.value):
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
        barriers = barrier_counts(node)
        allocs = [self.buffer(b) for b in node.alloc_buffers if b.scope() != BARRIER_SCOPE]
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
        if name in ("tl.tileop.copy", "tl.tileop.tma_copy"):   # a TMA load lands at once: its readers wait on
            return tileops.copy(region(args[0]), region(args[1]))  # the barrier its writers arrive on after it
        if name == "tl.tileop.atomicadd":      # T.atomic_add(region, buffer[, use_tma=True]): issued and waited
            return tileops.atomic_add(region(args[0]), region(args[1]))  # for in one statement
        if name == "tl.tileop.fill":
            return tileops.fill(region(args[0]), self.expr(args[1]))
        if name in ("tl.tileop.gemm", "tl.tileop.wgmma_gemm"):
            run = tileops.gemm(region(args[0]), region(args[1]), region(args[2]), bool(args[3].value),
                               bool(args[4].value), int(args[5].value), int(args[6].value), int(args[7].value),
                               bool(args[9].value))
            return tileops.issue_product(run, waits=name == "tl.tileop.gemm")
        if name == "tl.wait_wgmma":
            return tileops.wait_products(const_int(args[0], "T.wait_wgmma's count"))
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
        if name == _ASSUME:
            return self._assume(v)
        if name in _NO_OPS:
            return lambda fr: None          # threads run in step here (see the module docstring)
        if name in _HINTS:
            return lambda fr: None
        if name == BARRIER_WAIT:
            return self._barrier_wait(v)
        if name == _CP_ASYNC:
            return self._cp_async(v)
        if name in BARRIER_ARRIVE:
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

    def _assume(self, call):
        """T.assume(cond): the kernel's promise, checked here (on the GPU a false one is undefined behaviour)."""
        cond = self.expr(call.args[0])

        def check(fr):
            if not bool(cond(fr).to(torch.bool).all()):
                raise FalseAssumption(f"the condition {call.args[0]} of a tl.assume is false")
        return check

    def _printf(self, call):
        """printf(fmt, *args): a line per active lane or thread (printf.py), on stdout."""
        fmt = str(call.args[1].value)
        args = [(lambda fr, s=str(a.value): s) if type(a).__name__ == "StringImm" else self.expr(a)
                for a in call.args[2:]]

        def run(fr):
            printf(fmt, [a(fr) for a in args], fr)
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
