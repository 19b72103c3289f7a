"""The sparse-MLA tutorial text, ported by changing only its import and decorator lines
(tests/seed_sparse_mla.py: `@triton.autotune` over `@tle.jit`), runs on both backends: through
`triton.autotune` in Triton's interpreter, through the interpreter of TileLang programs, and compiled for
sm_90a by both (PTX for Triton, CUDA for TileLang). The GPU suite runs it on the GPU."""
import pytest
import torch

import tle
from seed_sparse_mla import triton_sparse_mla_fwd
from tilelang_oracle import needs_tilelang
from tle.cli import meta_copy
from tle.kernels.examples.sparse_mla import kernel_args, make_indices, reference

B, S, SKV, H, DV, TD, TOPK, BK, BH = 1, 6, 64, 32, 64, 32, 64, 32, 32


def _launch(device="cpu"):
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(B, S, H, DV + TD, generator=gen).to(device, torch.bfloat16)
    kv = torch.randn(B, SKV, 1, DV + TD, generator=gen).to(device, torch.bfloat16)
    idx = make_indices(B, S, SKV, 1, TOPK, gen).to(device)
    out = torch.full((B, S, H, DV), float("nan"), dtype=torch.bfloat16, device=device)
    lse = torch.full((B, S, H), float("nan"), dtype=torch.bfloat16, device=device)
    sm_scale = (DV + TD) ** -0.5
    grid, args = kernel_args(q, kv, idx, out, lse, sm_scale, DV, BK, BH)
    want_out, want_lse = reference(q.float().cpu(), kv.float().cpu(), idx.cpu(), sm_scale, DV)
    return grid, args, out, lse, want_out, want_lse


def _check(out, lse, want_out, want_lse):
    torch.testing.assert_close(out.float().cpu(), want_out, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse.float().cpu(), want_lse, atol=5e-2, rtol=2e-2)


def test_the_tutorial_runs_through_triton_autotune_on_triton():
    grid, args, out, lse, want_out, want_lse = _launch()
    triton_sparse_mla_fwd[grid](*args, backend="triton")
    _check(out, lse, want_out, want_lse)
    # the one config is what launched: the tutorial's 8 warps and 4 stages
    assert triton_sparse_mla_fwd.best_config.num_warps == 8


@needs_tilelang
def test_the_tutorial_runs_on_tilelang():
    grid, args, out, lse, want_out, want_lse = _launch()
    kernel = triton_sparse_mla_fwd.fn                           # the @tle.jit kernel the autotuner wraps
    kernel.interpret_tilelang(grid, *args, num_warps=8, num_stages=4)
    _check(out, lse, want_out, want_lse)


@needs_tilelang
@pytest.mark.slow
@pytest.mark.parametrize("backend, stage, marker", [("triton", "ptx", ".target sm_90a"),
                                                    ("tilelang", "cuda", "__global__")])
def test_the_tutorial_compiles_for_sm90a(backend, stage, marker):
    grid, args, *_ = _launch()
    lowered = triton_sparse_mla_fwd.fn.lower(*[meta_copy(a) for a in args], grid=grid, backend=backend,
                                             num_warps=8, num_stages=4)
    assert marker in lowered.stage(stage)
