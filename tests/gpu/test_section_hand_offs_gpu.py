"""A buffer written before a loop by one warp group and read inside it by the others (tests/cpu/
test_section_hand_offs.py), compiled by TileLang and run on the GPU against the reference in fp64."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cpu"))
from test_section_hand_offs import D, M, N, STEPS, _inputs, _reference, keys_before_the_loop  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_numbers():
    q, k, out = _inputs()
    ref = _reference(q, k)
    q, k, out = q.cuda(), k.cuda(), out.cuda()
    keys_before_the_loop[(1,)](q, k, out, STEPS, M=M, N=N, D=D, backend="tilelang", num_warps=12)
    assert (out.cpu().double() - ref).abs().max().item() < 1e-3
