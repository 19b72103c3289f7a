"""Classification of every load, store and atomic, shared by the backends.

    box      offsets affine in the tile's index vectors, unit stride on the innermost axis: a
             rectangular region of the argument
    strided  affine, but the innermost axis does not have unit stride
    gather   an axis indexed through loaded values (or a scatter, for stores)
    general  anything else (arbitrary pointer arithmetic)
    scalar   a single element

`plan_box` goes further for a backend that knows the argument's shape and strides: it maps tile axes
to tensor dimensions and checks that the mask is exactly "in bounds" there, so that a bounds-predicated
bulk copy (TileLang's T.copy) means the same as the masked load or store. A load whose mask bounds it
elsewhere (a sequence's end inside a packed batch) may still be a box that is copied whole and then
selected by the mask (`BoxPlan.select`), where the box lies inside the argument wherever the mask holds.
Program ids (below the grid's extents) and the counters of loops with constant bounds have known ranges.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import ops
from ..ir.core import KernelIR, Op, Param, Value
from ..ir.ops import BinaryOp, CmpPred, Trait
from .affine import Affine, AffineAnalysis


@dataclass
class Access:
    op: Op
    kind: str
    param: Param | None
    offset: Affine | None
    reason: str = ""

    @property
    def line(self) -> int:
        return self.op.loc.line


def root_param(v: Value, params_by_id: dict[int, Param]) -> Param | None:
    while True:
        if v.id in params_by_id:
            return params_by_id[v.id]
        op = v.defining_op
        if op is None:
            return None
        if op.defn is ops.ADDPTR:
            v = op.operand("ptr")
        elif op.has(Trait.LAYOUT):
            v = op.operand("x")
        else:
            return None


def classify(op: Op, aff: AffineAnalysis, params_by_id) -> Access:
    ptr = op.operand("ptr")
    param = root_param(ptr, params_by_id)
    off = aff.of(ptr)
    if param is None:
        return Access(op, "general", None, off, "the pointer does not come from one kernel argument")
    if off is None:
        return Access(op, "general", param, None, "the offsets are not affine in the tile indices")
    if off.data:
        return Access(op, "gather", param, off, "an axis is indexed through loaded values")
    rank = ptr.type.rank
    if rank == 0:
        return Access(op, "scalar", param, off)
    inner = off.axis_coef(rank - 1)
    if inner == 1:
        return Access(op, "box", param, off)
    if inner == 0:
        return Access(op, "strided", param, off, "the innermost axis does not move the address (a broadcast)")
    return Access(op, "strided", param, off, f"the innermost axis has stride {inner}, not 1")


def classify_accesses(k: KernelIR, known: dict[int, int] | None = None) -> dict[int, Access]:
    """id(op) -> Access, for every load, store, atomic and tle.gpu copy of the kernel."""
    aff = AffineAnalysis(k, known)
    params = {p.value.id: p for p in k.params}
    out = {}
    for op in k.walk():
        if op.has(Trait.MEMORY):
            out[id(op)] = classify(op, aff, params)
    return out


# -- masks as per-axis bounds -----------------------------------------------------------------------
def mask_conjuncts(mask: Value | None, aff: AffineAnalysis) -> list[Affine] | None:
    """The mask as a list of affine forms D, each meaning "D < 0", in the mask's own axes;
    None if some conjunct is not such a comparison."""
    if mask is None:
        return []
    op = mask.defining_op
    if op is None:
        return None
    if op.defn is ops.BINARY and op.attrs["op"] is BinaryOp.AND:
        a, b = mask_conjuncts(op.operand("lhs"), aff), mask_conjuncts(op.operand("rhs"), aff)
        return None if a is None or b is None else a + b
    if op.defn in (ops.BROADCAST, ops.SPLAT):
        return mask_conjuncts(op.operand("x"), aff)
    if op.defn is ops.EXPAND_DIMS:
        inner = mask_conjuncts(op.operand("x"), aff)
        ax = op.attrs["axis"]
        return None if inner is None else [c.map_axes(lambda i: i + 1 if i >= ax else i) for c in inner]
    if op.defn is ops.CMP:
        lhs, rhs = aff.of(op.operand("lhs")), aff.of(op.operand("rhs"))
        if lhs is None or rhs is None:
            return None
        pred = op.attrs["pred"]
        if pred is CmpPred.LT:
            return [lhs - rhs]
        if pred is CmpPred.LE:
            return [lhs - rhs - Affine(1)]
        if pred is CmpPred.GT:
            return [rhs - lhs]
        if pred is CmpPred.GE:
            return [rhs - lhs - Affine(1)]
        return None
    if op.defn is ops.CONST and op.attrs["value"]:
        return []
    return None


def mask_always_true(mask: Value | None, shape, aff: AffineAnalysis) -> bool:
    """Is every element of the mask provably true (e.g. `arange(0, 8192) < 8192`)?"""
    if mask is None:
        return True
    conj = mask_conjuncts(mask, aff)
    if conj is None:
        return False
    return all((m := _max_over_tile(c, shape)) is not None and m < 0 for c in conj)


def _max_over_tile(d: Affine, shape) -> int | None:
    """The largest value of a form with no symbols over the tile's index space."""
    if d.syms or d.data:
        return None
    m = d.const
    for a, c in d.axes:
        m += c * (shape[a] - 1) if c > 0 else 0
    return m


def mask_fails_at(mask: Value | None, tile_shape, aff: AffineAnalysis) -> list[Affine] | None:
    """Scalar forms F such that the mask is false somewhere in the tile exactly where some F >= 0: each conjunct
    "D < 0" taken at the tile's corner where D is largest. None where a conjunct is not affine in the scalars
    and the tile's axes (a loaded index, say)."""
    conj = mask_conjuncts(mask, aff)
    if conj is None or any(d.data for d in conj):
        return None
    return [Affine(d.const + sum(c * (tile_shape[a] - 1) for a, c in d.axes if c > 0), d.syms) for d in conj]


@dataclass
class DimRange:
    """The part of one tensor dimension a box covers."""
    start: Affine          # scalar form: index of the first element along this dim
    extent: int            # 1 for a dimension the tile does not span
    axis: int | None       # the tile axis spanning it, if any


@dataclass
class BoxPlan:
    dims: list[DimRange]
    select: bool = False   # copy the whole box, then keep the mask's elements (`other` elsewhere)


class Ranges:
    """The values a scalar symbol can take: a program id is below its grid extent; a loop counter runs over
    its loop's bounds. None where nothing is known."""

    def __init__(self, aff: AffineAnalysis, grid: tuple[int, ...] | None):
        self.aff, self.grid = aff, grid

    def _loop(self, sym: int) -> tuple[Affine, Affine, int] | None:
        """(lower, upper, step) of the loop whose counter `sym` is, for a positive constant step."""
        v = self.aff.symbols.get(sym)
        if v is None or v.defining_op is not None:
            return None
        block = v.owner
        loop = getattr(block, "parent_op", None)
        if loop is None or loop.defn is not ops.FOR or not block.args or block.args[0] is not v:
            return None
        lower, upper, step = (self.aff.of(loop.operand(n)) for n in ("lower", "upper", "step"))
        if lower is None or upper is None or step is None or not step.is_const or step.const <= 0:
            return None
        return lower, upper, step.const

    def of_symbol(self, sym: int) -> tuple[int, int] | None:
        v = self.aff.symbols.get(sym)
        if v is None:
            return None
        op = v.defining_op
        if op is not None:
            if op.defn is ops.PROGRAM_ID and self.grid is not None and op.attrs["axis"] < len(self.grid):
                return 0, self.grid[op.attrs["axis"]] - 1
            return None
        loop = self._loop(sym)
        if loop is None or not loop[0].is_const or not loop[1].is_const:
            return None
        lower, upper, step = loop[0].const, loop[1].const, loop[2]
        if upper <= lower:
            return lower, lower                      # the body never runs
        return lower, lower + (upper - 1 - lower) // step * step

    def bounds(self, f: Affine) -> tuple[int, int] | None:
        """(least, greatest) value of a scalar form, or None."""
        lo = hi = f.const
        for sym, c in f.syms:
            r = self.of_symbol(sym)
            if r is None:
                return None
            lo, hi = lo + min(c * r[0], c * r[1]), hi + max(c * r[0], c * r[1])
        return lo, hi

    def least(self, f: Affine) -> Affine:
        """A form no greater than `f` wherever the body of every loop whose counter it holds runs: each counter
        taken at the end of its range that lowers f (its lower bound, or its upper bound less one), so that a
        walk backwards, chunks - 1 - i, is seen to stay at or above 0."""
        for _ in range(8):
            for sym, c in f.syms:
                loop = self._loop(sym)
                if loop is not None:
                    lower, upper, _ = loop
                    end = lower if c > 0 else upper - Affine(1)
                    f = f - Affine(0, ((sym, c),)) + end.scale(c)
                    break
            else:
                return f
        return f


def plan_box(access: Access, mask: Value | None, tile_shape: tuple[int, ...], tensor_shape, tensor_strides,
             aff: AffineAnalysis, ranges: Ranges | None = None, select: bool = False) -> tuple[BoxPlan | None, str]:
    """Map a box access onto the argument's dimensions; (plan, "") or (None, reason). `select`: a load may be
    planned as the whole box selected by its mask, where the mask does not bound it at the argument's edges."""
    ranges = ranges or Ranges(aff, None)
    plan, why = _plan_box(access, mask, tile_shape, tensor_shape, tensor_strides, aff, ranges)
    if plan is None and select and mask is not None:
        # the box the unmasked access reads, if it lies inside the argument: wherever the mask holds, the
        # copy reads what the load reads; elsewhere the select puts `other`
        whole, _ = _plan_box(access, None, tile_shape, tensor_shape, tensor_strides, aff, ranges)
        if whole is not None:
            whole.select = True
            return whole, ""
    return plan, why


def _has_negative_part(f: Affine) -> bool:
    return f.const < 0 or any(c < 0 for _, c in f.syms)


def _outermost(d: int, tensor_shape, tensor_strides) -> bool:
    """Is dimension d the outermost of more than one element (the largest stride)? Past its end lies past the
    argument's end."""
    return all(tensor_shape[e] == 1 or tensor_strides[e] <= tensor_strides[d]
               for e in range(len(tensor_shape)) if e != d)


def _plan_box(access: Access, mask: Value | None, tile_shape: tuple[int, ...], tensor_shape, tensor_strides,
              aff: AffineAnalysis, ranges: Ranges) -> tuple[BoxPlan | None, str]:
    off = access.offset
    if access.kind != "box":
        return None, access.reason or f"a {access.kind} access"
    rank = len(tile_shape)
    ndim = len(tensor_shape)
    axis_dim: dict[int, int] = {}
    for a in range(rank):
        c = off.axis_coef(a)
        if c == 0:
            return None, f"tile axis {a} does not move the address (a broadcast load)"
        dims = [d for d in range(ndim) if tensor_strides[d] == c and tensor_shape[d] > 1 and d not in axis_dim.values()]
        if len(dims) != 1:
            return None, f"tile axis {a} (stride {c}) matches {len(dims)} dimensions of the argument"
        axis_dim[a] = dims[0]
    order = [axis_dim[a] for a in range(rank)]
    if order != sorted(order):
        return None, "the tile's axes run in a different order than the argument's dimensions"
    conj = mask_conjuncts(mask, aff)
    if conj is None:
        return None, "the mask is not a conjunction of affine bounds"
    starts: dict[int, Affine] = {}
    lower: dict[int, Affine] = {}      # tile axis -> start, from a term `start + i >= 0` (block pointers)
    for d_form in conj:
        if _max_over_tile(d_form, tile_shape) is not None and _max_over_tile(d_form, tile_shape) < 0:
            continue                                   # statically true
        if not d_form.data and len(d_form.axes) == 1 and d_form.axes[0][1] == -1:
            # -(start + i) - 1 < 0: the copy's own lower-bound predicate, if start is the dimension's start
            lower[d_form.axes[0][0]] = Affine(0) - Affine(d_form.const + 1, d_form.syms)
            continue
        if d_form.data or len(d_form.axes) != 1 or d_form.axes[0][1] != 1:
            return None, "a mask term is not of the form index < bound on a single tile axis"
        a = d_form.axes[0][0]
        d = axis_dim[a]
        start = Affine(d_form.const + tensor_shape[d], d_form.syms)   # mask: start + i < dim size
        if a in starts and starts[a] != start:
            return None, f"two different bounds on tile axis {a}"
        starts[a] = start
    # the base address must split over the dims: sum(start_d * stride_d)
    base = off.at_origin()
    residual = base
    dim_start: dict[int, Affine] = {}
    for a, st in starts.items():
        d = axis_dim[a]
        dim_start[d] = st
        residual = residual - st.scale(tensor_strides[d])
    free = [d for d in range(ndim) if d not in dim_start]
    # largest stride first; between equal strides, a dimension of size 1 last: its stride is arbitrary (a
    # tensor [1, S, H, D] may carry its batch stride equal to its head stride), and only index 0 is inside it
    free.sort(key=lambda d: (-tensor_strides[d], tensor_shape[d] == 1))
    parts = {d: Affine() for d in free}
    for sym, c in residual.syms:
        for d in free:
            if tensor_strides[d] != 0 and c % tensor_strides[d] == 0:
                parts[d] = parts[d] + Affine(0, ((sym, c // tensor_strides[d]),))
                break
        else:
            return None, "the base address does not split over the argument's dimensions"
    rest = residual.const
    for d in free:
        if tensor_strides[d] > 0:
            q = rest // tensor_strides[d] if rest >= 0 else -((-rest) // tensor_strides[d])
            parts[d] = parts[d] + Affine(q)
            rest -= q * tensor_strides[d]
    if rest != 0:
        return None, "the base address does not split over the argument's dimensions"
    dim_start.update(parts)
    for a, st in lower.items():
        if dim_start.get(axis_dim[a]) != st:
            return None, f"a lower bound on tile axis {a} that is not its dimension's start"
    for d, st in dim_start.items():
        # a bulk copy predicates 0 <= index < size per dimension; program ids and loop counters are
        # non-negative, so a start with no negative part keeps the lower bound as the program had it
        # (where the mask bounds the index below by 0 itself, the predicate is the program's own)
        if d in [axis_dim[a] for a in lower]:
            continue
        known = ranges.bounds(st)
        if (known is None or known[0] < 0) and _has_negative_part(ranges.least(st)):
            return None, f"the start along dimension {d} may be negative"
        if not st.syms and st.const >= tensor_shape[d]:
            return None, f"the start along dimension {d} is past its end"
        if d not in axis_dim.values() and known is not None and known[1] >= tensor_shape[d]:
            return None, f"the index along dimension {d} may be past its end"
    for a in range(rank):
        d = axis_dim[a]
        known = ranges.bounds(dim_start[d])
        if a not in starts and not _outermost(d, tensor_shape, tensor_strides) and \
                not (known is not None and known[1] + tile_shape[a] <= tensor_shape[d]):
            # without a mask, the program may run past this dimension into the next row; a bulk copy
            # would predicate that away, so only a provably in-bounds region is a box here
            return None, (f"tile axis {a} has no mask term and its region is not provably inside "
                          f"dimension {d}")
    dims = []
    dim_axis = {d: a for a, d in axis_dim.items()}
    for d in range(ndim):
        a = dim_axis.get(d)
        dims.append(DimRange(dim_start[d], tile_shape[a] if a is not None else 1, a))
    return BoxPlan(dims), ""
