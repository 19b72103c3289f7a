"""tle.ops.kl_div and tle.ops.KLDivLoss on CPU against torch's F.kl_div in fp64: every reduction, log_target,
zeros in the target, ranks, forward and backward on the torch backend and the Triton kernels in Triton's
interpreter, a subset through the interpreter of TileLang programs; dtype promotion; bad inputs."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import tle
import tle.ops
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter


def problem(shape=(6, 700), seed=0, log_target=False, zeros=0.2):
    g = torch.Generator().manual_seed(seed)
    x = torch.log_softmax(torch.randn(*shape, generator=g, dtype=torch.float64), dim=-1)
    t = torch.softmax(torch.randn(*shape, generator=g, dtype=torch.float64) * 2, dim=-1)
    t = torch.where(torch.rand(*shape, generator=g) < zeros, 0.0, t)
    return x, (torch.log(t + 1e-3) if log_target else t)


def run(backend, reduction, log_target=False, shape=(6, 700), dtype=torch.float32):
    x, t = problem(shape, log_target=log_target)
    x64 = x.clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = F.kl_div(x64, t, reduction=reduction, log_target=log_target)
        xin = x.to(dtype).requires_grad_()
        out = tle.ops.kl_div(xin, t.to(dtype), reduction=reduction, log_target=log_target, backend=backend)
    dy = torch.randn(ref.shape, dtype=torch.float64)
    ref.backward(dy)
    out.backward(dy.to(dtype))
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    what = f"{backend} {reduction} log_target={log_target} {shape} {dtype}"
    assert out.shape == ref.shape and out.dtype == dtype, what
    torch.testing.assert_close(out.double(), ref.detach(), **tol, msg=lambda m: f"{what} loss: {m}")
    torch.testing.assert_close(xin.grad.double(), x64.grad, **tol, msg=lambda m: f"{what} grad: {m}")


@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("reduction", ["none", "batchmean", "sum", "mean"])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_matches_torch(backend, reduction, log_target):
    run(backend, reduction, log_target)
    run(backend, reduction, log_target, shape=(2, 3, 5000))


def test_triton_bf16():
    run("triton", "batchmean", dtype=torch.bfloat16)


@needs_tilelang
def test_tilelang_through_interpreter():
    with tilelang_through_interpreter():
        for reduction, log_target in (("none", False), ("batchmean", True), ("sum", False)):
            run("tilelang", reduction, log_target)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_promotion_empty_and_mean_warning(backend):
    x, t = problem((3, 9))
    out = tle.ops.kl_div(x.half(), t.float(), reduction="sum", backend=backend)
    assert out.dtype == torch.float32                        # torch's promotion of input and target
    with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size"):
        tle.ops.kl_div(x.float(), t.float(), backend=backend)
    e = torch.zeros(0, 5)
    assert tle.ops.kl_div(e, e, reduction="sum", backend=backend) == 0
    assert torch.isnan(tle.ops.kl_div(e, e, reduction="batchmean", backend=backend))


def test_module():
    x, t = problem((4, 20))
    ours = tle.ops.KLDivLoss(reduction="batchmean", log_target=False, backend="triton")
    torch.testing.assert_close(ours(x.float(), t.float()), torch.nn.KLDivLoss(reduction="batchmean")(x.float(), t.float()))
    assert "batchmean" in repr(ours)
    with pytest.raises(ValueError, match="'reduction' is 'avg'"):
        tle.ops.KLDivLoss(reduction="avg")


X, T = torch.randn(4, 10), torch.rand(4, 10)


@pytest.mark.parametrize("bad, match", [
    (lambda: tle.ops.kl_div(X, T[:3]), r"'target' has shape \(3, 10\); expected the shape of 'input'"),
    (lambda: tle.ops.kl_div(X, T.long()), "'target' has dtype int64"),
    (lambda: tle.ops.kl_div(X, T, reduction="avg"), "'reduction' is 'avg'"),
    (lambda: tle.ops.kl_div(X, T.clone().requires_grad_()), "'target' requires grad"),
    (lambda: tle.ops.kl_div(X.double(), T.double(), backend="triton"), "'input' has dtype float64, which backend"),
    (lambda: tle.ops.kl_div(X, T.to("meta")), "'target' is on meta"),
])
def test_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()
