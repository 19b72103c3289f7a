"""tle.load(is_async=True) on both backends, and the loop rewrites it relies on: a guarded loop body
turned into a loop bound (Triton), guarded loads hoisted and masked (TileLang)."""
import pytest
import torch
import triton.language as tl

import tle
from kernel_cases import lower_example
from tilelang_oracle import needs_tilelang, run_on


@tle.jit
def guarded_sum(x_ptr, out_ptr, limit, N: tl.constexpr, BLOCK: tl.constexpr, ASYNC: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.range(N, num_stages=0):
        if i * BLOCK <= limit:
            acc += tle.load(x_ptr + i * BLOCK + offs, is_async=ASYNC)
    tl.store(out_ptr + offs, acc)


def _reference(x, limit, n, block):
    rows = [i for i in range(n) if i * block <= limit]
    return x.view(n, block)[rows].sum(0) if rows else torch.zeros(block)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("limit", [-5, -1, 0, 15, 16, 17, 40, 1000])
def test_guarded_loop_runs_the_guarded_iterations_only(limit, backend):
    n, block = 4, 16
    x = torch.randn(n * block)
    out = torch.full((block,), float("nan"))
    run_on(backend, guarded_sum, (1,), x, out, limit, N=n, BLOCK=block, ASYNC=True)
    torch.testing.assert_close(out, _reference(x, limit, n, block))


def test_triton_source_bounds_the_loop_and_pipelines_the_async_load():
    x, out = torch.empty(64, device="meta"), torch.empty(16, device="meta")
    lw = guarded_sum.lower(x, out, 7, N=4, BLOCK=16, ASYNC=True, grid=(1,), backend="triton")
    src = lw.source
    assert "if " not in src.split("def guarded_sum")[1]           # the guard became the loop bound
    assert "tl.minimum(4, stop)" in src
    assert "num_stages=2" in src and "asked for num_stages=0" in src
    assert "tle.load(is_async=True): loop pipelined (num_stages=2); Triton's pipeliner picks" in src
    assert any("pipelined with 2 stages" in n for n in lw.notes)


def test_plain_load_keeps_the_loops_own_stages():
    x, out = torch.empty(64, device="meta"), torch.empty(16, device="meta")
    src = guarded_sum.lower(x, out, 7, N=4, BLOCK=16, ASYNC=False, grid=(1,), backend="triton").source
    assert "num_stages=0" in src
    assert "is_async" not in src


@tle.jit
def async_outside_loop(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tle.load(x_ptr + offs, is_async=True) * 2)


def test_async_load_without_a_loop_is_a_plain_load_and_says_so():
    x = torch.randn(32)
    out = torch.empty_like(x)
    async_outside_loop[(1,)](x, out, BLOCK=32, backend="triton")
    torch.testing.assert_close(out, x * 2)
    lw = async_outside_loop.lower(x, out, BLOCK=32, grid=(1,), backend="triton")
    assert any("not inside a loop" in n for n in lw.notes)
    assert "not inside a loop" in lw.source


@pytest.mark.slow
def test_tilelang_async_gather_is_a_pipelined_zero_filled_copy():
    """The sparse-MLA KV gather: T.Pipelined with 2 stages, loads hoisted above the guard, masked rows
    sent out of bounds so TileLang's bounds predication zero-fills them in a cp.async copy. The index
    tile is read into registers and written to shared memory once per step (read straight into shared
    memory, TileLang would issue it as a cp.async the gathers read before it lands), and the loop names
    each statement's stage: the index tile's two statements and both gathers (the plain tail one too, a
    dot operand) in stage 0, the guarded compute, kept one statement by an empty else, in stage 1."""
    if tle.available_backends().get("tilelang") is not None:
        pytest.skip("TileLang unavailable here")
    from tle.kernels.examples.sparse_mla import sparse_mla_fwd_kernel as k
    lw = lower_example(k, "tilelang")
    src = lw.source
    assert "T.Pipelined(2, num_stages=2, order=[0, 1, 2, 3, 4], stage=[0, 0, 0, 0, 1])" in src
    body = src.split("T.Pipelined(")[1]
    assert body.index("kv_ids_r[i0] = T.if_then_else(") < body.index("kv_ids[i0] = kv_ids_r[i0]") < \
        body.index("kv_blk[") < body.index("tkv_blk[") < body.index("if t:")
    # its own static shared buffer: TileLang plans no barrier between the gathers reading it (below)
    assert "kv_ids = T.alloc_shared((64,), 'int32', scope='shared')" in src
    for tile in ("kv_blk", "tkv_blk"):                                # zero-filled copies reading the staged ids
        line = body.split(f"{tile}[i1, i0] = ")[1].split("\n")[0]
        assert line.startswith("kv[") and "T.if_then_else(" in line and "kv_ids[i1]" in line and "indices[" not in line
    assert "            else:\n                pass\n" in body
    assert any("pipelined with 2 stages" in n for n in lw.notes)
    report = {line: how for line, op, kind, how in lw.compiled.access_report}
    assert any("cp.async" in how and "zero-filled" in how for how in report.values())
    assert any("stage 0 of its T.Pipelined loop like the loop's other copies" in how for how in report.values())
    cuda = lw.stage("cuda")
    assert "cp_async_gs_conditional" in cuda                         # predicated: masked rows read zeros
    assert "cp_async_wait<1>" in cuda                                # one stage in flight
    for gather in cuda.split("cp_async_gs_conditional")[:-1]:        # no barrier in a loop of cp.async
        assert "__syncthreads" not in gather[gather.rindex("for (int"):]


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_sparse_mla_without_the_hint_computes_the_same(backend):
    """ASYNC=False: plain gathers in a plain loop (the example launch has the hint)."""
    from tle.cli import poison
    from tle.examples import compare_outputs
    from tle.kernels.examples.sparse_mla import sparse_mla_fwd_kernel as k
    launch = k.example("cpu", "small")
    poison(launch)
    run_on(backend, k, launch.grid, *launch.args, **dict(launch.kwargs, ASYNC=False))
    compare_outputs(launch)


@pytest.mark.slow
def test_tilelang_plain_gather_is_not_pipelined_when_the_loop_says_so():
    if tle.available_backends().get("tilelang") is not None:
        pytest.skip("TileLang unavailable here")
    from tle.kernels.examples.sparse_mla import sparse_mla_fwd_kernel as k
    lw = lower_example(k, "tilelang", ASYNC=False)
    assert "T.Pipelined(" not in lw.source and "T.serial(" in lw.source


@pytest.mark.slow
def test_triton_pipeliner_issues_the_index_tile_ahead_and_keeps_the_kv_gathers_plain():
    """What the docs say Triton 3.6 makes of the sparse-MLA loop pipelined for `tle.load(is_async=True)`
    (sm_90a): the index-tile load becomes an asynchronous copy; the KV gathers, hinted one included,
    stay synchronous loads. A change of Triton's choice shows here first."""
    from tle.kernels.examples.sparse_mla import sparse_mla_fwd_kernel as k
    lw = lower_example(k, "triton")
    ttgir = lw.stage("ttgir").splitlines()
    copies = [ln for ln in ttgir if "ttg.async_copy_global_to_local" in ln]
    assert copies and all("!tt.ptr<i32>" in ln for ln in copies)
    gathers = [ln for ln in ttgir if " = tt.load " in ln and "!tt.ptr<bf16>" in ln]
    assert len(gathers) == 4            # q and its tail before the loop, kv and its tail inside


# -- a masked-off row of an asynchronous gather is sent past the tensor (TileLang zero-fills it) only while
# -- that row index stays inside int32 --------------------------------------------------------------------
@tle.jit
def async_row_gather(x_ptr, idx_ptr, out_ptr, n_rows, D: tl.constexpr, BI: tl.constexpr, STEPS: tl.constexpr):
    d = tl.arange(0, D)
    acc = tl.zeros([D], tl.float32)
    for s in tl.range(STEPS):
        rows = tl.load(idx_ptr + s * BI + tl.arange(0, BI))
        valid = (rows >= 0) & (rows < n_rows)
        t = tle.load(x_ptr + rows[:, None] * D + d[None, :], mask=valid[:, None], other=0.0, is_async=True)
        acc += tl.sum(t, axis=0)
    tl.store(out_ptr + d, acc)


@pytest.mark.parametrize("n_rows, zero_filled", [(1000, True), (11184810, True), (11184811, False)])
def test_out_of_range_rows_stay_inside_int32(n_rows, zero_filled):
    # the row sent out is ceil(2 * extent / 64); with the extent, 192 * n_rows must stay below 2**31
    x = torch.empty(n_rows, 64, device="meta")
    idx = torch.empty(64, dtype=torch.int32, device="meta")
    lowered = async_row_gather.lower(x, idx, torch.empty(64, device="meta"), n_rows, grid=(1,), backend="tilelang",
                                     D=64, BI=16, STEPS=4)
    (how,) = [how for _, op, kind, how in lowered.compiled.access_report if kind == "gather"]
    assert ("masked rows zero-filled by bounds predication" in how) == zero_filled
    assert "is_async: stage 0 of T.Pipelined" in how


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_async_row_gather_numerics_on_cpu(backend):
    n_rows = 50
    x = torch.randn(n_rows, 64)
    idx = torch.randint(-3, n_rows + 3, (64,), dtype=torch.int32)
    out = torch.full((64,), float("nan"))
    run_on(backend, async_row_gather, (1,), x, idx, out, n_rows, D=64, BI=16, STEPS=4)
    valid = (idx >= 0) & (idx < n_rows)
    torch.testing.assert_close(out, x[idx.long().clamp(0, n_rows - 1)][valid].sum(0), atol=1e-4, rtol=1e-4)


@tle.jit
def async_row_sums(x_ptr, out_ptr, n_rows, N: tl.constexpr, BM: tl.constexpr):
    cols = tl.arange(0, N)
    acc = tl.zeros([N], tl.float32)
    for i in range(0, tl.cdiv(n_rows, BM)):
        rows = i * BM + tl.arange(0, BM)
        t = tle.load(x_ptr + rows[:, None] * N + cols[None, :], mask=(rows < n_rows)[:, None], other=0.0, is_async=True)
        acc += tl.sum(t, axis=0)
    tl.store(out_ptr + cols, acc)


@pytest.mark.parametrize("num_stages", [2, 3])
def test_tilelang_pipelines_a_loop_of_async_loads_at_the_launch_stages(num_stages):
    """The launch's num_stages (>= 2) pipelines the loop of an is_async load: the access report's 'stage 0 of
    T.Pipelined' is what the source does."""
    x = torch.empty(100, 64, device="meta")
    lowered = async_row_sums.lower(x, torch.empty(64, device="meta"), 100, grid=(1,), backend="tilelang", N=64,
                                   BM=16, num_stages=num_stages)
    assert f"T.Pipelined(7, num_stages={num_stages}" in lowered.source
    (how,) = [how for _, op, kind, how in lowered.compiled.access_report if op == "load"]
    assert f"is_async: stage 0 of T.Pipelined (num_stages={num_stages})" in how


def test_async_row_sums_through_the_tilelang_interpreter():
    x = torch.randn(100, 64)
    out = torch.full((64,), float("nan"))
    async_row_sums.interpret_tilelang((1,), x, out, 100, N=64, BM=16)
    torch.testing.assert_close(out, x.sum(0), rtol=1e-5, atol=1e-5)


# -- cache hints: kept in the Triton source, dropped with a note by TileLang -----------------------------------
@tle.jit
def hinted_copy(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, eviction_policy="evict_first", cache_modifier=".cg")
    tl.store(out_ptr + offs, x, eviction_policy="evict_last")


def test_cache_hints_kept_by_triton():
    x, out = torch.empty(32, device="meta"), torch.empty(32, device="meta")
    lw = hinted_copy.lower(x, out, BLOCK=32, grid=(1,), backend="triton")
    assert "cache_modifier='.cg'" in lw.source and "eviction_policy='evict_first'" in lw.source
    assert "eviction_policy='evict_last'" in lw.source
    assert not [n for n in lw.notes if "hint dropped" in n]


@needs_tilelang
def test_cache_hints_dropped_by_tilelang_with_a_note():
    x, out = torch.empty(32, device="meta"), torch.empty(32, device="meta")
    lw = hinted_copy.lower(x, out, BLOCK=32, grid=(1,), backend="tilelang")
    line = hinted_copy.fn.__code__.co_firstlineno
    assert [n for n in lw.notes if "hint dropped" in n] == [
        f"line {line + 3}: tl.load(cache_modifier='.cg', eviction_policy='evict_first'): hint dropped, TileLang's "
        "loads and stores into registers take no cache hints",
        f"line {line + 4}: tl.store(eviction_policy='evict_last'): hint dropped, TileLang's loads and stores into "
        "registers take no cache hints"]


@tle.jit
def guarded_sum_copying_each_step(x_ptr, out_ptr, steps_ptr, limit, N: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    buf = tle.gpu.alloc([BLOCK], tl.float32)
    tle.gpu.local_store(buf, tl.full([BLOCK], 1.0, tl.float32))
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.range(N, num_stages=0):
        tle.gpu.copy(buf, steps_ptr + i * BLOCK + offs, [BLOCK])     # every step, guard or not
        if i * BLOCK <= limit:
            acc += tl.load(x_ptr + i * BLOCK + offs)
    tl.store(out_ptr + offs, acc)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_a_guarded_loop_with_an_effect_beside_the_branch_keeps_every_step(backend):
    """The loop bound would skip the steps after the guard turns false: a write beside the branch (here a
    tle.gpu.copy to global memory) keeps the loop as written."""
    n, block, limit = 4, 16, 16
    x = torch.randn(n * block)
    out, steps = torch.full((block,), float("nan")), torch.full((n * block,), float("nan"))
    run_on(backend, guarded_sum_copying_each_step, (1,), x, out, steps, limit, N=n, BLOCK=block)
    torch.testing.assert_close(out, _reference(x, limit, n, block))
    torch.testing.assert_close(steps, torch.ones(n * block))


@tle.jit
def masked_rows_product(a_ptr, b_ptr, out_ptr, start, end, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr):
    """out = a b^T over rows start .. start + BT of a and b (rows from end on read as zero), in a loop that turns
    TileLang's producer warps off."""
    r = tl.arange(0, BT)
    t = start + r
    ok = t < end
    acc = tl.zeros([BT, BT], dtype=tl.float32)
    for v0 in tl.range(0, V, BV, warp_specialize=False):
        vc = v0 + tl.arange(0, BV)
        a = tle.load(a_ptr + t[:, None] * V + vc[None, :], mask=ok[:, None], other=0.0, is_async=True)
        b = tle.load(b_ptr + t[:, None] * V + vc[None, :], mask=ok[:, None], other=0.0, is_async=True)
        acc = tl.dot(a, tl.trans(b), acc)
    tl.store(out_ptr + r[:, None] * BT + r[None, :], acc)


def _masked_rows_args():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(200, 128, generator=gen), torch.randn(200, 128, generator=gen)
    return a, b, torch.full((64, 64), float("nan"))


def test_tilelang_masked_async_box_without_producer_warps_is_a_plain_load_and_says_so():
    """A masked box read ahead is copied whole and selected in its buffer; TileLang's pipeline planner refuses
    those two writes in a kernel without producer warps ("Multiple writes to overlapping buffer regions"), so
    there the hint is dropped, with a note and the load's report saying so."""
    a, b, out = _masked_rows_args()
    lw = masked_rows_product.lower(a.bfloat16(), b.bfloat16(), out, 130, 180, V=128, BT=64, BV=64, grid=(1,),
                                   backend="tilelang", num_warps=4)
    dropped = [n for n in lw.notes if "read as a plain load" in n]
    assert len(dropped) == 2, lw.notes                       # a and b
    assert "warp_specialize=False" in dropped[0]
    assert "T.copy(" not in lw.source.split("T.Pipelined")[1].split("T.gemm")[0]
    assert any("is_async dropped" in how for _, _, _, how in lw.compiled.access_report)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_masked_async_box_without_producer_warps_computes_the_product(backend):
    a, b, out = _masked_rows_args()
    run_on(backend, masked_rows_product, (1,), a, b, out, 130, 180, V=128, BT=64, BV=64)
    rows = torch.zeros(64, 128)
    rows[:50] = 1
    ref = (a[130:194] * rows) @ (b[130:194] * rows).T
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=1e-2)


@needs_tilelang
@pytest.mark.slow
def test_tilelang_builds_a_masked_async_box_without_producer_warps():
    a, b, out = _masked_rows_args()
    lw = masked_rows_product.lower(a.bfloat16(), b.bfloat16(), out, 130, 180, V=128, BT=64, BV=64, grid=(1,),
                                   backend="tilelang", num_warps=4)
    assert ".entry" in lw.stage("ptx")
