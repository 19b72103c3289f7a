"""RMSNorm forward over the last dimension: y = x / sqrt(mean(x^2) + eps) * w."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

import tle
from tle.checks import FLOAT_DTYPES, check_tensor


@tle.jit
def rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean_sq = tl.sum(x * x, axis=0) / n_cols
    rstd = tl.rsqrt(mean_sq + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x * rstd * w
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def reference(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def _num_warps(block_n: int) -> int:
    return 4 if block_n <= 1024 else 8 if block_n <= 4096 else 16


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6, *, backend: str | None = None) -> torch.Tensor:
    check_tensor(x, "x", dtypes=FLOAT_DTYPES, rank=2, last_dim_contiguous=True)
    m, n = x.shape
    check_tensor(w, "w", dtypes=FLOAT_DTYPES, shape=(n,), device=x.device, contiguous=True)
    if n > 65536:
        raise tle.LaunchError(f"'x' has {n} columns; this kernel holds a row in one tile (at most 65536)")
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    block_n = triton.next_power_of_2(n)
    if m and n:
        rmsnorm_fwd_kernel[(m,)](x, w, y, x.stride(0), y.stride(0), n, float(eps), BLOCK_N=block_n,
                                 backend=backend, num_warps=_num_warps(block_n))
    return y


@tle.example(rmsnorm_fwd_kernel)
def _example(device, size):
    (m, n), dtype = ((33, 1000), torch.float32) if size == "small" else ((32768, 8192), torch.bfloat16)
    x = torch.randn(m, n, device=device, dtype=dtype)
    w = torch.rand(n, device=device, dtype=dtype) + 0.5
    y = torch.full_like(x, float("nan"))
    block_n = triton.next_power_of_2(n)
    return tle.Launch(grid=(m,), args=(x, w, y, x.stride(0), y.stride(0), n, 1e-6),
                      kwargs=dict(BLOCK_N=block_n, num_warps=_num_warps(block_n)),
                      outputs={"y": y}, reference=lambda: {"y": reference(x, w)},
                      bytes=2 * m * n * x.element_size() + n * w.element_size(), label=f"{m}x{n} {str(dtype)[6:]}")
