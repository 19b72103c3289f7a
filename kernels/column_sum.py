"""Column sums of a small fp32 matrix: the second step of the weight and bias gradients of the norms.

Backward kernels give each program a block of rows and let it add up its rows' contributions to the
weight gradient in registers; each program writes one row of partial sums ([programs, N], fp32), and
this kernel adds those rows up. The input is read once; the partials are a few MB at most. Where a backward has
two such gradients (a weight's and a bias's), `column_sums` adds up both in one launch: one launch less on the
host, which at small shapes is what the backward's time is made of."""
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


@tle.jit
def column_sums_kernel(p_ptr, out_a_ptr, out_b_ptr, n_rows, n_cols, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    # p_ptr: [2, n_rows, n_cols]; program (i, 0) adds up column block i of the first matrix into out_a, (i, 1) of
    # the second into out_b
    which = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for r0 in range(0, n_rows, BLOCK_P):
        rows = r0 + tl.arange(0, BLOCK_P)
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        acc += tl.load(p_ptr + (which * n_rows + rows[:, None]).to(tl.int64) * n_cols + cols[None, :], mask=mask,
                       other=0.0)
    total = tl.sum(acc, axis=0)
    tl.store(out_a_ptr + cols, total.to(out_a_ptr.dtype.element_ty), mask=col_mask & (which == 0))
    tl.store(out_b_ptr + cols, total.to(out_b_ptr.dtype.element_ty), mask=col_mask & (which == 1))


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


def column_sums(partials: torch.Tensor, dtype_a: torch.dtype, dtype_b: torch.dtype,
                backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    """partials [2, P, N] fp32 (contiguous) -> the column sums of partials[0] in `dtype_a` and of partials[1] in
    `dtype_b` ([N] each, two tensors), in one launch on `backend`."""
    _, p, n = partials.shape
    out_a = torch.empty(n, device=partials.device, dtype=dtype_a)
    out_b = torch.empty(n, device=partials.device, dtype=dtype_b)
    if n:
        column_sums_kernel[(cdiv(n, BLOCK), 2)](partials, out_a, out_b, p, n, BLOCK_P=BLOCK_P, BLOCK_N=BLOCK,
                                                 backend=backend, num_warps=4)
    return out_a, out_b


def parameter_grads(parts: torch.Tensor, weight, bias, backend: str, nonempty: bool):
    """(weight's gradient, bias's gradient) of a norm's backward, None for a parameter not given: the column sums
    of parts [K, P, N] (K: 2 with both parameters, the weight's partials first; 1 with one; 0 with none), zeros
    where the input had no rows."""
    if not nonempty:
        return (torch.zeros_like(weight) if weight is not None else None,
                torch.zeros_like(bias) if bias is not None else None)
    if weight is not None and bias is not None:
        return column_sums(parts, weight.dtype, bias.dtype, backend)
    if weight is not None:
        return column_sum(parts[0], weight.dtype, backend), None
    return None, (column_sum(parts[0], bias.dtype, backend) if bias is not None else None)


@tle.example(column_sum_kernel)
def _example(device, size):
    p, n = (5, 300) if size == "small" else (528, 8192)
    partials = torch.randn(p, n, device=device)
    out = torch.full((n,), float("nan"), device=device)
    return tle.Launch(grid=(cdiv(n, BLOCK),), args=(partials, out, p, n),
                      kwargs=dict(BLOCK_P=BLOCK_P, BLOCK_N=BLOCK, num_warps=4),
                      outputs={"out": out}, reference=lambda: {"out": partials.sum(0)},
                      bytes=(p + 1) * n * 4, label=f"{p}x{n} fp32")


@tle.example(column_sums_kernel)
def _pair_example(device, size):
    p, n = (5, 300) if size == "small" else (528, 8192)
    partials = torch.randn(2, p, n, device=device)
    out_a, out_b = (torch.full((n,), float("nan"), device=device) for _ in range(2))
    return tle.Launch(grid=(cdiv(n, BLOCK), 2), args=(partials, out_a, out_b, p, n),
                      kwargs=dict(BLOCK_P=BLOCK_P, BLOCK_N=BLOCK, num_warps=4),
                      outputs={"out_a": out_a, "out_b": out_b},
                      reference=lambda: {"out_a": partials[0].sum(0), "out_b": partials[1].sum(0)},
                      bytes=2 * (p + 1) * n * 4, label=f"2x{p}x{n} fp32")
