"""Column sums of a small fp32 matrix: the second step of the weight and bias gradients of the norms.

Backward kernels give each program a block of rows and let it add up its rows' contributions to the
weight gradient in registers; each program writes one row of partial sums ([programs, N], fp32), and
this kernel adds those rows up. The input is read once; the partials are a few MB at most."""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.oplib.arith import cdiv


@tle.jit
def column_sum_kernel(p_ptr, out_ptr, n_rows, n_cols, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for r0 in range(0, n_rows, BLOCK_P):         # BLOCK_P rows a step: a loop of one row a step is latency-bound
        rows = r0 + tl.arange(0, BLOCK_P)
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        acc += tl.load(p_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=col_mask)


# narrow column blocks so that even 1024 columns spread over 16 programs
BLOCK_P, BLOCK = 32, 64


def column_sum(partials: torch.Tensor, dtype: torch.dtype, backend: str) -> torch.Tensor:
    """partials [P, N] fp32 (contiguous) -> [N] in `dtype`, summed on `backend` ("triton" or "tilelang")."""
    p, n = partials.shape
    out = torch.empty(n, device=partials.device, dtype=dtype)
    if n:
        column_sum_kernel[(cdiv(n, BLOCK),)](partials, out, p, n, BLOCK_P=BLOCK_P, BLOCK_N=BLOCK,
                                                     backend=backend, num_warps=4)
    return out


@tle.example(column_sum_kernel)
def _example(device, size):
    p, n = (5, 300) if size == "small" else (528, 8192)
    partials = torch.randn(p, n, device=device)
    out = torch.full((n,), float("nan"), device=device)
    return tle.Launch(grid=(cdiv(n, BLOCK),), args=(partials, out, p, n),
                      kwargs=dict(BLOCK_P=BLOCK_P, BLOCK_N=BLOCK, num_warps=4),
                      outputs={"out": out}, reference=lambda: {"out": partials.sum(0)},
                      bytes=(p + 1) * n * 4, label=f"{p}x{n} fp32")
