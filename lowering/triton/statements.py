"""Statement rules: ops written as Triton statements (stores, loops, branches, raw calls), and the
statement binding a named value. `g` is the code generator (lowering/triton/codegen.py)."""
from __future__ import annotations

import re

from ..errors import UnsupportedConstruct
from ..ir.core import Op
from ..ir.ops import CACHE_HINTS
from . import expressions
from .raw_render import render_triton, require_elementwise
from .rules import RULES

BACKEND = "triton"
# tle.gpu buffers are register tiles here (stock Triton has no explicit shared memory): a buffer
# version is the tile it holds, an allocation's contents (undefined) are zeros.
IN_REGISTERS = "a register tile (stock Triton has no explicit shared memory)"


def _rule(*ops):
    return RULES.rule(*ops, role="statement")


def how_issued(op: Op) -> str:
    """What became of an asynchronous load on Triton, in words (after pipeline_async_loads marked it)."""
    if op.attrs.get("async") == "pipelined":
        return (f"loop pipelined (num_stages={op.attrs['async_stages']}); Triton's pipeliner picks the loads it "
                "issues ahead as cp.async (ttgir: async_copy_global_to_local)")
    return op.attrs.get("async", "plain load")


@_rule("yield")
def yield_(g, op: Op, indent: int):
    """Written by the loop or branch that owns it."""


@_rule("store", "copy_out")
def store(g, op: Op, indent: int):
    ptr, val, mask = op.operands
    args = [g.expr(ptr), g.expr(val)]
    if mask is not None:
        args.append(f"mask={g.expr(mask)}")
    for key in CACHE_HINTS:
        if op.attrs.get(key):
            args.append(f"{key}={op.attrs[key]!r}")
    g.emit(f"tl.store({', '.join(args)})", indent)


@_rule("descriptor_store", "descriptor_atomic")
def descriptor_store(g, op: Op, indent: int):
    desc, val, *offsets = op.operands
    method = "store" if op.name == "descriptor_store" else f"atomic_{op.attrs['kind']}"
    g.emit(f"{g.expr(desc)}.{method}({expressions.ints(g, offsets)}, {g.expr(val)})", indent)


def value(g, op: Op, indent: int):
    """An op with a result: nothing where it is written inline at its use, else `name = expression`."""
    if g.inline(op):
        return
    if op.name in ("atomic", "atomic_cas") and not g.users.get(op.result.id):
        g.emit(g.render(op), indent)         # done for its effect: the old values are not used
        return
    name = g.ids[op.result] if op.result in g.ids else g.ids.define(op.result)
    note = f"  # tle.load(is_async=True): {how_issued(op)}" if op.name == "load" and op.attrs.get("is_async") else ""
    if op.name in ("copy_in", "local_store") and _first_write(op):
        t = op.result.type
        g.emit(f"# tle.gpu.alloc {op.result.name or name} {list(t.shape)} {t.elem}: {IN_REGISTERS}", indent)
    g.emit(f"{name} = {g.render(op)}{note}", indent)


def _first_write(op: Op) -> bool:
    """Is `op` the first write of a buffer straight after its tle.gpu.alloc?"""
    d = op.operands[3 if op.name == "copy_in" else 0].defining_op
    return d is not None and d.name == "alloc"


@_rule("raw_call")
def raw_call(g, op: Op, indent: int):
    """tle.call: an element-wise raw function becomes whole-tile statements over the argument tiles;
    each written argument's result is then bound to its own name."""
    fn = op.attrs["fn"]
    body = fn.body()
    try:
        ew = require_elementwise(body, op.attrs["threads"])
    except UnsupportedConstruct as e:        # name the call site; the reason names the function's line
        prefix = f"backend '{e.backend}' cannot express {e.construct}: "
        detail = e.message[len(prefix):] if e.message.startswith(prefix) else e.message
        where = f" (at {e.loc})" if e.loc is not None and e.loc != op.loc else ""
        raise UnsupportedConstruct(e.construct, BACKEND, op.loc, f"{detail}{where}") from None
    exprs = []
    for v in op.operands:
        e = g.expr(v)
        if not re.fullmatch(r"[A-Za-z_]\w*", e):      # the renderer composes operands as plain names
            name = g.ids.fresh(v.name or fn.params[len(exprs)])
            g.emit(f"{name} = {e}", indent)
            e = name
        exprs.append(e)
    g.emit(f"# tle.call({fn.name}): element-wise raw MLIR function, inlined as tile code", indent)
    made = set()

    def fresh(hint=None):
        name = g.ids.fresh(hint or "raw")
        made.add(name)
        return name

    lines, finals = render_triton(ew, exprs, names=fresh)
    outputs = op.attrs["outputs"]
    pairs = []
    for k, r in zip(outputs, op.results):
        name = g.ids[r] if r in g.ids else g.ids.define(r)
        f = finals[k]
        if f == name:
            continue
        if f in made and name not in [finals[j] for j in outputs if j != k] and \
                _rename_definition(lines, f, name):
            continue        # the statement computing the output's last value defines its name itself
        pairs.append((name, f))
    for line in lines:
        g.emit(line, indent)
    if pairs:       # one assignment: a final value may be another output's previous tile
        g.emit(f"{', '.join(p[0] for p in pairs)} = {', '.join(p[1] for p in pairs)}", indent)


def _carried_name(g, loop: Op, init, arg) -> str:
    """The variable of a loop-carried value (block argument `arg`): the source's own name, kept across the
    loop where nothing but the loop reads its initial value, else a fresh one."""
    if init in g.ids and all(u is loop for u in g.users.get(init.id, [])) and \
            g.ids[init].split("_")[0] == (arg.name or "").split("_")[0]:
        g.ids.alias(arg, g.ids[init])
        return g.ids[init]
    return g.ids.define(arg)


@_rule("for")
def for_(g, op: Op, indent: int):
    lo, hi, st, *inits = op.operands
    iv, *carried = op.body.args
    y = op.body.terminator
    yields = y.operands if y else []
    order = {id(o): i for i, o in enumerate(op.body.ops)}
    names = []
    for c, r, init, out in zip(carried, op.results, inits, yields):
        nm = _carried_name(g, op, init, c)
        g.ids.alias(r, nm)
        names.append(nm)
        if g.can_write_in_place(c, out, op.body, order):
            g.ids.alias(out, nm)
    g.assign_many(names, inits, indent)
    ivn = g.ids.define(iv)
    bounds = [g.expr(lo), g.expr(hi)]
    if not (st.defining_op is not None and st.defining_op.name == "const" and st.defining_op.attrs["value"] == 1):
        bounds.append(g.expr(st))
    elif bounds[0] == "0":
        bounds = bounds[1:]
    kw = []
    for key in ("num_stages", "loop_unroll_factor", "warp_specialize", "flatten", "disallow_acc_multi_buffer",
                "disable_licm"):
        if key in op.attrs:
            kw.append(f"{key}={op.attrs[key]!r}")
    it = "tl.range" if op.attrs.get("kind") == "tl.range" or kw else "range"
    if "async_raised_from" in op.attrs:
        g.emit(f"# pipelined for tle.load(is_async=True) (the kernel asked for num_stages="
                  f"{op.attrs['async_raised_from']})", indent)
    g.emit(f"for {ivn} in {it}({', '.join(bounds + kw)}):", indent)
    g.block(op.body, indent + 1)
    y = op.body.terminator
    g.assign_many(names, y.operands if y else [], indent + 1)
    if len(op.body.ops) == 0 or (len(op.body.ops) == 1 and y is not None and not names):
        g.emit("pass", indent + 1)


@_rule("while")
def while_(g, op: Op, indent: int):
    """`while cond:`. The condition region's statements (a load it reads, a value used twice) run before the
    loop and again at the end of the body, so Triton re-evaluates `cond` from this step's values."""
    before, body = op.regions
    names = []
    for a, b, r, init in zip(before.args, body.args, op.results, op.operands):
        nm = _carried_name(g, op, init, a)
        g.ids.alias(b, nm)
        g.ids.alias(r, nm)
        names.append(nm)
    g.assign_many(names, list(op.operands), indent)
    start = len(g.lines)
    g.block(before, indent)
    condition = g.lines[start:]
    g.emit(f"while {g.expr(before.terminator.operands[0])}:", indent)
    order = {id(o): i for i, o in enumerate(body.ops)}
    y = body.terminator
    for nm, b, out in zip(names, body.args, y.operands):
        if g.can_write_in_place(b, out, body, order):
            g.ids.alias(out, nm)
    g.block(body, indent + 1)
    g.assign_many(names, list(y.operands), indent + 1)
    g.lines.extend("    " + line for line in condition)
    if all(line.startswith("    " * (indent + 1) + "#") for line in g.lines[start + len(condition) + 1:]):
        g.emit("pass", indent + 1)


@_rule("print")
def device_print(g, op: Op, indent: int):
    args = [repr(op.attrs["prefix"])] + [g.expr(v) for v in op.operands]
    hexa = ", hex=True" if op.attrs["hex"] else ""
    g.emit(f"tl.device_print({', '.join(args)}{hexa})", indent)


@_rule("assert")
def device_assert(g, op: Op, indent: int):
    g.emit(f"tl.device_assert({g.expr(op.operands[0])}, {op.attrs['msg']!r})", indent)


@_rule("if")
def if_(g, op: Op, indent: int):
    names = [g.ids.define(r) for r in op.results]
    for blk in op.regions:          # compute a branch's value straight into the merged variable
        y = blk.terminator
        for nm, out in zip(names, y.operands if y else []):
            d = out.defining_op
            if d is not None and d.parent is blk and out not in g.ids and not g.inline(d) and \
                    d.name not in ("for", "while", "if") and \
                    all(u is y for u in g.users.get(out.id, [])) and \
                    nm not in [g.expr(o) for o in (y.operands if y else []) if o is not out and o in g.ids]:
                g.ids.alias(out, nm)
    g.emit(f"if {g.expr(op.operands[0])}:", indent)
    for i, blk in enumerate(op.regions):
        if i == 1:
            g.emit("else:", indent)
        before = len(g.lines)
        g.block(blk, indent + 1)
        y = blk.terminator
        g.assign_many(names, y.operands if y else [], indent + 1)
        if len(g.lines) == before:
            g.emit("pass", indent + 1)


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


