"""The plain-Triton-syntax corpus on the GPU, both backends, against torch."""
import pytest
import torch

from syntax_corpus import CASES
from tle.examples import compare_outputs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_gpu(name, backend):
    kernel, make = CASES[name]
    launch = make("cuda")
    kernel[launch.grid](*launch.args, backend=backend, **launch.kwargs)
    torch.cuda.synchronize()
    compare_outputs(launch)
