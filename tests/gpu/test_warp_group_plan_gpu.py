"""Warp-group programs beyond attention, compiled by TileLang and run on the GPU (tests/cpu/test_warp_group_plan.py
runs them in the interpreter): a sum carried from a buffer, three groups drawing tickets in turns with a
scalar atomic each, a turn block that computes before its data, masked row copies with and without cp.async."""
import os
import sys

import pytest
import torch

# the kernels are defined once, with the CPU tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cpu"))
from test_warp_group_plan import (_masked_rows, _scaled_in_turns, _summed_from_a_buffer,  # noqa: E402
                                  _tickets_in_turns)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_a_sum_carried_from_a_buffer():
    x, y = torch.arange(64.0, device="cuda"), torch.zeros(16, device="cuda")
    _summed_from_a_buffer[(1,)](x, y, backend="tilelang", num_warps=8)
    assert torch.equal(y.cpu(), x.cpu().view(4, 16).sum(0))


def test_three_groups_draw_tickets_in_turns():
    x = torch.arange(32.0, device="cuda")
    tickets = torch.full((6,), -1, dtype=torch.int32, device="cuda")
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    _tickets_in_turns[(1,)](x, tickets, counter, backend="tilelang", num_warps=16)
    assert tickets.tolist() == [0, 1, 2, 3, 4, 5] and counter.item() == 6


def test_a_turn_block_that_computes_before_its_data():
    x, y = torch.arange(32.0, device="cuda"), torch.full((64,), float("nan"), device="cuda")
    _scaled_in_turns[(1,)](x, y, backend="tilelang", num_warps=12)
    c = x.cpu()
    assert torch.equal(y.cpu(), torch.cat([c[:16], c[:16] * 3, c[16:] * 3, c[16:] * 3]))


@pytest.mark.parametrize("other", [0.0, 5.0])
def test_masked_row_copies(other):
    x = torch.randn(128 * 16, generator=torch.Generator().manual_seed(0)).half()
    y = torch.full((128 * 16,), float("nan"), device="cuda").half()
    _masked_rows[(1,)](x.cuda(), y, LO=8, HI=40, OTHER=other, backend="tilelang", num_warps=8)
    want = torch.full((2, 64, 16), other).half()
    want[:, 8:40] = x.view(2, 64, 16)[:, 8:40]
    assert torch.equal(y.cpu().view(2, 64, 16), want)
