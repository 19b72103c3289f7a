"""The kernels of tle.ops.sample (a threshold kernel, then a draw kernel) and tle.ops.top_k_top_p_mask: one
program per row of logits, the row read a few times and never sorted (kernels/sampling.py says what they compute and why this way).

A row's values are y = logits * inv_temperature in fp32. Its kept set is {y >= tau}, tau the largest of the
top-k threshold (the k-th largest value), the top-p threshold (the largest value v whose mass exp(y - max)
above and at v reaches p times the mass of the top-k set) and the min-p threshold (max + log(min_p)). A
threshold is found in three steps:
- bracket: passes over the row that count and weigh the values at F pivots at once (`_ladder`) and move the
  bracket [lo, hi) that holds the threshold to the pivots around it, until at most CAP values lie in it;
- gather: one pass writes the values in the bracket (all values >= lo when at most CAP of them are) and
  their columns, in column order, to the row's scratch;
- pick: the scratch values sorted (CAP of them, in registers) give the threshold exactly.
The sample is drawn by inverse transform in column order over the kept set with one uniform from the Philox
stream: from the scratch when it holds the whole kept set, else in one more pass over the row."""
from __future__ import annotations

import triton.language as tl

import tle
from tle.kernels.philox import philox4x32_10

NEG_INF = float("-inf")


@tle.jit
def _scaled(row_ptr, start, cols, n_cols, inv_t):
    """The tile of y = logits * inv_t at columns start + cols (-inf past the row's end)."""
    at = start + cols
    return tl.load(row_ptr + at, mask=at < n_cols, other=float("-inf")).to(tl.float32) * inv_t


@tle.jit
def _max_and_mass(row_ptr, n_cols, inv_t, BLOCK: tl.constexpr):
    """(max of y, sum of exp(y - max)) in one pass: each lane keeps its own running maximum and sum."""
    cols = tl.arange(0, BLOCK)
    run_max = tl.full([BLOCK], float("-inf"), tl.float32)
    run_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        y = _scaled(row_ptr, start, cols, n_cols, inv_t)
        new_max = tl.maximum(run_max, y)
        base = tl.where(new_max == float("-inf"), 0.0, new_max)      # a lane that has seen only -inf
        run_sum = run_sum * tl.exp(run_max - base) + tl.exp(y - base)
        run_max = new_max
    top = tl.max(run_max, 0)
    return top, tl.sum(run_sum * tl.exp(run_max - top), 0)


@tle.jit
def _ladder(row_ptr, n_cols, inv_t, top, pivots, BLOCK_L: tl.constexpr, F: tl.constexpr):
    """For each of the F pivots: how many values are >= it, and their mass sum exp(y - top). The pivots run
    along the first axis: a value's lanes hold all F of its comparisons, so its exp is taken once."""
    cols = tl.arange(0, BLOCK_L)
    count = tl.zeros([F, BLOCK_L], tl.int32)
    mass = tl.zeros([F, BLOCK_L], tl.float32)
    for start in range(0, n_cols, BLOCK_L):
        y = _scaled(row_ptr, start, cols, n_cols, inv_t)
        above = y[None, :] >= pivots[:, None]
        count += above.to(tl.int32)
        mass += tl.where(above, tl.exp(y - top)[None, :], 0.0)
    return tl.sum(count, 1), tl.sum(mass, 1)


@tle.jit
def _bracket(row_ptr, n_cols, inv_t, top, lo, lo_count, lo_mass, want_count, want_mass, by_mass,
             CAP: tl.constexpr, BLOCK_L: tl.constexpr, F: tl.constexpr, ROUNDS: tl.constexpr):
    """[lo, hi) holding the threshold: the largest value v with count(y >= v) >= want_count (by_mass == 0) or
    mass(y >= v) >= want_mass. lo must hold already (-inf, or a threshold found before); (count, mass) at lo
    and at hi come back too. Pivots go 0.25, 1, 4, ... 4096 below the top while lo is -inf, then evenly between
    lo and hi; at most ROUNDS passes, stopping once at most CAP values lie in the bracket."""
    f = tl.arange(0, F)
    hi = float("inf")
    hi_count = 0
    hi_mass = 0.0
    rounds = 0
    while (lo_count - hi_count > CAP) & (rounds < ROUNDS):
        upper = tl.minimum(hi, top)
        far = upper - 0.25 * tl.exp2(2.0 * f.to(tl.float32))
        near = tl.maximum(upper - (upper - lo) * ((f + 1).to(tl.float32) / (F + 1)), lo)
        pivots = tl.where(lo == float("-inf"), far, near)           # descending
        count, mass = _ladder(row_ptr, n_cols, inv_t, top, pivots, BLOCK_L, F)
        holds = tl.where(by_mass != 0, mass >= want_mass, count >= want_count)
        first = tl.sum((holds == 0).to(tl.int32), 0)               # pivots 0 .. first-1 lie above the threshold
        at_lo = f == first
        at_hi = f == first - 1
        lo = tl.where(first < F, tl.sum(tl.where(at_lo, pivots, 0.0), 0), lo)
        lo_count = tl.where(first < F, tl.sum(tl.where(at_lo, count, 0), 0), lo_count)
        lo_mass = tl.where(first < F, tl.sum(tl.where(at_lo, mass, 0.0), 0), lo_mass)
        hi = tl.where(first > 0, tl.sum(tl.where(at_hi, pivots, 0.0), 0), hi)
        hi_count = tl.where(first > 0, tl.sum(tl.where(at_hi, count, 0), 0), hi_count)
        hi_mass = tl.where(first > 0, tl.sum(tl.where(at_hi, mass, 0.0), 0), hi_mass)
        rounds += 1
    return lo, lo_count, lo_mass, hi, hi_count, hi_mass


@tle.jit
def _gather(row_ptr, n_cols, inv_t, lo, hi, vals_ptr, cols_ptr, CAP: tl.constexpr, BLOCK: tl.constexpr):
    """Write the values in [lo, hi) and their columns, in column order, to the first CAP slots of the scratch;
    returns how many there are (those past CAP are counted, not written)."""
    cols = tl.arange(0, BLOCK)
    taken = 0
    for start in range(0, n_cols, BLOCK):
        y = _scaled(row_ptr, start, cols, n_cols, inv_t)
        take = (y >= lo) & (y < hi)
        slot = taken + tl.cumsum(take.to(tl.int32), 0) - 1
        fits = take & (slot < CAP)
        tl.store(vals_ptr + slot, y, mask=fits)
        tl.store(cols_ptr + slot, start + cols, mask=fits)
        taken += tl.sum(take.to(tl.int32), 0)
    return taken


@tle.jit
def _pick(vals_ptr, taken, top, lo, above_count, above_mass, want_count, want_mass, by_mass, CAP: tl.constexpr):
    """The threshold among the `taken` gathered values (above_count values of mass above_mass lie above them),
    and (count, mass) of the values >= it. More than CAP values in the bracket (ties): lo."""
    s = tl.arange(0, CAP)
    v = tl.sort(tl.load(vals_ptr + s, mask=s < taken, other=float("-inf")), descending=True)
    e = tl.exp(v - top)
    reached = tl.where(by_mass != 0, above_mass + tl.cumsum(e, 0) >= want_mass, above_count + s + 1 >= want_count)
    first = tl.minimum(tl.min(tl.where(reached & (s < taken), s, CAP), 0), taken - 1)   # rounding: the last
    tau = tl.where((taken > 0) & (taken <= CAP), tl.sum(tl.where(s == first, v, 0.0), 0), lo)
    kept = (v >= tau) & (s < taken)
    return tau, above_count + tl.sum(kept.to(tl.int32), 0), above_mass + tl.sum(tl.where(kept, e, 0.0), 0)


@tle.jit
def _threshold(row_ptr, n_cols, inv_t, top, total, top_k, top_p, vals_ptr, cols_ptr, CAP: tl.constexpr,
               BLOCK: tl.constexpr, BLOCK_L: tl.constexpr, F: tl.constexpr, ROUNDS: tl.constexpr):
    """(tau, its kept mass, whether the scratch holds every value >= tau in column order, how many values the
    scratch holds) for top-k then top-p over the renormalized top-k set. top_k >= n_cols and top_p >= 1
    filter nothing (tau = -inf)."""
    tau = float("-inf")
    kept_count = n_cols
    kept_mass = total
    whole = 0
    taken = 0
    # one loop over the two filters, not two copies of its body: TileLang 0.1.15's layout inference finds no
    # layout for a kernel holding two copies of the bracketing loop
    for by_mass in range(2):
        if tl.where(by_mass == 0, top_k < n_cols, top_p < 1.0):
            want_count = tl.where(by_mass == 0, top_k, 0)
            want_mass = tl.where(by_mass == 0, 0.0, top_p * kept_mass)
            lo, lo_count, lo_mass, hi, hi_count, hi_mass = _bracket(
                row_ptr, n_cols, inv_t, top, tau, kept_count, kept_mass, want_count, want_mass, by_mass, CAP,
                BLOCK_L, F, ROUNDS)
            whole = (lo_count <= CAP).to(tl.int32)       # then gather every value >= lo, in column order
            hi = tl.where(whole != 0, float("inf"), hi)
            hi_count = tl.where(whole != 0, 0, hi_count)
            hi_mass = tl.where(whole != 0, 0.0, hi_mass)
            taken = _gather(row_ptr, n_cols, inv_t, lo, hi, vals_ptr, cols_ptr, CAP, BLOCK)
            tl.debug_barrier()                 # the scratch written, by every thread, before it is read
            tau, kept_count, kept_mass = _pick(vals_ptr, taken, top, lo, hi_count, hi_mass, want_count, want_mass,
                                               by_mass, CAP)
            tl.debug_barrier()                 # read before the next filter's gather writes it again
    return tau, kept_mass, whole, taken


@tle.jit
def _uniform(row, seed_lo, seed_hi, offset_lo, offset_hi):
    """Element `row` of the Philox stream of (seed, offset) (kernels/philox.py) as a uniform in [0, 1) with 24
    random bits (exact in fp32)."""
    off_lo = offset_lo.to(tl.uint32, bitcast=True)
    c0 = off_lo + (row // 4).to(tl.uint32)
    c1 = offset_hi.to(tl.uint32, bitcast=True) + (c0 < off_lo).to(tl.uint32)
    zero = c0 ^ c0
    w0, w1, w2, w3 = philox4x32_10(c0, c1, zero, zero, seed_lo.to(tl.uint32, bitcast=True),
                                   seed_hi.to(tl.uint32, bitcast=True))
    r = row % 4
    w = tl.where(r == 0, w0, tl.where(r == 1, w1, tl.where(r == 2, w2, w3)))
    return (w >> 8).to(tl.float32) * (1.0 / 16777216.0)


@tle.jit
def _draw_from_scratch(vals_ptr, cols_ptr, taken, tau, top, u, CAP: tl.constexpr):
    """The first gathered column (column order) whose running kept mass passes u times the kept mass."""
    s = tl.arange(0, CAP)
    v = tl.load(vals_ptr + s, mask=s < taken, other=float("-inf"))
    kept = v >= tau
    e = tl.where(kept, tl.exp(v - top), 0.0)
    target = u * tl.sum(e, 0)
    hit = tl.min(tl.where(kept & (tl.cumsum(e, 0) > target), s, CAP), 0)
    last = tl.max(tl.where(kept, s, -1), 0)                 # rounding left the target above the sum
    return tl.load(cols_ptr + tl.minimum(hit, last))


@tle.jit
def _mass_from(row_ptr, n_cols, inv_t, top, tau, BLOCK: tl.constexpr):
    """sum of exp(y - top) over y >= tau."""
    cols = tl.arange(0, BLOCK)
    mass = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        y = _scaled(row_ptr, start, cols, n_cols, inv_t)
        mass += tl.where(y >= tau, tl.exp(y - top), 0.0)
    return tl.sum(mass, 0)


@tle.jit
def _draw_from_row(row_ptr, n_cols, inv_t, top, tau, target, BLOCK: tl.constexpr):
    """The first column whose running kept mass (column order) passes target, reading the row until it does."""
    cols = tl.arange(0, BLOCK)
    run = 0.0
    token = -1
    last = 0
    start = 0
    while (token < 0) & (start < n_cols):
        y = _scaled(row_ptr, start, cols, n_cols, inv_t)
        kept = y >= tau
        e = tl.where(kept, tl.exp(y - top), 0.0)
        hit = tl.min(tl.where(kept & (run + tl.cumsum(e, 0) > target), cols, BLOCK), 0)
        token = tl.where(hit < BLOCK, start + hit, token)
        last = tl.maximum(last, start + tl.max(tl.where(kept, cols, -1), 0))
        run += tl.sum(e, 0)
        start += BLOCK
    return tl.where(token < 0, last, token)                 # rounding left the target above the sum


@tle.jit
def sample_threshold_kernel(logits_ptr, inv_temp_ptr, top_k_ptr, top_p_ptr, min_p_ptr, vals_ptr, cols_ptr, stats_ptr,
                            row_stride, n_cols, CAP: tl.constexpr, BLOCK: tl.constexpr, BLOCK_L: tl.constexpr,
                            F: tl.constexpr, ROUNDS: tl.constexpr):
    """A row's kept set for sampling: stats[row] = (tau, max of y, the kept mass or -1 where not yet known,
    how many values the scratch holds, or -1 where it does not hold the whole kept set). inv_temperature 0
    keeps the largest logit alone (min_p 1)."""
    row = tl.program_id(0)
    row_ptr = logits_ptr + row.to(tl.int64) * row_stride
    vals_ptr += row * CAP
    cols_ptr += row * CAP
    inv_t = tl.load(inv_temp_ptr + row)
    greedy = inv_t == 0.0
    inv_t = tl.where(greedy, 1.0, inv_t)
    top_k = tl.where(greedy, n_cols, tl.load(top_k_ptr + row))
    top_p = tl.where(greedy, 1.0, tl.load(top_p_ptr + row))
    min_p = tl.where(greedy, 1.0, tl.load(min_p_ptr + row))
    top, total = _max_and_mass(row_ptr, n_cols, inv_t, BLOCK)
    tau, kept_mass, whole, taken = _threshold(row_ptr, n_cols, inv_t, top, total, top_k, top_p, vals_ptr, cols_ptr,
                                              CAP, BLOCK, BLOCK_L, F, ROUNDS)
    floor = tl.where(min_p > 0.0, top + tl.log(min_p), float("-inf"))
    raised = floor > tau                         # the scratch no longer holds the kept set, nor its mass
    tl.store(stats_ptr + row * 4, tl.maximum(tau, floor))
    tl.store(stats_ptr + row * 4 + 1, top)
    tl.store(stats_ptr + row * 4 + 2, tl.where(raised, -1.0, kept_mass))
    tl.store(stats_ptr + row * 4 + 3, tl.where(raised | (whole == 0), -1.0, taken.to(tl.float32)))


@tle.jit(do_not_specialize=("seed_lo", "seed_hi", "offset_lo", "offset_hi"))
def sample_draw_kernel(logits_ptr, inv_temp_ptr, vals_ptr, cols_ptr, stats_ptr, out_ptr, row_stride, n_cols, seed_lo,
                       seed_hi, offset_lo, offset_hi, CAP: tl.constexpr, BLOCK: tl.constexpr):
    """out[row]: the column drawn from softmax(y) over the row's kept set (sample_threshold_kernel's stats) with
    the row's uniform; inv_temperature 0 draws with u = 0, the first kept column."""
    row = tl.program_id(0)
    row_ptr = logits_ptr + row.to(tl.int64) * row_stride
    vals_ptr += row * CAP
    cols_ptr += row * CAP
    tau = tl.load(stats_ptr + row * 4)
    top = tl.load(stats_ptr + row * 4 + 1)
    kept_mass = tl.load(stats_ptr + row * 4 + 2)
    taken = tl.load(stats_ptr + row * 4 + 3).to(tl.int32)
    inv_t = tl.load(inv_temp_ptr + row)
    greedy = inv_t == 0.0
    inv_t = tl.where(greedy, 1.0, inv_t)
    u = tl.where(greedy, 0.0, _uniform(row, seed_lo, seed_hi, offset_lo, offset_hi))
    if taken >= 0:
        token = _draw_from_scratch(vals_ptr, cols_ptr, taken, tau, top, u, CAP)
    else:
        if kept_mass < 0.0:
            kept_mass = _mass_from(row_ptr, n_cols, inv_t, top, tau, BLOCK)
        token = _draw_from_row(row_ptr, n_cols, inv_t, top, tau, u * kept_mass, BLOCK)
    tl.store(out_ptr + row, token.to(tl.int64))


@tle.jit
def top_k_top_p_mask_kernel(logits_ptr, top_k_ptr, top_p_ptr, vals_ptr, cols_ptr, out_ptr, row_stride,
                            out_row_stride, n_cols, CAP: tl.constexpr, BLOCK: tl.constexpr,
                            BLOCK_L: tl.constexpr, F: tl.constexpr, ROUNDS: tl.constexpr):
    """out[row] = logits[row] where kept (top-k, then top-p over the renormalized top-k set), -inf elsewhere."""
    row = tl.program_id(0)
    row_ptr = logits_ptr + row.to(tl.int64) * row_stride
    out_row = out_ptr + row.to(tl.int64) * out_row_stride
    vals_ptr += row * CAP
    cols_ptr += row * CAP
    top, total = _max_and_mass(row_ptr, n_cols, 1.0, BLOCK)
    tau, kept_mass, whole, taken = _threshold(row_ptr, n_cols, 1.0, top, total, tl.load(top_k_ptr + row),
                                       tl.load(top_p_ptr + row), vals_ptr, cols_ptr, CAP, BLOCK, BLOCK_L, F, ROUNDS)
    cols = tl.arange(0, BLOCK)
    for start in range(0, n_cols, BLOCK):
        at = start + cols
        x = tl.load(row_ptr + at, mask=at < n_cols, other=0.0)
        keep = x.to(tl.float32) >= tau
        tl.store(out_row + at, tl.where(keep, x, float("-inf")).to(out_ptr.dtype.element_ty), mask=at < n_cols)
