"""tle.ops.jsd and tle.ops.JSD on CPU against the definition written here in fp64 on probabilities (xlogy):
beta in (0, 1), beta 0 (KL(target || input)) and 1 (KL(input || target)), shift_labels with ignore_index, every
row ignored, log-probabilities of -inf, a target of another dtype, strided rows; forward and backward on the
torch backend and the Triton kernels in Triton's interpreter, a subset through the interpreter of TileLang
programs; repeated backward, torch.compile, bad inputs."""
import pytest
import torch

import tle
import tle.ops
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter


def definition(x, y, labels=None, beta=0.5, ignore_index=-100):
    """The loss from probabilities Q = exp(x) (student), P = exp(y) (teacher), M = beta P + (1 - beta) Q, in
    fp64: the mean over counted rows of beta KL(P || M) + (1 - beta) KL(Q || M), or KL(P || Q) at beta 0 and
    KL(Q || P) at beta 1 (xlogy: 0 log 0 = 0); 0 when no row counts."""
    q, p = torch.exp(x), torch.exp(y)

    def kl(a, b):                                       # sum_v a log(a / b), per row
        return (torch.special.xlogy(a, a) - torch.special.xlogy(a, b)).sum(-1)

    if beta == 0:
        rows = kl(p, q)
    elif beta == 1:
        rows = kl(q, p)
    else:
        m = beta * p + (1 - beta) * q
        rows = beta * kl(p, m) + (1 - beta) * kl(q, m)
    keep = torch.ones(x.shape[0], dtype=torch.bool) if labels is None else labels != ignore_index
    n = int(keep.sum())
    return rows[keep].sum() / n if n else rows.sum() * 0


def problem(shape=(6, 700), seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.log_softmax(torch.randn(*shape, generator=g, dtype=torch.float64) * scale, dim=-1)
    y = torch.log_softmax(torch.randn(*shape, generator=g, dtype=torch.float64) * scale, dim=-1)
    return x, y


def labels_for(n, ignored, ignore_index=-100):
    t = torch.arange(n) % 5
    t[list(ignored)] = ignore_index
    return t


TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=4e-3),
       torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def check(backend, beta, shape=(6, 700), labels=None, ignore_index=-100, dtype=torch.float32, x=None, y=None,
          target_dtype=None):
    """Loss and input gradient of tle.ops.jsd against `definition` (autograd of it, fp64, the same rounded
    inputs), for an upstream gradient of 0.75."""
    if x is None:
        x, y = problem(shape)
    xin = x.to(dtype).requires_grad_()
    yin = y.to(target_dtype or dtype)
    x64 = xin.detach().double().requires_grad_()
    ref = definition(x64, yin.double(), labels, beta, ignore_index)
    out = tle.ops.jsd(xin, yin, labels, beta=beta, ignore_index=ignore_index, backend=backend)
    (ref * 0.75).backward()
    (out * 0.75).backward()
    what = f"{backend} beta={beta} {tuple(x.shape)} {dtype} labels={labels is not None}"
    assert out.shape == () and out.dtype == dtype, what
    torch.testing.assert_close(out.double(), ref.detach(), **TOL[dtype], msg=lambda m: f"{what} loss: {m}")
    scale = max(x64.grad.abs().max().item(), 1e-30)
    torch.testing.assert_close(xin.grad.double(), x64.grad, atol=TOL[dtype]["atol"] * scale,
                               rtol=TOL[dtype]["rtol"], msg=lambda m: f"{what} grad: {m}")
    return out, xin.grad


BETAS = [0.5, 0.1, 0.9, 0.0, 1.0]


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_matches_the_definition(backend, beta):
    check(backend, beta)
    check(backend, beta, labels=labels_for(6, (1, 4)))
    check(backend, beta, shape=(3, 5000), labels=labels_for(3, (2,), ignore_index=7), ignore_index=7)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_half_precision_and_a_target_of_another_dtype(backend):
    out, _ = check(backend, 0.3, dtype=torch.float16, labels=labels_for(6, (0,)))
    out, _ = check(backend, 0.5, dtype=torch.float16, target_dtype=torch.float32)
    assert out.dtype == torch.float16                           # input's dtype, as Liger's


def test_bf16_torch_backend():
    check("torch", 0.5, dtype=torch.bfloat16, labels=labels_for(6, (3,)))


@needs_tilelang
def test_tilelang_through_interpreter():
    with tilelang_through_interpreter():
        for beta, labels in ((0.5, None), (0.0, labels_for(6, (1,))), (1.0, None), (0.25, labels_for(6, (0, 5)))):
            check("tilelang", beta, labels=labels)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_every_row_ignored_is_zero_with_a_zero_gradient(backend):
    """Liger's kernel leaves ignored rows at 0 and divides nothing when no row counts: loss 0, gradient 0. So
    does tle (not torch's 0 / 0 = NaN of a mean over nothing)."""
    x, y = problem((4, 50))
    for beta in (0.5, 0.0, 1.0):
        xin = x.float().requires_grad_()
        out = tle.ops.jsd(xin, y.float(), torch.full((4,), -100), beta=beta, backend=backend)
        out.backward()
        assert out.item() == 0.0 and torch.equal(xin.grad, torch.zeros_like(xin)), (beta, out, xin.grad)
    empty = torch.zeros(0, 9, requires_grad=True)
    out = tle.ops.jsd(empty, torch.zeros(0, 9), backend=backend)
    out.backward()
    assert out.item() == 0.0 and empty.grad.shape == (0, 9)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_log_probabilities_of_minus_inf(backend):
    """A padded vocabulary (-inf in both) adds nothing and has gradient 0: the same loss and gradient as
    without those columns; zeros in the teacher alone follow xlogy's 0 log 0 = 0."""
    x, y = problem((5, 300))
    xm, ym = x.clone(), y.clone()
    xm[:, 250:], ym[:, 250:] = float("-inf"), float("-inf")
    for beta in (0.5, 0.0, 1.0):
        xin = xm.float().requires_grad_()
        out = tle.ops.jsd(xin, ym.float(), beta=beta, backend=backend)
        out.backward()
        x64 = x[:, :250].clone().requires_grad_()
        ref = definition(x64, y[:, :250], beta=beta)
        ref.backward()
        torch.testing.assert_close(out.double(), ref.detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(xin.grad[:, :250].double(), x64.grad, atol=1e-6, rtol=1e-5)
        assert torch.equal(xin.grad[:, 250:], torch.zeros(5, 50)), beta
    yz = y.clone()
    yz[:, :40] = float("-inf")
    check(backend, 0.4, x=x, y=yz)
    check(backend, 0.0, x=x, y=yz)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_peaked_distributions_underflow_safely(backend):
    """Most log-probabilities far below where exp underflows in fp32 (-104): log M stays finite (the larger of
    x, y taken out), the loss and gradient match the definition on the same fp32 inputs."""
    x, y = problem((4, 2000), scale=60.0)
    assert (x < -104).float().mean() > 0.9
    for beta in (0.5, 0.01, 0.99, 0.0, 1.0):
        _, grad = check(backend, beta, x=x, y=y)
        assert grad.isfinite().all()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_strided_rows_and_repeated_backward(backend):
    """Rows of a wider tensor read in place; backward twice through one graph gives the same gradient (the
    forward's is scaled into a new tensor each time, never in place)."""
    x, y = problem((6, 900))
    xin = x.float()[:, :700].detach().requires_grad_()
    out = tle.ops.jsd(xin, y.float()[:, 100:800], labels_for(6, (2,)), beta=0.3, backend=backend)
    g1, = torch.autograd.grad(out, xin, torch.tensor(2.0), retain_graph=True)
    g2, = torch.autograd.grad(out, xin, torch.tensor(2.0))
    assert torch.equal(g1, g2)
    x64 = x[:, :700].clone().requires_grad_()
    ref = definition(x64, y[:, 100:800], labels_for(6, (2,)), beta=0.3)
    ref.backward(torch.tensor(2.0, dtype=torch.float64))
    torch.testing.assert_close(out.double(), ref.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g1.double(), x64.grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_no_gradient_made_without_grad(backend):
    x, y = problem((4, 64))
    with torch.no_grad():
        a = tle.ops.jsd(x.float().requires_grad_(), y.float(), beta=0.2, backend=backend)
    b = tle.ops.jsd(x.float(), y.float(), beta=0.2, backend=backend)
    assert not a.requires_grad and not b.requires_grad
    torch.testing.assert_close(a, b)


def test_torch_compile_fullgraph():
    x, y = problem((4, 64))
    labels = labels_for(4, (1,))

    def f(x, y, labels):
        return tle.ops.jsd(x, y, labels, beta=0.3, backend="torch") * 2

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    xe, xc = (x.float().requires_grad_() for _ in range(2))
    eager, comp = f(xe, y.float(), labels), compiled(xc, y.float(), labels)
    eager.backward()
    comp.backward()
    torch.testing.assert_close(comp, eager)
    torch.testing.assert_close(xc.grad, xe.grad)


def test_module():
    x, y = problem((4, 20))
    labels = labels_for(4, (0,))
    ours = tle.ops.JSD(beta=0.2, ignore_index=-100, backend="triton")
    torch.testing.assert_close(ours(x.float(), y.float(), labels).double(), definition(x, y, labels, 0.2),
                               atol=1e-6, rtol=1e-5)
    assert "beta=0.2" in repr(ours)
    with pytest.raises(ValueError, match=r"'beta' must be a number in \[0, 1\]; got 1.5"):
        tle.ops.JSD(beta=1.5)


X, Y = torch.randn(4, 10).log_softmax(-1), torch.randn(4, 10).log_softmax(-1)
L = torch.tensor([0, 1, -100, 3])


@pytest.mark.parametrize("bad, match", [
    (lambda: tle.ops.jsd(X, Y[:3]), r"'target' has shape \(3, 10\); expected the shape of 'input'"),
    (lambda: tle.ops.jsd(X[None], Y[None]), r"'input' has rank 3"),
    (lambda: tle.ops.jsd(X, Y.long()), "'target' has dtype int64"),
    (lambda: tle.ops.jsd(X.long(), Y), "'input' has dtype int64"),
    (lambda: tle.ops.jsd(X, Y, L[:3]), r"'shift_labels' has shape \(3,\); expected \(4,\)"),
    (lambda: tle.ops.jsd(X, Y, L.float()), "'shift_labels' has dtype float32"),
    (lambda: tle.ops.jsd(X, Y, L.to("meta")), "'shift_labels' is on meta"),
    (lambda: tle.ops.jsd(X, Y, beta=-0.1), r"'beta' must be a number in \[0, 1\]; got -0.1"),
    (lambda: tle.ops.jsd(X, Y, beta=float("nan")), r"'beta' must be a number in \[0, 1\]"),
    (lambda: tle.ops.jsd(X, Y, beta=True), r"'beta' must be a number"),
    (lambda: tle.ops.jsd(X, Y, ignore_index=1.5), "'ignore_index' must be an int"),
    (lambda: tle.ops.jsd(X[:, :0], Y[:, :0]), "'input' has no columns"),
    (lambda: tle.ops.jsd(X, Y.clone().requires_grad_()), "'target' requires grad"),
    (lambda: tle.ops.jsd(X.double(), Y.double(), backend="triton"), "'input' has dtype float64, which backend"),
    (lambda: tle.ops.jsd(X, Y.to("meta")), "'target' is on meta"),
])
def test_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()
