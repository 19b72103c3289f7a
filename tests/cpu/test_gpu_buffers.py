"""tle.gpu (TLE-Struct): buffers, copies, local loads/stores and the pipelined range. Results on both
backends (Triton's interpreter; the interpreter of TileLang programs); the generated code of each backend;
the errors of bad programs."""
import pytest
import torch
import triton.language as tl

import tle
from kernel_cases import lower_example
from tilelang_oracle import run_on

BACKENDS = ["triton", "tilelang"]


@tle.jit
def scale_through_buffer(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    buf = tle.gpu.alloc([BLOCK], dtype=tl.float32, scope=tle.gpu.storage_kind.smem)
    tle.gpu.copy(x_ptr + offs, buf, [BLOCK], mask=m, other=0.0)
    old = tle.gpu.local_load(buf)
    tle.gpu.local_store(buf, old * 3.0)        # a later write must not change `old`
    new = tle.gpu.local_load(buf)
    tle.gpu.copy(buf, out_ptr + offs, [BLOCK], mask=m)
    tl.store(out_ptr + n + offs, old + new, mask=m)


@tle.jit
def running_sum_in_buffer(x_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    total = tle.gpu.alloc([BLOCK], dtype=tl.float32)
    tle.gpu.local_store(total, 0.0)
    for i in tle.gpu.pipeline(N, num_stages=2):   # the buffer carries its contents across iterations
        tle.gpu.local_store(total, tle.gpu.local_load(total) + tl.load(x_ptr + i * BLOCK + offs))
    tl.store(out_ptr + offs, tle.gpu.local_load(total))


@tle.jit
def staged_copy_loop(x_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    buf = tle.gpu.alloc([BLOCK], dtype=tl.float32)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tle.gpu.pipeline(0, N, 1, num_stages=3):   # each iteration overwrites the buffer first
        tle.gpu.copy(x_ptr + i * BLOCK + offs, buf, [BLOCK])
        acc += tle.gpu.local_load(buf)
    tl.store(out_ptr + offs, acc)


def _meta(*shapes):
    return [torch.empty(s, device="meta") for s in shapes]


@pytest.mark.parametrize("backend", BACKENDS)
def test_buffer_reads_see_the_latest_write_and_keep_earlier_tiles(backend):
    n, block = 100, 64
    x = torch.randn(n)
    out = torch.full((2 * n,), float("nan"))
    run_on(backend, scale_through_buffer, (2,), x, out, n, BLOCK=block)
    torch.testing.assert_close(out[:n], x * 3)
    torch.testing.assert_close(out[n:], x + x * 3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kernel", [running_sum_in_buffer, staged_copy_loop], ids=lambda k: k.__name__)
def test_buffer_carried_by_a_loop(kernel, backend):
    x = torch.randn(5 * 32)
    out = torch.full((32,), float("nan"))      # each kernel gets its own unwritten output
    run_on(backend, kernel, (1,), x, out, N=5, BLOCK=32)
    torch.testing.assert_close(out, x.view(5, 32).sum(0))


def test_ir_has_buffer_types_and_versions():
    ir = scale_through_buffer.lower(*_meta(100, 200), 100, BLOCK=64, grid=(2,), backend="triton").ir
    assert "alloc {scope=smem} : smem<64xfp32>" in ir
    assert "copy_in" in ir and "into=%buf" in ir
    assert "local_store %buf.1" in ir and "copy_out" in ir


def test_triton_keeps_buffers_in_registers_and_says_so():
    lw = staged_copy_loop.lower(*_meta(160, 32), N=5, BLOCK=32, grid=(1,), backend="triton")
    src = lw.source
    assert "a register tile (stock Triton has no explicit shared memory)" in src
    assert "for i in tl.range(5, num_stages=3):" in src
    # every iteration overwrites the buffer first: the loop does not carry it
    assert "buf = tl.load(x_ptr + i * 32 + offs)" in src and "buf = tl.full" not in src
    sites = {(op, how) for _, op, _, how in lw.compiled.access_report}
    assert ("tle.gpu.pipeline", "tl.range(num_stages=3): Triton's software pipelining") in sites


def test_tilelang_uses_shared_buffers_copies_and_a_pipelined_loop():
    lw = staged_copy_loop.lower(*_meta(160, 32), N=5, BLOCK=32, grid=(1,), backend="tilelang")
    src = lw.source
    assert "buf = T.alloc_shared((32,), 'float32')" in src
    assert "for i in T.Pipelined(5, num_stages=3):" in src
    assert "T.copy(x_ptr[i * 32:i * 32 + 32], buf)" in src
    report = {op: how for _, op, _, how in lw.compiled.access_report}
    assert report["tle.gpu.local_load"] == "reads buf in place"


def test_tilelang_copies_a_tile_the_buffer_outlives():
    src = scale_through_buffer.lower(*_meta(100, 200), 100, BLOCK=64, grid=(2,), backend="tilelang").source
    # `old` is read after the buffer is rewritten: it is copied out first
    assert "T.copy(buf, old)" in src


def test_matmul_with_tle_gpu_staging_feeds_the_buffers_to_gemm():
    from tle.kernels.examples.matmul_smem import matmul_smem_kernel
    src = lower_example(matmul_smem_kernel, "tilelang").source
    assert "T.gemm(a_smem, b_smem, acc)" in src and "T.Pipelined(" in src


@tle.jit
def _buffer_arithmetic(x_ptr):
    buf = tle.gpu.alloc([16], dtype=tl.float32)
    tl.store(x_ptr + tl.arange(0, 16), buf + 1.0)


@tle.jit
def _buffer_to_dot(x_ptr):
    buf = tle.gpu.alloc([16, 16], dtype=tl.float16)
    tl.dot(buf, tl.load(x_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :]))


@tle.jit
def _tensor_memory(x_ptr):
    tle.gpu.alloc([16], dtype=tl.float32, scope=tle.gpu.storage_kind.tmem)


@tle.jit
def _with_layout(x_ptr):
    tle.gpu.alloc([16], dtype=tl.float32, layout="swizzled")


@tle.jit
def _copy_wrong_shape(x_ptr):
    buf = tle.gpu.alloc([16], dtype=tl.float32)
    tle.gpu.copy(x_ptr + tl.arange(0, 32), buf, [32])


@tle.jit
def _copy_wrong_dtype(x_ptr):
    buf = tle.gpu.alloc([16], dtype=tl.float16)
    tle.gpu.copy(x_ptr + tl.arange(0, 16), buf, [16])


@tle.jit
def _copy_without_buffer(x_ptr):
    tle.gpu.copy(x_ptr + tl.arange(0, 16), x_ptr + tl.arange(0, 16), [16])


@tle.jit
def _pipeline_bad_kwarg(x_ptr):
    for i in tle.gpu.pipeline(4, stages=2):
        pass


@tle.jit
def _local_load_of_tile(x_ptr):
    tle.gpu.local_load(tl.load(x_ptr + tl.arange(0, 16)))


@pytest.mark.parametrize("kernel, words", [
    (_buffer_arithmetic, ["tle.gpu buffer", "tle.gpu.local_load(buf)"]),
    (_buffer_to_dot, ["dot got a tle.gpu buffer", "local_load"]),
    (_tensor_memory, ["storage kind 'tmem'", "the storage kinds: smem (shared memory)"]),
    (_with_layout, ["layout must be a tle.gpu layout", "'swizzled'"]),
    (_copy_wrong_shape, ["shape [32] differs from the buffer's [16]"]),
    (_copy_wrong_dtype, ["points to fp32", "holds fp16"]),
    (_copy_without_buffer, ["one of src and dst must be a buffer"]),
    (_pipeline_bad_kwarg, ["tle.gpu.pipeline", "num_stages", "stages"]),
    (_local_load_of_tile, ["must be a buffer from tle.gpu.alloc", "tile of type"]),
])
def test_bad_programs_are_errors_at_the_line(kernel, words):
    with pytest.raises(tle.LoweringError) as e:
        kernel.lower(torch.empty(256, device="meta"), grid=(1,), backend="triton")
    msg = str(e.value)
    assert "test_gpu_buffers.py:" in msg
    for w in words:
        assert w in msg, msg


@tle.jit
def _buffer_chosen_at_runtime(x_ptr, flag):
    a = tle.gpu.alloc([16], dtype=tl.float32)
    b = tle.gpu.alloc([16], dtype=tl.float32)
    tle.gpu.local_store(a, 1.0)
    tle.gpu.local_store(b, 2.0)
    c = a
    if flag > 0:
        c = b
    tl.store(x_ptr + tl.arange(0, 16), tle.gpu.local_load(c))


def test_a_buffer_chosen_at_runtime_runs_on_triton_and_is_an_error_on_tilelang():
    x = torch.empty(16)
    _buffer_chosen_at_runtime[(1,)](x, 1, backend="triton")
    assert (x == 2).all()
    _buffer_chosen_at_runtime[(1,)](x, 0, backend="triton")
    assert (x == 1).all()
    with pytest.raises(tle.UnsupportedConstruct) as e:
        _buffer_chosen_at_runtime.lower(torch.empty(16, device="meta"), 1, grid=(1,), backend="tilelang")
    assert "tilelang" in str(e.value) and "different allocations" in str(e.value)


def test_outside_a_kernel_the_functions_say_so():
    with pytest.raises(RuntimeError, match="inside a @tle.jit kernel"):
        tle.gpu.alloc([16], tl.float32)


@pytest.mark.slow
def test_triton_stages_compile_under_the_interpreter():
    """tl.max and tl.sum are interpreter functions under TRITON_INTERPRET=1: the stages are compiled in a
    process of their own."""
    from tle.kernels.softmax import softmax_kernel
    launch = softmax_kernel.example("cpu", "small")
    lw = softmax_kernel.lower(*launch.args, grid=launch.grid, backend="triton", **launch.kwargs)
    assert "tt.reduce" in lw.stage("ttir")
