"""tle.ops.layer_norm / LayerNorm and tle.ops.l2_norm / L2Norm beyond the generic operator tests of test_ops.py:
bad inputs, LayerNorm against torch.nn.LayerNorm with the same parameters, the exact L2 formula (and how it
differs from F.normalize), mixed parameter dtypes, strided inputs, torch.compile."""
import pytest
import torch

import tle
import tle.ops
from tle.ops import OPERATORS
from tle.oplib.arith import cdiv

BACKENDS = ["torch", "triton"]          # triton runs in Triton's interpreter here (tests/cpu/conftest.py)


# -- bad inputs ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, match", [
    (lambda: tle.ops.layer_norm(torch.arange(8).reshape(2, 4), 4, backend="torch"), "'input' has dtype int64"),
    (lambda: tle.ops.layer_norm(torch.randn(2, 4), 4, torch.randn(5), backend="torch"),
     r"'weight' has shape \[5\]; expected normalized_shape \[4\]"),
    (lambda: tle.ops.layer_norm(torch.randn(2, 4), 4, torch.randn(4), torch.randn(4, 1), backend="torch"),
     r"'bias' has shape \[4, 1\]"),
    (lambda: tle.ops.layer_norm(torch.randn(2, 4), 4, None, torch.randn(3), backend="triton"),
     r"'bias' has shape \[3\]"),
    (lambda: tle.ops.layer_norm(torch.randn(2, 4), 4, torch.ones(4, dtype=torch.int32), backend="torch"),
     "'weight' has dtype int32"),
    (lambda: tle.ops.layer_norm(torch.randn(2, 4), 4, None, torch.zeros(4, dtype=torch.bool), backend="torch"),
     "'bias' has dtype bool"),
    (lambda: tle.ops.layer_norm(torch.randn(2, 4), 4, torch.randn(4, device="meta"), backend="torch"),
     "'weight' is on meta"),
    (lambda: tle.ops.layer_norm(torch.randn(2, 4).double(), 4, backend="triton"),
     "'input' has dtype float64, which backend"),
    (lambda: tle.ops.layer_norm(torch.randn(2, 4), 4, None, torch.randn(4).double(), backend="triton"),
     "'bias' has dtype float64, which backend 'triton'"),
    (lambda: tle.ops.layer_norm(torch.randn(1, 65537), 65537, backend="triton"), "'input' has 65537 elements a row"),
    (lambda: tle.ops.layer_norm(torch.randn(3, 5, 13109), (5, 13109), backend="triton"),
     "'input' has 65545 elements a row"),
    (lambda: tle.ops.layer_norm([1.0, 2.0], 2, backend="torch"), "'input' must be a torch.Tensor"),
    (lambda: tle.ops.layer_norm(torch.tensor(1.0), 1, backend="torch"), "'input' has rank 0"),
    (lambda: tle.ops.LayerNorm(4, backend="torch")(torch.randn(2, 5)),
     r"'normalized_shape' is \[4\], but 'input' has shape \[2, 5\]"),
    (lambda: tle.ops.LayerNorm((3, 4), backend="torch")(torch.randn(2, 4, 3)), "its last 2 dimensions must be"),
    (lambda: tle.ops.RMSNorm((3, 4), backend="torch")(torch.randn(2, 4, 3)), "its last 2 dimensions must be"),
    (lambda: tle.ops.l2_norm(torch.arange(8).reshape(2, 4), backend="torch"), "'x' has dtype int64"),
    (lambda: tle.ops.l2_norm(torch.ones(2, 4, dtype=torch.uint8), backend="triton"), "'x' has dtype uint8"),
    (lambda: tle.ops.l2_norm(torch.randn(2, 4).double(), backend="triton"), "'x' has dtype float64, which backend"),
    (lambda: tle.ops.l2_norm(torch.randn(1, 65537), backend="triton"), "'x' has 65537 columns"),
    (lambda: tle.ops.l2_norm(torch.tensor(1.0), backend="torch"), "'x' has rank 0"),
    (lambda: tle.ops.L2Norm(backend="torch")("x"), "'x' must be a torch.Tensor"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()


@pytest.mark.parametrize("call", [lambda b: tle.ops.layer_norm(torch.randn(2, 4), 4, backend=b),
                                  lambda b: tle.ops.LayerNorm(4, backend=b)(torch.randn(2, 4)),
                                  lambda b: tle.ops.l2_norm(torch.randn(2, 4), backend=b),
                                  lambda b: tle.ops.L2Norm(backend=b)(torch.randn(2, 4))])
def test_unknown_backend(call):
    with pytest.raises(tle.BackendUnavailable, match=r"unknown backend 'cuda'.*torch, triton, tilelang"):
        call("cuda")


def test_norm_modules_take_torchs_normalized_shape():
    assert tle.ops.LayerNorm([8]).normalized_shape == (8,) and tle.ops.LayerNorm(torch.Size([3, 4])).normalized_shape \
        == (3, 4)
    assert tle.ops.RMSNorm((3, 4)).weight.shape == (3, 4) and tle.ops.LayerNorm((3, 4)).bias.shape == (3, 4)
    with pytest.raises(tle.LaunchError, match="'normalized_shape' is 'x'; expected an int or a non-empty sequence of ints"):
        tle.ops.RMSNorm("x")


# -- LayerNorm against torch.nn.LayerNorm ------------------------------------------------------------------
@pytest.mark.parametrize("affine, bias", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_module_matches_torch(backend, affine, bias):
    torch.manual_seed(0)
    ref = torch.nn.LayerNorm(40, eps=1e-4, elementwise_affine=affine, bias=bias)
    ours = tle.ops.LayerNorm(40, eps=1e-4, elementwise_affine=affine, bias=bias, backend=backend)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    if affine:
        with torch.no_grad():
            ref.weight.copy_(torch.rand(40) + 0.5)
            if bias:
                ref.bias.copy_(torch.randn(40))
    ours.load_state_dict(ref.state_dict())               # the same parameters, by torch's names
    x = torch.randn(3, 5, 40, requires_grad=True)
    dy = torch.randn(3, 5, 40)
    y_ref, y = ref(x), ours(x)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    g_ref = torch.autograd.grad(y_ref, [x, *ref.parameters()], dy)
    g = torch.autograd.grad(y, [x, *ours.parameters()], dy)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_layer_norm_module_defaults_and_repr():
    m = tle.ops.LayerNorm(6, backend="triton")
    assert torch.equal(m.weight, torch.ones(6)) and torch.equal(m.bias, torch.zeros(6))
    m2 = tle.ops.LayerNorm(6, dtype=torch.float16)
    assert m2.weight.dtype == torch.float16 and m2.bias.dtype == torch.float16
    assert "backend=triton" in repr(m) and "eps=1e-05" in repr(m)
    with torch.no_grad():
        m.weight.mul_(3)
    m.reset_parameters()
    assert torch.equal(m.weight, torch.ones(6))


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_half_input_fp32_parameters(backend):
    """fp16 activations with fp32 weight and bias (mixed precision): the gradients keep each input's dtype."""
    torch.manual_seed(0)
    x = torch.randn(7, 33).half().requires_grad_()
    w, b = (torch.rand(33) + 0.5).requires_grad_(), torch.randn(33).requires_grad_()
    y = tle.ops.layer_norm(x, 33, w, b, backend=backend)
    assert y.dtype == torch.float16
    dy = torch.randn(7, 33).half()
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), dy)
    assert (gx.dtype, gw.dtype, gb.dtype) == (torch.float16, torch.float32, torch.float32)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    y_ref = OPERATORS["layer_norm"].reference(xd, 33, wd, bd)
    rx, rw, rb = torch.autograd.grad(y_ref, (xd, wd, bd), dy.double())
    torch.testing.assert_close(y.double(), y_ref, atol=4e-3, rtol=2e-3)
    torch.testing.assert_close(gx.double(), rx, atol=4e-3, rtol=2e-3)
    torch.testing.assert_close(gw.double(), rw, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gb.double(), rb, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_rows_with_large_mean(backend):
    """Rows far from zero: the variance is of the centred row (no E[x^2] - E[x]^2 cancellation)."""
    torch.manual_seed(0)
    x = torch.randn(4, 100) * 0.1 + 100.0             # E[x^2] - E[x]^2 in fp32 would be off by ~5%
    y = tle.ops.layer_norm(x, 100, backend=backend)
    ref = OPERATORS["layer_norm"].reference(x.double(), 100)
    torch.testing.assert_close(y.double(), ref, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_inputs(backend):
    torch.manual_seed(0)
    x = torch.randn(8, 6, 16).transpose(0, 1)          # rows not evenly strided: copied
    w, b = torch.rand(16) + 0.5, torch.randn(16)
    torch.testing.assert_close(tle.ops.layer_norm(x, 16, w, b, backend=backend),
                               OPERATORS["layer_norm"].reference(x, 16, w, b), atol=1e-5, rtol=1e-5)
    xs = torch.randn(6, 40)[:, :16]                    # evenly strided rows: a view
    torch.testing.assert_close(tle.ops.l2_norm(xs, backend=backend), OPERATORS["l2_norm"].reference(xs),
                               atol=1e-6, rtol=1e-5)


# -- L2Norm: the formula of the gated delta rule, not F.normalize -------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_l2_norm_formula_and_not_f_normalize(backend):
    torch.manual_seed(0)
    x = torch.randn(3, 64)
    x[1] *= 1e-4                                       # ||x|| ~ 8e-4: sum(x^2) ~ 6e-7, comparable to eps
    y = tle.ops.l2_norm(x, backend=backend)
    formula = x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(y, formula, atol=1e-6, rtol=1e-5)
    normalized = torch.nn.functional.normalize(x, dim=-1, eps=1e-6)
    torch.testing.assert_close(y[[0, 2]], normalized[[0, 2]], atol=1e-5, rtol=1e-5)     # large rows: the same
    assert (y[1].norm() - 1).abs() > 0.2 and (normalized[1].norm() - 1).abs() < 1e-5   # small rows: eps shows


@pytest.mark.parametrize("backend", BACKENDS)
def test_l2_norm_zero_row_has_finite_gradient(backend):
    x = torch.zeros(2, 32)
    x[0] = torch.randn(32)
    x.requires_grad_()
    dy = torch.randn(2, 32)
    y = tle.ops.l2_norm(x, eps=1e-6, backend=backend)
    (gx,) = torch.autograd.grad(y, x, dy)
    assert torch.equal(y[1], torch.zeros(32))
    torch.testing.assert_close(gx[1], dy[1] * 1e3, atol=1e-3, rtol=1e-5)                # rsqrt(eps) * dy


def test_l2_norm_module():
    x = torch.randn(2, 3, 16)
    m = tle.ops.L2Norm(eps=1e-3, backend="triton")
    assert "eps=0.001" in repr(m) and not list(m.parameters())
    torch.testing.assert_close(m(x), tle.ops.l2_norm(x, 1e-3, backend="torch"), atol=1e-6, rtol=1e-5)


# -- torch.compile -----------------------------------------------------------------------------------------
class Block(torch.nn.Module):
    def __init__(self, d, backend):
        super().__init__()
        self.norm = tle.ops.LayerNorm(d, backend=backend)
        self.proj = torch.nn.Linear(d, d)
        self.backend = backend

    def forward(self, x):
        return tle.ops.l2_norm(self.proj(self.norm(x)), backend=self.backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile_fullgraph_matches_eager(backend):
    torch.manual_seed(0)
    block = Block(24, backend)
    x = torch.randn(2, 5, 24, requires_grad=True)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    eager_out, compiled_out = block(x), compiled(x)
    torch.testing.assert_close(compiled_out, eager_out)
    params = (x, block.norm.weight, block.norm.bias)
    for e, c in zip(torch.autograd.grad(eager_out.sum(), params), torch.autograd.grad(compiled_out.sum(), params)):
        torch.testing.assert_close(c, e)


@pytest.mark.parametrize("used", ["y", "h", "both"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_rms_norm_residual_gradients_of_either_output(backend, used):
    # the statistics' and an unused output's gradients arrive as None (no zeros are made): each output alone
    torch.manual_seed(0)
    x, r = torch.randn(3, 33, requires_grad=True), torch.randn(3, 33, requires_grad=True)
    w = (torch.rand(33) + 0.5).requires_grad_()
    gy, gh = torch.randn(3, 33), torch.randn(3, 33)
    y, h = tle.ops.rms_norm(x, 33, w, 1e-6, residual=r, backend=backend)
    outs, grads = {"y": ([y], [gy]), "h": ([h], [gh]), "both": ([y, h], [gy, gh])}[used]
    got = torch.autograd.grad(outs, (x, r, w), grads, allow_unused=True)
    xr, rr, wr = (t.detach().double().requires_grad_() for t in (x, r, w))
    hr = xr + rr
    yr = hr * torch.rsqrt(hr.pow(2).mean(-1, keepdim=True) + 1e-6) * wr
    ref_outs = {"y": [yr], "h": [hr], "both": [yr, hr]}[used]
    want = torch.autograd.grad(ref_outs, (xr, rr, wr), [g.double() for g in grads], allow_unused=True)
    for g, wnt in zip(got, want):
        if wnt is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g.double() if g is not None else torch.zeros_like(wnt), wnt, rtol=1e-4,
                                       atol=1e-5)


# -- the loops of the norms' backward that hide load latency ---------------------------------------------------
# The backward kernels load row block i + 1 while they reduce block i (PREFETCH, Triton) or take the loop's loads
# as asynchronous copies pipelined in stages (ASYNC_LOADS, TileLang), only for tiles of 8192 elements and more,
# which the small samples never reach: each is forced on one-row tiles on both backends, so that each of the
# four programs (on the CPU) loops over several blocks, the last ones reading past its run or the last row.
LATENCY_LOOPS = {"prefetch": dict(prefetch=True, async_loads=False),
                 "async loads": dict(prefetch=False, async_loads=True)}


@pytest.mark.parametrize("loop", LATENCY_LOOPS)
@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("name", ["rms_norm", "layer_norm"])
def test_backward_latency_loops(name, backend, loop, monkeypatch):
    import importlib

    from op_cases import assert_matches_reference
    from tilelang_oracle import tilelang_through_interpreter
    from tle.oplib import rows

    module = importlib.import_module(f"tle.kernels.{name}")
    monkeypatch.setattr(module, "backward_row_config", lambda n, backend, **_: rows.BackwardRows(
        1, rows.row_config(n)[1], 4, 1, num_stages=3, **LATENCY_LOOPS[loop]))
    op = OPERATORS[name]
    samples = [s for s in op.samples("cpu", torch.float32) if s.args[0].numel()]
    with tilelang_through_interpreter():
        for sample in samples:
            assert_matches_reference(op, sample, backend, what=loop)


# -- the norms' forward in two passes over column chunks (TWO_PASS: Triton, rows of 4096 columns and more) ----
@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("name", ["rms_norm", "l2_norm"])
def test_forward_two_passes(name, backend, monkeypatch):
    """Forced on [2, 16] chunks, so that the samples' rows (1 to 1000 columns) take one to many chunks, the last
    one partial, and the last row block is partial too; on both backends (TileLang drops the eviction hints)."""
    import importlib

    from op_cases import assert_matches_reference
    from tilelang_oracle import tilelang_through_interpreter
    from tle.oplib import rows

    module = importlib.import_module(f"tle.kernels.{name}")
    monkeypatch.setattr(module, "forward_row_config", lambda n, backend: rows.ForwardRows(2, 16, 4, True))
    op = OPERATORS[name]
    samples = [s for s in op.samples("cpu", torch.float32) if s.args[0].numel()]
    with tilelang_through_interpreter():
        for sample in samples:
            assert_matches_reference(op, sample, backend, what="two passes")


def test_forward_row_config_takes_two_passes_on_triton_for_wide_rows():
    from tle.oplib.rows import forward_row_config
    assert forward_row_config(8192, "triton") == (1, 4096, 16, True)
    assert forward_row_config(4096, "triton") == (1, 2048, 8, True)
    assert not forward_row_config(2048, "triton").two_pass
    assert not forward_row_config(8192, "tilelang").two_pass


def test_backward_row_config_stages_what_fits_in_shared_memory():
    """TileLang's pipelined backward loop holds `stages` row blocks of every staged tensor in shared memory: 3
    stages where they fit, else 2, else the plain loop (TileLang cannot launch a block asking for more)."""
    from tle.oplib.rows import BackwardRows, backward_row_config
    smem = 227 * 1024
    assert backward_row_config(8192, "tilelang", 4, smem) == BackwardRows(1, 8192, 8, 2, False, True, 3)
    assert backward_row_config(8192, "tilelang", 4, smem, tilelang_rows=2) == BackwardRows(2, 8192, 8, 1, False, True, 3)
    assert backward_row_config(16384, "tilelang", 4, smem, tilelang_rows=2) == BackwardRows(1, 16384, 8, 2, False, True, 3)
    assert backward_row_config(16384, "tilelang", 6, smem) == BackwardRows(1, 16384, 8, 2, False, True, 2)
    assert backward_row_config(32768, "tilelang", 4, smem) == BackwardRows(1, 32768, 16, 1, False, False, 3)
    assert backward_row_config(8192, "tilelang", 4, 100 * 1024) == BackwardRows(1, 8192, 8, 2, False, True, 2)
    assert backward_row_config(65536, "triton", 6, smem) == BackwardRows(1, 65536, 16, 1, True, False, 3)


def _layer_norm_bwd_lowered(m, n, cfg, programs):
    from tle.kernels.layer_norm import layer_norm_bwd_kernel
    t = torch.empty(m, n, dtype=torch.bfloat16, device="meta")
    w = torch.empty(n, dtype=torch.bfloat16, device="meta")
    stats = torch.empty(m, device="meta")
    part = torch.empty(programs, n, device="meta")
    return layer_norm_bwd_kernel.lower(
        t, t, w, stats, stats, t, part, part, n, n, n, m, n, cdiv(m, programs), BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n, HAS_WEIGHT=True, HAS_BIAS=True, PREFETCH=cfg.prefetch, ASYNC_LOADS=cfg.async_loads,
        grid=(programs,), backend="tilelang", num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def _rms_norm_bwd_lowered(m, n, cfg, programs):
    from tle.kernels.rms_norm import rms_norm_bwd_kernel
    t = torch.empty(m, n, dtype=torch.bfloat16, device="meta")
    w = torch.empty(n, dtype=torch.bfloat16, device="meta")
    return rms_norm_bwd_kernel.lower(
        t, t, w, torch.empty(m, device="meta"), t, t, torch.empty(programs, n, device="meta"), n, n, 0, n, m, n,
        cdiv(m, programs), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, HAS_WEIGHT=True, HAS_DH=False,
        PREFETCH=cfg.prefetch, ASYNC_LOADS=cfg.async_loads, grid=(programs,), backend="tilelang",
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def test_tilelang_backward_loop_is_pipelined():
    """What the operator launches on TileLang: the loop of the norms' backward is T.Pipelined, its row loads
    asynchronous copies into shared memory."""
    from tle.oplib.rows import backward_row_config
    n = 8192
    lowered = _rms_norm_bwd_lowered(4096, n, backward_row_config(n, "tilelang"), 256)
    assert "T.Pipelined(16, num_stages=3)" in lowered.source
    hows = [how for _, op, kind, how in lowered.compiled.access_report if op == "load" and "is_async" in how]
    assert len(hows) == 2 and all("stage 0 of T.Pipelined (num_stages=3)" in h for h in hows), hows


@pytest.mark.slow
@pytest.mark.parametrize("lower", [_rms_norm_bwd_lowered, _layer_norm_bwd_lowered], ids=["rms_norm", "layer_norm"])
def test_tilelang_backward_row_statistics_stay_with_the_compute_warps(lower):
    """TileLang warp-specializes the pipelined loop (producer warps issue the row copies, consumer warps
    compute). The per-row statistics (rstd, mean) are plain loads: read as a T.copy into a fragment, TileLang
    0.1.15 moves them to the producer warps, into a renamed register the consumers never see (the backward came
    out all NaN on the H200). The CUDA for sm_90a at the headline shape reads them in the consumer warps."""
    pytest.importorskip("tilelang")
    from tle.oplib.rows import backward_row_config
    n = 8192
    lowered = lower(32768, n, backward_row_config(n, "tilelang"), 264)
    cuda = lowered.stage("cuda")
    assert "tma_load" in cuda                    # the warp-specialized pipeline this is about
    assert "_producer_ws" not in cuda


# -- torch's own signatures: the same positional call as torch.nn.functional, the same modules ----------------
# torch's functional norms take a tuple, a list or a torch.Size (not an int: only its modules do; ours take one)
NORMALIZED_SHAPES = [lambda s: tuple(s[-1:]), lambda s: list(s[-2:]), lambda s: torch.Size(s[-3:])]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("form", range(len(NORMALIZED_SHAPES)))
@pytest.mark.parametrize("backend", BACKENDS)
def test_norms_take_torchs_arguments(backend, form, dtype):
    """tle.ops.rms_norm / layer_norm called exactly as F.rms_norm / F.layer_norm: normalized_shape as an int, a
    tuple, a list or a torch.Size of one to three trailing dimensions, with and without the affine parameters,
    eps given or left to torch's default (rms_norm: the dtype's eps)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 24).to(dtype)
    shape = NORMALIZED_SHAPES[form](x.shape)
    dims = tuple(shape)
    w, b = (torch.rand(dims) + 0.5).to(dtype), torch.randn(dims).to(dtype)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    F = torch.nn.functional
    for args in [(x, shape), (x, shape, w), (x, shape, w, 1e-3), (x, shape, None, None)]:
        torch.testing.assert_close(tle.ops.rms_norm(*args, backend=backend), F.rms_norm(*args), **tol)
    for args in [(x, shape), (x, shape, w), (x, shape, None, b), (x, shape, w, b, 1e-3)]:
        torch.testing.assert_close(tle.ops.layer_norm(*args, backend=backend), F.layer_norm(*args), **tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_norm_modules_match_torchs_defaults(backend):
    """nn.RMSNorm's eps is None (the input dtype's eps), not a fixed 1e-6: at |x| ~ 1e-3 the two differ by far
    more than rounding; tle.ops.RMSNorm(d) is torch's module, parameters and state_dict included."""
    torch.manual_seed(0)
    x = torch.randn(5, 3, 64) * 1e-3
    for shape in (64, (3, 64)):
        ref, ours = torch.nn.RMSNorm(shape), tle.ops.RMSNorm(shape, backend=backend)
        assert ours.eps is None and ref.eps is None
        with torch.no_grad():
            ref.weight.copy_(torch.rand(ref.weight.shape) + 0.5)
        ours.load_state_dict(ref.state_dict())
        torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-4)
        assert (ours(x) - torch.nn.RMSNorm(shape, eps=1e-6)(x)).abs().max() > 0.1      # 1e-6 would be far off
        lref, lours = torch.nn.LayerNorm(shape, bias=False), tle.ops.LayerNorm(shape, bias=False, backend=backend)
        lours.load_state_dict(lref.state_dict())
        torch.testing.assert_close(lours(x * 1e3), lref(x * 1e3), atol=1e-5, rtol=1e-5)
    assert not tle.ops.RMSNorm(8, elementwise_affine=False).state_dict()
