"""Vector add through TLE-Raw: the kernel loads the tiles, a raw MLIR function adds them thread by thread
(`tle.call`), and the kernel stores the result. On Triton the function is element-wise, so it becomes tile
code; on TileLang it runs as written, one element per thread, on shared-memory copies of the tiles."""
from __future__ import annotations

from typing import Annotated

import torch
import triton.language as tl

import tle
from tle.checks import check_tensor
from tle.raw.mlir import arith, ir, nvvm, tensor

BLOCK_SIZE = 1024
NUM_WARPS = BLOCK_SIZE // 32     # TileLang runs the raw function on the kernel's threads: one per element


@tle.raw.language(name="mlir")
@tle.hardware_constraint(threads_dim=1, sync_scope="block")
def vector_add_tile(x: Annotated[ir.RankedTensorType, "tensor<1024xf32>"],
                    y: Annotated[ir.RankedTensorType, "tensor<1024xf32>"],
                    output: Annotated[ir.RankedTensorType, "tensor<1024xf32>"]):
    tidx = nvvm.ThreadIdXOp(ir.IntegerType.get_signless(32)).res
    bidx = nvvm.BlockIdXOp(ir.IntegerType.get_signless(32)).res
    bdimx = nvvm.BlockDimXOp(ir.IntegerType.get_signless(32)).res
    idx = arith.addi(arith.muli(bidx, bdimx), tidx)
    idx = arith.index_cast(ir.IndexType.get(), idx)
    xval = tensor.extract(x, [idx])
    yval = tensor.extract(y, [idx])
    result = arith.addf(xval, yval)
    tensor.insert(result, output, [idx])


@tle.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = tl.zeros_like(x)
    tle.call(vector_add_tile, args=[x, y, output], hardware={"threads": (BLOCK_SIZE,)},
             layout={x: {"space": "shared", "order": [0]}, y: {"space": "shared", "order": [0]},
                     output: {"space": "shared", "order": [0]}})
    tl.store(output_ptr + offsets, output, mask=mask)


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def vector_add_raw(x: torch.Tensor, y: torch.Tensor, *, backend: str | None = None) -> torch.Tensor:
    """x + y for 1-D float32 tensors, through the raw function (tiles of BLOCK_SIZE elements)."""
    check_tensor(x, "x", dtypes=(torch.float32,), rank=1, contiguous=True)
    check_tensor(y, "y", dtypes=(torch.float32,), shape=x.shape, device=x.device, contiguous=True)
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        add_kernel[(_cdiv(n, BLOCK_SIZE),)](x, y, out, n, BLOCK_SIZE=BLOCK_SIZE, backend=backend,
                                            num_warps=NUM_WARPS)
    return out


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@tle.example(add_kernel)
def _example(device, size):
    n = 5000 if size == "small" else 1 << 24        # the small one ends in a partial tile
    x = torch.randn(n, device=device, dtype=torch.float32)
    y = torch.randn(n, device=device, dtype=torch.float32)
    out = torch.full_like(x, float("nan"))
    return tle.Launch(grid=(_cdiv(n, BLOCK_SIZE),), args=(x, y, out, n),
                      kwargs=dict(BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS),
                      outputs={"output": out}, reference=lambda: {"output": reference(x, y)},
                      bytes=3 * n * x.element_size(), label=f"{n} float32")
