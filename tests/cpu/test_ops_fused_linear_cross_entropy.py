"""tle.ops.fused_linear_cross_entropy on CPU against cross entropy of the whole logits in fp64: the chunked
loop (chunks of every size, a short last one), its gradients made in the forward ("mean", "sum") or in the
backward ("none"), bias, the cross-entropy options; the product kernel adding into its output; the autograd
contract (a second backward through the graph); bad inputs."""
import pytest
import torch

import tle
import tle.ops
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter
from tle.kernels import fused_linear_cross_entropy as fl
from tle.kernels import linear_gemm


def problem(n=37, h=48, v=160, dtype=torch.float16, bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, h, generator=g) * 0.5).to(dtype)
    w = (torch.randn(v, h, generator=g) * 0.3).to(dtype)
    t = torch.randint(0, v, (n,), generator=g)
    t[::6] = -100
    b = (torch.randn(v, generator=g) * 0.1).to(dtype) if bias else None
    return x, w, t, b


def check(backend, dtype=torch.float16, bias=False, **opts):
    x, w, t, b = problem(dtype=dtype, bias=bias)
    t = torch.where(t == -100, opts.get("ignore_index", -100), t)
    leaves64 = [a.double().requires_grad_() for a in (x, w) + ((b,) if bias else ())]
    ref = fl.reference(leaves64[0], leaves64[1], t, leaves64[2] if bias else None, **opts)
    leaves = [a.clone().requires_grad_() for a in (x, w) + ((b,) if bias else ())]
    out = tle.ops.fused_linear_cross_entropy(leaves[0], leaves[1], t, leaves[2] if bias else None,
                                             backend=backend, **opts)
    assert out.shape == ref.shape and out.dtype == dtype
    dy = torch.randn(ref.shape, dtype=torch.float64) if ref.dim() else torch.tensor(1.3, dtype=torch.float64)
    ref.backward(dy)
    out.backward(dy.to(dtype))
    what = f"{backend} {opts} bias={bias}"
    # the logits are rounded to the dtype before the loss (the chunk buffer), dlogits before the products
    tol = dict(atol=4e-3, rtol=4e-3) if dtype == torch.float16 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(out.double(), ref.detach(), **tol, msg=lambda m: f"{what} loss: {m}")
    for name, a, r in zip(("dx", "dW", "db"), leaves, leaves64):
        scale = r.grad.abs().max().item() or 1.0
        torch.testing.assert_close(a.grad.double() / scale, r.grad / scale, **tol, msg=lambda m: f"{what} {name}: {m}")


CASES = [dict(), dict(reduction="sum", chunk_rows=16), dict(chunk_rows=5), dict(reduction="none", chunk_rows=16),
         dict(chunk_rows=64), dict(label_smoothing=0.1, lse_square_scale=1e-3, softcap=3.0, chunk_rows=8),
         dict(ignore_index=7, chunk_rows=12)]


@pytest.mark.parametrize("opts", CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_matches_whole_logits(backend, opts):
    check(backend, **opts)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_bias_and_bf16(backend, reduction):
    check(backend, dtype=torch.bfloat16, bias=True, reduction=reduction, chunk_rows=16)


@needs_tilelang
def test_tilelang_through_interpreter():
    with tilelang_through_interpreter():
        for opts in (dict(chunk_rows=16), dict(reduction="none", chunk_rows=16)):
            check("tilelang", bias=True, **opts)


def test_default_chunk_rows_follow_the_input_size():
    assert fl.default_chunk_rows(16384, 4096, 128256) == 512
    assert fl.default_chunk_rows(8192, 4096, 32000) == 1024
    assert fl.default_chunk_rows(8192, 4096, 128256) == 512       # Liger's rule says 256: at least 512
    assert fl.default_chunk_rows(3, 8, 1000) == 512


def test_no_gradient_no_gradient_buffers():
    x, w, t, _ = problem()
    with torch.no_grad():
        out = tle.ops.fused_linear_cross_entropy(x, w, t, backend="triton")
    ref = fl.reference(x.double(), w.double(), t)
    torch.testing.assert_close(out.double(), ref, atol=4e-3, rtol=4e-3)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_second_backward_through_the_graph(backend, reduction):
    """The second backward's gradients are those of its own upstream gradient, added to the first's."""
    x, w, t, _ = problem()
    x.requires_grad_()
    out = tle.ops.fused_linear_cross_entropy(x, w, t, reduction=reduction, chunk_rows=16, backend=backend)
    first = torch.full(out.shape, 0.5, dtype=out.dtype)
    out.backward(first, retain_graph=True)
    once = x.grad.clone()
    out.backward(first * 3)
    torch.testing.assert_close(x.grad.float(), 4 * once.float(), atol=2e-3, rtol=2e-3)


def test_the_last_backward_scales_the_forwards_gradients_where_they_lie(monkeypatch):
    """One dW in a step: a backward that releases the graph scales the saved gradients in place; a retained
    graph gets new tensors (the second backward above needs the saved ones unscaled)."""
    calls = []
    scale = fl._scale_in_place
    monkeypatch.setattr(fl, "_scale_in_place", lambda *a: calls.append(1) or scale(*a))
    x, w, t, _ = problem()
    w.requires_grad_()
    out = tle.ops.fused_linear_cross_entropy(x, w, t, chunk_rows=16, backend="triton")
    out.backward(torch.tensor(0.5, dtype=out.dtype), retain_graph=True)
    assert calls == []
    first = w.grad.clone()
    out.backward(torch.tensor(0.5, dtype=out.dtype))
    assert calls == [1]
    torch.testing.assert_close(w.grad.float(), 2 * first.float(), atol=2e-3, rtol=2e-3)
    # called as torch.ops.tle.*, the op's gradient outputs are the caller's: they are never scaled in place
    x, w, t, _ = problem()
    w.requires_grad_()
    outs = torch.ops.tle.fused_linear_cross_entropy(x, w, t, None, -100, 0.0, 0.0, 0.0, "mean", 16, True, "triton")
    dw_out = outs[3].clone()
    outs[0].backward(torch.tensor(0.5, dtype=outs[0].dtype))
    assert calls == [1]
    torch.testing.assert_close(outs[3], dw_out, atol=0, rtol=0)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_the_input_is_kept_only_where_the_backward_reads_it(reduction):
    """"mean" and "sum" make the gradients in the forward: the step does not keep the input alive for the
    backward ("none" recomputes from it)."""
    x, w, t, _ = problem()
    w.requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda s: saved.append(s.data_ptr()) or s, lambda s: s):
        tle.ops.fused_linear_cross_entropy(x, w, t, reduction=reduction, chunk_rows=16, backend="torch")
    assert (x.data_ptr() in saved) == (reduction == "none")


@pytest.mark.parametrize("backend", ["triton"])
def test_product_kernel_adds_into_its_output(backend):
    torch.manual_seed(0)
    a, b = torch.randn(40, 24).half(), torch.randn(40, 32).half()        # a stored [K, M]
    c0 = torch.randn(24, 32).half()
    c = c0.clone()
    linear_gemm.launch(a, b, c, a_t=True, accumulate=True, backend=backend)
    torch.testing.assert_close(c.float(), c0.float() + a.float().T @ b.float(), atol=3e-2, rtol=2e-3)
    with pytest.raises(ValueError, match="accumulate takes no bias"):
        linear_gemm.launch(a, b, c, a_t=True, accumulate=True, bias=torch.zeros(32).half(), backend=backend)


def test_module_takes_the_heads_weight_first():
    x, w, t, _ = problem()
    loss = tle.ops.FusedLinearCrossEntropyLoss(label_smoothing=0.1, chunk_rows=8, backend="triton")
    torch.testing.assert_close(loss(w, x, t).double(), fl.reference(x.double(), w.double(), t, label_smoothing=0.1),
                               atol=4e-3, rtol=4e-3)
    with pytest.raises(ValueError, match="'reduction' is 'avg'"):
        tle.ops.FusedLinearCrossEntropyLoss(reduction="avg")


X, W, T = torch.randn(4, 16).half(), torch.randn(24, 16).half(), torch.tensor([1, 2, 3, 4])
flce = tle.ops.fused_linear_cross_entropy


@pytest.mark.parametrize("bad, match", [
    (lambda: flce(X, W.float(), T), "'weight' has dtype float32; expected input's"),
    (lambda: flce(X, W[:, :8], T), r"'weight' has shape \(24, 8\); expected \[V, 16\]"),
    (lambda: flce(X, W, T[:3]), r"'target' has shape \(3,\)"),
    (lambda: flce(X, W, T.float()), "'target' holds class probabilities"),
    (lambda: flce(X, W, T, torch.zeros(23).half()), r"'bias' has shape \(23,\)"),
    (lambda: flce(X, W, T, chunk_rows=0), "'chunk_rows' must be a positive int"),
    (lambda: flce(X, W, torch.tensor([1, 2, 3, 24])), "'target' holds 24, outside the 24 classes"),
    (lambda: flce(X.float(), W.float(), T, backend="triton"), "backend 'triton' takes fp16 and bf16"),
    (lambda: flce(torch.randn(4, 12).half(), torch.randn(24, 12).half(), T, backend="triton"),
     "must be multiples of 8"),
    (lambda: flce(X, W[:0], T), "'weight' has no rows"),
    (lambda: flce(X, W, T, reduction="avg"), "'reduction' is 'avg'"),
])
def test_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()
