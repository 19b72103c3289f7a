"""tle.ops.gelu / silu, swiglu / geglu and scale_bias_add beyond what test_ops.py runs for every operator: their
bad inputs, the packed form of the gated activations against the split one, the tanh GELU against torch's,
the launches split where offsets would pass an int32, scalar scale and bias."""
import pytest
import torch

import tle
import tle.ops
from tle.kernels import activations, gated_activations, scale_bias_add


def _randn(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape) * scale).to(dtype)


@pytest.mark.parametrize("bad, match", [
    (lambda: tle.ops.gelu(torch.arange(6), backend="torch"), "'input' has dtype int64"),
    (lambda: tle.ops.silu(torch.arange(6).int(), backend="torch"), "'input' has dtype int32"),
    (lambda: tle.ops.gelu(torch.randn(4), approximate="fast", backend="torch"), "'approximate' is 'fast'"),
    (lambda: tle.ops.GELU(approximate="Tanh"), "'approximate' is 'Tanh'"),
    (lambda: tle.ops.silu(torch.randn(4).double(), backend="triton"), "'input' has dtype float64, which backend"),
    (lambda: tle.ops.gelu([1.0, 2.0], backend="torch"), "'input' must be a torch.Tensor"),
    (lambda: tle.ops.silu(torch.randn(4), "yes", backend="torch"), "'inplace' is 'yes'; expected a bool"),
    (lambda: tle.ops.swiglu(torch.randn(3, 7), backend="torch"), r"'x' has shape \(3, 7\).*must be even"),
    (lambda: tle.ops.geglu(torch.randn(2, 3, 5), backend="torch"), r"'x' has shape \(2, 3, 5\).*must be even"),
    (lambda: tle.ops.swiglu(torch.randn(3, 8), torch.randn(3, 4), backend="torch"), r"'value' has shape \(3, 4\)"),
    (lambda: tle.ops.geglu(torch.randn(3, 8), torch.randn(8, 3), backend="torch"), r"'value' has shape \(8, 3\)"),
    (lambda: tle.ops.swiglu(torch.randn(3, 8), torch.randn(3, 8).half(), backend="torch"), "'value' has dtype"),
    (lambda: tle.ops.swiglu(torch.arange(8).reshape(2, 4), backend="torch"), "'x' has dtype int64"),
    (lambda: tle.ops.swiglu(torch.randn(2, 4), torch.arange(8).reshape(2, 4), backend="torch"),
     "'value' has dtype int64"),
    (lambda: tle.ops.swiglu(torch.tensor(1.0), backend="torch"), "'x' has rank 0"),
    (lambda: tle.ops.geglu(torch.randn(3, 8), approximate="erf", backend="torch"), "'approximate' is 'erf'"),
    (lambda: tle.ops.geglu(torch.randn(2, 4).double(), backend="triton"), "'gate' has dtype float64, which"),
    (lambda: tle.ops.scale_bias_add(torch.randn(3, 8), torch.randn(7), torch.randn(8), torch.randn(3, 8),
                                    backend="torch"), r"'scale' has shape \(7,\); expected \(8,\)"),
    (lambda: tle.ops.scale_bias_add(torch.randn(3, 8), torch.randn(8), torch.randn(3, 8), torch.randn(3, 8),
                                    backend="torch"), r"'bias' has shape \(3, 8\); expected \(8,\)"),
    (lambda: tle.ops.scale_bias_add(torch.randn(3, 8), torch.randn(1, 1), torch.randn(8), torch.randn(3, 8),
                                    backend="torch"), r"'scale' has shape \(1, 1\)"),
    (lambda: tle.ops.scale_bias_add(torch.randn(3, 8), torch.randn(8), torch.randn(8), torch.randn(8),
                                    backend="torch"), r"'residual' has shape \(8,\)"),
    (lambda: tle.ops.scale_bias_add(torch.randn(3, 8), torch.randn(8), torch.randn(8), torch.randn(3, 8).half(),
                                    backend="torch"), "'residual' has dtype"),
    (lambda: tle.ops.scale_bias_add(torch.arange(8).reshape(2, 4), torch.randn(4), torch.randn(4),
                                    torch.randn(2, 4), backend="torch"), "'x' has dtype int64"),
    (lambda: tle.ops.scale_bias_add(torch.randn(2, 4), torch.arange(4), torch.randn(4), torch.randn(2, 4),
                                    backend="torch"), "'scale' has dtype int64"),
    (lambda: tle.ops.scale_bias_add(torch.randn(2, 4), torch.randn(4), torch.randn(4).double(), torch.randn(2, 4),
                                    backend="triton"), "'bias' has dtype float64, which backend"),
])
def test_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("op, approximate", [("swiglu", None), ("geglu", "none"), ("geglu", "tanh")])
def test_packed_equals_split(op, approximate, backend):
    """The packed [..., 2D] form gives the split form's output, and its gradient is [dgate | dvalue]."""
    torch.manual_seed(0)
    x = _randn(2, 5, 2 * 37, scale=3.0).requires_grad_()
    gate, value = (t.detach().clone().requires_grad_() for t in x.chunk(2, dim=-1))
    fn = getattr(tle.ops, op)
    kw = {} if approximate is None else {"approximate": approximate}
    y_packed = fn(x, backend=backend, **kw)
    y_split = fn(gate, value, backend=backend, **kw)
    assert y_packed.shape == (2, 5, 37)
    torch.testing.assert_close(y_packed, y_split, atol=0, rtol=0)
    dy = torch.randn_like(y_split)
    (dx,) = torch.autograd.grad(y_packed, x, dy)
    dg, dv = torch.autograd.grad(y_split, (gate, value), dy)
    torch.testing.assert_close(dx, torch.cat([dg, dv], dim=-1), atol=0, rtol=0)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_gelu_tanh_matches_torch(backend, dtype):
    """The tanh form, written through a sigmoid, is torch's gelu(approximate="tanh"), forward and backward,
    over the whole range (tails included)."""
    x = torch.cat([torch.linspace(-12, 12, 2001), torch.randn(999) * 3]).to(dtype).requires_grad_()
    y = tle.ops.gelu(x, approximate="tanh", backend=backend)
    xr = x.detach().double().requires_grad_()
    y_ref = torch.nn.functional.gelu(xr, approximate="tanh")
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(y.double(), y_ref, **tol)
    dy = torch.randn(x.shape, dtype=torch.float64)
    (g,) = torch.autograd.grad(y, x, dy.to(dtype))
    (g_ref,) = torch.autograd.grad(y_ref, xr, dy.to(dtype).double())
    torch.testing.assert_close(g.double(), g_ref, **tol)
    # and not the erf form: the two differ by more than the tolerance
    assert (torch.nn.functional.gelu(xr.detach()) - y_ref.detach()).abs().max() > 1e-4


def test_modules():
    x = _randn(3, 17, scale=3.0)
    torch.testing.assert_close(tle.ops.GELU(backend="triton")(x), torch.nn.functional.gelu(x))
    torch.testing.assert_close(tle.ops.GELU("tanh", backend="triton")(x),
                               torch.nn.functional.gelu(x, approximate="tanh"))
    torch.testing.assert_close(tle.ops.SiLU(backend="triton")(x), torch.nn.functional.silu(x))
    assert "tanh" in repr(tle.ops.GELU("tanh"))


def test_scalar_scale_and_bias_are_expanded():
    """A 0-d scale and a one-element bias broadcast over [N]; their gradients keep their own shapes."""
    x, r = _randn(4, 9), _randn(4, 9)
    s, b = torch.tensor(1.5, requires_grad=True), torch.tensor([0.25], requires_grad=True)
    for backend in ("torch", "triton"):
        y = tle.ops.scale_bias_add(x, s, b, r, backend=backend)
        torch.testing.assert_close(y, x * 1.5 + 0.25 + r)
        ds, db = torch.autograd.grad(y, (s, b), torch.ones_like(y))
        assert ds.shape == () and db.shape == (1,)
        torch.testing.assert_close(ds, x.sum())
        torch.testing.assert_close(db, torch.tensor([36.0]))


def test_residual_gradient_is_the_upstream_gradient():
    x, r = _randn(3, 8), _randn(3, 8).requires_grad_()
    y = tle.ops.scale_bias_add(x, torch.randn(8), torch.randn(8), r, backend="triton")
    dy = torch.randn_like(y)
    (dr,) = torch.autograd.grad(y, r, dy)
    assert torch.equal(dr, dy)


def _split_into(monkeypatch, module, bounds):
    """Make `module`'s launches split at the given row bounds, as for a tensor of 2^31 elements or more."""
    def chunks(n_rows, row_elems, block_m=1):
        cuts = [0] + [c for c in bounds if c < n_rows] + [n_rows]
        return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
    monkeypatch.setattr(module, "int32_row_chunks", chunks)


def test_launches_split_past_int32_offsets(monkeypatch):
    torch.manual_seed(0)
    x = _randn(37, 2 * 21, scale=3.0).requires_grad_()
    xs, s, b, r = _randn(37, 21), _randn(21).requires_grad_(), _randn(21).requires_grad_(), _randn(37, 21)
    dy = torch.randn(37, 21)
    want_y = tle.ops.swiglu(x, backend="triton")
    (want_dx,) = torch.autograd.grad(want_y, x, dy)
    want_z = tle.ops.scale_bias_add(xs, s, b, r, backend="triton")
    want_ds, want_db = torch.autograd.grad(want_z, (s, b), dy)
    _split_into(monkeypatch, gated_activations, [8, 24])
    _split_into(monkeypatch, scale_bias_add, [8, 24])
    y = tle.ops.swiglu(x, backend="triton")
    (dx,) = torch.autograd.grad(y, x, dy)
    torch.testing.assert_close(y, want_y, atol=0, rtol=0)
    torch.testing.assert_close(dx, want_dx, atol=0, rtol=0)
    z = tle.ops.scale_bias_add(xs, s, b, r, backend="triton")
    ds, db = torch.autograd.grad(z, (s, b), dy)
    torch.testing.assert_close(z, want_z, atol=0, rtol=0)
    torch.testing.assert_close(ds, want_ds, atol=1e-5, rtol=1e-5)     # other partial sums: another order
    torch.testing.assert_close(db, want_db, atol=1e-5, rtol=1e-5)
    monkeypatch.setattr(activations, "CHUNK", 512)
    v = _randn(5, 300, scale=3.0)
    torch.testing.assert_close(tle.ops.silu(v, backend="triton"), torch.nn.functional.silu(v))


def test_non_contiguous_inputs_are_handled():
    x = _randn(6, 8, 2 * 16).transpose(0, 1)          # rows not evenly strided: copied
    g = _randn(16, 6).t()
    v = _randn(6, 16)
    for backend in ("torch", "triton"):
        torch.testing.assert_close(tle.ops.swiglu(x, backend=backend), gated_activations.swiglu_reference(x))
        torch.testing.assert_close(tle.ops.geglu(g, v, backend=backend), gated_activations.geglu_reference(g, v))
        torch.testing.assert_close(tle.ops.gelu(x, backend=backend), torch.nn.functional.gelu(x))


def test_scale_bias_add_backward_loops_over_row_blocks():
    """More row blocks than programs (4 on the CPU): each program adds up several blocks' column sums."""
    torch.manual_seed(0)
    x, r = _randn(300, 33), _randn(300, 33)
    s, b = _randn(33).requires_grad_(), _randn(33).requires_grad_()
    xg = x.clone().requires_grad_()
    y = tle.ops.scale_bias_add(xg, s, b, r, backend="triton")
    dy = torch.randn_like(y)
    dx, ds, db = torch.autograd.grad(y, (xg, s, b), dy)
    torch.testing.assert_close(y, x * s + b + r)
    torch.testing.assert_close(dx, dy * s)
    torch.testing.assert_close(ds, (dy * x).sum(0), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(db, dy.sum(0), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_silu_inplace_as_torch(backend):
    """F.silu(x, inplace=True): the result written into x, x returned; gradients through it as through torch's
    in-place silu (x a non-leaf); a leaf that requires grad refused as torch refuses it; nn.SiLU(inplace=True)."""
    torch.manual_seed(0)
    x0 = torch.randn(5, 7)
    x = x0.clone()
    y = tle.ops.silu(x, True, backend=backend)
    assert y is x
    torch.testing.assert_close(x, torch.nn.functional.silu(x0))
    a, b = torch.randn(5, 7, requires_grad=True), torch.randn(5, 7)
    ours = tle.ops.silu(a * 2, inplace=True, backend=backend)
    ref = torch.nn.functional.silu(a * 2, inplace=True)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(torch.autograd.grad(ours, a, b)[0], torch.autograd.grad(ref, a, b)[0])
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        tle.ops.silu(torch.randn(3, requires_grad=True), True, backend=backend)
    m, x = tle.ops.SiLU(inplace=True, backend=backend), x0.clone()
    assert m(x) is x and "inplace=True" in repr(m)
    torch.testing.assert_close(tle.ops.SiLU(backend=backend)(x0), torch.nn.SiLU()(x0))
