"""SiLU attention (the HSTU form), forward and backward: pointwise SiLU in place of the softmax.

    out = ((silu(q kᵀ · scale + attn_bias) ∘ mask) / n) v

`tle.ops.silu_attention(q, k, v, causal=True, scale=None, attn_bias=None, cu_seqlens=None, max_seqlen=None)`

- q, k, v [B, S, H, D] (k and v may have H_kv heads dividing H, as in flash_attention), or packed
  [total, H, D] with `cu_seqlens` (int32 [B + 1]) giving each sequence's rows (queries and keys alike).
- n is the key length: S, or `max_seqlen` for packed batches (the longest sequence unless given), so a
  short sequence is scaled as if padded to the longest, as HSTU does.
- mask: causal (key j seen by query i when j <= i) or full; keys past a sequence's end are never seen.
- attn_bias: None, or a tensor broadcastable to [B, H, S, S] (packed: [B, H, max_seqlen, max_seqlen], indexed
  by positions within each sequence) in q's dtype or fp32, with a gradient.
- scale defaults to D ** -0.5.

There is no softmax, so no running statistics: the forward sums silu(s)·v block by block, and the backward
recomputes s from q and k. Kernels (one text each, both backends): `silu_attention_fwd_kernel`,
`silu_attention_bwd_dkdv_kernel` (a program per key block of a KV head, over the query heads of its group;
it also writes dS for the bias gradient), `silu_attention_bwd_dq_kernel`.
"""
from __future__ import annotations

import torch
import triton.language as tl
from triton.language.extra import libdevice

import tle
from tle.kernels.flash_attention import (KERNEL_DTYPES, Problem, _sequence, check_attention_inputs, check_cu_seqlens,
                                         check_kernel_inputs, cu_or_dummy, longest_sequence, nan_like, sequence_slices)
from tle.kernels.flash_attention import bwd_configs as attention_bwd_configs
from tle.kernels.flash_attention import fwd_config  # the forward's tiles and SPLIT, as flash_attention's
from tle.oplib import BenchSpec, Operator, Sample, check_tensor
from tle.oplib.arith import cdiv
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype


@tle.jit
def _sigmoid(x, TANH_SIGMOID: tl.constexpr):
    """sigmoid(x); with TANH_SIGMOID as 0.5 + 0.5 tanh(x / 2), the same function: on TileLang, whose fast math
    computes tanh with the one approximate instruction tanh.approx.f32, that is one special-function
    instruction a score where tl.sigmoid's exp and reciprocal are two (SiLU attention's forward +20-31% on
    an H100, docs/benchmark/silu_attention.md). Triton's libdevice tanh is the accurate function: there
    the exp form stays."""
    if TANH_SIGMOID:
        return 0.5 + 0.5 * libdevice.tanh(0.5 * x)
    else:
        return tl.sigmoid(x)


@tle.jit
def _silu_terms(s, bias_ptr, q_pos, k_pos, len_s, stride_bm, stride_bn, inv_n, HAS_BIAS: tl.constexpr,
                CAUSAL: tl.constexpr, MASKED: tl.constexpr, TANH_SIGMOID: tl.constexpr):
    """(s + bias, sigmoid of it, the weight of each entry: 1/n where kept, else 0) of a block of scaled scores;
    q_pos and k_pos give each entry's query and key position (broadcast: the block may be transposed). Without
    MASKED the block is one every query sees whole: the weight is 1/n throughout. TANH_SIGMOID: see _sigmoid."""
    if HAS_BIAS:
        s += tl.load(bias_ptr + q_pos * stride_bm + k_pos * stride_bn, mask=(q_pos < len_s) & (k_pos < len_s),
                     other=0.0).to(tl.float32)
    if MASKED:
        keep = (q_pos < len_s) & (k_pos < len_s)
        if CAUSAL:
            keep = keep & (k_pos <= q_pos)
        w = tl.where(keep, inv_n, 0.0)
    else:
        w = inv_n
    return s, _sigmoid(s, TANH_SIGMOID), w


@tle.jit
def _fwd_blocks(acc, q, k_base, v_base, bias_base, stride_kn, stride_vn, stride_bm, stride_bn, rows, lo, hi, len_s,
                scale, inv_n, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                HAS_BIAS: tl.constexpr, MASKED: tl.constexpr, TANH_SIGMOID: tl.constexpr):
    """acc += (silu(s) · weight) v over the key blocks [lo, hi); keys past the sequence read k = v = 0."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :], mask=(cols < len_s)[:, None], other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=(cols < len_s)[:, None], other=0.0)
        s, sig, w = _silu_terms(tl.dot(q, tl.trans(k)) * scale, bias_base, rows[:, None], cols[None, :], len_s,
                                stride_bm, stride_bn, inv_n, HAS_BIAS, CAUSAL, MASKED, TANH_SIGMOID)
        acc = tl.dot((s * sig * w).to(v.dtype), v, acc)
    return acc


@tle.jit
def silu_attention_fwd_kernel(
        q_ptr, k_ptr, v_ptr, o_ptr, bias_ptr, cu_ptr, scale, inv_n,
        stride_qb, stride_qm, stride_qh, stride_kb, stride_kn, stride_kh, stride_vb, stride_vn, stride_vh,
        stride_ob, stride_om, stride_oh, stride_bb, stride_bh, stride_bm, stride_bn, seqlen,
        H: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, HAS_BIAS: tl.constexpr,
        SPLIT: tl.constexpr, TANH_SIGMOID: tl.constexpr = False):
    pid_m = tl.program_id(0)
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    start, len_s = _sequence(cu_ptr, b, seqlen, VARLEN)
    m0 = pid_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + (start + rows)[:, None] * stride_qm + offs_d[None, :],
                mask=(rows < len_s)[:, None], other=0.0)
    k_base = k_ptr + b * stride_kb + (h // GROUP) * stride_kh + start * stride_kn
    v_base = v_ptr + b * stride_vb + (h // GROUP) * stride_vh + start * stride_vn
    bias_base = bias_ptr + b * stride_bb + h * stride_bh
    # key blocks [0, full) are seen whole by every query of the block (rows past the sequence add nothing)
    hi = len_s
    full = len_s // BLOCK_N * BLOCK_N
    if CAUSAL:
        hi = tl.minimum(len_s, m0 + BLOCK_M)
        full = tl.minimum(full, (m0 + 1) // BLOCK_N * BLOCK_N)
    hi = tl.where(m0 < len_s, hi, 0)
    full = tl.minimum(full, hi)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if SPLIT:       # two loops, as flash_attention on Triton: the first without mask arithmetic
        acc = _fwd_blocks(acc, q, k_base, v_base, bias_base, stride_kn, stride_vn, stride_bm, stride_bn, rows, 0,
                          full, len_s, scale, inv_n, HEAD_DIM, BLOCK_N, CAUSAL, HAS_BIAS, False, TANH_SIGMOID)
        acc = _fwd_blocks(acc, q, k_base, v_base, bias_base, stride_kn, stride_vn, stride_bm, stride_bn, rows, full,
                          hi, len_s, scale, inv_n, HEAD_DIM, BLOCK_N, CAUSAL, HAS_BIAS, True, TANH_SIGMOID)
    else:
        acc = _fwd_blocks(acc, q, k_base, v_base, bias_base, stride_kn, stride_vn, stride_bm, stride_bn, rows, 0,
                          hi, len_s, scale, inv_n, HEAD_DIM, BLOCK_N, CAUSAL, HAS_BIAS, True, TANH_SIGMOID)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + (start + rows)[:, None] * stride_om + offs_d[None, :],
             acc.to(o_ptr.dtype.element_ty), mask=(rows < len_s)[:, None])


@tle.jit
def _dkdv_blocks(dk, dv, k, v, q_base, do_base, bias_base, ds_base, stride_qm, stride_dom, stride_bm, stride_bn,
                 stride_sm, cols, lo, hi, len_s, scale, inv_n, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                 CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_GRAD: tl.constexpr, MASKED: tl.constexpr,
                 TANH_SIGMOID: tl.constexpr):
    """dK, dV of one key block from query blocks [lo, hi) of one head, transposed ([keys, queries]); rows past
    the sequence read q = dO = 0 and add nothing."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q = tl.load(q_base + rows[:, None] * stride_qm + offs_d[None, :], mask=(rows < len_s)[:, None], other=0.0)
        do = tl.load(do_base + rows[:, None] * stride_dom + offs_d[None, :], mask=(rows < len_s)[:, None], other=0.0)
        s_t, sig, w = _silu_terms(tl.dot(k, tl.trans(q)) * scale, bias_base, rows[None, :], cols[:, None], len_s,
                                  stride_bm, stride_bn, inv_n, HAS_BIAS, CAUSAL, MASKED, TANH_SIGMOID)
        dv = tl.dot((s_t * sig * w).to(do.dtype), do, dv)
        # d silu(s) / ds = sigmoid(s) (1 + s (1 - sigmoid(s)))
        ds_t = tl.dot(v, tl.trans(do)) * (sig * (1.0 + s_t * (1.0 - sig))) * w
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
        if BIAS_GRAD:
            tl.store(ds_base + rows[None, :] * stride_sm + cols[:, None], ds_t.to(ds_base.dtype.element_ty),
                     mask=(rows < len_s)[None, :] & (cols < len_s)[:, None])
    return dk, dv


@tle.jit
def silu_attention_bwd_dkdv_kernel(
        q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, bias_ptr, ds_ptr, cu_ptr, scale, inv_n,
        stride_qb, stride_qm, stride_qh, stride_kb, stride_kn, stride_kh, stride_vb, stride_vn, stride_vh,
        stride_dob, stride_dom, stride_doh, stride_dkb, stride_dkn, stride_dkh, stride_dvb, stride_dvn,
        stride_dvh, stride_bb, stride_bh, stride_bm, stride_bn, stride_sb, stride_sh, stride_sm, seqlen,
        H_KV: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, HAS_BIAS: tl.constexpr,
        BIAS_GRAD: tl.constexpr, SPLIT: tl.constexpr, TANH_SIGMOID: tl.constexpr = False):
    pid_n = tl.program_id(0)
    b = tl.program_id(1) // H_KV
    h_kv = tl.program_id(1) % H_KV
    start, len_s = _sequence(cu_ptr, b, seqlen, VARLEN)
    n0 = pid_n * BLOCK_N
    cols = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    col_ok = cols < len_s
    k = tl.load(k_ptr + b * stride_kb + h_kv * stride_kh + (start + cols)[:, None] * stride_kn + offs_d[None, :],
                mask=col_ok[:, None], other=0.0)
    v = tl.load(v_ptr + b * stride_vb + h_kv * stride_vh + (start + cols)[:, None] * stride_vn + offs_d[None, :],
                mask=col_ok[:, None], other=0.0)
    # causal: queries before the block's first key see none of it, those before `full` part of it
    lo = 0
    full = 0
    if CAUSAL:
        lo = n0 // BLOCK_M * BLOCK_M
        full = tl.maximum(lo, tl.cdiv(n0 + BLOCK_N - 1, BLOCK_M) * BLOCK_M)
    hi = tl.where(n0 < len_s, len_s, 0)
    full = tl.minimum(full, hi)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for g in range(GROUP):
        h = h_kv * GROUP + g
        q_base = q_ptr + b * stride_qb + h * stride_qh + start * stride_qm
        do_base = do_ptr + b * stride_dob + h * stride_doh + start * stride_dom
        bias_base = bias_ptr + b * stride_bb + h * stride_bh
        ds_base = ds_ptr + b * stride_sb + h * stride_sh
        if SPLIT:
            dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, bias_base, ds_base, stride_qm, stride_dom, stride_bm,
                                  stride_bn, stride_sm, cols, lo, full, len_s, scale, inv_n, HEAD_DIM, BLOCK_M, CAUSAL,
                                  HAS_BIAS, BIAS_GRAD, True, TANH_SIGMOID)
            dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, bias_base, ds_base, stride_qm, stride_dom, stride_bm,
                                  stride_bn, stride_sm, cols, full, hi, len_s, scale, inv_n, HEAD_DIM, BLOCK_M, CAUSAL,
                                  HAS_BIAS, BIAS_GRAD, False, TANH_SIGMOID)
        else:
            dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, bias_base, ds_base, stride_qm, stride_dom, stride_bm,
                                  stride_bn, stride_sm, cols, lo, hi, len_s, scale, inv_n, HEAD_DIM, BLOCK_M, CAUSAL,
                                  HAS_BIAS, BIAS_GRAD, True, TANH_SIGMOID)
    dk = dk * scale
    tl.store(dk_ptr + b * stride_dkb + h_kv * stride_dkh + (start + cols)[:, None] * stride_dkn + offs_d[None, :],
             dk.to(dk_ptr.dtype.element_ty), mask=col_ok[:, None])
    tl.store(dv_ptr + b * stride_dvb + h_kv * stride_dvh + (start + cols)[:, None] * stride_dvn + offs_d[None, :],
             dv.to(dv_ptr.dtype.element_ty), mask=col_ok[:, None])


@tle.jit
def _dq_blocks(dq, q, do, k_base, v_base, bias_base, stride_kn, stride_vn, stride_bm, stride_bn, rows, lo, hi, len_s,
               scale, inv_n, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
               HAS_BIAS: tl.constexpr, MASKED: tl.constexpr, TANH_SIGMOID: tl.constexpr):
    """dQ of one query block from key blocks [lo, hi); keys past the sequence read k = v = 0 and add nothing."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :], mask=(cols < len_s)[:, None], other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=(cols < len_s)[:, None], other=0.0)
        s, sig, w = _silu_terms(tl.dot(q, tl.trans(k)) * scale, bias_base, rows[:, None], cols[None, :], len_s,
                                stride_bm, stride_bn, inv_n, HAS_BIAS, CAUSAL, MASKED, TANH_SIGMOID)
        ds = tl.dot(do, tl.trans(v)) * (sig * (1.0 + s * (1.0 - sig))) * w
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@tle.jit
def silu_attention_bwd_dq_kernel(
        q_ptr, k_ptr, v_ptr, do_ptr, dq_ptr, bias_ptr, cu_ptr, scale, inv_n,
        stride_qb, stride_qm, stride_qh, stride_kb, stride_kn, stride_kh, stride_vb, stride_vn, stride_vh,
        stride_dob, stride_dom, stride_doh, stride_dqb, stride_dqm, stride_dqh, stride_bb, stride_bh, stride_bm,
        stride_bn, seqlen, H: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, HAS_BIAS: tl.constexpr,
        SPLIT: tl.constexpr, TANH_SIGMOID: tl.constexpr = False):
    pid_m = tl.program_id(0)
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    start, len_s = _sequence(cu_ptr, b, seqlen, VARLEN)
    m0 = pid_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = rows < len_s
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + (start + rows)[:, None] * stride_qm + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + (start + rows)[:, None] * stride_dom + offs_d[None, :],
                 mask=row_ok[:, None], other=0.0)
    k_base = k_ptr + b * stride_kb + (h // GROUP) * stride_kh + start * stride_kn
    v_base = v_ptr + b * stride_vb + (h // GROUP) * stride_vh + start * stride_vn
    bias_base = bias_ptr + b * stride_bb + h * stride_bh
    hi = len_s
    full = len_s
    if CAUSAL:
        hi = tl.minimum(len_s, m0 + BLOCK_M)
        full = tl.minimum(hi, (m0 + 1) // BLOCK_N * BLOCK_N)
    hi = tl.where(m0 < len_s, hi, 0)
    full = tl.minimum(full, hi)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if SPLIT:
        dq = _dq_blocks(dq, q, do, k_base, v_base, bias_base, stride_kn, stride_vn, stride_bm, stride_bn, rows, 0,
                        full, len_s, scale, inv_n, HEAD_DIM, BLOCK_N, CAUSAL, HAS_BIAS, False, TANH_SIGMOID)
        dq = _dq_blocks(dq, q, do, k_base, v_base, bias_base, stride_kn, stride_vn, stride_bm, stride_bn, rows, full,
                        hi, len_s, scale, inv_n, HEAD_DIM, BLOCK_N, CAUSAL, HAS_BIAS, True, TANH_SIGMOID)
    else:
        dq = _dq_blocks(dq, q, do, k_base, v_base, bias_base, stride_kn, stride_vn, stride_bm, stride_bn, rows, 0,
                        hi, len_s, scale, inv_n, HEAD_DIM, BLOCK_N, CAUSAL, HAS_BIAS, True, TANH_SIGMOID)
    dq = dq * scale
    tl.store(dq_ptr + b * stride_dqb + h * stride_dqh + (start + rows)[:, None] * stride_dqm + offs_d[None, :],
             dq.to(dq_ptr.dtype.element_ty), mask=row_ok[:, None])


# -- launch configurations ----------------------------------------------------------------------------------
def bwd_configs(head_dim: int, backend: str) -> tuple[dict, dict]:
    """(dK/dV kernel, dQ kernel) launch configurations on `backend`: flash_attention's TileLang tiles on both
    backends (they were measured for this operator on both), SPLIT on Triton, the sigmoid's form."""
    kv, q = attention_bwd_configs(head_dim, "tilelang")
    split = backend == "triton"
    tanh = tanh_sigmoid(backend)
    return dict(kv, SPLIT=split, TANH_SIGMOID=tanh), dict(q, SPLIT=split, TANH_SIGMOID=tanh)


def tanh_sigmoid(backend: str) -> bool:
    """Whether the kernels on `backend` compute the sigmoid through tanh (_sigmoid): on TileLang, where it is one
    approximate instruction; Triton keeps tl.sigmoid."""
    return backend == "tilelang"


# -- the kernel backends ------------------------------------------------------------------------------------
def _bias_args(bias, like):
    """(pointer, batch/head/row/column strides, HAS_BIAS) of the bias, broadcast dimensions at stride 0."""
    if bias is None:
        return like, (0, 0, 0, 0), False
    return bias, tuple(0 if bias.shape[i] == 1 else bias.stride(i) for i in range(4)), True


def _kernel_forward(q, k, v, bias, cu, max_seqlen, causal, scale, backend):
    pr = Problem(q, k, cu, cu, max_seqlen, max_seqlen)
    out = q.new_empty(q.shape)
    if out.numel() == 0 or pr.b == 0:
        return out.zero_()
    bias_ptr, bias_strides, has_bias = _bias_args(bias, q)
    # flash_attention's tiles; its K/V reads through tensor descriptors (DESC) are flash_attention's alone
    cfg = {k: v for k, v in fwd_config(pr.d, pr.seqlen_q, backend).items() if k != "DESC"}
    cfg["TANH_SIGMOID"] = tanh_sigmoid(backend)
    silu_attention_fwd_kernel[(cdiv(pr.seqlen_q, cfg["BLOCK_M"]), pr.b * pr.h)](
        q, k, v, out, bias_ptr, cu_or_dummy(cu, q), scale, 1.0 / max(pr.seqlen_k, 1),
        *pr.strides(q), *pr.strides(k), *pr.strides(v), *pr.strides(out), *bias_strides, pr.seqlen_q,
        H=pr.h, GROUP=pr.group, HEAD_DIM=pr.d, CAUSAL=causal, VARLEN=pr.varlen, HAS_BIAS=has_bias,
        backend=backend, **cfg)
    return out


def _kernel_backward(do, q, k, v, bias, cu, max_seqlen, causal, scale, bias_grad, backend):
    pr = Problem(q, k, cu, cu, max_seqlen, max_seqlen)
    dq, dk, dv = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
    ds = bias.new_zeros(pr.b, pr.h, pr.seqlen_q, pr.seqlen_q) if bias_grad else q.new_empty(0)
    if q.numel() == 0 or pr.b == 0:
        return dq, dk.zero_(), dv.zero_(), _reduce_to(ds, bias) if bias_grad else ds
    bias_ptr, bias_strides, has_bias = _bias_args(bias, q)
    cu_arg = cu_or_dummy(cu, q)
    inv_n = 1.0 / max(pr.seqlen_k, 1)
    kv_cfg, q_cfg = bwd_configs(pr.d, backend)
    ds_strides = ds.stride()[:3] if bias_grad else (0, 0, 0)
    silu_attention_bwd_dkdv_kernel[(cdiv(pr.seqlen_k, kv_cfg["BLOCK_N"]), pr.b * pr.h_kv)](
        q, k, v, do, dk, dv, bias_ptr, ds if bias_grad else q, cu_arg, scale, inv_n, *pr.strides(q), *pr.strides(k),
        *pr.strides(v), *pr.strides(do), *pr.strides(dk), *pr.strides(dv), *bias_strides, *ds_strides, pr.seqlen_q,
        H_KV=pr.h_kv, GROUP=pr.group, HEAD_DIM=pr.d, CAUSAL=causal, VARLEN=pr.varlen, HAS_BIAS=has_bias,
        BIAS_GRAD=bias_grad, backend=backend, **kv_cfg)
    silu_attention_bwd_dq_kernel[(cdiv(pr.seqlen_q, q_cfg["BLOCK_M"]), pr.b * pr.h)](
        q, k, v, do, dq, bias_ptr, cu_arg, scale, inv_n, *pr.strides(q), *pr.strides(k), *pr.strides(v),
        *pr.strides(do), *pr.strides(dq), *bias_strides, pr.seqlen_q, H=pr.h, GROUP=pr.group, HEAD_DIM=pr.d,
        CAUSAL=causal, VARLEN=pr.varlen, HAS_BIAS=has_bias, backend=backend, **q_cfg)
    return dq, dk, dv, _reduce_to(ds, bias) if bias_grad else ds


def _reduce_to(ds, bias):
    """dS [B, H, S, S] summed over the dimensions the bias broadcasts along, in the bias's shape."""
    dims = [i for i in range(4) if bias.shape[i] == 1 and ds.shape[i] != 1]
    return (ds.sum(dims, keepdim=True) if dims else ds).to(bias.dtype).contiguous()


# -- the torch backend: the same formulas in torch, fp32 (fp64 for fp64 inputs) ---------------------------------
def _dense_silu_attention(q, k, v, bias, causal, scale, n):
    """out [B, S, H, D] of dense inputs (differentiable; the reference uses it too)."""
    group = q.shape[2] // k.shape[2]
    kk, vv = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if bias is not None:
        s = s + bias
    keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device)
    if causal:
        keep = keep.tril()
    a = torch.nn.functional.silu(s) * keep / n
    return torch.einsum("bhqk,bkhd->bqhd", a, vv)


def _dense_silu_attention_backward(do, q, k, v, bias, causal, scale, n):
    group = q.shape[2] // k.shape[2]
    kk, vv = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if bias is not None:
        s = s + bias
    keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device)
    if causal:
        keep = keep.tril()
    sig = torch.sigmoid(s)
    a = s * sig * keep / n
    dv = torch.einsum("bhqk,bqhd->bkhd", a, do)
    ds = torch.einsum("bqhd,bkhd->bhqk", do, vv) * sig * (1 + s * (1 - sig)) * keep / n
    dq = torch.einsum("bhqk,bkhd->bqhd", ds, kk) * scale
    dk = torch.einsum("bhqk,bqhd->bkhd", ds, q) * scale
    b, s_k, h_kv, d = k.shape
    return dq, dk.view(b, s_k, h_kv, group, d).sum(3), dv.view(b, s_k, h_kv, group, d).sum(3), ds


def _torch_forward(q, k, v, bias, cu, max_seqlen, causal, scale):
    ct = torch_compute_dtype(q)
    qf, kf, vf = q.to(ct), k.to(ct), v.to(ct)
    bf = bias.to(ct) if bias is not None else None
    if cu is None:
        return _dense_silu_attention(qf, kf, vf, bf, causal, scale, max(q.shape[1], 1)).to(q.dtype).contiguous()
    out = q.new_zeros(q.shape)
    for i, (r, _) in enumerate(sequence_slices(cu, cu)):
        n = r.stop - r.start
        bb = bf[min(i, bf.shape[0] - 1):][:1, :, :n, :n] if bf is not None else None
        out[r] = _dense_silu_attention(qf[None, r], kf[None, r], vf[None, r], bb, causal, scale, max_seqlen)[0]
    return out


def _torch_backward(do, q, k, v, bias, cu, max_seqlen, causal, scale, bias_grad):
    ct = torch_compute_dtype(q)
    t = [x.to(ct) for x in (do, q, k, v)]
    bf = bias.to(ct) if bias is not None else None
    if cu is None:
        dq, dk, dv, ds = _dense_silu_attention_backward(*t, bf, causal, scale, max(q.shape[1], 1))
        dbias = _reduce_to(ds, bias) if bias_grad else q.new_empty(0)
        return dq.to(q.dtype).contiguous(), dk.to(k.dtype).contiguous(), dv.to(v.dtype).contiguous(), dbias
    dq, dk, dv = q.new_zeros(q.shape), k.new_zeros(k.shape), v.new_zeros(v.shape)
    ds_all = torch.zeros(cu.shape[0] - 1, q.shape[1], max_seqlen, max_seqlen, device=q.device, dtype=ct)
    for i, (r, _) in enumerate(sequence_slices(cu, cu)):
        n = r.stop - r.start
        bb = bf[min(i, bf.shape[0] - 1):][:1, :, :n, :n] if bf is not None else None
        g = _dense_silu_attention_backward(*(x[None, r] for x in t), bb, causal, scale, max_seqlen)
        dq[r], dk[r], dv[r] = g[0][0], g[1][0], g[2][0]
        ds_all[i, :, :n, :n] = g[3][0]
    return dq, dk, dv, _reduce_to(ds_all, bias) if bias_grad else q.new_empty(0)


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _attention(run, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_bias: torch.Tensor | None,
               cu_seqlens: torch.Tensor | None, max_seqlen: int, causal: bool, scale: float) -> torch.Tensor:
    return run(q, k, v, attn_bias, cu_seqlens, max_seqlen, causal, scale)


def _attention_backward(run, do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        attn_bias: torch.Tensor | None, cu_seqlens: torch.Tensor | None, max_seqlen: int,
                        causal: bool, scale: float,
                        bias_grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    do = do if do.stride(-1) == 1 else do.contiguous()
    return run(do, q, k, v, attn_bias, cu_seqlens, max_seqlen, causal, scale, bias_grad)


def _backward_fake(do, q, k, v, attn_bias, cu_seqlens, max_seqlen, causal, scale, bias_grad):
    dbias = attn_bias.new_empty(attn_bias.shape) if bias_grad else q.new_empty(0)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dbias


def _save(ctx, inputs, out):
    q, k, v, bias, cu, *ctx.args = inputs
    ctx.save_for_backward(q, k, v, bias, cu)


def _grads(ctx, backward, dout):
    q, k, v, bias, cu = ctx.saved_tensors
    bias_grad = bias is not None and ctx.needs_input_grad[3]
    dq, dk, dv, dbias = backward(dout, q, k, v, bias, cu, *ctx.args, bias_grad)
    return dq, dk, dv, dbias if bias_grad else None


SILU_ATTENTION = Recipe(
    "silu_attention",
    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_attention,
                  fake=lambda q, *_: q.new_empty(q.shape)),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_attention_backward, fake=_backward_fake),
    save=_save, grads=_grads)


# -- example launches (tle show / compare, the kernel tests and goldens) ----------------------------------------
def _example(kernel_name, device, size):
    """A causal GQA problem with a per-head bias: small for the CPU, mid-sized for the GPU."""
    b, s, h, h_kv, d, dtype = (1, 72, 4, 2, 32, torch.float16) if size == "small" else \
        (2, 2048, 16, 4, 128, torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(b, s, n, d, generator=gen).to(device, dtype) for n in (h, h_kv, h_kv, h))
    bias = torch.randn(b, h, s, s, generator=gen).to(device, dtype)
    pr = Problem(q, k, None, None, None, None)
    scale, inv_n = d ** -0.5, 1.0 / s
    bias_ptr, bias_strides, _ = _bias_args(bias, q)
    label = f"B{b} S{s} H{h}/{h_kv} D{d} causal bias {str(dtype)[6:]}"
    flops = 2 * b * h * s * s * d          # one matmul pair at half (causal) density

    def grads():
        return _torch_backward(do, q, k, v, bias, None, s, True, scale, True)
    if kernel_name == "fwd":
        out = nan_like(q)
        cfg = dict(fwd_config(d, s, "tilelang"), TANH_SIGMOID=True)   # one loop: a launch both lowerings can run
        return tle.Launch(grid=(cdiv(s, cfg["BLOCK_M"]), b * h),
                          args=(q, k, v, out, bias_ptr, q, scale, inv_n, *pr.strides(q), *pr.strides(k),
                                *pr.strides(v), *pr.strides(out), *bias_strides, s),
                          kwargs=dict(H=h, GROUP=pr.group, HEAD_DIM=d, CAUSAL=True, VARLEN=False, HAS_BIAS=True, **cfg),
                          outputs={"out": out}, reference=lambda: {"out": _torch_forward(q, k, v, bias, None, s, True,
                                                                                         scale)},
                          flops=flops, label=label)
    kv_cfg, q_cfg = bwd_configs(d, "tilelang")
    common = (*pr.strides(q), *pr.strides(k), *pr.strides(v), *pr.strides(do))
    if kernel_name == "dkdv":
        dk, dv = nan_like(k), nan_like(v)
        ds = torch.zeros(b, h, s, s, device=device, dtype=dtype)
        return tle.Launch(grid=(cdiv(s, kv_cfg["BLOCK_N"]), b * h_kv),
                          args=(q, k, v, do, dk, dv, bias_ptr, ds, q, scale, inv_n, *common, *pr.strides(dk),
                                *pr.strides(dv), *bias_strides, *ds.stride()[:3], s),
                          kwargs=dict(H_KV=h_kv, GROUP=pr.group, HEAD_DIM=d, CAUSAL=True, VARLEN=False, HAS_BIAS=True,
                                      BIAS_GRAD=True, **kv_cfg),
                          outputs={"dk": dk, "dv": dv, "ds": ds},
                          reference=lambda: dict(zip(("dk", "dv", "ds"), grads()[1:])), flops=2 * flops,
                          label=label, accumulates=("ds",))
    dq = nan_like(q)
    return tle.Launch(grid=(cdiv(s, q_cfg["BLOCK_M"]), b * h),
                      args=(q, k, v, do, dq, bias_ptr, q, scale, inv_n, *common, *pr.strides(dq), *bias_strides, s),
                      kwargs=dict(H=h, GROUP=pr.group, HEAD_DIM=d, CAUSAL=True, VARLEN=False, HAS_BIAS=True, **q_cfg),
                      outputs={"dq": dq}, reference=lambda: {"dq": grads()[0]}, flops=3 * flops // 2, label=label)


@tle.example(silu_attention_fwd_kernel)
def _fwd_example(device, size):
    return _example("fwd", device, size)


@tle.example(silu_attention_bwd_dkdv_kernel)
def _dkdv_example(device, size):
    return _example("dkdv", device, size)


@tle.example(silu_attention_bwd_dq_kernel)
def _dq_example(device, size):
    return _example("dq", device, size)


# -- the public surface -------------------------------------------------------------------------------------
def silu_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, scale: float | None = None,
                   attn_bias: torch.Tensor | None = None, cu_seqlens: torch.Tensor | None = None,
                   max_seqlen: int | None = None, *, backend: str | None = None, fallback: str | None = None):
    """((silu(q kᵀ · scale + attn_bias) ∘ mask) / n) v; the module docstring gives layouts, n and the mask."""
    varlen = cu_seqlens is not None
    scale = check_attention_inputs(q, k, v, varlen, causal, scale)
    h = q.shape[-2]
    if tuple(k.shape[:-2]) != tuple(q.shape[:-2]):
        raise tle.LaunchError(f"'k' has shape {tuple(k.shape)}; expected the rows of q, {tuple(q.shape[:-2])} "
                              f"(self-attention: one sequence of queries and keys)")
    if varlen:
        check_cu_seqlens(cu_seqlens, "cu_seqlens", q.device)
        max_seqlen = longest_sequence(cu_seqlens, "cu_seqlens", q.shape[0], max_seqlen, "max_seqlen")
        batch = cu_seqlens.shape[0] - 1
    else:
        if max_seqlen is not None:
            raise tle.LaunchError("'max_seqlen' goes with packed inputs (cu_seqlens)")
        max_seqlen, batch = q.shape[1], q.shape[0]
    if attn_bias is not None:
        check_tensor(attn_bias, "attn_bias", dtypes=tuple({q.dtype, torch.float32}), rank=4, device=q.device)
        full = (batch, h, max_seqlen, max_seqlen)
        if any(a not in (1, f) for a, f in zip(attn_bias.shape, full)) or tuple(attn_bias.shape[2:]) != full[2:]:
            raise tle.LaunchError(f"'attn_bias' has shape {tuple(attn_bias.shape)}; expected {list(full)}, its batch "
                                  f"and head dimensions may be 1 (broadcast)")
    b = SILU_ATTENTION.resolve(q.device, backend, fallback)
    check_kernel_inputs("silu_attention", b, batch, q=q, k=k, v=v, attn_bias=attn_bias)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    if attn_bias is not None and attn_bias.stride(-1) != 1:
        attn_bias = attn_bias.contiguous()
    return SILU_ATTENTION(q, k, v, attn_bias, cu_seqlens, max_seqlen, causal, scale, backend=b)


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(q, k, v, causal=True, scale=None, attn_bias=None, cu_seqlens=None, max_seqlen=None):
    """Plain differentiable torch (no custom op), one packed sequence at a time: the tests' ground truth."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if cu_seqlens is None:
        return _dense_silu_attention(q, k, v, attn_bias, causal, scale, max(q.shape[1], 1))
    seqs = sequence_slices(cu_seqlens, cu_seqlens)
    n = max_seqlen if max_seqlen is not None else max((r.stop - r.start for r, _ in seqs), default=1)
    outs = []
    for i, (r, _) in enumerate(seqs):
        m = r.stop - r.start
        bb = attn_bias[min(i, attn_bias.shape[0] - 1):][:1, :, :m, :m] if attn_bias is not None else None
        outs.append(_dense_silu_attention(q[None, r], k[None, r], v[None, r], bb, causal, scale, n)[0])
    return torch.cat(outs)


def samples(device, dtype):
    def t(*shape):
        return torch.randn(*shape, device=device, dtype=torch.float32).to(dtype)

    def qkv(b, s, h, h_kv, d):
        return t(b, s, h, d), t(b, s, h_kv, d), t(b, s, h_kv, d)

    cu = torch.tensor([0, 2, 7, 7, 40], dtype=torch.int32, device=device)
    cu_small = torch.tensor([0, 3, 5], dtype=torch.int32, device=device)
    return [Sample(qkv(1, 6, 2, 1, 16), dict(attn_bias=t(1, 2, 6, 6)), label="causal S6 MQA D16 bias"),
            Sample((*(x[0] for x in qkv(1, 5, 2, 2, 16)), True), dict(cu_seqlens=cu_small),
                   label="packed causal D16"),
            Sample((*qkv(2, 17, 2, 2, 32), False), label="full S17 D32"),
            Sample(qkv(1, 129, 4, 2, 64), label="causal S129 GQA 4/2 D64"),
            Sample((*qkv(2, 33, 4, 4, 64), True, 0.3), dict(attn_bias=t(2, 1, 33, 33)),
                   label="bias broadcast over heads, scale 0.3"),
            Sample((*qkv(1, 20, 2, 2, 128), False), dict(attn_bias=t(1, 2, 20, 20)), label="full D128 bias"),
            Sample((*(x[0] for x in qkv(1, 40, 2, 1, 64)), True), dict(cu_seqlens=cu, attn_bias=t(4, 2, 33, 33)),
                   label="packed causal, an empty sequence, per-sequence bias"),
            Sample((*(x[0] for x in qkv(1, 40, 2, 2, 32)), False), dict(cu_seqlens=cu, max_seqlen=48),
                   label="packed full, max_seqlen 48 given")]


def _bench_make(shape, dtype, device):
    b, h, s, d, mask = shape
    x = [torch.randn(b, s, h, d, device=device, dtype=dtype) for _ in range(3)]
    return Sample((*x, mask == "causal"))


def _bench_flops(sample, mode):
    q, k, _, causal = sample.args
    b, s, h, d = q.shape
    fwd = 4 * b * h * s * s * d / (2 if causal else 1)
    return fwd if mode == "fwd" else 2.5 * fwd


def _eager(sample):
    q, k, v, causal = sample.args

    def eager(q=q, k=k, v=v):
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
        a = torch.nn.functional.silu(s)
        if causal:
            a = a.tril()
        return torch.einsum("bhqk,bkhd->bqhd", a / q.shape[1], v)
    return eager


OPERATOR = Operator(
    "silu_attention", fn=silu_attention, reference=reference, samples=samples, grad_inputs=(0, 1, 2, "attn_bias"),
    dtypes=KERNEL_DTYPES,
    bench=BenchSpec(dry_shapes=[(1, 2, 128, 64, "causal"), (1, 2, 128, 64, "full")],
                    shapes=[(4, 32, 4096, 128, "causal"), (4, 32, 4096, 128, "full"), (32, 16, 1024, 64, "causal")],
                    make=_bench_make, flops=_bench_flops, eager=_eager, shape_help="BxHxSxDx(causal|full)"))
