"""The gated delta rule on the GPU: both kernel backends against the recurrence in fp32, at the head sizes the
kernels take, on packed batches of mixed lengths (empty and one-token sequences among them), and beside
flash-linear-attention where it is installed (a benchmark-only peer: the same inputs, the same error measure)."""
import pytest
import torch
import torch.nn.functional as F

import tle
import tle.ops

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

BACKENDS = ["triton", "tilelang"]


def inputs(b, t, h, hv, kd, vd, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, t, h, kd, device="cuda", generator=gen).to(dtype)
    k = F.normalize(torch.randn(b, t, h, kd, device="cuda", generator=gen), dim=-1).to(dtype)
    v = torch.randn(b, t, hv, vd, device="cuda", generator=gen).to(dtype)
    g = F.logsigmoid(torch.randn(b, t, hv, device="cuda", generator=gen)).to(dtype)
    beta = torch.rand(b, t, hv, device="cuda", generator=gen).to(dtype)
    return q, k, v, g, beta


def relative_error(got, ref):
    """The largest error over the reference's largest magnitude."""
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


def reference(q, k, v, g, beta, h0, cu):
    from tle.kernels.gated_delta_rule_torch import recurrent
    return recurrent(q.float(), k.float(), v.float(), g.float(), beta.float(), None, h0, True, cu_seqlens=cu)


CASES = [  # (B, T, H, HV, K, V, packed lengths)
    (2, 300, 2, 4, 128, 128, None),
    (1, 700, 2, 2, 64, 64, [1, 0, 130, 64, 505]),
    (1, 257, 1, 2, 256, 256, None),
    (3, 65, 4, 4, 128, 64, None),
    # more walks (sequence, value head) than 32-column programs have SMs: the state walks take 64 columns
    (1, 1417, 2, 8, 128, 128, [0, 1, 63, 64, 65, 130, 200, 33, 97, 150, 5, 256, 70, 40, 120, 123]),
]


@pytest.mark.parametrize("op", ["chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}T{}H{}HV{}K{}V{}{}".format(*c[:6], " packed" if c[6] else ""))
def test_matches_the_recurrence(op, backend, case):
    b, t, h, hv, kd, vd, lengths = case
    q, k, v, g, beta = inputs(b, t, h, hv, kd, vd)
    cu = None if lengths is None else torch.tensor([0] + lengths, device="cuda").cumsum(0)
    n = b if lengths is None else len(lengths)
    h0 = torch.randn(n, hv, kd, vd, device="cuda")
    o, final = getattr(tle.ops, op)(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu,
                                    backend=backend)
    ro, rfinal = reference(q, k, v, g, beta, h0, cu)
    assert o.dtype == q.dtype and final.dtype == torch.float32
    # bf16 inputs, w, u, Ai, v_new and the chunk states rounded to bf16 (as FLA does): FLA's own error here is
    # about 0.4% of the largest magnitude
    assert relative_error(o, ro) < 2 ** -6
    assert relative_error(final, rfinal) < 2 ** -6


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_worse_than_fla(backend):
    fla = pytest.importorskip("fla.ops.gated_delta_rule")
    q, k, v, g, beta = inputs(1, 4096, 4, 4, 128, 128)
    ro, rfinal = reference(q, k, v, g, beta, None, None)
    o, final = tle.ops.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, backend=backend)
    fo, ffinal = fla.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    assert relative_error(o, ro) <= 1.5 * relative_error(fo, ro) + 1e-3
    assert relative_error(final, rfinal) <= 1.5 * relative_error(ffinal, rfinal) + 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
def test_decoding_steps_carry_the_state(backend):
    """Three calls of a few tokens each, the state handed from one to the next, equal one call over all."""
    q, k, v, g, beta = inputs(8, 6, 4, 8, 128, 128)
    h0 = torch.randn(8, 8, 128, 128, device="cuda")
    whole, final = tle.ops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=h0,
                                                            output_final_state=True, backend=backend)
    state, parts = h0, []
    for s in (slice(0, 1), slice(1, 4), slice(4, 6)):
        o, state = tle.ops.fused_recurrent_gated_delta_rule(q[:, s], k[:, s], v[:, s], g[:, s], beta[:, s],
                                                            initial_state=state, output_final_state=True,
                                                            backend=backend)
        parts.append(o)
    torch.testing.assert_close(torch.cat(parts, 1), whole, atol=0, rtol=0)
    torch.testing.assert_close(state, final, atol=0, rtol=0)


def gradients(fn, inputs, do, dht):
    """The gradients of sum(o * do) + sum(final * dht) with respect to `inputs`."""
    leaves = [x.detach().requires_grad_() for x in inputs]
    o, final = fn(*leaves)
    ((o.float() * do).sum() + (final * dht).sum()).backward()
    return [x.grad for x in leaves]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}T{}H{}HV{}K{}V{}{}".format(*c[:6], " packed" if c[6] else ""))
def test_gradients_match_the_recurrence(backend, case):
    b, t, h, hv, kd, vd, lengths = case
    q, k, v, g, beta = inputs(b, t, h, hv, kd, vd)
    g = g.float()                                   # as models keep the gates: its gradient in fp32
    cu = None if lengths is None else torch.tensor([0] + lengths, device="cuda").cumsum(0)
    n = b if lengths is None else len(lengths)
    h0 = torch.randn(n, hv, kd, vd, device="cuda")
    do = torch.randn(b, t, hv, vd, device="cuda")
    dht = torch.randn(n, hv, kd, vd, device="cuda")
    got = gradients(lambda *x: tle.ops.chunk_gated_delta_rule(*x[:5], initial_state=x[5], output_final_state=True,
                                                              cu_seqlens=cu, backend=backend),
                    (q, k, v, g, beta, h0), do.to(q.dtype), dht)
    ref = gradients(lambda *x: reference(*x, cu), (q.float(), k.float(), v.float(), g, beta.float(), h0),
                    do.to(q.dtype).float(), dht)
    for name, a, r in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), got, ref):
        assert a.dtype == (torch.float32 if name in ("dg", "dh0") else q.dtype), name
        # bf16 intermediates in the backward too (v_new, the states and their gradients, dw): as FLA keeps them
        assert relative_error(a, r) < 2 ** -5, (name, relative_error(a, r))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_no_worse_than_fla(backend):
    fla = pytest.importorskip("fla.ops.gated_delta_rule")
    q, k, v, g, beta = inputs(1, 4096, 4, 4, 128, 128)
    g = g.float()
    h0 = torch.randn(1, 4, 128, 128, device="cuda")
    do, dht = torch.randn(1, 4096, 4, 128, device="cuda").to(q.dtype), torch.randn(1, 4, 128, 128, device="cuda")
    ref = gradients(lambda *x: reference(*x, None), (q.float(), k.float(), v.float(), g, beta.float(), h0),
                    do.float(), dht)
    ours = gradients(lambda *x: tle.ops.chunk_gated_delta_rule(*x[:5], initial_state=x[5], output_final_state=True,
                                                               backend=backend), (q, k, v, g, beta, h0), do, dht)
    theirs = gradients(lambda *x: fla.chunk_gated_delta_rule(*x[:5], initial_state=x[5], output_final_state=True),
                       (q, k, v, g, beta, h0), do, dht)
    for name, a, f, r in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), ours, theirs, ref):
        assert relative_error(a, r) <= 1.5 * relative_error(f, r) + 1e-3, (name, relative_error(a, r),
                                                                              relative_error(f, r))
