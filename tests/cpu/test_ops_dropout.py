"""tle.ops.dropout_add and the Philox 4x32-10 generator it draws from (kernels/philox.py): the torch Philox
against Random123's published known-answer vectors, the kernel Philox bit for bit against it on both
lowerings, masks bit-identical across the torch, Triton (interpreter) and TileLang (interpreter of TileLang
programs) backends, forward and backward, whatever the tile size; repeatability, the keep rate, p = 0 and
p = 1, training=False, seed=None and torch's generators, torch.compile, bad inputs. (The generic operator
tests of tests/cpu/test_ops.py cover the values and gradients against the fp64 reference.)"""
import math

import pytest
import torch
import triton
import triton.language as tl

import tle
import tle.ops
from tilelang_oracle import needs_tilelang, run_on, tilelang_through_interpreter
from tle.kernels import dropout_add as mod
from tle.kernels.philox import counter_words, philox4x32_10, philox4x32_10_torch, split_u64, stream_words_torch

BACKENDS = ["torch", "triton", pytest.param("tilelang", marks=needs_tilelang)]

# Random123, tests/kat_vectors, the three "philox4x32 10" lines: counter (4 words), key (2 words) -> output
KAT = [((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
        (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
       ((0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff), (0xffffffff, 0xffffffff),
        (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
       ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
        (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]


class on_backend:
    """Run operators on `backend` with CPU tensors (TileLang through the interpreter of TileLang programs)."""

    def __init__(self, backend):
        self.ctx = tilelang_through_interpreter() if backend == "tilelang" else None

    def __enter__(self):
        if self.ctx:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx:
            self.ctx.__exit__(*exc)


# -- the generator -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("counter, key, expected", KAT)
def test_torch_philox_known_answers(counter, key, expected):
    got = philox4x32_10_torch(*counter, *key)
    assert [int(w) for w in got] == list(expected)


def test_torch_philox_on_tensors_matches_scalar_calls():
    g = torch.Generator().manual_seed(1)
    c = torch.randint(0, 2**32, (4, 50), generator=g, dtype=torch.int64)
    k = (0x9E3779B9, 0x12345678)
    words = philox4x32_10_torch(*c, *k)
    for j in (0, 17, 49):
        single = philox4x32_10_torch(*(int(c[i, j]) for i in range(4)), *k)
        assert [int(w[j]) for w in words] == [int(s) for s in single]


@tle.jit
def philox_kernel(c0_ptr, c1_ptr, c2_ptr, c3_ptr, k0_ptr, k1_ptr, o0_ptr, o1_ptr, o2_ptr, o3_ptr, N: tl.constexpr):
    """The layer's Philox on tiles of counters and keys (int32 tensors holding the uint32 bits)."""
    i = tl.arange(0, N)
    c0 = tl.load(c0_ptr + i).to(tl.uint32, bitcast=True)
    c1 = tl.load(c1_ptr + i).to(tl.uint32, bitcast=True)
    c2 = tl.load(c2_ptr + i).to(tl.uint32, bitcast=True)
    c3 = tl.load(c3_ptr + i).to(tl.uint32, bitcast=True)
    k0 = tl.load(k0_ptr + i).to(tl.uint32, bitcast=True)
    k1 = tl.load(k1_ptr + i).to(tl.uint32, bitcast=True)
    r0, r1, r2, r3 = philox4x32_10(c0, c1, c2, c3, k0, k1)
    tl.store(o0_ptr + i, r0.to(tl.int32, bitcast=True))
    tl.store(o1_ptr + i, r1.to(tl.int32, bitcast=True))
    tl.store(o2_ptr + i, r2.to(tl.int32, bitcast=True))
    tl.store(o3_ptr + i, r3.to(tl.int32, bitcast=True))


def as_i32(u: torch.Tensor) -> torch.Tensor:
    """int64 tensor of uint32 values -> int32 tensor with the same bits."""
    return torch.where(u >= 2**31, u - 2**32, u).to(torch.int32)


@pytest.mark.parametrize("backend", ["triton", pytest.param("tilelang", marks=needs_tilelang)])
def test_kernel_philox_is_bit_identical_to_torch_philox(backend):
    g = torch.Generator().manual_seed(2)
    n = 64
    inputs = torch.randint(0, 2**32, (6, n), generator=g, dtype=torch.int64)
    for j, (counter, key, _) in enumerate(KAT):       # the known answers go through the kernel too
        inputs[:, j] = torch.tensor(counter + key)
    inputs[:, len(KAT)] = 0
    inputs[0, len(KAT)] = 2**32 - 1                   # one word at its maximum, the others 0
    outs = [torch.full((n,), -1, dtype=torch.int32) for _ in range(4)]
    run_on(backend, philox_kernel, (1,), *[as_i32(r) for r in inputs], *outs, N=n)
    expected = philox4x32_10_torch(*inputs)
    for w, (got, want) in enumerate(zip(outs, expected)):
        assert torch.equal(got, as_i32(want)), f"word {w}"
    for j, (_, _, answer) in enumerate(KAT):
        assert [int(o[j]) & 0xFFFFFFFF for o in outs] == list(answer)


@tle.jit
def counter_words_kernel(e_ptr, out_ptr, seed_lo, seed_hi, offset_lo, offset_hi, N: tl.constexpr):
    i = tl.arange(0, N)
    e = tl.load(e_ptr + i)
    words = counter_words(e >> 2, e & 3, seed_lo, seed_hi, offset_lo, offset_hi)
    tl.store(out_ptr + i, words.to(tl.int32, bitcast=True))


@pytest.mark.parametrize("backend", ["triton", pytest.param("tilelang", marks=needs_tilelang)])
def test_counter_words_are_the_streams_words(backend):
    """counter_words (attention's dropout: any counter and word) gives, for counter e div 4 and word e mod 4,
    the word stream_words gives element e; counters past 2^32 carry into the counter's high word, and the
    offset's low word wraps."""
    seed, offset = 0x0123456789ABCDEF, 2**32 - 3
    e = torch.cat([torch.arange(0, 24), 2**34 + 5 + torch.arange(0, 24), 2**32 * 4 - 8 + torch.arange(16)])
    out = torch.full((64,), -1, dtype=torch.int32)
    run_on(backend, counter_words_kernel, (1,), e, out, *split_u64(seed), *split_u64(offset), N=64)
    counter = offset + (e >> 2)                      # below 2^63 here: no wrap of the 64-bit counter
    words = philox4x32_10_torch(counter & 0xFFFFFFFF, counter >> 32, 0, 0, seed & 0xFFFFFFFF, seed >> 32)
    want = torch.stack(words, dim=1).gather(1, (e & 3)[:, None])[:, 0]
    assert torch.equal(out, as_i32(want))
    assert torch.equal(out[:24], as_i32(stream_words_torch(24, seed, offset)))


def test_split_u64():
    assert split_u64(0) == (0, 0)
    assert split_u64(2**64 - 1) == (-1, -1)
    assert split_u64(-1) == (-1, -1)                  # modulo 2^64
    assert split_u64(0x80000000_7FFFFFFF) == (0x7FFFFFFF, -2**31)
    assert split_u64(2**64 + 5) == (5, 0)


def test_stream_words_torch_definition():
    """Element e takes word e mod 4 of Philox(counter = offset + e div 4, key = (seed lo, seed hi))."""
    seed, offset = 0xDEADBEEF_01234567, 2**32 - 2            # the counter's low word wraps at e = 8
    words = stream_words_torch(23, seed, offset)
    for e in (0, 3, 5, 8, 9, 22):
        c = offset + e // 4
        ref = philox4x32_10_torch(c & 0xFFFFFFFF, c >> 32, 0, 0, seed & 0xFFFFFFFF, seed >> 32)
        assert int(words[e]) == int(ref[e % 4]), e
    assert torch.equal(stream_words_torch(23, seed, offset)[4:], stream_words_torch(19, seed, offset + 1))


def test_attention_dropout_stream_definition():
    """Attention's dropout (attention_parts.dropout_keep, as docs/ops.md states it): probability (b, h, i, j)
    of [B, H, S_q, S_k] takes word 2·(i div 8 mod 2) + (j div 8 mod 2) of counter
    offset + ((b·H + h)·G(S_q) + g(i))·G(S_k) + g(j), g(x) = x div 16·8 + x mod 8, G(n) = ceil(n / 16)·8; no two
    probabilities take one word, and the draw uses dropout_counters counters."""
    from tle.kernels.attention_parts import Scores, dropout_counters, dropout_keep
    from tle.kernels.dropout_add import threshold_of
    shape, p, seed, offset = (2, 3, 21, 35), 0.375, 0x0BADC0DE_12345678, 2**32 - 5
    keep = dropout_keep(shape, Scores(dropout_p=p, seed=seed, offset=offset), "cpu")
    groups = lambda n: (n + 15) // 16 * 8                       # noqa: E731
    g = lambda x: x // 16 * 8 + x % 8                           # noqa: E731
    seen = set()
    for b, h, i, j in [(0, 0, 0, 0), (0, 0, 8, 8), (0, 0, 7, 9), (1, 2, 20, 34), (1, 0, 16, 24), (0, 2, 15, 17)]:
        n = offset + ((b * 3 + h) * groups(21) + g(i)) * groups(35) + g(j)
        words = philox4x32_10_torch(n & 0xFFFFFFFF, n >> 32, 0, 0, seed & 0xFFFFFFFF, seed >> 32)
        word = words[2 * (i // 8 % 2) + j // 8 % 2]
        assert bool(keep[b, h, i, j]) == (int(word) >= threshold_of(p)), (b, h, i, j)
    for b in range(2):
        for h in range(3):
            for i in range(21):
                for j in range(35):
                    w = ((((b * 3 + h) * groups(21) + g(i)) * groups(35) + g(j)), 2 * (i // 8 % 2) + j // 8 % 2)
                    assert w not in seen
                    seen.add(w)
    assert max(n for n, _ in seen) < dropout_counters(shape)
    assert abs(keep.float().mean().item() - (1 - p)) < 0.03


# -- masks across backends -------------------------------------------------------------------------------------
def mask_of(backend, numel, p, seed, offset):
    """The kept elements the operator draws: y = dropout(1, p) + 0 is 1 / (1 - p) where kept, else 0."""
    x, r = torch.ones(numel), torch.zeros(numel)
    with on_backend(backend):
        y = tle.ops.dropout_add(x, r, p, seed=seed, offset=offset, backend=backend)
    assert torch.equal(y[y != 0], torch.full_like(y[y != 0], 1 / (1 - p))), "values other than 0 and 1/(1-p)"
    return y != 0


CASES = [(1, 0.5, 7, 0), (3, 0.5, 7, 0), (35, 0.3, 1234, 0), (4103, 0.5, 2**63 + 11, 2**32 - 1000),
         (4096, 0.1, 42, 5), (1002, 0.9, 2**64 - 1, 2**64 - 100)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("numel, p, seed, offset", CASES)
def test_masks_are_bit_identical_across_backends(backend, numel, p, seed, offset):
    expected = mod.keep_mask(numel, p, seed, offset)
    assert torch.equal(mask_of(backend, numel, p, seed, offset), expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_regenerates_the_forward_mask(backend):
    numel, p, seed, offset = 1027, 0.4, 99, 12
    x = torch.randn(numel, requires_grad=True)
    r = torch.randn(numel, requires_grad=True)
    dy = torch.randn(numel)
    with on_backend(backend):
        y = tle.ops.dropout_add(x, r, p, seed=seed, offset=offset, backend=backend)
        y.backward(dy)
    keep = mod.keep_mask(numel, p, seed, offset)
    scale = torch.tensor(1 / (1 - p), dtype=torch.float32)
    assert torch.equal(y.detach(), torch.where(keep, x.detach() * scale, 0.0) + r.detach())
    assert torch.equal(x.grad, torch.where(keep, dy * scale, 0.0))
    assert torch.equal(r.grad, dy)


def test_the_tile_size_does_not_change_the_mask():
    rows = 300
    x, r = torch.ones(rows, 4), torch.zeros(rows, 4)
    seed_lo, seed_hi = split_u64(77)
    outs = []
    for block in (32, 256, 1024):
        y = torch.full_like(x, float("nan"))
        mod.dropout_add_fwd_kernel[(triton.cdiv(rows, block),)](
            x, r, y, rows, seed_lo, seed_hi, 3, 0, mod.threshold_of(0.5), 2.0, BLOCK_R=block, DROPOUT=True,
            backend="triton", num_warps=4)
        outs.append(y)
    assert all(torch.equal(o, outs[0]) for o in outs)
    assert torch.equal(outs[0].reshape(-1) != 0, mod.keep_mask(rows * 4, 0.5, 77, 3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_seed_gives_the_same_bits_twice_and_offsets_and_seeds_differ(backend):
    a = mask_of(backend, 999, 0.5, 5, 0)
    assert torch.equal(a, mask_of(backend, 999, 0.5, 5, 0))
    assert not torch.equal(a, mask_of(backend, 999, 0.5, 5, 1))
    assert not torch.equal(a, mask_of(backend, 999, 0.5, 6, 0))
    # the stream is one sequence: offset k starts where element 4k of offset 0 is
    assert torch.equal(mask_of(backend, 991, 0.5, 5, 2), a[8:])


def test_keep_rate_is_binomial():
    n, p = 1 << 21, 0.3
    x = torch.ones(n)
    y = tle.ops.dropout_add(x, torch.zeros(n), p, seed=2024, backend="torch")
    kept = y != 0
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(int(kept.sum()) - n * (1 - p)) < 5 * sigma
    for w in range(4):                                   # each of Philox's four words, on its own
        k = int(kept[w::4].sum())
        assert abs(k - n / 4 * (1 - p)) < 5 * math.sqrt(n / 4 * p * (1 - p)), w
    # neighbours are independent: both elements of a pair (2i, 2i + 1) are kept with probability (1 - p)^2
    q = (1 - p) ** 2
    both = int((kept[0::2] & kept[1::2]).sum())
    assert abs(both - n / 2 * q) < 5 * math.sqrt(n / 2 * q * (1 - q))


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_and_expanded_inputs(backend):
    x = torch.randn(6, 9, 5).transpose(0, 2)                  # not contiguous
    r = torch.randn(5, 1, 1).expand(5, 9, 6)                   # stride 0
    dy = torch.ones(()).expand(5, 9, 6)                        # the gradient of a sum: one element in memory
    xl = x.clone().requires_grad_()
    with on_backend(backend):
        y = tle.ops.dropout_add(xl, r, 0.5, seed=8, offset=1, backend=backend)
        y.backward(dy)
    keep = mod.keep_mask(x.numel(), 0.5, 8, 1).reshape(x.shape)     # in the order of x's elements
    assert torch.equal(y.detach(), torch.where(keep, x * 2, 0.0) + r)
    assert torch.equal(xl.grad, torch.where(keep, 2.0, 0.0))


# -- p = 0, p = 1, training=False ----------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_p0_p1_and_eval(backend):
    x, r = torch.randn(6, 7, requires_grad=True), torch.randn(6, 7, requires_grad=True)
    with on_backend(backend):
        plain = tle.ops.dropout_add(x, r, 0.5, training=False, backend=backend)
        p0 = tle.ops.dropout_add(x, r, 0.0, seed=3, backend=backend)
        p1 = tle.ops.dropout_add(x, r, 1.0, seed=3, backend=backend)
        module = tle.ops.DropoutAdd(0.5, backend=backend)
        module.eval()
        ev = module(x, r)
        module.train()
        tr = module(x, r)
        (g1,) = torch.autograd.grad(p1.sum(), x)
        (ge, gre) = torch.autograd.grad(ev.sum(), (x, r))
    s = (x + r).detach()
    for out in (plain, p0, ev):
        assert torch.equal(out.detach(), s)
    assert torch.equal(p1.detach(), r.detach())
    assert torch.equal(g1, torch.zeros_like(x))
    assert torch.equal(ge, torch.ones_like(x)) and torch.equal(gre, torch.ones_like(r))
    assert not torch.equal(tr.detach(), s)               # training mode drops (about half of 42 elements)


@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply")   # inf * 0 where nothing is kept
def test_p1_ignores_non_finite_x():
    x = torch.tensor([float("inf"), float("nan"), 1.0, -float("inf"), 2.0])
    r = torch.arange(5.0)
    for backend in ("torch", "triton"):
        assert torch.equal(tle.ops.dropout_add(x, r, 1.0, seed=1, backend=backend), r)


# -- seed=None: torch's generators ---------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_seed_none_is_repeatable_after_manual_seed(backend):
    x, r = torch.ones(1000), torch.zeros(1000)
    torch.manual_seed(123)
    a = tle.ops.dropout_add(x, r, 0.5, backend=backend)
    b = tle.ops.dropout_add(x, r, 0.5, backend=backend)
    torch.manual_seed(123)
    a2 = tle.ops.dropout_add(x, r, 0.5, backend=backend)
    b2 = tle.ops.dropout_add(x, r, 0.5, backend=backend)
    assert torch.equal(a, a2) and torch.equal(b, b2)
    assert not torch.equal(a, b)                         # consecutive calls draw new seeds


def test_seed_none_on_cpu_draws_from_the_cpu_generator():
    torch.manual_seed(7)
    seed, offset = mod.draw_seed_offset(torch.device("cpu"), 10)
    torch.manual_seed(7)
    expected = int(torch.randint(-2**63, 2**63 - 1, (), dtype=torch.int64)) & (2**64 - 1)
    assert (seed, offset) == (expected, 0)


class FakeCudaGenerator:
    def __init__(self, seed, offset):
        self.seed, self.offset = seed, offset

    def initial_seed(self):
        return self.seed

    def get_offset(self):
        return self.offset

    def set_offset(self, offset):
        assert offset % 4 == 0, "torch's CUDA generators take offsets that are multiples of 4"
        self.offset = offset


def test_seed_none_on_cuda_reads_and_advances_the_device_generator(monkeypatch):
    gens = [FakeCudaGenerator(1, 0), FakeCudaGenerator(2**64 - 5, 40)]
    monkeypatch.setattr(torch.cuda, "default_generators", gens, raising=False)
    assert mod.draw_seed_offset(torch.device("cuda", 1), 1000) == (2**64 - 5, 10)
    assert gens[1].offset == 40 + 4000 and gens[0].offset == 0
    # the next call starts past the counters of this one: 10 .. 1009 were used, 1010 is next
    assert mod.draw_seed_offset(torch.device("cuda", 1), 3) == (2**64 - 5, 1010)
    assert gens[1].offset == 4052


def test_generator_methods_exist():
    """The methods the CUDA path calls exist on torch's generators (CPU ones say they have no offset)."""
    for name in ("initial_seed", "get_offset", "set_offset"):
        assert callable(getattr(torch.Generator, name))


# -- torch.compile --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_explicit_seed_compiles_into_one_graph(backend):
    def f(x, r):
        return tle.ops.dropout_add(x, r, 0.25, seed=11, offset=4, backend=backend) * 2

    x, r = torch.randn(3, 50, requires_grad=True), torch.randn(3, 50, requires_grad=True)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    out, ref = compiled(x, r), f(x, r)
    assert torch.equal(out, ref)
    g, gr = torch.autograd.grad(out.sum(), (x, r)), torch.autograd.grad(ref.sum(), (x, r))
    assert all(torch.equal(a, b) for a, b in zip(g, gr))


def test_seed_none_runs_under_torch_compile():
    def f(x, r):
        return tle.ops.dropout_add(x, r, 0.5, backend="torch")

    x, r = torch.ones(200), torch.zeros(200)
    compiled = torch.compile(f, backend="aot_eager")
    torch.manual_seed(5)
    a, b = compiled(x, r), compiled(x, r)
    torch.manual_seed(5)
    assert torch.equal(a, f(x, r)) and torch.equal(b, f(x, r))
    assert not torch.equal(a, b)


# -- bad inputs ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, match", [
    (lambda: tle.ops.dropout_add(torch.randn(4), torch.randn(4), -0.1, backend="torch"), "'p' is the dropout"),
    (lambda: tle.ops.dropout_add(torch.randn(4), torch.randn(4), 1.5, backend="torch"), "0 <= p <= 1; got 1.5"),
    (lambda: tle.ops.dropout_add(torch.randn(4), torch.randn(4), float("nan"), backend="torch"), "got nan"),
    (lambda: tle.ops.dropout_add(torch.randn(4), torch.randn(4), "0.5", backend="torch"), "got '0.5'"),
    (lambda: tle.ops.dropout_add(torch.randn(4), torch.randn(4), True, backend="torch"), "got True"),
    (lambda: tle.ops.dropout_add(torch.randn(2, 4), torch.randn(4), 0.5, backend="torch"),
     r"'residual' has shape \(4,\); expected \(2, 4\)"),
    (lambda: tle.ops.dropout_add(torch.randn(4), torch.randn(4).half(), 0.5, backend="torch"), "'residual' has dtype"),
    (lambda: tle.ops.dropout_add(torch.arange(4), torch.arange(4), 0.5, backend="torch"), "'x' has dtype int64"),
    (lambda: tle.ops.dropout_add(torch.randn(4).double(), torch.randn(4).double(), 0.5, backend="triton"),
     "'x' has dtype float64, which backend"),
    (lambda: tle.ops.dropout_add(torch.randn(4), "r", 0.5, backend="torch"), "'residual' must be a torch.Tensor"),
    (lambda: tle.ops.dropout_add(torch.randn(4), torch.randn(4, device="meta"), 0.5, backend="torch"),
     "'residual' is on meta"),
    (lambda: tle.ops.dropout_add(torch.randn(4), torch.randn(4), 0.5, seed=1.5, backend="torch"),
     "'seed' must be an int"),
    (lambda: tle.ops.dropout_add(torch.randn(4), torch.randn(4), 0.5, seed=1, offset=None, backend="torch"),
     "'offset' must be an int"),
])
def test_dropout_add_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()


def test_module_rejects_bad_p():
    with pytest.raises(ValueError, match="between 0 and 1"):
        tle.ops.DropoutAdd(1.2)


def test_reference_needs_a_seed():
    with pytest.raises(ValueError, match="explicit seed"):
        mod.reference(torch.randn(3), torch.randn(3), 0.5)
