"""compare_outputs' default tolerances scale with the reference's magnitude, so that an output of small values
(a softmax's) cannot be wrong by a large factor and pass; a launch's own tolerances stay absolute."""
import pytest
import torch

import tle
from tle.examples import compare_outputs, default_tolerance


def softmax_launch(scale=1.0, ulps=0, tolerances=None):
    """A bf16 softmax output (values around 1/4096) against its fp32 reference, times `scale`, moved by
    `ulps` bf16 steps."""
    x = torch.randn(8, 4096, generator=torch.Generator().manual_seed(0))
    ref = torch.softmax(x, dim=-1)
    y = (ref * scale).to(torch.bfloat16)
    for _ in range(ulps):
        y = torch.nextafter(y, torch.full_like(y, float("inf")))
    return tle.Launch(grid=(1,), args=(), kwargs={}, outputs={"y": y}, reference=lambda: {"y": ref},
                      tolerances=tolerances or {})


def test_exact_and_rounding_level_results_pass():
    compare_outputs(softmax_launch())                    # the reference rounded to bf16 once
    compare_outputs(softmax_launch(ulps=1))              # and one bf16 step further


def test_output_too_large_by_a_quarter_fails():
    with pytest.raises(AssertionError, match="output 'y'"):
        compare_outputs(softmax_launch(scale=1.25))


def test_launch_tolerances_are_absolute():
    # a fixed atol of 1e-2 dwarfs values around 1e-4: the old default, which let the scaled output pass
    compare_outputs(softmax_launch(scale=1.25, tolerances={"y": (1e-2, 1.6e-2)}))


def test_atol_follows_the_largest_finite_reference_value():
    atol, rtol = default_tolerance(torch.tensor([-3.0, 0.5, float("-inf")]), torch.bfloat16)
    assert (atol, rtol) == (pytest.approx(3e-2), 1.6e-2)  # the -inf does not make every error pass
    assert 0 < default_tolerance(torch.zeros(4), torch.float32)[0] < 1e-30
