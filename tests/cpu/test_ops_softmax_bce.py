"""tle.ops.softmax and tle.ops.binary_cross_entropy_with_logits beyond the shared operator tests: bad inputs,
and what is particular to each (torch's arguments: any dim, dtype, dim None; masked rows, the fused reductions and their
partials, soft targets, broadcast weights, strided and expanded tensors, the result's dtype and shape)."""
import pytest
import torch
import torch.nn.functional as F

import tle
import tle.ops
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter
from tle.kernels import bce_with_logits as bce_module

BCE = tle.ops.binary_cross_entropy_with_logits


def kernel_backends():
    """"triton" (Triton's interpreter) and "tilelang" (the interpreter of TileLang programs), where it runs."""
    return ["triton", pytest.param("tilelang", marks=needs_tilelang)]


def on(backend, fn):
    if backend == "tilelang":
        with tilelang_through_interpreter():
            return fn()
    return fn()


# -- softmax ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, match", [
    (lambda: tle.ops.softmax(torch.randn(2, 4, 16), dim=3, backend="torch"),
     r"'dim' is 3; expected an int in \[-3, 2\]"),
    (lambda: tle.ops.softmax(torch.randn(2, 4, 16), dim=-4, backend="torch"), r"'dim' is -4"),
    (lambda: tle.ops.softmax(torch.randn(4, 16), dim=1.0, backend="torch"), r"'dim' is 1.0"),
    (lambda: tle.ops.softmax(torch.randn(4, 16), -1, dtype=torch.int32, backend="torch"), r"'dtype' is torch.int32"),
    (lambda: tle.ops.softmax(torch.arange(8).reshape(2, 4), -1, backend="torch"), "'input' has dtype int64"),
    (lambda: tle.ops.softmax("x", -1, backend="torch"), "'input' must be a torch.Tensor"),
    (lambda: tle.ops.softmax(torch.randn(2, 4).double(), -1, backend="triton"),
     "'input' has dtype float64, which backend"),
    (lambda: tle.ops.softmax(torch.randn(2, 4), -1, dtype=torch.float64, backend="triton"),
     "'input' has dtype float64, which backend"),
    (lambda: tle.ops.softmax(torch.randn(1, 65537), -1, backend="triton"),
     r"65537 elements along dim -1.*at most 65536"),
    (lambda: tle.ops.softmax(torch.randn(65537, 2), 0, backend="triton"), r"65537 elements along dim 0"),
    (lambda: tle.ops.softmax(torch.zeros(1, 1).expand(2 ** 16, 2 ** 15), -1, backend="triton"),
     r"2147483648 elements.*32-bit offsets"),
])
def test_softmax_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()


def test_softmax_long_rows_run_on_torch():
    x = torch.randn(2, 65537)
    torch.testing.assert_close(tle.ops.softmax(x, -1, backend="torch"), torch.softmax(x, -1))


@pytest.mark.parametrize("backend", kernel_backends())
def test_softmax_masked_rows(backend):
    """-inf entries (a causal mask) take no part; a row of only -inf is NaN, as in torch."""
    x = torch.randn(6, 40)
    x[:, 20:] = float("-inf")
    x[1, :] = float("-inf")
    y = on(backend, lambda: tle.ops.softmax(x, -1, backend=backend))
    torch.testing.assert_close(y, torch.softmax(x, -1), equal_nan=True)
    assert y[1].isnan().all() and (y[0, 20:] == 0).all()


@pytest.mark.parametrize("backend", kernel_backends())
def test_softmax_strided_and_expanded(backend):
    """A transposed input is read through a copy; an expanded upstream gradient (y.sum() of one column,
    strides 0) is read as it is."""
    x = torch.randn(7, 3, 12).transpose(0, 1).requires_grad_()
    dy = torch.randn(3, 7, 12)
    y = on(backend, lambda: tle.ops.softmax(x, dim=2, backend=backend))
    torch.testing.assert_close(y, torch.softmax(x.detach(), -1))
    g, = on(backend, lambda: torch.autograd.grad(y, x, dy))
    torch.testing.assert_close(g, _softmax_grad(x.detach(), dy), atol=1e-6, rtol=1e-5)
    x1 = torch.randn(5, 1, requires_grad=True)
    g1, = on(backend, lambda: torch.autograd.grad(tle.ops.softmax(x1, -1, backend=backend).sum(), x1))
    assert (g1 == 0).all()


def _softmax_grad(x, dy):
    x = x.double().requires_grad_()
    return torch.autograd.grad(torch.softmax(x, -1), x, dy.double())[0].float()


def test_softmax_module_and_dims():
    x = torch.randn(3, 5, 9)
    m = tle.ops.Softmax(-1, backend="torch")
    torch.testing.assert_close(m(x), torch.softmax(x, -1))
    torch.testing.assert_close(tle.ops.Softmax(2, backend="triton")(x), torch.softmax(x, -1))
    torch.testing.assert_close(tle.ops.Softmax(1, backend="triton")(x), torch.softmax(x, 1))
    assert "backend=torch" in repr(m)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):   # dim None: torch's choice
        torch.testing.assert_close(tle.ops.Softmax(backend="torch")(x), torch.nn.Softmax()(x))


def test_softmax_keeps_the_dtype():
    x = torch.randn(4, 33).half()
    for backend in ("torch", "triton"):
        y = tle.ops.softmax(x, -1, backend=backend)
        assert y.dtype == torch.float16 and y.shape == x.shape and y.is_contiguous()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_softmax_takes_torchs_arguments(backend):
    """tle.ops.softmax called as F.softmax: every dim of ranks 0 to 4, positive or negative, dtype= (the input
    cast first: the result in that dtype), dim None with torch's choice and its warning; gradients through any
    dim."""
    torch.manual_seed(0)
    for shape in [(), (7,), (4, 9), (3, 5, 6), (2, 3, 4, 5)]:
        x = torch.randn(shape)
        for dim in range(-max(x.dim(), 1), max(x.dim(), 1)):
            torch.testing.assert_close(tle.ops.softmax(x, dim, backend=backend), F.softmax(x, dim))
        with pytest.warns(UserWarning, match="Implicit dimension choice"):
            got = tle.ops.softmax(x, backend=backend)
        with pytest.warns(UserWarning, match="Implicit dimension choice"):
            torch.testing.assert_close(got, F.softmax(x))
    x = torch.randn(4, 6).half()
    y = tle.ops.softmax(x, 0, dtype=torch.float32, backend=backend)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, F.softmax(x, 0, dtype=torch.float32))
    xg = torch.randn(3, 8, 5, requires_grad=True)
    dy = torch.randn(3, 8, 5)
    got = torch.autograd.grad(tle.ops.softmax(xg, 1, backend=backend), xg, dy)[0]
    torch.testing.assert_close(got, torch.autograd.grad(F.softmax(xg, 1), xg, dy)[0], atol=1e-6, rtol=1e-5)


def test_softmax_wrapper_kernel_examples_run():
    """tle.bench and the tools take softmax_kernel's example: x first, then y."""
    launch = tle.kernels.softmax.softmax_kernel.example("cpu", "small")
    assert launch.args[0].shape == launch.outputs["y"].shape


# -- binary_cross_entropy_with_logits -----------------------------------------------------------------------
def x_t(*shape):
    return torch.randn(*shape) * 3, torch.rand(*shape)


@pytest.mark.parametrize("bad, match", [
    (lambda: BCE(torch.arange(8).reshape(2, 4), torch.rand(2, 4), backend="torch"), "'input' has dtype int64"),
    (lambda: BCE(torch.randn(2, 4), torch.randint(0, 2, (2, 4)), backend="torch"), "'target' has dtype int64"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(2, 3), backend="torch"),
     r"'target' has shape \(2, 3\); expected the shape of 'input' \(2, 4\)"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(8), backend="torch"), r"'target' has shape \(8,\)"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(2, 4), torch.rand(5), backend="torch"),
     r"'weight' has shape \(5,\), which does not broadcast"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(2, 4), torch.rand(3, 2, 4), backend="torch"),
     r"'weight' has shape \(3, 2, 4\), which does not broadcast"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(2, 4), torch.randint(0, 2, (4,)), backend="torch"),
     "'weight' has dtype int64"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(2, 4), pos_weight=torch.rand(3), backend="torch"),
     r"'pos_weight' has shape \(3,\), which does not broadcast"),
    (lambda: BCE(torch.randn(4), torch.rand(4), pos_weight=torch.rand(1, 4), backend="torch"),
     r"'pos_weight' has shape \(1, 4\), which does not broadcast to the shape of 'input' \(4,\)"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(2, 4), reduction="avg", backend="torch"),
     r"'reduction' is 'avg'; expected one of 'none', 'mean', 'sum'"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(2, 4), reduction=None, backend="torch"), "'reduction' is None"),
    (lambda: BCE(torch.randn(2, 4).double(), torch.rand(2, 4).double(), backend="triton"),
     "'input' has dtype float64, which backend"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(2, 4), pos_weight=torch.rand(4).double(), backend="triton"),
     "'pos_weight' has dtype float64, which backend"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(2, 4, device="meta"), backend="torch"), "'target' is on meta"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(2, 4, requires_grad=True), backend="torch"),
     "'target' requires grad.*differentiates 'input' only"),
    (lambda: BCE(torch.randn(2, 4), torch.rand(2, 4), torch.rand(4, requires_grad=True), backend="torch"),
     "'weight' requires grad"),
    (lambda: BCE("x", torch.rand(2, 4), backend="torch"), "'input' must be a torch.Tensor"),
    (lambda: BCE(torch.zeros(1, 1).expand(2 ** 16, 2 ** 15), torch.zeros(1, 1).expand(2 ** 16, 2 ** 15),
                 backend="triton"), r"2147483648 elements.*32-bit offsets"),
])
def test_bce_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_bce_takes_torchs_arguments(backend):
    """Called exactly as F.binary_cross_entropy_with_logits: weight third, the deprecated size_average and reduce
    fourth and fifth (converted, with torch's warning), reduction sixth, pos_weight seventh; the module likewise;
    gradients of the input in its own dtype under promotion."""
    torch.manual_seed(0)
    x, t = x_t(4, 9)
    w, pw = torch.rand(9) + 0.5, torch.rand(9) + 0.5
    for args in [(x, t, w), (x, t, w, None, None, "sum"), (x, t, None, None, None, "none", pw),
                 (x, t, w, None, None, "mean", pw)]:
        torch.testing.assert_close(BCE(*args, backend=backend), F.binary_cross_entropy_with_logits(*args))
    for legacy in [(False, None), (None, False), (True, True)]:
        with pytest.warns(UserWarning):
            got = BCE(x, t, w, *legacy, backend=backend)
        with pytest.warns(UserWarning):
            torch.testing.assert_close(got, F.binary_cross_entropy_with_logits(x, t, w, *legacy))
    with pytest.warns(UserWarning):
        m = tle.ops.BCEWithLogitsLoss(w, False, None, "mean", pw, backend=backend)   # size_average=False: sum
    assert m.reduction == "sum"
    torch.testing.assert_close(tle.ops.BCEWithLogitsLoss(w, None, None, "none", pw, backend=backend)(x, t),
                               torch.nn.BCEWithLogitsLoss(w, None, None, "none", pw)(x, t))
    xh = x.half().requires_grad_()
    loss = BCE(xh, t, backend=backend)
    assert loss.dtype == torch.float32
    (g,) = torch.autograd.grad(loss, xh)
    (r,) = torch.autograd.grad(F.binary_cross_entropy_with_logits(xh, t), xh)
    assert g.dtype == torch.float16
    torch.testing.assert_close(g, r)


def test_bce_module_checks_its_reduction():
    with pytest.raises(ValueError, match="reduction must be one of"):
        tle.ops.BCEWithLogitsLoss(reduction="avg")


@pytest.mark.parametrize("backend", ["torch"] + kernel_backends())
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_bce_target_grad_is_allowed_without_grad_mode(backend, reduction):
    """Under no_grad nothing is differentiated, so a target that requires grad is read as any other: torch's
    loss, which requires no grad. With grad mode on the same call is refused."""
    x, t = x_t(3, 4)
    t.requires_grad_()
    with torch.no_grad():
        got = on(backend, lambda: BCE(x, t, reduction=reduction, backend=backend))
    ref = F.binary_cross_entropy_with_logits(x.double(), t.detach().double(), reduction=reduction)
    assert not got.requires_grad and got.shape == ref.shape and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, atol=1e-6, rtol=1e-5)
    with pytest.raises(tle.LaunchError, match="'target' requires grad"):
        on(backend, lambda: BCE(x, t, reduction=reduction, backend=backend))


@pytest.mark.parametrize("backend", kernel_backends())
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (4099,), (3, 4099), (2, 3, 1001)], ids=str)
def test_bce_mean_and_sum_match_torch_on_odd_sizes(backend, shape, monkeypatch):
    """The fused reductions, with programs walking several tiles each (MAX_PARTIALS made small), soft
    targets, and the result 0-d in the logits' dtype."""
    monkeypatch.setattr(bce_module, "MAX_PARTIALS", 2)
    x, t = x_t(*shape)
    pw = torch.rand(shape[-1]) * 2 + 0.5
    for reduction in ("mean", "sum"):
        for kw in ({}, {"pos_weight": pw}, {"weight": torch.rand(shape) + 0.5}):
            got = on(backend, lambda: BCE(x, t, reduction=reduction, backend=backend, **kw))
            ref = F.binary_cross_entropy_with_logits(x.double(), t.double(), reduction=reduction,
                                                     **{k: v.double() for k, v in kw.items()})
            assert got.shape == () and got.dtype == torch.float32
            torch.testing.assert_close(got.double(), ref, atol=1e-6 * max(1.0, ref.abs().item()), rtol=1e-5)


@pytest.mark.parametrize("backend", kernel_backends())
def test_bce_extreme_logits_and_soft_targets(backend):
    """|x| up to 100, targets in [0, 1], {0, 1} and the edges: finite and accurate where the loss is tiny."""
    x = torch.tensor([[-100.0, -30.0, -17.0, -1e-3, 0.0, 1e-3, 17.0, 30.0, 100.0]]).repeat(4, 1)
    t = torch.stack([torch.zeros(9), torch.ones(9), torch.full((9,), 0.5), torch.rand(9)])
    got = on(backend, lambda: BCE(x, t, reduction="none", backend=backend))
    ref = F.binary_cross_entropy_with_logits(x.double(), t.double(), reduction="none")
    assert got.isfinite().all()
    torch.testing.assert_close(got.double(), ref, atol=1e-5, rtol=1e-5)
    tiny = (x[1] > 10) & (x[1] < 50)        # t = 1: log1p(exp(-x)), tiny but normal in fp32: relative accuracy
    torch.testing.assert_close(got[1][tiny].double(), ref[1][tiny], atol=0, rtol=1e-5)


@pytest.mark.parametrize("backend", kernel_backends())
def test_bce_weights_and_strides(backend):
    """Every way of reading weight and pos_weight (one value, per column, full, broadcasts materialized),
    with strided logits (the [rows, C] path) and contiguous ones (the flat path), forward and backward."""
    x, t = x_t(4, 6, 10)
    xs = torch.randn(10, 6, 4).permute(2, 1, 0)             # strided
    cases = [dict(), dict(weight=torch.rand(())), dict(weight=torch.rand(1, 1, 1)), dict(weight=torch.rand(10)),
             dict(weight=torch.rand(1, 1, 10)), dict(weight=torch.rand(6, 1)), dict(weight=torch.rand(4, 6, 10)),
             dict(pos_weight=torch.rand(1) * 3), dict(pos_weight=torch.rand(10) * 3),
             dict(pos_weight=torch.rand(4, 1, 1) * 3), dict(weight=torch.rand(10), pos_weight=torch.rand(6, 10))]
    for logits in (x, xs):
        for kw in cases:
            for reduction in ("none", "mean"):
                xg = logits.detach().clone().requires_grad_() if logits is x else logits.detach().requires_grad_()
                got = on(backend, lambda: BCE(xg, t, reduction=reduction, backend=backend, **kw))
                xr = logits.detach().double().requires_grad_()
                ref = F.binary_cross_entropy_with_logits(xr, t.double(), reduction=reduction,
                                                         **{k: v.double() for k, v in kw.items()})
                torch.testing.assert_close(got.double(), ref, atol=1e-5, rtol=1e-5, msg=lambda m: f"{kw}: {m}")
                gout = torch.randn(ref.shape)
                g, = on(backend, lambda: torch.autograd.grad(got, xg, gout))
                gr, = torch.autograd.grad(ref, xr, gout.double())
                torch.testing.assert_close(g.double(), gr, atol=1e-5, rtol=1e-5, msg=lambda m: f"{kw}: {m}")


@pytest.mark.parametrize("backend", kernel_backends())
def test_bce_expanded_upstream_gradient(backend):
    """loss.sum().backward() of reduction "none" gives an expanded gradient (strides 0)."""
    for shape in [(5, 1), (3, 17)]:
        x = (torch.randn(shape) * 3).requires_grad_()
        t = torch.rand(shape)
        g, = on(backend, lambda: torch.autograd.grad(BCE(x, t, reduction="none", backend=backend).sum(), x))
        torch.testing.assert_close(g, torch.sigmoid(x.detach()) - t)


def test_bce_dtypes_and_shapes():
    x, t = x_t(3, 33)
    for backend in ("torch", "triton"):
        assert BCE(x.half(), t.half(), reduction="none", backend=backend).dtype == torch.float16
        out = BCE(x.half(), t, reduction="mean", backend=backend)        # fp32 target: promoted as in torch
        assert out.dtype == torch.float32 and out.shape == ()
        torch.testing.assert_close(out, F.binary_cross_entropy_with_logits(x.half(), t), atol=1e-5, rtol=1e-5)
        assert BCE(x, t.half(), reduction="none", backend=backend).dtype == torch.float32
        assert BCE(x.bfloat16(), t.bfloat16(), torch.rand(33), backend=backend).dtype == torch.bfloat16
        s = BCE(torch.tensor(0.5), torch.tensor(1.0), reduction="none", backend=backend)   # 0-d logits
        assert s.shape == ()
        torch.testing.assert_close(s, F.binary_cross_entropy_with_logits(torch.tensor(0.5), torch.tensor(1.0),
                                                                          reduction="none"))


def test_bce_empty_inputs():
    x, t = torch.randn(0, 16), torch.rand(0, 16)
    for backend in ("torch", "triton"):
        assert BCE(x, t, reduction="mean", backend=backend).isnan()       # as torch: the mean of nothing
        assert BCE(x, t, reduction="sum", backend=backend) == 0
        assert BCE(x, t, reduction="none", backend=backend).shape == (0, 16)


def test_bce_module():
    x, t = x_t(5, 8)
    w, pw = torch.rand(8) + 0.5, torch.rand(8) * 2
    m = tle.ops.BCEWithLogitsLoss(w, reduction="sum", pos_weight=pw, backend="triton")
    assert set(dict(m.named_buffers())) == {"weight", "pos_weight"}
    torch.testing.assert_close(m(x, t), torch.nn.BCEWithLogitsLoss(w, reduction="sum", pos_weight=pw)(x, t))
    torch.testing.assert_close(tle.ops.BCEWithLogitsLoss(backend="torch")(x, t),
                               F.binary_cross_entropy_with_logits(x, t))
    assert "reduction='sum'" in repr(m)


def test_bce_mean_partials_are_deterministic():
    x, t = x_t(64, 300)
    a = BCE(x, t, backend="triton")
    b = BCE(x, t, backend="triton")
    assert torch.equal(a, b)
