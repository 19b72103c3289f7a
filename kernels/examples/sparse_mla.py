"""Sparse MLA forward (DeepSeek sparse attention): each query attends to `topk` gathered KV rows.

q [B, S, H, D+TD], kv [B, SKV, VG, D+TD] (one latent KV shared by the heads of a group: the first D
columns are also the values), indices [B, S, VG, topk] int32. Causal: query s only sees kv rows <= s;
an index outside [0, s] (e.g. the padding value SKV) contributes nothing. Returns out [B, S, H, D] and
lse [B, S, H], the log-sum-exp of the scaled scores in base 2.

`sparse_mla_fwd_kernel` is the TLE kernel text: a Triton kernel whose KV gather is
`tle.load(..., is_async=True)`.
"""
from __future__ import annotations

import hashlib
import inspect
import math
import os
import tempfile
import textwrap

import torch
import triton
import triton.language as tl

import tle
from tle.checks import check_tensor
from tle.kernels.sparse_mla_indices import make_indices   # DeepSeek's test indices


@tle.jit
def sparse_mla_fwd_kernel(
    q, kv, indices, sm_scale: tl.constexpr, output, lse,
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
    is_causal: tl.constexpr,
    ASYNC: tl.constexpr = True,
):
    i_b, i_sq, i_gbh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_g, i_bh = i_gbh // G, i_gbh % G
    q_base = q + i_b * stride_qb + i_sq * stride_qm + i_gbh * (BH * stride_qh)
    tq_base = q_base + D * stride_qd
    kv_base = kv + i_b * stride_kvb + i_g * stride_kvg
    tkv_base = kv_base + D * stride_kvd
    t_base = indices + i_b * stride_tb + i_sq * stride_tm + i_g * stride_tg
    o_base = output + i_b * stride_ob + i_sq * stride_om + i_gbh * (BH * stride_oh)
    l_base = lse + i_b * stride_lb + i_sq * stride_lm + i_gbh * (BH * stride_lh)

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

    max_col = i_sq if is_causal else SQ - 1

    NK = tl.cdiv(K, BK)
    for ck in tl.range(NK, num_stages=0):
        if ck * BK <= max_col:
            t_ptr = (BK * ck + offs_t) * stride_tt
            t_msk = t_ptr < K
            t_ptr += t_base
            kv_ids = tl.load(t_ptr, t_msk, other=-1)
            mask_ids = (kv_ids <= max_col) & (kv_ids >= 0)

            kv_ptr = kv_base + offs_d[:, None] * stride_kvd + kv_ids[None, :] * stride_kvn
            kv_msk = mask_d[:, None] & mask_ids[None, :]
            kv_blk = tle.load(kv_ptr, kv_msk, other=0.0, is_async=ASYNC)  # [DP, BK]

            tkv_ptr = tkv_base + offs_td[:, None] * stride_kvd + kv_ids[None, :] * stride_kvn
            tkv_msk = mask_td[:, None] & mask_ids[None, :]
            tkv_blk = tl.load(tkv_ptr, tkv_msk, other=0.0)  # [TDP, BK]

            qk = tl.dot(tq_blk, tkv_blk, out_dtype=tl.float32)
            qk = tl.dot(q_blk, kv_blk, qk, out_dtype=tl.float32) * log_scale
            qk = tl.where(mask_ids[None, :], qk, float('-inf'))  # [BH, BK]

            new_max = tl.maximum(max_log, tl.max(qk, axis=1))
            exp_qk = tl.math.exp2(qk - new_max[:, None])
            sum_qk = tl.sum(exp_qk, axis=1)
            alpha = tl.math.exp2(max_log - new_max)
            sum_exp = sum_exp * alpha + sum_qk
            acc = acc * alpha[:, None]
            acc = tl.dot(exp_qk.to(tl.bfloat16), kv_blk.trans(), acc, out_dtype=tl.float32)  # [BH, DP]

            max_log = new_max.to(tl.bfloat16)

    out_vals = acc / sum_exp[:, None]
    o_ptr = o_base + offs_h[:, None] * stride_oh + offs_od[None, :] * stride_od
    o_msk = mask_h[:, None] & mask_od[None, :]
    tl.store(o_ptr, out_vals.to(q_blk.dtype), o_msk)

    fin_log = max_log + tl.math.log2(sum_exp.to(tl.float32))  # lse / ln2
    l_ptr = l_base + offs_h * stride_lh
    l_msk = mask_h
    tl.store(l_ptr, fin_log.to(q_blk.dtype), l_msk)


def reference(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float | None = None,
              d_v: int = 512, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 out [B, S, H, d_v] and base-2 lse [B, S, H], gathering only the indexed rows (S in chunks)."""
    B, S, H, DT = q.shape
    SKV, VG = kv.shape[1], kv.shape[2]
    G = H // VG
    sm_scale = DT ** -0.5 if sm_scale is None else sm_scale
    out = torch.empty(B, S, H, d_v, device=q.device, dtype=torch.float32)
    lse = torch.empty(B, S, H, device=q.device, dtype=torch.float32)
    for s0 in range(0, S, chunk):
        s1 = min(S, s0 + chunk)
        ids = indices[:, s0:s1].long()                                    # [B, s, VG, K]
        pos = torch.arange(s0, s1, device=q.device).view(1, -1, 1, 1)
        valid = (ids >= 0) & (ids <= pos) & (ids < SKV)
        rows = kv.float().permute(0, 2, 1, 3)                              # [B, VG, SKV, DT]
        safe = ids.clamp(0, SKV - 1).permute(0, 2, 1, 3)                   # [B, VG, s, K]
        g = torch.gather(rows.unsqueeze(2).expand(-1, -1, s1 - s0, -1, -1), 3,
                         safe.unsqueeze(-1).expand(-1, -1, -1, -1, DT))   # [B, VG, s, K, DT]
        qq = q[:, s0:s1].float().view(B, s1 - s0, VG, G, DT).permute(0, 2, 1, 3, 4)   # [B, VG, s, G, DT]
        score = torch.einsum("bvsgd,bvskd->bvsgk", qq, g) * sm_scale
        score = score.masked_fill(~valid.permute(0, 2, 1, 3).unsqueeze(3), float("-inf"))
        p = torch.softmax(score, dim=-1)
        o = torch.einsum("bvsgk,bvskd->bvsgd", p, g[..., :d_v])
        out[:, s0:s1] = o.permute(0, 2, 1, 3, 4).reshape(B, s1 - s0, H, d_v)
        lse[:, s0:s1] = (torch.logsumexp(score, dim=-1) / math.log(2)).permute(0, 2, 1, 3).reshape(B, s1 - s0, H)
    return out, lse


def kernel_args(q, kv, indices, output, lse, sm_scale, d_v, BK, BH, causal=True):
    """(grid, positional args) of the seed's calling convention for these tensors."""
    B, SQ, H, DT = q.shape
    _, SKV, VG, _ = kv.shape
    K = indices.shape[-1]
    D, TD = d_v, DT - d_v
    G = H // VG
    grid = (B, SQ, VG * triton.cdiv(G, BH))
    args = (q, kv, indices, sm_scale, output, lse,
            q.stride(0), q.stride(2), q.stride(1), q.stride(3),
            kv.stride(0), kv.stride(2), kv.stride(1), kv.stride(3),
            indices.stride(0), indices.stride(2), indices.stride(1), indices.stride(3),
            output.stride(0), output.stride(2), output.stride(1), output.stride(3),
            lse.stride(0), lse.stride(2), lse.stride(1),
            B, SQ, SKV, K, D, TD, triton.next_power_of_2(D), triton.next_power_of_2(TD), H, G, VG, BK, BH, causal)
    return grid, args


# Tile sizes and warps per size class; see docs/benchmark/sparse_mla_seed.md.
CONFIG_LARGE = dict(BK=64, BH=64, num_warps=8)
CONFIG_SMALL = dict(BK=64, BH=64, num_warps=4)


def _check_inputs(q, kv, indices, d_v):
    check_tensor(q, "q", dtypes=(torch.bfloat16, torch.float16), rank=4)
    check_tensor(kv, "kv", dtypes=(q.dtype,), rank=4, device=q.device)
    check_tensor(indices, "indices", dtypes=(torch.int32,), rank=4, device=q.device)
    B, S, H, DT = q.shape
    if kv.shape[0] != B or kv.shape[3] != DT:
        raise tle.LaunchError(f"'kv' has shape {tuple(kv.shape)}; expected [{B}, SKV, VG, {DT}]")
    VG = kv.shape[2]
    if VG != 1:
        # the kernel text (as written) finds a program's KV group as i_gbh // G, right for one group only
        raise tle.LaunchError(f"'kv' has {VG} KV groups; this kernel supports one (kv shape [B, SKV, 1, D])")
    if tuple(indices.shape[:3]) != (B, S, VG):
        raise tle.LaunchError(f"'indices' has shape {tuple(indices.shape)}; expected [{B}, {S}, {VG}, topk]")
    if not 0 < d_v < DT:
        raise tle.LaunchError(f"'d_v' must be in (0, {DT}), got {d_v}")


def sparse_mla_fwd(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float | None = None,
                   d_v: int = 512, *, backend: str | None = None, config: dict | None = None):
    """Causal sparse MLA forward: (out [B, S, H, d_v] in q's dtype, lse [B, S, H] base 2, q's dtype)."""
    return run(sparse_mla_fwd_kernel, q, kv, indices, sm_scale, d_v, backend, config)


def run(kernel, q, kv, indices, sm_scale, d_v, backend, config):
    """Check the inputs and launch `kernel` (a sparse-MLA kernel of the seed's calling convention)."""
    _check_inputs(q, kv, indices, d_v)
    B, S, H, DT = q.shape
    output = torch.empty(B, S, H, d_v, device=q.device, dtype=q.dtype)
    lse = torch.empty(B, S, H, device=q.device, dtype=q.dtype)
    if output.numel() == 0:
        return output, lse
    cfg = dict(config or (CONFIG_LARGE if H * S >= 4096 else CONFIG_SMALL))
    grid, args = kernel_args(q, kv, indices, output, lse, DT ** -0.5 if sm_scale is None else sm_scale, d_v,
                             cfg.pop("BK"), cfg.pop("BH"))
    kernel[grid](*args, backend=backend, **cfg)
    return output, lse


@tle.example(sparse_mla_fwd_kernel)
def _example(device, size):
    if size == "small":
        B, S, SKV, H, D, TD, topk, cfg = 1, 80, 128, 32, 64, 32, 128, CONFIG_SMALL
    else:
        B, S, SKV, H, D, TD, topk, cfg = 1, 4096, 8192, 128, 512, 64, 2048, CONFIG_LARGE
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(B, S, H, D + TD, generator=gen).to(device, torch.bfloat16)
    kv = torch.randn(B, SKV, 1, D + TD, generator=gen).to(device, torch.bfloat16)
    indices = make_indices(B, S, SKV, 1, topk, gen, device)
    if size == "small":
        indices[0, S - 1, 0, 3] = -5          # an invalid index in the middle of a row
    out = torch.full((B, S, H, D), float("nan"), device=device, dtype=torch.bfloat16)
    lse = torch.full((B, S, H), float("nan"), device=device, dtype=torch.bfloat16)
    sm_scale = (D + TD) ** -0.5
    cfg = dict(cfg)
    grid, args = kernel_args(q, kv, indices, out, lse, sm_scale, D, cfg.pop("BK"), cfg.pop("BH"))

    def ref():
        o, l = reference(q, kv, indices, sm_scale, D)
        return {"out": o, "lse": l}
    return tle.Launch(grid=grid, args=args, kwargs=cfg, outputs={"out": out, "lse": lse}, reference=ref,
                      flops=2 * B * S * H * topk * (D + TD + D), label=f"B{B} S{S} SKV{SKV} H{H} D{D}+{TD} topk{topk} bf16")


def plain_triton_kernel():
    """The same kernel text as a plain Triton kernel (`tl.load` for `tle.load`, no hint), compiled by
    `triton.jit` directly: the baseline the benchmark compares the lowerings with."""
    src = textwrap.dedent(inspect.getsource(sparse_mla_fwd_kernel.fn))
    src = src[src.index("def "):]                                   # drop the @tle.jit decorator
    src = src.replace("tle.load(kv_ptr, kv_msk, other=0.0, is_async=ASYNC)", "tl.load(kv_ptr, kv_msk, other=0.0)")
    assert "tle." not in src
    path = inspect.getsourcefile(sparse_mla_fwd_kernel.fn)
    # triton.jit reads the function's source from its file: give it a file of its own
    from tle.lowering.files import load_module, write_once
    d = os.path.join(tempfile.gettempdir(), "tle-plain")
    os.makedirs(d, exist_ok=True)
    file = os.path.join(d, f"sparse_mla_plain_{hashlib.sha256(src.encode()).hexdigest()[:12]}.py")
    write_once(file, f"# plain Triton form of {os.path.basename(path)}:sparse_mla_fwd_kernel\n"
                     "import triton\nimport triton.language as tl\n\n\n@triton.jit\n" + src)
    return load_module(file, os.path.basename(file)[:-3]).sparse_mla_fwd_kernel
