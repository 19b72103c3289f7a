"""tle.gpu.local_ptr (FlagTree's feature/tle_local_ptr form): tl.load and tl.store through pointers into a
tle.gpu buffer, whole or at flat element offsets, in loops and in products. Results on both backends
(Triton's interpreter; the interpreter of TileLang programs, which also reports races between the threads of
a T.Parallel loop), the code each writes, the errors of bad uses, and TileLang's CUDA for sm_90a."""
import pytest
import torch
import triton.language as tl

import tle
from flagtree_form_kernels import axpy_through_pointers, slices_in_a_loop, product_of_pointer_slices
from lowering_errors import assert_lowering_error
from tilelang_oracle import run_on

BACKENDS = ["triton", "tilelang"]





@tle.jit
def growing_prefix(out_ptr, STEPS: tl.constexpr, W: tl.constexpr):
    """Each step stores W elements through the pointers and reads the whole buffer: the buffer is carried
    from step to step (a store writes some elements, not the buffer)."""
    buf = tle.gpu.alloc([STEPS * W], dtype=tl.float32)
    tle.gpu.local_store(buf, 0.0)
    for i in range(STEPS):
        tl.store(tle.gpu.local_ptr(buf, offsets=i * W + tl.arange(0, W)), i + 1.0)
        tl.store(out_ptr + i * STEPS * W + tl.arange(0, STEPS * W), tl.load(tle.gpu.local_ptr(buf)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_partly_stored_buffer_is_carried_by_the_loop(backend):
    out = torch.full((4, 16), float("nan"))
    run_on(backend, growing_prefix, (1,), out, STEPS=4, W=4)
    ref = torch.where(torch.arange(16)[None, :] < 4 * (torch.arange(4)[:, None] + 1),
                      (torch.arange(16) // 4 + 1.0)[None, :], 0.0)
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_whole_buffer_pointers_with_masks(backend):
    x, y = torch.randn(100), torch.randn(100)
    out = torch.full((100,), float("nan"))
    run_on(backend, axpy_through_pointers, (2,), x, y, out, 100, 1.5, BLOCK=64)
    torch.testing.assert_close(out, 1.5 * x + y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_offset_pointers_in_a_loop(backend):
    x = torch.randn(8, 16)
    out = torch.full((8, 16), float("nan"))
    run_on(backend, slices_in_a_loop, (1,), x, out, R=8, C=16, S=4)
    ref = (x * 2 + torch.arange(16).div(4, rounding_mode="floor")).flatten().flip(0).view(8, 16)
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_products_of_pointer_slices(backend):
    a, b = torch.randn(32, 64).half(), torch.randn(64, 32).half()
    c = torch.full((32, 32), float("nan"))
    run_on(backend, product_of_pointer_slices, (1,), a, b, c, M=32, N=32, K=64, PARTS=2)
    torch.testing.assert_close(c, a.float() @ b.float(), atol=5e-3, rtol=5e-3)


def _lowered(backend):
    m = [torch.empty(8, 16, device="meta")] * 2
    return slices_in_a_loop.lower(*m, R=8, C=16, S=4, grid=(1,), backend=backend)


def test_triton_gathers_from_and_selects_into_the_register_tile():
    lw = _lowered("triton")
    src = lw.source
    assert "tl.gather(flat, tl.reshape(offsets, [32]), 0)" in src
    assert "writer = tl.max(tl.where(hit, tl.arange(0, 32)[None, :], -1), axis=1)" in src
    assert "buf = local_scatter(buf, " in src
    report = {(op, how) for _, op, _, how in lw.compiled.access_report}
    assert ("tle.gpu.local_scatter", "a select over the register tile's elements (a store through "
            "tle.gpu.local_ptr)") in report


def test_tilelang_reads_and_writes_the_shared_buffer_between_barriers():
    src = _lowered("tilelang").source
    assert "buf = T.alloc_shared((8, 16), 'float32')" in src
    assert "v = buf[offset // 16, offset % 16]" not in src
    assert "= buf[offset // 16, offset % 16]" in src
    assert "buf[offset_1 // 16, offset_1 % 16] = " in src
    assert src.count("T.sync_threads()") >= 4


@tle.jit
def _pointer_of_tile(x_ptr):
    tle.gpu.local_ptr(tl.load(x_ptr + tl.arange(0, 16)))


@tle.jit
def _float_offsets(x_ptr):
    buf = tle.gpu.alloc([16], dtype=tl.float32)
    tle.gpu.local_ptr(buf, offsets=tl.arange(0, 16) * 1.0)


@tle.jit
def _cache_hint(x_ptr):
    buf = tle.gpu.alloc([16], dtype=tl.float32)
    tl.load(tle.gpu.local_ptr(buf), eviction_policy="evict_last")


@tle.jit
def _other_without_mask(x_ptr):
    buf = tle.gpu.alloc([16], dtype=tl.float32)
    tl.load(tle.gpu.local_ptr(buf), other=0.0)


@tle.jit
def _moved_by_float(x_ptr):
    buf = tle.gpu.alloc([16], dtype=tl.float32)
    tle.gpu.local_ptr(buf) + 0.5


@tle.jit
def _value_of_other_shape(x_ptr):
    buf = tle.gpu.alloc([16], dtype=tl.float32)
    tl.store(tle.gpu.local_ptr(buf, offsets=tl.arange(0, 8)), tl.zeros([16], dtype=tl.float32))


@tle.jit
def _in_pipelined_loop(x_ptr):
    buf = tle.gpu.alloc([16], dtype=tl.float32)
    for i in tle.gpu.pipeline(0, 4, num_stages=2):
        tle.gpu.copy(x_ptr + i * 16 + tl.arange(0, 16), buf, [16])
        tl.store(x_ptr + tl.arange(0, 16), tl.load(tle.gpu.local_ptr(buf, offsets=15 - tl.arange(0, 16))))


@pytest.mark.parametrize("kernel, backend, words", [
    (_pointer_of_tile, "triton", ["local_ptr's first argument must be a buffer"]),
    (_float_offsets, "triton", ["offsets must be an integer tile"]),
    (_cache_hint, "triton", ["mask and other only", "eviction_policy"]),
    (_other_without_mask, "triton", ["`other` given without `mask`"]),
    (_moved_by_float, "triton", ["moves by integers"]),
    (_value_of_other_shape, "triton", ["the value of a store through a tle.gpu.local_ptr"]),
    (_in_pipelined_loop, "tilelang", ["tl.load through tle.gpu.local_ptr in a pipelined loop", "barriers"]),
])
def test_bad_uses_are_errors_at_the_line(kernel, backend, words):
    assert_lowering_error(kernel, [torch.empty(64, device="meta")], words, backend)


@pytest.mark.slow
def test_local_pointers_compile_for_sm_90a():
    if tle.available_backends().get("tilelang") is not None:
        pytest.skip("TileLang backend unavailable")
    x = torch.zeros(8, 16)
    lowered = slices_in_a_loop.lower(x, x, R=8, C=16, S=4, grid=(1,), backend="tilelang")
    assert "__syncthreads();" in lowered.stage("cuda") and ".entry slices_in_a_loop" in lowered.stage("ptx")


@tle.jit
def copies_and_pointers_in_a_loop(x_ptr, out_ptr, CHUNKS: tl.constexpr, BLOCK: tl.constexpr):
    """A copy into the buffer and pointer accesses in one loop: TileLang does not pipeline it by itself."""
    buf = tle.gpu.alloc([BLOCK], dtype=tl.float32)
    for c in range(CHUNKS):
        offs = c * BLOCK + tl.arange(0, BLOCK)
        tle.gpu.copy(x_ptr + offs, buf, [BLOCK])
        p = tle.gpu.local_ptr(buf, offsets=BLOCK - 1 - tl.arange(0, BLOCK))
        tl.store(p, tl.load(p) * 3)
        tle.gpu.copy(buf, out_ptr + offs, [BLOCK])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_of_copies_and_pointer_accesses(backend):
    x = torch.randn(4 * 32)
    out = torch.full((4 * 32,), float("nan"))
    run_on(backend, copies_and_pointers_in_a_loop, (1,), x, out, CHUNKS=4, BLOCK=32)
    torch.testing.assert_close(out, x * 3)
    if backend == "tilelang":
        src = copies_and_pointers_in_a_loop.lower(x, out, CHUNKS=4, BLOCK=32, grid=(1,), backend="tilelang").source
        assert "T.Pipelined" not in src and "for c in T.serial(4):" in src
