"""Element-wise vector add: out = x + y."""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.checks import FLOAT_DTYPES, check_tensor


@tle.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.float() + y.float()


def add(x: torch.Tensor, y: torch.Tensor, *, backend: str | None = None, block_size: int = 4096,
        num_warps: int = 8) -> torch.Tensor:
    check_tensor(x, "x", dtypes=FLOAT_DTYPES, rank=1, contiguous=True)
    check_tensor(y, "y", dtypes=(x.dtype,), shape=x.shape, device=x.device, contiguous=True)
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        add_kernel[(triton_cdiv(n, block_size),)](x, y, out, n, BLOCK_SIZE=block_size, backend=backend,
                                                  num_warps=num_warps)
    return out


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


@tle.example(add_kernel)
def _example(device, size):
    n, block = (5000, 1024) if size == "small" else (1 << 28, 4096)
    dtype = torch.float32 if size == "small" else torch.bfloat16
    x = torch.randn(n, device=device, dtype=dtype)
    y = torch.randn(n, device=device, dtype=dtype)
    out = torch.full_like(x, float("nan"))
    return tle.Launch(grid=(triton_cdiv(n, block),), args=(x, y, out, n),
                      kwargs=dict(BLOCK_SIZE=block, num_warps=4 if size == "small" else 8),
                      outputs={"out": out}, reference=lambda: {"out": reference(x, y)},
                      bytes=3 * n * x.element_size(), label=f"{n} {str(dtype)[6:]}")
