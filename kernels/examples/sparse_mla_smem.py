"""Sparse MLA forward staged through tle.gpu shared memory (the operator of kernels/examples/sparse_mla.py).

The query tiles are copied into buffers once; each step of a `tle.gpu.pipeline` loop gathers the KV
rows its indices name into buffers ([BK, D] and [BK, TD]: one gathered row per line, the layout the
copy reads contiguously), and the two products read the buffers (the scores through a transpose).
Blocks past the causal limit are skipped, as in the seed kernel.
Same calling convention, reference and results as kernels/examples/sparse_mla.py.
"""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.kernels.examples.sparse_mla import _example as seed_example, run


@tle.jit
def sparse_mla_fwd_smem_kernel(
    q, kv, indices, sm_scale: tl.constexpr, output, lse,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kvb, stride_kvg, stride_kvn, stride_kvd,
    stride_tb, stride_tg, stride_tm, stride_tt,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_lb, stride_lh, stride_lm,
    B: tl.constexpr, SQ: tl.constexpr, SKV: tl.constexpr, K: tl.constexpr, D: tl.constexpr, TD: tl.constexpr,
    DP: tl.constexpr, TDP: tl.constexpr, H: tl.constexpr, G: tl.constexpr, VG: tl.constexpr,
    BK: tl.constexpr, BH: tl.constexpr, is_causal: tl.constexpr, NUM_STAGES: tl.constexpr = 2,
):
    i_b, i_sq, i_gbh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_g, i_bh = i_gbh // G, i_gbh % G
    q_base = q + i_b * stride_qb + i_sq * stride_qm + i_gbh * (BH * stride_qh)
    kv_base = kv + i_b * stride_kvb + i_g * stride_kvg
    t_base = indices + i_b * stride_tb + i_sq * stride_tm + i_g * stride_tg
    o_base = output + i_b * stride_ob + i_sq * stride_om + i_gbh * (BH * stride_oh)
    l_base = lse + i_b * stride_lb + i_sq * stride_lm + i_gbh * (BH * stride_lh)
    dtype = q.dtype.element_ty

    offs_h = tl.arange(0, BH)
    offs_d = tl.arange(0, DP)
    offs_td = tl.arange(0, TDP)
    offs_t = tl.arange(0, BK)
    mask_h = i_bh * BH + offs_h < G
    mask_d = offs_d < D
    mask_td = offs_td < TD

    q_smem = tle.gpu.alloc([BH, DP], dtype=dtype, scope=tle.gpu.storage_kind.smem)
    tq_smem = tle.gpu.alloc([BH, TDP], dtype=dtype, scope=tle.gpu.storage_kind.smem)
    kv_smem = tle.gpu.alloc([BK, DP], dtype=dtype, scope=tle.gpu.storage_kind.smem)
    tkv_smem = tle.gpu.alloc([BK, TDP], dtype=dtype, scope=tle.gpu.storage_kind.smem)

    q_ptr = q_base + offs_h[:, None] * stride_qh + offs_d[None, :] * stride_qd
    tle.gpu.copy(q_ptr, q_smem, [BH, DP], mask=mask_h[:, None] & mask_d[None, :], other=0.0)
    tq_ptr = q_base + offs_h[:, None] * stride_qh + (D + offs_td[None, :]) * stride_qd
    tle.gpu.copy(tq_ptr, tq_smem, [BH, TDP], mask=mask_h[:, None] & mask_td[None, :], other=0.0)

    max_log = tl.full([BH], float('-inf'), dtype=tl.float32)
    sum_exp = tl.zeros([BH], dtype=tl.float32)
    acc = tl.zeros([BH, DP], dtype=tl.float32)
    log_scale: tl.constexpr = sm_scale * 1.44269504

    max_col = i_sq if is_causal else SQ - 1
    NK = tl.cdiv(K, BK)
    for ck in tle.gpu.pipeline(NK, num_stages=NUM_STAGES):
        if ck * BK <= max_col:      # blocks past the causal limit hold no valid index
            t_ptr = t_base + (BK * ck + offs_t) * stride_tt
            kv_ids = tl.load(t_ptr, BK * ck + offs_t < K, other=-1)
            mask_ids = (kv_ids <= max_col) & (kv_ids >= 0)

            kv_ptr = kv_base + kv_ids[:, None] * stride_kvn + offs_d[None, :] * stride_kvd
            tle.gpu.copy(kv_ptr, kv_smem, [BK, DP], mask=mask_ids[:, None] & mask_d[None, :], other=0.0)
            tkv_ptr = kv_base + kv_ids[:, None] * stride_kvn + (D + offs_td[None, :]) * stride_kvd
            tle.gpu.copy(tkv_ptr, tkv_smem, [BK, TDP], mask=mask_ids[:, None] & mask_td[None, :], other=0.0)

            kv_blk = tle.gpu.local_load(kv_smem)                                          # [BK, DP]
            qk = tl.dot(tle.gpu.local_load(tq_smem), tl.trans(tle.gpu.local_load(tkv_smem)),
                        out_dtype=tl.float32)
            qk = tl.dot(tle.gpu.local_load(q_smem), tl.trans(kv_blk), qk, out_dtype=tl.float32) * log_scale
            qk = tl.where(mask_ids[None, :], qk, float('-inf'))                          # [BH, BK]

            new_max = tl.maximum(max_log, tl.max(qk, axis=1))
            # a row that has seen no valid index yet keeps max -inf: shift by 0 instead of by -inf
            shift = tl.where(new_max == float('-inf'), 0.0, new_max)
            exp_qk = tl.math.exp2(qk - shift[:, None])
            alpha = tl.math.exp2(max_log - shift)
            sum_exp = sum_exp * alpha + tl.sum(exp_qk, axis=1)
            acc = acc * alpha[:, None]
            acc = tl.dot(exp_qk.to(dtype), kv_blk, acc, out_dtype=tl.float32)              # [BH, DP]
            max_log = new_max

    out_vals = acc / sum_exp[:, None]
    o_ptr = o_base + offs_h[:, None] * stride_oh + offs_d[None, :] * stride_od
    tl.store(o_ptr, out_vals.to(dtype), mask_h[:, None] & mask_d[None, :])
    fin_log = max_log + tl.math.log2(sum_exp)
    tl.store(l_base + offs_h * stride_lh, fin_log.to(dtype), mask_h)


def sparse_mla_fwd_smem(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float | None = None,
                        d_v: int = 512, *, backend: str | None = None, config: dict | None = None):
    """Causal sparse MLA forward: (out [B, S, H, d_v] in q's dtype, lse [B, S, H] base 2, q's dtype)."""
    return run(sparse_mla_fwd_smem_kernel, q, kv, indices, sm_scale, d_v, backend, config)


@tle.example(sparse_mla_fwd_smem_kernel)
def _example(device, size):
    return seed_example(device, size)      # the same tensors, launch and reference as the seed kernel's
