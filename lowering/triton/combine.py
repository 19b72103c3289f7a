"""tl.associative_scan and tl.reduce with the kernel's own combine function: the traced combine region is
written as a module-level `@triton.jit` function, `_combine_<name>` (one per distinct text), and the use
is Triton's own call with it."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import KernelIR, Op
from ..rules import RuleSet

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table


def combine_function(gen, op: Op) -> str:
    """The name of the helper computing `op`'s combine region, written by a code generator of its own
    (the helper is a function of its own, with its own names)."""
    region = op.regions[0]
    sub = type(gen)(KernelIR(op.attrs["fn"], [], region, {}, op.loc))
    params = [sub.ids.define(a, a.name) for a in region.args]
    sub.block(region, 1)
    # constants are written typed: a bare literal would be a Python number, not a value of the input's dtype
    sub.emit(f"return {', '.join(sub.carried_expr(v) for v in region.terminator.operands)}", 1)
    for line in sub.imports:
        gen.need_import(line)
    return gen.function(f"_combine_{op.attrs['fn'].lstrip('_')}", params, sub.lines)


@RULE_SET.rule(ops.COMBINE_SCAN, ops.COMBINE_REDUCE, role="statement")
def combine(gen, op: Op, indent: int):
    """`a, b = tl.associative_scan((x, y), axis, _combine_f, reverse=True)`, or `tl.reduce(...)`; one tile
    in, one tile out (Triton unwraps a single input itself)."""
    helper = combine_function(gen, op)
    tiles = [gen.expr(v) for v in op.operands]
    args = [tiles[0] if len(tiles) == 1 else f"({', '.join(tiles)})", str(op.attrs["axis"]), helper]
    if op.defn is ops.COMBINE_SCAN:
        call = "tl.associative_scan"
        args += ["reverse=True"] if op.attrs["reverse"] else []
    else:
        call = "tl.reduce"
        args += ["keep_dims=True"] if op.attrs["keep_dims"] else []
    names = [gen.ids[r] if r in gen.ids else gen.ids.define(r) for r in op.results]
    gen.emit(f"{', '.join(names)} = {call}({', '.join(args)})", indent)
