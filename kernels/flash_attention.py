"""FlashAttention, forward and backward: softmax(q kᵀ · scale + mask) v without the score matrix in memory.

`tle.ops.flash_attention(q, k, v, causal=False, scale=None, *, window_size=(-1, -1), softcap=0.0,
cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, return_lse=False, backend=None)`

- q [B, S_q, H, D], k and v [B, S_k, H_kv, D], with H_kv dividing H (grouped-query and multi-query attention:
  query head h reads key/value head h // (H / H_kv)); or, for packed variable-length batches, q [total_q, H, D]
  and k, v [total_k, H_kv, D] with `cu_seqlens_q` / `cu_seqlens_k` (int32 [B + 1], the running sums of the
  lengths) naming where each sequence starts.
- causal: query i of a sequence sees key j when j <= i + S_k - S_q (the mask aligned to the bottom-right
  corner, as FlashAttention 2 aligns it). window_size=(left, right): FlashAttention's sliding window about
  that diagonal (-1 an open side; causal is right = 0). softcap > 0: the scaled scores become
  softcap · tanh(s / softcap). A query that sees no key (S_q > S_k, a window past the keys) gets output 0 and
  lse -inf.
- The kernels also take an additive score bias and dropout (attention_parts.Scores), which
  scaled_dot_product_attention.py uses; each of these, the window's edges and the cap is a constexpr, so a
  launch without them generates the code it did before they existed.
- Returns out (q's shape and dtype) and, with return_lse, the log-sum-exp of the scaled scores in fp32,
  natural log: [B, H, S_q], or [H, total_q] for varlen. lse is not differentiable.

Kernels, each one text lowered to Triton and to TileLang:
- `flash_attention_fwd_kernel`: a program owns BLOCK_M queries of one head and walks the keys in BLOCK_N
  blocks with the online softmax in base 2 (log2(e) folded into the scale); blocks that no mask touches run
  a loop without mask arithmetic, the diagonal and ragged blocks a second loop with it.
- backward, FlashAttention 2's split: `flash_attention_bwd_preprocess_kernel` (delta = rowsum(dO ∘ O)),
  `flash_attention_bwd_dkdv_kernel` (a program owns BLOCK_N keys of one KV head and walks the queries of every
  query head of its group: the GQA sum happens in registers, so results are deterministic) and
  `flash_attention_bwd_dq_kernel` (a program owns BLOCK_M queries and walks the keys). Both recompute the
  probabilities from the forward's lse.
- On TileLang on sm_90, head dims up to 64 run the forward of flash_attention_warp_groups.py instead (the same
  arguments and results, in warp groups; `fwd_kernel`), and plain scores (or dropout without the causal mask) on
  dense inputs at head dim 128 (64 without the causal mask) the backward of flash_attention_bwd_warp_groups.py
  (dK, dV and dQ in one kernel, dQ added with atomics; `bwd_warp_groups_applies`).
"""
from __future__ import annotations

import math

import torch
import triton.language as tl

import tle
from tle.kernels import flash_attention_bwd_warp_groups as bwd_warp_groups
from tle.kernels import flash_attention_warp_groups as warp_groups
from tle.kernels.flash_attention_bench import bench_eager, bench_flops, bench_make, tilelang_example_peer
from tle.kernels.attention_parts import (CAUSAL, DROPOUT_RUNTIME_INTS, Problem, Scores, _dense_attention, _dropout_keep,
                                         _example_inputs, _folded_softmax, _fwd_program, _keep, _sequence,
                                         _torch_backward, _torch_forward, cu_or_dummy, dropout_args, dropout_keep,
                                         nan_like, sequence_slices)
from tle.kernels.dropout_add import U64, _as_i64
from tle.oplib import BenchSpec, Operator, Sample, check_tensor
from tle.oplib.arith import cdiv
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.tensors import targets_sm90

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
KERNEL_DTYPES = (torch.float16, torch.bfloat16)
KERNEL_HEAD_DIMS = (16, 32, 64, 128, 256)


# -- what every kernel does to a tile of scores (Scores, in attention_parts.py) ------------------------------
@tle.jit
def _scores(raw, r2, c2, len_q, len_k, bias_base, stride_bias_m, stride_bias_n, qk_scale, softcap,
            SOFTCAP: tl.constexpr, BIAS: tl.constexpr):
    """A tile of scores in base 2 (log2(e) folded in: qk_scale = scale · log2(e)) from its raw products q·k; r2
    and c2 are its query rows and key columns, shaped to broadcast to the tile ([M, 1] and [1, N], or
    transposed). With SOFTCAP also the cap's tanh t, whose 1 - t² the backward's dS takes (the raw products
    otherwise, unused)."""
    if SOFTCAP:
        # t = tanh(x), x = raw · scale / softcap, as 1 - 2 / (exp(2x) + 1): exact at both ends, where exp2
        # overflows to inf or falls to 0
        t = 1.0 - 2.0 / (tl.math.exp2(raw * (qk_scale * 2.0 / softcap)) + 1.0)
        s = t * (softcap * 1.4426950408889634)
    else:
        t = raw
        s = raw * qk_scale
    if BIAS:
        bias = tl.load(bias_base + r2 * stride_bias_m + c2 * stride_bias_n, mask=(r2 < len_q) & (c2 < len_k),
                       other=0.0)
        s = s + bias.to(tl.float32) * 1.4426950408889634
    return s, t


@tle.jit
def _window_keep(r2, c2, diag, left_edge, CAUSAL: tl.constexpr, LOCAL: tl.constexpr):
    """Where query r2 sees key c2 within the window, r2 + left_edge <= c2 <= r2 + diag (at least one edge)."""
    if CAUSAL:
        keep = c2 <= r2 + diag
        if LOCAL:
            keep = keep & (c2 >= r2 + left_edge)
    else:
        keep = c2 >= r2 + left_edge
    return keep


@tle.jit
def _key_blocks(m0, len_q, len_k, diag, left_edge, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                CAUSAL: tl.constexpr, LOCAL: tl.constexpr, EDGE_MASKED: tl.constexpr):
    """The key blocks a program of queries [m0, m0 + BLOCK_M) walks: (lo, full, hi), blocks [lo, full) seen whole
    by every one of its queries, [full, hi) masked. EDGE_MASKED: the last, partial block of keys is masked."""
    lo = 0
    hi = len_k
    full = len_k
    if EDGE_MASKED:
        full = len_k // BLOCK_N * BLOCK_N
    if CAUSAL:
        hi = tl.minimum(len_k, tl.maximum(m0 + BLOCK_M + diag, 0))
        full = tl.minimum(full, tl.maximum(m0 + diag + 1, 0) // BLOCK_N * BLOCK_N)
    hi = tl.where(m0 < len_q, hi, 0)      # a block past a packed sequence's end reads nothing
    if LOCAL:
        lo = tl.minimum(tl.maximum(m0 + left_edge, 0) // BLOCK_N * BLOCK_N, hi)
        full = lo                         # any block may cross the window's left edge: all are masked
    full = tl.minimum(full, hi)
    return lo, full, hi


@tle.jit
def _query_rows(len_q, q_start, rows_q, VARLEN: tl.constexpr):
    """How many of a program's query rows its q (and dO) block reads: its sequence's, or with packed sequences
    every row up to the packed tensor's end. The rows past the sequence are then other sequences' rows, which
    is harmless: each query row's results are its own (a softmax, dQ) and are not stored past the sequence.
    The load's mask is then the tensor's edge, which TileLang reads as one bulk copy (TMA); a mask inside the
    tensor is a copy then a select in shared memory, element by element over the block's threads."""
    if VARLEN:
        return rows_q - q_start
    return len_q


# -- the forward ------------------------------------------------------------------------------------------
@tle.jit
def _fwd_block(acc, l_i, m_i, q, k_src, v_src, bias_base, stride_kn, stride_vn, stride_bias_m, stride_bias_n,
               offs_m, start_n, len_q, len_k, diag, left_edge, qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo,
               seed_hi, offset_lo, offset_hi, drop_threshold, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, MASKED: tl.constexpr, ROWS_MASKED: tl.constexpr, CAUSAL: tl.constexpr,
               LOCAL: tl.constexpr, FOLD: tl.constexpr, BIAS: tl.constexpr, SOFTCAP: tl.constexpr,
               DROPOUT: tl.constexpr, DESC: tl.constexpr):
    """The online softmax's step over the key block at start_n; MASKED adds the key-length mask and the window's.
    FOLD (a scale in (0, 1e4), no cap, no bias): _folded_softmax, and the mask is the product's starting value
    (0 or -inf), so no pass over the scores applies it. Otherwise the scores are scaled first and masked after
    (a negative scale would turn a -inf start over). k_src and v_src: the KV head's first row, or with DESC
    tensor descriptors of its rows (_row_source). ROWS_MASKED: the block may reach past the keys, whose rows
    then read as zeros; without it every row is a key's."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    cols = start_n + offs_n
    if DESC:
        k = k_src.load([start_n, 0])
    elif ROWS_MASKED:
        k = tl.load(k_src + cols[:, None] * stride_kn + offs_d[None, :], mask=(cols < len_k)[:, None], other=0.0)
    else:
        k = tl.load(k_src + cols[:, None] * stride_kn + offs_d[None, :])
    if MASKED:
        keep = (cols < len_k)[None, :]
        if CAUSAL or LOCAL:
            keep = keep & _window_keep(offs_m[:, None], cols[None, :], diag, left_edge, CAUSAL, LOCAL)
    if FOLD:
        if MASKED:
            start = tl.where(keep, tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), -float("inf"))
            qk = tl.dot(q, tl.trans(k), start)
        else:
            qk = tl.dot(q, tl.trans(k))
        p, alpha, l_i, m_new = _folded_softmax(qk, m_i, l_i, qk_scale)
    else:
        qk, _ = _scores(tl.dot(q, tl.trans(k)), offs_m[:, None], cols[None, :], len_q, len_k, bias_base,
                        stride_bias_m, stride_bias_n, qk_scale, softcap, SOFTCAP, BIAS)
        if MASKED:
            qk = tl.where(keep, qk, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
    if DROPOUT:                           # l_i sums the probabilities before dropout
        p = tl.where(_dropout_keep(0, offs_m[:, None], start_n, offs_n[None, :], bh, seqlen_q, seqlen_k, seed_lo,
                                   seed_hi, offset_lo, offset_hi, drop_threshold), p, 0.0)
    if DESC:
        v = v_src.load([start_n, 0])
    elif ROWS_MASKED:
        v = tl.load(v_src + cols[:, None] * stride_vn + offs_d[None, :], mask=(cols < len_k)[:, None], other=0.0)
    else:
        v = tl.load(v_src + cols[:, None] * stride_vn + offs_d[None, :])
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@tle.jit
def _fwd_blocks(acc, l_i, m_i, q, k_src, v_src, bias_base, stride_kn, stride_vn, stride_bias_m, stride_bias_n,
                offs_m, lo, hi, len_q, len_k, diag, left_edge, qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo,
                seed_hi, offset_lo, offset_hi, drop_threshold, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, LOCAL: tl.constexpr,
                FOLD: tl.constexpr, BIAS: tl.constexpr, SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr,
                DESC: tl.constexpr, ROWS_MASKED: tl.constexpr = True):
    """The online softmax over key blocks [lo, hi), one _fwd_block each."""
    for start_n in range(lo, hi, BLOCK_N):
        acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, k_src, v_src, bias_base, stride_kn, stride_vn, stride_bias_m,
                                   stride_bias_n, offs_m, start_n, len_q, len_k, diag, left_edge, qk_scale, softcap,
                                   bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold,
                                   HEAD_DIM, BLOCK_M, BLOCK_N, MASKED, ROWS_MASKED, CAUSAL, LOCAL, FOLD, BIAS,
                                   SOFTCAP, DROPOUT, DESC)
    return acc, l_i, m_i


@tle.jit
def _row_source(base, stride_row, n_rows, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, DESC: tl.constexpr):
    """Where a head's blocks of rows (keys, values, queries, upstream gradients; dQ's atomic adds) are read from or
    added to: its first row, or with DESC a tensor descriptor of its n_rows rows (a TMA load or reduction on
    Triton; rows past the sequence read as zeros, as the masked loads read them, and left alone by writes). The
    launch asks for DESC only where the tensors' starts and row strides are multiples of 16 bytes (tma_aligned),
    as TMA needs."""
    if DESC:
        return tl.make_tensor_descriptor(base, shape=[n_rows, HEAD_DIM], strides=[stride_row, 1],
                                         block_shape=[BLOCK, HEAD_DIM])
    return base


# seed, offset and threshold change from call to call: runtime values (TileLang compiles in the integer
# arguments it is not told to keep), so a kernel compiles once per shape
@tle.jit(do_not_specialize=DROPOUT_RUNTIME_INTS)
def flash_attention_fwd_kernel(
        q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_q_ptr, cu_k_ptr, sm_scale,
        stride_qb, stride_qm, stride_qh, stride_kb, stride_kn, stride_kh, stride_vb, stride_vn, stride_vh,
        stride_ob, stride_om, stride_oh, stride_lb, stride_lh, seqlen_q, seqlen_k, rows_q,
        bias_ptr, stride_bias_b, stride_bias_h, stride_bias_m, stride_bias_n, window_left, window_right, softcap,
        seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale,
        H: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, SPLIT: tl.constexpr,
        FOLD: tl.constexpr = False, LOCAL: tl.constexpr = False, BIAS: tl.constexpr = False,
        SOFTCAP: tl.constexpr = False, DROPOUT: tl.constexpr = False, DESC: tl.constexpr = False,
        EDGE_TAIL: tl.constexpr = False):
    """rows_q: q's rows (the packed tensor's with VARLEN). EDGE_TAIL (one loop): the loop reads only blocks of
    whole keys, without load masks, and the block that reaches past the keys, if any, runs after it. On
    TileLang a masked load in the loop zero-fills the rows past the keys in shared memory, which puts a barrier
    of all consumer threads before every product."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    len_q, len_k, q_base, k_base, v_base, o_base, lse_base, q_start = _fwd_program(
        q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_q_ptr, cu_k_ptr, stride_qb, stride_qm, stride_qh, stride_kb,
        stride_kn, stride_kh, stride_vb, stride_vn, stride_vh, stride_ob, stride_om, stride_oh, stride_lb, stride_lh,
        seqlen_q, seqlen_k, H, GROUP, VARLEN)
    # the window (Scores): query i sees keys i + left_edge <= j <= i + diag, about the bottom-right diagonal
    diag = len_k - len_q + window_right
    left_edge = len_k - len_q - window_left
    bias_base = bias_ptr
    if BIAS:
        bias_base = bias_ptr + (bh // H) * stride_bias_b + (bh % H) * stride_bias_h

    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < len_q
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=(offs_m < _query_rows(len_q, q_start, rows_q, VARLEN))[:, None], other=0.0)

    lo, full, hi = _key_blocks(m0, len_q, len_k, diag, left_edge, BLOCK_M, BLOCK_N, CAUSAL, LOCAL, True)
    k_src = _row_source(k_base, stride_kn, len_k, HEAD_DIM, BLOCK_N, DESC)
    v_src = _row_source(v_base, stride_vn, len_k, HEAD_DIM, BLOCK_N, DESC)
    # exp(x * scale) = exp2(x * scale * log2(e)); m_i starts finite so a row that sees no key stays at 0
    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - 1.0e30
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if SPLIT:       # two loops: the blocks no mask touches without mask arithmetic
        acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_src, v_src, bias_base, stride_kn, stride_vn,
                                    stride_bias_m, stride_bias_n, offs_m, lo, full, len_q, len_k, diag, left_edge,
                                    qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi,
                                    drop_threshold, HEAD_DIM, BLOCK_M, BLOCK_N, False, CAUSAL, LOCAL, FOLD,
                                    BIAS, SOFTCAP, DROPOUT, DESC)
        acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_src, v_src, bias_base, stride_kn, stride_vn,
                                    stride_bias_m, stride_bias_n, offs_m, full, hi, len_q, len_k, diag, left_edge,
                                    qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi,
                                    drop_threshold, HEAD_DIM, BLOCK_M, BLOCK_N, True, CAUSAL, LOCAL, FOLD,
                                    BIAS, SOFTCAP, DROPOUT, DESC)
    elif EDGE_TAIL:  # one loop over blocks of whole keys, then the block reaching past them
        edge = tl.minimum(tl.maximum(len_k // BLOCK_N * BLOCK_N, lo), hi)
        acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_src, v_src, bias_base, stride_kn, stride_vn,
                                    stride_bias_m, stride_bias_n, offs_m, lo, edge, len_q, len_k, diag, left_edge,
                                    qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi,
                                    drop_threshold, HEAD_DIM, BLOCK_M, BLOCK_N, True, CAUSAL, LOCAL, FOLD,
                                    BIAS, SOFTCAP, DROPOUT, DESC, False)
        for start_n in tl.range(edge, hi, BLOCK_N, num_stages=1):   # at most one block; its own buffers
            acc, l_i, m_i = _fwd_block(acc, l_i, m_i, q, k_src, v_src, bias_base, stride_kn, stride_vn,
                                       stride_bias_m, stride_bias_n, offs_m, start_n, len_q, len_k, diag, left_edge,
                                       qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo,
                                       offset_hi, drop_threshold, HEAD_DIM, BLOCK_M, BLOCK_N, True, True, CAUSAL,
                                       LOCAL, FOLD, BIAS, SOFTCAP, DROPOUT, DESC)
    else:           # one loop, masked throughout: half the loop buffers (shared memory, on TileLang)
        acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_src, v_src, bias_base, stride_kn, stride_vn,
                                    stride_bias_m, stride_bias_n, offs_m, lo, hi, len_q, len_k, diag, left_edge,
                                    qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi,
                                    drop_threshold, HEAD_DIM, BLOCK_M, BLOCK_N, True, CAUSAL, LOCAL, FOLD,
                                    BIAS, SOFTCAP, DROPOUT, DESC)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    if DROPOUT:
        out = out * drop_scale
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=row_ok[:, None])
    if FOLD:
        m_i = m_i * qk_scale
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453          # -inf where the row saw no key
    tl.store(lse_base + offs_m, lse, mask=row_ok)


# -- the backward -----------------------------------------------------------------------------------------
@tle.jit
def flash_attention_bwd_preprocess_kernel(
        o_ptr, do_ptr, delta_ptr, cu_q_ptr, stride_ob, stride_om, stride_oh, stride_dob, stride_dom, stride_doh,
        stride_lb, stride_lh, seqlen_q, H: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
        VARLEN: tl.constexpr):
    pid_m = tl.program_id(0)
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    q_start, len_q = _sequence(cu_q_ptr, b, seqlen_q, VARLEN)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < len_q
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + (q_start + offs_m)[:, None] * stride_om + offs_d[None, :],
                mask=row_ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + (q_start + offs_m)[:, None] * stride_dom
                 + offs_d[None, :], mask=row_ok[:, None], other=0.0).to(tl.float32)
    tl.store(delta_ptr + b * stride_lb + h * stride_lh + q_start + offs_m, tl.sum(o * do, 1), mask=row_ok)


@tle.jit
def _row_lse2(lse_base, rows, row_ok, BIAS: tl.constexpr):
    """The forward's lse of rows in base 2. With a bias a row that sees keys can have every score -inf (lse -inf):
    0 then, so exp2(score - lse) is 0 rather than NaN."""
    lse2 = tl.load(lse_base + rows, mask=row_ok, other=0.0) * 1.4426950408889634
    if BIAS:
        lse2 = tl.where(lse2 == -float("inf"), 0.0, lse2)
    return lse2


@tle.jit
def _dkdv_block(dk, dv, k, v, q_src, do_src, lse_base, delta_base, bias_base, stride_qm, stride_dom,
                stride_bias_m, stride_bias_n, offs_n, start_m, len_q, len_k, diag, left_edge, qk_scale, softcap, bh,
                seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale, dq_desc,
                sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                LOCAL: tl.constexpr, BIAS: tl.constexpr, SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr,
                ATOMIC_DQ: tl.constexpr, DESC: tl.constexpr, ROWS_MASKED: tl.constexpr):
    """dK and dV of one key block from the query block at start_m of one head, all transposed ([keys, queries]).
    ATOMIC_DQ: also the query block's share of dQ, dS K, added to the fp32 dQ of `dq_desc` (the fifth product;
    the dQ kernel's recomputation of P and dP is then not needed). q_src, do_src: as _row_source gives them.
    ROWS_MASKED: the block may reach past the queries, whose q and dO rows then read as zeros."""
    offs_d = tl.arange(0, HEAD_DIM)
    rows = start_m + tl.arange(0, BLOCK_M)
    row_ok = rows < len_q
    if DESC:
        q = q_src.load([start_m, 0])
        do = do_src.load([start_m, 0])
    elif ROWS_MASKED:
        q = tl.load(q_src + rows[:, None] * stride_qm + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        do = tl.load(do_src + rows[:, None] * stride_dom + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    else:
        q = tl.load(q_src + rows[:, None] * stride_qm + offs_d[None, :])
        do = tl.load(do_src + rows[:, None] * stride_dom + offs_d[None, :])
    # rows past the sequence read q = dO = lse = delta = 0: their terms vanish
    lse2 = _row_lse2(lse_base, rows, row_ok, BIAS)
    delta = tl.load(delta_base + rows, mask=row_ok, other=0.0)
    s_t, t_t = _scores(tl.dot(k, tl.trans(q)), rows[None, :], offs_n[:, None], len_q, len_k, bias_base,
                       stride_bias_m, stride_bias_n, qk_scale, softcap, SOFTCAP, BIAS)
    p_t = tl.math.exp2(s_t - lse2[None, :])
    if MASKED:
        p_t = tl.where(_window_keep(rows[None, :], offs_n[:, None], diag, left_edge, CAUSAL, LOCAL), p_t, 0.0)
    if DROPOUT:                           # dV takes the dropped probabilities, dS the dropped dP
        kept = _dropout_keep(start_m, tl.arange(0, BLOCK_M)[None, :], 0, offs_n[:, None], bh, seqlen_q, seqlen_k,
                             seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold)
        dv = tl.dot(tl.where(kept, p_t * drop_scale, 0.0).to(do.dtype), do, dv)
    else:
        dv = tl.dot(p_t.to(do.dtype), do, dv)
    dp_t = tl.dot(v, tl.trans(do))
    if DROPOUT:
        dp_t = tl.where(kept, dp_t * drop_scale, 0.0)
    ds_t = p_t * (dp_t - delta[None, :])
    if SOFTCAP:
        ds_t = ds_t * (1.0 - t_t * t_t)
    ds_t = ds_t.to(q.dtype)
    dk = tl.dot(ds_t, q, dk)
    if ATOMIC_DQ:
        dq_desc.atomic_add([start_m, 0], tl.dot(tl.trans(ds_t), k) * sm_scale)
    return dk, dv


@tle.jit
def _dkdv_blocks(dk, dv, k, v, q_src, do_src, lse_base, delta_base, bias_base, stride_qm, stride_dom,
                 stride_bias_m, stride_bias_n, offs_n, lo, hi, len_q, len_k, diag, left_edge, qk_scale, softcap, bh,
                 seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale, dq_desc,
                 sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                 LOCAL: tl.constexpr, BIAS: tl.constexpr, SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr,
                 ATOMIC_DQ: tl.constexpr, DESC: tl.constexpr, ROWS_MASKED: tl.constexpr = True):
    """dK and dV of one key block from query blocks [lo, hi) of one head, one _dkdv_block each."""
    for start_m in range(lo, hi, BLOCK_M):
        dk, dv = _dkdv_block(dk, dv, k, v, q_src, do_src, lse_base, delta_base, bias_base, stride_qm, stride_dom,
                             stride_bias_m, stride_bias_n, offs_n, start_m, len_q, len_k, diag, left_edge, qk_scale,
                             softcap, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold,
                             drop_scale, dq_desc, sm_scale, HEAD_DIM, BLOCK_M, MASKED, CAUSAL, LOCAL, BIAS, SOFTCAP,
                             DROPOUT, ATOMIC_DQ, DESC, ROWS_MASKED)
    return dk, dv


@tle.jit(do_not_specialize=DROPOUT_RUNTIME_INTS)
def flash_attention_bwd_dkdv_kernel(
        q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, cu_q_ptr, cu_k_ptr, sm_scale,
        stride_qb, stride_qm, stride_qh, stride_kb, stride_kn, stride_kh, stride_vb, stride_vn, stride_vh,
        stride_dob, stride_dom, stride_doh, stride_dkb, stride_dkn, stride_dkh, stride_dvb, stride_dvn,
        stride_dvh, stride_lb, stride_lh, seqlen_q, seqlen_k, bias_ptr, stride_bias_b, stride_bias_h, stride_bias_m,
        stride_bias_n, window_left, window_right, softcap, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold,
        drop_scale, dq_ptr, stride_dqb, stride_dqm, stride_dqh, H_KV: tl.constexpr, GROUP: tl.constexpr,
        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
        VARLEN: tl.constexpr, SPLIT: tl.constexpr, LOCAL: tl.constexpr = False, BIAS: tl.constexpr = False,
        SOFTCAP: tl.constexpr = False, DROPOUT: tl.constexpr = False, ATOMIC_DQ: tl.constexpr = False,
        DESC: tl.constexpr = False, EDGE_TAIL: tl.constexpr = False):
    """dK and dV of a block of keys (and with ATOMIC_DQ dQ too, added in fp32 into dq_ptr's [B, S, H, D] or
    [total, H, D], which starts zeroed). EDGE_TAIL (one loop): as the forward's, over the queries."""
    pid_n = tl.program_id(0)
    b = tl.program_id(1) // H_KV
    h_kv = tl.program_id(1) % H_KV
    q_start, len_q = _sequence(cu_q_ptr, b, seqlen_q, VARLEN)
    k_start, len_k = _sequence(cu_k_ptr, b, seqlen_k, VARLEN)
    diag = len_k - len_q + window_right
    left_edge = len_k - len_q - window_left

    n0 = pid_n * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    col_ok = offs_n < len_k
    k = tl.load(k_ptr + b * stride_kb + (k_start + offs_n)[:, None] * stride_kn + h_kv * stride_kh
                + offs_d[None, :], mask=col_ok[:, None], other=0.0)
    v = tl.load(v_ptr + b * stride_vb + (k_start + offs_n)[:, None] * stride_vn + h_kv * stride_vh
                + offs_d[None, :], mask=col_ok[:, None], other=0.0)

    # the query blocks that see the keys [n0, n0 + BLOCK_N): [lo, full) masked, [full, hi) whole. Causal: from
    # the first query that sees key n0, masked before `full`; a left edge: up to the last query that sees the
    # block's last key, all masked
    lo = 0
    full = 0
    hi = tl.where(n0 < len_k, len_q, 0)
    if CAUSAL:
        lo = tl.maximum(n0 - diag, 0) // BLOCK_M * BLOCK_M
        full = tl.maximum(lo, tl.cdiv(tl.maximum(n0 + BLOCK_N - 1 - diag, 0), BLOCK_M) * BLOCK_M)
    if LOCAL:
        hi = tl.minimum(hi, tl.maximum(n0 + BLOCK_N - left_edge, 0))
        full = hi
    full = tl.minimum(full, hi)

    qk_scale = sm_scale * 1.4426950408889634
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for g in range(GROUP):               # every query head reading this KV head: the GQA sum, in order
        h = h_kv * GROUP + g
        bh = tl.program_id(1) * GROUP + g                # b · H + h
        q_base = q_ptr + b * stride_qb + q_start * stride_qm + h * stride_qh
        do_base = do_ptr + b * stride_dob + q_start * stride_dom + h * stride_doh
        lse_base = lse_ptr + b * stride_lb + h * stride_lh + q_start
        delta_base = delta_ptr + b * stride_lb + h * stride_lh + q_start
        bias_base = bias_ptr
        if BIAS:
            bias_base = bias_ptr + b * stride_bias_b + h * stride_bias_h
        q_src = _row_source(q_base, stride_qm, len_q, HEAD_DIM, BLOCK_M, DESC)
        do_src = _row_source(do_base, stride_dom, len_q, HEAD_DIM, BLOCK_M, DESC)
        dq_desc = dq_ptr
        if ATOMIC_DQ:                    # this head's rows of its sequence: rows past its end are left alone
            dq_desc = _row_source(dq_ptr + b * stride_dqb + q_start * stride_dqm + h * stride_dqh, stride_dqm,
                                  len_q, HEAD_DIM, BLOCK_M, True)
        if SPLIT:
            dk, dv = _dkdv_blocks(dk, dv, k, v, q_src, do_src, lse_base, delta_base, bias_base, stride_qm,
                                  stride_dom, stride_bias_m, stride_bias_n, offs_n, lo, full, len_q, len_k, diag,
                                  left_edge, qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo,
                                  offset_hi, drop_threshold, drop_scale, dq_desc, sm_scale, HEAD_DIM, BLOCK_M, True,
                                  CAUSAL, LOCAL, BIAS, SOFTCAP, DROPOUT, ATOMIC_DQ, DESC)
            dk, dv = _dkdv_blocks(dk, dv, k, v, q_src, do_src, lse_base, delta_base, bias_base, stride_qm,
                                  stride_dom, stride_bias_m, stride_bias_n, offs_n, full, hi, len_q, len_k, diag,
                                  left_edge, qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo,
                                  offset_hi, drop_threshold, drop_scale, dq_desc, sm_scale, HEAD_DIM, BLOCK_M, False,
                                  CAUSAL, LOCAL, BIAS, SOFTCAP, DROPOUT, ATOMIC_DQ, DESC)
        elif EDGE_TAIL:
            edge = tl.minimum(tl.maximum(len_q // BLOCK_M * BLOCK_M, lo), hi)
            dk, dv = _dkdv_blocks(dk, dv, k, v, q_src, do_src, lse_base, delta_base, bias_base, stride_qm,
                                  stride_dom, stride_bias_m, stride_bias_n, offs_n, lo, edge, len_q, len_k, diag,
                                  left_edge, qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo,
                                  offset_hi, drop_threshold, drop_scale, dq_desc, sm_scale, HEAD_DIM, BLOCK_M,
                                  CAUSAL or LOCAL, CAUSAL, LOCAL, BIAS, SOFTCAP, DROPOUT, ATOMIC_DQ, DESC, False)
            for start_m in tl.range(edge, hi, BLOCK_M, num_stages=1):   # at most one block; its own buffers
                dk, dv = _dkdv_block(dk, dv, k, v, q_src, do_src, lse_base, delta_base, bias_base, stride_qm,
                                     stride_dom, stride_bias_m, stride_bias_n, offs_n, start_m, len_q, len_k, diag,
                                     left_edge, qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo, seed_hi,
                                     offset_lo, offset_hi, drop_threshold, drop_scale, dq_desc, sm_scale, HEAD_DIM,
                                     BLOCK_M, CAUSAL or LOCAL, CAUSAL, LOCAL, BIAS, SOFTCAP, DROPOUT, ATOMIC_DQ,
                                     DESC, True)
        else:
            dk, dv = _dkdv_blocks(dk, dv, k, v, q_src, do_src, lse_base, delta_base, bias_base, stride_qm,
                                  stride_dom, stride_bias_m, stride_bias_n, offs_n, lo, hi, len_q, len_k, diag,
                                  left_edge, qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo,
                                  offset_hi, drop_threshold, drop_scale, dq_desc, sm_scale, HEAD_DIM, BLOCK_M,
                                  CAUSAL or LOCAL, CAUSAL, LOCAL, BIAS, SOFTCAP, DROPOUT, ATOMIC_DQ, DESC)

    dk = dk * sm_scale
    tl.store(dk_ptr + b * stride_dkb + (k_start + offs_n)[:, None] * stride_dkn + h_kv * stride_dkh
             + offs_d[None, :], dk.to(dk_ptr.dtype.element_ty), mask=col_ok[:, None])
    tl.store(dv_ptr + b * stride_dvb + (k_start + offs_n)[:, None] * stride_dvn + h_kv * stride_dvh
             + offs_d[None, :], dv.to(dv_ptr.dtype.element_ty), mask=col_ok[:, None])


@tle.jit
def _dq_block(dq, q, do, lse2, delta, k_src, v_src, bias_base, stride_kn, stride_vn, stride_bias_m, stride_bias_n,
              offs_m, start_n, len_q, len_k, diag, left_edge, qk_scale, softcap, bh, seqlen_q, seqlen_k, seed_lo,
              seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale, HEAD_DIM: tl.constexpr,
              BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, LOCAL: tl.constexpr,
              BIAS: tl.constexpr, SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr, DESC: tl.constexpr,
              ROWS_MASKED: tl.constexpr):
    """dQ of one query block from the key block at start_n; keys past the sequence read k = v = 0 and add
    nothing (ROWS_MASKED: the block may reach past them). k_src, v_src: as _row_source gives them."""
    offs_d = tl.arange(0, HEAD_DIM)
    cols = start_n + tl.arange(0, BLOCK_N)
    if DESC:
        k = k_src.load([start_n, 0])
        v = v_src.load([start_n, 0])
    elif ROWS_MASKED:
        k = tl.load(k_src + cols[:, None] * stride_kn + offs_d[None, :], mask=(cols < len_k)[:, None], other=0.0)
        v = tl.load(v_src + cols[:, None] * stride_vn + offs_d[None, :], mask=(cols < len_k)[:, None], other=0.0)
    else:
        k = tl.load(k_src + cols[:, None] * stride_kn + offs_d[None, :])
        v = tl.load(v_src + cols[:, None] * stride_vn + offs_d[None, :])
    s, t = _scores(tl.dot(q, tl.trans(k)), offs_m[:, None], cols[None, :], len_q, len_k, bias_base,
                   stride_bias_m, stride_bias_n, qk_scale, softcap, SOFTCAP, BIAS)
    p = tl.math.exp2(s - lse2[:, None])
    if MASKED:
        p = tl.where(_window_keep(offs_m[:, None], cols[None, :], diag, left_edge, CAUSAL, LOCAL), p, 0.0)
    dp = tl.dot(do, tl.trans(v))
    if DROPOUT:
        dp = tl.where(_dropout_keep(0, offs_m[:, None], start_n, tl.arange(0, BLOCK_N)[None, :], bh, seqlen_q,
                                    seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold),
                      dp * drop_scale, 0.0)
    ds = p * (dp - delta[:, None])
    if SOFTCAP:
        ds = ds * (1.0 - t * t)
    return tl.dot(ds.to(k.dtype), k, dq)


@tle.jit
def _dq_blocks(dq, q, do, lse2, delta, k_src, v_src, bias_base, stride_kn, stride_vn, stride_bias_m,
               stride_bias_n, offs_m, lo, hi, len_q, len_k, diag, left_edge, qk_scale, softcap, bh, seqlen_q,
               seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale, HEAD_DIM: tl.constexpr,
               BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, LOCAL: tl.constexpr,
               BIAS: tl.constexpr, SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr, DESC: tl.constexpr,
               ROWS_MASKED: tl.constexpr = True):
    """dQ of one query block from key blocks [lo, hi), one _dq_block each."""
    for start_n in range(lo, hi, BLOCK_N):
        dq = _dq_block(dq, q, do, lse2, delta, k_src, v_src, bias_base, stride_kn, stride_vn, stride_bias_m,
                       stride_bias_n, offs_m, start_n, len_q, len_k, diag, left_edge, qk_scale, softcap, bh,
                       seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale,
                       HEAD_DIM, BLOCK_N, MASKED, CAUSAL, LOCAL, BIAS, SOFTCAP, DROPOUT, DESC, ROWS_MASKED)
    return dq


@tle.jit(do_not_specialize=DROPOUT_RUNTIME_INTS)
def flash_attention_bwd_dq_kernel(
        q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, cu_q_ptr, cu_k_ptr, sm_scale,
        stride_qb, stride_qm, stride_qh, stride_kb, stride_kn, stride_kh, stride_vb, stride_vn, stride_vh,
        stride_dob, stride_dom, stride_doh, stride_dqb, stride_dqm, stride_dqh, stride_lb, stride_lh,
        seqlen_q, seqlen_k, rows_q,
        bias_ptr, stride_bias_b, stride_bias_h, stride_bias_m, stride_bias_n, window_left, window_right, softcap,
        seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale,
        H: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, SPLIT: tl.constexpr,
        LOCAL: tl.constexpr = False, BIAS: tl.constexpr = False, SOFTCAP: tl.constexpr = False,
        DROPOUT: tl.constexpr = False, DESC: tl.constexpr = False, EDGE_TAIL: tl.constexpr = False):
    """rows_q and EDGE_TAIL (one loop, over the keys): as the forward's."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    q_start, len_q = _sequence(cu_q_ptr, b, seqlen_q, VARLEN)
    k_start, len_k = _sequence(cu_k_ptr, b, seqlen_k, VARLEN)
    diag = len_k - len_q + window_right
    left_edge = len_k - len_q - window_left

    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < len_q
    rows = q_start + offs_m
    read = (offs_m < _query_rows(len_q, q_start, rows_q, VARLEN))[:, None]
    q = tl.load(q_ptr + b * stride_qb + rows[:, None] * stride_qm + h * stride_qh + offs_d[None, :], mask=read,
                other=0.0)
    do = tl.load(do_ptr + b * stride_dob + rows[:, None] * stride_dom + h * stride_doh + offs_d[None, :], mask=read,
                 other=0.0)
    lse2 = _row_lse2(lse_ptr + b * stride_lb + h * stride_lh, rows, row_ok, BIAS)
    delta = tl.load(delta_ptr + b * stride_lb + h * stride_lh + rows, mask=row_ok, other=0.0)

    lo, full, hi = _key_blocks(m0, len_q, len_k, diag, left_edge, BLOCK_M, BLOCK_N, CAUSAL, LOCAL, False)
    k_base = k_ptr + b * stride_kb + k_start * stride_kn + (h // GROUP) * stride_kh
    v_base = v_ptr + b * stride_vb + k_start * stride_vn + (h // GROUP) * stride_vh
    k_src = _row_source(k_base, stride_kn, len_k, HEAD_DIM, BLOCK_N, DESC)
    v_src = _row_source(v_base, stride_vn, len_k, HEAD_DIM, BLOCK_N, DESC)
    bias_base = bias_ptr
    if BIAS:
        bias_base = bias_ptr + b * stride_bias_b + h * stride_bias_h
    qk_scale = sm_scale * 1.4426950408889634
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if SPLIT:
        dq = _dq_blocks(dq, q, do, lse2, delta, k_src, v_src, bias_base, stride_kn, stride_vn, stride_bias_m,
                        stride_bias_n, offs_m, lo, full, len_q, len_k, diag, left_edge, qk_scale, softcap, bh, seqlen_q,
                        seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale, HEAD_DIM,
                        BLOCK_N, False, CAUSAL, LOCAL, BIAS, SOFTCAP, DROPOUT, DESC)
        dq = _dq_blocks(dq, q, do, lse2, delta, k_src, v_src, bias_base, stride_kn, stride_vn, stride_bias_m,
                        stride_bias_n, offs_m, full, hi, len_q, len_k, diag, left_edge, qk_scale, softcap, bh, seqlen_q,
                        seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale, HEAD_DIM,
                        BLOCK_N, True, CAUSAL, LOCAL, BIAS, SOFTCAP, DROPOUT, DESC)
    elif EDGE_TAIL:
        edge = tl.minimum(tl.maximum(len_k // BLOCK_N * BLOCK_N, lo), hi)
        dq = _dq_blocks(dq, q, do, lse2, delta, k_src, v_src, bias_base, stride_kn, stride_vn, stride_bias_m,
                        stride_bias_n, offs_m, lo, edge, len_q, len_k, diag, left_edge, qk_scale, softcap,
                        bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale,
                        HEAD_DIM, BLOCK_N, CAUSAL or LOCAL, CAUSAL, LOCAL, BIAS, SOFTCAP, DROPOUT, DESC, False)
        for start_n in tl.range(edge, hi, BLOCK_N, num_stages=1):   # at most one block; its own buffers
            dq = _dq_block(dq, q, do, lse2, delta, k_src, v_src, bias_base, stride_kn, stride_vn, stride_bias_m,
                           stride_bias_n, offs_m, start_n, len_q, len_k, diag, left_edge, qk_scale, softcap, bh,
                           seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale,
                           HEAD_DIM, BLOCK_N, CAUSAL or LOCAL, CAUSAL, LOCAL, BIAS, SOFTCAP, DROPOUT, DESC, True)
    else:
        dq = _dq_blocks(dq, q, do, lse2, delta, k_src, v_src, bias_base, stride_kn, stride_vn, stride_bias_m,
                        stride_bias_n, offs_m, lo, hi, len_q, len_k, diag, left_edge, qk_scale, softcap,
                        bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale,
                        HEAD_DIM, BLOCK_N, CAUSAL or LOCAL, CAUSAL, LOCAL, BIAS, SOFTCAP, DROPOUT, DESC)
    dq = dq * sm_scale
    tl.store(dq_ptr + b * stride_dqb + rows[:, None] * stride_dqm + h * stride_dqh + offs_d[None, :],
             dq.to(dq_ptr.dtype.element_ty), mask=row_ok[:, None])


# -- launch configurations ----------------------------------------------------------------------------------
def fwd_config(head_dim: int, max_seqlen_q: int, backend: str, dropout: bool = False) -> dict:
    """BLOCK_M, BLOCK_N, num_warps, num_stages and SPLIT of the forward on `backend`. SPLIT (two loops) on
    Triton; one loop on TileLang, whose pipelined loops each keep their own stages of K and V in shared memory
    (two loops at BLOCK_N 64, 3 stages, D 128 asked for 336 KiB). `dropout`: the kernel draws a dropout mask.
    See docs/benchmark/flash_attention.md and scaled_dot_product_attention.md."""
    if head_dim <= 64:
        cfg = (dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3) if backend == "triton" else
               dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3))
    elif head_dim <= 128 and dropout:
        # the H200 dropout sweep (B4 H32 S4096 D128 causal, 10%): Triton 64x64/4/3 213 TFLOP/s against 177 at
        # 128x128/8/2, TileLang 3 stages 194 against 186 with 2
        cfg = (dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3) if backend == "triton" else
               dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3))
    elif head_dim <= 128:
        cfg = dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=2)
    else:                                 # Triton's K/V through TMA: 490 against 465 TFLOP/s (D 256, H200)
        cfg = dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2, DESC=backend == "triton")
    if max_seqlen_q <= 64:                # short queries: fewer idle rows per program
        cfg.update(BLOCK_M=64, num_warps=4)
    return dict(cfg, SPLIT=backend == "triton")


def edge_tail(cfg: dict, varlen: bool, backend: str) -> bool:
    """Whether a one-loop kernel runs the block that reaches past the sequence after its loop (EDGE_TAIL): on
    TileLang, for packed sequences, whose lengths are known only at run time (a dense length the lowering knows
    needs no load mask). TileLang places the tail's buffers where the loop's were."""
    return backend == "tilelang" and varlen and not cfg["SPLIT"] and not cfg.get("DESC")


def tma_aligned(*tensors: torch.Tensor) -> bool:
    """Whether each tensor's start and every stride but the last (1) are positive multiples of 16 bytes: what a
    tensor descriptor over its rows (a TMA load) needs."""
    return all(t.stride(-1) == 1 and t.data_ptr() % 16 == 0
               and all(st > 0 and st * t.element_size() % 16 == 0 for st in t.stride()[:-1]) for t in tensors)


def descriptors_if_aligned(cfg: dict, *tensors: torch.Tensor) -> dict:
    """`cfg`, its DESC (rows of `tensors` read through tensor descriptors) dropped where TMA cannot take them."""
    return cfg if not cfg.get("DESC") or tma_aligned(*tensors) else dict(cfg, DESC=False)


def _unshaped(sc: Scores) -> bool:
    """No cap or bias, and no window beyond the causal mask (dropout aside): the warp-group backward's scores."""
    return sc.window in ((None, None), (None, 0)) and sc.softcap == 0 and sc.bias is None


def _plain(sc: Scores) -> bool:
    """No cap, bias or dropout, and no window beyond the causal mask: what the warp-group forward computes."""
    return _unshaped(sc) and sc.dropout_p == 0


def fwd_kernel(head_dim: int, max_seqlen_q: int, backend: str, *, sm90: bool, scale: float = 1.0,
               scores: Scores = CAUSAL):
    """The forward's kernel and launch. On TileLang on sm_90, for head dims up to 64 and more than 64 queries,
    plain scores (_plain): flash_attention_warp_groups's kernel. Otherwise flash_attention_fwd_kernel, on
    TileLang at head dims 65-128 with FOLD where the scale allows it and no cap or bias adds to the scores. Both
    folded forms take a scale in (0, 1e4): positive, so the mask's -inf stays -inf, and small enough that the
    running maximum's start (-1e30, unscaled) stays finite once scaled. The figures behind each choice:
    docs/benchmark/flash_attention.md."""
    fold = 0 < scale < 1e4
    if backend == "tilelang" and sm90 and head_dim <= 64 and max_seqlen_q > 64 and fold and _plain(scores):
        # AHEAD without the causal mask: 345 against 331 TFLOP/s (B32 H16 S1024 D64, H200, two runs); causal
        # 221 against 229-246 (docs/benchmark/flash_attention.md)
        causal = scores.window[1] is not None
        return warp_groups.flash_attention_fwd_warp_groups_kernel, dict(warp_groups.fwd_warp_groups_config(head_dim),
                                                                        AHEAD=not causal)
    # FOLD where it was measured faster (D128); at D64 with 128x128 tiles causal it ran slower, and Triton's
    # causal D128 too, so those keep the scaled form until measured otherwise
    fold = fold and scores.softcap == 0 and scores.bias is None
    return flash_attention_fwd_kernel, dict(fwd_config(head_dim, max_seqlen_q, backend, scores.dropout_p > 0),
                                            FOLD=fold and backend == "tilelang" and 64 < head_dim <= 128)


def bwd_configs(head_dim: int, backend: str, dropout: bool = False) -> tuple[dict, dict]:
    """(dK/dV kernel, dQ kernel) launch configurations on `backend` (SPLIT as in the forward); `dropout`: the
    kernels regenerate a dropout mask."""
    triton = backend == "triton"
    if head_dim <= 64:
        kv, q = ((dict(BLOCK_M=32, BLOCK_N=128, num_warps=4, num_stages=3),
                  dict(BLOCK_M=128, BLOCK_N=32, num_warps=4, num_stages=3)) if triton else
                 (dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
                  dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2)))
    elif head_dim <= 128:
        kv, q = (dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=2) if triton else
                 dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
                 dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=2))
        if dropout:
            # the H200 sweep (B4 H32 S4096 D128 causal, 10%), dQ in 128x64 blocks against 128x128: Triton 184
            # against 170 TFLOP/s; TileLang, with the 4-warp 64x64 dK/dV, 182 against 151 with the 8-warp one it
            # took while the mask drew a Philox per probability (4 warps spilled then)
            q = dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2)
    else:
        kv, q = (dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=2),
                 dict(BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=2))
    return dict(kv, SPLIT=triton), dict(q, SPLIT=triton)


def bwd_warp_groups_applies(head_dim: int, backend: str, *, sm90: bool, scores: Scores, varlen: bool = False) -> bool:
    """Whether the backward runs flash_attention_bwd_warp_groups.py's kernel (dK, dV and dQ in one kernel, dQ added
    with atomics): TileLang on sm_90, no window beyond the causal mask and no cap or bias, dense sequences, head
    dim 128, or 64 without the causal mask, and atomics allowed (not under torch.use_deterministic_algorithms:
    they add in any order). With dropout only without the causal mask. Where it was measured slower it is not
    taken (docs/benchmark/flash_attention.md, the H200): packed sequences (the rows past a sequence's end make its
    loads cp.async copies and its dQ per-element atomics: 78 against 264 TFLOP/s), D64 causal (213 against 238),
    and dropout with the causal mask (B4 H32 S4096 D128, 10%: 7.84 against 7.58 ms; without the mask it ran
    24% faster than the two kernels at S8192 D128 and at S1024 D64)."""
    shape_ok = head_dim == 128 or (head_dim == 64 and scores.window[1] is None)
    dropout_ok = scores.dropout_p == 0 or scores.window[1] is None
    return (backend == "tilelang" and sm90 and shape_ok and dropout_ok and not varlen
            and _unshaped(scores) and not torch.are_deterministic_algorithms_enabled())


PREPROCESS_BLOCK_M = 64


def score_args(sc: Scores, like: torch.Tensor) -> tuple:
    """The kernels' arguments bias_ptr .. drop_scale for `sc` (`like`: the pointer passed, never read, without a
    bias; an open side of the window passes 0, never read)."""
    bias, strides = (sc.bias, tuple(sc.bias.stride())) if sc.bias is not None else (like, (0, 0, 0, 0))
    left, right = sc.window
    return (bias, *strides, left or 0, right or 0, float(sc.softcap), *dropout_args(sc))


def score_flags(sc: Scores) -> dict:
    """The kernels' constexprs for `sc`."""
    left, right = sc.window
    return dict(CAUSAL=right is not None, LOCAL=left is not None, BIAS=sc.bias is not None, SOFTCAP=sc.softcap > 0,
                DROPOUT=sc.dropout_p > 0)


# -- the kernel backends ------------------------------------------------------------------------------------
def _kernel_forward(q, k, v, cu_q, cu_k, max_q, max_k, sc, scale, backend):
    pr = Problem(q, k, cu_q, cu_k, max_q, max_k)
    out = q.new_empty(q.shape)            # contiguous, whatever q's strides (as the fake op says)
    lse = torch.empty(pr.lse_shape(q), device=q.device, dtype=torch.float32)
    if out.numel() == 0 or pr.b == 0:
        return out, lse.fill_(-math.inf)
    kernel, cfg = fwd_kernel(pr.d, pr.seqlen_q, backend, sm90=targets_sm90(q.device), scale=scale, scores=sc)
    cfg = descriptors_if_aligned(cfg, k, v)
    if kernel is flash_attention_fwd_kernel:
        rest, flags = (pr.rows_q, *score_args(sc, lse)), score_flags(sc)
        cfg = dict(cfg, EDGE_TAIL=edge_tail(cfg, pr.varlen, backend))
    else:                                 # the warp-group forward: no rows_q; plain scores, causal or not
        rest, flags = (), dict(CAUSAL=sc.window[1] is not None)
    grid = (cdiv(pr.seqlen_q, cfg["BLOCK_M"]), pr.b * pr.h)
    kernel[grid](
        q, k, v, out, lse, cu_or_dummy(cu_q, lse), cu_or_dummy(cu_k, lse), scale,
        *pr.strides(q), *pr.strides(k), *pr.strides(v), *pr.strides(out), *pr.lse_strides(lse),
        pr.seqlen_q, pr.seqlen_k, *rest, H=pr.h, GROUP=pr.group, HEAD_DIM=pr.d, VARLEN=pr.varlen,
        backend=backend, **flags, **cfg)
    return out, lse


def _kernel_backward(do, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, sc, scale, backend):
    pr = Problem(q, k, cu_q, cu_k, max_q, max_k)
    dq, dk, dv = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
    if pr.b == 0 or q.numel() == 0:
        return dq, dk.zero_(), dv.zero_()
    if k.numel() == 0:
        return dq.zero_(), dk, dv
    lse = lse.contiguous()                # delta takes its layout: one set of strides serves both
    cu_q_arg, cu_k_arg = cu_or_dummy(cu_q, lse), cu_or_dummy(cu_k, lse)
    delta = torch.empty_like(lse)
    flash_attention_bwd_preprocess_kernel[(cdiv(pr.seqlen_q, PREPROCESS_BLOCK_M), pr.b * pr.h)](
        out, do, delta, cu_q_arg, *pr.strides(out), *pr.strides(do), *pr.lse_strides(lse), pr.seqlen_q,
        H=pr.h, HEAD_DIM=pr.d, BLOCK_M=PREPROCESS_BLOCK_M, VARLEN=pr.varlen, backend=backend, num_warps=4)
    if bwd_warp_groups_applies(pr.d, backend, sm90=targets_sm90(q.device), scores=sc, varlen=pr.varlen):
        return _warp_groups_backward(pr, do, q, k, v, lse, delta, dq, dk, dv, cu_q_arg, cu_k_arg, sc, scale)
    kv_cfg, q_cfg = bwd_configs(pr.d, backend, sc.dropout_p > 0)
    kv_cfg, q_cfg = descriptors_if_aligned(kv_cfg, q, do), descriptors_if_aligned(q_cfg, k, v)
    kv_cfg, q_cfg = (dict(c, EDGE_TAIL=edge_tail(c, pr.varlen, backend)) for c in (kv_cfg, q_cfg))
    if kv_cfg.get("ATOMIC_DQ") and torch.are_deterministic_algorithms_enabled():
        kv_cfg = dict(kv_cfg, ATOMIC_DQ=False)     # atomics add in any order: the dQ kernel's sum is in order
    scores, flags = score_args(sc, lse), score_flags(sc)
    # with ATOMIC_DQ the dK/dV kernel adds dQ into fp32 (zeroed here, cast after); else the dQ kernel computes it
    dq_acc = torch.zeros(q.shape, device=q.device, dtype=torch.float32) if kv_cfg.get("ATOMIC_DQ") else dq
    flash_attention_bwd_dkdv_kernel[(cdiv(pr.seqlen_k, kv_cfg["BLOCK_N"]), pr.b * pr.h_kv)](
        q, k, v, do, lse, delta, dk, dv, cu_q_arg, cu_k_arg, scale, *pr.strides(q), *pr.strides(k), *pr.strides(v),
        *pr.strides(do), *pr.strides(dk), *pr.strides(dv), *pr.lse_strides(lse), pr.seqlen_q, pr.seqlen_k, *scores,
        dq_acc, *pr.strides(dq_acc), H_KV=pr.h_kv, GROUP=pr.group, HEAD_DIM=pr.d, VARLEN=pr.varlen,
        backend=backend, **flags, **kv_cfg)
    if kv_cfg.get("ATOMIC_DQ"):
        return dq.copy_(dq_acc), dk, dv
    flash_attention_bwd_dq_kernel[(cdiv(pr.seqlen_q, q_cfg["BLOCK_M"]), pr.b * pr.h)](
        q, k, v, do, lse, delta, dq, cu_q_arg, cu_k_arg, scale, *pr.strides(q), *pr.strides(k), *pr.strides(v),
        *pr.strides(do), *pr.strides(dq), *pr.lse_strides(lse), pr.seqlen_q, pr.seqlen_k, pr.rows_q, *scores,
        H=pr.h, GROUP=pr.group, HEAD_DIM=pr.d, VARLEN=pr.varlen, backend=backend, **flags, **q_cfg)
    return dq, dk, dv


def _warp_groups_backward(pr, do, q, k, v, lse, delta, dq, dk, dv, cu_q_arg, cu_k_arg, sc, scale):
    """dQ, dK, dV from flash_attention_bwd_warp_groups_kernel: dQ added into fp32 zeros, then cast."""
    dq_acc = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    cfg = bwd_warp_groups.bwd_warp_groups_config(pr.d)
    bwd_warp_groups.flash_attention_bwd_warp_groups_kernel[(cdiv(pr.seqlen_k, cfg["BLOCK_N"]), pr.b * pr.h_kv)](
        q, k, v, do, lse, delta, dk, dv, dq_acc, cu_q_arg, cu_k_arg, scale, *pr.strides(q), *pr.strides(k),
        *pr.strides(v), *pr.strides(do), *pr.strides(dk), *pr.strides(dv), *pr.strides(dq_acc), *pr.lse_strides(lse),
        pr.seqlen_q, pr.seqlen_k, *dropout_args(sc), H_KV=pr.h_kv, GROUP=pr.group, HEAD_DIM=pr.d,
        CAUSAL=sc.window[1] is not None, VARLEN=pr.varlen, DROPOUT=sc.dropout_p > 0, backend="tilelang", **cfg)
    return dq.copy_(dq_acc), dk, dv


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
# The ops take the window's edges as optional ints (None: open), the dropout's seed and offset as int64
# holding their 64 unsigned bits; bias is not differentiable (the public functions refuse one that asks)
def _op_scores(bias, window_left, window_right, softcap, dropout_p, seed, offset) -> Scores:
    """The Scores of the ops' arguments (seed and offset back to their unsigned 64 bits)."""
    return Scores((window_left, window_right), softcap, bias, dropout_p, seed & U64, offset & U64)


def _attention(run, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
               cu_seqlens_q: torch.Tensor | None, cu_seqlens_k: torch.Tensor | None, max_seqlen_q: int,
               max_seqlen_k: int, window_left: int | None, window_right: int | None, softcap: float,
               dropout_p: float, seed: int, offset: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    sc = _op_scores(bias, window_left, window_right, softcap, dropout_p, seed, offset)
    return run(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sc, scale)


def _attention_backward(run, do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                        lse: torch.Tensor, bias: torch.Tensor | None, cu_seqlens_q: torch.Tensor | None,
                        cu_seqlens_k: torch.Tensor | None, max_seqlen_q: int, max_seqlen_k: int,
                        window_left: int | None, window_right: int | None, softcap: float, dropout_p: float,
                        seed: int, offset: int, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    do = do if do.stride(-1) == 1 else do.contiguous()
    sc = _op_scores(bias, window_left, window_right, softcap, dropout_p, seed, offset)
    return run(do, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sc, scale)


def _torch_stage(q, k, v, cu_q, cu_k, max_q, max_k, sc, scale):     # the longest sequences size grids only
    return _torch_forward(q, k, v, cu_q, cu_k, sc, scale)


def _torch_backward_stage(do, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, sc, scale):
    return _torch_backward(do, q, k, v, out, lse, cu_q, cu_k, sc, scale)


def _forward_fake(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *_):
    pr = Problem(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return q.new_empty(q.shape), q.new_empty(pr.lse_shape(q), dtype=torch.float32)


def _save(ctx, inputs, output):
    q, k, v, bias, cu_q, cu_k, *ctx.args = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, bias, cu_q, cu_k)
    ctx.mark_non_differentiable(lse)


def _grads(ctx, backward, dout, _dlse):
    q, k, v, out, lse, bias, cu_q, cu_k = ctx.saved_tensors
    return backward(dout, q, k, v, out, lse, bias, cu_q, cu_k, *ctx.args)


FLASH_ATTENTION = Recipe(
    "flash_attention",
    forward=Stage(torch=_torch_stage, kernels=_kernel_forward, adapt=_attention, fake=_forward_fake),
    backward=Stage(torch=_torch_backward_stage, kernels=_kernel_backward, adapt=_attention_backward,
                   fake=lambda do, q, k, v, *_: (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape))),
    save=_save, grads=_grads)


def attention_op(q, k, v, sc: Scores, scale: float, backend: str, *, cu_seqlens_q=None, cu_seqlens_k=None,
                 max_seqlen_q=None, max_seqlen_k=None):
    """The tle::flash_attention op on checked inputs ([B, S, H, D], or packed with cu_seqlens and the longest
    lengths): (out, lse)."""
    if cu_seqlens_q is None:
        max_seqlen_q, max_seqlen_k = q.shape[1], k.shape[1]
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    left, right = sc.window
    return FLASH_ATTENTION(q, k, v, sc.bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, left, right,
                           float(sc.softcap), float(sc.dropout_p), _as_i64(sc.seed), _as_i64(sc.offset), scale,
                           backend=backend)


# -- example launches (tle show / compare, the kernel tests and goldens) ----------------------------------------
def _example_saved(q, k, v, scale):
    """What the forward saves (out, lse) and an upstream gradient, for the backward kernels' examples."""
    out, lse = _torch_forward(q, k, v, None, None, CAUSAL, scale)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(q.device, q.dtype)
    return out, lse, do


@tle.example(flash_attention_fwd_kernel)
def _fwd_example(device, size):
    q, k, v, scale, label = _example_inputs(device, size)
    pr = Problem(q, k, None, None, None, None)
    out, lse = nan_like(q), nan_like(q[..., 0].transpose(1, 2), torch.float32)
    cfg = fwd_config(pr.d, pr.seqlen_q, "tilelang")      # one loop: a launch both lowerings can run

    def ref():
        o, l = _torch_forward(q, k, v, None, None, CAUSAL, scale)
        return {"out": o, "lse": l}
    return tle.Launch(grid=(cdiv(pr.seqlen_q, cfg["BLOCK_M"]), pr.b * pr.h),
                      args=(q, k, v, out, lse, lse, lse, scale, *pr.strides(q), *pr.strides(k), *pr.strides(v),
                            *pr.strides(out), *pr.lse_strides(lse), pr.seqlen_q, pr.seqlen_k, pr.rows_q,
                            *score_args(CAUSAL, lse)),
                      kwargs=dict(H=pr.h, GROUP=pr.group, HEAD_DIM=pr.d, VARLEN=False, FOLD=True, **score_flags(CAUSAL),
                                  **cfg),
                      outputs={"out": out, "lse": lse}, reference=ref,
                      flops=2 * pr.b * pr.h * pr.seqlen_q * pr.seqlen_k * pr.d, label=label)


@tle.example(flash_attention_bwd_preprocess_kernel)
def _preprocess_example(device, size):
    q, k, v, scale, label = _example_inputs(device, size)
    pr = Problem(q, k, None, None, None, None)
    out, lse, do = _example_saved(q, k, v, scale)
    delta = nan_like(lse)
    return tle.Launch(grid=(cdiv(pr.seqlen_q, PREPROCESS_BLOCK_M), pr.b * pr.h),
                      args=(out, do, delta, lse, *pr.strides(out), *pr.strides(do), *pr.lse_strides(lse), pr.seqlen_q),
                      kwargs=dict(H=pr.h, HEAD_DIM=pr.d, BLOCK_M=PREPROCESS_BLOCK_M, VARLEN=False, num_warps=4),
                      outputs={"delta": delta},
                      reference=lambda: {"delta": (out.float() * do.float()).sum(-1).transpose(1, 2)},
                      bytes=2 * out.numel() * out.element_size() + delta.numel() * 4, label=label)


def _bwd_launch(kernel_name, device, size):
    q, k, v, scale, label = _example_inputs(device, size)
    pr = Problem(q, k, None, None, None, None)
    out, lse, do = _example_saved(q, k, v, scale)
    delta = (out.float() * do.float()).sum(-1).transpose(1, 2).contiguous()
    refs = dict(zip(("dq", "dk", "dv"), _torch_backward(do.float(), q.float(), k.float(), v.float(), out.float(), lse,
                                                        None, None, CAUSAL, scale)))
    common = (*pr.strides(q), *pr.strides(k), *pr.strides(v), *pr.strides(do))
    kv_cfg, q_cfg = bwd_configs(pr.d, "tilelang")
    flops = 2 * pr.b * pr.h * pr.seqlen_q * pr.seqlen_k * pr.d     # causal: half of 4·B·H·S²·D per matmul pair
    if kernel_name == "dkdv":
        dk, dv = nan_like(k), nan_like(v)
        return tle.Launch(grid=(cdiv(pr.seqlen_k, kv_cfg["BLOCK_N"]), pr.b * pr.h_kv),
                          args=(q, k, v, do, lse, delta, dk, dv, lse, lse, scale, *common, *pr.strides(dk),
                                *pr.strides(dv), *pr.lse_strides(lse), pr.seqlen_q, pr.seqlen_k,
                                *score_args(CAUSAL, lse), lse, 0, 0, 0),
                          kwargs=dict(H_KV=pr.h_kv, GROUP=pr.group, HEAD_DIM=pr.d, VARLEN=False, **score_flags(CAUSAL),
                                      **kv_cfg),
                          outputs={"dk": dk, "dv": dv}, reference=lambda: {"dk": refs["dk"], "dv": refs["dv"]},
                          flops=2 * flops, label=label)
    dq = nan_like(q)
    return tle.Launch(grid=(cdiv(pr.seqlen_q, q_cfg["BLOCK_M"]), pr.b * pr.h),
                      args=(q, k, v, do, lse, delta, dq, lse, lse, scale, *common, *pr.strides(dq),
                            *pr.lse_strides(lse), pr.seqlen_q, pr.seqlen_k, pr.rows_q, *score_args(CAUSAL, lse)),
                      kwargs=dict(H=pr.h, GROUP=pr.group, HEAD_DIM=pr.d, VARLEN=False, **score_flags(CAUSAL), **q_cfg),
                      outputs={"dq": dq}, reference=lambda: {"dq": refs["dq"]}, flops=3 * flops // 2, label=label)


@tle.example(flash_attention_bwd_dkdv_kernel)
def _dkdv_example(device, size):
    return _bwd_launch("dkdv", device, size)


@tle.example(flash_attention_bwd_dq_kernel)
def _dq_example(device, size):
    return _bwd_launch("dq", device, size)


# -- the public surface -------------------------------------------------------------------------------------
def check_attention_inputs(q, k, v, varlen: bool, causal, scale) -> float:
    """The checks every attention operator makes of q, k, v, causal and scale; returns the scale to use."""
    rank = 3 if varlen else 4
    check_tensor(q, "q", dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64))
    if q.dim() != rank:
        raise tle.LaunchError(f"'q' has shape {tuple(q.shape)}; expected "
                              f"{'[total, H, D] (packed, with cu_seqlens)' if varlen else '[B, S, H, D]'}")
    check_tensor(k, "k", dtypes=(q.dtype,), rank=rank, device=q.device)
    check_tensor(v, "v", dtypes=(q.dtype,), rank=rank, device=q.device, shape=k.shape)
    h, d, h_kv = q.shape[-2], q.shape[-1], k.shape[-2]
    if k.shape[-1] != d:
        raise tle.LaunchError(f"'k' has head dim {k.shape[-1]}; expected {d}, q's")
    if not _heads_divide(h, h_kv):
        raise tle.LaunchError(f"'k' has {h_kv} heads, which does not divide q's {h} heads" +
                              ("" if varlen else _other_layout_hint(q, k)))
    if not isinstance(causal, bool):
        raise tle.LaunchError(f"'causal' must be a bool, got {causal!r}")
    return check_scale(scale, d)


def check_scale(scale, head_dim: int) -> float:
    """The scale to use: `scale` checked (a finite float), or head_dim ** -0.5 for None."""
    if scale is None:
        return head_dim ** -0.5 if head_dim else 1.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise tle.LaunchError(f"'scale' must be a finite float or None, got {scale!r}")
    return float(scale)


def _heads_divide(h: int, h_kv: int) -> bool:
    """Can h query heads share h_kv key/value heads (grouped-query: h_kv divides h)?"""
    return h_kv != 0 and h % h_kv == 0


def _other_layout_hint(q, k) -> str:
    """What to say where q and k do not fit [B, S, H, D] but fit [B, H, S, D], the layout of
    torch's scaled_dot_product_attention (axes 1 and 2 swapped)."""
    h, h_kv = q.shape[1], k.shape[1]
    if not _heads_divide(h, h_kv):
        return ""
    return (f". If they are laid out [B, H, S, D] (torch's scaled_dot_product_attention layout, in which they fit: "
            f"{h} query heads over {h_kv} key heads): this operator takes [B, S, H, D]; pass q, k and v transposed "
            f"(x.transpose(1, 2)) and transpose the output back")


GRID_AXIS_MAX = 65535          # CUDA's limit on grid axis 1, which the kernels give a program per (batch, head)


def check_kernel_inputs(op: str, backend: str, batch: int, **tensors) -> None:
    """What the attention kernels take: fp16/bf16, the head dims of KERNEL_HEAD_DIMS, 32-bit offsets, at most
    GRID_AXIS_MAX (batch, head) pairs. The first of `tensors` is the queries ([..., H, D]), named as the
    operator names it."""
    if backend == "torch":
        return
    q_name, q = next(iter(tensors.items()))
    if batch * q.shape[-2] > GRID_AXIS_MAX:
        raise tle.LaunchError(f"tle.ops.{op}: {batch} sequences of {q.shape[-2]} heads; backend '{backend}' launches "
                              f"a program per (sequence, head) on grid axis 1, at most {GRID_AXIS_MAX}")
    if q.dtype not in KERNEL_DTYPES:
        raise tle.LaunchError(f"tle.ops.{op}: '{q_name}' has dtype {str(q.dtype)[6:]}, which backend '{backend}' "
                              f"does not take (float16, bfloat16; other dtypes run on 'torch')")
    if q.shape[-1] not in KERNEL_HEAD_DIMS:
        raise tle.LaunchError(f"tle.ops.{op}: '{q_name}' has head dim {q.shape[-1]}; backend '{backend}' takes "
                              f"{', '.join(map(str, KERNEL_HEAD_DIMS))} (any runs on 'torch')")
    for name, t in tensors.items():
        if t is not None and t.numel() >= 2 ** 31:
            raise tle.LaunchError(f"tle.ops.{op}: '{name}' has {t.numel()} elements; backend '{backend}' "
                                  f"addresses it with 32-bit offsets (fewer than 2^31)")


def check_cu_seqlens(cu, name, device, batch=None):
    check_tensor(cu, name, dtypes=(torch.int32,), rank=1, device=device)
    if cu.shape[0] < 1 or (batch is not None and cu.shape[0] != batch + 1):
        want = "at least 1 entry" if batch is None else f"{batch + 1} entries, like 'cu_seqlens_q'"
        raise tle.LaunchError(f"'{name}' has {cu.shape[0]} entries; expected {want}")


def longest_sequence(cu, name, rows, given, given_name):
    """The longest packed sequence: `given`, or read from cu_seqlens. Reading cu_seqlens synchronizes with a
    GPU, so with `given` they are checked on CPU tensors only (as torch checks what is free to check)."""
    if given is not None and (cu.device.type != "cpu" or torch.compiler.is_compiling()):
        if not isinstance(given, int) or isinstance(given, bool) or given < 0:
            raise tle.LaunchError(f"'{given_name}' is {given!r}; expected a non-negative int")
        return given
    vals = cu.tolist()
    if vals[0] != 0 or any(b < a for a, b in zip(vals, vals[1:])) or vals[-1] != rows:
        raise tle.LaunchError(f"'{name}' must start at 0, never decrease and end at the packed length {rows}; "
                              f"got {vals if len(vals) <= 12 else vals[:6] + ['...'] + vals[-3:]}")
    longest = max((b - a for a, b in zip(vals, vals[1:])), default=0)
    if given is None:
        return longest
    if not isinstance(given, int) or isinstance(given, bool) or given < longest:
        raise tle.LaunchError(f"'{given_name}' is {given!r}; expected an int of at least {longest}, the longest "
                              f"sequence of '{name}'")
    return given


def check_window(window_size, causal) -> tuple[int | None, int | None]:
    """FlashAttention's window_size=(left, right), -1 an open side; causal is right = 0. Returns Scores.window."""
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or any(isinstance(w, bool) or not isinstance(w, int) or w < -1 for w in window_size)):
        raise tle.LaunchError(f"'window_size' is {window_size!r}; expected (left, right): two ints, each >= 0, "
                              f"or -1 for an open side")
    left, right = (None if w == -1 else w for w in window_size)
    if causal:
        if right not in (None, 0):
            raise tle.LaunchError(f"'window_size' is {tuple(window_size)!r} with causal=True, which sees no key to "
                                  f"the right of the diagonal: give right as 0 or -1")
        right = 0
    return left, right


def check_softcap(softcap) -> float:
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not 0 <= softcap < math.inf:
        raise tle.LaunchError(f"'softcap' is {softcap!r}; expected a finite float >= 0 (0: no soft-capping)")
    return float(softcap)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None, *, window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    cu_seqlens_q: torch.Tensor | None = None, cu_seqlens_k: torch.Tensor | None = None,
                    max_seqlen_q: int | None = None, max_seqlen_k: int | None = None, return_lse: bool = False,
                    backend: str | None = None, fallback: str | None = None):
    """softmax(q kᵀ · scale [+ window / causal mask, soft cap]) v over [B, S, H, D] inputs (or packed
    [total, H, D] with cu_seqlens); the module docstring gives the layouts and the masks. Returns out, or
    (out, lse)."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    scale = check_attention_inputs(q, k, v, varlen, causal, scale)
    sc = Scores(window=check_window(window_size, causal), softcap=check_softcap(softcap))
    if not varlen and k.shape[0] != q.shape[0]:
        raise tle.LaunchError(f"'k' has batch {k.shape[0]}; expected {q.shape[0]}, q's")
    if varlen:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise tle.LaunchError("'cu_seqlens_q' and 'cu_seqlens_k' go together: give both or neither")
        check_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", q.device)
        check_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", q.device, batch=cu_seqlens_q.shape[0] - 1)
        max_seqlen_q = longest_sequence(cu_seqlens_q, "cu_seqlens_q", q.shape[0], max_seqlen_q, "max_seqlen_q")
        max_seqlen_k = longest_sequence(cu_seqlens_k, "cu_seqlens_k", k.shape[0], max_seqlen_k, "max_seqlen_k")
    elif max_seqlen_q is not None or max_seqlen_k is not None:
        raise tle.LaunchError("'max_seqlen_q' / 'max_seqlen_k' go with packed inputs (cu_seqlens_q/_k)")
    b = FLASH_ATTENTION.resolve(q.device, backend, fallback)
    check_kernel_inputs("flash_attention", b, cu_seqlens_q.shape[0] - 1 if varlen else q.shape[0], q=q, k=k, v=v)
    out, lse = attention_op(q, k, v, sc, scale, b, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                            max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    return (out, lse) if return_lse else out


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(q, k, v, causal=False, scale=None, *, window_size=(-1, -1), softcap=0.0, cu_seqlens_q=None,
              cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, return_lse=False):
    """The tests' ground truth, plain differentiable torch (no custom op): F.scaled_dot_product_attention where
    every query sees a key and no window or cap applies, else the scores written out, one packed sequence at a
    time."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    sc = Scores(window=check_window(window_size, causal), softcap=softcap)
    if (cu_seqlens_q is None and not return_lse and not (causal and q.shape[1] > k.shape[1])
            and tuple(window_size) == (-1, -1) and not softcap):
        square = q.shape[1] == k.shape[1]
        mask = _keep(q.shape[1], k.shape[1], CAUSAL.window, q.device) if causal and not square else None
        return torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, is_causal=causal and square,
            scale=scale, enable_gqa=q.shape[2] != k.shape[2]).transpose(1, 2)
    if cu_seqlens_q is None:
        out, lse = _dense_attention(q, k, v, scale, sc)
    else:
        outs, lses = [], []
        for rq, rk in sequence_slices(cu_seqlens_q, cu_seqlens_k):
            o, l = _dense_attention(q[None, rq], k[None, rk], v[None, rk], scale, sc)
            outs.append(o[0])
            lses.append(l[0])
        out, lse = torch.cat(outs), torch.cat(lses, dim=1)
    return (out, lse.detach().float()) if return_lse else out


def _packed(lengths_q, lengths_k, h, h_kv, d, t, device):
    cu = [torch.tensor([0] + lens, dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)
          for lens in (lengths_q, lengths_k)]
    return (t(sum(lengths_q), h, d), t(sum(lengths_k), h_kv, d), t(sum(lengths_k), h_kv, d)), cu


def samples(device, dtype):
    def t(*shape):
        return torch.randn(*shape, device=device, dtype=torch.float32).to(dtype)

    def dense(b, s_q, s_k, h, h_kv, d):
        return t(b, s_q, h, d), t(b, s_k, h_kv, d), t(b, s_k, h_kv, d)

    def heads_first(b, s, h, d):
        return t(h, b, s, d).permute(1, 2, 0, 3)       # batch 1: its stride equals the head stride

    def varlen(lq, lk, h, h_kv, d, causal, label, **kw):
        (q, k, v), (cu_q, cu_k) = _packed(lq, lk, h, h_kv, d, t, device)
        return Sample((q, k, v, causal), dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **kw), label=label)

    return [Sample((*dense(1, 5, 7, 2, 1, 16), True), label="causal S_q5 S_k7 MQA D16"),
            varlen([2, 3], [3, 1], 2, 2, 16, True, "varlen causal D16"),
            Sample(dense(2, 17, 17, 2, 2, 32), label="B2 S17 H2 D32"),
            Sample((*dense(1, 129, 129, 4, 2, 64), True), label="causal S129 GQA 4/2 D64"),
            Sample((*dense(2, 17, 40, 2, 1, 32), True), label="causal S_q17 S_k40 (bottom-right) MQA"),
            Sample((*dense(1, 40, 17, 2, 2, 32), True), dict(return_lse=True),
                   label="causal S_q40 S_k17: queries that see no key, lse"),
            Sample(dense(1, 1, 33, 4, 1, 64), dict(scale=0.3), label="S_q1 S_k33 MQA scale 0.3"),
            Sample((*dense(1, 20, 20, 2, 2, 128), True), label="causal D128"),
            Sample(dense(1, 9, 24, 1, 1, 256), dict(return_lse=True), label="D256 lse"),
            Sample((heads_first(1, 24, 4, 64), heads_first(1, 24, 2, 64), heads_first(1, 24, 2, 64), True),
                   label="views of [H, B, S, D] tensors (batch stride = head stride)"),
            varlen([1, 17, 3, 40], [5, 17, 0, 40], 4, 2, 32, False, "varlen, an empty key sequence"),
            varlen([1, 17, 0, 40], [5, 30, 2, 40], 2, 1, 64, True, "varlen causal, an empty query sequence"),
            varlen([3, 150, 70], [9, 140, 70], 4, 2, 32, True, "varlen causal, sequences of more than 64 queries"),
            Sample((*dense(1, 300, 300, 2, 1, 32), True), label="causal S300 MQA D32: key blocks no mask touches"),
            Sample(_negative_scores(dense(1, 80, 255, 2, 1, 32)), dict(scale=0.5),
                   label="S_q80 S_k255 MQA D32, every score negative: a key past the end would stand out"),
            Sample((*dense(1, 20, 33, 2, 1, 32), True), dict(scale=-0.25),
                   label="causal S_q20 S_k33 MQA, a negative scale: no folded form (scaled, then masked)"),
            Sample(dense(1, 150, 150, 2, 1, 32), dict(window_size=(40, 10)),
                   label="window (40, 10) S150 MQA D32: both edges cross key blocks"),
            Sample((*dense(2, 70, 90, 2, 2, 64), True), dict(window_size=(25, -1), return_lse=True),
                   label="causal with a left window (25) S_q70 S_k90, lse"),
            Sample(dense(1, 33, 20, 2, 1, 32), dict(window_size=(3, 0)),
                   label="window (3, 0) S_q33 S_k20: queries whose window holds no key"),
            Sample(dense(1, 40, 150, 2, 2, 64), dict(window_size=(-1, 5), softcap=2.5),
                   label="right edge only (5), soft cap 2.5 S_q40 S_k150"),
            Sample((*dense(1, 129, 129, 4, 2, 128), True), dict(softcap=1.5),
                   label="causal soft cap 1.5 S129 GQA D128"),
            varlen([17, 90, 3], [30, 90, 0], 2, 1, 32, True, "varlen causal, window (20, 0)",
                   window_size=(20, 0), softcap=5.0)]


def _negative_scores(qkv):
    """q >= 0 and k <= 0: every score is negative, so a key read past the end of the sequence (zero-filled,
    score 0) and left unmasked would take most of the softmax."""
    q, k, v = qkv
    return q.abs(), -k.abs(), v


# the backward rounds P and dS to the inputs' dtype before its products (as FlashAttention does): in fp16 a
# gradient takes one rounding more than the default tolerance (2^-11 of the largest magnitude) allows
GRAD_TOLERANCES = {torch.float16: (2 ** -10, 2 ** -10)}

OPERATOR = Operator(
    "flash_attention", fn=flash_attention, reference=reference, samples=samples, grad_inputs=(0, 1, 2),
    dtypes=KERNEL_DTYPES, tolerances=GRAD_TOLERANCES,
    bench=BenchSpec(dry_shapes=[(1, 2, 2, 128, 64, "causal"), (1, 2, 1, 96, 32, "full"), (2, 2, 2, 64, 64, "varlen")],
                    shapes=[(4, 32, 32, 8192, 128, "causal"), (4, 32, 32, 8192, 128, "full"),
                            (32, 16, 16, 1024, 64, "full"), (32, 16, 16, 1024, 64, "causal"),
                            (8, 32, 8, 4096, 128, "causal"), (2, 16, 16, 4096, 256, "full"),
                            (16, 32, 32, 2048, 128, "varlen")],
                    make=bench_make, flops=bench_flops, eager=bench_eager,
                    peers={"TileLang examples": tilelang_example_peer},
                    shape_help="BxHxH_KVxSxDx(causal|full|varlen)"))
