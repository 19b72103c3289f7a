"""Matrix product C = A @ B with explicit staging: A and B tiles are copied into tle.gpu shared-memory
buffers inside a pipelined K loop, the product reads the buffers, and C leaves through a buffer too.

The same operator as kernels/examples/matmul.py, written with TLE-Struct. On TileLang the buffers are the
T.alloc_shared operands of T.gemm and the loop is T.Pipelined; on Triton they are register tiles and
the loop is tl.range(num_stages=...), whose pipelining stages the operands through shared memory.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

import tle
from tle.kernels.examples.matmul import example_launch, run


@tle.jit
def matmul_smem_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                       stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       NUM_STAGES: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    dtype = a_ptr.dtype.element_ty

    a_smem = tle.gpu.alloc([BLOCK_M, BLOCK_K], dtype=dtype, scope=tle.gpu.storage_kind.smem)
    b_smem = tle.gpu.alloc([BLOCK_K, BLOCK_N], dtype=dtype, scope=tle.gpu.storage_kind.smem)
    c_smem = tle.gpu.alloc([BLOCK_M, BLOCK_N], dtype=c_ptr.dtype.element_ty, scope=tle.gpu.storage_kind.smem)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tle.gpu.pipeline(0, tl.cdiv(K, BLOCK_K), num_stages=NUM_STAGES):
        k_offs = k * BLOCK_K + offs_k
        a_ptrs = a_ptr + offs_m[:, None] * stride_am + k_offs[None, :] * stride_ak
        b_ptrs = b_ptr + k_offs[:, None] * stride_bk + offs_n[None, :] * stride_bn
        tle.gpu.copy(a_ptrs, a_smem, [BLOCK_M, BLOCK_K],
                     mask=(offs_m[:, None] < M) & (k_offs[None, :] < K), other=0.0)
        tle.gpu.copy(b_ptrs, b_smem, [BLOCK_K, BLOCK_N],
                     mask=(k_offs[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(tle.gpu.local_load(a_smem), tle.gpu.local_load(b_smem), acc)

    tle.gpu.local_store(c_smem, acc)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tle.gpu.copy(c_smem, c_ptrs, [BLOCK_M, BLOCK_N], mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


CONFIG_LARGE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_STAGES=3, num_warps=8)
CONFIG_SMALL = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, NUM_STAGES=2, num_warps=4)


def _config(m, n, k):
    return CONFIG_LARGE if min(m, n) >= 2048 else CONFIG_SMALL


def _grid(m, n, cfg):
    return (triton.cdiv(m, cfg["BLOCK_M"]), triton.cdiv(n, cfg["BLOCK_N"]))


def matmul_smem(a: torch.Tensor, b: torch.Tensor, *, backend: str | None = None) -> torch.Tensor:
    return run(matmul_smem_kernel, a, b, backend, _config, _grid)


@tle.example(matmul_smem_kernel)
def _example(device, size):
    return example_launch(device, size, _grid, CONFIG_SMALL, CONFIG_LARGE)
