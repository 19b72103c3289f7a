"""The sparse-MLA tutorial kernel as its authors wrote it for `@triton.jit`, ported by changing only its
import and decorator lines: `import tle` for the `tle.load` it uses, and `@tle.jit` under the tutorial's own
`@triton.autotune`. Nothing else in the text is changed (comments translated)."""
import triton
import triton.language as tl

import tle


@triton.autotune(configs=[triton.Config({}, num_stages=4, num_warps=8)], key=["K", "is_causal"])
@tle.jit
def triton_sparse_mla_fwd(
    q,
    kv,
    indices,
    sm_scale: tl.constexpr,
    output,
    lse,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kvb, stride_kvg, stride_kvn, stride_kvd,
    stride_tb, stride_tg, stride_tm, stride_tt,  # topk, of indices
    stride_ob, stride_oh, stride_om, stride_od,
    stride_lb, stride_lh, stride_lm,
    B: tl.constexpr,
    SQ: tl.constexpr,  # seqlen
    SKV: tl.constexpr,
    K: tl.constexpr,  # topk
    D: tl.constexpr,  # QKV dim
    TD: tl.constexpr,  # tail dim
    DP: tl.constexpr,
    TDP: tl.constexpr,
    H: tl.constexpr,  # q_head_dim
    G: tl.constexpr,  # group_size
    VG: tl.constexpr,  # H/G KV groups
    BK: tl.constexpr,
    BH: tl.constexpr,
    # BD: tl.constexpr, # block of output dim
    is_causal: tl.constexpr
):
    i_b, i_sq, i_gbh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_g, i_bh = i_gbh // G, i_gbh % G
    q_base = q + i_b*stride_qb + i_sq*stride_qm + i_gbh*(BH*stride_qh)  # two axes left, loaded block by block
    tq_base = q_base + D*stride_qd
    kv_base = kv + i_b*stride_kvb + i_g*stride_kvg
    tkv_base = kv_base + D*stride_kvd
    t_base = indices + i_b*stride_tb + i_sq*stride_tm + i_g*stride_tg
    o_base = output + i_b*stride_ob + i_sq*stride_om + i_gbh*(BH*stride_oh)
    l_base = lse + i_b*stride_lb + i_sq*stride_lm + i_gbh*(BH*stride_lh)
    offs_h = tl.arange(0, BH)
    offs_d = tl.arange(0, DP)
    offs_td = tl.arange(0, TDP)
    offs_od = tl.arange(0, DP)
    offs_t = tl.arange(0, BK)
    mask_h = i_bh * BH + offs_h < G
    mask_d = offs_d < D
    mask_td = offs_td < TD
    mask_od = mask_d
    q_ptr = q_base + offs_h[:, None] * stride_qh + offs_d[None, :] * stride_qd
    q_msk = mask_h[:, None] & mask_d[None, :]
    q_blk = tl.load(q_ptr, q_msk, other=0.0)
    tq_ptr = tq_base + offs_h[:, None] * stride_qh + offs_td[None, :] * stride_qd
    tq_msk = mask_h[:, None] & mask_td[None, :]
    tq_blk = tl.load(tq_ptr, tq_msk, other=0.0)
    max_log = tl.full([BH], float('-inf'), dtype=tl.bfloat16)
    sum_exp = tl.full([BH], 1.0, dtype=tl.float32)
    acc = tl.zeros([BH, DP], dtype=tl.float32)
    log_scale: tl.constexpr = sm_scale * 1.44269504
    max_col = i_sq if is_causal else SQ-1
    NK = tl.cdiv(K, BK)
    for ck in tl.range(NK, num_stages=0):
        if ck * BK <= max_col:
            t_ptr = (BK * ck + offs_t) * stride_tt
            t_msk = t_ptr < K
            t_ptr += t_base
            kv_ids = tl.load(t_ptr, t_msk, other=-1)
            mask_ids = (kv_ids <= max_col) & (kv_ids >= 0)
            kv_ptr = kv_base + offs_d[:, None]*stride_kvd + kv_ids[None, :]*stride_kvn
            kv_msk = mask_d[:, None] & mask_ids[None, :]
            # kv_blk = tl.load(kv_ptr, kv_msk, other=0.0) #[DP, BK]
            # Replace the above line
            kv_blk = tle.load(kv_ptr, kv_msk, other=0.0, is_async=True)  # [DP, BK]
            tkv_ptr = tkv_base + offs_td[:, None]*stride_kvd + kv_ids[None, :]*stride_kvn
            tkv_msk = mask_td[:, None] & mask_ids[None, :]
            tkv_blk = tl.load(tkv_ptr, tkv_msk, other=0.0)  # [TDP, BK]
            qk = tl.dot(tq_blk, tkv_blk, out_dtype=tl.float32)
            qk = tl.dot(q_blk, kv_blk, qk, out_dtype=tl.float32) * log_scale
            qk = tl.where(mask_ids[None, :], qk, float('-inf'))  # [BH, BK]
            new_max = tl.maximum(max_log, tl.max(qk, axis=1))
            exp_qk = tl.math.exp2(qk - new_max[:, None])
            sum_qk = tl.sum(exp_qk, axis=1)
            alpha = tl.math.exp2(max_log - new_max)
            sum_exp = sum_exp*alpha + sum_qk
            acc = acc*alpha[:, None]
            acc = tl.dot(exp_qk.to(tl.bfloat16), kv_blk.trans(), acc, out_dtype=tl.float32)  # [BH, BK] @ [BK, DP] = [BH, DP]
            max_log = new_max.to(tl.bfloat16)
    out_vals = acc / sum_exp[:, None]
    o_ptr = o_base + offs_h[:, None] * stride_oh + offs_od[None, :] * stride_od
    o_msk = mask_h[:, None] & mask_od[None, :]
    tl.store(o_ptr, out_vals.to(q_blk.dtype), o_msk)
    fin_log = max_log + tl.math.log2(sum_exp.to(tl.float32))  # lse / ln2
    l_ptr = l_base + offs_h * stride_lh
    l_msk = mask_h
    tl.store(l_ptr, fin_log.to(q_blk.dtype), l_msk)
