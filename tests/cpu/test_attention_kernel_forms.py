"""Two forms of flash_attention's kernels that a launch configuration asks for (kernels/flash_attention.py):
- ATOMIC_DQ (the dK/dV kernel's configuration): the dK/dV kernel also adds each query block's share of dQ, dS K,
  into a zeroed fp32 dQ through a tensor descriptor's atomic add (a TMA reduction on Triton, per-element atomics on
  TileLang), and the dQ kernel does not run;
- DESC (any kernel's): blocks of rows are read through tensor descriptors (TMA loads on Triton; on TileLang the
  descriptor's boxes are the masked copies it makes of the plain loads): the forward's and the dQ kernel's keys
  and values, the dK/dV kernel's queries and upstream gradients; the launch asks for it only where TMA can take
  the tensors (16-byte aligned starts and row strides).
Each is one kernel text: on both interpreters it matches the fp64 reference, forward and backward, at every
sample of flash_attention and scaled_dot_product_attention (windows, soft cap, GQA, packed sequences, masks as a
bias, dropout); TileLang builds it for sm_90a."""
import contextlib

import pytest
import torch

from op_cases import assert_matches_reference
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter
from tle.kernels import flash_attention as fa
from tle.ops import OPERATORS

NAMES = ("flash_attention", "scaled_dot_product_attention")
FWD, DKDV, DQ = "flash_attention_fwd_kernel", "flash_attention_bwd_dkdv_kernel", "flash_attention_bwd_dq_kernel"


def samples(name):
    torch.manual_seed(0)
    return OPERATORS[name].samples("cpu", torch.float16)


class _Watched:
    """A kernel whose launches are recorded (name, constexprs asked for) before they run."""
    def __init__(self, kernel, launched):
        self.kernel, self.launched = kernel, launched

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launched.append((self.kernel.__name__, kwargs))
            return self.kernel[grid](*args, **kwargs)
        return launch


def _atomic_dq_taken(launched):
    return any(n == DKDV and kw.get("ATOMIC_DQ") for n, kw in launched) and not any(n == DQ for n, _ in launched)


def _descriptors_taken(launched):
    return {n for n, kw in launched if kw.get("DESC")} == {FWD, DKDV, DQ}


def _with_atomic_dq(args, kv, q):
    """ATOMIC_DQ in the dK/dV kernel's configuration (args: bwd_configs'); past head dim 128 with one stage: the
    fp32 dQ block it reduces from shared memory does not fit beside two stages of q and dO blocks (Triton,
    D256: 271 KB of shared memory against the H200's 227)."""
    return dict(kv, ATOMIC_DQ=True, **({"num_stages": 1} if args[0] > 128 else {})), q


FORMS = {"ATOMIC_DQ": (_with_atomic_dq, lambda cfg: cfg, _atomic_dq_taken),
         "DESC": (lambda args, kv, q: (dict(kv, DESC=True), dict(q, DESC=True)), lambda cfg: dict(cfg, DESC=True),
                  _descriptors_taken)}


@pytest.fixture(params=sorted(FORMS))
def form(request, monkeypatch):
    """The form asked for in the kernels' configurations; (its name, the check that the launches took it, the
    launches: (kernel name, its keyword arguments))."""
    backward, forward, taken = FORMS[request.param]
    fwd_config, bwd_configs = fa.fwd_config, fa.bwd_configs
    monkeypatch.setattr(fa, "fwd_config", lambda *a: forward(fwd_config(*a)))
    monkeypatch.setattr(fa, "bwd_configs", lambda *a: backward(a, *bwd_configs(*a)))
    launched = []
    for name in (FWD, DKDV, DQ):
        monkeypatch.setattr(fa, name, _Watched(getattr(fa, name), launched))
    return request.param, lambda: taken(launched), launched


@pytest.mark.parametrize("name", NAMES)
def test_triton_interpreter(name, form):
    what, taken, _ = form
    for sample in samples(name):
        assert_matches_reference(OPERATORS[name], sample, "triton", what)
    assert taken()


@needs_tilelang
@pytest.mark.parametrize("name", NAMES)
def test_tilelang_interpreter(name, form):
    what, taken, _ = form
    with tilelang_through_interpreter():
        for sample in samples(name):
            assert_matches_reference(OPERATORS[name], sample, "tilelang", what)
    assert taken()


# built for sm_90a too (nvcc), as the interpreter runs kernels TileLang refuses to build
BUILT = ("causal S129 GQA 4/2 D64", "causal D128", "varlen causal, sequences of more than 64 queries", "D256 lse")


@needs_tilelang
@pytest.mark.slow
def test_tilelang_kernels_build_for_sm90a(form):
    what, _, _ = form
    picked = [s for s in samples("flash_attention") if s.label in BUILT]
    assert len(picked) == len(BUILT)
    with tilelang_through_interpreter(compile_cuda=True):
        for sample in picked:
            assert_matches_reference(OPERATORS["flash_attention"], sample, "tilelang", what)


@contextlib.contextmanager
def deterministic_algorithms():
    """torch.use_deterministic_algorithms(True) within, the setting before it restored after."""
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was)


def with_atomic_dq(bwd_configs):
    """bwd_configs with ATOMIC_DQ asked for in the dK/dV kernel's configuration."""
    return lambda *a: FORMS["ATOMIC_DQ"][0](a, *bwd_configs(*a))


def test_deterministic_algorithms_keep_the_dq_kernel(monkeypatch):
    """torch.use_deterministic_algorithms(True): no ATOMIC_DQ (its atomics add in any order), the dQ kernel's
    ordered sum instead."""
    launched = []
    monkeypatch.setattr(fa, "bwd_configs", with_atomic_dq(fa.bwd_configs))
    for name in (DKDV, DQ):
        monkeypatch.setattr(fa, name, _Watched(getattr(fa, name), launched))
    with deterministic_algorithms():
        assert_matches_reference(OPERATORS["flash_attention"], samples("flash_attention")[3], "triton")
    assert [n for n, _ in launched] == [DKDV, DQ] and not launched[0][1].get("ATOMIC_DQ")


def test_descriptors_only_where_tma_takes_the_tensors():
    x = torch.zeros(2, 64, 4, 32, dtype=torch.float16)
    assert fa.tma_aligned(x, x[:, 8:])
    assert not fa.tma_aligned(x[..., 1:17])                   # a start 2 bytes past an aligned one
    assert not fa.tma_aligned(torch.zeros(2, 64, 3, 12, dtype=torch.float16)[..., :8])   # rows 72 bytes apart
    assert not fa.tma_aligned(x.transpose(-1, -2))            # the last stride is not 1
    assert not fa.tma_aligned(torch.ones(1, 1, 1, 32, dtype=torch.float16).expand(2, 64, 4, 32))   # strides 0
    assert fa.descriptors_if_aligned(dict(DESC=True), x[..., 1:17]) == dict(DESC=False)
    assert fa.descriptors_if_aligned(dict(DESC=True), x) == dict(DESC=True)
