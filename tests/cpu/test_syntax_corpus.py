"""Plain-Triton-syntax kernels beyond the operator set: numerics through the Triton lowering under the
interpreter, and the TileLang lowering compiled to CUDA for sm_90a."""
import pytest

from syntax_corpus import CASES
from tle.examples import compare_outputs


@pytest.mark.parametrize("name", sorted(CASES))
def test_triton_interpreter(name):
    kernel, make = CASES[name]
    launch = make("cpu")
    kernel[launch.grid](*launch.args, backend="triton", **launch.kwargs)
    compare_outputs(launch)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tilelang_compiles(name):
    kernel, make = CASES[name]
    launch = make("cpu")
    lowered = kernel.lower(*launch.args, grid=launch.grid, backend="tilelang", **launch.kwargs)
    assert "@T.prim_func" in lowered.source
    assert "__global__" in lowered.stage("cuda")
