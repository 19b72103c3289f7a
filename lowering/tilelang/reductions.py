"""Reductions and matrix products: `tl.sum/max/min` are `T.reduce_*` into a fragment, argmax/argmin a
max/min reduction then a min over the indices holding it (a `tl.reduce` whose combine function is a plain
sum, max or min comes here too; scans and the other combine functions are in combines.py); `tl.dot` is
`T.gemm` of shared-memory operands (a transposed operand becomes transpose_A/B) into a fragment
accumulator, updated in place where nothing reads the old accumulator afterwards; attention-like products
keep whole rows per warp and take an A operand from registers (row_products.py)."""
from __future__ import annotations

from ..ir import types as T
from ..ir.core import Op, Value
from .context import Buffer, Context
from .row_products import RowProducts
from .rules import RULES
from .slots import yields_back
from .syntax import loop_indices, parallel_header
from .values import is_zero
from .warp_groups import GROUP_THREADS

# element-wise ops whose result can overwrite the fragment of their one tile operand, element by element
_IN_PLACE_UPDATES = ("binary", "unary", "cast", "where")


@RULES.rule("reduce", role="statement")
def reduce(g: Context, op: Op, indent: int):
    _reduce(g, op.operands[0], op.result, op.attrs["kind"], op.attrs["axis"], op.attrs["keep_dims"], indent)


def _reduce(g: Context, x: Value, v: Value, kind: str, axis: int, keep_dims: bool, indent: int):
    """`v` = the `kind` reduction of tile `x` along `axis`."""
    src = g.buffer_of(x, indent, "fragment")
    out_shape = tuple(s for i, s in enumerate(x.type.shape) if i != axis) or (1,)
    out = g.alloc(v.name or kind, out_shape, v.type.elem, "fragment")
    if kind in ("sum", "max", "min"):
        g.emit(f"T.reduce_{kind}({src.name}, {out}, dim={axis})", indent)
    else:
        # arg-reductions: the extreme value, then the smallest index holding it (Triton's tie-break)
        ext = g.alloc((v.name or kind) + "_val", out_shape, x.type.elem, "fragment")
        g.emit(f"T.reduce_{'max' if kind == 'argmax' else 'min'}({src.name}, {ext}, dim={axis})", indent)
        cand = g.alloc((v.name or kind) + "_idx", x.type.shape, T.i32, "fragment")
        idx = loop_indices(x.type.rank)
        ridx = [i for d, i in enumerate(idx) if d != axis] or ["0"]
        n = x.type.shape[axis]
        g.emit(parallel_header(idx, x.type.shape), indent)
        g.emit(f"{cand}[{', '.join(idx)}] = T.if_then_else({src.name}[{', '.join(idx)}] == "
               f"{ext}[{', '.join(ridx)}], {idx[axis]}, {n})", indent + 1)
        g.emit(f"T.reduce_min({cand}, {out}, dim={axis})", indent)
    g.buffers[v.id] = Buffer(out, out_shape, v.type.elem, "fragment", g.blocks[-1])
    if keep_dims:
        g.keepdims[v.id] = axis      # same data with a unit axis: element access drops it


@RULES.rule("dot", role="statement")
def dot(g: Context, op: Op, indent: int):
    a, b, accv = op.operands
    if a.type.elem != b.type.elem:
        g.error(f"tl.dot of {a.type.elem} by {b.type.elem}", op, "TileLang 0.1.15's T.gemm multiplies two fp8 kinds "
                "together on Blackwell (tcgen05) only; convert one operand to the other's kind")
    rows = _row_products(g)
    if rows.register_a(op):
        ab, ta = g.buffer_of(a, indent, "fragment"), False     # the registers it was computed in
    else:
        ab, ta = _operand(g, a, indent)
    bb, tb = _operand(g, b, indent)
    out = _accumulator(g, op, accv, indent)
    flags = []
    if ta:
        flags.append("transpose_A=True")
    if tb:
        flags.append("transpose_B=True")
    if rows.full_row(op):
        flags.append("policy=T.GemmWarpPolicy.FullRow")
    if a.type.elem.is_fp8 and (ta or not tb):
        g.notes.append(f"line {op.loc.line}: tl.dot of {a.type.elem}: TileLang issues Hopper's wgmma for fp8 only "
                       f"with both operands K-major (A as an (M, K) tile, B as tl.trans of an (N, K) tile); "
                       f"this product runs on mma.sync")
    # in a warp group, a product the next one accumulates onto is issued without waiting for it (wgmma): the
    # chain's last product waits for them all, and the hand-offs' releases wait for it (warp_groups.py)
    issue = "T.wgmma_gemm" if _issued_async(g, op, ab) else "T.gemm"
    g.emit(f"{issue}({', '.join([ab.region(), bb.region(), out.name] + flags)})", indent)
    g.buffers[op.result.id] = out


def _issued_async(g: Context, op: Op, a_buffer: Buffer) -> bool:
    return g.warp_group is not None and a_buffer.scope == "shared" and not op.operands[0].type.elem.is_fp8 and \
        g.warp_plan.next_in_chain(op) is not None


def _row_products(g: Context) -> RowProducts:
    if getattr(g, "row_products", None) is None:
        # a product in a warp group runs on that group's warps (warp_groups.py)
        group_warps = GROUP_THREADS // 32
        g.row_products = RowProducts(g.k, g.users, lambda op: group_warps if "warp_group" in op.attrs
                                     else g.k.num_warps)
    return g.row_products


def _operand(g: Context, v: Value, indent: int) -> tuple[Buffer, bool]:
    """A shared-memory buffer for a dot operand, and whether it is transposed."""
    op = v.defining_op
    if op is not None and op.name == "trans" and v.id not in g.buffers and op.attrs["perm"] == (1, 0):
        b, t = _operand(g, op.operands[0], indent)
        return b, not t
    b = g.buffer_of(v, indent, "shared", allow_perm=True)
    return b, b.perm == (1, 0)


def _accumulator(g: Context, op: Op, accv: Value, indent: int) -> Buffer:
    """The fragment T.gemm accumulates into: the accumulator's own buffer when nothing reads it later,
    a cleared fragment for a zero accumulator, else a fresh copy (a value still read after the dot)."""
    v = op.result
    if is_zero(accv):
        name = g.alloc(v.name or "acc", v.type.shape, v.type.elem, "fragment")
        g.emit(f"T.clear({name})", indent)
        return g.fragment(name, v)
    target = _in_place_target(g, accv, op)
    if target is not None:
        if target.id != accv.id:     # an element-wise update of the old accumulator: write it in place
            g.fill(g.buffers[target.id].name, accv, indent)
        return g.buffers[target.id]
    # T.gemm overwrites its accumulator: a fresh fragment, never the one other uses of `accv` read
    name = g.alloc(accv.name or "acc", accv.type.shape, accv.type.elem, "fragment")
    g.fill(name, accv, indent)
    return g.fragment(name, accv)


def _in_place_target(g: Context, v: Value, consumer: Op) -> Value | None:
    """A fragment-held value that `v` is an element-wise, single-use function of (reading it at the
    same index), which nothing reads after `consumer`: `v` can overwrite it."""
    while True:
        us = [u for u in g.users.get(v.id, []) if not yields_back(g, u, v)]
        if len(us) != 1 or us[0] is not consumer:
            return None
        if v.id in g.buffers:
            b = g.buffers[v.id]
            return v if b.scope == "fragment" and g.visible(b) else None
        op = v.defining_op
        if op is None or op.name not in _IN_PLACE_UPDATES:
            return None
        same = [o for o in op.operands if o is not None and o.type.shape == v.type.shape and
                (o.id in g.buffers or (o.defining_op is not None and o.defining_op.name in _IN_PLACE_UPDATES))]
        if len(same) != 1 or (op.name == "cast"):
            return None
        consumer, v = op, same[0]
