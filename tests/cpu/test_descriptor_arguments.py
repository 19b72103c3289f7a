"""Host tensor descriptors (triton.tools.tensor_descriptor.TensorDescriptor) as launch arguments, and FlagTree's
TMA copy form tle.gpu.copy(desc, buf, shape, offsets): results on both backends (Triton's interpreter; the
interpreter of TileLang programs), with blocks past the tensor's edge (padding read, nothing written), the
kernel each backend is given, the cache, and the errors."""
import pytest
import torch
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import tle
from flagtree_form_kernels import descriptor_add, descriptor_copies
from lowering_errors import assert_lowering_error

BACKENDS = ["triton", "tilelang"]


def _launch(backend, kernel, grid, *args, **kw):
    if backend == "tilelang":
        kernel.interpret_tilelang(grid, *args, **kw)
    else:
        kernel[grid](*args, backend=backend, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
def test_descriptor_arguments_past_the_edge(backend):
    a, b = torch.randn(40, 100), torch.randn(40, 100)
    c = torch.full((40, 100), float("nan"))
    descs = [TensorDescriptor.from_tensor(t, [16, 64]) for t in (a, b, c)]
    _launch(backend, descriptor_add, (3,), *descs, 128, XBLOCK=16, YBLOCK=64)     # 48 x 128 of blocks
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_tma_copy_form(backend, dtype):
    a = torch.randn(64, 96).to(dtype)
    c = torch.full((64, 96), float("nan"), dtype=dtype)
    descs = [TensorDescriptor.from_tensor(t, [32, 64]) for t in (a, c)]
    _launch(backend, descriptor_copies, (2,), *descs, 96, XBLOCK=32, YBLOCK=64)
    torch.testing.assert_close(c, a * 2, rtol=0, atol=0)


def _meta_descriptors(n, shape=(64, 128), block=(16, 64), dtype=torch.float32):
    m = torch.empty(shape, device="meta", dtype=dtype)
    return [TensorDescriptor(m, list(shape), [shape[1], 1], list(block)) for _ in range(n)]


def test_each_backend_gets_the_descriptor_of_its_parts():
    lw = descriptor_add.lower(*_meta_descriptors(3), 128, XBLOCK=16, YBLOCK=64, grid=(4,), backend="triton")
    src = lw.source
    assert "def descriptor_add(a_desc_base, a_desc_shape0, a_desc_shape1, a_desc_stride0, b_desc_base" in src
    assert ("a_desc = tl.make_tensor_descriptor(a_desc_base, shape=[a_desc_shape0, a_desc_shape1], "
            "strides=[a_desc_stride0, 1], block_shape=[16, 64], padding_option='zero')") in src
    src = descriptor_copies.lower(*_meta_descriptors(2), 128, XBLOCK=16, YBLOCK=64, grid=(4,),
                                  backend="tilelang").source
    assert "a_desc_base" in src and "T.alloc_shared((16, 64), 'float32')" in src


def test_a_new_block_shape_or_dtype_lowers_again():
    kernel = descriptor_add
    one = kernel.lower(*_meta_descriptors(3), 128, XBLOCK=16, YBLOCK=64, grid=(4,), backend="triton")
    again = kernel.lower(*_meta_descriptors(3), 128, XBLOCK=16, YBLOCK=64, grid=(4,), backend="triton")
    assert again is one
    other = kernel.lower(*_meta_descriptors(3, block=(32, 64)), 128, XBLOCK=16, YBLOCK=64, grid=(4,),
                         backend="triton")
    assert other is not one and "block_shape=[32, 64]" in other.source


def test_a_descriptor_whose_last_axis_is_strided_is_refused():
    a = torch.randn(64, 128)
    d = TensorDescriptor.from_tensor(a, [16, 64])
    d.strides = [128, 2]                       # changed after Triton's checks
    with pytest.raises(tle.LaunchError, match="a_desc': the descriptor's last axis must be contiguous"):
        descriptor_add[(1,)](d, d, d, 128, XBLOCK=16, YBLOCK=64, backend="triton")


@tle.jit
def _copy_without_offsets(a_desc, XBLOCK: tl.constexpr, YBLOCK: tl.constexpr):
    buf = tle.gpu.alloc([XBLOCK, YBLOCK], dtype=tl.float32)
    tle.gpu.copy(a_desc, buf, [XBLOCK, YBLOCK])


@tle.jit
def _copy_of_other_block(a_desc, XBLOCK: tl.constexpr, YBLOCK: tl.constexpr):
    buf = tle.gpu.alloc([XBLOCK, 2 * YBLOCK], dtype=tl.float32)
    tle.gpu.copy(a_desc, buf, [XBLOCK, 2 * YBLOCK], [0, 0])


@tle.jit
def _copy_to_pointers(a_desc, x_ptr, XBLOCK: tl.constexpr, YBLOCK: tl.constexpr):
    tle.gpu.copy(a_desc, x_ptr + tl.arange(0, XBLOCK)[:, None] + tl.arange(0, YBLOCK)[None, :], [XBLOCK, YBLOCK],
                 [0, 0])


@pytest.mark.parametrize("kernel, words", [
    (_copy_without_offsets, ["needs the block's offsets"]),
    (_copy_of_other_block, ["the descriptor's block ([16, 64] fp32) and the buffer ([16, 128] fp32) must match"]),
    (_copy_to_pointers, ["the other side must be a buffer"]),
])
def test_bad_descriptor_copies_are_errors_at_the_line(kernel, words):
    extra = [torch.empty(64, device="meta")] if kernel is _copy_to_pointers else []
    assert_lowering_error(kernel, [*_meta_descriptors(1), *extra], words, XBLOCK=16, YBLOCK=64)
