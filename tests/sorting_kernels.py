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
