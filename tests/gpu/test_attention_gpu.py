"""The attention operators on the GPU (flash_attention, scaled_dot_product_attention, silu_attention, sparse_mla), one test per sample, dtype and
backend (TileLang compiles two to four kernels per sample shape: one test each lets the shards compile them side by
side), forward and backward against their references in fp64 (F.scaled_dot_product_attention for
flash_attention where every query sees a key)."""
import pytest
import torch

from op_cases import assert_matches_reference
from tle.ops import OPERATORS

ATTENTION = ("flash_attention", "scaled_dot_product_attention", "silu_attention", "sparse_mla")
OP = OPERATORS["flash_attention"]
CASES = [(name, i) for name in ATTENTION for i in range(len(OPERATORS[name].samples("cpu", torch.float16)))]


@pytest.mark.parametrize("name, index", CASES, ids=[f"{n}-{i}" for n, i in CASES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_sample(backend, dtype, name, index):
    torch.manual_seed(0)
    assert_matches_reference(OPERATORS[name], OPERATORS[name].samples("cuda", dtype)[index], backend)


def assert_two_backward_passes_agree(backend):
    """Two backward passes of the same GQA inputs give the same bits."""
    torch.manual_seed(0)
    q = torch.randn(2, 300, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 300, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 300, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn_like(q)
    grads = [torch.autograd.grad(OP.fn(q, k, v, True, backend=backend), (q, k, v), do) for _ in range(2)]
    for a, b in zip(*grads):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_deterministic(backend):
    """Under torch.use_deterministic_algorithms two backward passes of the same inputs give the same bits (no
    atomics: the GQA sum runs in order; TileLang's warp-group backward, which adds dQ with atomics, is not taken)."""
    torch.use_deterministic_algorithms(True)
    try:
        assert_two_backward_passes_agree(backend)
    finally:
        torch.use_deterministic_algorithms(False)
