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
        shifted_copy[(3,)](x, y, n, SHIFT=5, BLOCK=16, backend="triton")        # Triton's interpreter
    else:
        shifted_copy.interpret_tilelang((3,), x, y, n, SHIFT=5, BLOCK=16)
    expect = torch.cat([x[5:] * 2.0, torch.full((5,), float("nan"))])
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
