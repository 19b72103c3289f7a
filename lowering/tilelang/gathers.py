"""Gathers through index tiles: which index loads are read again at each use instead of held in a fragment,
which stay synchronous reads inside a pipelined loop, and the zero-filled form of a masked gather that
keeps it an asynchronous copy."""
from __future__ import annotations

from ..analysis.access import Access, mask_always_true
from ..ir import ops
from ..ir.core import Op, Value
from ..ir.ops import BinaryOp, Trait
from .context import Context
from .values import is_zero


def written_arguments(gen: Context) -> set[int]:
    """id() of the arguments the kernel stores to (or updates atomically): a read of any other one may move."""
    return {id(gen.access(o).param) for o in gen.kernel.walk() if o.defn in (ops.STORE, ops.ATOMIC, ops.COPY_OUT)}


def index_loads(gen: Context) -> set[int]:
    """Loads of 1-D index tiles (values that other accesses gather through) that are read again at
    each use rather than held in a fragment: a fragment's layout follows the first loop that
    writes it, and every gather indexing it from another layout would then run on the few threads
    that own each element. Only when nothing in the kernel writes the indexed argument."""
    written = written_arguments(gen)
    gathered = set()
    for o in gen.kernel.walk():
        if o.defn in (ops.LOAD, ops.STORE, ops.ATOMIC, ops.COPY_IN, ops.COPY_OUT):
            a = gen.access(o)
            if a.offset is not None:
                gathered.update(vid for vid, _, _ in a.offset.data)
    out = set()
    for o in gen.kernel.walk():
        if o.defn is ops.LOAD and o.result.id in gathered and o.result.type.rank == 1 and \
                not o.attrs.get("is_async") and id(gen.access(o).param) not in written and \
                all(u.has(Trait.ELEMENTWISE) or u.defn in (ops.LOAD, ops.STORE, ops.COPY_IN, ops.COPY_OUT)
                    for u in gen.users.get(o.result.id, [])):
            out.add(o.result.id)
    return out


def stays_synchronous(gen: Context, load_op: Op) -> bool:
    """Does TileLang keep this read of global memory into shared synchronous inside T.Pipelined? It
    issues a plain or zero-filled copy as cp.async, and its software pipeline does not wait for one
    before a statement of the same stage: an index tile read that way and then gathered through in
    its own stage would be read before it lands. A masked read whose `other` is not zero stays a
    plain read."""
    ptr, mask, other = load_op.operand("ptr"), load_op.operand("mask"), load_op.operand("other")
    return mask is not None and other is not None and not is_zero(other) and \
        not mask_always_true(mask, ptr.type.shape, gen.aff)


def zero_filled_rows(gen: Context, op: Op, acc: Access, idx: list[str]) -> dict | None:
    """For a gather `x[rows[j], ...]` masked by a condition on the gathered rows only (other
    conjuncts provably true) with zero for `other`: substitute for `rows` an index that points
    past the argument where the mask is false. TileLang predicates every out-of-bounds global read
    to zero, so the result is the masked load's, while the copy keeps the plain form that its
    pipeliner issues as cp.async. None where this does not apply."""
    mask = op.operand("mask")
    if acc.offset is None or len(acc.offset.data) != 1:
        return None
    vid, axes, coef = acc.offset.data[0]
    if coef <= 0 or len(axes) != 1:
        return None
    extent = gen.arg[acc.param.value.id].extent
    out_row = -(-2 * extent // coef)        # row * coef >= 2 * extent: past the end from any base
    if out_row * coef + extent >= 2 ** 31:
        return None
    row_terms = conditions_on(gen, mask, op.operand("ptr").type.rank, set(axes))
    if not row_terms:
        return None
    rows = gen.values_by_id().get(vid)
    if rows is None:
        return None
    cond = " & ".join(gen.elem(t, idx) for t in row_terms)
    return {vid: lambda ix, rows=rows, cond=cond: (
        f"T.if_then_else({cond}, {_without_substitutes(gen, rows, ix)}, {out_row})")}


def _without_substitutes(gen: Context, v: Value, idx: list[str]) -> str:
    saved, gen.substitutes = gen.substitutes, {}
    try:
        return gen.elem(v, idx)
    finally:
        gen.substitutes = saved


def conditions_on(gen: Context, mask: Value, rank: int, axes: set[int]) -> list[Value] | None:
    """The conjuncts of `mask` (broadcast to `rank`) that vary along `axes` only, where every other conjunct is
    provably true; None where one is not, or where a conjunct's axes are unknown."""
    terms = []
    for leaf in _conjuncts(mask):
        used = _axes_used(leaf, rank)
        if used is None:
            return None
        if used <= axes:
            terms.append(leaf)
        elif not mask_always_true(leaf, leaf.type.shape, gen.aff):
            return None
    return terms


def _conjuncts(mask: Value) -> list[Value]:
    """The leaves of an `a & b & ...` tree of boolean tiles."""
    op = mask.defining_op
    if op is not None and op.defn is ops.BINARY and op.attrs["op"] is BinaryOp.AND:
        return _conjuncts(op.operand("lhs")) + _conjuncts(op.operand("rhs"))
    return [mask]


def _axes_used(v: Value, rank: int) -> set[int] | None:
    """The axes of a broadcast-to-`rank` tile that `v` varies along (None if unknown)."""
    op = v.defining_op
    if op is not None and op.defn in (ops.BROADCAST, ops.SPLAT):
        src = op.operand("x")
        inner = _axes_used(src, src.type.rank) if src.type.rank else set()
        if inner is None:
            return None
        off = rank - src.type.rank
        return {off + a for a in inner if src.type.shape[a] != 1}
    if v.type.rank != rank:
        return None
    return {a for a, s in enumerate(v.type.shape) if s != 1}
