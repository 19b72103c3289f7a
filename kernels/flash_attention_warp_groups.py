"""FlashAttention's forward in three warp groups (tle.gpu.warp_group), the structure of FlashAttention 3: group 0
loads each step's block of keys and values into shared memory; groups 1 and 2 each own half of the program's
queries and run the online softmax over the blocks group 0 hands them, one consumer's softmax overlapping the
other's products.

The same arguments, masks and results as flash_attention.flash_attention_fwd_kernel (one masked loop); on Triton
the groups are dropped and the blocks run in program order (docs/language.md, "Warp groups").
"""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.kernels.attention_parts import (CAUSAL, Problem, _example_inputs, _folded_softmax, _fwd_program,
                                         _torch_forward, cu_or_dummy, nan_like)
from tle.oplib.arith import cdiv


@tle.jit
def _rows_in_shared(base, stride_row, rows, n_rows, HEAD_DIM: tl.constexpr, HALF: tl.constexpr):
    """A consumer's rows `rows` of a [rows, HEAD_DIM] tensor (its queries, or in the backward its keys) in shared
    memory; rows past n_rows read 0."""
    buf = tle.gpu.alloc([HALF, HEAD_DIM], base.dtype.element_ty)
    tle.gpu.copy(base + rows[:, None] * stride_row + tl.arange(0, HEAD_DIM)[None, :], buf, [HALF, HEAD_DIM],
                 mask=(rows < n_rows)[:, None], other=0.0)
    return buf


@tle.jit
def _copy_rows(base, stride_n, cols, len_k, buf, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    """The loader's copy of the key or value rows `cols` into buf (rows past len_k read 0)."""
    tle.gpu.copy(base + cols[:, None] * stride_n + tl.arange(0, HEAD_DIM)[None, :], buf, [BLOCK_N, HEAD_DIM],
                 mask=(cols < len_k)[:, None], other=0.0)


@tle.jit
def _copy_block(k_base, v_base, stride_kn, stride_vn, cols, len_k, k_buf, v_buf, HEAD_DIM: tl.constexpr,
                BLOCK_N: tl.constexpr):
    """The loader's step: the key and value rows `cols` into k_buf and v_buf (rows past len_k read 0)."""
    _copy_rows(k_base, stride_kn, cols, len_k, k_buf, HEAD_DIM, BLOCK_N)
    _copy_rows(v_base, stride_vn, cols, len_k, v_buf, HEAD_DIM, BLOCK_N)


@tle.jit
def _masked_softmax(acc, l_i, m_i, qk, rows, first_row, start_n, cols, len_k, diag, qk_scale, CAUSAL: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    """The masks of the block of keys at start_n on its scores qk, the online softmax in base 2 with the scale
    folded (_folded_softmax): P, the accumulator rescaled, l_i, m_i."""
    last = start_n + BLOCK_N - 1
    edge = last >= len_k
    if CAUSAL:
        edge = edge | (last > first_row + diag)
    if edge:            # only blocks that reach past the keys or the diagonal pay for the masks
        keep = (cols < len_k)[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + diag)
        qk = tl.where(keep, qk, -float("inf"))
    p, alpha, l_i, m_new = _folded_softmax(qk, m_i, l_i, qk_scale)
    return p, acc * alpha[:, None], l_i, m_new


@tle.jit
def _softmax_step(acc, l_i, m_i, q_buf, k_buf, v_buf, rows, first_row, start_n, cols, len_k, diag, qk_scale,
                  CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, TURNS: tl.constexpr):
    """One block of keys for one consumer's rows: scores, masks and softmax (_masked_softmax), P v.
    TURNS: the consumers take turns at their products, one's softmax beside the other's products."""
    with tle.gpu.turn(enabled=TURNS):
        qk = tl.dot(tle.gpu.local_load(q_buf), tl.trans(tle.gpu.local_load(k_buf)))
    p, acc, l_i, m_new = _masked_softmax(acc, l_i, m_i, qk, rows, first_row, start_n, cols, len_k, diag, qk_scale,
                                         CAUSAL, BLOCK_N)
    with tle.gpu.turn(enabled=TURNS):
        acc = tl.dot(p.to(v_buf.dtype), tle.gpu.local_load(v_buf), acc)
    return acc, l_i, m_new


@tle.jit
def _softmax_step_ahead(acc, l_i, m_i, qk, q_buf, k_next, v_buf, rows, first_row, start_n, cols, len_k, diag,
                        qk_scale, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr):
    """The same step with the scores of the block at start_n already computed (qk), and the next block's scores
    computed first: on TileLang a product is waited for where its result is first used, so the next block's
    scores run on the tensor cores while this block's softmax runs (FlashAttention 3's intra-warp-group
    overlap). Returns the next block's scores as well."""
    qk_next = tl.dot(tle.gpu.local_load(q_buf), tl.trans(tle.gpu.local_load(k_next)))
    p, acc, l_i, m_new = _masked_softmax(acc, l_i, m_i, qk, rows, first_row, start_n, cols, len_k, diag, qk_scale,
                                         CAUSAL, BLOCK_N)
    acc = tl.dot(p.to(v_buf.dtype), tle.gpu.local_load(v_buf), acc)
    return acc, l_i, m_new, qk_next


@tle.jit
def _store_half(o_base, lse_base, stride_om, rows, len_q, acc, l_i, m_i, qk_scale, HEAD_DIM: tl.constexpr):
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    row_ok = rows < len_q
    tl.store(o_base + rows[:, None] * stride_om + tl.arange(0, HEAD_DIM)[None, :],
             (acc / l_safe[:, None]).to(o_base.dtype.element_ty), mask=row_ok[:, None])
    # natural log; -inf where the row saw no key (l_i = 0)
    tl.store(lse_base + rows, (m_i * qk_scale + tl.math.log2(l_i)) * 0.6931471805599453, mask=row_ok)


@tle.jit
def flash_attention_fwd_warp_groups_kernel(
        q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_q_ptr, cu_k_ptr, sm_scale,
        stride_qb, stride_qm, stride_qh, stride_kb, stride_kn, stride_kh, stride_vb, stride_vn, stride_vh,
        stride_ob, stride_om, stride_oh, stride_lb, stride_lh, seqlen_q, seqlen_k,
        H: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr,
        LOADER_REGISTERS: tl.constexpr = 56, CONSUMER_REGISTERS: tl.constexpr = 224, TURNS: tl.constexpr = False,
        AHEAD: tl.constexpr = False):
    """AHEAD: each step computes the next block's scores before this block's softmax (_softmax_step_ahead); the
    loader copies the next block's keys with this block's values, and the first block's keys before the loop.
    The last step's product of the keys past the last block is computed and not used (a form that peels the
    last block off the loop instead ran slower on the H200 at 8 blocks a program). On the H200 AHEAD was
    faster at D64 without the causal mask only (docs/benchmark/flash_attention.md)."""
    HALF: tl.constexpr = BLOCK_M // 2
    pid_m = tl.program_id(0)
    len_q, len_k, q_base, k_base, v_base, o_base, lse_base, _ = _fwd_program(
        q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_q_ptr, cu_k_ptr, stride_qb, stride_qm, stride_qh, stride_kb,
        stride_kn, stride_kh, stride_vb, stride_vn, stride_vh, stride_ob, stride_om, stride_oh, stride_lb, stride_lh,
        seqlen_q, seqlen_k, H, GROUP, VARLEN)
    diag = len_k - len_q                  # query i sees key j <= i + diag (causal, bottom-right)

    m0 = pid_m * BLOCK_M
    rows_a = m0 + tl.arange(0, HALF)          # group 1's queries
    rows_b = m0 + HALF + tl.arange(0, HALF)   # group 2's
    hi = len_k
    if CAUSAL:
        hi = tl.minimum(len_k, tl.maximum(m0 + BLOCK_M + diag, 0))
    hi = tl.where(m0 < len_q, hi, 0)          # a block past a packed sequence's end reads nothing

    with tle.gpu.warp_group(1, registers=CONSUMER_REGISTERS):
        q_a = _rows_in_shared(q_base, stride_qm, rows_a, len_q, HEAD_DIM, HALF)
    with tle.gpu.warp_group(2, registers=CONSUMER_REGISTERS):
        q_b = _rows_in_shared(q_base, stride_qm, rows_b, len_q, HEAD_DIM, HALF)

    qk_scale = sm_scale * 1.4426950408889634
    m_a = tl.zeros([HALF], dtype=tl.float32) - 1.0e30      # finite: a row that sees no key stays at 0
    l_a = tl.zeros([HALF], dtype=tl.float32)
    acc_a = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    m_b = tl.zeros([HALF], dtype=tl.float32) - 1.0e30
    l_b = tl.zeros([HALF], dtype=tl.float32)
    acc_b = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    if AHEAD:
        k_first = tle.gpu.alloc([BLOCK_N, HEAD_DIM], k_ptr.dtype.element_ty)
        with tle.gpu.warp_group(0, registers=LOADER_REGISTERS):
            _copy_rows(k_base, stride_kn, tl.arange(0, BLOCK_N), len_k, k_first, HEAD_DIM, BLOCK_N)
        with tle.gpu.warp_group(1):
            qk_a = tl.dot(tle.gpu.local_load(q_a), tl.trans(tle.gpu.local_load(k_first)))
        with tle.gpu.warp_group(2):
            qk_b = tl.dot(tle.gpu.local_load(q_b), tl.trans(tle.gpu.local_load(k_first)))
        for start_n in tle.gpu.pipeline(0, hi, BLOCK_N, num_stages=2):
            k_next = tle.gpu.alloc([BLOCK_N, HEAD_DIM], k_ptr.dtype.element_ty)
            v_buf = tle.gpu.alloc([BLOCK_N, HEAD_DIM], v_ptr.dtype.element_ty)
            cols = start_n + tl.arange(0, BLOCK_N)
            with tle.gpu.warp_group(0):
                _copy_rows(k_base, stride_kn, cols + BLOCK_N, len_k, k_next, HEAD_DIM, BLOCK_N)
                _copy_rows(v_base, stride_vn, cols, len_k, v_buf, HEAD_DIM, BLOCK_N)
            with tle.gpu.warp_group(1):
                acc_a, l_a, m_a, qk_a = _softmax_step_ahead(acc_a, l_a, m_a, qk_a, q_a, k_next, v_buf, rows_a, m0,
                                                            start_n, cols, len_k, diag, qk_scale, CAUSAL, BLOCK_N)
            with tle.gpu.warp_group(2):
                acc_b, l_b, m_b, qk_b = _softmax_step_ahead(acc_b, l_b, m_b, qk_b, q_b, k_next, v_buf, rows_b,
                                                            m0 + HALF, start_n, cols, len_k, diag, qk_scale, CAUSAL,
                                                            BLOCK_N)
    else:
        for start_n in tle.gpu.pipeline(0, hi, BLOCK_N, num_stages=2):
            k_buf = tle.gpu.alloc([BLOCK_N, HEAD_DIM], k_ptr.dtype.element_ty)
            v_buf = tle.gpu.alloc([BLOCK_N, HEAD_DIM], v_ptr.dtype.element_ty)
            cols = start_n + tl.arange(0, BLOCK_N)
            with tle.gpu.warp_group(0, registers=LOADER_REGISTERS):
                _copy_block(k_base, v_base, stride_kn, stride_vn, cols, len_k, k_buf, v_buf, HEAD_DIM, BLOCK_N)
            with tle.gpu.warp_group(1):
                acc_a, l_a, m_a = _softmax_step(acc_a, l_a, m_a, q_a, k_buf, v_buf, rows_a, m0, start_n, cols, len_k,
                                                diag, qk_scale, CAUSAL, BLOCK_N, TURNS)
            with tle.gpu.warp_group(2):
                acc_b, l_b, m_b = _softmax_step(acc_b, l_b, m_b, q_b, k_buf, v_buf, rows_b, m0 + HALF, start_n, cols,
                                                len_k, diag, qk_scale, CAUSAL, BLOCK_N, TURNS)

    with tle.gpu.warp_group(1):
        _store_half(o_base, lse_base, stride_om, rows_a, len_q, acc_a, l_a, m_a, qk_scale, HEAD_DIM)
    with tle.gpu.warp_group(2):
        _store_half(o_base, lse_base, stride_om, rows_b, len_q, acc_b, l_b, m_b, qk_scale, HEAD_DIM)


def fwd_warp_groups_config(head_dim: int) -> dict:
    """128 queries a program (64 per consumer group), BLOCK_N keys a step, three groups of 4 warps."""
    return dict(BLOCK_M=128, BLOCK_N=128 if head_dim <= 128 else 64, num_warps=12, num_stages=2)


@tle.example(flash_attention_fwd_warp_groups_kernel)
def _fwd_warp_groups_example(device, size):
    q, k, v, scale, label = _example_inputs(device, size)
    pr = Problem(q, k, None, None, None, None)
    out, lse = nan_like(q), nan_like(q[..., 0].transpose(1, 2), torch.float32)
    cfg = fwd_warp_groups_config(pr.d)

    def ref():
        o, l = _torch_forward(q, k, v, None, None, CAUSAL, scale)
        return {"out": o, "lse": l}
    return tle.Launch(grid=(cdiv(pr.seqlen_q, cfg["BLOCK_M"]), pr.b * pr.h),
                      args=(q, k, v, out, lse, cu_or_dummy(None, lse), cu_or_dummy(None, lse), scale,
                            *pr.strides(q), *pr.strides(k), *pr.strides(v), *pr.strides(out),
                            *pr.lse_strides(lse), pr.seqlen_q, pr.seqlen_k),
                      kwargs=dict(H=pr.h, GROUP=pr.group, HEAD_DIM=pr.d, CAUSAL=True, VARLEN=False, **cfg),
                      outputs={"out": out, "lse": lse}, reference=ref,
                      flops=2 * pr.b * pr.h * pr.seqlen_q * pr.seqlen_k * pr.d, label=label)
