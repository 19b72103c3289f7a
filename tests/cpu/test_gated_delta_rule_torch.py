"""The torch mathematics of the gated delta rule (tle.kernels.gated_delta_rule_torch), in fp64 on CPU: the
recurrence against a literal per-head loop, the chunked forward and the explicit chunked backward against the
recurrence and its autograd gradients, packed sequences against running each alone, and the chunk-local
cumulative sums against a direct loop."""
import pytest
import torch
import torch.nn.functional as F

from tle.kernels import gated_delta_rule_torch as gdr

F64 = torch.float64
TOL = dict(rtol=1e-10, atol=1e-10)
GRAD_TOL = dict(rtol=1e-9, atol=1e-9)


def make_inputs(b, t, h, hv, kd=8, vd=16, seed=0, dtype=F64):
    """q, k, v, g, beta as a model feeds them: k unit-norm, g = logsigmoid (a decay in (0, 1)), beta in (0, 1)."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=F64)

    q = randn(b, t, h, kd)
    k = F.normalize(randn(b, t, h, kd), dim=-1)
    v = randn(b, t, hv, vd)
    g = F.logsigmoid(randn(b, t, hv))
    beta = torch.sigmoid(randn(b, t, hv))
    return tuple(x.to(dtype) for x in (q, k, v, g, beta))


def random_state(n, hv, kd=8, vd=16, seed=1):
    return torch.randn(n, hv, kd, vd, generator=torch.Generator().manual_seed(seed), dtype=F64)


def literal_recurrence(q, k, v, g, beta, scale, state):
    """The recurrence as written, one batch row, value head and token at a time: [B, T, ...] -> (o, final)."""
    b, t, hv = v.shape[:3]
    group = hv // q.shape[2]
    o = torch.zeros_like(v)
    final = state.clone()
    for row in range(b):
        for head in range(hv):
            S = state[row, head].clone()
            for i in range(t):
                qi, ki = q[row, i, head // group], k[row, i, head // group]
                decay = g[row, i, head].exp()
                S = decay * S + beta[row, i, head] * torch.outer(ki, v[row, i, head] - decay * S.T @ ki)
                o[row, i, head] = scale * S.T @ qi
            final[row, head] = S
    return o, final


def split_packed(cu_seqlens):
    bounds = cu_seqlens.tolist()
    return list(zip(bounds[:-1], bounds[1:]))


# -- the oracle ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hv", [2, 4])
def test_recurrent_matches_the_literal_loop(hv):
    q, k, v, g, beta = make_inputs(2, 5, 2, hv)
    h0 = random_state(2, hv)
    o, final = gdr.recurrent(q, k, v, g, beta, 0.7, h0, True)
    o_ref, final_ref = literal_recurrence(q, k, v, g, beta, 0.7, h0)
    torch.testing.assert_close(o, o_ref, **TOL)
    torch.testing.assert_close(final, final_ref, **TOL)


def test_recurrent_defaults_scale_and_zero_state_and_omits_the_final_state():
    q, k, v, g, beta = make_inputs(1, 3, 1, 2)
    o, final = gdr.recurrent(q, k, v, g, beta)
    o_ref, _ = literal_recurrence(q, k, v, g, beta, 8 ** -0.5, torch.zeros(1, 2, 8, 16, dtype=F64))
    assert final is None
    torch.testing.assert_close(o, o_ref, **TOL)


def test_recurrent_l2_normalizes_q_and_k_with_eps_under_the_root():
    q, k, v, g, beta = make_inputs(1, 4, 2, 2)
    k = 3 * k
    o, _ = gdr.recurrent(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)

    def unit(x):
        return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)

    o_ref, _ = gdr.recurrent(unit(q), unit(k), v, g, beta)
    torch.testing.assert_close(o, o_ref, **TOL)


def test_the_gate_and_beta_change_the_result():
    q, k, v, g, beta = make_inputs(2, 11, 2, 2)
    o, final = gdr.chunked_forward(q, k, v, g, beta, None, None, True, chunk=4)
    o_ungated, final_ungated = gdr.chunked_forward(q, k, v, torch.zeros_like(g), beta, None, None, True, chunk=4)
    o_half_beta, _ = gdr.chunked_forward(q, k, v, g, beta / 2, None, None, True, chunk=4)
    assert (o - o_ungated).abs().max() > 1e-2
    assert (final - final_ungated).abs().max() > 1e-2
    assert (o - o_half_beta).abs().max() > 1e-2


# -- the chunked forward -------------------------------------------------------------------------------------
@pytest.mark.parametrize("hv", [2, 4])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("t", [1, 3, 7, 8, 9, 19])
def test_chunked_forward_matches_the_recurrence(t, with_state, hv):
    q, k, v, g, beta = make_inputs(2, t, 2, hv, seed=t)
    h0 = random_state(2, hv) if with_state else None
    o, final = gdr.chunked_forward(q, k, v, g, beta, None, h0, True, chunk=8)
    o_ref, final_ref = gdr.recurrent(q, k, v, g, beta, None, h0, True)
    torch.testing.assert_close(o, o_ref, **TOL)
    torch.testing.assert_close(final, final_ref, **TOL)


@pytest.mark.parametrize("t", [65, 130])
def test_chunked_forward_with_the_default_chunk(t):
    q, k, v, g, beta = make_inputs(1, t, 1, 2, kd=16, vd=8)
    h0 = random_state(1, 2, kd=16, vd=8)
    o, final = gdr.chunked_forward(q, k, v, g, beta, 0.5, h0, True)
    o_ref, final_ref = gdr.recurrent(q, k, v, g, beta, 0.5, h0, True)
    torch.testing.assert_close(o, o_ref, **TOL)
    torch.testing.assert_close(final, final_ref, **TOL)


def test_chunk_states_are_the_recurrent_states_at_chunk_starts():
    q, k, v, g, beta = make_inputs(1, 13, 1, 1)
    h0 = random_state(1, 1)
    q, k, v, G, beta, scale, h0 = gdr.prepare(q, k, v, g, beta, None, h0, None, 4)
    kc, vc, Gc, bc = gdr.to_chunks(k, 4), gdr.to_chunks(v, 4), gdr.to_chunks(G, 4, True), gdr.to_chunks(beta, 4)
    _, _, _, starts, _, final = gdr.forward_chunks(kc, vc, Gc, bc, h0)
    for c in range(4):
        _, state = gdr.recurrent(q[:, :4 * c], k[:, :4 * c], v[:, :4 * c], g[:, :4 * c], beta[:, :4 * c], None,
                                 h0, True)
        torch.testing.assert_close(starts[:, :, c], state, **TOL)
    torch.testing.assert_close(final, gdr.recurrent(q, k, v, g, beta, None, h0, True)[1], **TOL)


def test_solve_unit_lower_inverts():
    A = torch.randn(3, 6, 6, dtype=F64).tril(-1)
    eye = torch.eye(6, dtype=F64)
    torch.testing.assert_close(gdr.solve_unit_lower(A) @ (eye + A), eye.expand(3, 6, 6), **TOL)


def test_chunked_forward_in_fp32_keeps_q_dtype_and_fp32_states():
    q, k, v, g, beta = make_inputs(2, 21, 2, 4, dtype=torch.float32)
    o, final = gdr.chunked_forward(q, k, v, g, beta, None, None, True, chunk=8)
    o_ref, final_ref = gdr.recurrent(*(x.double() for x in (q, k, v, g, beta)), None, None, True)
    assert o.dtype == torch.float32 and final.dtype == torch.float32
    torch.testing.assert_close(o.double(), o_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(final.double(), final_ref, rtol=1e-4, atol=1e-5)


# -- packed sequences ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk", [4, 64])
def test_packed_sequences_match_running_each_alone(chunk):
    cu = torch.tensor([0, 1, 1, chunk + 2, chunk + 7])   # lengths 1, 0 (empty), chunk + 1, 5
    hv = 4
    q, k, v, g, beta = make_inputs(1, int(cu[-1]), 2, hv)
    h0 = random_state(4, hv)
    o, final = gdr.chunked_forward(q, k, v, g, beta, None, h0, True, cu_seqlens=cu, chunk=chunk)
    o_packed, final_packed = gdr.recurrent(q, k, v, g, beta, None, h0, True, cu_seqlens=cu)
    torch.testing.assert_close(o, o_packed, **TOL)
    torch.testing.assert_close(final, final_packed, **TOL)
    for n, (start, end) in enumerate(split_packed(cu)):
        piece = (x[:, start:end] for x in (q, k, v, g, beta))
        o_alone, final_alone = gdr.recurrent(*piece, None, h0[n:n + 1], True)
        torch.testing.assert_close(o[:, start:end], o_alone, **TOL)
        torch.testing.assert_close(final[n:n + 1], final_alone, **TOL)
    torch.testing.assert_close(final[1], h0[1], **TOL)    # the empty sequence keeps its state


# -- chunk-local cumulative sums -----------------------------------------------------------------------------
def looped_chunk_cumsum(g, chunk, cu_seqlens, reverse):
    out = torch.zeros_like(g)
    bounds = split_packed(cu_seqlens) if cu_seqlens is not None else [(0, g.shape[1])]
    rows = range(g.shape[0])
    for row in rows:
        for start, end in bounds:
            for i in range(start, end):
                chunk_start = start + (i - start) // chunk * chunk
                chunk_end = min(chunk_start + chunk, end)
                span = range(i, chunk_end) if reverse else range(chunk_start, i + 1)
                out[row, i] = sum(g[row, j] for j in span)
    return out


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("packed", [False, True])
def test_chunk_local_cumsum_matches_a_loop(packed, reverse):
    cu = torch.tensor([0, 3, 3, 12, 17]) if packed else None
    g = torch.randn(1 if packed else 2, 17, 3, dtype=F64)
    got = gdr.chunk_local_cumsum(g, 4, cu, reverse=reverse)
    torch.testing.assert_close(got, looped_chunk_cumsum(g, 4, cu, reverse), **TOL)


# -- the chunked backward ------------------------------------------------------------------------------------
def autograd_gradients(q, k, v, g, beta, scale, h0, do, dht, cu_seqlens=None):
    """The gradients of sum(o do) + sum(final dht) through the recurrence."""
    leaves = [x.clone().requires_grad_() for x in (q, k, v, g, beta)]
    state = None if h0 is None else h0.clone().requires_grad_()
    o, final = gdr.recurrent(*leaves, scale, state, True, cu_seqlens=cu_seqlens)
    loss = (o * do).sum() + (0 if dht is None else (final * dht).sum())
    loss.backward()
    return tuple(x.grad for x in leaves) + (None if state is None else state.grad,)


def assert_gradients_close(got, expected):
    names = ("dq", "dk", "dv", "dg", "dbeta", "dinitial_state")
    for name, a, b in zip(names, got, expected):
        if b is None:
            assert a is None, name
        else:
            torch.testing.assert_close(a, b, **GRAD_TOL, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("with_dfinal", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("hv", [2, 4])
def test_chunked_backward_matches_autograd(hv, with_state, with_dfinal):
    b, t, h = 2, 19, 2
    q, k, v, g, beta = make_inputs(b, t, h, hv, seed=3)
    h0 = random_state(b, hv) if with_state else None
    do = torch.randn(b, t, hv, 16, dtype=F64)
    dht = random_state(b, hv, seed=5) if with_dfinal else None
    got = gdr.chunked_backward(q, k, v, g, beta, 0.6, h0, do, dht, chunk=8)
    assert_gradients_close(got, autograd_gradients(q, k, v, g, beta, 0.6, h0, do, dht))


def test_chunked_backward_with_the_default_chunk():
    q, k, v, g, beta = make_inputs(1, 65, 1, 2, kd=16, vd=8, seed=4)
    h0 = random_state(1, 2, kd=16, vd=8)
    do = torch.randn(1, 65, 2, 8, dtype=F64)
    dht = random_state(1, 2, kd=16, vd=8, seed=6)
    got = gdr.chunked_backward(q, k, v, g, beta, None, h0, do, dht)
    assert_gradients_close(got, autograd_gradients(q, k, v, g, beta, None, h0, do, dht))


@pytest.mark.parametrize("with_state", [False, True])
def test_chunked_backward_of_packed_sequences(with_state):
    cu = torch.tensor([0, 1, 1, 10, 15, 23])             # lengths 1, 0 (empty), 9, 5, 8
    hv = 4
    q, k, v, g, beta = make_inputs(1, 23, 2, hv, seed=7)
    h0 = random_state(5, hv) if with_state else None
    do = torch.randn(1, 23, hv, 16, dtype=F64)
    dht = random_state(5, hv, seed=8)
    got = gdr.chunked_backward(q, k, v, g, beta, None, h0, do, dht, cu_seqlens=cu, chunk=4)
    assert_gradients_close(got, autograd_gradients(q, k, v, g, beta, None, h0, do, dht, cu_seqlens=cu))
    if with_state:
        torch.testing.assert_close(got[5][1], dht[1], **TOL)    # the empty sequence passes dS straight through


def test_chunked_backward_keeps_input_dtypes():
    q, k, v, g, beta = make_inputs(1, 6, 1, 2, dtype=torch.float32)
    do = torch.randn(1, 6, 2, 16)
    grads = gdr.chunked_backward(q, k, v, g, beta, None, None, do, None, chunk=4)
    assert [x.dtype for x in grads[:5]] == [torch.float32] * 5
    assert grads[5] is None
