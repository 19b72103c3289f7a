"""flash_attention's backward in one kernel per block of keys: with ATOMIC_DQ in the dK/dV kernel's
configuration, it also adds each query block's dQ share (dS K, the fifth product) into a zeroed fp32 dQ through a
tensor descriptor's atomic add (a TMA reduction on Triton; per element on TileLang), and the dQ kernel does not
run. The same kernel text on both interpreters, against the fp64 reference at every sample of flash_attention
(windows, soft cap, GQA, packed sequences) and of scaled_dot_product_attention (masks as a bias, dropout)."""
import pytest
import torch

from op_cases import assert_matches_reference
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter
from tle.kernels import flash_attention as fa
from tle.ops import OPERATORS

NAMES = ("flash_attention", "scaled_dot_product_attention")


def samples(name):
    torch.manual_seed(0)
    return OPERATORS[name].samples("cpu", torch.float16)


@pytest.fixture
def atomic_dq(monkeypatch):
    real = fa.bwd_configs
    asked = []

    def with_atomic_dq(head_dim, backend):
        kv, q = real(head_dim, backend)
        asked.append(backend)
        return dict(kv, ATOMIC_DQ=True), q
    monkeypatch.setattr(fa, "bwd_configs", with_atomic_dq)
    monkeypatch.setattr(fa, "flash_attention_bwd_dq_kernel", _NotLaunched())    # its work is the dK/dV kernel's
    return asked


class _NotLaunched:
    def __getitem__(self, grid):
        raise AssertionError("the dQ kernel was launched with ATOMIC_DQ")


@pytest.mark.parametrize("name", NAMES)
def test_triton_interpreter(name, atomic_dq):
    for sample in samples(name):
        assert_matches_reference(OPERATORS[name], sample, "triton", "ATOMIC_DQ")
    assert "triton" in atomic_dq


@needs_tilelang
@pytest.mark.parametrize("name", NAMES)
def test_tilelang_interpreter(name, atomic_dq):
    with tilelang_through_interpreter():
        for sample in samples(name):
            assert_matches_reference(OPERATORS[name], sample, "tilelang", "ATOMIC_DQ")
    assert "tilelang" in atomic_dq


# the TileLang kernels built for sm_90a too (nvcc), as the interpreter runs kernels TileLang refuses to build
BUILT = ("causal S129 GQA 4/2 D64", "causal D128", "varlen causal, sequences of more than 64 queries", "D256 lse")


@needs_tilelang
@pytest.mark.slow
def test_tilelang_kernels_build_for_sm90a(atomic_dq):
    picked = [s for s in samples("flash_attention") if s.label in BUILT]
    assert len(picked) == len(BUILT)
    with tilelang_through_interpreter(compile_cuda=True):
        for sample in picked:
            assert_matches_reference(OPERATORS["flash_attention"], sample, "tilelang", "ATOMIC_DQ")
