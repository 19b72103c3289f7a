"""flash_attention's forward reading keys and values through tensor descriptors (DESC: TMA loads on Triton; on
TileLang the descriptor's boxes are the masked copies it makes of the plain loads): the same kernel text on both
interpreters against the fp64 reference at every sample of flash_attention and scaled_dot_product_attention;
the launch asks for it only where TMA can take the tensors (16-byte aligned starts and row strides)."""
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
def descriptors(monkeypatch):
    real = fa.fwd_config
    monkeypatch.setattr(fa, "fwd_config", lambda *a: dict(real(*a), DESC=True))
    launched = []
    real_kernel = fa.flash_attention_fwd_kernel

    class Watched:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launched.append(kwargs.get("DESC"))
                return real_kernel[grid](*args, **kwargs)
            return launch
    monkeypatch.setattr(fa, "flash_attention_fwd_kernel", Watched())
    return launched


@pytest.mark.parametrize("name", NAMES)
def test_triton_interpreter(name, descriptors):
    for sample in samples(name):
        assert_matches_reference(OPERATORS[name], sample, "triton", "DESC")
    assert any(descriptors)


@needs_tilelang
@pytest.mark.parametrize("name", NAMES)
def test_tilelang_interpreter(name, descriptors):
    with tilelang_through_interpreter():
        for sample in samples(name):
            assert_matches_reference(OPERATORS[name], sample, "tilelang", "DESC")
    assert any(descriptors)


def test_descriptors_only_where_tma_takes_the_tensors():
    x = torch.zeros(2, 64, 4, 32, dtype=torch.float16)
    assert fa.tma_aligned(x, x[:, 8:])
    assert not fa.tma_aligned(x[..., 1:17])                   # a start 2 bytes past an aligned one
    assert not fa.tma_aligned(torch.zeros(2, 64, 3, 12, dtype=torch.float16)[..., :8])   # rows 72 bytes apart
    assert not fa.tma_aligned(x.transpose(-1, -2))            # the last stride is not 1


# the TileLang kernels built for sm_90a too (nvcc), as the interpreter runs kernels TileLang refuses to build
BUILT = ("causal S129 GQA 4/2 D64", "causal D128", "varlen causal, sequences of more than 64 queries", "D256 lse")


@needs_tilelang
@pytest.mark.slow
def test_tilelang_kernels_build_for_sm90a(descriptors):
    picked = [s for s in samples("flash_attention") if s.label in BUILT]
    assert len(picked) == len(BUILT)
    with tilelang_through_interpreter(compile_cuda=True):
        for sample in picked:
            assert_matches_reference(OPERATORS["flash_attention"], sample, "tilelang", "DESC")
