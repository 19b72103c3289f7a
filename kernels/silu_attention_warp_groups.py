"""SiLU attention's forward in three warp groups (tle.gpu.warp_group), as flash_attention_warp_groups.py: group 0
copies each block of keys and values into shared memory; groups 1 and 2 each own half of the program's queries and
add (silu(s) · weight) v for every block group 0 hands them. The same arguments (but SPLIT), masks and results as
silu_attention.silu_attention_fwd_kernel; on Triton the groups are dropped and the blocks run in program order.
Not yet the operator's kernel: it has not been timed against it.
"""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.kernels.flash_attention import Problem, _sequence, nan_like
from tle.kernels.flash_attention_warp_groups import _copy_block, _rows_in_shared
from tle.kernels.silu_attention import _bias_args, _silu_terms, _torch_forward
from tle.oplib.arith import cdiv


@tle.jit
def _weighted_silu(s, bias_base, rows, cols, len_s, stride_bm, stride_bn, inv_n, HAS_BIAS: tl.constexpr,
                   CAUSAL: tl.constexpr, MASKED: tl.constexpr, TANH_SIGMOID: tl.constexpr):
    """silu(s + bias) · weight for a block of scaled scores (_silu_terms)."""
    x, sig, w = _silu_terms(s, bias_base, rows[:, None], cols[None, :], len_s, stride_bm, stride_bn, inv_n, HAS_BIAS,
                            CAUSAL, MASKED, TANH_SIGMOID)
    return x * sig * w


@tle.jit
def _silu_step(acc, q_buf, k_buf, v_buf, bias_base, stride_bm, stride_bn, rows, first_row, start_n, cols, len_s,
               scale, inv_n, CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr,
               TURNS: tl.constexpr, TANH_SIGMOID: tl.constexpr):
    """One block of keys for one consumer's rows: acc += (silu(s) · weight) v. Only blocks that reach past the
    sequence or the diagonal pay for the mask (keys past the sequence read k = v = 0 either way)."""
    with tle.gpu.turn(enabled=TURNS):
        s = tl.dot(tle.gpu.local_load(q_buf), tl.trans(tle.gpu.local_load(k_buf))) * scale
    last = start_n + BLOCK_N - 1
    edge = last >= len_s
    if CAUSAL:
        edge = edge | (last > first_row)
    if edge:
        p = _weighted_silu(s, bias_base, rows, cols, len_s, stride_bm, stride_bn, inv_n, HAS_BIAS, CAUSAL, True, TANH_SIGMOID)
    else:
        p = _weighted_silu(s, bias_base, rows, cols, len_s, stride_bm, stride_bn, inv_n, HAS_BIAS, CAUSAL, False, TANH_SIGMOID)
    with tle.gpu.turn(enabled=TURNS):
        acc = tl.dot(p.to(v_buf.dtype), tle.gpu.local_load(v_buf), acc)
    return acc


@tle.jit
def silu_attention_fwd_warp_groups_kernel(
        q_ptr, k_ptr, v_ptr, o_ptr, bias_ptr, cu_ptr, scale, inv_n,
        stride_qb, stride_qm, stride_qh, stride_kb, stride_kn, stride_kh, stride_vb, stride_vn, stride_vh,
        stride_ob, stride_om, stride_oh, stride_bb, stride_bh, stride_bm, stride_bn, seqlen,
        H: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, HAS_BIAS: tl.constexpr,
        LOADER_REGISTERS: tl.constexpr = 56, CONSUMER_REGISTERS: tl.constexpr = 224, TURNS: tl.constexpr = False,
        TANH_SIGMOID: tl.constexpr = False):
    HALF: tl.constexpr = BLOCK_M // 2
    pid_m = tl.program_id(0)
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    start, len_s = _sequence(cu_ptr, b, seqlen, VARLEN)
    q_base = q_ptr + b * stride_qb + h * stride_qh + start * stride_qm
    k_base = k_ptr + b * stride_kb + (h // GROUP) * stride_kh + start * stride_kn
    v_base = v_ptr + b * stride_vb + (h // GROUP) * stride_vh + start * stride_vn
    o_base = o_ptr + b * stride_ob + h * stride_oh + start * stride_om
    bias_base = bias_ptr + b * stride_bb + h * stride_bh

    m0 = pid_m * BLOCK_M
    rows_a = m0 + tl.arange(0, HALF)          # group 1's queries
    rows_b = m0 + HALF + tl.arange(0, HALF)   # group 2's
    hi = len_s
    if CAUSAL:
        hi = tl.minimum(len_s, m0 + BLOCK_M)
    hi = tl.where(m0 < len_s, hi, 0)

    with tle.gpu.warp_group(1, registers=CONSUMER_REGISTERS):
        q_a = _rows_in_shared(q_base, stride_qm, rows_a, len_s, HEAD_DIM, HALF)
    with tle.gpu.warp_group(2, registers=CONSUMER_REGISTERS):
        q_b = _rows_in_shared(q_base, stride_qm, rows_b, len_s, HEAD_DIM, HALF)

    acc_a = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    acc_b = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    for start_n in tle.gpu.pipeline(0, hi, BLOCK_N, num_stages=2):
        k_buf = tle.gpu.alloc([BLOCK_N, HEAD_DIM], k_ptr.dtype.element_ty)
        v_buf = tle.gpu.alloc([BLOCK_N, HEAD_DIM], v_ptr.dtype.element_ty)
        cols = start_n + tl.arange(0, BLOCK_N)
        with tle.gpu.warp_group(0, registers=LOADER_REGISTERS):
            _copy_block(k_base, v_base, stride_kn, stride_vn, cols, len_s, k_buf, v_buf, HEAD_DIM, BLOCK_N)
        with tle.gpu.warp_group(1):
            acc_a = _silu_step(acc_a, q_a, k_buf, v_buf, bias_base, stride_bm, stride_bn, rows_a, m0, start_n, cols,
                               len_s, scale, inv_n, CAUSAL, HAS_BIAS, BLOCK_N, TURNS, TANH_SIGMOID)
        with tle.gpu.warp_group(2):
            acc_b = _silu_step(acc_b, q_b, k_buf, v_buf, bias_base, stride_bm, stride_bn, rows_b, m0 + HALF, start_n,
                               cols, len_s, scale, inv_n, CAUSAL, HAS_BIAS, BLOCK_N, TURNS, TANH_SIGMOID)

    offs_o = tl.arange(0, HEAD_DIM)
    with tle.gpu.warp_group(1):
        tl.store(o_base + rows_a[:, None] * stride_om + offs_o[None, :], acc_a.to(o_ptr.dtype.element_ty),
                 mask=(rows_a < len_s)[:, None])
    with tle.gpu.warp_group(2):
        tl.store(o_base + rows_b[:, None] * stride_om + offs_o[None, :], acc_b.to(o_ptr.dtype.element_ty),
                 mask=(rows_b < len_s)[:, None])


def fwd_warp_groups_config(head_dim: int) -> dict:
    """128 queries a program (64 per consumer group), BLOCK_N keys a step, three groups of 4 warps."""
    return dict(BLOCK_M=128, BLOCK_N=128 if head_dim <= 128 else 64, num_warps=12, num_stages=2)


@tle.example(silu_attention_fwd_warp_groups_kernel)
def _fwd_warp_groups_example(device, size):
    """A causal GQA problem with a per-head bias; on the CPU long enough (S 260, three blocks of 128 keys) that
    the last query block has key blocks no mask touches."""
    b, s, h, h_kv, d, dtype = (1, 260, 2, 1, 32, torch.float16) if size == "small" else \
        (2, 2048, 16, 4, 128, torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, s, n, d, generator=gen).to(device, dtype) for n in (h, h_kv, h_kv))
    bias = torch.randn(b, h, s, s, generator=gen).to(device, dtype)
    pr = Problem(q, k, None, None, None, None)
    scale, inv_n = d ** -0.5, 1.0 / s
    bias_ptr, bias_strides, _ = _bias_args(bias, q)
    out = nan_like(q)
    cfg = fwd_warp_groups_config(d)
    return tle.Launch(grid=(cdiv(s, cfg["BLOCK_M"]), b * h),
                      args=(q, k, v, out, bias_ptr, q, scale, inv_n, *pr.strides(q), *pr.strides(k),
                            *pr.strides(v), *pr.strides(out), *bias_strides, s),
                      kwargs=dict(H=h, GROUP=pr.group, HEAD_DIM=d, CAUSAL=True, VARLEN=False, HAS_BIAS=True, **cfg),
                      outputs={"out": out},
                      reference=lambda: {"out": _torch_forward(q, k, v, bias, None, s, True, scale)},
                      flops=2 * b * h * s * s * d, label=f"B{b} S{s} H{h}/{h_kv} D{d} causal bias {str(dtype)[6:]}")
