"""tle.ops.linear_act and linear_swiglu on the GPU at sizes that take the large tiles (128x256, persistent on
Triton) with ragged edges in M, N and K: forward and backward on both kernel backends against fp32 torch,
and the fused forward against what a torch user writes (F.linear, then the activation)."""
import pytest
import torch
import torch.nn.functional as F

import tle.ops
from tle.kernels.linear_activation import linear_act_reference, linear_swiglu_reference

M, K, N = 1500, 1032, 2056          # none a multiple of the tiles (128, 64, 256)
ACTIVATIONS = {"triton": ("silu", "gelu", "gelu_tanh", "relu", None), "tilelang": ("silu", "gelu_tanh", None)}
CASES = [(b, a) for b, acts in ACTIVATIONS.items() for a in acts]


def _inputs(dtype, n_rows):
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda").to(dtype).requires_grad_()
    w = (torch.randn(n_rows, K, device="cuda") * K ** -0.5).to(dtype).requires_grad_()
    return x, w


def _error(got, want):
    """Largest absolute error over the reference's largest magnitude."""
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("backend,activation", CASES)
def test_linear_act_forward_and_backward(backend, activation, dtype):
    x, w = _inputs(dtype, N)
    bias = torch.randn(N, device="cuda").to(dtype).requires_grad_()
    y = tle.ops.linear_act(x, w, bias, activation, backend=backend)
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, w, bias), dy)
    leaves = [t.detach().float().requires_grad_() for t in (x, w, bias)]
    ref = linear_act_reference(*leaves, activation)
    if activation == "relu":
        # relu' steps at 0, and a pre-activation within rounding of 0 may fall on the other side of the step in
        # fp32: the reference's gradients take the step where the output says the kernel took it (y > 0)
        ref_grads = torch.autograd.grad(F.linear(*leaves) * (y.detach() > 0), leaves, dy.float())
    else:
        ref_grads = torch.autograd.grad(ref, leaves, dy.float())
    bound = 1e-2 if dtype == torch.bfloat16 else 2e-3
    assert _error(y, ref) < bound
    for name, g, r in zip(("dx", "dw", "db"), grads, ref_grads):
        assert _error(g, r) < bound, name
    # the fused epilogue rounds once; torch rounds the product, then the activation: both near fp32
    with torch.no_grad():
        eager = linear_act_reference(x, w, bias, activation)
        assert _error(y, ref) <= _error(eager, ref) * 1.5 + 1e-3


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_linear_swiglu_forward_and_backward(backend):
    x, w = _inputs(torch.bfloat16, 2 * N)
    y = tle.ops.linear_swiglu(x, w, backend=backend)
    assert y.shape == (M, N)
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, w), dy)
    leaves = [t.detach().float().requires_grad_() for t in (x, w)]
    ref = linear_swiglu_reference(*leaves)
    ref_grads = torch.autograd.grad(ref, leaves, dy.float())
    assert _error(y, ref) < 1e-2
    for name, g, r in zip(("dx", "dw"), grads, ref_grads):
        assert _error(g, r) < 1e-2, name


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_linear_swiglu_backward_overwrites_the_pre_activations_only_at_their_last_use(backend, monkeypatch):
    """A retained graph's backward leaves the saved pre-activations alone (a second backward reads them); the
    backward that releases the graph writes their gradient where they lie. Both give the same gradients."""
    from tle.kernels import linear_activation as la
    calls = []
    run = la._kernel_swiglu_backward
    monkeypatch.setattr(la, "_kernel_swiglu_backward", lambda *a, **k: calls.append(k) or run(*a, **k))
    x, w = _inputs(torch.bfloat16, 2 * N)
    y = tle.ops.linear_swiglu(x, w, backend=backend)
    dy = torch.randn_like(y)
    kept = torch.autograd.grad(y, (x, w), dy, retain_graph=True)
    assert calls == []                      # the backward op's own launch, new tensors
    released = torch.autograd.grad(y, (x, w), dy)
    assert calls == [{"backend": backend, "overwrite_pre": True}]
    for a, b in zip(kept, released):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_forward_without_grad(backend):
    x, w = _inputs(torch.bfloat16, N)
    with torch.no_grad():
        y = tle.ops.linear_act(x, w, None, "silu", backend=backend)
        assert _error(y, F.silu(F.linear(x.float(), w.float()))) < 1e-2


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_inputs_not_starting_on_16_bytes_are_copied(backend):
    """Tensor descriptors read from 16-byte boundaries: a view that starts 6 bytes in is copied first."""
    torch.manual_seed(0)
    buf = torch.randn(M * K + 3, device="cuda").to(torch.bfloat16)
    x = buf[3:].view(M, K).requires_grad_()
    w = (torch.randn(N, K, device="cuda") * K ** -0.5).to(torch.bfloat16).requires_grad_()
    y = tle.ops.linear_act(x, w, None, "silu", backend=backend)
    dx, dw = torch.autograd.grad(y, (x, w), torch.ones_like(y))
    leaves = [t.detach().float().requires_grad_() for t in (x, w)]
    ref = linear_act_reference(*leaves, activation="silu")
    rdx, rdw = torch.autograd.grad(ref, leaves, torch.ones_like(ref))
    assert _error(y, ref) < 1e-2 and _error(dx, rdx) < 1e-2 and _error(dw, rdw) < 1e-2
