"""Reductions and matrix products: `tl.sum/max/min` are `T.reduce_*` into a fragment, argmax/argmin a
max/min reduction then a min over the indices holding it (a `tl.reduce` whose combine function is a plain
sum, max or min comes here too; scans and the other combine functions are in combines.py); `tl.dot` is
`T.gemm` of shared-memory operands (a transposed operand becomes transpose_A/B) into a fragment
accumulator, updated in place where nothing reads the old accumulator afterwards; attention-like products
keep whole rows per warp and take an A operand from registers (row_products.py)."""
from __future__ import annotations

from ..ir import ops
from ..ir import types as ir_types
from ..ir.core import Op, Value
from ..ir.ops import InputPrecision, ReduceKind, Trait, ops_of
from .context import Buffer, Context
from .row_products import RowProducts
from ..rules import RuleSet
from .sorting import BARRIER, check_placement
from .slots import yields_back
from .syntax import loop_indices, parallel_header
from .values import is_zero
from .warp_groups import GROUP_THREADS

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table

# element-wise ops whose result can overwrite the fragment of their one tile operand, element by element
_IN_PLACE_UPDATES = ops_of(ops.BINARY, ops.UNARY, ops.CAST, ops.WHERE)


@RULE_SET.rule(ops.REDUCE, role="statement")
def reduce(gen: Context, op: Op, indent: int):
    _reduce(gen, op.operand("x"), op.result, op.attrs["kind"], op.attrs["axis"], op.attrs["keep_dims"], indent)


def _reduce(gen: Context, x: Value, v: Value, kind: ReduceKind, axis: int, keep_dims: bool, indent: int):
    """`v` = the `kind` reduction of tile `x` along `axis`."""
    src = gen.buffer_of(x, indent, "fragment")
    out_shape = tuple(s for i, s in enumerate(x.type.shape) if i != axis) or (1,)
    out = gen.alloc(v.name or kind, out_shape, v.type.elem, "fragment")
    if kind in (ReduceKind.SUM, ReduceKind.MAX, ReduceKind.MIN):
        gen.emit(f"T.reduce_{kind}({src.name}, {out}, dim={axis})", indent)
    else:
        # arg-reductions: the extreme value, then the smallest index holding it (Triton's tie-break)
        ext = gen.alloc((v.name or kind) + "_val", out_shape, x.type.elem, "fragment")
        gen.emit(f"T.reduce_{'max' if kind is ReduceKind.ARGMAX else 'min'}({src.name}, {ext}, dim={axis})", indent)
        cand = gen.alloc((v.name or kind) + "_idx", x.type.shape, ir_types.i32, "fragment")
        idx = loop_indices(x.type.rank)
        ridx = [i for d, i in enumerate(idx) if d != axis] or ["0"]
        n = x.type.shape[axis]
        gen.emit(parallel_header(idx, x.type.shape), indent)
        gen.emit(f"{cand}[{', '.join(idx)}] = T.if_then_else({src.name}[{', '.join(idx)}] == "
                 f"{ext}[{', '.join(ridx)}], {idx[axis]}, {n})", indent + 1)
        gen.emit(f"T.reduce_min({cand}, {out}, dim={axis})", indent)
    buf = Buffer(out, out_shape, v.type.elem, "fragment", gen.blocks[-1])
    if _meets_row_reductions(gen, x, v, axis):
        # TileLang lays out a tile's column reductions and its row reductions differently and finds no layout
        # for one T.Parallel over both: the column one is read from shared memory
        held = gen.alloc((v.name or kind) + "_shared", out_shape, v.type.elem, "shared")
        gen.emit(f"T.copy({out}, {held})", indent)
        buf = Buffer(held, out_shape, v.type.elem, "shared", gen.blocks[-1])
    gen.buffers[v.id] = buf
    if keep_dims:
        gen.keepdims[v.id] = axis      # same data with a unit axis: element access drops it


def _meets_row_reductions(gen: Context, x: Value, v: Value, axis: int) -> bool:
    """Is `v`, a reduction of 2-D tile `x` along its first axis, combined element-wise with a value computed
    from a reduction along the last axis of a 2-D tile (itself, or through element-wise ops)?"""
    if x.type.rank != 2 or axis != 0:
        return False
    return any(u.has(Trait.ELEMENTWISE) and any(o.id != v.id and _from_row_reduction(o, 8) for o in u.operands)
               for u in gen.value_users(v))


def _from_row_reduction(v: Value, depth: int) -> bool:
    op = v.defining_op
    if op is None or depth == 0:
        return False
    if op.defn is ops.REDUCE:
        return op.operand("x").type.rank == 2 and op.attrs["axis"] == 1
    return op.has(Trait.ELEMENTWISE) and any(_from_row_reduction(o, depth - 1) for o in op.operands)


@RULE_SET.rule(ops.DOT, role="statement")
def dot(gen: Context, op: Op, indent: int):
    a, b, accv = op.operand("a"), op.operand("b"), op.operand("acc")
    if a.type.elem != b.type.elem:
        gen.error(f"tl.dot of {a.type.elem} by {b.type.elem}", op, "TileLang 0.1.15's T.gemm multiplies two fp8 kinds "
                  "together on Blackwell (tcgen05) only; convert one operand to the other's kind")
    if op.attrs.get("input_precision") is InputPrecision.IEEE:
        _ieee_product(gen, op, indent)
        return
    rows = _row_products(gen)
    if rows.register_a(op):
        ab, ta = gen.buffer_of(a, indent, "fragment"), False     # the registers it was computed in
    else:
        ab, ta = _operand(gen, a, indent)
    bb, tb = _operand(gen, b, indent)
    out = _accumulator(gen, op, accv, indent)
    flags = []
    if ta:
        flags.append("transpose_A=True")
    if tb:
        flags.append("transpose_B=True")
    if rows.full_row(op):
        flags.append("policy=T.GemmWarpPolicy.FullRow")
    if a.type.elem.is_fp8 and (ta or not tb):
        gen.notes.append(f"line {op.loc.line}: tl.dot of {a.type.elem}: TileLang issues Hopper's wgmma for fp8 only "
                         f"with both operands K-major (A as an (M, K) tile, B as tl.trans of an (N, K) tile); "
                         f"this product runs on mma.sync")
    # in a warp group, a product the next one accumulates onto is issued without waiting for it (wgmma): the
    # chain's last product waits for them all, and the hand-offs' releases wait for it (warp_groups.py)
    issue = "T.wgmma_gemm" if _issued_async(gen, op, ab) else "T.gemm"
    gen.emit(f"{issue}({', '.join([ab.region(), bb.region(), out.name] + flags)})", indent)
    gen.buffers[op.result.id] = out


def _ieee_product(gen: Context, op: Op, indent: int):
    """tl.dot(input_precision='ieee') of fp32 tiles: T.gemm would compute in TF32, so each element of the result
    is its own fp32 multiply-add loop over K, reading both operands from shared memory (any thread reads any
    row or column), between barriers written out as sorting.py's are."""
    a, b = op.operand("a"), op.operand("b")
    check_placement(gen, op, "tl.dot(input_precision='ieee')")
    ab, ta = _operand(gen, a, indent)
    bb, tb = _operand(gen, b, indent)
    out = _accumulator(gen, op, op.operand("acc"), indent)
    (m, k), n = a.type.shape, b.type.shape[1]
    i, j = loop_indices(2)
    kk = gen.ids.fresh("k")
    gen.emit(BARRIER, indent)                       # the operands' writes are done
    gen.emit(parallel_header([i, j], (m, n)) + "  # an IEEE fp32 product: multiply-adds over K, no TF32", indent)
    gen.emit(f"for {kk} in T.serial({k}):", indent + 1)
    a_at = ab.at([kk, i] if ta else [i, kk])
    b_at = bb.at([j, kk] if tb else [kk, j])
    gen.emit(f"{out.at([i, j])} = {out.at([i, j])} + {a_at} * {b_at}", indent + 2)
    gen.emit(BARRIER, indent)                       # before the operands are written again
    gen.buffers[op.result.id] = out


def _issued_async(gen: Context, op: Op, a_buffer: Buffer) -> bool:
    if gen.warp_group is None:
        return False
    if a_buffer.scope != "shared" or op.operand("a").type.elem.is_fp8:
        return False
    # waited for at its result's first use (product_waits.py), or by the last product of its chain
    return id(op) in gen.warp_plan.deferred or gen.warp_plan.next_in_chain(op) is not None


def _row_products(gen: Context) -> RowProducts:
    if getattr(gen, "row_products", None) is None:
        # a product in a warp group runs on that group's warps (warp_groups.py)
        group_warps = GROUP_THREADS // 32
        gen.row_products = RowProducts(gen.kernel, gen.users, lambda op: group_warps if "warp_group" in op.attrs
                                     else gen.kernel.num_warps)
    return gen.row_products


def _operand(gen: Context, v: Value, indent: int) -> tuple[Buffer, bool]:
    """A shared-memory buffer for a dot operand, and whether it is transposed."""
    op = v.defining_op
    if op is not None and op.defn is ops.TRANS and v.id not in gen.buffers and op.attrs["perm"] == (1, 0):
        b, t = _operand(gen, op.operand("x"), indent)
        return b, not t
    b = gen.buffer_of(v, indent, "shared", allow_perm=True)
    return b, b.perm == (1, 0)


def _accumulator(gen: Context, op: Op, accv: Value, indent: int) -> Buffer:
    """The fragment T.gemm accumulates into: the accumulator's own buffer when nothing reads it later,
    a cleared fragment for a zero accumulator, else a fresh copy (a value still read after the dot)."""
    v = op.result
    if is_zero(accv):
        name = gen.alloc(v.name or "acc", v.type.shape, v.type.elem, "fragment")
        gen.emit(f"T.clear({name})", indent)
        return gen.fragment(name, v)
    target = _in_place_target(gen, accv, op)
    if target is not None:
        if target.id != accv.id:     # an element-wise update of the old accumulator: write it in place
            gen.fill(gen.buffers[target.id].name, accv, indent)
        return gen.buffers[target.id]
    # T.gemm overwrites its accumulator: a fresh fragment, never the one other uses of `accv` read
    name = gen.alloc(accv.name or "acc", accv.type.shape, accv.type.elem, "fragment")
    gen.fill(name, accv, indent)
    return gen.fragment(name, accv)


def _in_place_target(gen: Context, v: Value, consumer: Op) -> Value | None:
    """A fragment-held value that `v` is an element-wise, single-use function of (reading it at the
    same index), which nothing reads after `consumer`: `v` can overwrite it."""
    while True:
        us = [u for u in gen.users.get(v.id, []) if not yields_back(gen, u, v)]
        if len(us) != 1 or us[0] is not consumer:
            return None
        if v.id in gen.buffers:
            b = gen.buffers[v.id]
            return v if b.scope == "fragment" and gen.visible(b) else None
        op = v.defining_op
        if op is None or op.defn not in _IN_PLACE_UPDATES:
            return None
        same = [o for o in op.operands if o is not None and o.type.shape == v.type.shape and
                (o.id in gen.buffers or (o.defining_op is not None and o.defining_op.defn in _IN_PLACE_UPDATES))]
        if len(same) != 1 or (op.defn is ops.CAST):
            return None
        consumer, v = op, same[0]
