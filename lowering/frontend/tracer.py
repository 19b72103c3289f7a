"""Python AST -> tile IR.

The kernel's AST is interpreted: Python values (constexprs, numbers, dtypes, modules) are evaluated by
Python itself, so constexpr arithmetic and `tl.static_range` unrolling fold away; runtime values are
`TV`s that emit IR. Calls to other `@tle.jit` (or `@triton.jit`) functions are inlined. `for` over
`range`/`tl.range` and `if` on a runtime scalar become structured ops with explicit carried values.
"""
from __future__ import annotations

import ast

from ..errors import LoweringError
from ..ir.builder import Builder
from ..ir.core import KernelIR, Loc, Param
from .builtins import BUILTINS, tle_load
from .control_flow import ControlFlow
from .environment import ReturnSignal
from .expressions import Expressions
from .extensions import TLE_BUILTINS
from .semantics import TV
from .source import FunctionSource, function_source
from .tensor_desc import DescriptorParam, TensorDescriptor


class Tracer(ControlFlow, Expressions):
    """Traces one kernel into tile IR: the entry, simple statements and tiles updated in place here; control
    flow (control_flow.py) and expressions (expressions.py) in its mixins."""

    def __init__(self, extra_builtins: dict | None = None):
        self.b = Builder()
        self.notes: list[str] = []
        self.builtins = dict(BUILTINS)
        if extra_builtins:
            self.builtins.update(extra_builtins)
        self._src: FunctionSource | None = None
        self._depth = 0
        self._regions: list[dict] = []   # per open if-branch / loop body: id(TV) -> (TV, value before it)
        self.warp_groups: dict[int, int | None] = {}   # tle.gpu.warp_group index -> registers asked for
        self.turns = 0                                   # tle.gpu.turn blocks traced so far (each one's number)

    # -- entry --------------------------------------------------------------------------------------
    def trace_kernel(self, fn, runtime: dict, constexprs: dict, known: dict | None = None) -> KernelIR:
        """`runtime`: parameter name -> its IR type (pointer or scalar); `constexprs`: name -> Python value;
        `known`: runtime scalars compiled in as typed constants (name -> (type, value)): they stay
        runtime values in the program's semantics (`n.to(...)` works), only their value is fixed."""
        known = known or {}
        src = function_source(fn)
        self._src = src
        names = [a.arg for a in src.tree.args.args]
        body = self.b.new_block([])
        params, env = [], {}
        descriptors = {}
        for i, name in enumerate(names):
            if isinstance(runtime.get(name), DescriptorParam):
                descriptors[name] = runtime[name]
                for part in runtime[name].part_names():
                    self._param(body, params, env, part, i, runtime, known, src)
            elif name in known or name in runtime:
                self._param(body, params, env, name, i, runtime, known, src)
            else:
                env[name] = constexprs[name]
        self.b.loc = Loc(src.file, src.tree.lineno, src.tree.name)
        with self.b.insert_into(body):
            for name, d in descriptors.items():        # a host descriptor argument: the descriptor of its parts
                env[name] = d.build(self, env)
            try:
                self._exec_body(src.tree.body, env)
            except ReturnSignal as r:
                if r.value is not None:
                    raise LoweringError("a kernel cannot return a value", self.b.loc)
        ir = KernelIR(src.tree.name, params, body, dict(constexprs), Loc(src.file, src.tree.lineno, src.tree.name),
                      notes=self.notes, warp_groups=dict(self.warp_groups))
        body.args = []   # params are referenced through KernelIR.params
        return ir

    def _param(self, body, params, env, name, index, runtime, known, src):
        """Runtime parameter `name` (at `index` among the function's), or its compiled-in value."""
        if name in known:
            t, value = known[name]
            with self.b.insert_into(body):
                self.b.loc = Loc(src.file, src.tree.lineno, src.tree.name)
                c = self.b.const(value, t.elem)
            c.name = name
            env[name] = TV(c, self.b)
            return
        v = self.b.ids.value(runtime[name], body, name)
        body.args.append(v)
        params.append(Param(name, v, index))
        env[name] = TV(v, self.b)

    # -- helpers ------------------------------------------------------------------------------------
    def _loc(self, node):
        if hasattr(node, "lineno"):
            self.b.loc = Loc(self._src.file, node.lineno, self._src.tree.name)

    def _err(self, msg, node=None) -> LoweringError:
        if node is not None:
            self._loc(node)
        return LoweringError(msg, self.b.loc)

    # -- tiles updated in place ---------------------------------------------------------------------
    # `tle.call` writes its output tiles: the TV objects the kernel holds (under every name and in every
    # container) then denote the new values (`rebind`). Inside a branch or a loop body such an update is
    # recorded; when the region closes, each tile that existed before it and was updated there is undone
    # and merged like an assigned variable: an `if` result, or a loop-carried value.
    def rebind(self, tv: TV, value):
        assert tv.v.type == value.type, (tv.v.type, value.type)
        if self._regions:
            self._regions[-1].setdefault(id(tv), (tv, tv.v))
        tv.v = value

    def _open_region(self) -> dict:
        log: dict = {}
        self._regions.append(log)
        return log

    def _close_region(self, log: dict, outer: dict) -> dict:
        """Close the innermost region: undo its updates of the tiles in `outer` (those visible before it)
        and return id -> (TV, its value at the region's end) for those tiles."""
        popped = self._regions.pop()
        assert popped is log
        finals = {}
        for key, (tv, before) in log.items():
            if key in outer:
                finals[key] = (tv, tv.v)
                tv.v = before
        return finals

    # -- statements ---------------------------------------------------------------------------------
    def _exec_body(self, stmts, env):
        for st in stmts:
            self._exec(st, env)

    def _exec(self, st, env):
        self._loc(st)
        m = getattr(self, "_st_" + type(st).__name__, None)
        if m is None:
            raise self._err(f"statement '{type(st).__name__}' is not supported in kernels", st)
        m(st, env)

    def _st_Expr(self, st, env):
        if isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
            return  # docstring
        self._eval(st.value, env)

    def _st_Pass(self, st, env):
        pass

    def _st_Assign(self, st, env):
        value = self._eval(st.value, env)
        for target in st.targets:
            self._assign(target, value, env)

    def _st_AnnAssign(self, st, env):
        if st.value is not None:
            self._assign(st.target, self._eval(st.value, env), env)

    def _st_AugAssign(self, st, env):
        if not isinstance(st.target, ast.Name):
            raise self._err("augmented assignment is supported on names only", st)
        cur = self._lookup(st.target.id, env, st)
        rhs = self._eval(st.value, env)
        self._assign(st.target, self._binop(type(st.op), cur, rhs, st), env)

    def _assign(self, target, value, env):
        if isinstance(target, ast.Name):
            named = value.desc if isinstance(value, TensorDescriptor) else value
            if isinstance(named, TV) and named.v.name is None and named.v.defining_op is not None:
                named.v.name = target.id
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = list(value) if not isinstance(value, TV) else None
            if values is None or len(values) != len(target.elts):
                raise self._err("cannot unpack this value into the assignment targets", target)
            for t, v in zip(target.elts, values):
                self._assign(t, v, env)
        else:
            raise self._err(f"assignment to {ast.unparse(target)} is not supported (tiles are values)", target)

    def _st_Return(self, st, env):
        raise ReturnSignal(self._eval(st.value, env) if st.value is not None else None)

    def _st_Assert(self, st, env):
        cond = self._eval(st.test, env)
        if isinstance(cond, TV):
            raise self._err("assert on a runtime value is not supported (use tl.static_assert on constexprs)", st)
        if not cond:
            msg = self._eval(st.msg, env) if st.msg is not None else ""
            raise self._err(f"assertion failed: {msg}", st)


def make_tracer() -> Tracer:
    return Tracer(TLE_BUILTINS)


__all__ = ["Tracer", "make_tracer", "tle_load"]
