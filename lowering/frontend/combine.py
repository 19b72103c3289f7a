"""The combine function of `tl.associative_scan` and `tl.reduce`, traced once into the region of a
combine_scan / combine_reduce op.

Triton calls the function on scalars: the left group (one scalar per input tile), then the right group,
and uses the group it returns. It is traced the same way here, on scalar block arguments named after its
parameters. A backend evaluates the region as often and in whatever order its scan or reduction tree
needs, so the region must be pure scalar code: no memory access, no printing, no tiles.
"""
from __future__ import annotations

import inspect

from ..errors import LoweringError
from ..ir import types as ir_types
from ..ir.core import Block, Loc, Op
from ..ir.ops import Trait, with_trait
from .jit_functions import unwrap_jit
from .semantics import TV

# the ops a combine function may hold: scalar arithmetic (element-wise ops) and structured control flow, on
# scalars; any other op, pure or not (a reduction, a tle.gpu buffer), is refused
_ARITHMETIC = with_trait(Trait.ELEMENTWISE)
_CONTROL = with_trait(Trait.LOOP) | with_trait(Trait.BRANCH) | with_trait(Trait.TERMINATOR)


def trace_combine(tr, combine_fn, elems: list[ir_types.DType], what: str) -> tuple[Block, str]:
    """The region computing `combine_fn` on two groups of scalars of dtypes `elems`, and the function's
    name. `what`: the construct as the kernel wrote it, for errors."""
    fn = unwrap_jit(combine_fn)
    if fn is None:
        raise LoweringError(f"{what}: the combine function must be a @triton.jit or @tle.jit function, got "
                            f"{combine_fn!r}", tr.b.loc)
    params = list(inspect.signature(fn).parameters)
    if len(params) != 2 * len(elems):
        raise LoweringError(f"{what} of {len(elems)} tile(s) calls its combine function '{fn.__name__}' with "
                            f"{2 * len(elems)} scalars; it takes {len(params)} parameters", tr.b.loc)
    call = tr.b.loc
    region = tr.b.new_block([ir_types.scalar(e) for e in elems] * 2, params)
    with tr.b.insert_into(region):
        returned = tr.call(combine_fn, [TV(a, tr.b) for a in region.args], {})
        tr.b.yield_([v.v for v in _combined_group(returned, elems, what, fn.__name__, call)])
    _require_pure_scalar_code(region, what, fn.__name__, call)
    return region, fn.__name__


def _combined_group(returned, elems: list[ir_types.DType], what: str, name: str, call: Loc) -> list[TV]:
    """The scalars the combine function returned: one per input, each of its input's dtype (Triton's
    region verifier demands the same)."""
    values = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    if len(values) != len(elems):
        raise LoweringError(f"{what}: the combine function '{name}' returns {len(values)} value(s) for "
                            f"{len(elems)} input tile(s)", call)
    for k, (v, elem) in enumerate(zip(values, elems)):
        if not isinstance(v, TV) or not v.type.is_scalar or v.dtype != elem:
            got = f"{v.type}" if isinstance(v, TV) else f"the Python value {v!r}"
            raise LoweringError(f"{what}: the combine function '{name}' returns {got} as its value {k}; it must "
                                f"return a scalar of its input's dtype ({elem})", call)
    return values


def _require_pure_scalar_code(region: Block, what: str, name: str, call: Loc):
    for op in region.walk():
        if not _pure_scalar(op):
            kind = "makes a tile" if any(not r.type.is_scalar for r in op.results) else "has an effect"
            raise LoweringError(f"{what} (at {call}): its combine function '{name}' must be pure scalar code, and "
                                f"{op.spelling} {kind} (the combine function is evaluated as often and in "
                                f"whatever order the backend's scan or reduction needs)", op.loc)


def _pure_scalar(op: Op) -> bool:
    if op.defn not in _ARITHMETIC and op.defn not in _CONTROL:
        return False
    return all(r.type.is_scalar for r in op.results)
