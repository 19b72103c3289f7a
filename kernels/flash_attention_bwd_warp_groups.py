"""FlashAttention's backward in four warp groups (tle.gpu.warp_group), the structure of FlashAttention 3's: a
program owns a block of keys of one KV head; group 0 copies each step's block of queries (q, dO and the rows'
lse and delta) into shared memory; groups 1 and 2 each own half of the program's keys, accumulate their dK and
dV over the steps and hand their share of the query block's dQ (dS K, fp32) to group 3 in shared memory, which
adds it into dQ (on TileLang one TMA reduction a share) while they run the next step. Five products a step,
where the two-kernel backward (flash_attention.py) computes seven: the dQ kernel's recomputation of P and dP is
not needed.

Why a fourth group: measured on the H200 (B4 H32 S8192 D128, causal), the consumers adding their share
themselves ran at 17.6 ms with per-element atomics and 14.1 ms with the TMA reduction (its issuing thread waits
until the bytes are read, and the next step's products wait for its warp), 13.4 ms with group 3 adding it; the
two-kernel backward 14.4 ms. Consumers handing each other their dS and adding half of dQ's columns each (half
the bytes) ran at 14.2 ms: the bytes are not what limits (docs/benchmark/flash_attention.md).

No window beyond the causal mask, no cap or bias; dropout (DROPOUT: dV takes the dropped probabilities, dS the
dropped dP, the mask drawn once a step for both); dense or packed sequences, GQA. dQ's atomics add in any order:
not for torch.use_deterministic_algorithms. On Triton the groups are dropped and the blocks run in program order
(docs/language.md, "Warp groups").
"""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.examples import default_tolerance
from tle.kernels.attention_parts import (CAUSAL, DROPOUT_RUNTIME_INTS, Problem, Scores, _dropout_keep, _example_inputs,
                                         _sequence, _torch_backward, _torch_forward, cu_or_dummy, dropout_args,
                                         nan_like)
from tle.kernels.flash_attention_warp_groups import _rows_in_shared
from tle.oplib.arith import cdiv

LOG2E = 1.4426950408889634


@tle.jit
def _copy_queries(q_base, do_base, lse_base, delta_base, stride_qm, stride_dom, rows, len_q, q_buf, do_buf,
                  lse_buf, delta_buf, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """The loader's step: the query block's q and dO rows and its rows' lse and delta (rows past the queries read
    0: their terms vanish)."""
    row_ok = rows < len_q
    offs_d = tl.arange(0, HEAD_DIM)
    tle.gpu.copy(q_base + rows[:, None] * stride_qm + offs_d[None, :], q_buf, [BLOCK_M, HEAD_DIM],
                 mask=row_ok[:, None], other=0.0)
    tle.gpu.copy(do_base + rows[:, None] * stride_dom + offs_d[None, :], do_buf, [BLOCK_M, HEAD_DIM],
                 mask=row_ok[:, None], other=0.0)
    tle.gpu.copy(lse_base + rows, lse_buf, [BLOCK_M], mask=row_ok, other=0.0)
    tle.gpu.copy(delta_base + rows, delta_buf, [BLOCK_M], mask=row_ok, other=0.0)


@tle.jit
def _key_step(dk, dv, k_buf, v_buf, q_buf, do_buf, lse_buf, delta_buf, dq_buf, m0, rows, n0, cols, diag, qk_scale,
              sm_scale, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold, drop_scale,
              CAUSAL: tl.constexpr, DROPOUT: tl.constexpr, BLOCK_M: tl.constexpr, HALF: tl.constexpr):
    """One query block for one consumer's keys, all transposed ([keys, queries]): P from the saved lse, dV += P^T
    dO, dS = P (dP - delta), dK += dS^T q, and the keys' share of the block's dQ, dS K, into dq_buf. DROPOUT: dV
    takes the dropped probabilities and dS the dropped dP, the mask drawn once for both (the two-kernel backward
    draws it in each kernel)."""
    q = tle.gpu.local_load(q_buf)
    do = tle.gpu.local_load(do_buf)
    s_t = tl.dot(tle.gpu.local_load(k_buf), tl.trans(q))
    p_t = tl.math.exp2(s_t * qk_scale - (tle.gpu.local_load(lse_buf) * LOG2E)[None, :])
    if CAUSAL:
        if m0 + diag < n0 + HALF - 1:      # only blocks that cross the diagonal pay for the mask
            p_t = tl.where(cols[:, None] <= rows[None, :] + diag, p_t, 0.0)
    if DROPOUT:
        kept = _dropout_keep(m0, tl.arange(0, BLOCK_M)[None, :], n0, tl.arange(0, HALF)[:, None], bh, seqlen_q,
                             seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi, drop_threshold)
        dv = tl.dot(tl.where(kept, p_t * drop_scale, 0.0).to(do.dtype), do, dv)
    else:
        dv = tl.dot(p_t.to(do.dtype), do, dv)
    dp_t = tl.dot(tle.gpu.local_load(v_buf), tl.trans(do))
    if DROPOUT:
        dp_t = tl.where(kept, dp_t * drop_scale, 0.0)
    ds_t = (p_t * (dp_t - tle.gpu.local_load(delta_buf)[None, :])).to(q.dtype)
    dk = tl.dot(ds_t, q, dk)
    tle.gpu.local_store(dq_buf, tl.dot(tl.trans(ds_t), tle.gpu.local_load(k_buf)) * sm_scale)
    return dk, dv


@tle.jit
def _add_dq(dq_base, stride_dqm, rows, len_q, dq_buf, HEAD_DIM: tl.constexpr):
    """A consumer's share of the query block's dQ (dq_buf) added into dQ's rows."""
    tl.atomic_add(dq_base + rows[:, None] * stride_dqm + tl.arange(0, HEAD_DIM)[None, :], tle.gpu.local_load(dq_buf),
                  mask=(rows < len_q)[:, None], sem="relaxed")


@tle.jit
def _store_keys(dk_base, dv_base, stride_dkn, stride_dvn, cols, len_k, dk, dv, sm_scale, HEAD_DIM: tl.constexpr):
    offs_d = tl.arange(0, HEAD_DIM)
    col_ok = (cols < len_k)[:, None]
    tl.store(dk_base + cols[:, None] * stride_dkn + offs_d[None, :], (dk * sm_scale).to(dk_base.dtype.element_ty),
             mask=col_ok)
    tl.store(dv_base + cols[:, None] * stride_dvn + offs_d[None, :], dv.to(dv_base.dtype.element_ty), mask=col_ok)


@tle.jit(do_not_specialize=DROPOUT_RUNTIME_INTS)
def flash_attention_bwd_warp_groups_kernel(
        q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr, cu_q_ptr, cu_k_ptr, sm_scale,
        stride_qb, stride_qm, stride_qh, stride_kb, stride_kn, stride_kh, stride_vb, stride_vn, stride_vh,
        stride_dob, stride_dom, stride_doh, stride_dkb, stride_dkn, stride_dkh, stride_dvb, stride_dvn, stride_dvh,
        stride_dqb, stride_dqm, stride_dqh, stride_lb, stride_lh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo,
        offset_hi, drop_threshold, drop_scale, H_KV: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr,
        DROPOUT: tl.constexpr = False, LOADER_REGISTERS: tl.constexpr = 24, CONSUMER_REGISTERS: tl.constexpr = 232):
    """dK and dV of a block of BLOCK_N keys of one KV head (axis 1 of the grid: batch x KV head), and the share of
    dQ those keys give, added into dq_ptr (fp32, [B, S, H, D] or [total, H, D], zeroed before). The steps run over
    (query head of the KV head's group, query block) pairs: the GQA sum in dK and dV. DROPOUT: the forward's
    dropout (seed, offset, threshold and scale as flash_attention.score_args gives them)."""
    HALF: tl.constexpr = BLOCK_N // 2
    pid_n = tl.program_id(0)
    b = tl.program_id(1) // H_KV
    h_kv = tl.program_id(1) % H_KV
    q_start, len_q = _sequence(cu_q_ptr, b, seqlen_q, VARLEN)
    k_start, len_k = _sequence(cu_k_ptr, b, seqlen_k, VARLEN)
    diag = len_k - len_q                  # query i sees key j <= i + diag (causal, bottom-right)

    n0 = pid_n * BLOCK_N
    cols_a = n0 + tl.arange(0, HALF)          # group 1's keys
    cols_b = n0 + HALF + tl.arange(0, HALF)   # group 2's
    k_base = k_ptr + b * stride_kb + k_start * stride_kn + h_kv * stride_kh
    v_base = v_ptr + b * stride_vb + k_start * stride_vn + h_kv * stride_vh
    # the query blocks that see the keys: causal, from the first query that sees key n0
    lo = 0
    if CAUSAL:
        lo = tl.maximum(n0 - diag, 0) // BLOCK_M * BLOCK_M
    n_blocks = tl.where(n0 < len_k, tl.cdiv(tl.maximum(len_q - lo, 0), BLOCK_M), 0)

    with tle.gpu.warp_group(1, registers=CONSUMER_REGISTERS):
        k_a = _rows_in_shared(k_base, stride_kn, cols_a, len_k, HEAD_DIM, HALF)
        v_a = _rows_in_shared(v_base, stride_vn, cols_a, len_k, HEAD_DIM, HALF)
    with tle.gpu.warp_group(2, registers=CONSUMER_REGISTERS):
        k_b = _rows_in_shared(k_base, stride_kn, cols_b, len_k, HEAD_DIM, HALF)
        v_b = _rows_in_shared(v_base, stride_vn, cols_b, len_k, HEAD_DIM, HALF)

    qk_scale = sm_scale * LOG2E
    dk_a = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    dv_a = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    dk_b = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    dv_b = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    # each consumer's share of a step's dQ, which group 3 adds into dQ while the consumers run the next step
    dq_a = tle.gpu.alloc([BLOCK_M, HEAD_DIM], tl.float32)
    dq_b = tle.gpu.alloc([BLOCK_M, HEAD_DIM], tl.float32)
    for step in tle.gpu.pipeline(0, GROUP * n_blocks, 1, num_stages=2):
        g = step // n_blocks
        h = h_kv * GROUP + g
        bh = b * H_KV * GROUP + h             # the dropout stream's head
        m0 = lo + (step % n_blocks) * BLOCK_M
        rows = m0 + tl.arange(0, BLOCK_M)
        q_buf = tle.gpu.alloc([BLOCK_M, HEAD_DIM], q_ptr.dtype.element_ty)
        do_buf = tle.gpu.alloc([BLOCK_M, HEAD_DIM], do_ptr.dtype.element_ty)
        lse_buf = tle.gpu.alloc([BLOCK_M], tl.float32)
        delta_buf = tle.gpu.alloc([BLOCK_M], tl.float32)
        row_base = b * stride_lb + h * stride_lh + q_start
        with tle.gpu.warp_group(0, registers=LOADER_REGISTERS):
            _copy_queries(q_ptr + b * stride_qb + q_start * stride_qm + h * stride_qh,
                          do_ptr + b * stride_dob + q_start * stride_dom + h * stride_doh, lse_ptr + row_base,
                          delta_ptr + row_base, stride_qm, stride_dom, rows, len_q, q_buf, do_buf, lse_buf, delta_buf,
                          HEAD_DIM, BLOCK_M)
        with tle.gpu.warp_group(1):
            dk_a, dv_a = _key_step(dk_a, dv_a, k_a, v_a, q_buf, do_buf, lse_buf, delta_buf, dq_a, m0, rows, n0, cols_a,
                                   diag, qk_scale, sm_scale, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo,
                                   offset_hi, drop_threshold, drop_scale, CAUSAL, DROPOUT, BLOCK_M, HALF)
        with tle.gpu.warp_group(2):
            dk_b, dv_b = _key_step(dk_b, dv_b, k_b, v_b, q_buf, do_buf, lse_buf, delta_buf, dq_b, m0, rows, n0 + HALF,
                                   cols_b, diag, qk_scale, sm_scale, bh, seqlen_q, seqlen_k, seed_lo, seed_hi,
                                   offset_lo, offset_hi, drop_threshold, drop_scale, CAUSAL, DROPOUT, BLOCK_M, HALF)
        with tle.gpu.warp_group(3, registers=LOADER_REGISTERS):
            dq_base = dq_ptr + b * stride_dqb + q_start * stride_dqm + h * stride_dqh
            _add_dq(dq_base, stride_dqm, rows, len_q, dq_a, HEAD_DIM)
            _add_dq(dq_base, stride_dqm, rows, len_q, dq_b, HEAD_DIM)

    dk_base = dk_ptr + b * stride_dkb + k_start * stride_dkn + h_kv * stride_dkh
    dv_base = dv_ptr + b * stride_dvb + k_start * stride_dvn + h_kv * stride_dvh
    with tle.gpu.warp_group(1):
        _store_keys(dk_base, dv_base, stride_dkn, stride_dvn, cols_a, len_k, dk_a, dv_a, sm_scale, HEAD_DIM)
    with tle.gpu.warp_group(2):
        _store_keys(dk_base, dv_base, stride_dkn, stride_dvn, cols_b, len_k, dk_b, dv_b, sm_scale, HEAD_DIM)


def bwd_warp_groups_config(head_dim: int) -> dict:
    """128 keys a program (64 per consumer group), 64 queries a step, four groups of 4 warps."""
    return dict(BLOCK_M=64, BLOCK_N=128, num_warps=16)


def bwd_warp_groups_launch(device, size, dropout_p: float = 0.0) -> tle.Launch:
    """A causal launch of the kernel on _example_inputs, with the forward's dropout at dropout_p (a fixed seed and
    offset), checked against the torch backward of the same probabilities."""
    q, k, v, scale, label = _example_inputs(device, size)
    pr = Problem(q, k, None, None, None, None)
    sc = Scores(window=CAUSAL.window, dropout_p=dropout_p, seed=0x1234_5678_9ABC_DEF0, offset=96)
    out, lse = _torch_forward(q, k, v, None, None, sc, scale)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(q.device, q.dtype)
    delta = (out.float() * do.float()).sum(-1).transpose(1, 2).contiguous()
    dk, dv = nan_like(k), nan_like(v)
    dq = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    cfg = bwd_warp_groups_config(pr.d)

    refs = dict(zip(("dq", "dk", "dv"), _torch_backward(do.float(), q.float(), k.float(), v.float(), out.float(), lse,
                                                        None, None, sc, scale)))
    return tle.Launch(grid=(cdiv(pr.seqlen_k, cfg["BLOCK_N"]), pr.b * pr.h_kv),
                      args=(q, k, v, do, lse, delta, dk, dv, dq, cu_or_dummy(None, lse), cu_or_dummy(None, lse), scale,
                            *pr.strides(q), *pr.strides(k), *pr.strides(v), *pr.strides(do), *pr.strides(dk),
                            *pr.strides(dv), *pr.strides(dq), *pr.lse_strides(lse), pr.seqlen_q, pr.seqlen_k,
                            *dropout_args(sc)),
                      kwargs=dict(H_KV=pr.h_kv, GROUP=pr.group, HEAD_DIM=pr.d, CAUSAL=True, VARLEN=False,
                                  DROPOUT=dropout_p > 0, **cfg),
                      outputs={"dq": dq, "dk": dk, "dv": dv}, reference=lambda: refs,
                      flops=5 * pr.b * pr.h * pr.seqlen_q * pr.seqlen_k * pr.d, label=label, accumulates=("dq",),
                      # dQ is fp32 but sums products of q.dtype tiles: q.dtype's tolerance
                      tolerances={"dq": default_tolerance(refs["dq"], q.dtype)})


@tle.example(flash_attention_bwd_warp_groups_kernel)
def _bwd_warp_groups_example(device, size):
    return bwd_warp_groups_launch(device, size, dropout_p=0.25)
