"""The sparse-MLA tutorial text (tests/seed_sparse_mla.py: only its import and decorator lines changed)
through its own `@triton.autotune`, on both backends, at the tutorial's head dims."""
import pytest
import torch

from seed_sparse_mla import triton_sparse_mla_fwd
from tle.kernels.examples.sparse_mla import kernel_args, make_indices, reference


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_the_tutorial_through_triton_autotune(backend):
    B, S, SKV, H, DV, TD, topk = 1, 96, 256, 64, 512, 64, 128
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(B, S, H, DV + TD, generator=gen).to("cuda", torch.bfloat16)
    kv = torch.randn(B, SKV, 1, DV + TD, generator=gen).to("cuda", torch.bfloat16)
    idx = make_indices(B, S, SKV, 1, topk, gen).to("cuda")
    out = torch.full((B, S, H, DV), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((B, S, H), float("nan"), dtype=torch.bfloat16, device="cuda")
    sm_scale = (DV + TD) ** -0.5
    grid, args = kernel_args(q, kv, idx, out, lse, sm_scale, DV, 32, 32)
    triton_sparse_mla_fwd[grid](*args, backend=backend)
    torch.cuda.synchronize()
    want_out, want_lse = reference(q.float(), kv.float(), idx, sm_scale, DV)
    torch.testing.assert_close(out.float(), want_out.to(out.device), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse.float(), want_lse.to(lse.device), atol=5e-2, rtol=2e-2)
