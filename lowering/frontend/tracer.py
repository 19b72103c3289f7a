"""Python AST -> tile IR.

The kernel's AST is interpreted: Python values (constexprs, numbers, dtypes, modules) are evaluated by
Python itself, so constexpr arithmetic and `tl.static_range` unrolling fold away; runtime values are
`TV`s that emit IR. Calls to other `@tle.jit` (or `@triton.jit`) functions are inlined. `for` over
`range`/`tl.range` and `if` on a runtime scalar become structured ops with explicit carried values.
"""
from __future__ import annotations

import ast
import builtins as py_builtins
import inspect
import operator
import textwrap
from dataclasses import dataclass

import triton.language as tl

from ..errors import LoweringError
from ..ir import types as ir_types
from ..ir.builder import Builder
from ..ir.core import KernelIR, Loc, Param
from ..ir.ops import BinaryOp, CmpPred, LoopKind
from . import semantics as S
from .block_ptr import BlockPtr
from .builtins import BUILTINS, TENSOR_METHODS, tle_load
from .gpu import Buffer, traced
from .jit_functions import unwrap_jit
from .semantics import TV, as_tv, is_num
from .tensor_desc import TensorDescriptor

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.BitAnd: operator.and_,
           ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift, ast.Pow: operator.pow}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
# Python builtins a kernel may call on constexprs.
_PY_CALLABLE_OK = {min, max, int, float, bool, len, abs, range, isinstance, tuple, list, str, print, round,
                   getattr, hasattr, divmod, pow, enumerate, zip}


class _Return(Exception):
    def __init__(self, value):
        self.value = value


@dataclass
class FunctionSource:
    fn: object
    tree: ast.FunctionDef
    file: str
    globals: dict


_SOURCE_CACHE: dict = {}


def function_source(fn) -> FunctionSource:
    key = fn
    if key in _SOURCE_CACHE:
        return _SOURCE_CACHE[key]
    try:
        lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as e:
        raise LoweringError(f"cannot read the source of {getattr(fn, '__name__', fn)}: {e}")
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise LoweringError(f"{fn} is not a function definition")
    g = dict(fn.__globals__)
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                g[name] = cell.cell_contents
            except ValueError:
                pass
    src = FunctionSource(fn, fdef, file, g)
    _SOURCE_CACHE[key] = src
    return src


def _assigned_names(stmts) -> list[str]:
    """Names stored to anywhere in `stmts` (nested blocks included), in first-seen order."""
    seen = []
    for st in stmts:
        for node in ast.walk(st):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in seen:
                seen.append(node.id)
    return seen


def _is_constexpr_annotation(ann, g) -> bool:
    if ann is None:
        return False
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return "constexpr" in ann.value
    try:
        val = eval(compile(ast.Expression(ann), "<ann>", "eval"), g)
    except Exception:
        return "constexpr" in ast.unparse(ann)
    return val is tl.constexpr or getattr(val, "__name__", "") == "constexpr"


def constexpr_params(fn) -> list[str]:
    src = function_source(fn)
    return [a.arg for a in src.tree.args.args if _is_constexpr_annotation(a.annotation, src.globals)]


class Tracer:
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
        for i, name in enumerate(names):
            if name in known:
                t, value = known[name]
                with self.b.insert_into(body):
                    self.b.loc = Loc(src.file, src.tree.lineno, src.tree.name)
                    c = self.b.const(value, t.elem)
                c.name = name
                env[name] = TV(c, self.b)
            elif name in runtime:
                v = self.b.ids.value(runtime[name], body, name)
                body.args.append(v)
                params.append(Param(name, v, i))
                env[name] = TV(v, self.b)
            else:
                env[name] = constexprs[name]
        self.b.loc = Loc(src.file, src.tree.lineno, src.tree.name)
        with self.b.insert_into(body):
            try:
                self._exec_body(src.tree.body, env)
            except _Return as r:
                if r.value is not None:
                    raise LoweringError("a kernel cannot return a value", self.b.loc)
        ir = KernelIR(src.tree.name, params, body, dict(constexprs), Loc(src.file, src.tree.lineno, src.tree.name),
                      notes=self.notes, warp_groups=dict(self.warp_groups))
        body.args = []   # params are referenced through KernelIR.params
        return ir

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
        raise _Return(self._eval(st.value, env) if st.value is not None else None)

    def _st_Assert(self, st, env):
        cond = self._eval(st.test, env)
        if isinstance(cond, TV):
            raise self._err("assert on a runtime value is not supported (use tl.static_assert on constexprs)", st)
        if not cond:
            msg = self._eval(st.msg, env) if st.msg is not None else ""
            raise self._err(f"assertion failed: {msg}", st)

    # -- while -------------------------------------------------------------------------------------
    def _st_While(self, st, env):
        """`while cond:` with a runtime condition: a `while` op whose first region computes the condition
        from the carried values and whose second runs the body (scf.while's shape, condition first)."""
        if st.orelse:
            raise self._err("while ... else is not supported", st)
        assigned = _assigned_names(st.body)
        for n in assigned:
            if isinstance(env.get(n), (BlockPtr, Buffer)):
                raise self._err(f"'{n}' ({type(env[n]).__name__}) is changed in a while loop; carry a block "
                                f"pointer's or buffer's state through a `for` loop", st)
        carried = [n for n in assigned if n in env and (isinstance(env[n], TV) or is_num(env[n]))]
        inits = {n: env[n] if isinstance(env[n], TV) else S.const(self.b, env[n], S.num_dtype(env[n]))
                 for n in carried}
        types = {n: inits[n].type for n in carried}
        outer = _tiles_in(env)
        for _attempt in range(3):
            arg_types, names = [types[n] for n in carried], list(carried)
            before, body = self.b.new_block(arg_types, names), self.b.new_block(arg_types, names)
            with self.b.insert_into(before):
                self._while_condition(st, env, carried, before, outer)
            with self.b.insert_into(body):
                if self._while_body(st, env, carried, types, body, outer):
                    break        # a Python number became a runtime value of another type: retrace
        else:
            raise self._err("could not settle the types of loop-carried variables", st)
        self._loc(st)
        init_vals = [S.cast(inits[n], types[n].elem) if inits[n].type != types[n] else inits[n] for n in carried]
        op = self.b.while_op([v.v for v in init_vals], before, body)
        for n, r in zip(carried, op.results):
            r.name = n
            env[n] = traced(r, self.b)
        for n in assigned:     # values local to the body are not visible after the loop
            if n not in carried:
                env.pop(n, None)

    def _carried_outs(self, st, env, benv, carried, types) -> tuple[list, bool]:
        """The values a loop body hands on for its `carried` variables, and whether their types settled: a
        Python number that became a runtime value of another type updates `types` (the loop is retraced)."""
        outs, settled = [], True
        for n in carried:
            v = benv[n]
            if is_num(v):
                v = S.broadcast_to(S.const(self.b, v, types[n].elem), types[n].shape)
            if v.type != types[n]:
                if not isinstance(env[n], TV) and v.type.is_scalar:
                    types[n], settled = v.type, False
                    continue
                raise self._err(f"loop-carried variable '{n}' has type {types[n]} before the loop and "
                                f"{v.type} at the end of the body", st)
            outs.append(v)
        return outs, settled

    def _loop_scope(self, env, carried, block) -> dict:
        scope = dict(env)
        for n, a in zip(carried, block.args):
            scope[n] = traced(a, self.b)
        return scope

    def _while_condition(self, st, env, carried, before, outer):
        log = self._open_region()
        try:
            cond = self._eval(st.test, self._loop_scope(env, carried, before))
            if any(key in outer for key in log):
                raise self._err("a while condition that updates a tile in place is not supported", st)
        finally:
            self._close_region(log, outer)
        if not isinstance(cond, TV):
            raise self._err(f"a while condition must be a runtime scalar (it is the constant {cond!r} here): a "
                            f"loop of constant condition never ends or never runs", st)
        if not cond.type.is_scalar:
            raise self._err(f"a while condition must be a scalar, not a {cond.type} tile (reduce it first)", st)
        if not cond.dtype.is_bool:
            cond = S.compare(CmpPred.NE, cond, 0)
        self._loc(st)
        self.b.yield_([cond.v])

    def _while_body(self, st, env, carried, types, body, outer) -> bool:
        """Trace the body into `body`; True when done, False when a carried type changed (retrace)."""
        benv = self._loop_scope(env, carried, body)
        log = self._open_region()
        try:
            try:
                self._exec_body(st.body, benv)
            except _Return:
                raise self._err("`return` inside a loop is not supported", st)
            if any(key in outer for key in log):
                raise self._err("a while loop body that updates a tile from before the loop in place (tle.call) "
                                "is not supported; use a `for` loop", st)
            outs, settled = self._carried_outs(st, env, benv, carried, types)
            if settled:
                self._loc(st)
                self.b.yield_([v.v for v in outs])
            return settled
        finally:
            self._close_region(log, outer)

    def _st_With(self, st, env):
        """`with tle.gpu.warp_group(k):` and, inside one, `with tle.gpu.turn():` — their ops carry the block's
        attributes; nothing else is a context here."""
        usage = "kernels use `with` only as `with tle.gpu.warp_group(k):` or, inside one, `with tle.gpu.turn():`"
        if len(st.items) != 1 or st.items[0].optional_vars is not None or not isinstance(st.items[0].context_expr,
                                                                                          ast.Call):
            raise self._err(usage, st)
        call = st.items[0].context_expr
        fn = self._eval(call.func, env)
        if not (_hashable(fn) and fn in TLE_CONTEXTS):
            raise self._err(f"{usage}, not {ast.unparse(call)}", st)
        args = [self._eval(a, env) for a in call.args]
        kwargs = {k.arg: self._eval(k.value, env) for k in call.keywords}
        attrs, group, registers = TLE_CONTEXTS[fn](self, args, kwargs)
        outer = self.b.stamp
        if group is None:               # a turn: inside a warp-group block, not inside another turn
            if "warp_group" not in outer or "turn" in outer:
                raise self._err("tle.gpu.turn blocks go inside a tle.gpu.warp_group block, and do not nest", st)
        else:
            if outer:
                raise self._err("tle.gpu.warp_group blocks do not nest", st)
            if group in self.warp_groups and registers is not None and self.warp_groups[group] not in (None,
                                                                                                      registers):
                raise self._err(f"warp group {group} asks for {registers} registers here and "
                                f"{self.warp_groups[group]} elsewhere", st)
            if registers is not None or group not in self.warp_groups:
                self.warp_groups[group] = registers
        self.b.stamp = {**outer, **attrs}
        try:
            self._exec_body(st.body, env)
        finally:
            self.b.stamp = outer

    def _st_Break(self, st, env):
        raise self._err("break is not supported in kernels", st)

    def _st_Continue(self, st, env):
        raise self._err("continue is not supported in kernels", st)

    # -- if ----------------------------------------------------------------------------------------
    def _st_If(self, st, env):
        cond = self._eval(st.test, env)
        if not isinstance(cond, TV):
            self._exec_body(st.body if cond else st.orelse, env)
            return
        if not cond.type.is_scalar:
            raise self._err("`if` on a tile condition: use tl.where for element-wise selection", st)
        if not cond.dtype.is_bool:
            cond = S.compare(CmpPred.NE, cond, 0)
        then_env, else_env = dict(env), dict(env)
        then_blk, else_blk = self.b.new_block([]), self.b.new_block([])
        outer = _tiles_in(env)
        finals = []
        for blk, body, e in ((then_blk, st.body, then_env), (else_blk, st.orelse, else_env)):
            with self.b.insert_into(blk):
                log = self._open_region()
                try:
                    self._exec_body(body, e)
                except _Return:
                    raise self._err("`return` inside an `if` on a runtime condition is not supported", st)
                finally:
                    finals.append(self._close_region(log, outer))
        then_fin, else_fin = finals
        names = [n for n in _assigned_names(st.body + st.orelse)
                 if (n in then_env and n in else_env)]
        results, then_vals, else_vals = [], [], []
        for n in names:
            a, c = then_env[n], else_env[n]
            if a is c or (not isinstance(a, TV) and not isinstance(c, TV) and _same_py(a, c)):
                env[n] = a          # (a tile updated in place in a branch is merged below)
                continue
            if not isinstance(a, (TV,)) and not is_num(a) or not isinstance(c, TV) and not is_num(c):
                raise self._err(f"variable '{n}' is bound to different Python objects in the two branches", st)
            a, c = _at_end(a, then_fin), _at_end(c, else_fin)
            a, c = self._unify(n, a, c, then_blk, else_blk, st)
            results.append(n)
            then_vals.append(a)
            else_vals.append(c)
        updated = []                    # tiles that existed before the `if` and a branch updated in place
        for key in list(then_fin) + [k for k in else_fin if k not in then_fin]:
            tv = outer[key]
            a, c = then_fin.get(key, (tv, tv.v))[1], else_fin.get(key, (tv, tv.v))[1]
            if a is not c:
                updated.append(tv)
                then_vals.append(TV(a, self.b))
                else_vals.append(TV(c, self.b))
        for blk, vals in ((then_blk, then_vals), (else_blk, else_vals)):
            with self.b.insert_into(blk):
                self.b.yield_([v.v for v in vals])
        self._loc(st)
        op = self.b.if_op(cond.v, then_blk, else_blk, [v.type for v in then_vals])
        for n, r in zip(results, op.results):
            r.name = n
            env[n] = traced(r, self.b)
        for tv, r in zip(updated, op.results[len(results):]):
            r.name = tv.v.name
            self.rebind(tv, r)
        for n in _assigned_names(st.body + st.orelse):   # defined in one branch only: not usable after
            if n not in names and n in env and (n not in then_env or n not in else_env):
                env.pop(n, None)

    def _unify(self, name, a, c, blk_a, blk_c, node):
        """Make the two branch values of `name` one IR type (numbers become constants of the other's type)."""
        if is_num(a) and is_num(c):
            dt = S.num_dtype(a) if S.num_dtype(a) == S.num_dtype(c) else ir_types.fp32
            with self.b.insert_into(blk_a):
                a = S.const(self.b, a, dt)
            with self.b.insert_into(blk_c):
                c = S.const(self.b, c, dt)
        elif is_num(a):
            with self.b.insert_into(blk_a):
                a = S.broadcast_to(S.const(self.b, a, c.dtype), c.shape)
        elif is_num(c):
            with self.b.insert_into(blk_c):
                c = S.broadcast_to(S.const(self.b, c, a.dtype), a.shape)
        if a.type != c.type:
            raise self._err(f"variable '{name}' has type {a.type} in one branch and {c.type} in the other", node)
        return a, c

    # -- for ---------------------------------------------------------------------------------------
    def _st_For(self, st, env):
        if st.orelse:
            raise self._err("for ... else is not supported", st)
        it = st.iter
        if not isinstance(it, ast.Call):
            raise self._err("kernels loop over range(), tl.range(), tl.static_range() or tle.gpu.pipeline() only", st)
        fn = self._eval(it.func, env)
        args = [self._eval(a, env) for a in it.args]
        kwargs = {k.arg: self._eval(k.value, env) for k in it.keywords}
        if fn is tl.static_range:
            self._static_for(st, env, args, kwargs)
        elif _hashable(fn) and fn in TLE_RANGES:
            args, attrs = TLE_RANGES[fn](self, args, kwargs)
            self._dynamic_for(st, env, args, attrs)
        elif fn is py_builtins.range or fn is tl.range:
            attrs = {"kind": LoopKind.TL_RANGE if fn is tl.range else LoopKind.RANGE}
            if fn is tl.range:
                for key in ("num_stages", "loop_unroll_factor", "warp_specialize", "flatten",
                            "disallow_acc_multi_buffer", "disable_licm"):
                    if kwargs.get(key) is not None and kwargs.get(key) is not False:   # keep num_stages=0
                        attrs[key] = kwargs.pop(key)
                    else:
                        kwargs.pop(key, None)
            if kwargs:
                raise self._err(f"unsupported loop arguments {sorted(kwargs)}", st)
            self._dynamic_for(st, env, args, attrs)
        else:
            raise self._err(f"kernels loop over range(), tl.range(), tl.static_range() or tle.gpu.pipeline(), "
                            f"not {fn!r}", st)

    def _static_for(self, st, env, args, kwargs):
        if any(isinstance(a, TV) for a in args):
            raise self._err("tl.static_range bounds must be constexprs", st)
        if not isinstance(st.target, ast.Name):
            raise self._err("loop target must be a name", st)
        for i in range(*[int(a) for a in args]):
            env[st.target.id] = i
            self._exec_body(st.body, env)

    def _dynamic_for(self, st, env, args, attrs):
        if not isinstance(st.target, ast.Name):
            raise self._err("loop target must be a name", st)
        if len(args) == 1:
            lo, hi, step = 0, args[0], 1
        elif len(args) == 2:
            lo, hi, step = args[0], args[1], 1
        else:
            lo, hi, step = args
        # a runtime step (persistent kernels: range(pid, n, num_programs)) must be positive at run time, as
        # Triton's loops assume; a constexpr one may be negative
        if not isinstance(step, TV) and step == 0:
            raise self._err("a loop step of 0", st)
        ivt = ir_types.i32
        for x in (lo, hi, step):
            if isinstance(x, TV):
                if not x.type.is_scalar or not x.dtype.is_int:
                    raise self._err(f"loop bounds and step must be integer scalars, got {x.type}", st)
                ivt = ir_types.promote(ivt, x.dtype)
        lo_v, hi_v, st_v = (S.cast(as_tv(self.b, x, ivt), ivt) for x in (lo, hi, step))
        assigned = [n for n in _assigned_names(st.body) if n != st.target.id]
        # a block pointer the body advances is carried as its offsets, under names of their own
        packed = {n: [f"{n}_off{i}" for i in range(len(env[n].offsets))]
                  for n in assigned if isinstance(env.get(n), BlockPtr)}
        for n, fields in packed.items():
            env.update(zip(fields, env[n].offsets))
            assigned += fields
        carried = [n for n in assigned if n in env and (isinstance(env[n], TV) or is_num(env[n]))]
        inits = {}
        for n in carried:
            v = env[n]
            inits[n] = v if isinstance(v, TV) else S.const(self.b, v, S.num_dtype(v))
        types = {n: inits[n].type for n in carried}
        outer = _tiles_in(env)
        updated: list[TV] = []    # tiles from before the loop that the body updates in place (tle.call)
        for _attempt in range(3 + len(outer)):
            body = self.b.new_block([ir_types.scalar(ivt)] + [types[n] for n in carried] + [tv.type for tv in updated],
                                    [st.target.id] + carried + [tv.v.name for tv in updated])
            benv = dict(env)
            benv[st.target.id] = TV(body.args[0], self.b)
            for n, a in zip(carried, body.args[1:]):
                benv[n] = traced(a, self.b)
            for n, fields in packed.items():
                benv[n] = env[n].with_offsets(benv[f] for f in fields)
            with self.b.insert_into(body):
                log = self._open_region()
                try:
                    for tv, a in zip(updated, body.args[1 + len(carried):]):
                        self.rebind(tv, a)
                    try:
                        self._exec_body(st.body, benv)
                    except _Return:
                        raise self._err("`return` inside a loop is not supported", st)
                    for n, fields in packed.items():
                        bp = benv.get(n)
                        if not env[n].same_block(bp):
                            raise self._err(f"block pointer '{n}' is replaced in the loop body; only "
                                            f"tl.advance may change it there", st)
                        benv.update(zip(fields, bp.offsets))
                    outs, settled = self._carried_outs(st, env, benv, carried, types)
                    retry = not settled
                    new = [tv for key, (tv, _) in log.items()
                           if key in outer and all(tv is not u for u in updated)]
                    if new:                 # carry them too: retrace with a block argument for each
                        updated.extend(new)
                        retry = True
                    if not retry:
                        self._loc(st)
                        self.b.yield_([v.v for v in outs] + [tv.v for tv in updated])
                finally:
                    self._close_region(log, outer)
                if retry:
                    continue
            break
        else:
            raise self._err("could not settle the types of loop-carried variables", st)
        self._loc(st)
        init_vals = [S.cast(inits[n], types[n].elem) if inits[n].type != types[n] else inits[n] for n in carried]
        op = self.b.for_op(lo_v.v, hi_v.v, st_v.v, [v.v for v in init_vals] + [tv.v for tv in updated], body, attrs)
        for n, r in zip(carried, op.results):
            r.name = n
            env[n] = traced(r, self.b)
        for tv, r in zip(updated, op.results[len(carried):]):
            r.name = tv.v.name
            self.rebind(tv, r)
        for n in assigned:     # values local to the body are not visible after the loop
            if n not in carried and n not in packed:
                env.pop(n, None)
        for n, fields in packed.items():
            env[n] = env[n].with_offsets(env.pop(f) for f in fields)
        env.pop(st.target.id, None)

    # -- expressions --------------------------------------------------------------------------------
    def _eval(self, node, env):
        m = getattr(self, "_ex_" + type(node).__name__, None)
        if m is None:
            raise self._err(f"expression '{type(node).__name__}' is not supported in kernels", node)
        return m(node, env)

    def _lookup(self, name, env, node):
        if name in env:
            return env[name]
        g = self._src.globals
        if name in g:
            return g[name]
        if hasattr(py_builtins, name):
            return getattr(py_builtins, name)
        raise self._err(f"name '{name}' is not defined", node)

    def _ex_Name(self, node, env):
        return self._lookup(node.id, env, node)

    def _ex_Constant(self, node, env):
        return node.value

    def _ex_Tuple(self, node, env):
        return tuple(self._eval(e, env) for e in node.elts)

    def _ex_List(self, node, env):
        return [self._eval(e, env) for e in node.elts]

    def _ex_Dict(self, node, env):
        """A dict of Python values (tiles may be keys: they hash by identity), e.g. tle.call's layout."""
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                out.update(self._eval(v, env))
            else:
                key = self._eval(k, env)
                if not _hashable(key):
                    raise self._err(f"a dict key must be hashable, got {type(key).__name__}", node)
                out[key] = self._eval(v, env)
        return out

    def _ex_Slice(self, node, env):
        parts = [self._eval(p, env) if p is not None else None for p in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def _ex_JoinedStr(self, node, env):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value))
            else:
                out.append(format(self._eval(v.value, env)))
        return "".join(out)

    def _ex_Attribute(self, node, env):
        obj = self._eval(node.value, env)
        if isinstance(obj, TV) and node.attr in TENSOR_METHODS:
            return _TileMethod(self, TENSOR_METHODS[node.attr], obj)
        try:
            return getattr(obj, node.attr)
        except AttributeError:
            raise self._err(f"{type(obj).__name__} has no attribute '{node.attr}'", node)

    def _ex_Subscript(self, node, env):
        obj = self._eval(node.value, env)
        idx = self._eval(node.slice, env)
        return obj[idx]

    def _ex_BinOp(self, node, env):
        return self._binop(type(node.op), self._eval(node.left, env), self._eval(node.right, env), node)

    def _binop(self, optype, a, b, node):
        self._loc(node)
        if optype is ast.Pow and (isinstance(a, TV) or isinstance(b, TV)):
            raise self._err("** on runtime values is not supported (Triton semantics)", node)
        if optype is ast.MatMult:
            raise self._err("use tl.dot for matrix products", node)
        return _BINOPS[optype](a, b)

    def _ex_UnaryOp(self, node, env):
        x = self._eval(node.operand, env)
        self._loc(node)
        if isinstance(node.op, ast.Not):
            if isinstance(x, TV):
                return S.compare(CmpPred.EQ, x, 0) if not x.dtype.is_bool else ~x
            return not x
        return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[type(node.op)](x)

    def _ex_Compare(self, node, env):
        left = self._eval(node.left, env)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            right = self._eval(comp, env)
            self._loc(node)
            r = _CMPOPS[type(op)](left, right)
            result = r if result is None else self._logical(BinaryOp.AND, result, r)
            left = right
        return result

    def _ex_BoolOp(self, node, env):
        kind = BinaryOp.AND if isinstance(node.op, ast.And) else BinaryOp.OR
        result = self._eval(node.values[0], env)
        for v in node.values[1:]:
            if not isinstance(result, TV):     # Python short-circuit on constexprs
                if (kind is BinaryOp.AND and not result) or (kind is BinaryOp.OR and result):
                    return result
                result = self._eval(v, env)
                continue
            result = self._logical(kind, result, self._eval(v, env))
        return result

    def _logical(self, kind, a, b):
        if not isinstance(a, TV) and not isinstance(b, TV):
            return (a and b) if kind is BinaryOp.AND else (a or b)
        tv = a if isinstance(a, TV) else b
        a = as_tv(tv.b, a)
        b = as_tv(tv.b, b)
        a = a if a.dtype.is_bool else S.compare(CmpPred.NE, a, 0)
        b = b if b.dtype.is_bool else S.compare(CmpPred.NE, b, 0)
        return S.bitwise(kind, a, b)

    def _ex_IfExp(self, node, env):
        cond = self._eval(node.test, env)
        if isinstance(cond, TV):
            return S.where(cond, self._eval(node.body, env), self._eval(node.orelse, env))
        return self._eval(node.body if cond else node.orelse, env)

    def _ex_Call(self, node, env):
        fn = self._eval(node.func, env)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self._eval(a.value, env))
            else:
                args.append(self._eval(a, env))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                kwargs.update(self._eval(k.value, env))
            else:
                kwargs[k.arg] = self._eval(k.value, env)
        self._loc(node)
        return self.call(fn, args, kwargs, node)

    def call(self, fn, args, kwargs, node=None):
        impl = self.builtins.get(fn) if _hashable(fn) else None
        if impl is not None:
            if not getattr(impl, "takes_buffers", False):
                _reject_buffers(fn, list(args) + list(kwargs.values()), self.b.loc)
            try:
                return impl(self, *args, **kwargs)
            except TypeError as e:
                raise self._err(f"bad arguments to {getattr(fn, '__name__', fn)}: {e}", node)
        inner = unwrap_jit(fn)
        if inner is not None:
            return self._inline(inner, args, kwargs, node)
        if getattr(fn, "__self__", None) is not None and isinstance(fn.__self__, TV):
            return fn(*args, **kwargs)
        if isinstance(getattr(fn, "__self__", None), TensorDescriptor):
            try:
                return fn(*args, **kwargs)
            except TypeError as e:
                raise self._err(f"bad arguments to desc.{fn.__name__}: {e}", node)
        if isinstance(fn, _TileMethod):
            return fn(*args, **kwargs)
        if fn is tl.range or fn is tl.static_range or (_hashable(fn) and fn in TLE_RANGES):
            raise self._err(f"{fn.__name__} can only be used as the iterable of a for loop", node)
        if any(isinstance(a, TV) for a in list(args) + list(kwargs.values())):
            name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
            mod = getattr(fn, "__module__", "") or ""
            if mod.startswith("triton"):
                raise self._err(f"Triton builtin '{mod}.{name}' is not supported by tle yet", node)
            raise self._err(f"call to '{name}' on runtime values: only tle/Triton builtins and "
                            f"@tle.jit functions can take tiles", node)
        if fn in _PY_CALLABLE_OK or _is_plain_python(fn):
            return fn(*args, **kwargs)
        raise self._err(f"call to {fn!r} is not supported in kernels", node)

    def _inline(self, fn, args, kwargs, node):
        if self._depth > 32:
            raise self._err("call depth over 32: recursive @jit functions are not supported", node)
        src = function_source(fn)
        sig = inspect.signature(fn)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise self._err(f"calling {fn.__name__}: {e}", node)
        bound.apply_defaults()
        saved, saved_loc = self._src, self.b.loc
        self._src = src
        self._depth += 1
        try:
            self._exec_body(src.tree.body, dict(bound.arguments))
            result = None
        except _Return as r:
            result = r.value
        finally:
            self._src = saved
            self._depth -= 1
            self.b.loc = saved_loc
        return result


class _TileMethod:
    """`x.sum(axis)` and friends: a Triton builtin bound to the tile it was looked up on."""

    def __init__(self, tracer, impl, tile):
        self.tracer, self.impl, self.tile = tracer, impl, tile

    def __call__(self, *args, **kwargs):
        return self.impl(self.tracer, self.tile, *args, **kwargs)


def _hashable(x) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False


def _tiles_in(env: dict) -> dict[int, TV]:
    """id -> TV of every tile reachable from the variables in `env` (in tuples, lists and dicts too)."""
    out: dict[int, TV] = {}
    seen: set[int] = set()

    def visit(x, depth):
        if isinstance(x, TV):
            out[id(x)] = x
        elif isinstance(x, (tuple, list, dict)) and depth < 8 and id(x) not in seen:
            seen.add(id(x))
            for item in (list(x.keys()) + list(x.values()) if isinstance(x, dict) else x):
                visit(item, depth + 1)

    for value in env.values():
        visit(value, 0)
    return out


def _at_end(x, finals: dict):
    """`x` as it stood at the end of a region whose in-place updates were undone (`finals`)."""
    if isinstance(x, TV) and id(x) in finals:
        return traced(finals[id(x)][1], x.b)
    return x


def _same_py(a, b) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:
        return False


def _is_plain_python(fn) -> bool:
    """Pure-Python helpers on constexprs (math.log2, triton.next_power_of_2, user functions...)."""
    mod = getattr(fn, "__module__", "") or ""
    return callable(fn) and not mod.startswith("triton.language")


TLE_BUILTINS = {}
TLE_RANGES = {}     # iterables of a for loop (tle.gpu.pipeline) -> (tracer, args, kwargs) -> (args, attrs)
# context managers of a with statement (tle.gpu.warp_group, tle.gpu.turn) -> (tracer, args, kwargs) ->
# (op attrs, group or None, registers)
TLE_CONTEXTS = {}


def register_tle_builtin(fn, impl):
    TLE_BUILTINS[fn] = impl


def register_tle_range(fn, attrs):
    TLE_RANGES[fn] = attrs


def register_tle_context(fn, scope):
    TLE_CONTEXTS[fn] = scope


def _reject_buffers(fn, args, loc):
    for a in args:
        items = a if isinstance(a, (list, tuple)) else [a]
        for x in items:
            if isinstance(x, Buffer):
                name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or str(fn)
                raise LoweringError(f"{name} got a tle.gpu buffer ({x.v.type}); it takes tiles: read the buffer "
                                    f"with tle.gpu.local_load(buf)", loc)


def make_tracer() -> Tracer:
    return Tracer(TLE_BUILTINS)


__all__ = ["Tracer", "make_tracer", "constexpr_params", "function_source", "tle_load", "register_tle_builtin",
           "register_tle_range", "register_tle_context"]
