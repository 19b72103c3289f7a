"""Statement rules: ops written as Triton statements (stores, loops, branches, raw calls), and the
statement binding a named value. `gen` is the code generator (lowering/triton/codegen.py)."""
from __future__ import annotations

import re

from ..errors import UnsupportedConstruct
from ..ir import ops
from ..ir.core import Op
from ..ir.ops import CACHE_HINTS, LoopKind, Trait
from . import expressions
from .raw_dialect_call import flagtree_call
from .raw_render import render_triton, require_elementwise
from ..rules import RuleSet

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table

BACKEND = "triton"
# tle.gpu buffers are register tiles here (stock Triton has no explicit shared memory): a buffer
# version is the tile it holds, an allocation's contents (undefined) are zeros.
IN_REGISTERS = "a register tile (stock Triton has no explicit shared memory)"


def _rule(*defs):
    return RULE_SET.rule(*defs, role="statement")


def how_issued(op: Op) -> str:
    """What became of an asynchronous load on Triton, in words (after pipeline_async_loads marked it)."""
    issue = op.attrs.get("async")
    if issue is None:
        return "plain load"
    if issue.pipelined:
        return (f"loop pipelined (num_stages={op.attrs['async_stages']}); Triton's pipeliner picks the loads it "
                "issues ahead as cp.async (ttgir: async_copy_global_to_local)")
    return f"plain: {issue.why}"


@_rule(ops.YIELD)
def yield_(gen, op: Op, indent: int):
    """Written by the loop or branch that owns it."""


@_rule(ops.STORE, ops.COPY_OUT)
def store(gen, op: Op, indent: int):
    ptr, mask = op.operand("ptr"), op.operand("mask")
    val = op.operand("buf") if op.defn is ops.COPY_OUT else op.operand("value")
    args = [gen.expr(ptr), gen.expr(val)]
    if mask is not None:
        args.append(f"mask={gen.expr(mask)}")
    for key in CACHE_HINTS:
        if op.attrs.get(key):
            args.append(f"{key}={op.attrs[key]!r}")
    gen.emit(f"tl.store({', '.join(args)})", indent)


@_rule(ops.DESCRIPTOR_STORE, ops.DESCRIPTOR_ATOMIC)
def descriptor_store(gen, op: Op, indent: int):
    desc, val, offsets = op.operand("desc"), op.operand("value"), op.operand_group("offsets")
    method = "store" if op.defn is ops.DESCRIPTOR_STORE else f"atomic_{op.attrs['kind']}"
    gen.emit(f"{gen.expr(desc)}.{method}({expressions.ints(gen, offsets)}, {gen.expr(val)})", indent)


def value(gen, op: Op, indent: int):
    """An op with a result: nothing where it is written inline at its use, else `name = expression`."""
    if gen.inline(op):
        return
    if op.defn in (ops.ATOMIC, ops.ATOMIC_CAS) and not gen.users.get(op.result.id):
        gen.emit(gen.render(op), indent)         # done for its effect: the old values are not used
        return
    name = gen.ids[op.result] if op.result in gen.ids else gen.ids.define(op.result)
    note = f"  # tle.load(is_async=True): {how_issued(op)}" if op.defn is ops.LOAD and op.attrs.get("is_async") else ""
    if op.has(Trait.BUFFER_WRITE) and _first_write(op):
        t = op.result.type
        gen.emit(f"# tle.gpu.alloc {op.result.name or name} {list(t.shape)} {t.elem}: {IN_REGISTERS}", indent)
    gen.emit(f"{name} = {gen.render(op)}{note}", indent)


def _first_write(op: Op) -> bool:
    """Is `op` the first write of a buffer straight after its tle.gpu.alloc?"""
    d = op.operand("buf").defining_op
    return d is not None and d.defn is ops.ALLOC


@_rule(ops.RAW_CALL)
def raw_call(gen, op: Op, indent: int):
    """tle.call: an element-wise raw function becomes whole-tile statements over the argument tiles;
    each written argument's result is then bound to its own name. A tle.raw.dialect function is linked
    LLVM IR (raw_dialect_call.py)."""
    fn = op.attrs["fn"]
    body = fn.body()
    if getattr(fn, "flagtree", False):      # thread-level code: LLVM IR linked into the kernel
        return flagtree_call(gen, op, body, indent)
    try:
        ew = require_elementwise(body, op.attrs["threads"])
    except UnsupportedConstruct as e:        # name the call site; the reason names the function's line
        prefix = f"backend '{e.backend}' cannot express {e.construct}: "
        detail = e.message[len(prefix):] if e.message.startswith(prefix) else e.message
        where = f" (at {e.loc})" if e.loc is not None and e.loc != op.loc else ""
        raise UnsupportedConstruct(e.construct, BACKEND, op.loc, f"{detail}{where}") from None
    exprs = []
    for v in op.operands:
        e = gen.expr(v)
        if not re.fullmatch(r"[A-Za-z_]\w*", e):      # the renderer composes operands as plain names
            name = gen.ids.fresh(v.name or fn.params[len(exprs)])
            gen.emit(f"{name} = {e}", indent)
            e = name
        exprs.append(e)
    gen.emit(f"# tle.call({fn.name}): element-wise raw MLIR function, inlined as tile code", indent)
    made = set()

    def fresh(hint=None):
        name = gen.ids.fresh(hint or "raw")
        made.add(name)
        return name

    lines, finals = render_triton(ew, exprs, names=fresh)
    outputs = op.attrs["outputs"]
    pairs = []
    for k, r in zip(outputs, op.results):
        name = gen.ids[r] if r in gen.ids else gen.ids.define(r)
        f = finals[k]
        if f == name:
            continue
        if f in made and name not in [finals[j] for j in outputs if j != k] and \
                _rename_definition(lines, f, name):
            continue        # the statement computing the output's last value defines its name itself
        pairs.append((name, f))
    for line in lines:
        gen.emit(line, indent)
    if pairs:       # one assignment: a final value may be another output's previous tile
        gen.emit(f"{', '.join(p[0] for p in pairs)} = {', '.join(p[1] for p in pairs)}", indent)


def _carried_name(gen, loop: Op, init, arg) -> str:
    """The variable of a loop-carried value (block argument `arg`): the source's own name, kept across the
    loop where nothing but the loop reads its initial value, else a fresh one."""
    if init in gen.ids and all(u is loop for u in gen.users.get(init.id, [])) and \
            gen.ids[init].split("_")[0] == (arg.name or "").split("_")[0]:
        gen.ids.alias(arg, gen.ids[init])
        return gen.ids[init]
    return gen.ids.define(arg)


@_rule(ops.FOR)
def for_(gen, op: Op, indent: int):
    lo, hi, st, inits = op.operand("lower"), op.operand("upper"), op.operand("step"), op.operand_group("inits")
    iv, *carried = op.body.args
    y = op.body.terminator
    yields = y.operands if y else []
    order = {id(o): i for i, o in enumerate(op.body.ops)}
    names = []
    for c, r, init, out in zip(carried, op.results, inits, yields):
        nm = _carried_name(gen, op, init, c)
        gen.ids.alias(r, nm)
        names.append(nm)
        if gen.can_write_in_place(c, out, op.body, order):
            gen.ids.alias(out, nm)
    gen.assign_many(names, inits, indent)
    ivn = gen.ids.define(iv)
    bounds = [gen.expr(lo), gen.expr(hi)]
    if not (st.defining_op is not None and st.defining_op.defn is ops.CONST and st.defining_op.attrs["value"] == 1):
        bounds.append(gen.expr(st))
    elif bounds[0] == "0":
        bounds = bounds[1:]
    kw = []
    for key in ("num_stages", "loop_unroll_factor", "warp_specialize", "flatten", "disallow_acc_multi_buffer",
                  "disable_licm"):
        if key in op.attrs:
              kw.append(f"{key}={op.attrs[key]!r}")
    it = "tl.range" if op.attrs.get("kind") is LoopKind.TL_RANGE or kw else "range"
    if "async_raised_from" in op.attrs:
        gen.emit(f"# pipelined for tle.load(is_async=True) (the kernel asked for num_stages="
                  f"{op.attrs['async_raised_from']})", indent)
    gen.emit(f"for {ivn} in {it}({', '.join(bounds + kw)}):", indent)
    gen.block(op.body, indent + 1)
    y = op.body.terminator
    gen.assign_many(names, y.operands if y else [], indent + 1)
    if len(op.body.ops) == 0 or (len(op.body.ops) == 1 and y is not None and not names):
        gen.emit("pass", indent + 1)


@_rule(ops.WHILE)
def while_(gen, op: Op, indent: int):
    """`while cond:`. The condition region's statements (a load it reads, a value used twice) run before the
    loop and again at the end of the body, so Triton re-evaluates `cond` from this step's values."""
    before, body = op.regions
    names, inits = [], op.operand_group("inits")
    for a, b, r, init in zip(before.args, body.args, op.results, inits):
        nm = _carried_name(gen, op, init, a)
        gen.ids.alias(b, nm)
        gen.ids.alias(r, nm)
        names.append(nm)
    gen.assign_many(names, inits, indent)
    start = len(gen.lines)
    gen.block(before, indent)
    condition = gen.lines[start:]
    gen.emit(f"while {gen.expr(before.terminator.operands[0])}:", indent)
    order = {id(o): i for i, o in enumerate(body.ops)}
    y = body.terminator
    for nm, b, out in zip(names, body.args, y.operands):
        if gen.can_write_in_place(b, out, body, order):
            gen.ids.alias(out, nm)
    gen.block(body, indent + 1)
    gen.assign_many(names, list(y.operands), indent + 1)
    gen.lines.extend("    " + line for line in condition)
    if all(line.startswith("    " * (indent + 1) + "#") for line in gen.lines[start + len(condition) + 1:]):
        gen.emit("pass", indent + 1)


@_rule(ops.PRINT)
def device_print(gen, op: Op, indent: int):
    args = [repr(op.attrs["prefix"])] + [gen.expr(v) for v in op.operands]
    hexa = ", hex=True" if op.attrs["hex"] else ""
    gen.emit(f"tl.device_print({', '.join(args)}{hexa})", indent)


@_rule(ops.ASSERT)
def device_assert(gen, op: Op, indent: int):
    gen.emit(f"tl.device_assert({gen.expr(op.operand('cond'))}, {op.attrs['msg']!r})", indent)


@_rule(ops.ASSUME)
def assume(gen, op: Op, indent: int):
    gen.emit(f"tl.assume({gen.expr(op.operand('cond'))})", indent)


@_rule(ops.BARRIER)
def debug_barrier(gen, op: Op, indent: int):
    gen.emit("tl.debug_barrier()", indent)


@_rule(ops.IF)
def if_(gen, op: Op, indent: int):
    names = [gen.ids.define(r) for r in op.results]
    for blk in op.regions:          # compute a branch's value straight into the merged variable
        y = blk.terminator
        for nm, out in zip(names, y.operands if y else []):
            d = out.defining_op
            if d is not None and d.parent is blk and out not in gen.ids and not gen.inline(d) and \
                    not (d.has(Trait.LOOP) or d.has(Trait.BRANCH)) and \
                    all(u is y for u in gen.users.get(out.id, [])) and \
                    nm not in [gen.expr(o) for o in (y.operands if y else []) if o is not out and o in gen.ids]:
                gen.ids.alias(out, nm)
    gen.emit(f"if {gen.expr(op.operand('cond'))}:", indent)
    for i, blk in enumerate(op.regions):
        if i == 1:
            gen.emit("else:", indent)
        before = len(gen.lines)
        gen.block(blk, indent + 1)
        y = blk.terminator
        gen.assign_many(names, y.operands if y else [], indent + 1)
        if len(gen.lines) == before:
            gen.emit("pass", indent + 1)


def _rename_definition(lines: list[str], old: str, new: str) -> bool:
    """Rename `old` to `new` in `lines` (in place) where `old` is used only by its one definition
    `old = ...` and nothing after that definition reads `new`; whether it was renamed."""
    uses = [i for i, ln in enumerate(lines) if re.search(rf"\b{re.escape(old)}\b", ln)]
    if len(uses) != 1 or not lines[uses[0]].startswith(f"{old} = ") or \
            len(re.findall(rf"\b{re.escape(old)}\b", lines[uses[0]])) != 1:
        return False
    if any(re.search(rf"\b{re.escape(new)}\b", ln) for ln in lines[uses[0] + 1:]):
        return False
    lines[uses[0]] = new + lines[uses[0]][len(old):]
    return True


