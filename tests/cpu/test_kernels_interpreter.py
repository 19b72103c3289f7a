"""Every kernel under kernels/ with an example: its Triton lowering, run in Triton's interpreter at the
"small" example, against the example's torch reference."""
import pytest

from kernel_cases import example_kernels
from tle.cli import poison
from tle.examples import compare_outputs

KERNELS = example_kernels()


def test_every_kernel_is_found():
    names = {name.split(".")[-1] for name, _ in KERNELS}
    assert {"add_kernel", "softmax_kernel", "rmsnorm_fwd_kernel", "matmul_kernel"} <= names


@pytest.mark.parametrize("name, kernel", KERNELS, ids=[n for n, _ in KERNELS])
def test_triton_lowering_matches_reference(name, kernel):
    launch = kernel.example("cpu", "small")
    if launch.no_interpreter:
        pytest.skip(launch.no_interpreter)
    poison(launch)                        # a kernel that writes nothing must fail
    kernel[launch.grid](*launch.args, backend="triton", **launch.kwargs)
    errors = compare_outputs(launch)
    assert set(errors) == set(launch.outputs)
