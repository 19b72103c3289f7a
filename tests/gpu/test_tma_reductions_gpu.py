"""TMA reductions (lowering/tilelang/tma_reductions.py) compiled by TileLang and run on the GPU: the kernel of
tests/cpu/test_tma_reductions.py, a group adding its own product (staged through shared memory) and a group adding
what another hands it, the last box reaching past the tensor, against the reference in fp64."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cpu"))
from test_tma_reductions import M, STEPS, _inputs, _kwargs, _reference, add_products  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("hand_off", [False, True])
@pytest.mark.parametrize("edge", [True, False])
def test_numbers(hand_off, edge):
    rows_out = STEPS * M - 24
    limit = rows_out if edge else rows_out - 40
    a, b, out = _inputs(rows_out)
    ref = _reference(a, b, out, limit)
    a, b, out = a.cuda(), b.cuda(), out.cuda()
    add_products[(1,)](a, b, out, rows_out, limit, backend="tilelang", **_kwargs(hand_off, edge))
    assert (out.cpu().double() - ref).abs().max().item() < 1e-3
