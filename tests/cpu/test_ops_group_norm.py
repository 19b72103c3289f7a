"""tle.ops.group_norm and tle.ops.GroupNorm on CPU against torch's F.group_norm and nn.GroupNorm in fp64: ranks 2
to 5, with and without the affine parameters, several group counts, forward and the gradients of input, weight
and bias, on the torch backend and the Triton kernels in Triton's interpreter, a subset through the interpreter
of TileLang programs; fp16 and bf16; groups far from zero and groups of several tiles; channels-last and strided
inputs; bad inputs; the module against torch's."""
import pytest
import torch
import torch.nn.functional as F

import tle
import tle.ops
from op_cases import close
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter

# (input shape, num_groups): ranks 2 to 5; one group, a group a channel, groups of several channels
CASES = [((6, 12), 3), ((4, 6, 10), 2), ((2, 8, 3, 5), 4), ((2, 4, 2, 3, 2), 1), ((3, 6, 7), 6)]
AFFINE = ["none", "weight", "bias", "both"]


def problem(shape, affine, seed=0):
    """fp64 input (each channel off-centre by its own amount), weight, bias, upstream gradient."""
    g = torch.Generator().manual_seed(seed)
    c = shape[1]
    per_channel = (c,) + (1,) * (len(shape) - 2)
    x = torch.randn(*shape, generator=g, dtype=torch.float64) + torch.randn(per_channel, generator=g,
                                                                            dtype=torch.float64) * 2
    w = torch.rand(c, generator=g, dtype=torch.float64) + 0.5 if affine in ("weight", "both") else None
    b = torch.randn(c, generator=g, dtype=torch.float64) if affine in ("bias", "both") else None
    return x, w, b, torch.randn(*shape, generator=g, dtype=torch.float64)


def torch_group_norm(x, groups, w, b, dy, eps=1e-5):
    """torch's F.group_norm and its gradients in fp64. Its CPU backward fails with a bias and no weight ("tensor
    does not have a device", torch 2.13): weight ones stands in there, which changes neither y nor the gradients
    of input and bias."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b) if t is not None]
    w_ = leaves[1] if w is not None else (torch.ones(x.shape[1], dtype=x.dtype) if b is not None else None)
    b_ = leaves[-1] if b is not None else None
    y = F.group_norm(leaves[0], groups, w_, b_, eps)
    return y.detach(), torch.autograd.grad(y, leaves, dy)


def run(backend, shape, groups, affine, dtype=torch.float32, eps=1e-5, x=None):
    x0, w, b, dy = problem(shape, affine)
    x = x0 if x is None else x
    # the inputs as `dtype` rounds them, and the reference on those values
    x, w, b, dy = (t.to(dtype).double() if t is not None else None for t in (x, w, b, dy))
    y_ref, g_ref = torch_group_norm(x, groups, w, b, dy, eps)
    leaves = [t.to(dtype).requires_grad_() for t in (x, w, b) if t is not None]
    xin = leaves[0]
    win = leaves[1] if w is not None else None
    bin_ = leaves[-1] if b is not None else None
    y = tle.ops.group_norm(xin, groups, win, bin_, eps, backend=backend)
    what = f"{backend} {tuple(shape)} groups={groups} {affine} {dtype}"
    assert y.shape == x.shape and y.dtype == dtype, what
    close(y, y_ref, dtype, f"{what} output")
    grads = torch.autograd.grad(y, leaves, dy.to(dtype))
    for name, got, want in zip(["input", "weight", "bias"] if w is not None else ["input", "bias"], grads, g_ref):
        assert got.dtype == dtype, what
        close(got, want, dtype, f"{what} gradient of {name}", floor=dy.abs().max().item())


@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_matches_torch(backend, affine):
    for shape, groups in CASES:
        run(backend, shape, groups, affine)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_half_precision(backend, dtype):
    """The output and every gradient in the input's dtype, the statistics in fp32."""
    for shape, groups in CASES[1:3]:
        run(backend, shape, groups, "both", dtype=dtype)


@needs_tilelang
def test_tilelang_through_interpreter():
    with tilelang_through_interpreter():
        for (shape, groups), affine in zip(CASES[:3], ["weight", "both", "none"]):
            run("tilelang", shape, groups, affine)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_groups_far_from_zero_and_of_several_tiles(backend):
    """Groups of 5000 elements (two flat tiles of the statistics' loop, three spatial steps a channel) around 100 with
    a spread of 0.1: E[x^2] - E[x]^2 in fp32 would lose the variance; each lane's running mean keeps it."""
    x, *_ = problem((2, 4, 2500), "both")
    run(backend, (2, 4, 2500), 2, "both", x=x * 0.1 + 100.0)


# -- every loop of the kernels with partial tails: tiles forced small -------------------------------------------
@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_small_tiles(backend, monkeypatch):
    """Flat tiles of 16 and [2, 4] channel tiles, on both backends: every case loops over several tiles in each
    loop, the last one partial in both dimensions where the sizes allow (3 channels a group, 10 positions)."""
    from tle.kernels import group_norm as module
    monkeypatch.setattr(module, "tiles", lambda group_channels, spatial, size: module.Tiles(16, 2, 4, 4))
    with tilelang_through_interpreter():
        for shape, groups in CASES + [((2, 6, 10), 2)]:
            run(backend, shape, groups, "both")


# -- layouts -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_channels_last_and_strided_inputs(backend):
    """Non-contiguous inputs (channels-last, a channel slice, a strided weight, an expanded upstream gradient) are
    copied into [N, C, *] order: the same results as torch; the output is contiguous."""
    torch.manual_seed(0)
    x = torch.randn(2, 8, 5, 6).to(memory_format=torch.channels_last).requires_grad_()
    w, b = (torch.rand(16) + 0.5)[::2].requires_grad_(), torch.randn(8).requires_grad_()
    y = tle.ops.group_norm(x, 4, w, b, backend=backend)
    assert y.is_contiguous()
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, b))
    y_ref = F.group_norm(xr, 4, wr, br)
    torch.testing.assert_close(y.double(), y_ref, atol=1e-5, rtol=1e-5)
    for got, want in zip(torch.autograd.grad(y.sum(), (x, w, b)), torch.autograd.grad(y_ref.sum(), (xr, wr, br))):
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    xs = torch.randn(3, 12, 7)[:, 2:10]                  # a slice of the channels
    torch.testing.assert_close(tle.ops.group_norm(xs, 2, backend=backend), F.group_norm(xs, 2), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_half_input_fp32_parameters(backend):
    """fp16 activations with fp32 weight and bias (mixed precision): the output is fp16, each gradient in its
    input's dtype."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 9).half().requires_grad_()
    w, b = (torch.rand(6) + 0.5).requires_grad_(), torch.randn(6).requires_grad_()
    y = tle.ops.group_norm(x, 3, w, b, backend=backend)
    assert y.dtype == torch.float16
    dy = torch.randn(2, 6, 9).half()
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), dy)
    assert (gx.dtype, gw.dtype, gb.dtype) == (torch.float16, torch.float32, torch.float32)
    y_ref, (rx, rw, rb) = torch_group_norm(x.double(), 3, w.double(), b.double(), dy.double())
    torch.testing.assert_close(y.double(), y_ref, atol=4e-3, rtol=2e-3)
    torch.testing.assert_close(gx.double(), rx, atol=4e-3, rtol=2e-3)
    torch.testing.assert_close(gw.double(), rw, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gb.double(), rb, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_empty_inputs(backend):
    """No samples, no channels or no positions: an empty output, and zero gradients for the parameters (torch
    gives NaN for the weight's where the groups are empty, as its empty groups' statistics are NaN)."""
    for shape, groups in (((0, 6, 4), 3), ((2, 0, 5), 3), ((2, 6, 0), 3)):
        x = torch.randn(shape, requires_grad=True)
        w, b = torch.rand(shape[1], requires_grad=True), torch.randn(shape[1], requires_grad=True)
        y = tle.ops.group_norm(x, groups, w, b, backend=backend)
        assert y.shape == shape
        gx, gw, gb = torch.autograd.grad(y, (x, w, b), torch.ones(shape))
        assert gx.shape == shape and not gw.any() and not gb.any()


# -- bad inputs --------------------------------------------------------------------------------------------
X = torch.randn(2, 6, 5)


@pytest.mark.parametrize("bad, match", [
    (lambda: tle.ops.group_norm(torch.randn(6), 3), r"'input' has shape \[6\]; expected \[N, C, \*\]"),
    (lambda: tle.ops.group_norm(X, 4), r"'input' has 6 channels \(shape \[2, 6, 5\]\), which num_groups=4 does "),
    (lambda: tle.ops.group_norm(X, 0), "'num_groups' is 0; expected a positive number"),
    (lambda: tle.ops.group_norm(X, -3), "'num_groups' is -3"),
    (lambda: tle.ops.group_norm(X, 3.0), "'num_groups' must be an int, got float"),
    (lambda: tle.ops.group_norm(X, True), "'num_groups' must be an int, got bool"),
    (lambda: tle.ops.group_norm(X, 3, torch.randn(5)), r"'weight' has shape \[5\]; expected \[6\], one value per "),
    (lambda: tle.ops.group_norm(X, 3, None, torch.randn(6, 1)), r"'bias' has shape \[6, 1\]; expected \[6\]"),
    (lambda: tle.ops.group_norm(torch.arange(60).reshape(2, 6, 5), 3), "'input' has dtype int64"),
    (lambda: tle.ops.group_norm(X, 3, torch.ones(6, dtype=torch.int32)), "'weight' has dtype int32"),
    (lambda: tle.ops.group_norm(X, 3, None, torch.randn(6, device="meta")), "'bias' is on meta"),
    (lambda: tle.ops.group_norm(torch.randn(1, 3), 3), r"'input' of shape \[1, 3\] with num_groups=3 has one "),
    (lambda: tle.ops.group_norm(torch.randn(1, 3, 1), 3), "has one value per group"),
    (lambda: tle.ops.group_norm(X.double(), 3, backend="triton"), "'input' has dtype float64, which backend"),
    (lambda: tle.ops.group_norm(X, 3, None, torch.randn(6).double(), backend="triton"),
     "'bias' has dtype float64, which backend 'triton'"),
    (lambda: tle.ops.group_norm([1.0, 2.0], 1), "'input' must be a torch.Tensor"),
    (lambda: tle.ops.GroupNorm(2, 6, backend="torch")(torch.randn(2, 4, 5)),
     r"'weight' has shape \[6\]; expected \[4\]"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()


def test_bad_modules_and_backends():
    with pytest.raises(ValueError, match=r"num_channels \(6\) must be divisible by num_groups \(4\)"):
        tle.ops.GroupNorm(4, 6)
    with pytest.raises(ValueError, match=r"num_groups \(0\) must be a positive int"):
        tle.ops.GroupNorm(0, 6)
    with pytest.raises(tle.BackendUnavailable, match=r"unknown backend 'cuda'.*torch, triton, tilelang"):
        tle.ops.group_norm(X, 3, backend="cuda")


# -- the module against torch.nn.GroupNorm -----------------------------------------------------------------
@pytest.mark.parametrize("affine, bias", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_module_matches_torch(backend, affine, bias):
    torch.manual_seed(0)
    ref = torch.nn.GroupNorm(4, 12, eps=1e-4, affine=affine, bias=bias)
    ours = tle.ops.GroupNorm(4, 12, eps=1e-4, affine=affine, bias=bias, backend=backend)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert repr(ours) == repr(ref)[:-1] + f", backend={backend})"
    if affine:
        with torch.no_grad():
            ref.weight.copy_(torch.rand(12) + 0.5)
            if bias:
                ref.bias.copy_(torch.randn(12))
    ours.load_state_dict(ref.state_dict())               # the same parameters, by torch's names
    x = torch.randn(3, 12, 4, 5, requires_grad=True)
    dy = torch.randn(3, 12, 4, 5)
    y_ref, y = ref(x), ours(x)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(torch.autograd.grad(y, [x, *ours.parameters()], dy),
                    torch.autograd.grad(y_ref, [x, *ref.parameters()], dy)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_module_defaults_and_reset():
    m, ref = tle.ops.GroupNorm(2, 6, backend="triton"), torch.nn.GroupNorm(2, 6)
    assert (m.num_groups, m.num_channels, m.eps, m.affine) == (ref.num_groups, ref.num_channels, ref.eps, ref.affine)
    assert torch.equal(m.weight, torch.ones(6)) and torch.equal(m.bias, torch.zeros(6))
    m2 = tle.ops.GroupNorm(2, 6, dtype=torch.float16, device="meta")
    assert m2.weight.dtype == torch.float16 and m2.bias.device.type == "meta"
    assert repr(m) == "GroupNorm(2, 6, eps=1e-05, affine=True, bias=True, backend=triton)"
    with torch.no_grad():
        m.weight.mul_(3)
        m.bias.add_(1)
    m.reset_parameters()
    assert torch.equal(m.weight, torch.ones(6)) and torch.equal(m.bias, torch.zeros(6))
    assert not tle.ops.GroupNorm(2, 6, affine=False).state_dict()


# -- torch.compile -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_torch_compile_fullgraph_matches_eager(backend):
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), tle.ops.GroupNorm(4, 8, backend=backend),
                                torch.nn.SiLU())
    x = torch.randn(2, 4, 6, 6, requires_grad=True)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    eager_out, compiled_out = block(x), compiled(x)
    torch.testing.assert_close(compiled_out, eager_out)
    params = (x, block[1].weight, block[1].bias)
    for e, c in zip(torch.autograd.grad(eager_out.sum(), params), torch.autograd.grad(compiled_out.sum(), params)):
        torch.testing.assert_close(c, e)


# -- TileLang's CUDA at the benchmark's shapes ---------------------------------------------------------------
@needs_tilelang
@pytest.mark.parametrize("shape", [(16, 1024, 1024, 32), (16, 320, 4096, 32)])
def test_tilelang_generates_cuda_at_the_benchmark_shapes(shape):
    """TileLang compiles each kernel for its shapes, and its CUDA code generation can fail for some of them (a
    scalar loaded from global memory and broadcast over the statistics' lanes gave "Can't fetch the lanes of a
    scalable vector" at these two shapes, not at smaller ones): both kernels, at the operator's own tiles, are
    generated here for the shapes of tle-bench's page (no GPU needed for the CUDA source)."""
    from tle.kernels import group_norm as gn
    n, c, s, g = shape
    x = torch.empty(n, c, s, dtype=torch.bfloat16, device="meta")
    w, b = (torch.empty(c, dtype=torch.bfloat16, device="meta") for _ in range(2))
    stats = [torch.empty(n, g, device="meta") for _ in range(2)]
    parts = [torch.empty(n, c, device="meta") for _ in range(2)]
    xg = gn._by_group(x, g)
    fwd = gn.tiles(c // g, s, gn.FORWARD_TILES["tilelang"])
    lowered = gn.group_norm_fwd_kernel.lower(
        xg.view(n * g, -1), xg, gn._by_channel(w, g, None), gn._by_channel(b, g, None), xg, *stats, g, c // g, s,
        1e-5, BLOCK=fwd.block, BLOCK_C=fwd.block_c, BLOCK_S=fwd.block_s, HAS_WEIGHT=True, HAS_BIAS=True,
        grid=(n * g,), backend="tilelang", num_warps=fwd.num_warps)
    assert "__global__" in lowered.stage("cuda")
    bwd = gn.tiles(c // g, s, gn.BACKWARD_TILES)
    lowered = gn.group_norm_bwd_kernel.lower(
        xg, xg, gn._by_channel(w, g, None), *stats, xg, *(gn._by_channel(p, g, None) for p in parts), g, c // g, s,
        BLOCK_C=bwd.block_c, BLOCK_S=bwd.block_s, HAS_WEIGHT=True, HAS_BIAS=True, grid=(n * g,),
        backend="tilelang", num_warps=bwd.num_warps)
    assert "__global__" in lowered.stage("cuda")
