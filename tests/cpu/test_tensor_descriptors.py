"""Tensor descriptors checked as Triton checks them, on both backends, with errors naming the construct
and the kernel's line; `padding_option="nan"` read back through both CPU interpreters."""
import pytest
import torch
import triton.language as tl

import tle
from tle.lowering.errors import LoweringError


@tle.jit
def shifted_copy(x_ptr, y_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    src = tl.make_tensor_descriptor(x_ptr, [n], [1], [BLOCK], padding_option="nan")
    dst = tl.make_tensor_descriptor(y_ptr, [n], [1], [BLOCK])
    start = tl.program_id(0) * BLOCK
    dst.store([start], src.load([start + SHIFT]) * 2.0)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_a_window_past_the_end_reads_the_padding(backend):
    n = 40
    x, y = torch.randn(n), torch.full((n,), -1.0)
    if backend == "triton":
        # Triton's interpreter, through the descriptor itself (Triton wants a last-axis offset of whole 16 bytes)
        shifted_copy[(3,)](x, y, n, SHIFT=4, BLOCK=16, backend="triton")
    else:
        shifted_copy.interpret_tilelang((3,), x, y, n, SHIFT=4, BLOCK=16)
    expect = torch.cat([x[4:] * 2.0, torch.full((4,), float("nan"))])
    torch.testing.assert_close(y, expect, equal_nan=True)


@tle.jit
def narrow_rows(x_ptr, BLOCK: tl.constexpr):
    d = tl.make_tensor_descriptor(x_ptr, [64, 64], [64, 1], [16, BLOCK])
    d.store([0, 0], d.load([0, 0]))


@tle.jit
def strided_rows(x_ptr, STRIDE: tl.constexpr):
    d = tl.make_tensor_descriptor(x_ptr, [64, 64], [64, STRIDE], [16, 16])
    d.store([0, 0], d.load([0, 0]))


@tle.jit
def nan_padded_ints(x_ptr):
    d = tl.make_tensor_descriptor(x_ptr, [64], [1], [16], padding_option="nan")
    d.store([0], d.load([0]))


@tle.jit
def wrong_rank_offsets(x_ptr):
    d = tl.make_tensor_descriptor(x_ptr, [64, 64], [64, 1], [16, 16])
    d.store([0, 0], d.load([0]))


@pytest.mark.parametrize("kernel, args, match", [
    (narrow_rows, (torch.empty(64 * 64),), r"make_tensor_descriptor: the last axis of block_shape must span at "
                                           r"least 16 bytes, got 2 x 4 = 8"),
    (strided_rows, (torch.empty(64 * 64),), r"make_tensor_descriptor: the last axis must be contiguous"),
    (nan_padded_ints, (torch.empty(64, dtype=torch.int32),), r"padding_option='nan' on an integer tensor"),
    (wrong_rank_offsets, (torch.empty(64 * 64),), r"desc\.load: 1 offsets for a descriptor of rank 2"),
])
@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_descriptor_errors_name_the_construct_and_line(kernel, args, match, backend):
    kw = {"narrow_rows": {"BLOCK": 2}, "strided_rows": {"STRIDE": 2}}.get(kernel.__name__, {})
    with pytest.raises(LoweringError, match=match) as e:
        kernel.lower(*args, grid=(1,), backend=backend, **kw)
    assert "test_tensor_descriptors.py:" in str(e.value)


def _corpus_descriptor_matmul():
    from tests import syntax_corpus
    return syntax_corpus.descriptor_matmul, syntax_corpus.tensor_descriptors("cpu")


def test_triton_writes_the_descriptors_back_and_compiles_them_to_tma():
    kernel, launch = _corpus_descriptor_matmul()
    lowered = kernel.lower(*launch.args, grid=launch.grid, backend="triton", **launch.kwargs)
    src = lowered.source
    # as the kernel wrote them: Triton converts the extents and strides itself, and wants the literal 1
    assert "a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[32, 32], " \
           "padding_option='zero')" in src
    assert "a_desc.load([off_m, k])" in src and "c_desc.store([off_m, off_n], acc.to(tl.float16))" in src
    assert "s_desc.atomic_add([off_m, off_n], acc)" in src
    assert "tl.load(" not in src and "tl.store(" not in src
    ptx = lowered.stage("ptx")          # sm_90a: the loads are TMA copies, the reduction a TMA reduction
    assert "cp.async.bulk.tensor" in ptx and "cp.reduce.async.bulk.tensor" in ptx


def test_tilelang_reads_each_descriptor_access_as_its_window():
    kernel, launch = _corpus_descriptor_matmul()
    src = kernel.lower(*launch.args, grid=launch.grid, backend="tilelang", **launch.kwargs).source
    assert "make_tensor_descriptor" not in src and "_desc" not in src
    assert "T.copy(a_ptr_v[" in src and "T.copy(b_ptr_v[" in src and "T.atomic_add(s_ptr[" in src


@tle.jit
def int64_sums(x_ptr):
    d = tl.make_tensor_descriptor(x_ptr, [64], [1], [16])
    d.atomic_add([0], d.load([0]))


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_a_descriptor_reduction_on_memory_triton_cannot_add(backend):
    with pytest.raises(LoweringError, match=r"desc\.atomic_add on i64 memory: Triton's descriptor reductions "
                                            r"add u32, i32, u64, fp32, fp16, bf16") as e:
        int64_sums.lower(torch.empty(64, dtype=torch.int64), grid=(1,), backend=backend)
    assert "test_tensor_descriptors.py:" in str(e.value)
