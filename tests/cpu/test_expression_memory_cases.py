"""How the TileLang lowering writes element-wise values and global memory accesses in cases the kernels and the
syntax corpus leave open: which tiles a tl.split reads from shared memory (it reads one element of every pair,
which a fragment cannot serve), which cheap index arithmetic stays inline, masks the generator cannot prove true
(a lower bound, a condition on the columns of a gather or of a warp group's row copy), 64-bit box starts into a
dimension past the int32 range, and the access report's account of each load and atomic. Numbers come from the
interpreter of TileLang programs on the CPU, against torch."""
import pytest
import torch
import triton.language as tl

import tle
from tilelang_oracle import interpret_tilelang, needs_tilelang

ZERO_FILL = "zero-filled by bounds predication"


def _lower(kernel, *args, grid=(1,), **meta):
    return kernel.lower(*args, grid=grid, backend="tilelang", **meta)


def _scope(source: str, name: str) -> str:
    """'shared' or 'fragment': where the generated kernel allocates buffer `name`."""
    for ln in source.splitlines():
        s = ln.strip()
        if s.startswith(f"{name} = T.alloc_shared("):
            return "shared"
        if s.startswith(f"{name} = T.alloc_fragment("):
            return "fragment"
    raise AssertionError(f"no buffer {name} in\n{source}")


def _report(lowered) -> dict[int, str]:
    """line -> how the access at that line was lowered."""
    return {line: how for line, _, _, how in lowered.compiled.access_report}


# -- a lower bound on the index is a mask, not a bulk copy ------------------------------------------------------
@tle.jit
def from_second(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs >= 1, other=0.0)
    tl.store(y_ptr + offs, x)


@needs_tilelang
def test_a_lower_bound_mask_keeps_the_masked_read():
    """`offs >= 1` is false at the first element: the mask is no bound of the argument's dimension, so the load
    stays an element-wise masked read (a T.copy of the whole box would read x[0] where the kernel asks for 0)."""
    x, y = torch.arange(1, 17, dtype=torch.float32), torch.full((16,), float("nan"))
    lowered = _lower(from_second, x, y, BLOCK=16)
    assert "x[i0] = T.if_then_else((i0 >= 1), x_ptr[i0], 0.0)" in lowered.source, lowered.source
    assert "T.copy(x_ptr" not in lowered.source
    interpret_tilelang(from_second, (1,), x, y, BLOCK=16)
    assert torch.equal(y, torch.cat([torch.zeros(1), x[1:]]))


# -- an asynchronous gather masked on a column condition that is no affine bound -------------------------------
@tle.jit
def gather_but_one_column(t_ptr, idx_ptr, z_ptr, BI: tl.constexpr, STEPS: tl.constexpr):
    offs_i = tl.arange(0, BI)
    c4 = tl.arange(0, 4)
    acc = tl.zeros([BI, 4], dtype=tl.float32)
    for s in tl.range(0, STEPS, num_stages=2):
        rows = tl.load(idx_ptr + s * BI + offs_i)
        acc += tle.load(t_ptr + rows[:, None] * 4 + c4[None, :], mask=(rows >= 0)[:, None] & (c4 != 2)[None, :],
                        is_async=True)
    tl.store(z_ptr + offs_i[:, None] * 4 + c4[None, :], acc)


@needs_tilelang
def test_an_async_gather_keeps_a_column_condition_it_cannot_prove():
    """Masked-off rows of an asynchronous gather may be sent past the end of the argument (bounds predication
    zero-fills them) only where every other conjunct of the mask is provably true: `c != 2` is not, so the read
    stays masked and column 2 reads as zero."""
    t = torch.arange(1, 161, dtype=torch.float32).view(40, 4)
    idx = torch.randint(0, 40, (48,), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    idx[::3] = -1
    z = torch.full((16, 4), float("nan"))
    lowered = _lower(gather_but_one_column, t, idx, z, BI=16, STEPS=3)
    assert all(ZERO_FILL not in how for how in _report(lowered).values())
    assert "(i1 != 2)" in lowered.source
    interpret_tilelang(gather_but_one_column, (1,), t, idx, z, BI=16, STEPS=3)
    r = idx.long().view(3, 16)
    want = torch.where((r >= 0)[..., None], t[r.clamp(min=0)], 0.0)
    want[..., 2] = 0.0
    assert torch.equal(z, want.sum(0))


# -- tl.split: the tiles a half reads at its own index live in shared memory -----------------------------------
@tle.jit
def halves_through_values(x_ptr, w_ptr, d_ptr, z_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.arange(0, 2 * BLOCK))
    z = tl.exp(x) * 0.5                     # materialized: stored and halved
    e, o = tl.split(tl.reshape(z, (BLOCK, 2)))
    tl.store(z_ptr + tl.arange(0, 2 * BLOCK), z)
    w = tl.load(w_ptr + tl.arange(0, 2))
    p = tl.load(x_ptr + offs[:, None] * 2 + tl.arange(0, 2)[None, :])
    a, b = tl.split(p * w[None, :])         # w broadcast along the rows: each half reads one element of it
    tl.store(d_ptr + offs, e - o + a * b)


@needs_tilelang
def test_split_reads_stop_at_a_materialized_tile():
    """A split over a materialized tile reads that tile's buffer, not what it was computed from: the
    exponential's buffer is shared, the load it exponentiates stays a fragment. A tile broadcast along the rows
    and halved on its own axis is read at the half's index, so it is shared."""
    x, w = torch.randn(128), torch.randn(2)
    d, z = torch.full((64,), float("nan")), torch.full((128,), float("nan"))
    lowered = _lower(halves_through_values, x, w, d, z, BLOCK=64)
    src = lowered.source
    assert (_scope(src, "x"), _scope(src, "z"), _scope(src, "w"), _scope(src, "p")) == \
        ("fragment", "shared", "shared", "shared"), src
    interpret_tilelang(halves_through_values, (1,), x, w, d, z, BLOCK=64)
    ez, pw = torch.exp(x) * 0.5, x.view(64, 2) * w
    torch.testing.assert_close(z, ez)
    torch.testing.assert_close(d, ez[0::2] - ez[1::2] + pw[:, 0] * pw[:, 1], atol=1e-5, rtol=1e-5)


@tle.jit
def halves_over_a_row_sum(x_ptr, t_ptr, d_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    t = tl.load(t_ptr + offs[:, None] * 8 + tl.arange(0, 8)[None, :])
    s = tl.sum(t, axis=1, keep_dims=True)                   # (BLOCK, 1), in a fragment
    p = tl.load(x_ptr + offs[:, None] * 2 + tl.arange(0, 2)[None, :])
    a, b = tl.split(p + s)
    tl.store(d_ptr + offs, a * b)


@needs_tilelang
def test_a_split_reads_a_column_broadcast_at_its_row_only():
    """`p + s`, with s of shape (BLOCK, 1) broadcast along the halved axis: both halves read s at their row
    alone, so the reduction's fragment serves them and the sum is written inline in each half (no shared copy of
    the (BLOCK, 2) tile)."""
    x, t, d = torch.randn(64, 2), torch.randn(64, 8), torch.full((64,), float("nan"))
    lowered = _lower(halves_over_a_row_sum, x, t, d, BLOCK=64)
    src = lowered.source
    assert _scope(src, "s") == "fragment"
    assert src.count("T.alloc_shared((64, 2)") == 1, src              # p, the load, only
    assert "((p[i0, 0] + s[i0]) * (p[i0, 1] + s[i0]))" in src, src
    interpret_tilelang(halves_over_a_row_sum, (1,), x, t, d, BLOCK=64)
    q = x + t.sum(1, keepdim=True)
    torch.testing.assert_close(d, q[:, 0] * q[:, 1], atol=1e-5, rtol=1e-5)


@tle.jit
def halves_of_computed_tiles(q_ptr, w_ptr, y_ptr, d_ptr, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    c2 = tl.arange(0, 2)
    q = tl.load(q_ptr + c2[:, None] * BLOCK + offs[None, :])
    w = tl.load(w_ptr + c2)
    a, b = tl.split(tl.trans(q * w[:, None]))      # halved on the first axis of q * w, through the transpose
    acc = tl.zeros((BLOCK, 2), dtype=tl.float32)
    for s in range(STEPS):
        acc += tl.load(y_ptr + s * 2 * BLOCK + offs[:, None] * 2 + c2[None, :])
    lo, hi = tl.split(acc * 2.0)                     # over a loop-carried fragment
    tl.store(d_ptr + offs, a * b + lo - hi)


@needs_tilelang
def test_split_operands_reached_through_a_transpose_and_from_a_carried_fragment():
    """The half's axis is followed through a transpose and a broadcast: w, broadcast along q's columns and
    halved on its own axis, is read at the half's index (shared). A split of `acc * 2.0` over a loop-carried
    accumulator (a fragment) first writes the product to a shared buffer, which the halves read."""
    q, w = torch.randn(2, 64), torch.randn(2)
    y, d = torch.randn(3, 64, 2), torch.full((64,), float("nan"))
    lowered = _lower(halves_of_computed_tiles, q, w, y, d, BLOCK=64, STEPS=3)
    src = lowered.source
    assert (_scope(src, "q"), _scope(src, "w"), _scope(src, "acc")) == ("shared", "shared", "fragment"), src
    lines = [ln.strip() for ln in src.splitlines()]
    (staged,) = [ln.split(" = ")[0] for ln in lines if ln.endswith("= T.alloc_shared((64, 2), 'float32')")]
    assert f"{staged}[i0, i1] = (acc[i0, i1] * 2.0)" in lines, src
    assert f"{staged}[i0, 0]" in src and f"{staged}[i0, 1]" in src
    interpret_tilelang(halves_of_computed_tiles, (1,), q, w, y, d, BLOCK=64, STEPS=3)
    r, acc = (q * w[:, None]).t(), y.sum(0) * 2
    torch.testing.assert_close(d, r[:, 0] * r[:, 1] + acc[:, 0] - acc[:, 1], atol=1e-5, rtol=1e-5)


# -- what is cheap to recompute: an index reinterpreted as unsigned ---------------------------------------------
@tle.jit
def index_hash(a_ptr, b_ptr, seed, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    h = (offs.to(tl.uint32) * 3 + seed) ^ 7
    tl.store(a_ptr + offs, h.to(tl.int32))
    tl.store(b_ptr + offs, (h >> 1).to(tl.int32))


@needs_tilelang
def test_an_index_cast_to_an_integer_of_its_width_costs_nothing():
    """An arange cast to an integer type of the same width (int32 to uint32) is a free reinterpretation: the
    hash of three cheap ops over it, read by two stores, is written inline in each rather than held in a
    fragment of its own."""
    a, b = torch.zeros(64, dtype=torch.int32), torch.zeros(64, dtype=torch.int32)
    src = _lower(index_hash, a, b, 5, BLOCK=64).source
    assert "h = T.alloc_fragment(" not in src, src
    assert src.count("T.cast(i0, 'uint32')") == 2, src
    interpret_tilelang(index_hash, (1,), a, b, 5, BLOCK=64)
    h = (torch.arange(64) * 3 + 5) ^ 7
    assert torch.equal(a, h.int()) and torch.equal(b, (h >> 1).int())


# -- a costly tile stretched by a broadcast is computed once per element of its own ------------------------------
@tle.jit
def ladder_mass(x_ptr, piv_ptr, out_ptr, F: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    y = tl.load(x_ptr + offs)
    pivots = tl.load(piv_ptr + tl.arange(0, F))
    e = tl.exp(y)
    mass = tl.sum(tl.where(y[None, :] >= pivots[:, None], e[None, :], 0.0), 1)
    tl.store(out_ptr + tl.arange(0, F), mass)


@needs_tilelang
def test_a_costly_tile_read_through_a_broadcast_is_materialized():
    """exp(y) [BLOCK] has one use, a broadcast into an [F, BLOCK] select: written inline it would be computed F
    times an element, so it is held in a fragment of its own shape, computed in a [BLOCK] loop."""
    x, piv, out = torch.randn(64), torch.tensor([-1.0, 0.0, 0.5, 2.0]), torch.full((4,), float("nan"))
    src = _lower(ladder_mass, x, piv, out, F=4, BLOCK=64).source
    assert "e = T.alloc_fragment((64,), 'float32')" in src, src
    exps = [ln for ln in src.splitlines() if "T.exp" in ln]
    assert len(exps) == 1 and exps[0].strip().startswith("e[i0] ="), src
    interpret_tilelang(ladder_mass, (1,), x, piv, out, F=4, BLOCK=64)
    expected = torch.where(x[None, :] >= piv[:, None], x.exp()[None, :], 0.0).sum(1)
    torch.testing.assert_close(out, expected)


# -- a warp group's row copies: cp.async only for contiguous rows masked on rows only --------------------------
R, C = 64, 16


@tle.jit
def rows_to_a_group(x_ptr, idx_ptr, y_ptr, ncols, FORM: tl.constexpr):
    rows = tl.arange(0, R)
    cols = tl.arange(0, C)
    for step in range(2):
        buf = tle.gpu.alloc([R, C], tl.float16)
        with tle.gpu.warp_group(0):
            src = tl.load(idx_ptr + step * R + rows)
            if FORM == "every_other_column":
                tle.gpu.copy(x_ptr + src[:, None] * (2 * C) + cols[None, :] * 2, buf, [R, C])
            elif FORM == "masked_columns":
                tle.gpu.copy(x_ptr + src[:, None] * C + cols[None, :], buf, [R, C], mask=(cols < ncols)[None, :])
            else:           # the first C columns of rows 2 * C wide
                tle.gpu.copy(x_ptr + src[:, None] * (2 * C) + cols[None, :], buf, [R, C])
        with tle.gpu.warp_group(1):
            tl.store(y_ptr + (step * R + rows)[:, None] * C + cols[None, :], tle.gpu.local_load(buf))


@needs_tilelang
@pytest.mark.parametrize("form, cp_async", [("every_other_column", False), ("masked_columns", False),
                                             ("whole_rows", True)])
def test_gathered_rows_are_cp_async_only_when_contiguous_and_masked_by_row(tmp_cache, form, cp_async):
    """A 16-byte cp.async copies consecutive elements of a row, and its zero fill can only drop whole rows: a
    gather of every other column, or one masked on its columns, is copied element by element (and still reads
    the right values); gathered runs of contiguous columns (the first C of wider rows) are cp.async, through
    the row indices read first."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4 * R * C, generator=g).half()
    idx = torch.randperm(2 * R, generator=g).to(torch.int32)
    y = torch.full((2 * R, C), float("nan")).half()
    kw = dict(FORM=form, num_warps=8)
    src = _lower(rows_to_a_group, x, idx, y, 11, **kw).source
    assert ("T.ptx_cp_async(" in src) == cp_async
    if cp_async:        # each copy's address uses the row index the thread read into registers beforehand
        copies = [ln for ln in src.splitlines() if "T.ptx_cp_async(" in ln]
        assert copies and all("rids[" in ln for ln in copies), src
    rows_to_a_group.interpret_tilelang((1,), x, idx, y, 11, **kw)
    if form == "every_other_column":
        want = x.view(-1, 2 * C)[idx.long(), 0::2]
    elif form == "masked_columns":
        want = x.view(-1, C)[idx.long()].clone()
        want[:, 11:] = 0
    else:
        want = x.view(-1, 2 * C)[idx.long(), :C]
    assert torch.equal(y, want)


# -- a 64-bit box start: narrowed to int32 only inside an int32-sized dimension ---------------------------------
@tle.jit
def wide_copy(x_ptr, y_ptr, BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * BLOCK
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + base + offs, tl.load(x_ptr + base + offs))


@pytest.mark.parametrize("n, narrowed", [(2**31 - 1024, True), (2**31 + 1024, False)])
def test_a_64_bit_box_start_is_narrowed_only_where_the_dimension_fits_int32(n, narrowed):
    """TileLang's copy refuses a mix of 64- and 32-bit indices, so a 64-bit start is cast to int32 inside a
    dimension of fewer than 2**31 elements; past that the cast would wrap, and the start stays 64-bit."""
    x = torch.empty(n, dtype=torch.float16, device="meta")
    y = torch.empty(n, dtype=torch.float16, device="meta")
    src = _lower(wide_copy, x, y, BLOCK=1024, grid=(n // 1024,)).source
    start = "T.cast(base, 'int32')" if narrowed else "base"
    assert f"T.copy(x_ptr[{start}:{start} + 1024], t)" in src, src
    assert f"T.copy(t, y_ptr[{start}:{start} + 1024])" in src, src


# -- the access report: why a load is element-wise, an atomic's order and its previous value --------------------
@tle.jit
def reported_accesses(x_ptr, z_ptr, y_ptr, c_ptr, f_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(z_ptr + offs, mask=offs < n, other=1.0)
    b = tl.load(x_ptr + offs * 2)
    tl.store(y_ptr + offs, a + b)
    tl.atomic_xchg(f_ptr + offs, offs)
    tl.atomic_xchg(f_ptr + BLOCK + offs, offs, sem="release")
    tl.atomic_add(c_ptr, 1)


@tle.jit
def reported_previous_values(c_ptr, f_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_add(c_ptr, 1)
    prev = tl.atomic_max(f_ptr + offs, offs)
    tl.store(y_ptr + offs, prev + old)


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _reported_accesses_report() -> tuple[int, dict]:
    """The first line of `reported_accesses` and its access report, by line."""
    lowered = _lower(reported_accesses, _meta(128), _meta(50), _meta(64), _meta(1, dtype=torch.int32),
                     _meta(128, dtype=torch.int32), 50, BLOCK=64)
    return reported_accesses.fn.__code__.co_firstlineno, _report(lowered)


def test_the_report_says_why_a_load_is_read_element_by_element():
    """A box whose mask is its dimension's bound but whose `other` is not zero, and a strided load, are both
    T.Parallel reads: the report names the reason of each (the non-zero `other`; the stride)."""
    first, how = _reported_accesses_report()
    assert how[first + 3] == "T.Parallel into fragment (`other` is not zero where the mask can be false)"
    assert how[first + 4] == "T.Parallel into fragment (the innermost axis has stride 2, not 1)"


def test_the_report_names_an_extern_atomics_memory_order():
    """An atomic TileLang lacks (xchg) calls the kernel's device function in the kernel's memory order: relaxed
    where the kernel names none (and reads no atomic's result), else the `sem` it names."""
    first, how = _reported_accesses_report()
    assert how[first + 6] == "T.call_extern of the kernel's device function tle_atomic_xchg (relaxed) per element"
    assert how[first + 7] == "T.call_extern of the kernel's device function tle_atomic_xchg (release) per element"
    assert how[first + 8] == "T.atomic_add on one thread"


def test_the_report_says_when_a_scalar_atomics_previous_value_is_shared():
    """A scalar atomic runs on one thread; where its previous value is read, every thread reads it through
    shared memory, which the report says. A tile atomic's previous value is per element, and says nothing of
    the kind."""
    first = reported_previous_values.fn.__code__.co_firstlineno
    lowered = _lower(reported_previous_values, _meta(1, dtype=torch.int32), _meta(64, dtype=torch.int32),
                     _meta(64, dtype=torch.int32), BLOCK=64)
    how = _report(lowered)
    assert how[first + 3] == ("T.atomic_add with return_prev on one thread, the previous value shared with "
                              "every thread")
    assert how[first + 4] == "T.atomic_max with return_prev per element"
