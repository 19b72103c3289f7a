"""Row softmax over the last dimension of a 2-D tensor, one program per row."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

import tle
from tle.checks import FLOAT_DTYPES, check_tensor


@tle.jit
def softmax_kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x_max = tl.max(x, axis=0)
    num = tl.exp(x - x_max)
    den = tl.sum(num, axis=0)
    y = num / den
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1)


def _num_warps(block_n: int) -> int:
    return 4 if block_n <= 1024 else 8 if block_n <= 4096 else 16


def softmax(x: torch.Tensor, *, backend: str | None = None) -> torch.Tensor:
    check_tensor(x, "x", dtypes=FLOAT_DTYPES, rank=2, last_dim_contiguous=True)
    m, n = x.shape
    if n > 65536:
        raise tle.LaunchError(f"'x' has {n} columns; this kernel holds a row in one tile (at most 65536)")
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    block_n = triton.next_power_of_2(n)
    if m and n:
        softmax_kernel[(m,)](x, y, x.stride(0), y.stride(0), n, BLOCK_N=block_n, backend=backend,
                             num_warps=_num_warps(block_n))
    return y


@tle.example(softmax_kernel)
def _example(device, size):
    (m, n), dtype = ((37, 1000), torch.float32) if size == "small" else ((32768, 8192), torch.bfloat16)
    x = torch.randn(m, n, device=device, dtype=dtype)
    y = torch.full_like(x, float("nan"))
    block_n = triton.next_power_of_2(n)
    return tle.Launch(grid=(m,), args=(x, y, x.stride(0), y.stride(0), n),
                      kwargs=dict(BLOCK_N=block_n, num_warps=_num_warps(block_n)),
                      outputs={"y": y}, reference=lambda: {"y": reference(x)},
                      bytes=2 * m * n * x.element_size(), label=f"{m}x{n} {str(dtype)[6:]}")
