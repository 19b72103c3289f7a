"""tl.cumprod, tl.associative_scan and tl.reduce with the kernel's own combine function on the GPU: the cases
of tests/cpu/test_tilelang_combines.py (where they run in the CPU interpreters), compiled Triton and compiled
TileLang against torch, at their small sizes and at larger tiles (more elements than threads, so TileLang
splits and vectorizes the scan's and the tree's loops)."""
import os
import sys

import pytest
import torch

from tle.examples import compare_outputs

# the cases are defined once, with the CPU tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cpu"))
from test_tilelang_combines import CASES  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

BACKENDS = ("triton", "tilelang")

# larger tiles per case (the make functions' size arguments)
LARGE = {
    "cumprod_fp32": dict(R=32, C=32),
    "cumprod_int32": dict(R=16, C=32),
    "scan_1d_forward": dict(BLOCK=1024, programs=3),
    "scan_1d_reverse": dict(BLOCK=1024, programs=3),
    **{f"scan_2d_axis{a}_{d}": dict(R=16, C=64) for a in (0, 1) for d in ("forward", "reverse")},
    "reduce_2d_axis0": dict(R=64, C=32),
    "reduce_2d_axis1": dict(R=32, C=64),
    "int_reduces": dict(BLOCK=512),
    "scans_3d": dict(A=4, B=16, C=32),
    "scan_in_loop": dict(BLOCK=1024, n=4),
}


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_combines_on_the_gpu(name, backend, size):
    kernel, make = CASES[name]
    launch = make("cuda", **(LARGE[name] if size == "large" else {}))
    kernel[launch.grid](*launch.args, backend=backend, **launch.kwargs)
    torch.cuda.synchronize()
    compare_outputs(launch)


def test_every_case_has_a_large_size():
    assert set(LARGE) == set(CASES)
