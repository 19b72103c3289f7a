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
    assert (atol, rtol) == (pytest.approx(3 * 2 ** -8), 2 ** -7)  # the -inf does not make every error pass
    assert 0 < default_tolerance(torch.zeros(4), torch.float32)[0] < 1e-30


def order_one_launch(dtype, out_of_ref):
    """An output of `dtype` made from an fp32 reference of values of order 1 (standard normal, max about 4)."""
    ref = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    return tle.Launch(grid=(1,), args=(), kwargs={}, outputs={"y": out_of_ref(ref)}, reference=lambda: {"y": ref})


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_rounded_results_pass(dtype):
    compare_outputs(order_one_launch(dtype, lambda r: r.to(dtype)))                     # rounded once
    # an intermediate rounded too: 3 * x from x rounded, the reference 3 * x exactly
    launch = order_one_launch(dtype, lambda r: (r.to(dtype).float() * 3).to(dtype))
    ref = launch.reference()["y"] * 3
    launch.reference = lambda: {"y": ref}
    compare_outputs(launch)


@pytest.mark.parametrize("dtype, off", [(torch.bfloat16, 1.02), (torch.bfloat16, 0.98), (torch.float16, 1.02),
                                        (torch.float16, 1.005), (torch.float16, 0.995), (torch.float32, 1.0001)],
                         ids=["bf16-2%-high", "bf16-2%-low", "fp16-2%", "fp16-0.5%-high", "fp16-0.5%-low", "fp32-0.01%"])
def test_scaled_results_fail(dtype, off):
    atol, rtol = default_tolerance(torch.tensor([4.0]), dtype)
    assert atol / 4 + rtol < abs(off - 1)        # at the largest element, the scaling is past the tolerance
    with pytest.raises(AssertionError, match="output 'y'"):
        compare_outputs(order_one_launch(dtype, lambda r: (r * off).to(dtype)))
