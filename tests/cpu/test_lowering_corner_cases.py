"""Corners of the TileLang lowering that the kernels' examples do not reach: a while condition that splits a
reduction of its carried tile, the layout of tl.device_print and tl.device_assert over a tile, a copy loop
pipelined without being asked, the block-size check (which loop it names, when it runs), where the generated
source is cached, the versions of a buffer handed between warp groups, and the lets the mask analysis leaves
unread."""
import inspect
import os
import re

import pytest
import torch
import triton.language as tl
from triton import knobs

import tle
from syntax_corpus import folded_bounds
from tilelang_oracle import interpret_tilelang, needs_tilelang

pytestmark = needs_tilelang


def _line_of(kernel, text: str, nth: int = 0) -> int:
    """The file line of the `nth` line of `kernel`'s source that contains `text`."""
    lines, first = inspect.getsourcelines(kernel.fn)
    return [first + i for i, ln in enumerate(lines) if text in ln][nth]


def _lines_after(source: str, head: str, count: int) -> list[str]:
    """The `count` source lines from the first one that starts (after its indentation) with `head`."""
    lines = source.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith(head))
    return lines[at:at + count]


# -- a while condition that halves a reduction of the carried tile --------------------------------------------
@tle.jit
def _pair_spread(t):
    lo, hi = tl.split(t)
    return tl.max(lo - hi, axis=0)


@tle.jit
def shrink_until_close(x_ptr, y_ptr, steps_ptr, limit, BLOCK: tl.constexpr, K: tl.constexpr):
    offs = (tl.arange(0, BLOCK)[:, None, None] * 2 + tl.arange(0, 2)[None, :, None]) * K + \
        tl.arange(0, K)[None, None, :]
    t = tl.load(x_ptr + offs)
    steps = 0
    while _pair_spread(tl.sum(t, axis=2)) > limit:    # each row's two sums, split into halves
        t = t * 0.5
        steps += 1
    tl.store(y_ptr + offs, t)
    tl.store(steps_ptr, steps)


def test_a_while_condition_splitting_a_reduction_reads_this_steps_reduction():
    """The condition's reduction is held in a fragment and split through a shared copy. At the end of every
    step the condition is computed again from the carried tile: the new reduction must get a shared copy of its
    own, not the copy made from the first reduction before the loop (which would keep the loop testing the
    input forever)."""
    x = torch.randn(16, 2, 4) * 50
    y, steps = torch.full_like(x, float("nan")), torch.full((1,), -1, dtype=torch.int32)
    src = shrink_until_close.lower(x, y, steps, 0.75, BLOCK=16, K=4, grid=(1,), backend="tilelang").source
    before, body = src.split("while go:")
    copy = r"T\.copy\((sum\w*), (\w+_shared\w*)\)"
    (first,) = re.findall(copy, before)
    (again,) = re.findall(copy, body)
    assert again[0] != first[0] and again[1] != first[1], src
    assert f"{again[1]}[i0, 0] - {again[1]}[i0, 1]" in body and not re.search(rf"\b{first[1]}\b", body), src

    ref, ref_steps = x.clone(), 0
    while (ref.sum(2)[:, 0] - ref.sum(2)[:, 1]).max() > 0.75:
        ref, ref_steps = ref * 0.5, ref_steps + 1
    interpret_tilelang(shrink_until_close, (1,), x, y, steps, 0.75, BLOCK=16, K=4)
    assert int(steps) == ref_steps > 3
    torch.testing.assert_close(y, ref)


# -- tl.device_print and tl.device_assert of a tile -------------------------------------------------------------
@tle.jit
def checked_tile(x_ptr, R: tl.constexpr, C: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    tl.device_print("x", x)
    tl.device_assert(x == x, "no nan")


@pytest.fixture
def debug_mode(monkeypatch):
    """Triton's debug mode on (as TRITON_DEBUG=1 does) for one test."""
    monkeypatch.setattr(knobs.runtime, "debug", True)


def test_device_print_of_a_tile_larger_than_the_block_takes_steps(debug_mode):
    """A 64x64 tile printed by 128 threads: 32 steps of one element per thread, the printf the only statement
    of the step loop (element step * 128 + thread, row-major), then the kernel goes on at its own level."""
    src = checked_tile.lower(torch.zeros(64 * 64), R=64, C=64, grid=(1,), backend="tilelang").source
    flat = "(step * 128 + T.get_thread_binding())"
    assert _lines_after(src, "for step in", 3) == [
        "        for step in T.serial(32):",
        "            T.call_extern('int32', 'printf', 'pid (%u, %u, %u) idx (%2u, %2u) x: %f\\n', bx, 0, 0, "
        f"{flat} // 64, {flat} % 64, T.cast(x_1[{flat} // 64, {flat} % 64], 'float64'))",
        "        for i0, i1 in T.Parallel(64, 64):",
    ], src


def test_device_assert_of_a_tile_asserts_each_element_in_its_parallel_loop(debug_mode):
    """With Triton's debug mode on, tl.device_assert of a tile is TileLang's assertion builtin on every
    element: the one statement of a T.Parallel loop over the tile, with the message naming the kernel's
    line."""
    src = checked_tile.lower(torch.zeros(16 * 8), R=16, C=8, grid=(1,), backend="tilelang").source
    line = _line_of(checked_tile, "tl.device_assert")
    lines = src.rstrip("\n").splitlines()
    assert lines[-2:] == [
        "        for i0, i1 in T.Parallel(16, 8):",
        '            T.call_intrin("void", tvm.ir.Op.get("tl.device_assert_with_msg"), (x[i0, i1] == x[i0, i1]), '
        f"'no nan (at {os.path.basename(__file__)}:{line} in checked_tile)')",
    ], src


# -- a loop that copies into a tle.gpu buffer: pipelined with the launch's stages ----------------------------
@tle.jit
def sum_of_copies(x_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    buf = tle.gpu.alloc([BLOCK], dtype=tl.float32)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(N):                 # no num_stages of its own: the launch's decides
        tle.gpu.copy(x_ptr + i * BLOCK + offs, buf, [BLOCK])
        acc += tle.gpu.local_load(buf)
    tl.store(out_ptr + offs, acc)


@pytest.mark.parametrize("num_stages, header", [
    (None, "T.Pipelined(5, num_stages=3)"), (3, "T.Pipelined(5, num_stages=3)"), (1, "T.serial(5)"),
])
def test_a_loop_copying_into_a_buffer_is_pipelined_with_the_launch_stages(num_stages, header):
    """A loop whose tle.gpu.copy brings a tile into shared memory each step is where pipelining pays: without a
    num_stages of its own it is T.Pipelined with the launch's stages (3 by default), and a T.serial loop where
    the launch asks for one stage. Either way it computes the sum."""
    x = torch.randn(5 * 32)
    out = torch.full((32,), float("nan"))
    stages = {} if num_stages is None else {"num_stages": num_stages}
    src = sum_of_copies.lower(x, out, N=5, BLOCK=32, grid=(1,), backend="tilelang", **stages).source
    assert f"for i in {header}:" in src, src
    interpret_tilelang(sum_of_copies, (1,), x, out, N=5, BLOCK=32, **stages)
    torch.testing.assert_close(out, x.view(5, 32).sum(0))


# -- the block size TileLang compiles for: checked once, at the first launch, naming the pipelined loop ----------
@tle.jit
def plain_then_async(x_ptr, y_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(N):                 # a plain loop
        acc += tl.load(x_ptr + i * BLOCK + offs)
    for i in range(N):                 # pipelined for its asynchronous load
        acc += tle.load(y_ptr + i * BLOCK + offs, is_async=True)
    tl.store(out_ptr + offs, acc)


def _plain_then_async(num_warps=32):
    x, y, out = torch.randn(4 * 64), torch.randn(4 * 64), torch.empty(64)
    args = (x, y, out)
    return plain_then_async.lower(*args, N=4, BLOCK=64, grid=(1,), backend="tilelang", num_warps=num_warps), args


OVER_LIMIT = 'extern "C" __global__ void __launch_bounds__(1152, 1) plain_then_async_kernel('


def test_block_size_error_names_the_loop_that_is_warp_specialized():
    """TileLang adds its producer warpgroup for a pipelined loop: the error for a block over CUDA's limit names
    that loop (the one with the asynchronous load), not the plain loop before it."""
    from tle.lowering.errors import LoweringError
    from tle.lowering.tilelang.block_size import check_block_size
    lowered, _ = _plain_then_async()
    async_loop = _line_of(plain_then_async, "for i in range(N)", 1)
    assert _line_of(plain_then_async, "for i in range(N)", 0) < async_loop
    with pytest.raises(LoweringError, match=rf"warp-specialized the pipelined loop at line {async_loop}, adding 128 "
                                            r"producer threads to the 1024 of num_warps=32; launch it with "
                                            r"num_warps <= 28"):
        check_block_size(OVER_LIMIT, lowered.compiled.ir)


class _CompiledKernel:
    """Stands for TileLang's compiled kernel: its CUDA source, and the launches it is given."""

    def __init__(self, cuda: str):
        self.cuda, self.sources_read, self.launches = cuda, 0, []

    def get_kernel_source(self):
        self.sources_read += 1
        return self.cuda

    def __call__(self, *args):
        self.launches.append(args)


def test_block_size_is_checked_before_the_first_launch_runs():
    """A kernel compiled for more threads a block than CUDA allows is refused at its first launch, before it
    runs (the CUDA error TileLang's runtime would give names nothing)."""
    from tle.lowering.errors import LoweringError
    lowered, args = _plain_then_async()
    compiled = lowered.compiled
    compiled._kernel = _CompiledKernel(OVER_LIMIT)
    with pytest.raises(LoweringError, match="for 1152 threads a block, more than CUDA's 1024"):
        compiled.launch((1,), args)
    assert compiled._kernel.launches == []


def test_block_size_is_read_once_and_the_kernel_then_runs_on_every_launch():
    """A block within the limit launches; the compiled source is read at the first launch only (every launch
    after it goes straight to the kernel), with the tensors passed as flat buffers."""
    lowered, args = _plain_then_async(num_warps=4)
    compiled = lowered.compiled
    kernel = compiled._kernel = _CompiledKernel('extern "C" __global__ void __launch_bounds__(256, 1) k(')
    compiled.launch((1,), args)
    compiled.launch((1,), args)
    assert kernel.sources_read == 1 and len(kernel.launches) == 2
    assert all(a.shape == (a.numel(),) and a.data_ptr() == b.data_ptr() for a, b in zip(kernel.launches[1], args))


# -- where the generated source is kept -----------------------------------------------------------------------
def test_generated_source_is_cached_under_the_kernel_name_and_a_digest_of_its_text(tmp_cache):
    """The generated source is written once into the cache, named by the kernel and a 20-digit digest of the
    source (and TileLang's version): another specialization is another file, the same one the same file."""
    lowered, args = _plain_then_async(num_warps=4)
    path = lowered.compiled.path
    assert os.path.dirname(path).endswith("tilelang-src")
    assert re.fullmatch(r"plain_then_async_[0-9a-f]{20}\.py", os.path.basename(path)), path
    with open(path) as f:
        assert f.read() == lowered.source
    again = plain_then_async.lower(*args, N=4, BLOCK=64, grid=(1,), backend="tilelang", num_warps=4)
    other = plain_then_async.lower(*args, N=2, BLOCK=64, grid=(1,), backend="tilelang", num_warps=4)
    assert again.compiled.path == path and other.compiled.path != path
    assert re.fullmatch(r"plain_then_async_[0-9a-f]{20}\.py", os.path.basename(other.compiled.path))


# -- a buffer handed from one warp group to others inside the pipelined loop: one version per stage --------------
def test_buffers_handed_between_warp_groups_have_a_version_per_stage():
    """In two_consumers the key tiles are allocated inside the two-stage loop and handed from the producer group
    to the consumers: each allocation holds a version per stage, in a leading axis, and the access report says
    so. The buffers allocated before the loop (the query halves, P) hold one."""
    from test_warp_groups import D, M, N, STEPS, _inputs, two_consumers
    q, kv, out = _inputs()
    lowered = two_consumers.lower(q, kv, out, STEPS, M=M, N=N, D=D, grid=(1,), backend="tilelang", num_warps=12)
    allocs = {how for _, op, _, how in lowered.compiled.access_report if op == "tle.gpu.alloc"}
    assert allocs == {"T.alloc_shared q_lo", "T.alloc_shared q_hi", "T.alloc_shared p_buf",
                      "T.alloc_shared kv_lo, 2 versions", "T.alloc_shared kv_hi, 2 versions"}
    assert "kv_lo = T.alloc_shared((2, 64, 64), 'float16')" in lowered.source


# -- lets the box analysis leaves unread ------------------------------------------------------------------------
def test_bounds_folded_into_a_copy_leave_no_lets_behind():
    """The masks of folded_bounds fold into the T.copy regions, so the lets computing them (rem, over, left,
    one reading the next) are unread and dropped, each in turn; the start of the box stays."""
    x, y = torch.randn(100), torch.empty(100)
    src = folded_bounds.lower(x, y, 100, B=32, grid=(4,), backend="tilelang").source
    body = src[src.index("with T.Kernel"):]
    assert re.findall(r"^\s+(\w+) = \(", body, re.M) == ["start"], src
    assert "T.copy(x_ptr[start:start + 32], t)" in body and "T.copy(t_1, y_ptr[start:start + 32])" in body
    y.fill_(float("nan"))
    interpret_tilelang(folded_bounds, (4,), x, y, 100, B=32)
    torch.testing.assert_close(y, x + 1.0)


# -- a while condition that splits the tile the loop carries ------------------------------------------------------
@tle.jit
def halve_pairs(x_ptr, y_ptr, steps_ptr, limit, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)[:, None] * 2 + tl.arange(0, 2)[None, :]
    t = tl.load(x_ptr + offs)
    steps = 0
    while _pair_spread(t) > limit:          # the carried tile itself, split into its two columns
        t = t * 0.5
        steps += 1
    tl.store(y_ptr + offs, t)
    tl.store(steps_ptr, steps)


def test_a_while_condition_splitting_the_carried_tile_reads_this_steps_tile():
    """The carried tile is split through a shared copy. The body writes the tile's slot, so the condition
    computed again at the end of a step copies it again: the copy made before the loop holds the input, and
    reading it would test the input forever."""
    x = torch.randn(16, 2) * 50
    y, steps = torch.full_like(x, float("nan")), torch.full((1,), -1, dtype=torch.int32)
    src = halve_pairs.lower(x, y, steps, 0.75, BLOCK=16, grid=(1,), backend="tilelang").source
    before, body = src.split("while go:")
    copy = r"T\.copy\((\w+), (\w+_shared\w*)\)"
    assert re.findall(copy, before) and re.findall(copy, body), src
    (copied,) = {c for _, c in re.findall(copy, body)}
    assert f"{copied}[i0, 0] - {copied}[i0, 1]" in body, src

    ref, ref_steps = x.clone(), 0
    while (ref[:, 0] - ref[:, 1]).max() > 0.75:
        ref, ref_steps = ref * 0.5, ref_steps + 1
    interpret_tilelang(halve_pairs, (1,), x, y, steps, 0.75, BLOCK=16)
    assert int(steps) == ref_steps > 3
    torch.testing.assert_close(y, ref)


@pytest.mark.parametrize("threads, fits", [(1056, 31), (2048, 1)])
def test_block_size_error_suggests_the_largest_num_warps_that_fits(threads, fits):
    """The suggestion leaves room for the threads TileLang added: 32 more than num_warps=32 fit under 31 warps
    (992 + 32 threads); when the added threads alone fill a block, it still suggests one warp."""
    from tle.lowering.errors import LoweringError
    from tle.lowering.tilelang.block_size import check_block_size
    lowered, _ = _plain_then_async()
    with pytest.raises(LoweringError, match=rf"adding {threads - 1024} producer threads to the 1024 of "
                                            rf"num_warps=32; launch it with num_warps <= {fits}$"):
        check_block_size(f"__global__ void __launch_bounds__({threads}, 1) k(", lowered.compiled.ir)


def test_device_print_of_a_tile_twice_the_block_takes_two_steps(debug_mode):
    """256 elements printed by 128 threads: two steps (element step * 128 + thread), not one step that would
    leave half the tile unprinted."""
    src = checked_tile.lower(torch.zeros(16 * 16), R=16, C=16, grid=(1,), backend="tilelang", num_warps=4).source
    assert "for step in T.serial(2):" in src and "(step * 128 + T.get_thread_binding()) // 16" in src, src


# -- a kernel body with nothing to do, or with statements and no buffers ---------------------------------------
@tle.jit
def store_if_positive(x_ptr, N: tl.constexpr):
    if N > 0:
        tl.store(x_ptr, 1.0)


def test_a_kernel_body_is_pass_only_when_it_holds_nothing(tmp_cache):
    """With N = 0 the branch folds away and the kernel body is `pass` (an empty block would not parse); with
    N = 1 it is the one store, no buffer allocated and no `pass` after it. Both run."""
    x = torch.zeros(4)
    empty = store_if_positive.lower(x, N=0, grid=(1,), backend="tilelang").source
    full = store_if_positive.lower(x, N=1, grid=(1,), backend="tilelang").source
    assert empty.rstrip().endswith("as bx:\n        pass"), empty
    assert full.rstrip().endswith("as bx:\n        x_ptr[0] = 1.0"), full
    for n, want in ((0, 0.0), (1, 1.0)):
        x.zero_()
        interpret_tilelang(store_if_positive, (1,), x, N=n)
        assert x.tolist() == [want, 0.0, 0.0, 0.0]
