"""Reductions, scans and matrix products: `tl.sum/max/min` are `T.reduce_*` into a fragment, argmax/argmin a
max/min reduction then a min over the indices holding it; `tl.cumsum` is `T.cumsum` on a shared buffer;
TileLang has no reduction or scan taking a combine function, so `tl.reduce` whose combine function is a
plain sum, max or min is `T.reduce_*`, `tl.associative_scan` of a plain sum is `T.cumsum`, and any other
combine function is refused; `tl.dot` is `T.gemm` of shared-memory operands
(a transposed operand becomes transpose_A/B) into a fragment accumulator, updated in place where nothing
reads the old accumulator afterwards."""
from __future__ import annotations

from ..ir import types as T
from ..ir.core import Op, Value
from .context import Buffer, Context
from .rules import RULES
from .slots import yields_back
from .syntax import loop_indices, parallel_header
from .values import is_zero

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
    ab, ta = _operand(g, a, indent)
    bb, tb = _operand(g, b, indent)
    out = _accumulator(g, op, accv, indent)
    flags = []
    if ta:
        flags.append("transpose_A=True")
    if tb:
        flags.append("transpose_B=True")
    if a.type.elem.is_fp8 and (ta or not tb):
        g.notes.append(f"line {op.loc.line}: tl.dot of {a.type.elem}: TileLang issues Hopper's wgmma for fp8 only "
                       f"with both operands K-major (A as an (M, K) tile, B as tl.trans of an (N, K) tile); "
                       f"this product runs on mma.sync")
    g.emit(f"T.gemm({', '.join([ab.name, bb.name, out.name] + flags)})", indent)
    g.buffers[op.result.id] = out


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


# -- scans, and scans and reductions with the kernel's combine function ------------------------------------
@RULES.rule("scan", role="statement")
def scan(g: Context, op: Op, indent: int):
    """tl.cumsum: T.cumsum, an inclusive scan like Triton's (tl.cumprod is refused in rules.py)."""
    _cumsum(g, op, "tl.cumsum", op.operands[0], op.result, indent)


def _cumsum(g: Context, op: Op, construct: str, x: Value, v: Value, indent: int):
    """`v` = the inclusive prefix sums of `x` along the op's axis: `x` is copied into a shared buffer, which
    T.cumsum scans in place (TileLang's scan works on shared memory; given a fragment, it makes this copy
    itself)."""
    if x.type.rank > 2:
        g.error(construct, op, f"T.cumsum scans 1-D and 2-D tiles only, this tile is {x.type}")
    name = g.alloc(v.name or "cumsum", x.type.shape, x.type.elem, "shared")
    g.fill(name, x, indent)
    g.emit(f"T.cumsum({name}, dim={op.attrs['axis']}, reverse={bool(op.attrs['reverse'])})", indent)
    g.buffers[v.id] = Buffer(name, x.type.shape, x.type.elem, "shared", g.blocks[-1])


@RULES.rule("combine_reduce", role="statement")
def combine_reduce(g: Context, op: Op, indent: int):
    """tl.reduce with a combine function TileLang has a reduction for: T.reduce_sum/max/min."""
    kind = _combine_kind(op)
    if kind is None:
        g.error("tl.reduce", op, f"TileLang has no reduction taking a combine function; tle lowers to "
                                 f"T.reduce_sum/max/min the tl.reduce of one tile whose combine function is a + b "
                                 f"{_SUM_DTYPES}, or tl.maximum / tl.minimum of its two arguments {_MAX_DTYPES}")
    _reduce(g, op.operands[0], op.result, kind, op.attrs["axis"], op.attrs["keep_dims"], indent)


@RULES.rule("combine_scan", role="statement")
def combine_scan(g: Context, op: Op, indent: int):
    """tl.associative_scan whose combine function is a sum: T.cumsum."""
    if _combine_kind(op) != "sum":
        g.error("tl.associative_scan", op, f"TileLang has no scan taking a combine function; tle lowers to "
                                           f"T.cumsum the tl.associative_scan of one tile whose combine function "
                                           f"is a + b {_SUM_DTYPES}")
    _cumsum(g, op, "tl.associative_scan", op.operands[0], op.result, indent)


_SUM_DTYPES = "(floats, or integers of 32 or 64 bits)"
_MAX_DTYPES = "(fp32 or integers)"
_KINDS = {"add": "sum", "maximum": "max", "minimum": "min"}


def _combine_kind(op: Op) -> str | None:
    """'sum', 'max' or 'min' where the combine function of a one-tile combine op is `a + b`,
    `tl.maximum(a, b)` or `tl.minimum(a, b)` of its two arguments, on a dtype where TileLang's reduction
    is known to give Triton's result: float sums (in another order, as tl.sum's), integer sums of 32 or 64
    bits (narrower ones are left to Triton: how TileLang accumulates them is not checked here), and max/min
    of integers or of fp32, where T.reduce_max/min ignore NaN as tl.maximum/minimum do (fmaxf / fminf)."""
    region = op.regions[0]
    body = [o for o in region.ops if o.name != "yield"]
    if len(op.operands) != 1 or len(body) != 1 or body[0].name != "binary":
        return None
    combine = body[0]
    a, b = region.args
    if {id(v) for v in combine.operands} != {id(a), id(b)} or region.terminator.operands != [combine.result]:
        return None
    kind, elem = _KINDS.get(combine.attrs["op"]), a.type.elem
    if kind == "sum" and (elem.is_float or (elem.is_int and elem.bits >= 32)):
        return kind
    if kind in ("max", "min") and (elem == T.fp32 or (elem.is_int and not elem.is_bool)):
        return kind
    return None
