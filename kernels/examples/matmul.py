"""Matrix product C = A @ B: fp16/bf16 inputs, fp32 accumulation, a K loop, edge masks on M, N and K."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

import tle
from tle.checks import check_tensor


@tle.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  NUM_STAGES: tl.constexpr):
    # grouped program order: GROUP_M row-blocks share the same B column-blocks while they are in L2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=NUM_STAGES):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.float() @ b.float()


# One configuration per size class; tuned on the H200 (see docs/benchmark/matmul.md).
CONFIG_LARGE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, NUM_STAGES=3, num_warps=8)
CONFIG_SMALL = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4, NUM_STAGES=2, num_warps=4)


def _config(m, n, k):
    return CONFIG_LARGE if min(m, n) >= 2048 else CONFIG_SMALL


def _grid(m, n, cfg):
    return (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)


def check_operands(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int]:
    """(m, k, n) of a product's operands, or a LaunchError naming the bad one."""
    check_tensor(a, "a", dtypes=(torch.float16, torch.bfloat16), rank=2)
    check_tensor(b, "b", dtypes=(a.dtype,), rank=2, device=a.device)
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise tle.LaunchError(f"'a' is {m}x{k} and 'b' is {k2}x{n}: inner dimensions differ")
    return m, k, n


def launch_args(a, b, c) -> tuple:
    """The positional arguments of the matmul kernels for these tensors."""
    (m, k), n = a.shape, b.shape[1]
    return (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def matmul(a: torch.Tensor, b: torch.Tensor, *, backend: str | None = None) -> torch.Tensor:
    return run(matmul_kernel, a, b, backend, _config, _grid)


def run(kernel, a, b, backend, config, grid) -> torch.Tensor:
    """Check the operands and launch `kernel` (of the matmul kernels' calling convention) with
    cfg = `config(m, n, k)` on `grid(m, n, cfg)`; with an empty inner dimension the product is zeros."""
    m, k, n = check_operands(a, b)
    c = torch.empty((m, n), device=a.device, dtype=a.dtype)
    if m and n:
        if k == 0:
            return c.zero_()
        cfg = config(m, n, k)
        kernel[grid(m, n, cfg)](*launch_args(a, b, c), backend=backend, **cfg)
    return c


def example_launch(device, size, grid_of, config_small, config_large) -> "tle.Launch":
    """The example product of a size class for a matmul kernel with this grid and these configurations."""
    (m, n, k), dtype = ((96, 80, 72), torch.float16) if size == "small" else ((8192, 8192, 8192), torch.bfloat16)
    a = (torch.randn(m, k, device=device) / k ** 0.5).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    c = torch.full((m, n), float("nan"), device=device, dtype=dtype)
    cfg = config_small if size == "small" else config_large
    return tle.Launch(grid=grid_of(m, n, cfg), args=launch_args(a, b, c), kwargs=dict(cfg), outputs={"c": c},
                      reference=lambda: {"c": reference(a, b)}, flops=2 * m * n * k,
                      label=f"{m}x{n}x{k} {str(dtype)[6:]}")


@tle.example(matmul_kernel)
def _example(device, size):
    return example_launch(device, size, _grid, CONFIG_SMALL, CONFIG_LARGE)
