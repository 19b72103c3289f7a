"""tle.ops.cross_entropy and tle.ops.CrossEntropyLoss on CPU against torch's F.cross_entropy in fp64: every
option (class weights, ignore_index, label smoothing, reductions, the z-loss, the soft cap, [C] and
[N, C, d1, ...] inputs) forward and backward on the torch backend and the Triton kernels in Triton's
interpreter, a subset through the interpreter of TileLang programs; bad inputs."""
import pytest
import torch
import torch.nn.functional as F

import tle
import tle.ops
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter

OPTIONS = [dict(), dict(reduction="sum"), dict(reduction="none"), dict(label_smoothing=0.1),
           dict(weight=True), dict(weight=True, label_smoothing=0.3, reduction="none"), dict(lse_square_scale=1e-2),
           dict(softcap=4.0), dict(softcap=4.0, label_smoothing=0.2, lse_square_scale=1e-3, weight=True),
           dict(ignore_index=3)]


def problem(n=23, c=700, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, generator=g, dtype=torch.float64) * scale
    t = torch.randint(0, c, (n,), generator=g)
    t[::5] = -100
    t[1] = 3
    return x, t, torch.rand(c, generator=g, dtype=torch.float64) + 0.5


def expected(x, t, opts):
    """torch's own function on the soft-capped logits, with the z-loss added per its definition."""
    xd = x.detach().clone().requires_grad_()
    capped = opts["softcap"] * torch.tanh(xd / opts["softcap"]) if opts.get("softcap") else xd
    ignore = opts.get("ignore_index", -100)
    kw = {k: v for k, v in opts.items() if k in ("weight", "reduction", "label_smoothing", "ignore_index")}
    loss = F.cross_entropy(capped, t, **kw)
    z = opts.get("lse_square_scale", 0.0) * torch.logsumexp(capped, 1) ** 2 * (t != ignore)
    red = opts.get("reduction", "mean")
    if red == "none":
        loss = loss + z
    else:
        w_t = opts["weight"][torch.where(t != ignore, t, 0)] * (t != ignore) if "weight" in opts else (t != ignore)
        loss = loss + (z.sum() / w_t.sum() if red == "mean" else z.sum())
    return loss, xd


def run(backend, opts, dtype=torch.float32):
    x, t, w = problem()
    t = torch.where(t == -100, opts.get("ignore_index", -100), t)
    opts = dict(opts)
    if opts.pop("weight", False):
        opts["weight"] = w
    ref, xd = expected(x, t, opts)
    dy = torch.randn(ref.shape, dtype=torch.float64) if ref.dim() else torch.tensor(1.7, dtype=torch.float64)
    ref.backward(dy)
    xin = x.to(dtype).requires_grad_()
    kw = {k: (v.to(dtype) if isinstance(v, torch.Tensor) else v) for k, v in opts.items()}
    out = tle.ops.cross_entropy(xin, t, backend=backend, **kw)
    out.backward(dy.to(dtype))
    what = f"{backend} {opts.keys()} {dtype}"
    assert out.dtype == dtype and out.shape == ref.shape, what
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(out.double(), ref.detach(), **tol, msg=lambda m: f"{what} loss: {m}")
    torch.testing.assert_close(xin.grad.double(), xd.grad, **tol, msg=lambda m: f"{what} grad: {m}")


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: ",".join(o) or "default")
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_matches_torch(backend, opts):
    run(backend, opts)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_triton_half_precision(dtype):
    for opts in (OPTIONS[0], OPTIONS[8]):
        run("triton", opts, dtype)


@needs_tilelang
def test_tilelang_through_interpreter():
    with tilelang_through_interpreter():
        for opts in (OPTIONS[0], OPTIONS[2], OPTIONS[5], OPTIONS[8]):
            run("tilelang", opts)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_return_z_loss_and_legacy_reduce(backend):
    x, t, _ = problem(n=6, c=40)
    loss, z = tle.ops.cross_entropy(x.float(), t, lse_square_scale=0.5, return_z_loss=True, backend=backend)
    valid = t != -100
    want_z = (0.5 * torch.logsumexp(x, 1) ** 2 * valid).sum() / valid.sum()
    torch.testing.assert_close(z.double(), want_z, atol=1e-5, rtol=1e-5)
    assert not z.requires_grad
    summed = tle.ops.cross_entropy(x.float(), t, None, None, -100, False, backend=backend)     # reduce=False: none
    torch.testing.assert_close(summed.double(), F.cross_entropy(x, t, reduction="none"), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_every_row_ignored_gives_torchs_nan_mean(backend):
    x, t = torch.randn(3, 8), torch.full((3,), -100)
    assert torch.isnan(tle.ops.cross_entropy(x, t, backend=backend)) and torch.isnan(F.cross_entropy(x, t))


def test_module():
    w = torch.rand(50) + 0.5
    ours = tle.ops.CrossEntropyLoss(w, ignore_index=2, label_smoothing=0.1, backend="triton")
    theirs = torch.nn.CrossEntropyLoss(w, ignore_index=2, label_smoothing=0.1)
    x, t = torch.randn(9, 50), torch.randint(0, 50, (9,))
    torch.testing.assert_close(ours(x, t), theirs(x, t))
    assert "label_smoothing=0.1" in repr(ours) and "ignore_index=2" in repr(ours)
    with pytest.raises(ValueError, match="'label_smoothing' must be a number in"):
        tle.ops.CrossEntropyLoss(label_smoothing=1.5)


X, T = torch.randn(4, 10), torch.tensor([1, 2, 3, 4])


@pytest.mark.parametrize("bad, match", [
    (lambda: tle.ops.cross_entropy(X, T.float()), "'target' holds class probabilities"),
    (lambda: tle.ops.cross_entropy(X, T.short()), "'target' has dtype int16"),
    (lambda: tle.ops.cross_entropy(X, T[:3]), r"'target' has shape \(3,\); expected \(4,\)"),
    (lambda: tle.ops.cross_entropy(X, T, weight=torch.ones(9)), r"'weight' has shape \(9,\)"),
    (lambda: tle.ops.cross_entropy(X, T, reduction="avg"), "'reduction' is 'avg'"),
    (lambda: tle.ops.cross_entropy(X, T, label_smoothing=-0.1), "'label_smoothing' must be a number in"),
    (lambda: tle.ops.cross_entropy(X, T, softcap=0.0), "'softcap' must be None or a positive number"),
    (lambda: tle.ops.cross_entropy(X, T, ignore_index=1.0), "'ignore_index' must be an int"),
    (lambda: tle.ops.cross_entropy(X, torch.tensor([1, 2, 10, 4])), "'target' holds 10, outside the 10 classes"),
    (lambda: tle.ops.cross_entropy(X[:, :0], T), "'input' has no classes"),
    (lambda: tle.ops.cross_entropy(torch.ones(4, 10, dtype=torch.int32), T), "'input' has dtype int32"),
    (lambda: tle.ops.cross_entropy(X.double(), T, backend="triton"), "'input' has dtype float64, which backend"),
    (lambda: tle.ops.cross_entropy(X, T.to("meta")), "'target' is on meta"),
])
def test_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()
