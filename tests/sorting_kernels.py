"""The sort, top-k and histogram kernels the CPU and GPU tests of TileLang's sorting share
(tests/cpu/test_tilelang_sorting.py, tests/gpu/test_tilelang_sorting_gpu.py), and the counts compiled Triton
gives."""
import torch
import triton.language as tl

import tle


@tle.jit
def sort_1d(x_ptr, y_ptr, N: tl.constexpr, DESC: tl.constexpr):
    offs = tl.program_id(0) * N + tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, tl.sort(x, descending=DESC))


@tle.jit
def sort_2d(x_ptr, y_ptr, R: tl.constexpr, N: tl.constexpr, DESC: tl.constexpr):
    offs = (tl.program_id(0) * R + tl.arange(0, R))[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, tl.sort(x, dim=1, descending=DESC))


@tle.jit
def topk_1d(x_ptr, y_ptr, N: tl.constexpr, K: tl.constexpr):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid * N + tl.arange(0, N))
    tl.store(y_ptr + pid * K + tl.arange(0, K), tl.topk(x, K))


@tle.jit
def topk_2d(x_ptr, y_ptr, R: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rows = (tl.program_id(0) * R + tl.arange(0, R))[:, None]
    x = tl.load(x_ptr + rows * N + tl.arange(0, N)[None, :])
    t = tl.topk(x, K)
    tl.store(y_ptr + rows * K + tl.arange(0, K)[None, :], t * 2)       # the result read by an expression


@tle.jit
def histogram_blocks(x_ptr, rows_ptr, total_ptr, n, BLOCK: tl.constexpr, BINS: tl.constexpr):
    """Each block's histogram of its part of x (the tail masked) into its row, and summed into total."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    h = tl.histogram(x, BINS, mask=offs < n)
    bins = tl.arange(0, BINS)
    tl.store(rows_ptr + pid * BINS + bins, h)
    tl.atomic_add(total_ptr + bins, h)


@tle.jit
def histogram_loop(x_ptr, out_ptr, n, BLOCK: tl.constexpr, BINS: tl.constexpr):
    """One block counting all of x, a chunk per iteration, from a computed (shifted) value."""
    acc = tl.zeros((BINS,), tl.int32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0)
        acc += tl.histogram(x - 3, BINS, mask=offs < n)
    tl.store(out_ptr + tl.arange(0, BINS), acc)


def triton_counts(x: torch.Tensor, bins: int) -> torch.Tensor:
    """tl.histogram(x, bins) as compiled Triton counts (HistogramOpToLLVM): each value in the bin of its low
    log2(max(bins, 32)) bits, where that bin is below `bins`; no range check (-1 with 32 bins is counted in
    bin 31, 40 with 16 bins in bin 8). Triton's interpreter counts numpy's way instead (values in [0, bins],
    the last bin closed)."""
    b = x.long() & (max(bins, 32) - 1)
    return torch.bincount(b[b < bins], minlength=bins).to(torch.int32)


def triton_network(x: torch.Tensor, k: int | None = None, descending: bool = False) -> torch.Tensor:
    """tl.sort(x, descending=...) (k None) or tl.topk(x, k) along the last dimension of a CPU tensor, as
    Triton's sort_impl (triton/language/standard.py) computes it, written from that definition: the
    independent reference of the tests, bit for bit.

    A bitonic network over each row of n = 2**log_n elements: stage s (1..log_k) merges runs of 2**s with
    compare-exchange steps on index bits s-1..0; in each step element i, with partner y = x[i ^ 2**bit],
    takes y where `(x > y) != (flip ^ right)` (`right`: bit `bit` of i; `flip`: bit s of i until the last
    stage, then `descending`). For topk, each further level keeps max(x[i], x[i + k]) of every pair of runs of k
    and merges the runs again; of -0.0 and 0.0 the max here keeps the first, where Triton's maxnumf may keep
    either.

    Where no comparison is true (equal keys, -0.0 against 0.0, NaN against anything) both elements of a pair
    end up with the lower element's bits: the signs of the zeros are the network's, not a stable sort's, and
    NaN is copied (in the lower element) or dropped (in the upper one), so with NaN the output need not be
    sorted nor hold the input's values; each output element is still one of its row's inputs."""
    n = x.shape[-1]
    log_n = n.bit_length() - 1
    log_k = log_n if k is None else k.bit_length() - 1
    assert n == 1 << log_n and (k is None or (k == 1 << log_k <= n and descending))

    def merge(h, stage, flip):
        i = torch.arange(h.shape[-1])
        flip = (i >> stage) & 1 if flip == "alternate" else torch.full_like(i, int(flip))
        for bit in reversed(range(stage)):
            y = h[..., i ^ (1 << bit)]
            h = torch.where((h > y) != (flip ^ ((i >> bit) & 1)).bool(), y, h)
        return h

    h = x.clone()
    for stage in range(1, log_k + 1):
        h = merge(h, stage, "alternate" if stage < log_n else descending)
    for level in range(log_k + 1, log_n + 1):
        pairs = h.unflatten(-1, (-1, 2, 1 << log_k))
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        h = torch.where(b > a, b, a).flatten(-2)
        h = merge(h, log_k, "alternate" if level < log_n else descending)
    return h
