"""Plain-Triton-syntax kernels beyond the operator set: numerics of the Triton lowering in Triton's
interpreter and of the TileLang lowering in the interpreter of TileLang programs, and the TileLang
lowering compiled to CUDA for sm_90a."""
import re

import pytest

from syntax_corpus import CASES
from tle.examples import compare_outputs
from tilelang_oracle import interpret_launch, needs_tilelang


@pytest.mark.parametrize("name", sorted(CASES))
def test_triton_interpreter(name):
    kernel, make = CASES[name]
    launch = make("cpu")
    kernel[launch.grid](*launch.args, backend="triton", **launch.kwargs)
    compare_outputs(launch)


@needs_tilelang
@pytest.mark.parametrize("name", sorted(CASES))
def test_tilelang_interpreter(name):
    kernel, make = CASES[name]
    launch = make("cpu")                  # outputs start as NaN (atomic targets at zero)
    interpret_launch(kernel, launch)
    compare_outputs(launch)


@needs_tilelang
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_tilelang_compiles(name):
    kernel, make = CASES[name]
    launch = make("cpu")
    lowered = kernel.lower(*launch.args, grid=launch.grid, backend="tilelang", **launch.kwargs)
    # TileLang accepts the program: its passes (layout inference, pipelining) run, nvcc compiles the result
    # (a kernel with an empty body has no __launch_bounds__)
    assert re.search(rf"__global__ void (__launch_bounds__\([^)]*\) )?{kernel.__name__}_kernel\(",
                     lowered.stage("cuda"))
