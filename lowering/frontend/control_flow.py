"""How the tracer traces a kernel's control flow: while and for loops (carried values, static and dynamic
ranges, pipelines), if statements (values unified across branches) and with blocks (the TLE contexts)."""
from __future__ import annotations

import ast
import builtins as py_builtins

import triton.language as tl

from ..ir import types as ir_types
from ..ir.ops import CmpPred, LoopKind
from . import semantics as S
from .block_ptr import BlockPtr
from .environment import ReturnSignal, at_end, hashable, same_py, tiles_in
from .extensions import TLE_CONTEXTS, TLE_RANGES
from .gpu import Buffer, traced
from .semantics import TV, as_tv, is_num
from .source import assigned_names


class ControlFlow:
    """The tracer's structured control flow (a mixin of Tracer): while, with, if and for statements."""

    # -- while -------------------------------------------------------------------------------------
    def _st_While(self, st, env):
        """`while cond:` with a runtime condition: a `while` op whose first region computes the condition
        from the carried values and whose second runs the body (scf.while's shape, condition first)."""
        if st.orelse:
            raise self._err("while ... else is not supported", st)
        assigned = assigned_names(st.body)
        for n in assigned:
            if isinstance(env.get(n), (BlockPtr, Buffer)):
                raise self._err(f"'{n}' ({type(env[n]).__name__}) is changed in a while loop; carry a block "
                                f"pointer's or buffer's state through a `for` loop", st)
        carried = [n for n in assigned if n in env and (isinstance(env[n], TV) or is_num(env[n]))]
        inits = {n: env[n] if isinstance(env[n], TV) else S.const(self.b, env[n], S.num_dtype(env[n]))
                 for n in carried}
        types = {n: inits[n].type for n in carried}
        outer = tiles_in(env)
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
        local = [n for n in carried if n not in benv]
        if local:       # the body leaves them undefined (a for loop's target): local to it, not carried (retrace)
            for n in local:
                carried.remove(n)
                types.pop(n)
            return [], False
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
            except ReturnSignal:
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
        if not (hashable(fn) and fn in TLE_CONTEXTS):
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
        outer = tiles_in(env)
        finals = []
        for blk, body, e in ((then_blk, st.body, then_env), (else_blk, st.orelse, else_env)):
            with self.b.insert_into(blk):
                log = self._open_region()
                try:
                    self._exec_body(body, e)
                except ReturnSignal:
                    raise self._err("`return` inside an `if` on a runtime condition is not supported", st)
                finally:
                    finals.append(self._close_region(log, outer))
        then_fin, else_fin = finals
        names = [n for n in assigned_names(st.body + st.orelse)
                 if (n in then_env and n in else_env)]
        results, then_vals, else_vals = [], [], []
        for n in names:
            a, c = then_env[n], else_env[n]
            if a is c or (not isinstance(a, TV) and not isinstance(c, TV) and same_py(a, c)):
                env[n] = a          # (a tile updated in place in a branch is merged below)
                continue
            if not isinstance(a, (TV,)) and not is_num(a) or not isinstance(c, TV) and not is_num(c):
                raise self._err(f"variable '{n}' is bound to different Python objects in the two branches", st)
            a, c = at_end(a, then_fin), at_end(c, else_fin)
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
        for n in assigned_names(st.body + st.orelse):   # defined in one branch only: not usable after
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
        elif hashable(fn) and fn in TLE_RANGES:
            args, attrs = TLE_RANGES[fn](self, args, kwargs)
            self._dynamic_for(st, env, args, attrs)
        elif fn is py_builtins.range or fn is tl.range:
            attrs = {"kind": LoopKind.TL_RANGE if fn is tl.range else LoopKind.RANGE}
            if fn is tl.range:
                for key in ("num_stages", "loop_unroll_factor", "warp_specialize", "flatten",
                            "disallow_acc_multi_buffer", "disable_licm"):
                    # keep num_stages=0; warp_specialize=False asks for something on TileLang (splitting is its
                    # default there), the other flags only when set
                    value = kwargs.get(key)
                    if value is not None and (value is not False or key == "warp_specialize"):
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
        assigned = [n for n in assigned_names(st.body) if n != st.target.id]
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
        outer = tiles_in(env)
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
                    except ReturnSignal:
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
