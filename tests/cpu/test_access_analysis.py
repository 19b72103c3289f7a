"""The access analysis both lowerings rely on, pinned directly: affine forms of offsets, masks read as
per-axis bounds, and the box plans that let the TileLang lowering turn a masked load or store into a
bounds-predicated bulk copy. A wrong answer here is a wrong copy region or a dropped mask in generated
code, so every threshold is checked on both sides."""
import pytest
import torch
import triton.language as tl

import tle
from tle.lowering.analysis import Affine, AffineAnalysis, classify_accesses
from tle.lowering.analysis.access import (Ranges, classify, mask_always_true, mask_conjuncts, mask_fails_at,
                                         plan_box)
from tle.lowering.ir import ops


def ir_of(kernel, *args, **constexprs):
    """The kernel's IR for these (meta-device) arguments, before any backend transform."""
    return kernel.lower(*args, grid=(1,), backend="triton", **constexprs).kernel


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def ops_of_kind(k, defn):
    """The kernel's `defn` ops (ops.LOAD, ...), in program order."""
    return [op for op in k.walk() if op.defn is defn]


def analysis(k, **known):
    """An AffineAnalysis with the scalar arguments named in `known` specialised to those ints."""
    return AffineAnalysis(k, {p.value.id: known[p.name] for p in k.params if p.name in known})


def sym(k, name, coef=1):
    """The form `coef * <argument name>`."""
    (p,) = [p for p in k.params if p.name == name]
    return Affine(0, ((p.value.id, coef),))


# -- Affine arithmetic ------------------------------------------------------------------------------
def test_affine_arithmetic():
    a = Affine(3, ((10, 2),), ((0, 1),), ((7, (0,), 1),))
    b = Affine(5, ((10, 1), (11, 4)), ((0, 2), (1, 1)), ((7, (0,), 2), (8, (1,), 1)))
    assert a + b == Affine(8, ((10, 3), (11, 4)), ((0, 3), (1, 1)), ((7, (0,), 3), (8, (1,), 1)))
    assert a - b == Affine(-2, ((10, 1), (11, -4)), ((0, -1), (1, -1)), ((7, (0,), -1), (8, (1,), -1)))
    assert b - a == Affine(2, ((10, -1), (11, 4)), ((0, 1), (1, 1)), ((7, (0,), 1), (8, (1,), 1)))
    assert a - a == Affine()                                   # terms that cancel disappear
    assert a.scale(3) == Affine(9, ((10, 6),), ((0, 3),), ((7, (0,), 3),))
    assert a.scale(-1) == Affine(-3, ((10, -2),), ((0, -1),), ((7, (0,), -1),))
    assert a.scale(0) == Affine()
    assert {a: 1}[Affine(3, ((10, 2),), ((0, 1),), ((7, (0,), 1),))] == 1   # hashable, compared by value


def test_affine_predicates():
    assert Affine(4).is_const and Affine(4).is_scalar_form
    assert not Affine(0, ((1, 1),)).is_const and Affine(0, ((1, 1),)).is_scalar_form
    assert not Affine(0, (), ((0, 1),)).is_const and not Affine(0, (), ((0, 1),)).is_scalar_form
    assert not Affine(0, (), (), ((3, (0,), 1),)).is_const
    assert not Affine(0, (), (), ((3, (0,), 1),)).is_scalar_form
    f = Affine(2, ((1, 1),), ((0, 5), (2, 7)), ((3, (0,), 1),))
    assert (f.axis_coef(0), f.axis_coef(1), f.axis_coef(2)) == (5, 0, 7)
    assert f.at_origin() == Affine(2, ((1, 1),), (), ((3, (0,), 1),))
    assert f.map_axes(lambda i: 2 - i) == Affine(2, ((1, 1),), ((0, 7), (2, 5)), ((3, (2,), 1),))


# -- affine forms of a kernel's offsets -------------------------------------------------------------
@tle.jit
def offsets(x_ptr, y_ptr, a, b, BLOCK: tl.constexpr):
    offs = tl.arange(2, BLOCK + 2)
    v = tl.load(x_ptr + 3 + (offs + 5))                    # constants on both sides of the addition
    tl.store(y_ptr + (a // b) * 1000 + (a % b) * 100 - offs * 2, v)


def test_constant_offsets_add_up():
    k = ir_of(offsets, meta(64), meta(4096), 7, 2, BLOCK=16)
    aff = analysis(k)
    (load,) = ops_of_kind(k, ops.LOAD)
    assert aff.of(load.operand("ptr")) == Affine(10, (), ((0, 1),))   # 3 + 2 + 5, then the arange's index
    (store,) = ops_of_kind(k, ops.STORE)
    # a and b unknown: their quotient and remainder are opaque symbols
    form = aff.of(store.operand("ptr"))
    assert form.axes == ((0, -2),) and form.const == -4 and len(form.syms) == 2


@pytest.mark.parametrize("a,b", [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-6, 3), (0, 5), (1, 7), (-1, 1),
                                 (5, 1), (-5, -1), (5, -1)])
def test_integer_division_of_known_values_truncates(a, b):
    """Triton's // and % on integers truncate toward zero (C semantics), unlike Python's."""
    k = ir_of(offsets, meta(64), meta(4096), a, b, BLOCK=16)
    (store,) = ops_of_kind(k, ops.STORE)
    q = int(a / b)
    r = a - q * b
    assert analysis(k, a=a, b=b).of(store.operand("ptr")) == Affine(1000 * q + 100 * r - 4, (), ((0, -2),))


def test_division_by_a_known_zero_is_not_folded():
    k = ir_of(offsets, meta(64), meta(4096), 7, 0, BLOCK=16)
    (store,) = ops_of_kind(k, ops.STORE)
    form = analysis(k, a=7, b=0).of(store.operand("ptr"))
    assert form.axes == ((0, -2),) and form.const == -4 and len(form.syms) == 2   # left as symbols


@tle.jit
def shapes(x_ptr, y_ptr, z_ptr, w_ptr, n, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    tile = tl.load(x_ptr + rm[:, None] * 64 + rn[None, :])
    tl.store(y_ptr + tl.trans(rm[:, None] * 64 + rn[None, :]), tl.trans(tile))
    idx = tl.load(w_ptr + rn)                                   # a loaded index tile
    tl.store(z_ptr + (-rn).to(tl.int64) + idx * 3 + n, tl.sum(tile, axis=0))
    tl.store(w_ptr + rn.to(tl.float32).to(tl.int32), rn)     # through a float: not affine


def test_forms_through_shape_ops_casts_and_negation():
    k = ir_of(shapes, meta(4096), meta(4096), meta(4096), meta(64, dtype=torch.int32), 9, BM=8, BN=16)
    aff = analysis(k)
    load_x, load_w = ops_of_kind(k, ops.LOAD)
    st_y, st_z, st_w = ops_of_kind(k, ops.STORE)
    assert aff.of(load_x.operand("ptr")) == Affine(0, (), ((0, 64), (1, 1)))
    assert aff.of(st_y.operand("ptr")) == Affine(0, (), ((0, 1), (1, 64)))      # axes swapped by tl.trans
    assert aff.of(load_w.operand("ptr")) == Affine(0, (), ((0, 1),))
    z = aff.of(st_z.operand("ptr"))
    assert z.axes == ((0, -1),) and z.syms == sym(k, "n").syms
    assert z.data == ((load_w.results[0].id, (0,), 3),)
    assert aff.of(st_w.operand("ptr")) is None
    accesses = {(a.param.name, a.op.defn): a.kind for a in classify_accesses(k).values()}
    assert accesses == {("x_ptr", ops.LOAD): "box", ("y_ptr", ops.STORE): "strided", ("w_ptr", ops.LOAD): "box",
                        ("z_ptr", ops.STORE): "gather", ("w_ptr", ops.STORE): "general"}
    known = analysis(k, n=9).of(st_z.operand("ptr"))
    assert known.const == 9 and not known.syms


@tle.jit
def strides(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    zero = offs * 0
    tl.store(y_ptr + offs * 2, tl.load(x_ptr + zero + 1))


def test_access_kinds_by_innermost_stride():
    k = ir_of(strides, meta(64), meta(64), BLOCK=16)
    by_op = {a.op.defn: a for a in classify_accesses(k).values()}
    assert by_op[ops.LOAD].kind == "strided" and "broadcast" in by_op[ops.LOAD].reason
    assert by_op[ops.STORE].kind == "strided" and "stride 2" in by_op[ops.STORE].reason


# -- masks as bounds --------------------------------------------------------------------------------
@tle.jit
def masks(x_ptr, n, BM: tl.constexpr, BN: tl.constexpr, LT: tl.constexpr, LE: tl.constexpr,
          GT: tl.constexpr, GE: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    ptrs = x_ptr + rm[:, None] * BN + rn[None, :]
    tl.store(ptrs, 1.0, mask=rn[None, :] < LT)
    tl.store(ptrs, 2.0, mask=rn[None, :] <= LE)
    tl.store(ptrs, 3.0, mask=rm[:, None] > GT)
    tl.store(ptrs, 4.0, mask=rm[:, None] >= GE)
    tl.store(ptrs, 5.0, mask=(rm[:, None] < n) & (rn[None, :] < LT))
    tl.store(ptrs, 6.0)


def mask_forms(**bounds):
    k = ir_of(masks, meta(4096), 5, BM=8, BN=16, **bounds)
    stores = ops_of_kind(k, ops.STORE)
    return k, analysis(k), [s.operand("mask") for s in stores], (8, 16)


def test_masks_read_as_bounds():
    k, aff, m, shape = mask_forms(LT=12, LE=12, GT=2, GE=2)
    assert mask_conjuncts(m[0], aff) == [Affine(-12, (), ((1, 1),))]          # rn - 12 < 0
    assert mask_conjuncts(m[1], aff) == [Affine(-13, (), ((1, 1),))]          # rn - 13 < 0
    assert mask_conjuncts(m[2], aff) == [Affine(2, (), ((0, -1),))]           # 2 - rm < 0
    assert mask_conjuncts(m[3], aff) == [Affine(1, (), ((0, -1),))]           # 1 - rm < 0
    both = mask_conjuncts(m[4], aff)
    assert both == [Affine(0, (), ((0, 1),)) - sym(k, "n"), Affine(-12, (), ((1, 1),))]
    assert mask_conjuncts(m[5], aff) == []
    assert not any(mask_always_true(x, shape, aff) for x in m[:5]) and mask_always_true(m[5], shape, aff)


@pytest.mark.parametrize("bounds,true", [
    (dict(LT=16, LE=15, GT=-1, GE=0), [True, True, True, True]),       # exactly the tile: always true
    (dict(LT=15, LE=14, GT=0, GE=1), [False, False, False, False]),    # one short: not
    (dict(LT=17, LE=16, GT=-2, GE=-1), [True, True, True, True]),
])
def test_masks_provably_true_at_the_exact_edge(bounds, true):
    _, aff, m, shape = mask_forms(**bounds)
    assert [mask_always_true(x, shape, aff) for x in m[:4]] == true


def test_a_runtime_bound_is_not_provable_until_known():
    k, _, m, shape = mask_forms(LT=16, LE=15, GT=-1, GE=0)
    assert not mask_always_true(m[4], shape, analysis(k))
    assert mask_always_true(m[4], shape, analysis(k, n=8))
    assert not mask_always_true(m[4], shape, analysis(k, n=7))


# -- box plans: which masked accesses are exactly a bounds-predicated copy --------------------------
@tle.jit
def box_2d(x_ptr, y_ptr, M, N, ROW: tl.constexpr, COL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
           ROW_LIMIT: tl.constexpr):
    pid = tl.program_id(0)
    rm = pid * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    base = x_ptr + (ROW + rm[:, None]) * N + COL + rn[None, :]
    t = tl.load(base, mask=(rm[:, None] < M - ROW) & (rn[None, :] < N - COL), other=0.0)
    tl.store(y_ptr + rm[:, None] * BN + rn[None, :], t)
    tl.store(y_ptr + rm[:, None] * BN + rn[None, :], t, mask=(rm[:, None] < ROW_LIMIT) & (rm[:, None] < M))
    tl.store(y_ptr + rm[:, None] * BN + rn[None, :], t, mask=(rm[:, None] < M) & (rm[:, None] < M))


def plan_of(k, op, tensor, known):
    aff = analysis(k, **known)
    acc = classify(op, aff, {p.value.id: p for p in k.params})
    shape = op.operand("ptr").type.shape
    return plan_box(acc, op.operand("mask"), shape, tuple(tensor.shape), tuple(tensor.stride()), aff)


def starts(plan):
    return [(d.start, d.extent, d.axis) for d in plan.dims]


def test_box_plan_of_an_offset_masked_tile():
    M, N = 40, 48
    x = meta(M, N)
    k = ir_of(box_2d, x, meta(64, 16), M, N, ROW=3, COL=5, BM=8, BN=16, ROW_LIMIT=4)
    pid = ops_of_kind(k, ops.PROGRAM_ID)[0].results[0]
    load = ops_of_kind(k, ops.LOAD)[0]
    plan, why = plan_of(k, load, x, dict(M=M, N=N))
    assert why == ""
    assert starts(plan) == [(Affine(3, ((pid.id, 8),)), 8, 0), (Affine(5), 16, 1)]


def test_box_plan_refuses_two_different_bounds_on_one_axis():
    M, N = 40, 16
    y = meta(64, 16)
    k = ir_of(box_2d, meta(M, N), y, M, N, ROW=0, COL=0, BM=8, BN=16, ROW_LIMIT=4)
    _, tighter, same = ops_of_kind(k, ops.STORE)
    plan, why = plan_of(k, tighter, y, dict(M=M, N=N))
    assert plan is None and why == "two different bounds on tile axis 0"
    plan, why = plan_of(k, same, y, dict(M=64, N=N))                   # the same bound twice is one bound
    assert why == "" and plan.dims[0].extent == 8


def test_box_plan_mask_must_match_the_tensor_edge():
    M, N = 40, 48
    x = meta(M, N)
    k = ir_of(box_2d, x, meta(64, 16), M, N, ROW=3, COL=5, BM=8, BN=16, ROW_LIMIT=4)
    load = ops_of_kind(k, ops.LOAD)[0]
    # the mask says rows < M - 3 from row 3: the tensor edge; a longer tensor breaks that
    plan, why = plan_of(k, load, meta(M + 1, N), dict(M=M, N=N))
    assert plan is None and why


@tle.jit
def lower_bounded(x_ptr, y_ptr, M, N, ROW, LOW: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    rm = ROW + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    inside = (rm[:, None] >= LOW) & (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=inside))


@pytest.mark.parametrize("low, row, expect", [
    (0, None, ""),               # `index >= 0` is the copy's own lower predicate: a box
    (0, -3, ""),                 # even where the start is negative: the program masks those rows itself
    (1, 5, ""),                  # provably true where the start is known
    (1, None, "a lower bound on tile axis 0 that is not its dimension's start"),
])
def test_box_plan_takes_a_lower_bound_of_zero(low, row, expect):
    """Block pointers and tensor descriptors check both ends of each axis: `0 <= index < size`."""
    M, N = 40, 16
    x = meta(M, N)
    k = ir_of(lower_bounded, x, meta(M, N), M, N, 7 if row is None else row, LOW=low, BM=8, BN=16)
    known = dict(M=M, N=N) if row is None else dict(M=M, N=N, ROW=row)
    plan, why = plan_of(k, ops_of_kind(k, ops.LOAD)[0], x, known)
    assert why == expect
    if not expect:
        start = sym(k, "ROW") if row is None else Affine(row)
        assert starts(plan) == [(start, 8, 0), (Affine(0), 16, 1)]


@tle.jit
def flat_box(x_ptr, y_ptr, START, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + START + offs))


@pytest.mark.parametrize("shape,start,expect", [
    ((4, 3, 16), 16 * 3 * 2 + 16 * 1, [(2, 1, None), (1, 1, None), (0, 16, 0)]),   # splits over dims
    ((4, 3, 16), 16 * 3 * 3 + 16 * 2, [(3, 1, None), (2, 1, None), (0, 16, 0)]),   # the last row
    ((4, 1, 16), 16 * 2, [(2, 1, None), (0, 1, None), (0, 16, 0)]),                # a unit dimension
    ((4, 3, 16), 16 * 3 * 4, "past its end"),                                      # a row past the end
    ((4, 3, 16), 16 * 3 + 4, "not provably inside"),                               # runs into the next row
    ((4, 3, 16), -16, "may be negative"),
    ((2, 16), 16, [(1, 1, None), (0, 16, 0)]),                                     # a dimension of 2
])
def test_box_plan_splits_a_constant_base(shape, start, expect):
    x = meta(*shape)
    k = ir_of(flat_box, x, meta(16), start, BLOCK=16)
    plan, why = plan_of(k, ops_of_kind(k, ops.LOAD)[0], x, dict(START=start))
    if isinstance(expect, str):
        assert plan is None and expect in why
    else:
        assert why == "" and starts(plan) == [(Affine(s), e, a) for s, e, a in expect]


def test_box_plan_over_a_broadcast_dimension():
    x = meta(16).expand(4, 16)                                 # strides (0, 1): every row is the same memory
    k = ir_of(flat_box, x, meta(16), 0, BLOCK=16)
    plan, why = plan_of(k, ops_of_kind(k, ops.LOAD)[0], x, dict(START=0))
    assert why == "" and starts(plan) == [(Affine(0), 1, None), (Affine(0), 16, 0)]


@tle.jit
def flat_rows(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, 2)
    c = tl.arange(0, BLOCK)
    tl.store(y_ptr + r[:, None] * BLOCK + c[None, :], tl.load(x_ptr + r[:, None] * BLOCK + c[None, :]))


def test_box_plan_over_a_dimension_of_two():
    x = meta(2, 16)
    k = ir_of(flat_rows, x, meta(2, 16), BLOCK=16)
    plan, why = plan_of(k, ops_of_kind(k, ops.LOAD)[0], x, {})
    assert why == "" and starts(plan) == [(Affine(0), 2, 0), (Affine(0), 16, 1)]


@tle.jit
def batched_box(x_ptr, y_ptr, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    b = tl.program_id(0)
    r = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + b * ROWS * BLOCK + r * BLOCK + offs))
    tl.store(y_ptr + offs, tl.load(x_ptr + b * ROWS * BLOCK - r * BLOCK + offs))
    tl.store(y_ptr + offs, tl.load(x_ptr + r * 3 + offs))


def test_box_plan_splits_program_ids_over_dims():
    x = meta(5, 7, 16)
    k = ir_of(batched_box, x, meta(16), BLOCK=16, ROWS=7)
    b, r = [op.results[0].id for op in ops_of_kind(k, ops.PROGRAM_ID)]
    plus, minus, odd = ops_of_kind(k, ops.LOAD)
    plan, why = plan_of(k, plus, x, {})
    assert why == "" and starts(plan) == [(Affine(0, ((b, 1),)), 1, None), (Affine(0, ((r, 1),)), 1, None),
                                          (Affine(0), 16, 0)]
    plan, why = plan_of(k, minus, x, {})
    assert plan is None and "may be negative" in why
    plan, why = plan_of(k, odd, x, {})             # 3 * r moves along the rows' own dimension
    assert plan is None and "not provably inside dimension 2" in why


def test_box_plan_reasons_for_other_kinds():
    k = ir_of(strides, meta(64), meta(64), BLOCK=16)
    load = ops_of_kind(k, ops.LOAD)[0]
    plan, why = plan_of(k, load, meta(64), {})
    assert plan is None and "broadcast" in why


# -- known ranges and selected boxes (a state walk over a packed batch) ------------------------------
@tle.jit
def column_block(x_ptr, y_ptr, N: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    cols = tl.program_id(0) * BN + tl.arange(0, BN)
    for k0 in range(0, 64, BK):
        rows = k0 + tl.arange(0, BK)
        t = tl.load(x_ptr + rows[:, None] * N + cols[None, :])
        tl.store(y_ptr + rows[:, None] * N + cols[None, :], t)


def ranged_plan(k, op, tensor, grid):
    aff = analysis(k)
    acc = classify(op, aff, {p.value.id: p for p in k.params})
    return plan_box(acc, op.operand("mask"), op.operand("ptr").type.shape, tuple(tensor.shape),
                    tuple(tensor.stride()), aff, Ranges(aff, grid))


@pytest.mark.parametrize("grid, expect", [
    ((4,), ""),                                        # pid * 16 + 16 <= 64: inside
    ((5,), "not provably inside"),                     # the fifth program would run into the next row
    (None, "not provably inside"),                     # no grid: nothing known of the program id
])
def test_a_program_id_is_below_its_grid_extent(grid, expect):
    x = meta(64, 64)
    k = ir_of(column_block, x, meta(64, 64), N=64, BN=16, BK=32)
    plan, why = ranged_plan(k, ops_of_kind(k, ops.LOAD)[0], x, grid)
    assert (plan is None and expect in why) if expect else (why == "" and plan.dims[1].extent == 16)


def test_a_loop_counter_runs_within_its_constant_bounds():
    """k0 in range(0, 64, 32) takes 0 and 32: rows k0 .. k0 + 31 stay inside 64 rows, not inside 48."""
    k = ir_of(column_block, meta(64, 64), meta(64, 64), N=64, BN=16, BK=32)
    load = ops_of_kind(k, ops.LOAD)[0]
    plan, why = ranged_plan(k, load, meta(64, 64), (4,))
    assert why == "" and plan.dims[0].extent == 32
    aff = analysis(k)
    (loop,) = ops_of_kind(k, ops.FOR)
    counter = loop.body.args[0]
    aff.of(counter)
    assert Ranges(aff, (4,)).of_symbol(counter.id) == (0, 32)
    # rows 32 .. 63 of 48 in the first of two such blocks: the flat program reads on into the second
    plan, why = ranged_plan(k, load, meta(2, 48, 64), (4,))
    assert plan is None and "not provably inside" in why


@tle.jit
def sequence_rows(x_ptr, y_ptr, cu_ptr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr):
    hv = tl.program_id(1)
    bos, eos = tl.load(cu_ptr + tl.program_id(0)), tl.load(cu_ptr + tl.program_id(0) + 1)
    t = bos + tl.arange(0, BT)
    kr = tl.arange(0, K)
    x = tl.load(x_ptr + (t[:, None] * HV + hv) * K + kr[None, :], mask=(t < eos)[:, None], other=0.0)
    tl.store(y_ptr + kr[:, None] * K + kr[None, :], tl.dot(tl.trans(x), x))


def test_a_mask_inside_the_tensor_selects_a_whole_box():
    """t < eos bounds the rows at a sequence's end, not at the batch's: not a bounds-predicated copy, but the
    whole box selected by the mask, where the box lies inside the tensor wherever the mask holds."""
    x = meta(1, 256, 4, 32)
    k = ir_of(sequence_rows, x, meta(32, 32), meta(3, dtype=torch.int32), HV=4, K=32, BT=64)
    load = [op for op in ops_of_kind(k, ops.LOAD) if op.operand("mask") is not None][0]
    aff = analysis(k)
    acc = classify(load, aff, {p.value.id: p for p in k.params})
    args = (load.operand("mask"), (64, 32), (1, 256, 4, 32), (256 * 128, 128, 32, 1), aff, Ranges(aff, (2, 4)))
    plan, why = plan_box(acc, *args)
    assert plan is None and why                          # not a copy the mask means
    plan, why = plan_box(acc, *args, select=True)
    assert why == "" and plan.select
    assert [(d.extent, d.axis) for d in plan.dims] == [(1, None), (64, 0), (1, None), (32, 1)]
    (hv,) = [op.results[0] for op in ops_of_kind(k, ops.PROGRAM_ID) if op.attrs["axis"] == 1]
    assert plan.dims[2].start == Affine(0, ((hv.id, 1),))
    # four heads of a grid of five: the fifth program's head is past the dimension
    plan, why = plan_box(acc, *args[:-1], Ranges(aff, (2, 5)), select=True)
    assert plan is None


def test_a_selected_mask_fails_only_past_the_last_row():
    """t < eos over rows bos .. bos + 63 fails somewhere exactly where bos + 63 - eos >= 0: the form the lowering
    guards the select with (a full chunk skips it)."""
    k = ir_of(sequence_rows, meta(1, 256, 4, 32), meta(32, 32), meta(3, dtype=torch.int32), HV=4, K=32, BT=64)
    load = [op for op in ops_of_kind(k, ops.LOAD) if op.operand("mask") is not None][0]
    aff = analysis(k)
    (form,) = mask_fails_at(load.operand("mask"), (64, 32), aff)
    assert form.const == 63 and not form.axes and sorted(c for _, c in form.syms) == [-1, 1]
    (bos_id, _), = [(s, c) for s, c in form.syms if c == 1]
    (eos_id, _), = [(s, c) for s, c in form.syms if c == -1]
    assert aff.symbols[bos_id] is not aff.symbols[eos_id]
    assert mask_fails_at(None, (64, 32), aff) == []


@tle.jit
def backward_walk(x_ptr, y_ptr, cu_ptr, K: tl.constexpr, BT: tl.constexpr):
    bos, eos = tl.load(cu_ptr), tl.load(cu_ptr + 1)
    chunks = (eos - bos + BT - 1) // BT
    kr = tl.arange(0, K)
    acc = tl.zeros([K, K], dtype=tl.float32)
    for i in range(0, chunks):
        t = bos + (chunks - 1 - i) * BT + tl.arange(0, BT)
        x = tl.load(x_ptr + t[:, None] * K + kr[None, :], mask=(t < eos)[:, None], other=0.0)
        acc += tl.dot(tl.trans(x), x)
    tl.store(y_ptr + kr[:, None] * K + kr[None, :], acc)


def test_a_walk_backwards_starts_at_or_above_zero():
    """t = bos + (chunks - 1 - i) BT for i in range(chunks): with i at most chunks - 1 where the body runs, the
    start is at least bos, though its form has a negative term."""
    x = meta(1, 256, 16)
    k = ir_of(backward_walk, x, meta(16, 16), meta(2, dtype=torch.int32), K=16, BT=64)
    load = [op for op in ops_of_kind(k, ops.LOAD) if op.operand("mask") is not None][0]
    aff = analysis(k)
    acc = classify(load, aff, {p.value.id: p for p in k.params})
    plan, why = plan_box(acc, load.operand("mask"), (64, 16), (1, 256, 16), (4096, 16, 1), aff, Ranges(aff, (1,)),
                         select=True)
    assert why == "" and plan.select
    start = plan.dims[1].start
    assert any(c < 0 for _, c in start.syms)                  # - BT i
    assert not any(c < 0 for _, c in Ranges(aff, (1,)).least(start).syms)
