"""Pipelined loops of every length: 0, 1 and 2 steps known when the kernel is compiled (constexpr), and a
trip count known only at run time. Each kernel is lowered for TileLang and compiled for sm_90a (needs nvcc),
run through the interpreter of TileLang programs, and run by its Triton lowering in Triton's interpreter;
the numbers are checked against torch.

A TileLang loop whose body has named stages (`T.Pipelined(..., order=[...], stage=[...])`, the sparse-MLA
gather with its index tile staged in shared memory) names one stage per statement of its body, and
TileLang counts those statements after its simplifier has folded what it can prove: a guard that holds
at every step (a loop of one step, or a limit past the last step) is replaced by the statements it
guards. Such a loop is pipelined without named stages."""
import pytest
import torch
import triton.language as tl

import tle
from dot_precision import roundings, sum_bound
from kernel_cases import lower_example
from tilelang_oracle import interpret_tilelang, needs_tilelang
from tle.cli import meta_copy

BM, BN, BK = 64, 32, 32         # tile sizes of the dot kernels
BH, D, BI = 64, 32, 32          # heads, row width and index block of the gather kernel
TRIPS = (0, 1, 2)               # the constexpr trip counts
RUNTIME_TRIPS = (0, 1, 2, 3)    # the run-time trip counts (one compiled kernel for all)


# -- the kernels ---------------------------------------------------------------------------------------------
def _range_dot(a_ptr, b_ptr, c_ptr, n_run, N: tl.constexpr, RUNTIME: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c = sum over k < n of a[k] @ b[k], in a loop of tl.range(num_stages=2); n is N, or n_run if RUNTIME."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    if RUNTIME:
        n = n_run
    else:
        n = N
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(n, num_stages=2):
        a = tl.load(a_ptr + k * (BM * BK) + rm[:, None] * BK + rk[None, :])
        b = tl.load(b_ptr + k * (BK * BN) + rk[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def _buffer_dot(a_ptr, b_ptr, c_ptr, n_run, N: tl.constexpr, RUNTIME: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The same sum, the operands copied into tle.gpu buffers in a tle.gpu.pipeline loop."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_smem = tle.gpu.alloc([BM, BK], dtype=tl.float16, scope=tle.gpu.storage_kind.smem)
    b_smem = tle.gpu.alloc([BK, BN], dtype=tl.float16, scope=tle.gpu.storage_kind.smem)
    if RUNTIME:
        n = n_run
    else:
        n = N
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tle.gpu.pipeline(0, n, num_stages=2):
        tle.gpu.copy(a_ptr + k * (BM * BK) + rm[:, None] * BK + rk[None, :], a_smem, [BM, BK])
        tle.gpu.copy(b_ptr + k * (BK * BN) + rk[:, None] * BN + rn[None, :], b_smem, [BK, BN])
        acc = tl.dot(tle.gpu.local_load(a_smem), tle.gpu.local_load(b_smem), acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def _guarded_gather(q_ptr, kv_ptr, idx_ptr, out_ptr, k_run, K: tl.constexpr, RUNTIME: tl.constexpr,
                    SLACK: tl.constexpr, BH: tl.constexpr, D: tl.constexpr, BI: tl.constexpr):
    """The sparse-MLA loop: program p sees the kv rows up to its limit p * BI + SLACK; blocks of its K
    indices (K, or k_run if RUNTIME) past the limit are skipped, the rows are gathered with
    tle.load(is_async=True) and a masked index tile, and feed two dots."""
    pid = tl.program_id(0)
    offs_h = tl.arange(0, BH)
    offs_d = tl.arange(0, D)
    offs_t = tl.arange(0, BI)
    limit = pid * BI + SLACK
    q = tl.load(q_ptr + pid * (BH * D) + offs_h[:, None] * D + offs_d[None, :])
    if RUNTIME:
        n_idx = k_run
    else:
        n_idx = K
    acc = tl.zeros([BH, D], dtype=tl.float32)
    for ck in tl.range(tl.cdiv(n_idx, BI), num_stages=0):
        if ck * BI <= limit:
            t = ck * BI + offs_t
            ids = tl.load(idx_ptr + t, mask=t < n_idx, other=-1)
            valid = (ids >= 0) & (ids <= limit)
            kv_blk = tle.load(kv_ptr + offs_d[:, None] + ids[None, :] * D, mask=valid[None, :], other=0.0,
                              is_async=True)                                   # [D, BI]
            s = tl.where(valid[None, :], tl.dot(q, kv_blk), 0.0)                # [BH, BI]
            acc = tl.dot(s.to(tl.float16), kv_blk.trans(), acc)                 # [BH, D]
    tl.store(out_ptr + pid * (BH * D) + offs_h[:, None] * D + offs_d[None, :], acc)


range_dot = tle.jit(_range_dot)
range_dot_rt = tle.jit(_range_dot, do_not_specialize=("n_run",))
buffer_dot = tle.jit(_buffer_dot)
buffer_dot_rt = tle.jit(_buffer_dot, do_not_specialize=("n_run",))
guarded_gather = tle.jit(_guarded_gather)
guarded_gather_rt = tle.jit(_guarded_gather, do_not_specialize=("k_run",))

DOTS = {"tl.range": (range_dot, range_dot_rt), "tle.gpu.pipeline": (buffer_dot, buffer_dot_rt)}


# -- launches and references -----------------------------------------------------------------------------------
def _dot_launch(trip: int, runtime: bool):
    gen = torch.Generator().manual_seed(trip)
    a = (torch.randn(max(trip, 1), BM, BK, generator=gen) / 4).half()
    b = (torch.randn(max(trip, 1), BK, BN, generator=gen) / 4).half()
    c = torch.full((BM, BN), float("nan"))
    args = (a, b, c, trip)
    kwargs = dict(N=0 if runtime else trip, RUNTIME=runtime, BM=BM, BN=BN, BK=BK)
    a_all = a[:trip].permute(1, 0, 2).reshape(BM, trip * BK)             # the trip steps as one product
    b_all = b[:trip].reshape(trip * BK, BN)
    want = (a_all.double() @ b_all.double(), sum_bound(a_all, b_all))
    return (1,), args, kwargs, c, want


G = 2               # programs of the gather kernel
ROWS = G * BI       # kv rows: every limit lies inside


def _gather_launch(trip: int, runtime: bool, slack: int = BI - 1):
    """`trip` index blocks, the last one partly masked when there are more than one."""
    k = max(0, trip * BI - (5 if trip > 1 else 0))
    gen = torch.Generator().manual_seed(10 + trip)
    q = (torch.randn(G, BH, D, generator=gen) / 4).half()
    kv = (torch.randn(ROWS, D, generator=gen) / 4).half()
    idx = torch.randint(-3, ROWS, (max(k, 1),), generator=gen, dtype=torch.int32)   # -1 .. -3: no row
    out = torch.full((G, BH, D), float("nan"))
    args = (q, kv, idx, out, k)
    kwargs = dict(K=0 if runtime else k, RUNTIME=runtime, SLACK=slack, BH=BH, D=D, BI=BI)
    return (G,), args, kwargs, out, _gather_reference(q, kv, idx[:k], slack)


def _gather_reference(q, kv, idx, slack):
    out, tol = torch.zeros(G, BH, D, dtype=torch.float64), torch.zeros(G, BH, D, dtype=torch.float64)
    for p in range(G):
        limit = p * BI + slack
        ids = idx[: max(0, min(len(idx), (limit // BI + 1) * BI))].long()     # the blocks the guard lets in
        valid = (ids >= 0) & (ids <= limit)
        rows = kv[ids.clamp(0, ROWS - 1)].float() * valid[:, None]             # [n, D]
        out[p], tol[p] = _scores_then_rows(q[p], rows)
    return out, tol


def _scores_then_rows(q, rows):
    """(q rowsᵀ) rounded to fp16, times rows (fp64), and how far the kernels' result may be from it: each
    score, an fp32 sum, may round to the fp16 value on either side where its sum's bound straddles a rounding
    boundary (times its row), and the second product's fp32 sum adds its own bound."""
    q, rows = q.double(), rows.double()
    exact = q @ rows.T
    lo, hi = roundings(exact, sum_bound(q, rows.T), torch.float16)
    want = exact.half().double() @ rows
    tol = (hi.double() - lo.double()) @ rows.abs() + sum_bound(torch.maximum(lo.abs(), hi.abs()), rows)
    return want, tol


def _check(got, want):
    """`want`: the exact result (fp64) and how far the kernel may be from it, per element."""
    want, tol = want
    err = (got.double() - want).abs()
    assert bool((err <= tol).all()), f"max error {err.max().item():.3g}, by {(err - tol).max().item():.3g} past its bound"


# -- TileLang: lowered and compiled for sm_90a at every trip count ---------------------------------------------
def _lower_tilelang(kernel, grid, args, kwargs):
    return kernel.lower(*[meta_copy(a) for a in args], grid=grid, backend="tilelang", **kwargs)


def _pipelined_header(source: str) -> str:
    (line,) = [ln.strip() for ln in source.splitlines() if "T.Pipelined(" in ln]
    return line


@needs_tilelang
@pytest.mark.slow
@pytest.mark.parametrize("trip", [*TRIPS, "runtime"])
@pytest.mark.parametrize("form", sorted(DOTS))
def test_dot_loop_compiles_for_sm90a(form, trip):
    constexpr, runtime = DOTS[form]
    kernel = runtime if trip == "runtime" else constexpr
    grid, args, kwargs, _, _ = _dot_launch(2 if trip == "runtime" else trip, trip == "runtime")
    lowered = _lower_tilelang(kernel, grid, args, kwargs)
    header = _pipelined_header(lowered.source)
    assert header.startswith("for k in T.Pipelined(n_run" if trip == "runtime" else f"for k in T.Pipelined({trip},")
    cuda = lowered.stage("cuda")
    # topk 48 = 3 x 16: TileLang proves the index tile's mask true; read straight into shared memory, it would
    # be a cp.async that the gathers of the same stage read before it lands
    assert not [ln for ln in cuda.splitlines() if "cp_async" in ln and "idx_ptr[" in ln]


@needs_tilelang
@pytest.mark.slow
@pytest.mark.parametrize("trip, slack, named", [
    (0, BI - 1, False),          # no step reaches the guard (TileLang drops the loop)
    (1, BI - 1, False),          # the guard holds at the one step (ck = 0): TileLang would fold it away
    (2, BI - 1, True),           # the guard fails at step 1 of program 0: kept, the stages are named
    (2, 10 * BI, False),         # the guard holds at both steps of every program
    ("runtime", BI - 1, True),   # the trip count is not compiled in: the guard goes both ways at some
])
def test_guarded_gather_compiles_for_sm90a(trip, slack, named):
    runtime = trip == "runtime"
    kernel = guarded_gather_rt if runtime else guarded_gather
    grid, args, kwargs, _, _ = _gather_launch(2 if runtime else trip, runtime, slack)
    lowered = _lower_tilelang(kernel, grid, args, kwargs)
    header = _pipelined_header(lowered.source)
    assert ("order=[0, 1, 2, 3], stage=[0, 0, 0, 1]" in header) == named, header
    assert ("T.alloc_shared((32,), 'int32', scope='shared')" in lowered.source) == named      # the index tile, staged
    cuda = lowered.stage("cuda")
    assert "__global__" in cuda
    if trip != 0:
        assert "cp_async_gs_conditional" in cuda             # the gather is still an asynchronous copy


def _sparse_mla_launch(topk: int, seqlen: int = 80):
    from tle.kernels.examples.sparse_mla import CONFIG_SMALL, kernel_args, make_indices, reference
    B, SKV, H, DV, TD = 1, 128, 32, 64, 32
    gen = torch.Generator().manual_seed(topk)
    q = torch.randn(B, seqlen, H, DV + TD, generator=gen).to(torch.bfloat16)
    kv = torch.randn(B, SKV, 1, DV + TD, generator=gen).to(torch.bfloat16)
    indices = make_indices(B, seqlen, SKV, 1, topk, gen)
    out = torch.full((B, seqlen, H, DV), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((B, seqlen, H), float("nan"), dtype=torch.bfloat16)
    cfg = dict(CONFIG_SMALL)
    sm_scale = (DV + TD) ** -0.5
    grid, args = kernel_args(q, kv, indices, out, lse, sm_scale, DV, cfg.pop("BK"), cfg.pop("BH"))
    return tle.Launch(grid=grid, args=args, kwargs=cfg, outputs={"out": out, "lse": lse},
                      reference=lambda: dict(zip(("out", "lse"), reference(q, kv, indices, sm_scale, DV))))


@needs_tilelang
@pytest.mark.slow
@pytest.mark.parametrize("topk, trip", [(64, 1), (128, 2), (192, 3)])
def test_sparse_mla_compiles_at_every_topk(topk, trip):
    """topk = BK: a loop of one step (TileLang rejected the named stages: 5 named, 17 statements)."""
    from tle.kernels.examples.sparse_mla import sparse_mla_fwd_kernel as k
    lowered = lower_example(k, "tilelang", _sparse_mla_launch(topk))
    header = _pipelined_header(lowered.source)
    assert header.startswith(f"for ck in T.Pipelined({trip}, num_stages=2")
    assert ("order=[0, 1, 2, 3, 4], stage=[0, 0, 0, 0, 1]" in header) == (trip > 1)
    cuda = lowered.stage("cuda")
    assert "__global__" in cuda and "cp_async_gs_conditional" in cuda


# -- numbers: the interpreter of TileLang programs and Triton's interpreter ---------------------------------
BACKENDS = ["triton", "tilelang"]


def run_on(backend, kernel, grid, *args, **kwargs):
    """Triton's interpreter, or the interpreter of TileLang programs (skipped where TileLang is unavailable).
    A gather whose masked rows TileLang zero-fills reads nothing past its tensor in a loop of no steps: that
    run is strict."""
    if backend == "triton":
        kernel[grid](*args, backend="triton", **kwargs)
        return
    why = tle.available_backends().get("tilelang")
    if why is not None:
        pytest.skip(f"TileLang backend unavailable here ({why})")
    if kernel in (guarded_gather, guarded_gather_rt) and args[-1] == 0:
        report = kernel.interpret_tilelang(grid, *args, strict_reads=True, **kwargs)
        assert not report.predicated_reads
    else:
        interpret_tilelang(kernel, grid, *args, **kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("trip", TRIPS)
@pytest.mark.parametrize("form", sorted(DOTS))
def test_dot_loop_numerics_constexpr_trip(form, trip, backend):
    kernel = DOTS[form][0]
    grid, args, kwargs, c, want = _dot_launch(trip, False)
    run_on(backend, kernel, grid, *args, **kwargs)
    _check(c, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", sorted(DOTS))
def test_dot_loop_numerics_runtime_trip(form, backend):
    kernel = DOTS[form][1]
    for trip in RUNTIME_TRIPS:
        grid, args, kwargs, c, want = _dot_launch(trip, True)
        run_on(backend, kernel, grid, *args, **kwargs)
        _check(c, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("trip, slack", [(0, BI - 1), (1, BI - 1), (2, BI - 1), (2, 10 * BI), (3, 0)])
def test_guarded_gather_numerics_constexpr_trip(trip, slack, backend):
    grid, args, kwargs, out, want = _gather_launch(trip, False, slack)
    run_on(backend, guarded_gather, grid, *args, **kwargs)
    _check(out, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_guarded_gather_numerics_runtime_trip(backend):
    for trip in RUNTIME_TRIPS:
        grid, args, kwargs, out, want = _gather_launch(trip, True)
        run_on(backend, guarded_gather_rt, grid, *args, **kwargs)
        _check(out, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_mla_numerics_with_topk_equal_to_the_block(backend):
    """The operator's kernel with topk = BK = 64: its pipelined loop runs one step."""
    from tle.examples import compare_outputs
    from tle.kernels.examples.sparse_mla import sparse_mla_fwd_kernel as k
    launch = _sparse_mla_launch(64, seqlen=8)
    run_on(backend, k, launch.grid, *launch.args, **launch.kwargs)
    compare_outputs(launch)


@tle.jit
def unguarded_gather(q_ptr, kv_ptr, idx_ptr, out_ptr, K: tl.constexpr, BH: tl.constexpr, D: tl.constexpr,
                     BI: tl.constexpr):
    """out = sum over index blocks of (q rowsᵀ) rows, the rows gathered through idx in a pipelined loop whose
    index tile's mask (cols < K, K a multiple of BI) TileLang proves true."""
    offs_h, offs_d = tl.arange(0, BH), tl.arange(0, D)
    q = tl.load(q_ptr + offs_h[:, None] * D + offs_d[None, :])
    acc = tl.zeros((BH, D), dtype=tl.float32)
    for start in range(0, K, BI):
        cols = start + tl.arange(0, BI)
        ids = tl.load(idx_ptr + cols, mask=cols < K, other=-1)
        ok = ids >= 0
        rows = tle.load(kv_ptr + ids[:, None] * D + offs_d[None, :], mask=ok[:, None], other=0.0, is_async=True)
        acc = tl.dot(tl.dot(q, tl.trans(rows)).to(tl.float16), rows, acc)
    tl.store(out_ptr + offs_h[:, None] * D + offs_d[None, :], acc)


@needs_tilelang
@pytest.mark.slow
def test_an_index_tile_whose_mask_tilelang_proves_true_is_read_synchronously():
    """K = 3 x BI: TileLang's simplifier proves the index tile's mask true. Read straight into shared memory
    the tile would be a cp.async that the gathers of the same stage read before it lands; it is read into
    registers, then written to the static shared buffer, both in stage 0."""
    gen = torch.Generator().manual_seed(3)
    k = 3 * BI
    q = (torch.randn(BH, D, generator=gen) / 4).half()
    kv = (torch.randn(ROWS, D, generator=gen) / 4).half()
    idx = torch.randint(-3, ROWS, (k,), generator=gen, dtype=torch.int32)
    out = torch.full((BH, D), float("nan"))
    kwargs = dict(K=k, BH=BH, D=D, BI=BI, num_stages=2)
    lowered = _lower_tilelang(unguarded_gather, (1,), (q, kv, idx, out), kwargs)
    header = _pipelined_header(lowered.source)
    assert header.startswith("for start_it in T.Pipelined(3, num_stages=2, order=[0, 1, 2, 3"), header
    assert "stage=[0, 0, 0, 1" in header and "ids[i0] = ids_r[i0]" in lowered.source, lowered.source
    cuda = lowered.stage("cuda")
    assert not [ln for ln in cuda.splitlines() if "cp_async" in ln and "idx_ptr[" in ln]
    interpret_tilelang(unguarded_gather, (1,), q, kv, idx, out, **kwargs)
    ids = idx.long()
    rows = kv[ids.clamp(0, ROWS - 1)].float() * (ids >= 0)[:, None]
    _check(out, _scores_then_rows(q, rows))


# -- the stage plan's decision, read from the source alone (no compile): every spelling of the guard --------
@tle.jit
def _gather_block(q, kv_ptr, idx_ptr, ck, n_idx, limit, acc, D: tl.constexpr, BI: tl.constexpr):
    offs_d = tl.arange(0, D)
    t = ck * BI + tl.arange(0, BI)
    ids = tl.load(idx_ptr + t, mask=t < n_idx, other=-1)
    valid = (ids >= 0) & (ids <= limit)
    kv_blk = tle.load(kv_ptr + offs_d[:, None] + ids[None, :] * D, mask=valid[None, :], other=0.0, is_async=True)
    s = tl.where(valid[None, :], tl.dot(q, kv_blk), 0.0)
    return tl.dot(s.to(tl.float16), kv_blk.trans(), acc)


@tle.jit
def guarded_gather_spelled(q_ptr, kv_ptr, idx_ptr, out_ptr, k_run, K: tl.constexpr, RUNTIME: tl.constexpr,
                           SLACK: tl.constexpr, BH: tl.constexpr, D: tl.constexpr, BI: tl.constexpr,
                           FORM: tl.constexpr):
    """`_guarded_gather`, its limit spelled with a hint or with the grid size, which the stage plan evaluates."""
    pid = tl.program_id(0)
    offs_h = tl.arange(0, BH)
    offs_d = tl.arange(0, D)
    if FORM == "hint":
        limit = tl.multiple_of(pid * BI, BI) + SLACK
    elif FORM == "num_programs":
        limit = pid * BI + SLACK + 0 * tl.num_programs(0)
    else:
        limit = pid * BI + SLACK
    q = tl.load(q_ptr + pid * (BH * D) + offs_h[:, None] * D + offs_d[None, :])
    if RUNTIME:
        n_idx = k_run
    else:
        n_idx = K
    acc = tl.zeros([BH, D], dtype=tl.float32)
    for ck in tl.range(tl.cdiv(n_idx, BI), num_stages=0):
        if ck * BI <= limit:
            acc = _gather_block(q, kv_ptr, idx_ptr, ck, n_idx, limit, acc, D, BI)
    tl.store(out_ptr + pid * (BH * D) + offs_h[:, None] * D + offs_d[None, :], acc)


@needs_tilelang
@pytest.mark.parametrize("form", ["plain", "hint", "num_programs"])
@pytest.mark.parametrize("trip, slack, named", [
    (0, BI - 1, False), (1, BI - 1, False), (2, BI - 1, True), (2, 10 * BI, False), ("runtime", BI - 1, True),
])
def test_guarded_gather_names_its_stages_where_the_guard_goes_both_ways(form, trip, slack, named):
    """What test_guarded_gather_compiles_for_sm90a compiles, decided on the source: the stages are named
    only where the guard is seen to go both ways at points the program reaches."""
    runtime = trip == "runtime"
    grid, args, kwargs, _, _ = _gather_launch(2 if runtime else trip, runtime, slack)
    lowered = _lower_tilelang(guarded_gather_spelled, grid, args, {**kwargs, "FORM": form})
    header = _pipelined_header(lowered.source)
    assert ("order=[0, 1, 2, 3], stage=[0, 0, 0, 1]" in header) == named, header
