"""tle.call on the device: the raw vector add on both backends against torch, a call in a loop and a
branch, a 2-D thread domain, and (TileLang only) a function whose threads read each other's elements."""
from typing import Annotated

import pytest
import torch
import triton.language as tl

pytest.importorskip("jaxlib.mlir")

import tle  # noqa: E402
from tle.kernels.examples.raw_vector_add import vector_add_raw  # noqa: E402
from tle.raw.mlir import arith, ir, nvvm, tensor  # noqa: E402
from raw_functions import thread_index, triple_2d  # noqa: E402

BACKENDS = ("triton", "tilelang")
F128 = Annotated[ir.RankedTensorType, "tensor<128xf32>"]


@tle.raw.language(name="mlir")
@tle.hardware_constraint(threads_dim=1, sync_scope="none")
def accumulate(x: F128, acc: F128):
    i = thread_index(nvvm.ThreadIdXOp)
    tensor.insert(arith.addf(tensor.extract(acc, [i]), tensor.extract(x, [i])), acc, [i])


@tle.raw.language(name="mlir")
def rotate(x: F128, out: F128):
    """out[t] = x[(t + 1) % 128]: each thread reads its neighbour's element."""
    i = thread_index(nvvm.ThreadIdXOp)
    j = arith.remsi(arith.addi(i, arith.constant(ir.IndexType.get(), 1)), arith.constant(ir.IndexType.get(), 128))
    tensor.insert(tensor.extract(x, [j]), out, [i])


@tle.jit
def loop_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    acc = tl.zeros_like(x)
    for i in range(n):
        tle.call(accumulate, args=[x, acc], hardware={"threads": (BLOCK,)})
        if i % 2 == 0:
            tle.call(accumulate, args=[x, acc], hardware={"threads": (BLOCK,)})
    tl.store(o_ptr + offs, acc)


@tle.jit
def rotate_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    for _ in range(n):
        out = tl.zeros_like(x)
        tle.call(rotate, args=[x, out], hardware={"threads": (BLOCK,)})
        x = out
    tl.store(o_ptr + offs, x)


@tle.jit
def kernel_2d(x_ptr, o_ptr):
    offs = tl.program_id(0) * 128 + tl.arange(0, 4)[:, None] * 32 + tl.arange(0, 32)[None, :]
    x = tl.load(x_ptr + offs)
    out = tl.zeros_like(x)
    tle.call(triple_2d, args=[x, out], hardware={"threads": (32, 4)})
    tl.store(o_ptr + offs, out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 5000, (1 << 20) + 3, 1 << 24])
def test_raw_vector_add(backend, n):
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    torch.testing.assert_close(vector_add_raw(x, y, backend=backend), x + y, atol=0, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [0, 3, 4])
def test_call_in_a_loop_and_a_branch(backend, n):
    x = torch.randn(8 * 128, device="cuda")
    out = torch.full_like(x, float("nan"))
    loop_kernel[(8,)](x, out, n, BLOCK=128, backend=backend)
    torch.testing.assert_close(out, x * (n + (n + 1) // 2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_2d_threads(backend):
    x = torch.randn(6 * 128, device="cuda")
    out = torch.full_like(x, float("nan"))
    kernel_2d[(6,)](x, out, backend=backend)
    torch.testing.assert_close(out, 3 * x)


def test_threads_exchanging_elements_on_tilelang():
    x = torch.randn(4 * 128, device="cuda")
    out = torch.full_like(x, float("nan"))
    rotate_kernel[(4,)](x, out, 5, BLOCK=128, backend="tilelang")
    torch.testing.assert_close(out, torch.roll(x.view(4, 128), -5, dims=1).reshape(-1), atol=0, rtol=0)
