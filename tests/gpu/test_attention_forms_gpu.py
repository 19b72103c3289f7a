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
from test_attention_kernel_forms import NAMES, form  # noqa: E402,F401 - the fixture, used by name

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
    bwd_configs = fa.bwd_configs
    monkeypatch.setattr(fa, "bwd_configs", lambda *a: (dict(bwd_configs(*a)[0], ATOMIC_DQ=True), bwd_configs(*a)[1]))
    torch.manual_seed(0)
    q = torch.randn(2, 300, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 300, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 300, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn_like(q)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        grads = [torch.autograd.grad(OPERATORS["flash_attention"].fn(q, k, v, True, backend=backend), (q, k, v), do)
                 for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(was)
    for a, b in zip(*grads):
        assert torch.equal(a, b)
