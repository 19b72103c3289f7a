"""A raw function's body as TileLang statements: the text of selects, unsigned comparisons, integer bit
logic, literal folds, loops with a start and a step, branches with and without an else, values carried
through a loop that trade places, and thread axes past the ones given; what that text computes, thread by
thread, in the TileLang interpreter; and tle.call sites whose body reads the thread index only in its first
row, only through a branch result, or along three thread axes."""
from typing import Annotated

import pytest
import torch
import triton.language as tl

pytest.importorskip("jaxlib.mlir")

import tle  # noqa: E402
from tle.lowering.tilelang.raw_render import render_tilelang, render_tilelang_rows  # noqa: E402
from tle.raw.mlir import arith, ir, nvvm, scf, tensor  # noqa: E402
from raw_functions import thread_index  # noqa: E402
from test_raw_mlir import _run_tilelang  # noqa: E402
from tilelang_oracle import interpret_tilelang, needs_tilelang  # noqa: E402

F128 = Annotated[ir.RankedTensorType, "tensor<128xf32>"]
I128 = Annotated[ir.RankedTensorType, "tensor<128xi32>"]


def i32():
    return ir.IntegerType.get_signless(32)


def index():
    return ir.IndexType.get()


def tid():
    return thread_index(nvvm.ThreadIdXOp)


# -- raw functions -----------------------------------------------------------------------------------------
@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="none")
def float_picks(x: F128, y: F128, low: F128, high: F128, pick: F128):
    """low = minimumf(x, y), high = maximumf(x, y) (NaN in, NaN out), pick = y where x < y else x."""
    i = tid()
    v, w = tensor.extract(x, [i]), tensor.extract(y, [i])
    tensor.insert(arith.minimumf(v, w), low, [i])
    tensor.insert(arith.maximumf(v, w), high, [i])
    tensor.insert(arith.select(arith.cmpf(arith.CmpFPredicate.OLT, v, w), w, v), pick, [i])


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="none")
def integer_ops(k: I128, j: I128, both: I128, either: I128, below: I128, moved: I128):
    """k & j, k | j, k < j read unsigned, and k + (7 - 3) * (2 - 9), its literal arithmetic folded."""
    i = tid()
    m, n = tensor.extract(k, [i]), tensor.extract(j, [i])
    c = lambda v: arith.constant(i32(), v)  # noqa: E731
    tensor.insert(arith.andi(m, n), both, [i])
    tensor.insert(arith.ori(m, n), either, [i])
    tensor.insert(arith.extui(i32(), arith.cmpi(arith.CmpIPredicate.ult, m, n)), below, [i])
    tensor.insert(arith.addi(m, arith.muli(arith.subi(c(7), c(3)), arith.subi(c(2), c(9)))), moved, [i])


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="none")
def int32_edges(low: I128, high: I128):
    """-2**30 - 2**30 is the smallest int32, a literal; 2**30 + 2**30 is past the largest."""
    i = tid()
    c = lambda v: arith.constant(i32(), v)  # noqa: E731
    tensor.insert(arith.subi(c(-2**30), c(2**30)), low, [i])
    tensor.insert(arith.addi(c(2**30), c(2**30)), high, [i])


def _as_f32(iv):
    return arith.sitofp(ir.F32Type.get(), arith.index_cast(i32(), iv))


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="none")
def loops(x: F128, odd: F128, mid: F128, first: F128, second: F128):
    """odd = x + 1 + 3 + 5 + 7 (a loop from 1 to 9 by 2); mid = x + 2 + 3 + 4 + 5 (from 2 to 6); and a
    pair (first, second) = (1, x) that trades places three times."""
    f32 = ir.F32Type.get()
    i = tid()
    v = tensor.extract(x, [i])
    c = lambda n: arith.constant(index(), n)  # noqa: E731
    for lo, hi, step, out in ((1, 9, 2, odd), (2, 6, 1, mid)):
        loop = scf.ForOp(c(lo), c(hi), c(step), [v])
        with ir.InsertionPoint(loop.body):
            scf.YieldOp([arith.addf(loop.inner_iter_args[0], _as_f32(loop.induction_variable))])
        tensor.insert(loop.results[0], out, [i])
    swap = scf.ForOp(c(0), c(3), c(1), [arith.constant(f32, 1.0), v])
    with ir.InsertionPoint(swap.body):
        a, b = swap.inner_iter_args
        scf.YieldOp([b, a])
    tensor.insert(swap.results[0], first, [i])
    tensor.insert(swap.results[1], second, [i])


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="none")
def branches(x: F128, out: F128, scaled: F128):
    """out = 2x where x > 0 else -x (a branch writing a tile in both arms); scaled = 3x where x > 0 else 0.5
    (a branch result whose else arm only yields a constant)."""
    f32 = ir.F32Type.get()
    i = tid()
    v = tensor.extract(x, [i])
    positive = arith.cmpf(arith.CmpFPredicate.OGT, v, arith.constant(f32, 0.0))
    written = scf.IfOp(positive, [out.type], has_else=True)
    with ir.InsertionPoint(written.then_block):
        scf.YieldOp([tensor.insert(arith.mulf(v, arith.constant(f32, 2.0)), out, [i])])
    with ir.InsertionPoint(written.else_block):
        scf.YieldOp([tensor.insert(arith.negf(v), out, [i])])
    half = arith.constant(f32, 0.5)
    result = scf.IfOp(positive, [f32], has_else=True)
    with ir.InsertionPoint(result.then_block):
        scf.YieldOp([arith.mulf(v, arith.constant(f32, 3.0))])
    with ir.InsertionPoint(result.else_block):
        scf.YieldOp([half])
    tensor.insert(result.results[0], scaled, [i])


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="none")
def clamp_negative(x: F128, out: F128):
    """out = 0 where x < 0: a branch with no else arm."""
    f32 = ir.F32Type.get()
    i = tid()
    zero = arith.constant(f32, 0.0)
    negative = arith.cmpf(arith.CmpFPredicate.OLT, tensor.extract(x, [i]), zero)
    branch = scf.IfOp(negative, [out.type], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([tensor.insert(zero, out, [i])])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([out])


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=2, sync_scope="none")
def plane(out: I128):
    """out[tx + ty * ntid.x] = ntid.y: a body for two thread axes."""
    tx, ty = tid(), thread_index(nvvm.ThreadIdYOp)
    nx = arith.index_cast(index(), nvvm.BlockDimXOp(i32()).res)
    ny = nvvm.BlockDimYOp(i32()).res
    tensor.insert(ny, out, [arith.addi(tx, arith.muli(ty, nx))])


# -- the TileLang text -------------------------------------------------------------------------------------
def test_select_and_unsigned_comparison_text():
    """arith.select is T.if_then_else(condition, true value, false value), in that order, and an unsigned
    cmpi compares both operands cast to uint32 (a negative int32 is a huge unsigned one)."""
    picks = render_tilelang(float_picks.body(), ["x", "y", "low", "high", "pick"], ["tx"], [128])
    assert "raw_float_picks_5 = T.if_then_else(raw_float_picks_4, raw_float_picks_1, raw_float_picks_0)" in picks
    assert "raw_float_picks_4 = (raw_float_picks_0 < raw_float_picks_1)" in picks
    ints = render_tilelang(integer_ops.body(), ["k", "j", "both", "either", "below", "moved"], ["tx"], [128])
    assert "raw_integer_ops_4 = (T.cast(raw_integer_ops_0, 'uint32') < T.cast(raw_integer_ops_1, 'uint32'))" \
        in ints


def test_nan_propagating_min_and_max_text():
    """maximumf / minimumf: where either operand is NaN the result is their sum (NaN), else T.max / T.min,
    which would drop the NaN."""
    lines = render_tilelang(float_picks.body(), ["x", "y", "low", "high", "pick"], ["tx"], [128])
    a, b = "raw_float_picks_0", "raw_float_picks_1"
    assert f"raw_float_picks_2 = T.if_then_else(T.Or({a} != {a}, {b} != {b}), {a} + {b}, T.min({a}, {b}))" \
        in lines
    assert f"raw_float_picks_3 = T.if_then_else(T.Or({a} != {a}, {b} != {b}), {a} + {b}, T.max({a}, {b}))" \
        in lines


def test_integer_bits_and_literal_folds_text():
    """andi / ori on integers are the bitwise & and |; arithmetic on two literals is one literal (negative
    ones too), so k + (7 - 3) * (2 - 9) is a single add of -28."""
    lines = render_tilelang(integer_ops.body(), ["k", "j", "both", "either", "below", "moved"], ["tx"], [128])
    assert lines == [
        "raw_integer_ops_0 = k[tx]",
        "raw_integer_ops_1 = j[tx]",
        "raw_integer_ops_2 = (raw_integer_ops_0 & raw_integer_ops_1)",
        "both[tx] = raw_integer_ops_2",
        "raw_integer_ops_3 = (raw_integer_ops_0 | raw_integer_ops_1)",
        "either[tx] = raw_integer_ops_3",
        "raw_integer_ops_4 = (T.cast(raw_integer_ops_0, 'uint32') < T.cast(raw_integer_ops_1, 'uint32'))",
        "raw_integer_ops_5 = T.cast(raw_integer_ops_4, 'int32')",
        "below[tx] = raw_integer_ops_5",
        "raw_integer_ops_6 = (raw_integer_ops_0 + -28)",
        "moved[tx] = raw_integer_ops_6",
    ]


def test_literal_folds_stop_at_the_int32_range():
    """A fold of two literals stays inside int32: the smallest int32 is a literal, a sum past the largest
    stays the sum the MLIR wrote (it wraps, as arith.addi does) rather than becoming an int64 literal."""
    lines = render_tilelang(int32_edges.body(), ["low", "high"], ["tx"], [128])
    assert lines == ["low[tx] = -2147483648",
                     "raw_int32_edges_0 = (1073741824 + 1073741824)",
                     "high[tx] = raw_int32_edges_0"]


def test_loop_bounds_text():
    """scf.for from 0 by 1 is T.serial(n); from another start by 1, T.serial(start, stop); by another
    step, T.serial(start, stop, step)."""
    lines = render_tilelang(loops.body(), ["x", "odd", "mid", "first", "second"], ["tx"], [128])
    serials = [line.strip() for line in lines if "T.serial" in line]
    assert [s.split(" in ")[1] for s in serials] == ["T.serial(1, 9, 2):", "T.serial(2, 6):", "T.serial(3):"]


def test_values_that_trade_places_are_staged():
    """A loop yielding (b, a) for its carried (a, b) writes both slots from lets taken before either is
    written, so each slot gets the other's value of the previous iteration."""
    lines = render_tilelang(loops.body(), ["x", "odd", "mid", "first", "second"], ["tx"], [128])
    start = lines.index("for raw_loops_11 in T.serial(3):")
    assert lines[start - 2:] == [
        "raw_loops_9 = T.alloc_var('float32', init=T.float32(1.0))",
        "raw_loops_10 = T.alloc_var('float32', init=raw_loops_0)",
        "for raw_loops_11 in T.serial(3):",
        "    raw_loops_12 = raw_loops_10",
        "    raw_loops_13 = raw_loops_9",
        "    raw_loops_9 = raw_loops_12",
        "    raw_loops_10 = raw_loops_13",
        "first[tx] = raw_loops_9",
        "second[tx] = raw_loops_10",
    ]


def test_branch_text():
    """A branch gets an `else:` when its else arm has statements or writes a result slot, and none when the
    else arm is empty and there is no result."""
    assert render_tilelang(branches.body(), ["x", "out", "scaled"], ["tx"], [128])[2:] == [
        "if raw_branches_1:",
        "    raw_branches_2 = (raw_branches_0 * T.float32(2.0))",
        "    out[tx] = raw_branches_2",
        "else:",
        "    raw_branches_3 = (-raw_branches_0)",
        "    out[tx] = raw_branches_3",
        "raw_branches_4 = T.alloc_var('float32')",
        "if raw_branches_1:",
        "    raw_branches_5 = (raw_branches_0 * T.float32(3.0))",
        "    raw_branches_4 = raw_branches_5",
        "else:",
        "    raw_branches_4 = T.float32(0.5)",
        "scaled[tx] = raw_branches_4",
    ]
    assert render_tilelang(clamp_negative.body(), ["x", "out"], ["tx"], [128]) == [
        "raw_clamp_negative_0 = x[tx]",
        "raw_clamp_negative_1 = (raw_clamp_negative_0 < T.float32(0.0))",
        "if raw_clamp_negative_1:",
        "    out[tx] = T.float32(0.0)",
    ]


def test_thread_axes_past_the_given_ones():
    """A body for two thread axes, given one: thread index y is 0 and its extent 1, so
    out[tx + ty * ntid.x] = ntid.y is out[tx] = 1; given both, each reads its own."""
    assert render_tilelang(plane.body(), ["out"], ["tx"], [128]) == ["out[tx] = 1"]
    assert render_tilelang(plane.body(), ["out"], ["tx", "ty"], [32, 4]) == [
        "raw_plane_0 = (ty * 32)", "raw_plane_1 = (tx + raw_plane_0)", "out[raw_plane_1] = 4"]


# -- what the text computes, thread by thread ----------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_float_picks_compute_what_the_mlir_says(tmp_path):
    """NaN reaches minimumf / maximumf results from either side; the select picks its true value where the
    condition holds and its false value elsewhere."""
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(128, generator=g), torch.randn(128, generator=g)
    x[:3] = torch.tensor([float("nan"), 1.0, float("nan")])
    y[:3] = torch.tensor([2.0, float("nan"), float("nan")])
    low, high, pick = torch.zeros(128), torch.zeros(128), torch.zeros(128)
    _run_tilelang(tmp_path, float_picks, [x, y, low, high, pick])
    nan = torch.isnan(x) | torch.isnan(y)
    nans = torch.full((128,), float("nan"))
    torch.testing.assert_close(low, torch.where(nan, nans, torch.minimum(x, y)), equal_nan=True)
    torch.testing.assert_close(high, torch.where(nan, nans, torch.maximum(x, y)), equal_nan=True)
    torch.testing.assert_close(pick, torch.where(x < y, y, x), equal_nan=True)


def test_integer_ops_compute_what_the_mlir_says(tmp_path):
    """Bitwise and / or of int32, the unsigned comparison (every negative is above every non-negative), and
    the folded literal arithmetic."""
    g = torch.Generator().manual_seed(4)
    k = torch.randint(-1000, 1000, (128,), generator=g, dtype=torch.int32)
    j = torch.randint(-1000, 1000, (128,), generator=g, dtype=torch.int32)
    outs = [torch.zeros(128, dtype=torch.int32) for _ in range(4)]
    _run_tilelang(tmp_path, integer_ops, [k, j, *outs])
    both, either, below, moved = outs
    assert torch.equal(both, k & j) and torch.equal(either, k | j)
    unsigned = lambda t: t.to(torch.int64) % 2**32  # noqa: E731
    assert torch.equal(below, (unsigned(k) < unsigned(j)).int())
    assert below.any() and not below.all()
    assert torch.equal(moved, k - 28)


def test_loops_compute_what_the_mlir_says(tmp_path):
    """A loop with a start and a step visits just its counters; two values that trade places each
    iteration end where three trades put them (each written from the other's previous value)."""
    x = torch.randn(128, generator=torch.Generator().manual_seed(5))
    outs = [torch.zeros(128) for _ in range(4)]
    _run_tilelang(tmp_path, loops, [x, *outs])
    odd, mid, first, second = outs
    torch.testing.assert_close(odd, x + 16)
    torch.testing.assert_close(mid, x + 14)
    torch.testing.assert_close(first, x)
    torch.testing.assert_close(second, torch.ones(128))


def test_branches_compute_what_the_mlir_says(tmp_path):
    """Both arms of a branch run where their condition says, and a result slot gets the else arm's constant."""
    x = torch.randn(128, generator=torch.Generator().manual_seed(6))
    out, scaled = torch.full((128,), float("nan")), torch.full((128,), float("nan"))
    _run_tilelang(tmp_path, branches, [x, out, scaled])
    torch.testing.assert_close(out, torch.where(x > 0, 2 * x, -x))
    torch.testing.assert_close(scaled, torch.where(x > 0, 3 * x, torch.tensor(0.5)))


# -- tle.call sites ----------------------------------------------------------------------------------------
@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="none")
def fill_own(x: F128, out: F128):
    """out[t] = 2.5: one statement, at the thread's own index."""
    tensor.insert(arith.constant(ir.F32Type.get(), 2.5), out, [tid()])


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="none")
def own_or_first(x: F128, out: F128):
    """p = t where x[0] > 0 else 0; out[p] = x[p]: the thread index is read only as a branch result."""
    c0 = arith.constant(index(), 0)
    positive = arith.cmpf(arith.CmpFPredicate.OGT, tensor.extract(x, [c0]), arith.constant(ir.F32Type.get(), 0.0))
    where = scf.IfOp(positive, [index()], has_else=True)
    with ir.InsertionPoint(where.then_block):
        scf.YieldOp([tid()])
    with ir.InsertionPoint(where.else_block):
        scf.YieldOp([c0])
    p = where.results[0]
    tensor.insert(tensor.extract(x, [p]), out, [p])


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=3, sync_scope="none")
def coordinates(x: F128, out: F128):
    """out[(tz * ntid.y + ty) * ntid.x + tx] = tx + 10 ty + 100 tz."""
    tx, ty, tz = (thread_index(op) for op in (nvvm.ThreadIdXOp, nvvm.ThreadIdYOp, nvvm.ThreadIdZOp))
    nx, ny = (arith.index_cast(index(), op(i32()).res) for op in (nvvm.BlockDimXOp, nvvm.BlockDimYOp))
    flat = arith.addi(arith.muli(arith.addi(arith.muli(tz, ny), ty), nx), tx)
    c = lambda n: arith.constant(index(), n)  # noqa: E731
    value = arith.addi(arith.addi(tx, arith.muli(ty, c(10))), arith.muli(tz, c(100)))
    tensor.insert(_as_f32(value), out, [flat])


@tle.jit
def call_128(x_ptr, o_ptr, FN: tl.constexpr, THREADS: tl.constexpr):
    offs = tl.arange(0, 128)
    x = tl.load(x_ptr + offs)
    out = tl.zeros_like(x)
    tle.call(FN, args=[x, out], hardware={"threads": THREADS})
    tl.store(o_ptr + offs, out)


def _source(fn, threads):
    meta = torch.empty(128, device="meta")
    return call_128.lower(meta, meta, FN=fn, THREADS=threads, grid=(1,), backend="tilelang").source


@needs_tilelang
def test_a_one_statement_body_reading_the_thread_index():
    """A body of one statement that indexes by the thread keeps the thread index it reads."""
    src = _source(fill_own, (128,))
    assert "tid = T.get_thread_binding(0)" in src and "out[tid] = T.float32(2.5)" in src
    out = torch.full((128,), float("nan"))
    interpret_tilelang(call_128, (1,), torch.randn(128), out, FN=fill_own, THREADS=(128,))
    torch.testing.assert_close(out, torch.full((128,), 2.5))


def test_a_thread_index_read_as_a_branch_result_is_a_read():
    """A thread index that is only yielded into a result slot is read by the rendered statements."""
    rendered = render_tilelang_rows(own_or_first.body(), ["x", "out"], ["tx"], [128])
    assert rendered.threads_read == {"tx"}
    assert "    raw_own_or_first_2 = tx" in rendered.lines()
    assert render_tilelang_rows(fill_own.body(), ["x", "out"], ["tx"], [128]).threads_read == {"tx"}


@needs_tilelang
@pytest.mark.parametrize("first", [1.0, -1.0])
def test_a_call_reading_the_thread_index_through_a_branch(first):
    """The kernel computes the thread index for a call whose body reads it only as a branch result: every
    thread copies its own element where x[0] > 0, else all copy element 0."""
    assert "tid = T.get_thread_binding(0)" in _source(own_or_first, (128,))
    x = torch.randn(128, generator=torch.Generator().manual_seed(7))
    x[0] = first
    out = torch.full((128,), float("nan"))
    interpret_tilelang(call_128, (1,), x, out, FN=own_or_first, THREADS=(128,))
    expected = x.clone() if first > 0 else torch.cat([x[:1], torch.zeros(127)])
    torch.testing.assert_close(out, expected)


@needs_tilelang
def test_three_thread_axes_split_the_thread_index():
    """Threads (2, 4, 16): x is the flat index mod 2, y the flat index over 2 mod 4, z the flat index over 8."""
    src = _source(coordinates, (2, 4, 16))
    assert "tid_x = tid % 2" in src and "tid_y = (tid // 2) % 4" in src and "tid_z = tid // 8" in src


@needs_tilelang
@pytest.mark.parametrize("threads", [(2, 4, 16), (16, 2, 4), (4, 32, 1)])
def test_three_thread_axes_compute_their_coordinates(threads):
    """Axis x varies fastest over the kernel's threads, then y, then z, and ntid gives each axis's extent."""
    out = torch.full((128,), float("nan"))
    interpret_tilelang(call_128, (1,), torch.zeros(128), out, FN=coordinates, THREADS=threads)
    t = torch.arange(128)
    nx, ny = threads[0], threads[1]
    expected = t % nx + 10 * ((t // nx) % ny) + 100 * (t // (nx * ny))
    torch.testing.assert_close(out, expected.float())


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="none")
def infinities(low: F128, high: F128):
    """low = -inf, high = +inf: the starting values of a running max and min."""
    i = tid()
    tensor.insert(arith.constant(ir.F32Type.get(), float("-inf")), low, [i])
    tensor.insert(arith.constant(ir.F32Type.get(), float("inf")), high, [i])


def test_infinite_literals_keep_their_sign():
    """An infinite float literal is T.infinity of its dtype, negated when it is -inf."""
    lines = render_tilelang(infinities.body(), ["low", "high"], ["tx"], [128])
    assert lines == ["low[tx] = -T.infinity('float32')", "high[tx] = T.infinity('float32')"]
