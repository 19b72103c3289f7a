"""flash_attention's warp-group backward (kernels/flash_attention_bwd_warp_groups.py) on the GPU: the gradients the
operator returns on TileLang (the warp-group kernel where bwd_warp_groups_applies, else the two kernels) against
the torch reference in fp32, dense (causal and not, GQA); with dropout (scaled_dot_product_attention's), the
warp-group kernel against the torch reference drawing the same mask, with the causal mask too (the operator takes
the two kernels there); the warp-group kernel on packed sequences, which the operator does not give it (measured
slower there); and under torch.use_deterministic_algorithms the two-kernel backward, whose two runs give the same
bits."""
import pytest
import torch

import tle.ops
from tle.kernels import flash_attention as fa
from tle.kernels.attention_parts import CAUSAL, Scores

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _grads(q, k, v, causal, backend, **kw):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = tle.ops.flash_attention(q, k, v, causal, backend=backend, **kw)
    do = torch.randn(out.shape, generator=torch.Generator(device="cuda").manual_seed(2), device="cuda").to(out.dtype)
    return torch.autograd.grad(out, (q, k, v), do)


def _check(got, ref):
    for g, r in zip(got, ref):
        tol = 2e-2 * r.float().abs().max().item()
        assert (g.float() - r.float()).abs().max().item() < tol


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [(2, 4, 4, 384, 384), (1, 8, 2, 200, 328), (2, 4, 1, 320, 190)])
def test_dense(d, causal, shape):
    b, h, h_kv, s_q, s_k = shape
    taken = fa.bwd_warp_groups_applies(d, "tilelang", sm90=True, scores=CAUSAL if causal else Scores())
    assert taken == (d == 128 or not causal)
    torch.manual_seed(0)
    q = torch.randn(b, s_q, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s_k, h_kv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    got = _grads(q, k, v, causal, "tilelang")
    ref = _grads(q.float(), k.float(), v.float(), causal, "torch")
    _check(got, ref)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [(2, 4, 4, 384, 384), (1, 8, 2, 200, 328)])
def test_dropout(d, causal, shape, monkeypatch):
    b, h, h_kv, s_q, s_k = shape
    if causal:
        s_k = s_q       # SDPA's causal mask (top-left) is the kernel's (bottom-right) only at equal lengths
    taken = fa.bwd_warp_groups_applies(d, "tilelang", sm90=True,
                                       scores=Scores(window=(None, 0) if causal else (None, None), dropout_p=0.2))
    assert taken == (not causal)
    monkeypatch.setattr(fa, "bwd_warp_groups_applies", lambda *a, **kw: True)
    torch.manual_seed(0)
    q = torch.randn(b, h, s_q, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, h_kv, s_k, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    def grads(q, k, v, backend):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        out = tle.ops.scaled_dot_product_attention(q, k, v, dropout_p=0.2, is_causal=causal, enable_gqa=h != h_kv,
                                                   seed=7, offset=2**32 - 64, backend=backend)
        do = torch.randn(out.shape, generator=torch.Generator(device="cuda").manual_seed(2), device="cuda")
        return torch.autograd.grad(out, (q, k, v), do.to(out.dtype))
    _check(grads(q, k, v, "tilelang"), grads(q.float(), k.float(), v.float(), "torch"))


@pytest.mark.parametrize("causal", [True, False])
def test_packed(causal, monkeypatch):
    monkeypatch.setattr(fa, "bwd_warp_groups_applies", lambda *a, **kw: True)
    lens = torch.tensor([200, 64, 1, 517, 130], device="cuda")
    cu = torch.cat([lens.new_zeros(1), lens.cumsum(0)]).int()
    torch.manual_seed(0)
    q, k, v = (torch.randn(int(lens.sum()), 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=int(lens.max()), max_seqlen_k=int(lens.max()))
    _check(_grads(q, k, v, causal, "tilelang", **kw), _grads(q.float(), k.float(), v.float(), causal, "torch", **kw))


def test_deterministic_takes_the_two_kernels():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 256, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    torch.use_deterministic_algorithms(True)
    try:
        assert not fa.bwd_warp_groups_applies(128, "tilelang", sm90=True, scores=CAUSAL)
        a, b = _grads(q, k, v, True, "tilelang"), _grads(q, k, v, True, "tilelang")
    finally:
        torch.use_deterministic_algorithms(False)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
