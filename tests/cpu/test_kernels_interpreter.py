"""Every kernel under kernels/ with an example, at its "small" example, against the example's torch
reference: the Triton lowering in Triton's interpreter, the TileLang lowering in the interpreter of
TileLang programs."""
import math

import pytest
import torch

import tle
from kernel_cases import example_kernels
from tle.cli import poison
from tle.examples import compare_outputs
from tilelang_oracle import interpret_launch

KERNELS = example_kernels()


def unwritten(out: torch.Tensor, ref: torch.Tensor) -> int:
    """How many elements of `out` still hold poison()'s value where the reference has another one."""
    ref = ref.to(out.device)
    if out.is_floating_point():
        return int((out.isnan() & ~ref.isnan()).sum())
    if out.dtype == torch.bool:
        return 0                          # poison's True is an ordinary value: compare_outputs checks it
    low = torch.iinfo(out.dtype).min
    return int(((out == low) & (ref != low)).sum())


def test_every_kernel_is_found():
    names = {name.split(".")[-1] for name, _ in KERNELS}
    assert {"add_kernel", "softmax_kernel", "rms_norm_fwd_kernel", "matmul_kernel"} <= names


@pytest.mark.parametrize("name, kernel", KERNELS, ids=[n for n, _ in KERNELS])
def test_triton_lowering_matches_reference(name, kernel):
    launch = kernel.example("cpu", "small")
    if launch.no_interpreter:
        pytest.skip(launch.no_interpreter)
    poison(launch)                        # a kernel that writes nothing must fail
    kernel[launch.grid](*launch.args, backend="triton", **launch.kwargs)
    check_written_and_close(launch)


@pytest.mark.skipif(tle.available_backends().get("tilelang") is not None, reason="TileLang backend unavailable")
@pytest.mark.parametrize("name, kernel", KERNELS, ids=[n for n, _ in KERNELS])
def test_tilelang_lowering_matches_reference(name, kernel):
    launch = kernel.example("cpu", "small")
    poison(launch)
    interpret_launch(kernel, launch)
    check_written_and_close(launch)


def check_written_and_close(launch):
    ref = launch.reference()
    for out_name, out in launch.outputs.items():
        # checked first and by name: a kernel that skips part of an output fails here, not as a vague mismatch
        left = unwritten(out, ref[out_name])
        assert left == 0, f"output '{out_name}': {left} of {out.numel()} elements never written"
    errors = compare_outputs(launch)
    assert all(math.isfinite(e) for e in errors.values()), errors
