"""tl.sort, tl.topk and tl.histogram compiled and run on CUDA on both backends, against torch, and against
each other and (the sorts) a model of Triton's network bit for bit where torch's order differs from Triton's
(NaN, -0.0). TileLang writes them out
(lowering/tilelang/sorting.py: a bitonic network over shared memory with a barrier after each step,
shared-memory atomics); tests/cpu/test_tilelang_sorting.py runs the same kernels without a GPU.

A histogram's values outside [0, num_bins) are counted as compiled Triton counts them, by their low bits
(tests/sorting_kernels.py's triton_counts): the inputs here have them on both sides."""
import pytest
import torch

from sorting_kernels import (histogram_blocks, histogram_loop, sort_1d, sort_2d, topk_1d, topk_2d, triton_counts,
                             triton_network)

BACKENDS = ("triton", "tilelang")


def _values(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = (torch.randn(shape, generator=g) * 8).round() / 4
    else:
        x = torch.randint(-50, 50, shape, generator=g)
    return x.to(dtype).cuda()


def _poison(shape, dtype):
    return torch.full(shape, float("nan") if dtype.is_floating_point else -100, dtype=dtype, device="cuda")


def _run(kernel, grid, *args, backend, **kw):
    kernel[grid](*args, backend=backend, **kw)
    torch.cuda.synchronize()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16], ids=["fp32", "i32", "fp16"])
@pytest.mark.parametrize("n", [16, 32, 128, 1024])
def test_sort_1d(backend, n, dtype, desc):
    blocks = 3
    x = _values((blocks, n), dtype, seed=n)
    y = _poison((blocks, n), dtype)
    _run(sort_1d, (blocks,), x, y, N=n, DESC=desc, backend=backend)
    assert torch.equal(y, x.sort(dim=1, descending=desc).values)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=["fp32", "i32"])
@pytest.mark.parametrize("rows, n", [(2, 8), (4, 64), (8, 256), (8, 1024)])
def test_sort_2d(backend, rows, n, dtype, desc):
    blocks = 2
    x = _values((blocks * rows, n), dtype, seed=rows * n)
    y = _poison((blocks * rows, n), dtype)
    _run(sort_2d, (blocks,), x, y, R=rows, N=n, DESC=desc, backend=backend)
    assert torch.equal(y, x.sort(dim=1, descending=desc).values)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=["fp32", "i32"])
@pytest.mark.parametrize("n, k", [(16, 4), (128, 16), (1024, 8), (64, 64), (1024, 1024)])
def test_topk_1d(backend, n, k, dtype):
    blocks = 3
    x = _values((blocks, n), dtype, seed=n + k)
    y = _poison((blocks, k), dtype)
    _run(topk_1d, (blocks,), x, y, N=n, K=k, backend=backend)
    assert torch.equal(y, x.topk(k, dim=1).values)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=["fp32", "i32"])
@pytest.mark.parametrize("rows, n, k", [(4, 32, 4), (2, 512, 2), (8, 16, 16), (4, 1024, 1)])
def test_topk_2d(backend, rows, n, k, dtype):
    blocks = 2
    x = _values((blocks * rows, n), dtype, seed=rows + n + k)
    y = _poison((blocks * rows, k), dtype)
    _run(topk_2d, (blocks,), x, y, R=rows, N=n, K=k, backend=backend)
    assert torch.equal(y, x.topk(k, dim=1).values * 2)


def _special(n):
    base = torch.tensor([float("nan"), -0.0, 0.0, float("inf"), -float("inf"), 1.5, -1.5, 0.0, -0.0, 1.5])
    return base[torch.randint(0, len(base), (n,), generator=torch.Generator().manual_seed(n))].cuda()


@pytest.mark.parametrize("n", [16, 256])
def test_nan_and_signed_zeros_match_compiled_triton_bit_for_bit(n):
    x = _special(2 * n).view(2, n)
    for kernel, out_shape, kw in ((sort_1d, (2, n), dict(N=n, DESC=False)), (sort_1d, (2, n), dict(N=n, DESC=True)),
                                  (topk_1d, (2, 8), dict(N=n, K=8))):
        out = {}
        for backend in BACKENDS:
            out[backend] = torch.full(out_shape, 12345.0, device="cuda")      # in no input
            _run(kernel, (2,), x, out[backend], backend=backend, **kw)
            for r in range(2):                  # whatever the network makes of NaN, an input of the row
                assert set(out[backend][r].view(torch.int32).tolist()) <= set(x[r].view(torch.int32).tolist())
        if kernel is sort_1d:                   # the network's result, exactly (no max whose zero is maxnumf's)
            expect = triton_network(x.cpu(), descending=kw["DESC"]).cuda()
            for backend in BACKENDS:
                assert torch.equal(out[backend].view(torch.int32), expect.view(torch.int32)), (backend, kw, out)
        assert torch.equal(out["tilelang"].view(torch.int32), out["triton"].view(torch.int32)), (kernel, kw, out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n, block, bins", [(16, 16, 8), (200, 64, 32), (1000, 256, 64), (100000, 1024, 128)])
def test_histogram_of_several_blocks(backend, n, block, bins):
    blocks = -(-n // block)
    x = torch.randint(-bins // 2, 2 * bins, (n,), generator=torch.Generator().manual_seed(n), dtype=torch.int32)
    x[: min(n, 5)] = bins                        # by its low bits: bin 0 (bins >= 32) or none
    rows = torch.full((blocks, bins), -1, dtype=torch.int32)
    total = torch.zeros(bins, dtype=torch.int32)
    x, rows, total = x.cuda(), rows.cuda(), total.cuda()
    _run(histogram_blocks, (blocks,), x, rows, total, n, BLOCK=block, BINS=bins, backend=backend)
    expect = torch.stack([triton_counts(x[b * block:(b + 1) * block], bins) for b in range(blocks)])
    assert torch.equal(rows, expect)
    assert torch.equal(total, triton_counts(x, bins))


@pytest.mark.parametrize("backend", BACKENDS)
def test_histogram_accumulated_in_a_loop(backend):
    n, bins = 5000, 16
    x = torch.randint(-8, 40, (n,), generator=torch.Generator().manual_seed(7), dtype=torch.int32).cuda()
    out = torch.full((bins,), -1, dtype=torch.int32, device="cuda")
    _run(histogram_loop, (1,), x, out, n, BLOCK=128, BINS=bins, backend=backend)
    assert torch.equal(out, triton_counts(x - 3, bins))
