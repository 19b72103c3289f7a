"""tl.sort, tl.topk and tl.histogram on both backends, without a GPU: Triton's lowering in Triton's
interpreter, TileLang's (a bitonic network over shared memory, shared-memory atomics; see
lowering/tilelang/sorting.py) in the interpreter of TileLang programs, which also reports a race between
the iterations of a T.Parallel loop (an in-place compare-exchange would be one). Both against torch, and,
where torch's order is not Triton's (-0.0 and 0.0, NaN), bit for bit against a model of Triton's network
(tests/sorting_kernels.py's triton_network).

A histogram counts a value outside [0, num_bins) as compiled Triton does (by its low bits, tests/
sorting_kernels.py's triton_counts), on TileLang too; Triton's interpreter counts numpy's way (only values
in [0, num_bins], the last bin closed), so the inputs given to it stay in [0, num_bins). Its topk keeps NaN where
compiled Triton's does not (np.maximum for maxnumf), so NaN goes to the sorts only."""
import re

import pytest
import torch
import triton.language as tl

import tle
from tle.lowering.errors import LoweringError
from tle.lowering.tilelang.sorting import network
from sorting_kernels import (histogram_blocks, histogram_loop, sort_1d, sort_2d, topk_1d, topk_2d, triton_counts,
                             triton_network)
from tilelang_oracle import run_on

BACKENDS = ("triton", "tilelang")


@tle.jit
def sort_then_count(x_ptr, y_ptr, h_ptr, N: tl.constexpr, BINS: tl.constexpr):
    """A sort of an int32 tile feeding a histogram, both twice in a loop (buffers reused)."""
    for r in range(2):
        x = tl.load(x_ptr + r * N + tl.arange(0, N))
        s = tl.sort(x)
        tl.store(y_ptr + r * N + tl.arange(0, N), s)
        tl.store(h_ptr + r * BINS + tl.arange(0, BINS), tl.histogram(s, BINS))


# -- inputs ------------------------------------------------------------------------------------------------
def _values(shape, dtype, seed):
    """Many equal keys; floats with fractions and of both signs."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.float32:
        return (torch.randn(shape, generator=g) * 8).round() / 4
    return torch.randint(-50, 50, shape, generator=g, dtype=dtype)


def _poison(shape, dtype):
    return torch.full(shape, float("nan") if dtype.is_floating_point else -(2 ** 31), dtype=dtype)


# -- sort ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=["fp32", "i32"])
@pytest.mark.parametrize("n", [16, 128, 1024])
def test_sort_1d(backend, n, dtype, desc):
    blocks = 2 if n < 1024 else 1
    x = _values((blocks, n), dtype, seed=n)
    y = _poison((blocks, n), dtype)
    run_on(backend, sort_1d, (blocks,), x, y, N=n, DESC=desc)
    assert torch.equal(y, x.sort(dim=1, descending=desc).values)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=["fp32", "i32"])
@pytest.mark.parametrize("rows, n", [(2, 16), (4, 64), (8, 256)])
def test_sort_2d_sorts_each_row(backend, rows, n, dtype, desc):
    blocks = 2
    x = _values((blocks * rows, n), dtype, seed=rows * n)
    y = _poison((blocks * rows, n), dtype)
    run_on(backend, sort_2d, (blocks,), x, y, R=rows, N=n, DESC=desc)
    assert torch.equal(y, x.sort(dim=1, descending=desc).values)


def _special(n, nan=True):
    """Infinities, both zeros, many ties, and NaN."""
    base = [-0.0, 0.0, float("inf"), -float("inf"), 1.5, -1.5, 0.0, -0.0, 1.5] + ([float("nan")] if nan else [])
    return torch.tensor(base)[torch.randint(0, len(base), (n,), generator=torch.Generator().manual_seed(n))]


SENTINEL = 12345.0          # in no input: an element a kernel leaves unwritten cannot match


def _from_sentinel(backend, kernel, grid, x, out_shape, **kw):
    out = torch.full(out_shape, SENTINEL)
    run_on(backend, kernel, grid, x, out, **kw)
    return out


def _bits(t):
    return t.view(torch.int32)


def _assert_bits(got, expect):
    assert torch.equal(_bits(got), _bits(expect)), (got, expect)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=["fp32", "i32"])
@pytest.mark.parametrize("n", [2, 16, 128, 1024])
def test_triton_network_model_sorts_like_torch(n, dtype):
    """The reference model of Triton's network (sorting_kernels.triton_network) against torch, without NaN."""
    x = _values((3, n), dtype, seed=n)
    for desc in (False, True):
        assert torch.equal(triton_network(x, descending=desc), x.sort(dim=1, descending=desc).values)
    for k in sorted({1, 2, 8, n}):
        if k <= n:
            assert torch.equal(triton_network(x, k=k, descending=True), x.topk(k, dim=1).values)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("n", [16, 256])
def test_sort_of_signed_zeros_and_ties_is_tritons_bit_for_bit(backend, n, desc):
    """Sorted as torch sorts (-0.0 == 0.0), and the sign of each zero the one Triton's network gives it."""
    x = _special(2 * n, nan=False).view(2, n)
    expect = triton_network(x, descending=desc)
    assert torch.equal(expect, x.sort(dim=1, descending=desc).values)
    assert not torch.equal(_bits(expect), _bits(x.sort(dim=1, stable=True, descending=desc).values))
    _assert_bits(_from_sentinel(backend, sort_1d, (2,), x, (2, n), N=n, DESC=desc), expect)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("n", [16, 256])
def test_sort_with_nan_is_tritons_bit_for_bit(backend, n, desc):
    """No comparison with NaN is true, so Triton's network copies or drops NaN and leaves the row unsorted;
    what is defined is the network's result (triton_network), in which each element is one of the row's
    inputs."""
    x = _special(2 * n).view(2, n)
    expect = triton_network(x, descending=desc)
    y = _from_sentinel(backend, sort_1d, (2,), x, (2, n), N=n, DESC=desc)
    _assert_bits(y, expect)
    for r in range(2):
        assert set(_bits(y[r]).tolist()) <= set(_bits(x[r]).tolist())


# -- topk ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=["fp32", "i32"])
@pytest.mark.parametrize("n, k", [(16, 1), (16, 4), (128, 16), (1024, 8), (64, 64)])
def test_topk_1d(backend, n, k, dtype):
    if backend == "triton" and k == 1:
        pytest.skip("Triton's sort_impl cannot reduce a 1-D tile down to one element (its hypercube vanishes)")
    blocks = 3
    x = _values((blocks, n), dtype, seed=n + k)
    y = _poison((blocks, k), dtype)
    run_on(backend, topk_1d, (blocks,), x, y, N=n, K=k)
    assert torch.equal(y, x.topk(k, dim=1).values)        # the k largest, largest first


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=["fp32", "i32"])
@pytest.mark.parametrize("rows, n, k", [(4, 32, 4), (2, 512, 2), (8, 16, 16)])
def test_topk_2d(backend, rows, n, k, dtype):
    x = _values((rows, n), dtype, seed=rows + n + k)
    y = _poison((rows, k), dtype)
    run_on(backend, topk_2d, (1,), x, y, R=rows, N=n, K=k)
    assert torch.equal(y, x.topk(k, dim=1).values * 2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n, k", [(64, 8), (256, 2), (32, 32)])
def test_topk_of_signed_zeros_and_ties_is_tritons_bit_for_bit(backend, n, k):
    """torch's k largest (-0.0 == 0.0), the zeros' signs Triton's network's. Which zero the max of -0.0 and
    0.0 that halves the row keeps is left to maxnumf (either; numpy's reduction in Triton's interpreter
    picks one or the other by layout), so in these cases no halving meets two zeros: k is n, or no zero is
    among the k largest."""
    x = _special(n, nan=False).view(1, n)
    expect = triton_network(x, k=k, descending=True)
    assert k == n or not (expect == 0).any()
    assert torch.equal(expect, x.topk(k, dim=1).values)
    _assert_bits(_from_sentinel(backend, topk_1d, (1,), x, (1, k), N=n, K=k), expect)


# -- histogram ---------------------------------------------------------------------------------------------
def _histogram_input(n, bins, backend, seed):
    """Values from -bins/2 to 2*bins: a third or so out of range on either side, some of them counted by
    their low bits; for Triton's interpreter, which counts another way, the values in range only."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-bins // 2, 2 * bins, (n,), generator=g, dtype=torch.int32)
    if backend == "triton":
        return x.remainder(bins)
    x[: min(n, 5)] = bins
    return x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n, block, bins", [(16, 16, 8), (200, 64, 32), (1000, 256, 64), (3000, 1024, 128)])
def test_histogram_of_several_blocks(backend, n, block, bins):
    blocks = -(-n // block)
    x = _histogram_input(n, bins, backend, seed=n)
    rows = torch.full((blocks, bins), -1, dtype=torch.int32)
    total = torch.zeros(bins, dtype=torch.int32)
    run_on(backend, histogram_blocks, (blocks,), x, rows, total, n, BLOCK=block, BINS=bins)
    for b in range(blocks):
        assert torch.equal(rows[b], triton_counts(x[b * block:(b + 1) * block], bins)), b
    assert torch.equal(total, triton_counts(x, bins))


@pytest.mark.parametrize("backend", BACKENDS)
def test_histogram_accumulated_in_a_loop(backend):
    n, bins = 700, 16
    x = _histogram_input(n, bins, backend, seed=7) + 3
    out = torch.full((bins,), -1, dtype=torch.int32)
    run_on(backend, histogram_loop, (1,), x, out, n, BLOCK=128, BINS=bins)
    assert torch.equal(out, triton_counts(x - 3, bins))


@pytest.mark.parametrize("backend", BACKENDS)
def test_sort_feeding_histogram_in_a_loop(backend):
    n, bins = 64, 32
    x = torch.randint(0, bins, (2, n), generator=torch.Generator().manual_seed(3), dtype=torch.int32)
    y, h = _poison((2, n), torch.int32), torch.full((2, bins), -1, dtype=torch.int32)
    run_on(backend, sort_then_count, (1,), x, y, h, N=n, BINS=bins)
    assert torch.equal(y, x.sort(dim=1).values)
    for r in range(2):
        assert torch.equal(h[r], triton_counts(x[r], bins))


# -- the generated TileLang --------------------------------------------------------------------------------
def _source(kernel, *args, **kw):
    return kernel.lower(*args, backend="tilelang", **kw).source


def test_network_has_tritons_steps():
    # log n (log n + 1) / 2 compare-exchange steps for a sort; for topk, the sort of runs of k, then per
    # halving one reduction and one merge of log k steps
    assert len(network(10, 10, False)) == 55
    steps = network(5, 2, True)
    assert [s[0] for s in steps] == ["swap"] * 3 + ["reduce", "swap", "swap"] * 3
    assert steps[-1] == ("swap", 2, 0, True) and steps[2] == ("swap", 2, 0, "alternate")


def test_sort_source_is_a_ping_pong_network():
    x = torch.zeros(16)
    src = _source(sort_1d, x, x, N=16, DESC=True, grid=(1,))
    loops = re.findall(r"for i0 in T\.Parallel\(16\):  # runs of (\d+), (.*?): element i0 against i0 \^ (\d+)\n"
                       r"\s+(\w+)\[i0\] = T\.if_then_else\(\((\w+)\[i0\] > \5\[i0 \^ \3\]\) != \(.*\), "
                       r"\5\[i0 \^ \3\], \5\[i0\]\)\n\s+T\.sync_threads\(\)\n", src)
    assert len(loops) == 10, src
    assert [int(r) for r, *_ in loops] == [2, 4, 4, 8, 8, 8, 16, 16, 16, 16]
    assert all(dst != s for *_, dst, s in loops)                 # never in place
    assert loops[-1][3] == "sorted" and "sorted_swap = T.alloc_shared((16,), 'float32')" in src
    assert loops[-1][1] == "descending" and loops[0][1] == "alternately ascending and descending"


def test_histogram_source_counts_from_shared_memory():
    x, h = torch.zeros(100, dtype=torch.int32), torch.zeros(32, dtype=torch.int32)
    src = _source(histogram_blocks, x, h, h, 100, BLOCK=64, BINS=32, grid=(2,))
    assert "h = T.alloc_shared((32,), 'int32')" in src and "h_bin = T.alloc_shared((64,), 'int32')" in src
    assert re.search(r"T\.clear\(h\)\n.*\n\s+h_bin\[i0\] = T\.if_then_else\(\(\(\(pid \* 64\) \+ i0\) < 100\), "
                     r"\(x\[i0\] & 31\), -1\)\n\s+T\.sync_threads\(\)\n"
                     r"\s+for i0 in T\.Parallel\(64\):\n\s+if h_bin\[i0\] >= 0:\n"
                     r"\s+T\.atomic_add\(h\[h_bin\[i0\]\], 1\)\n\s+T\.sync_threads\(\)", src), src


@tle.jit
def sort_in_pipelined_loop(x_ptr, y_ptr, n, N: tl.constexpr):
    for i in tl.range(0, n, num_stages=2):
        offs = i * N + tl.arange(0, N)
        tl.store(y_ptr + offs, tl.sort(tl.load(x_ptr + offs)))


def test_sort_in_a_pipelined_loop_is_refused():
    x = torch.zeros(64)
    with pytest.raises(LoweringError, match=r"cannot express tl\.sort in a pipelined loop: .*barriers"):
        _source(sort_in_pipelined_loop, x, x, 4, N=16, grid=(1,))


# -- compiled for sm_90a without a GPU (nvcc) ----------------------------------------------------------------
@pytest.mark.slow
def test_sorting_and_histogram_compile_for_sm_90a():
    if tle.available_backends().get("tilelang") is not None:
        pytest.skip("TileLang backend unavailable")
    x = torch.zeros(16)
    lowered = sort_1d.lower(x, x, N=16, DESC=False, grid=(1,), backend="tilelang")
    cuda = lowered.stage("cuda")
    # a barrier after the copy in and after each of the 10 steps, though each step runs on 16 threads
    assert cuda.count("__syncthreads();") >= 11, cuda
    assert ".entry sort_1d" in lowered.stage("ptx")

    x, y = torch.zeros(4, 512, dtype=torch.int32), torch.zeros(4, 8, dtype=torch.int32)
    lowered = topk_2d.lower(x, y, R=4, N=512, K=8, grid=(1,), backend="tilelang")
    assert "max(" in lowered.stage("cuda") and ".entry topk_2d" in lowered.stage("ptx")

    x, h = torch.zeros(1000, dtype=torch.int32), torch.zeros(64, dtype=torch.int32)
    lowered = histogram_blocks.lower(x, h, h, 1000, BLOCK=256, BINS=64, grid=(4,), backend="tilelang")
    cuda = lowered.stage("cuda")
    assert re.search(r"AtomicAdd\(\(&\(\(\(int\*\)h\)\[", cuda), cuda          # on the shared counts
    ptx = lowered.stage("ptx")
    assert ".entry histogram_blocks" in ptx and "atom.shared" in ptx, ptx
