"""The kernel forms ATOMIC_DQ and DESC of flash_attention (tests/cpu/test_attention_kernel_forms.py) compiled and
run on the GPU: every sample of flash_attention and scaled_dot_product_attention, both dtypes and backends, against
the fp64 reference, each sample checked to have run the form (TMA loads and reductions on Triton)."""
import os
import sys

import pytest
import torch

from op_cases import assert_matches_reference
from tle.ops import OPERATORS

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cpu"))
from test_attention_gpu import assert_two_backward_passes_agree  # noqa: E402
from test_attention_kernel_forms import NAMES, deterministic_algorithms, form, with_atomic_dq  # noqa: E402,F401

CASES = [(name, i) for name in NAMES for i in range(len(OPERATORS[name].samples("cpu", torch.float16)))]


@pytest.mark.parametrize("name, index", CASES, ids=[f"{n}-{i}" for n, i in CASES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_sample(backend, dtype, name, index, form):
    what, _, launched = form
    torch.manual_seed(0)
    assert_matches_reference(OPERATORS[name], OPERATORS[name].samples("cuda", dtype)[index], backend, what)
    # the form ran (DESC: in some kernel; a tensor TMA cannot take, or TileLang's warp-group forward, runs without)
    assert any(kwargs.get(what) for _, kwargs in launched)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_atomic_dq_under_deterministic_algorithms_gives_the_same_bits(backend, monkeypatch):
    """ATOMIC_DQ asked for, torch.use_deterministic_algorithms(True): two backward passes give the same bits (the
    dQ kernel's ordered sum runs instead of the atomics)."""
    from tle.kernels import flash_attention as fa
    monkeypatch.setattr(fa, "bwd_configs", with_atomic_dq(fa.bwd_configs))
    with deterministic_algorithms():
        assert_two_backward_passes_agree(backend)
