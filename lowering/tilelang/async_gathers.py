"""A warp group's gather of whole rows into a hand-off buffer, issued as cp.async.

Outside T.Pipelined, TileLang reads global memory into shared memory synchronously: a loader warp group
would wait for every row it gathers before it could ask for the next. Here each thread issues 16-byte
`cp.async` copies (zero-filled where the row is masked off) and the group arrives on the hand-off's `full`
barrier through `cp.async.mbarrier.arrive.noinc`, which fires when the thread's copies have landed: the
loader runs ahead while its rows are in flight.

It applies to a `tle.gpu.copy` of a 2-D tile whose rows are gathered (`base + ids[:, None] * stride +
cols[None, :]`) or strided (`base + rows[:, None] * stride + cols[None, :]`, a box), contiguous along its
columns, every address 16-byte aligned, masked by a condition on the rows only, with zero (or nothing) where
the mask is false.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Op
from ..ir.ops import Trait
from .context import Buffer, Context
from .gathers import conditions_on
from .syntax import tl_dtype
from .values import is_zero

_CHUNK_BYTES = 16


@dataclass(frozen=True)
class RowGather:
    chunk: int          # elements per cp.async
    row_threads: int    # threads sharing a row: together they copy 16 * row_threads contiguous bytes
    rows_each: int      # rows per thread
    chunks_each: int    # chunks per thread in each of its rows
    rows_mask: tuple    # the mask's conjuncts that depend on the rows (the others are provably true)


def row_gather(gen: Context, op: Op, threads: int) -> RowGather | None:
    """How `op` (a copy_in) is issued as cp.async by `threads` threads, or None where it cannot be."""
    ptr, mask, other = op.operand("ptr"), op.operand("mask"), op.operand("other")
    if ptr.type.rank != 2 or (other is not None and not is_zero(other)):
        return None
    acc = gen.access(op)
    off = acc.offset
    gathered = acc.kind == "gather" and len(off.data) == 1 and off.data[0][1] == (0,)
    if not (gathered or acc.kind == "box") or off.axis_coef(1) != 1:
        return None
    if not gen.arg[acc.param.value.id].aligned16:
        return None                 # the offsets below are aligned; the tensor's own address must be too
    chunk = _CHUNK_BYTES * 8 // ptr.type.elem.elem.bits
    rows, cols = ptr.type.shape
    coefs = [off.const, off.axis_coef(0), *(c for _, c in off.syms), *(c for *_, c in off.data)]
    if cols % chunk or any(c % chunk for c in coefs):
        return None
    per_row = cols // chunk
    # 8 threads to a row (128 contiguous bytes, a full line) where the row has that many chunks
    row_threads = next((t for t in (8, 4, 2, 1) if per_row % t == 0 and threads % t == 0), 1)
    if rows % (threads // row_threads):
        return None
    rows_mask = [] if mask is None else conditions_on(gen, mask, 2, {0})
    if rows_mask is None:
        return None
    return RowGather(chunk, row_threads, rows // (threads // row_threads), per_row // row_threads, tuple(rows_mask))


def emit_row_gather(gen: Context, op: Op, plan: RowGather, buf: Buffer, thread: str, threads: int, indent: int):
    """`thread`: the thread's index within its group. A thread copies chunks of `rows_each` rows; in a gather
    it reads the rows' indices first, all at once (one memory latency, not one per row), then issues the
    copies. The threads of a row copy consecutive chunks."""
    ptr = op.operand("ptr")
    acc = gen.access(op)
    param = gen.ids[acc.param.value]
    rows_at_once = threads // plan.row_threads

    def row_of(r: str) -> str:
        row = gen.ids.fresh("row")
        gen.let(row, f"{r} * {rows_at_once} + {thread} // {plan.row_threads}", indent + 1, reads=(thread,))
        return row
    substitutes = {}
    if acc.offset.data:
        ids = gen.values_by_id()[acc.offset.data[0][0]]
        rids = gen.ids.fresh("rids")
        gen.emit(f"{rids} = T.alloc_local(({plan.rows_each},), {tl_dtype(ids.type.elem)!r})", indent)
        r = gen.ids.fresh("r")
        gen.emit(f"for {r} in T.unroll({plan.rows_each}):", indent)
        first = row_of(r)
        gen.emit(f"{rids}[{r}] = {gen.elem(ids, [first])}", indent + 1, reads=(first,))
    r, c = gen.ids.fresh("r"), gen.ids.fresh("c")
    if acc.offset.data:
        substitutes = {ids.id: lambda _ix: f"{rids}[{r}]"}
    gen.emit(f"for {r} in T.unroll({plan.rows_each}):", indent)
    row = row_of(r)
    gen.emit(f"for {c} in T.unroll({plan.chunks_each}):", indent + 1)
    col = gen.ids.fresh("col")
    gen.let(col, f"({c} * {plan.row_threads} + {thread} % {plan.row_threads}) * {plan.chunk}", indent + 2,
            reads=(thread,))
    idx = [row, col]
    saved, gen.substitutes = gen.substitutes, substitutes
    kept, gen.buffers = gen.buffers, _without_recomputable_fragments(gen)
    try:
        src = f"{param}[{gen.offset(ptr, idx)}]"
        pred = " & ".join(gen.elem(m, idx) for m in plan.rows_mask)
    finally:
        gen.substitutes, gen.buffers = saved, kept
    call = (f"T.ptx_cp_async(T.access_ptr({buf.at([row, col])}, 'w', {plan.chunk}), "
            f"T.access_ptr({src}, 'r', {plan.chunk}), {plan.chunk}" + (f", {pred})" if pred else ")"))
    gen.emit(call, indent + 2, reads=(row, col))


def _without_recomputable_fragments(gen: Context) -> dict:
    """The buffers, less the fragments of values computed element-wise (an address tile computed once for
    several uses): the copies are thread-level code, which cannot index a fragment (its layout decides
    which thread holds an element), so such a value is written out again at the copy."""
    values = gen.values_by_id()

    def recomputable(vid):
        d = values[vid].defining_op if vid in values else None
        return d is not None and d.has(Trait.ELEMENTWISE)
    return {vid: b for vid, b in gen.buffers.items() if b.scope != "fragment" or not recomputable(vid)}
