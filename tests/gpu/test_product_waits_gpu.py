"""Products waited for at their first use (lowering/tilelang/product_waits.py), compiled by TileLang and run on
the GPU: the small program of tests/cpu/test_product_waits.py, and flash_attention's warp-group forward with
AHEAD (the next block's scores issued before this block's softmax) against its torch reference."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cpu"))
from test_product_waits import D, M, N, STEPS, _inputs, _reference, scores_ahead  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_scores_ahead():
    q, k, out = (t.cuda() for t in _inputs())
    scores_ahead[(1,)](q, k, out, STEPS, M=M, N=N, D=D, backend="tilelang", num_warps=8)
    assert (out.cpu().double() - _reference(q.cpu(), k.cpu())).abs().max().item() < 1e-3


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("ahead", [True, False])
def test_flash_attention_warp_groups_forward(size, causal, ahead):
    import tle.kernels.flash_attention_warp_groups as m
    from tle.kernels.attention_parts import CAUSAL, Problem, Scores, _torch_forward, cu_or_dummy, nan_like
    q, k, v, scale, _ = m._example_inputs("cuda", size)
    pr = Problem(q, k, None, None, None, None)
    out, lse = nan_like(q), nan_like(q[..., 0].transpose(1, 2), torch.float32)
    cfg = m.fwd_warp_groups_config(pr.d)
    m.flash_attention_fwd_warp_groups_kernel[((pr.seqlen_q + cfg["BLOCK_M"] - 1) // cfg["BLOCK_M"], pr.b * pr.h)](
        q, k, v, out, lse, cu_or_dummy(None, lse), cu_or_dummy(None, lse), scale, *pr.strides(q), *pr.strides(k),
        *pr.strides(v), *pr.strides(out), *pr.lse_strides(lse), pr.seqlen_q, pr.seqlen_k, H=pr.h, GROUP=pr.group,
        HEAD_DIM=pr.d, CAUSAL=causal, VARLEN=False, AHEAD=ahead, backend="tilelang", **cfg)
    ref_out, ref_lse = _torch_forward(q, k, v, None, None, CAUSAL if causal else Scores(), scale)
    tol = 2e-2 * ref_out.float().abs().max().item()
    assert (out.float() - ref_out.float()).abs().max().item() < tol
    assert (lse - ref_lse.float()).abs().max().item() < 1e-2
