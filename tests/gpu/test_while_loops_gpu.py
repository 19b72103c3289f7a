"""A while loop whose condition reduces a carried tile, compiled and run on CUDA on both backends against
torch (tests/cpu/test_while_loops.py runs it in the CPU interpreters)."""
import os
import sys

import pytest
import torch

# the kernel is defined once, with the CPU tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cpu"))
from test_while_loops import _halving_reference, halve_until_small  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("block", [64, 1024])
@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_a_condition_that_reduces_a_tile(backend, block):
    x = torch.randn(block, device="cuda") * 1000
    y = torch.full_like(x, float("nan"))
    steps = torch.full((1,), -1, dtype=torch.int32, device="cuda")
    halve_until_small[(1,)](x, y, steps, 0.75, BLOCK=block, backend=backend)
    ref, ref_steps = _halving_reference(x.cpu(), 0.75)
    assert int(steps) == ref_steps > 5
    torch.testing.assert_close(y.cpu(), ref)
