"""chunk_gated_delta_rule's kernels on CPU at the lengths around a chunk's edges (T = 1, 63, 64, 65, 200), with and
without an initial state, and on a packed batch holding empty and one-token sequences: the output, the final state
and every gradient (through the output and the final state) against autograd of the recurrence in fp64. Triton
runs in its interpreter, TileLang through the interpreter of TileLang programs, both on fp32 inputs, and the
packed batch once more in bf16."""
import pytest
import torch
import torch.nn.functional as F

import tle.ops
from tle.kernels import gated_delta_rule_launch as launches
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter
from tle.kernels.gated_delta_rule_torch import recurrent

BACKENDS = ["triton", pytest.param("tilelang", marks=needs_tilelang)]
K, V = 16, 16
# of the largest magnitude: Triton's interpreter multiplies fp32 in fp32 (about 1e-6 here); the interpreter of
# TileLang programs rounds T.gemm's fp32 operands to TF32, as the GPU does (about 3e-3 here)
BOUND = {"triton": 1e-5, "tilelang": 2 ** -7}


def _inputs(lengths, with_state, seed, vd=V):
    gen = torch.Generator().manual_seed(seed)
    t = sum(lengths)
    q = torch.randn(1, t, 1, K, generator=gen)
    k = F.normalize(torch.randn(1, t, 1, K, generator=gen), dim=-1)
    v = torch.randn(1, t, 2, vd, generator=gen)
    g = F.logsigmoid(torch.randn(1, t, 2, generator=gen))
    beta = torch.rand(1, t, 2, generator=gen)
    h0 = torch.randn(len(lengths), 2, K, vd, generator=gen) if with_state else None
    cu = torch.tensor([0] + lengths).cumsum(0) if len(lengths) > 1 else None
    upstream = (torch.randn(1, t, 2, vd, generator=gen), torch.randn(len(lengths), 2, K, vd, generator=gen))
    return (q, k, v, g, beta), h0, cu, upstream


def _outputs_and_gradients(fn, xs, h0, upstream):
    leaves = [x.clone().requires_grad_() for x in xs] + ([h0.clone().requires_grad_()] if h0 is not None else [])
    o, final = fn(*leaves[:5], initial_state=leaves[5] if h0 is not None else None)
    torch.autograd.backward((o, final), upstream)
    return [o.detach(), final.detach()] + [x.grad for x in leaves]


def _kernel_outputs_and_gradients(backend, xs, h0, cu, upstream):
    """The operator's outputs and gradients on a kernel backend (TileLang through its interpreter)."""
    def op(*a, initial_state):
        return tle.ops.chunk_gated_delta_rule(*a, initial_state=initial_state, output_final_state=True,
                                              cu_seqlens=cu, backend=backend)
    if backend == "tilelang":
        with tilelang_through_interpreter():
            return _outputs_and_gradients(op, xs, h0, upstream)
    return _outputs_and_gradients(op, xs, h0, upstream)


def _largest_error(got, ref):
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1e-30)).item()


CASES = [([1], True), ([63], False), ([64], True), ([65], True), ([200], False),
         ([0, 1, 63, 64, 0, 65, 7], True)]


# the chunk list is sized for the most chunks the batch could make: its spare entries' programs read chunk states
# never written (uninitialized memory, NaN in the interpreters) and store nothing
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lengths, with_state", CASES, ids=lambda c: str(c))
def test_lengths_around_the_chunk(backend, lengths, with_state):
    xs, h0, cu, upstream = _inputs(lengths, with_state, seed=sum(lengths))
    ref = _reference(xs, h0, cu, upstream)
    got = _kernel_outputs_and_gradients(backend, xs, h0, cu, upstream)
    names = ["o", "final", "dq", "dk", "dv", "dg", "dbeta", "dh0"][:len(ref)]
    for name, a, r in zip(names, got, ref):
        assert a.shape == r.shape, name
        assert _largest_error(a, r) < BOUND[backend], (name, _largest_error(a, r))


def _reference(xs, h0, cu, upstream):
    return _outputs_and_gradients(
        lambda *a, initial_state: recurrent(*[x.double() for x in a], None,
                                            None if initial_state is None else initial_state.double(), True,
                                            cu_seqlens=cu),
        xs, h0, [u.double() for u in upstream])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_wide_state_walks(backend, monkeypatch):
    """More walks (sequence, value head) than the device has SMs (one, pretended here): the state walks take 64
    value columns a program and the forward's walk writes the output, as on a full GPU, and they compute the
    same outputs and gradients."""
    monkeypatch.setattr(launches, "multiprocessors", lambda device: 1)
    assert launches.state_columns(K, 64, 2, torch.device("cpu")) == 64
    assert launches.walk_writes_output(K, 64, 2, torch.device("cpu"), backend)
    lengths = [0, 65, 7, 64]
    xs, h0, cu, upstream = _inputs(lengths, True, seed=3, vd=64)
    ref = _reference(xs, h0, cu, upstream)
    got = _kernel_outputs_and_gradients(backend, xs, h0, cu, upstream)
    for name, a, r in zip(["o", "final", "dq", "dk", "dv", "dg", "dbeta", "dh0"], got, ref):
        assert _largest_error(a, r) < BOUND[backend], (name, _largest_error(a, r))


def test_where_the_walk_writes_the_output(monkeypatch):
    """The forward's walk writes the output itself once its 32-column programs outnumber the SMs (Triton at
    K = 64) or half of them (TileLang, and Triton at K = 128, where it reads the scores from a pass before), never
    at K = 256, and not off CUDA (no SM count): the rules of walk_writes_output and scores_ahead."""
    cpu = torch.device("cpu")
    assert not launches.walk_writes_output(128, 128, 10 ** 6, cpu, "triton")
    assert launches.scores_ahead(128, "triton")
    assert not launches.scores_ahead(64, "triton") and not launches.scores_ahead(128, "tilelang")
    monkeypatch.setattr(launches, "multiprocessors", lambda device: 132)
    # 32 walks of 4 programs: 128, under 132 SMs but over 66
    assert launches.walk_writes_output(128, 128, 32, cpu, "triton")
    assert launches.walk_writes_output(128, 128, 32, cpu, "tilelang")
    assert not launches.walk_writes_output(128, 128, 16, cpu, "triton")
    # K = 64: 64 walks of 2 programs, under 132; 67 of them over
    assert not launches.walk_writes_output(64, 64, 64, cpu, "triton")
    assert launches.walk_writes_output(64, 64, 67, cpu, "triton")
    assert not launches.walk_writes_output(64, 64, 32, cpu, "tilelang")
    assert not launches.walk_writes_output(256, 256, 10 ** 6, cpu, "tilelang")
    x = torch.zeros(1, 64, 1, 256)
    index = torch.tensor([[0, 64]], dtype=torch.int32)
    with pytest.raises(ValueError, match="K <= 128"):
        launches.walk_output(x, x, x, x, x[..., 0], 1.0, None, torch.tensor([0, 64], dtype=torch.int32), index,
                             "triton")


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_walk_reading_the_scores_ahead(backend, monkeypatch):
    """The walk with the output reading each chunk's causal scores from gdr_scores_kernel (as Triton does at
    K = 128 on a GPU; taken here on both backends at K = 16, the SM count pretended): the same outputs and
    gradients."""
    monkeypatch.setattr(launches, "multiprocessors", lambda device: 1)
    monkeypatch.setattr(launches, "scores_ahead", lambda kd, backend: True)
    read = []
    real = launches.causal_scores
    monkeypatch.setattr(launches, "causal_scores", lambda *a: read.append(1) or real(*a))
    lengths = [0, 65, 7, 64]
    xs, h0, cu, upstream = _inputs(lengths, True, seed=4, vd=64)
    ref = _reference(xs, h0, cu, upstream)
    got = _kernel_outputs_and_gradients(backend, xs, h0, cu, upstream)
    assert read, "the forward did not take the scores kernel"
    for name, a, r in zip(["o", "final", "dq", "dk", "dv", "dg", "dbeta", "dh0"], got, ref):
        assert _largest_error(a, r) < BOUND[backend], (name, _largest_error(a, r))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_packed_batch_in_bf16(backend):
    """The packed batch in bf16, the dtype the kernels run in on GPUs, where their lowerings take paths fp32 does
    not (the state walk's bf16 copy of the state serves both its store and its product): within the GPU tests'
    bounds of the fp64 recurrence, 2^-6 of the largest magnitude for the outputs and 2^-5 for the gradients."""
    lengths = [0, 1, 63, 64, 0, 65, 7]
    xs, h0, cu, upstream = _inputs(lengths, True, seed=5)
    ref = _reference(xs, h0, cu, upstream)
    low = [x if x is xs[3] else x.bfloat16() for x in xs]          # the gates stay fp32, as models keep them

    got = _kernel_outputs_and_gradients(backend, low, h0, cu, upstream)
    for name, a, r in zip(["o", "final", "dq", "dk", "dv", "dg", "dbeta", "dh0"], got, ref):
        assert _largest_error(a, r) < (2 ** -6 if name in ("o", "final") else 2 ** -5), (name, _largest_error(a, r))
