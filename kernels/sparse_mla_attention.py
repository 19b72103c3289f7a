"""Sparse MLA attention, forward and backward: each query attends to the `topk` latent KV rows it names.

`tle.ops.sparse_mla(q, kv, indices, sm_scale=None, d_v=512, *, return_lse=False, backend=None)`

- q [B, S, H, DT], kv [B, S_kv, VG, DT], indices int32 [B, S, VG, topk] (DeepSeek sparse attention's layout).
  One latent KV row serves as key (all DT columns) and value (its first d_v columns); the H query heads form
  VG groups of H / VG heads, group g reading kv[:, :, g] through indices[:, :, g].
- Query s sees the row an index names when 0 <= index <= s (causal, positions counted from 0 in both q and
  kv) and index < S_kv; any other index (the padding value S_kv, -1, ...) contributes nothing. An index listed
  twice counts twice, as a gather would. A query that sees no row gets output 0 and lse -inf.
- out [B, S, H, d_v] in q's dtype; with return_lse, also lse [B, S, H], the fp32 natural-log log-sum-exp of
  the scaled scores (not differentiable). sm_scale defaults to DT ** -0.5.
- Gradients flow to q and kv. dKV sums over queries and heads with fp32 atomic adds, so its low bits may
  differ between runs on the kernel backends (dQ does not: a program owns its rows).

Kernels, each one text lowered to Triton and to TileLang (kernel backends: fp16/bf16, d_v and DT - d_v powers
of two of at least 16):
- `sparse_mla_fwd_kernel`: a program owns one query and BLOCK_H heads of one group and walks the index list in
  BLOCK_K steps, gathering the named rows (`is_async` loads: staged copies on TileLang) under an online softmax
  in base 2. Both kernels first scan the list for its last entry the query sees and stop their steps there: a
  list padded at its end (a prefill's early queries, with fewer than topk earlier rows) is cut short.
- `sparse_mla_fwd_warp_groups_kernel`: the forward in three warp groups (tle.gpu.warp_group): one gathers the rows,
  one computes the scores, the softmax and half of the output columns, one the other half. The operator's
  forward on TileLang on sm_90 where it fits (`fwd_kernel`); docs/benchmark/sparse_mla_warp_groups.md has its
  figures.
- `sparse_mla_bwd_kernel`: the same programs; each step recomputes the probabilities from lse, adds dS kv to dQ
  in registers, and adds the step's dKV rows (dSᵀ q + Pᵀ dO) into an fp32 buffer with atomic adds through the
  indices. delta = rowsum(dO ∘ O) comes first, from flash_attention's preprocess kernel.
"""
from __future__ import annotations

import math

import torch
import triton.language as tl

import tle
from tle.examples import default_tolerance
from tle.kernels.flash_attention import GRID_AXIS_MAX, flash_attention_bwd_preprocess_kernel, nan_like
from tle.kernels.sparse_mla_indices import make_indices   # DeepSeek's test indices: query t draws from [0, t)
from tle.oplib import BenchSpec, Operator, Sample, check_tensor
from tle.oplib.arith import cdiv
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype
from tle.oplib.tensors import shared_memory_per_block, targets_sm90

KERNEL_DTYPES = (torch.float16, torch.bfloat16)


@tle.jit
def _program(G: tl.constexpr, HEAD_BLOCKS: tl.constexpr, BLOCK_H: tl.constexpr):
    """(batch, query, KV group, query heads, which of those heads exist) of this program: axis 0 walks the
    head blocks of each group, so the programs reading the same index list run side by side."""
    g = tl.program_id(0) // HEAD_BLOCKS
    in_group = (tl.program_id(0) % HEAD_BLOCKS) * BLOCK_H + tl.arange(0, BLOCK_H)
    return tl.program_id(2), tl.program_id(1), g, g * G + in_group, in_group < G


@tle.jit
def _query(q_ptr, b, s, heads, head_ok, stride_qb, stride_qs, stride_qh, D: tl.constexpr, TD: tl.constexpr):
    """The program's query rows split at d_v: [BLOCK_H, D] and [BLOCK_H, TD] (missing heads read 0)."""
    rows = q_ptr + b * stride_qb + s * stride_qs + heads[:, None] * stride_qh
    return (tl.load(rows + tl.arange(0, D)[None, :], mask=head_ok[:, None], other=0.0),
            tl.load(rows + D + tl.arange(0, TD)[None, :], mask=head_ok[:, None], other=0.0))


@tle.jit
def _sees(ids, s, seqlen_kv):
    """Which entries of an index list query s sees: a row of kv at or before its own position."""
    return (ids >= 0) & (ids <= s) & (ids < seqlen_kv)


@tle.jit
def _gather_rows(kv_base, idx_base, stride_kvs, start, s, seqlen_kv, topk, D: tl.constexpr, TD: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    """(ids, which ids query s sees, the rows they name split at d_v: [BLOCK_K, D] and [BLOCK_K, TD]) of index
    list entries [start, start + BLOCK_K); rows it does not see read 0."""
    cols = start + tl.arange(0, BLOCK_K)
    ids = tl.load(idx_base + cols, mask=cols < topk, other=-1)
    seen = _sees(ids, s, seqlen_kv)
    rows = kv_base + ids[:, None] * stride_kvs
    kv = tle.load(rows + tl.arange(0, D)[None, :], mask=seen[:, None], other=0.0, is_async=True)
    kv_t = tle.load(rows + D + tl.arange(0, TD)[None, :], mask=seen[:, None], other=0.0, is_async=True)
    return ids, seen, kv, kv_t


@tle.jit
def _steps_end(idx_base, s, seqlen_kv, topk, BLOCK_K: tl.constexpr, SCAN: tl.constexpr):
    """Where the steps end: past the last entry of the index list that query s sees, rounded up to BLOCK_K (the
    steps after it add nothing: a list padded at its end, as a prefill's early queries have, is cut short)."""
    last = tl.full([SCAN], -1, tl.int32)         # per lane: reduced once, after the loop (one block-wide max)
    for start in range(0, topk, SCAN):
        cols = start + tl.arange(0, SCAN)
        ids = tl.load(idx_base + cols, mask=cols < topk, other=-1)
        last = tl.maximum(last, tl.where(_sees(ids, s, seqlen_kv), cols, -1))
    return tl.cdiv(tl.max(last, 0) + 1, BLOCK_K) * BLOCK_K


@tle.jit
def sparse_mla_fwd_kernel(
        q_ptr, kv_ptr, idx_ptr, out_ptr, lse_ptr, sm_scale,
        stride_qb, stride_qs, stride_qh, stride_kvb, stride_kvs, stride_kvg, stride_ib, stride_is, stride_ig,
        stride_ob, stride_os, stride_oh, stride_lb, stride_ls, seqlen_kv, topk,
        G: tl.constexpr, HEAD_BLOCKS: tl.constexpr, D: tl.constexpr, TD: tl.constexpr, BLOCK_H: tl.constexpr,
        BLOCK_K: tl.constexpr, SCAN: tl.constexpr = 256):
    b, s, g, heads, head_ok = _program(G, HEAD_BLOCKS, BLOCK_H)
    q, q_t = _query(q_ptr, b, s, heads, head_ok, stride_qb, stride_qs, stride_qh, D, TD)
    offs_d = tl.arange(0, D)
    kv_base = kv_ptr + b * stride_kvb + g * stride_kvg
    idx_base = idx_ptr + b * stride_ib + s * stride_is + g * stride_ig

    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, D], dtype=tl.float32)
    for start in range(0, _steps_end(idx_base, s, seqlen_kv, topk, BLOCK_K, SCAN), BLOCK_K):
        ids, seen, kv, kv_t = _gather_rows(kv_base, idx_base, stride_kvs, start, s, seqlen_kv, topk, D, TD, BLOCK_K)
        qk = tl.dot(q_t, tl.trans(kv_t))
        qk = tl.dot(q, tl.trans(kv), qk)
        qk = tl.where(seen[None, :], qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)      # no row seen yet: keep exp2 finite
        p = tl.math.exp2(qk - m_ref[:, None])
        alpha = tl.math.exp2(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(kv.dtype), kv, acc * alpha[:, None])
        m_i = m_new

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o_rows = out_ptr + b * stride_ob + s * stride_os + heads[:, None] * stride_oh
    tl.store(o_rows + offs_d[None, :], (acc / l_safe[:, None]).to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
    # natural log; a query that saw nothing: m_i = -inf and log2(0) = -inf, so lse = -inf
    tl.store(lse_ptr + b * stride_lb + s * stride_ls + heads, (m_i + tl.math.log2(l_i)) * 0.6931471805599453,
             mask=head_ok)


@tle.jit
def _query_buffer(rows, head_ok, start: tl.constexpr, WIDTH: tl.constexpr, BLOCK_H: tl.constexpr):
    """Columns [start, start + WIDTH) of the program's query rows, in a shared buffer (missing heads read 0)."""
    buf = tle.gpu.alloc([BLOCK_H, WIDTH], rows.dtype.element_ty)
    tle.gpu.copy(rows + start + tl.arange(0, WIDTH)[None, :], buf, [BLOCK_H, WIDTH], mask=head_ok[:, None],
                 other=0.0)
    return buf


@tle.jit
def sparse_mla_fwd_warp_groups_kernel(
        q_ptr, kv_ptr, idx_ptr, out_ptr, lse_ptr, sm_scale,
        stride_qb, stride_qs, stride_qh, stride_kvb, stride_kvs, stride_kvg, stride_ib, stride_is, stride_ig,
        stride_ob, stride_os, stride_oh, stride_lb, stride_ls, seqlen_kv, topk,
        G: tl.constexpr, HEAD_BLOCKS: tl.constexpr, D: tl.constexpr, TD: tl.constexpr, BLOCK_H: tl.constexpr,
        BLOCK_K: tl.constexpr, SCAN: tl.constexpr = 256, LOADER_REGISTERS: tl.constexpr = 80,
        SOFTMAX_REGISTERS: tl.constexpr = 240, VALUE_REGISTERS: tl.constexpr = 168):
    """The forward in three warp groups: group 0 gathers each step's rows into shared memory, group 1 computes
    the scores, the softmax and the first half of the output columns, group 2 the second half from the
    probabilities group 1 hands it. The same results as sparse_mla_fwd_kernel."""
    b, s, g, heads, head_ok = _program(G, HEAD_BLOCKS, BLOCK_H)
    H: tl.constexpr = D // 2
    kv_base = kv_ptr + b * stride_kvb + g * stride_kvg
    idx_base = idx_ptr + b * stride_ib + s * stride_is + g * stride_ig
    end = _steps_end(idx_base, s, seqlen_kv, topk, BLOCK_K, SCAN)         # every group's loop bound
    with tle.gpu.warp_group(1, registers=SOFTMAX_REGISTERS):
        # only group 1 reads the query: it loads it while group 0 gathers the first rows
        rows = q_ptr + b * stride_qb + s * stride_qs + heads[:, None] * stride_qh
        q_lo = _query_buffer(rows, head_ok, 0, H, BLOCK_H)
        q_hi = _query_buffer(rows, head_ok, H, H, BLOCK_H)
        q_t = _query_buffer(rows, head_ok, D, TD, BLOCK_H)
    p_buf = tle.gpu.alloc([BLOCK_H, BLOCK_K], kv_ptr.dtype.element_ty)      # group 1 -> group 2, each step
    alpha_buf = tle.gpu.alloc([BLOCK_H], tl.float32)
    l_buf = tle.gpu.alloc([BLOCK_H], tl.float32)                             # group 1 -> group 2, at the end

    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc_lo = tl.zeros([BLOCK_H, H], dtype=tl.float32)
    acc_hi = tl.zeros([BLOCK_H, H], dtype=tl.float32)
    for start in tle.gpu.pipeline(0, end, BLOCK_K, num_stages=2):
        kv_lo = tle.gpu.alloc([BLOCK_K, H], kv_ptr.dtype.element_ty)
        kv_hi = tle.gpu.alloc([BLOCK_K, H], kv_ptr.dtype.element_ty)
        kv_t = tle.gpu.alloc([BLOCK_K, TD], kv_ptr.dtype.element_ty)
        bias = tle.gpu.alloc([BLOCK_K], tl.float32)                          # 0 for a row seen, else -inf
        with tle.gpu.warp_group(0, registers=LOADER_REGISTERS):
            cols = start + tl.arange(0, BLOCK_K)
            ids = tl.load(idx_base + cols, mask=cols < topk, other=-1)
            seen = _sees(ids, s, seqlen_kv)
            kv_rows = kv_base + ids[:, None] * stride_kvs
            tle.gpu.copy(kv_rows + tl.arange(0, H)[None, :], kv_lo, [BLOCK_K, H], mask=seen[:, None], other=0.0)
            tle.gpu.copy(kv_rows + H + tl.arange(0, H)[None, :], kv_hi, [BLOCK_K, H], mask=seen[:, None],
                         other=0.0)
            tle.gpu.copy(kv_rows + D + tl.arange(0, TD)[None, :], kv_t, [BLOCK_K, TD], mask=seen[:, None],
                         other=0.0)
            tle.gpu.local_store(bias, tl.where(seen, 0.0, float("-inf")))
        with tle.gpu.warp_group(1, registers=SOFTMAX_REGISTERS):
            qk = tl.dot(tle.gpu.local_load(q_t), tl.trans(tle.gpu.local_load(kv_t)))
            qk = tl.dot(tle.gpu.local_load(q_lo), tl.trans(tle.gpu.local_load(kv_lo)), qk)
            qk = tl.dot(tle.gpu.local_load(q_hi), tl.trans(tle.gpu.local_load(kv_hi)), qk)
            qk = qk * qk_scale + tle.gpu.local_load(bias)[None, :]
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)      # no row seen yet: keep exp2 finite
            p = tl.math.exp2(qk - m_ref[:, None])
            alpha = tl.math.exp2(m_i - m_ref)
            l_i = l_i * alpha + tl.sum(p, 1)
            tle.gpu.local_store(p_buf, p)
            tle.gpu.local_store(alpha_buf, alpha)
            acc_lo = tl.dot(tle.gpu.local_load(p_buf), tle.gpu.local_load(kv_lo), acc_lo * alpha[:, None])
            m_i = m_new
        with tle.gpu.warp_group(2, registers=VALUE_REGISTERS):
            acc_hi = tl.dot(tle.gpu.local_load(p_buf), tle.gpu.local_load(kv_hi),
                            acc_hi * tle.gpu.local_load(alpha_buf)[:, None])

    o_rows = out_ptr + b * stride_ob + s * stride_os + heads[:, None] * stride_oh
    with tle.gpu.warp_group(1):
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        tle.gpu.local_store(l_buf, l_safe)
        tl.store(o_rows + tl.arange(0, H)[None, :], (acc_lo / l_safe[:, None]).to(out_ptr.dtype.element_ty),
                 mask=head_ok[:, None])
        # natural log; a query that saw nothing: m_i = -inf and log2(0) = -inf, so lse = -inf
        tl.store(lse_ptr + b * stride_lb + s * stride_ls + heads, (m_i + tl.math.log2(l_i)) * 0.6931471805599453,
                 mask=head_ok)
    with tle.gpu.warp_group(2):
        tl.store(o_rows + H + tl.arange(0, H)[None, :],
                 (acc_hi / tle.gpu.local_load(l_buf)[:, None]).to(out_ptr.dtype.element_ty), mask=head_ok[:, None])


@tle.jit
def sparse_mla_bwd_kernel(
        q_ptr, kv_ptr, do_ptr, idx_ptr, lse_ptr, delta_ptr, dq_ptr, dkv_ptr, sm_scale,
        stride_qb, stride_qs, stride_qh, stride_kvb, stride_kvs, stride_kvg, stride_ib, stride_is, stride_ig,
        stride_dob, stride_dos, stride_doh, stride_lb, stride_ls, stride_db, stride_dh,
        stride_dkb, stride_dks, stride_dkg, seqlen_kv, topk,
        G: tl.constexpr, HEAD_BLOCKS: tl.constexpr, D: tl.constexpr, TD: tl.constexpr, BLOCK_H: tl.constexpr,
        BLOCK_K: tl.constexpr, ROWS_TRANSPOSED: tl.constexpr, SCAN: tl.constexpr = 256):
    b, s, g, heads, head_ok = _program(G, HEAD_BLOCKS, BLOCK_H)
    q, q_t = _query(q_ptr, b, s, heads, head_ok, stride_qb, stride_qs, stride_qh, D, TD)
    offs_d = tl.arange(0, D)
    offs_t = tl.arange(0, TD)
    do = tl.load(do_ptr + b * stride_dob + s * stride_dos + heads[:, None] * stride_doh + offs_d[None, :],
                 mask=head_ok[:, None], other=0.0)
    delta = tl.load(delta_ptr + b * stride_db + heads * stride_dh + s, mask=head_ok, other=0.0)
    # heads past the group read lse = +inf: their probabilities are 0
    lse2 = tl.load(lse_ptr + b * stride_lb + s * stride_ls + heads, mask=head_ok,
                   other=float("inf")) * 1.4426950408889634
    kv_base = kv_ptr + b * stride_kvb + g * stride_kvg
    dkv_base = dkv_ptr + b * stride_dkb + g * stride_dkg
    idx_base = idx_ptr + b * stride_ib + s * stride_is + g * stride_ig

    qk_scale = sm_scale * 1.4426950408889634
    dq = tl.zeros([BLOCK_H, D], dtype=tl.float32)
    dq_t = tl.zeros([BLOCK_H, TD], dtype=tl.float32)
    for start in range(0, _steps_end(idx_base, s, seqlen_kv, topk, BLOCK_K, SCAN), BLOCK_K):
        ids, seen, kv, kv_t = _gather_rows(kv_base, idx_base, stride_kvs, start, s, seqlen_kv, topk, D, TD, BLOCK_K)
        qk = tl.dot(q_t, tl.trans(kv_t))
        qk = tl.dot(q, tl.trans(kv), qk)
        p = tl.where(seen[None, :], tl.math.exp2(qk * qk_scale - lse2[:, None]), 0.0)  # [BLOCK_H, BLOCK_K]
        dp = tl.dot(do, tl.trans(kv))
        ds = (p * (dp - delta[:, None]) * sm_scale).to(q.dtype)
        dq = tl.dot(ds, kv, dq)
        dq_t = tl.dot(ds, kv_t, dq_t)
        d_rows = dkv_base + ids * stride_dks
        if ROWS_TRANSPOSED:
            # the rows' gradients as [D, BLOCK_K] and [TD, BLOCK_K]: q and dO are then the A operand of every
            # product they enter, and Triton keeps one copy of each in shared memory (as B operands here too
            # it kept two: 315 KB at BLOCK_H 64, D 512, against 181 KB)
            dkv = tl.dot(tl.trans(q), ds)
            dkv = tl.dot(tl.trans(do), p.to(do.dtype), dkv)
            dkv_t = tl.dot(tl.trans(q_t), ds)
            tl.atomic_add(d_rows[None, :] + offs_d[:, None], dkv, mask=seen[None, :], sem="relaxed")
            tl.atomic_add(d_rows[None, :] + D + offs_t[:, None], dkv_t, mask=seen[None, :], sem="relaxed")
        else:
            # [BLOCK_K, D] and [BLOCK_K, TD]: each row's columns side by side, as the atomic adds write them
            dkv = tl.dot(tl.trans(ds), q)
            dkv = tl.dot(tl.trans(p.to(do.dtype)), do, dkv)
            dkv_t = tl.dot(tl.trans(ds), q_t)
            tl.atomic_add(d_rows[:, None] + offs_d[None, :], dkv, mask=seen[:, None], sem="relaxed")
            tl.atomic_add(d_rows[:, None] + D + offs_t[None, :], dkv_t, mask=seen[:, None], sem="relaxed")

    dq_rows = dq_ptr + b * stride_qb + s * stride_qs + heads[:, None] * stride_qh
    tl.store(dq_rows + offs_d[None, :], dq.to(dq_ptr.dtype.element_ty), mask=head_ok[:, None])
    tl.store(dq_rows + D + offs_t[None, :], dq_t.to(dq_ptr.dtype.element_ty), mask=head_ok[:, None])


# -- launch configurations ----------------------------------------------------------------------------------
def _head_block(group: int) -> dict:
    """BLOCK_H (the group's heads, padded to a power of two, at most 64) and its warps. At least 32: with 4 warps
    TileLang's T.gemm splits neither a 16 x 16 product nor one of 16 rows into 16-row x 8-column warp tiles."""
    block_h = min(64, max(32, 1 << (group - 1).bit_length()))
    return dict(BLOCK_H=block_h, num_warps=8 if block_h >= 64 else 4)


def fwd_config(group: int, backend: str) -> dict:
    """BLOCK_H, BLOCK_K, num_warps and num_stages of the forward (docs/benchmark/sparse_mla.md)."""
    return dict(_head_block(group), BLOCK_K=64, num_stages=2)


def fwd_warp_groups_config() -> dict:
    """sparse_mla_fwd_warp_groups_kernel's launch: 64 heads and 64 rows a step in three groups of 4 warps; the index
    scan in 128-entry pieces (with 384 threads TileLang lays out a 1-D reduction of 128, not of 256 or more)."""
    return dict(BLOCK_H=64, BLOCK_K=64, num_warps=12, num_stages=2, SCAN=128)


def _warp_groups_shared_bytes(dt: int, cfg: dict, elem: int = 2) -> int:
    """The warp-group forward's shared buffers: the query, num_stages versions of a step's rows and of its bias,
    the probabilities handed to group 2, and the fp32 alpha and l."""
    h, k, stages = cfg["BLOCK_H"], cfg["BLOCK_K"], cfg["num_stages"]
    return (h + stages * k) * dt * elem + h * k * elem + 4 * (stages * k + 2 * h)


def fwd_kernel(group: int, d_v: int, dt: int, backend: str, *, sm90: bool, smem_bytes: int):
    """The forward's kernel and launch for a head group of `group` heads. On TileLang on sm_90 (wgmma,
    setmaxnreg): the warp-group kernel, where each half of the value columns is at least 32 wide and its buffers
    fit `smem_bytes`; its tile of 64 heads is faster even half empty (32 heads a group: 1.9 ms against the
    plain kernel's 3.2 at 32 heads a tile, docs/benchmark/sparse_mla_warp_groups.md). Otherwise, and on Triton
    (which drops the warp groups and runs the blocks in program order, slower than the plain kernel):
    sparse_mla_fwd_kernel."""
    cfg = fwd_warp_groups_config()
    if backend == "tilelang" and sm90 and d_v >= 64 and _warp_groups_shared_bytes(dt, cfg) <= smem_bytes:
        return sparse_mla_fwd_warp_groups_kernel, cfg
    return sparse_mla_fwd_kernel, fwd_config(group, backend)


def bwd_config(group: int, backend: str) -> dict:
    """BLOCK_H, BLOCK_K, num_warps, num_stages and the dKV layout of the backward: the rows' gradients
    transposed on Triton (one shared-memory copy of q and of dO), row by row on TileLang (coalesced atomics)."""
    return dict(_head_block(group), BLOCK_K=32, num_stages=2, ROWS_TRANSPOSED=backend == "triton")


# -- the kernel backends ------------------------------------------------------------------------------------
def _launch_shape(q, kv, cfg):
    """(grid, constexprs): a program per (head block of a group, query, batch)."""
    b, s, h, _ = q.shape
    vg = kv.shape[2]
    group = h // vg
    head_blocks = cdiv(group, cfg["BLOCK_H"])
    return (vg * head_blocks, s, b), dict(G=group, HEAD_BLOCKS=head_blocks)


def _strides3(t):
    return t.stride(0), t.stride(1), t.stride(2)


def _kernel_forward(q, kv, indices, sm_scale, d_v, backend):
    b, s, h, dt = q.shape
    out = q.new_empty(b, s, h, d_v)
    lse = torch.empty(b, s, h, device=q.device, dtype=torch.float32)
    if out.numel() == 0:
        return out, lse
    kernel, cfg = fwd_kernel(h // kv.shape[2], d_v, dt, backend, sm90=targets_sm90(q.device),
                             smem_bytes=shared_memory_per_block(q.device))
    grid, consts = _launch_shape(q, kv, cfg)
    kernel[grid](
        q, kv, indices, out, lse, sm_scale, *_strides3(q), *_strides3(kv), *_strides3(indices), *_strides3(out),
        lse.stride(0), lse.stride(1), kv.shape[1], indices.shape[3], D=d_v, TD=dt - d_v, backend=backend,
        **consts, **cfg)
    return out, lse


def _kernel_backward(do, q, kv, indices, out, lse, sm_scale, d_v, backend):
    b, s, h, dt = q.shape
    dq = q.new_empty(q.shape)
    dkv32 = torch.zeros(kv.shape, device=kv.device, dtype=torch.float32)
    if q.numel() == 0:
        return dq, dkv32.to(kv.dtype)
    delta = _delta(out, do, backend)
    cfg = bwd_config(h // kv.shape[2], backend)
    grid, consts = _launch_shape(q, kv, cfg)
    sparse_mla_bwd_kernel[grid](
        q, kv, do, indices, lse, delta, dq, dkv32, sm_scale, *_strides3(q), *_strides3(kv), *_strides3(indices),
        *_strides3(do), lse.stride(0), lse.stride(1), delta.stride(0), delta.stride(1), *_strides3(dkv32),
        kv.shape[1], indices.shape[3], D=d_v, TD=dt - d_v, backend=backend, **consts, **cfg)
    return dq, dkv32.to(kv.dtype)


PREPROCESS_BLOCK_M = 16      # rows of d_v (512) values per program: a [16, 512] tile of O and of dO


def _delta(out, do, backend):
    """delta = rowsum(dO ∘ O), fp32 [B, H, S], by flash_attention's preprocess kernel (same layout of rows)."""
    b, s, h, d_v = out.shape
    delta = torch.empty(b, h, s, device=out.device, dtype=torch.float32)
    flash_attention_bwd_preprocess_kernel[(cdiv(s, PREPROCESS_BLOCK_M), b * h)](
        out, do, delta, delta, out.stride(0), out.stride(1), out.stride(2), do.stride(0), do.stride(1),
        do.stride(2), delta.stride(0), delta.stride(1), s, H=h, HEAD_DIM=d_v, BLOCK_M=PREPROCESS_BLOCK_M,
        VARLEN=False, backend=backend, num_warps=4)
    return delta


# -- the torch backend: the same formulas, fp32 (fp64 for fp64 inputs), a chunk of queries at a time ---------
CHUNK = 256


def _seen(ids, s0, seqlen_kv):
    """Which of the indices [B, s, VG, topk] of queries s0, s0+1, ... name a row their query sees."""
    pos = torch.arange(s0, s0 + ids.shape[1], device=ids.device).view(1, -1, 1, 1)
    return (ids >= 0) & (ids <= pos) & (ids < seqlen_kv)


def _gathered(kv, ids, seen):
    """kv rows named by ids [B, s, VG, topk] -> [B, s, VG, topk, DT]; an index not seen reads row 0 (its score is
    masked, so it weighs nothing)."""
    b, _, vg, _ = ids.shape
    safe = torch.where(seen, ids, 0).long()
    return kv[torch.arange(b, device=kv.device).view(b, 1, 1, 1), safe,
              torch.arange(vg, device=kv.device).view(1, 1, vg, 1)]


def _scores(q, rows, seen, sm_scale):
    """[B, s, VG, G, topk] scaled scores of q [B, s, H, DT] against its gathered rows, -inf where not seen."""
    b, s, h, dt = q.shape
    vg = rows.shape[2]
    qg = q.view(b, s, vg, h // vg, dt)
    sc = torch.einsum("bsvgd,bsvkd->bsvgk", qg, rows) * sm_scale
    return sc.masked_fill(~seen[:, :, :, None, :], -math.inf)


def _probabilities(sc):
    """(p, lse) of scores whose rows may be all -inf (then p = 0 and lse = -inf), differentiable."""
    any_seen = torch.isfinite(sc).any(-1, keepdim=True)
    lse = torch.logsumexp(torch.where(any_seen, sc, 0.0), -1, keepdim=True)
    p = torch.where(any_seen, torch.exp(sc - lse), 0.0)
    return p, torch.where(any_seen, lse, -math.inf)[..., 0]


def _torch_forward(q, kv, indices, sm_scale, d_v):
    ct = torch_compute_dtype(q)
    b, s, h, _ = q.shape
    qf, kvf = q.to(ct), kv.to(ct)
    out = q.new_empty(b, s, h, d_v)
    lse = torch.empty(b, s, h, device=q.device, dtype=torch.float32)
    for s0 in range(0, s, CHUNK):
        ids = indices[:, s0:s0 + CHUNK]
        seen = _seen(ids, s0, kv.shape[1])
        rows = _gathered(kvf, ids, seen)
        p, l = _probabilities(_scores(qf[:, s0:s0 + CHUNK], rows, seen, sm_scale))
        o = torch.einsum("bsvgk,bsvkd->bsvgd", p, rows[..., :d_v])
        out[:, s0:s0 + CHUNK] = o.reshape(b, -1, h, d_v).to(q.dtype)
        lse[:, s0:s0 + CHUNK] = l.reshape(b, -1, h).float()
    return out, lse


def _torch_backward(do, q, kv, indices, out, lse, sm_scale, d_v):
    ct = torch_compute_dtype(q)
    b, s, h, dt = q.shape
    vg = kv.shape[2]
    qf, kvf = q.to(ct), kv.to(ct)
    dq = q.new_empty(q.shape)
    dkv = torch.zeros(kv.shape, device=kv.device, dtype=ct)
    for s0 in range(0, s, CHUNK):
        sl = slice(s0, s0 + CHUNK)
        ids = indices[:, sl]
        n = ids.shape[1]
        seen = _seen(ids, s0, kv.shape[1])
        rows = _gathered(kvf, ids, seen)
        sc = _scores(qf[:, sl], rows, seen, sm_scale)
        l = lse[:, sl].to(ct).view(b, n, vg, h // vg, 1)
        p = torch.where(seen[:, :, :, None, :], torch.exp(sc - l), 0.0)
        dog = do[:, sl].to(ct).view(b, n, vg, h // vg, d_v)
        delta = (dog * out[:, sl].to(ct).view(b, n, vg, h // vg, d_v)).sum(-1, keepdim=True)
        dp = torch.einsum("bsvgd,bsvkd->bsvgk", dog, rows[..., :d_v])
        ds = p * (dp - delta) * sm_scale
        dq[:, sl] = torch.einsum("bsvgk,bsvkd->bsvgd", ds, rows).reshape(b, n, h, dt).to(q.dtype)
        drows = torch.einsum("bsvgk,bsvgd->bsvkd", ds, qf[:, sl].view(b, n, vg, h // vg, dt))
        drows[..., :d_v] += torch.einsum("bsvgk,bsvgd->bsvkd", p, dog)
        # scatter-add each seen row's gradient into its kv row: flatten (batch, row, group)
        target = (torch.arange(b, device=q.device).view(b, 1, 1, 1) * kv.shape[1] + torch.where(seen, ids, 0).long()) \
            * vg + torch.arange(vg, device=q.device).view(1, 1, vg, 1)
        dkv.view(-1, dt).index_add_(0, target[seen], drows[seen])
    return dq, dkv.to(kv.dtype)


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _attention(run, q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
               d_v: int) -> tuple[torch.Tensor, torch.Tensor]:
    return run(q, kv, indices, sm_scale, d_v)


def _attention_backward(run, do: torch.Tensor, q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor,
                        out: torch.Tensor, lse: torch.Tensor, sm_scale: float,
                        d_v: int) -> tuple[torch.Tensor, torch.Tensor]:
    return run(do.contiguous(), q, kv, indices, out, lse, sm_scale, d_v)


def _forward_fake(q, kv, indices, sm_scale, d_v):
    b, s, h, _ = q.shape
    return q.new_empty(b, s, h, d_v), q.new_empty(b, s, h, dtype=torch.float32)


def _save(ctx, inputs, output):
    q, kv, indices, *ctx.args = inputs
    out, lse = output
    ctx.save_for_backward(q, kv, indices, out, lse)
    ctx.mark_non_differentiable(lse)


def _grads(ctx, backward, dout, _dlse):
    return backward(dout, *ctx.saved_tensors, *ctx.args)


SPARSE_MLA = Recipe(
    "sparse_mla",
    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_attention, fake=_forward_fake),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_attention_backward,
                   fake=lambda do, q, kv, *_: (q.new_empty(q.shape), kv.new_empty(kv.shape))),
    save=_save, grads=_grads)


# -- example launches (tle show / compare, the kernel tests and goldens) ----------------------------------------
def _example_inputs(device, size):
    """Small for the CPU (one head block of 64, a ragged index step, invalid indices); the benchmark's shape at
    64 heads for the GPU."""
    b, s, s_kv, h, d_v, tail, topk = (1, 20, 32, 64, 64, 32, 48) if size == "small" else \
        (1, 4096, 8192, 64, 512, 64, 2048)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(b, s, h, d_v + tail, generator=gen).to(device, torch.bfloat16)
    kv = torch.randn(b, s_kv, 1, d_v + tail, generator=gen).to(device, torch.bfloat16)
    indices = make_indices(b, s, s_kv, 1, topk, gen, device)
    if size == "small":
        indices[0, 7, 0, 2] = -3                                   # an invalid index inside a list
    label = f"B{b} S{s} S_kv{s_kv} H{h} D{d_v}+{tail} topk{topk} bf16"
    return q, kv, indices, (d_v + tail) ** -0.5, d_v, label


def _launch_args(q, kv, indices, cfg):
    grid, consts = _launch_shape(q, kv, cfg)
    return grid, dict(consts, **cfg)


def _forward_example(device, size, cfg):
    q, kv, indices, scale, d_v, label = _example_inputs(device, size)
    b, s, h, dt = q.shape
    out, lse = nan_like(q[..., :d_v]), nan_like(q[..., 0], torch.float32)
    grid, kwargs = _launch_args(q, kv, indices, cfg)

    def ref():
        o, l = _torch_forward(q, kv, indices, scale, d_v)
        return {"out": o, "lse": l}
    return tle.Launch(grid=grid, args=(q, kv, indices, out, lse, scale, *_strides3(q), *_strides3(kv),
                                       *_strides3(indices), *_strides3(out), lse.stride(0), lse.stride(1),
                                       kv.shape[1], indices.shape[3]),
                      kwargs=dict(kwargs, D=d_v, TD=dt - d_v), outputs={"out": out, "lse": lse}, reference=ref,
                      flops=2 * b * s * h * indices.shape[3] * (dt + d_v), label=label)


@tle.example(sparse_mla_fwd_kernel)
def _fwd_example(device, size):
    return _forward_example(device, size, fwd_config(64, "tilelang"))     # the examples' one group of 64 heads


@tle.example(sparse_mla_fwd_warp_groups_kernel)
def _fwd_warp_groups_example(device, size):
    return _forward_example(device, size, fwd_warp_groups_config())


@tle.example(sparse_mla_bwd_kernel)
def _bwd_example(device, size):
    q, kv, indices, scale, d_v, label = _example_inputs(device, size)
    b, s, h, dt = q.shape
    out, lse = _torch_forward(q, kv, indices, scale, d_v)
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(device, q.dtype)
    delta = (out.float() * do.float()).sum(-1).transpose(1, 2).contiguous()
    dq, dkv = nan_like(q), torch.zeros(kv.shape, device=device, dtype=torch.float32)
    # the Triton layout of the rows' gradients: at the GPU example's shape, Triton has not the shared memory for
    # the other; TileLang runs both (the operator's samples run each backend's own)
    grid, kwargs = _launch_args(q, kv, indices, bwd_config(h, "triton"))
    rq, rkv = _torch_backward(do.float(), q.float(), kv.float(), indices, out.float(), lse, scale, d_v)
    return tle.Launch(grid=grid, args=(q, kv, do, indices, lse, delta, dq, dkv, scale, *_strides3(q), *_strides3(kv),
                                       *_strides3(indices), *_strides3(do), lse.stride(0), lse.stride(1),
                                       delta.stride(0), delta.stride(1), *_strides3(dkv), kv.shape[1],
                                       indices.shape[3]),
                      kwargs=dict(kwargs, D=d_v, TD=dt - d_v), outputs={"dq": dq, "dkv": dkv}, accumulates=("dkv",),
                      reference=lambda: {"dq": rq, "dkv": rkv},
                      # dKV sums bf16 products (dS and P rounded to bf16, as dQ's are): bf16's tolerance
                      tolerances={"dkv": default_tolerance(rkv, torch.bfloat16)},
                      flops=2 * b * s * h * indices.shape[3] * (2 * d_v + 3 * dt), label=label)


# -- the public surface -------------------------------------------------------------------------------------
def _kernel_width(n):
    """A width the kernels take: a power of two of at least 16 (tl.arange's and a product's)."""
    return n >= 16 and n & (n - 1) == 0


def check_inputs(q, kv, indices, sm_scale, d_v) -> float:
    """The contract of tle.ops.sparse_mla; returns the scale to use."""
    check_tensor(q, "q", dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64), rank=4)
    check_tensor(kv, "kv", dtypes=(q.dtype,), rank=4, device=q.device)
    check_tensor(indices, "indices", dtypes=(torch.int32,), rank=4, device=q.device)
    b, s, h, dt = q.shape
    if kv.shape[0] != b or kv.shape[3] != dt:
        raise tle.LaunchError(f"'kv' has shape {tuple(kv.shape)}; expected [{b}, S_kv, VG, {dt}] (q's batch and DT)")
    vg = kv.shape[2]
    if vg == 0 or h % vg:
        raise tle.LaunchError(f"'kv' has {vg} groups (dim 2), which does not divide q's {h} heads")
    if tuple(indices.shape[:3]) != (b, s, vg):
        raise tle.LaunchError(f"'indices' has shape {tuple(indices.shape)}; expected [{b}, {s}, {vg}, topk]")
    if isinstance(d_v, bool) or not isinstance(d_v, int) or not 0 < d_v < dt:
        raise tle.LaunchError(f"'d_v' must be an int in (0, {dt}) (q's last dim {dt}: values are the first d_v "
                              f"columns of kv, keys all of them), got {d_v!r}")
    if sm_scale is None:
        return dt ** -0.5
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)) or not math.isfinite(sm_scale):
        raise tle.LaunchError(f"'sm_scale' must be a finite float or None, got {sm_scale!r}")
    return float(sm_scale)


def check_kernel_inputs(backend, q, kv, indices, d_v):
    """What the kernels take: fp16/bf16, power-of-two d_v and tail of at least 16, 32-bit offsets."""
    if backend == "torch":
        return
    if q.dtype not in KERNEL_DTYPES:
        raise tle.LaunchError(f"tle.ops.sparse_mla: 'q' has dtype {str(q.dtype)[6:]}, which backend '{backend}' "
                              f"does not take (float16, bfloat16; other dtypes run on 'torch')")
    tail = q.shape[3] - d_v
    if not (_kernel_width(d_v) and _kernel_width(tail)):
        raise tle.LaunchError(f"tle.ops.sparse_mla: backend '{backend}' takes 'd_v' and DT - d_v powers of two of "
                              f"at least 16; got d_v={d_v}, DT - d_v={tail} (any runs on 'torch')")
    b, s = q.shape[:2]
    if s > GRID_AXIS_MAX or b > GRID_AXIS_MAX:
        raise tle.LaunchError(f"tle.ops.sparse_mla: 'q' has shape {tuple(q.shape)}; backend '{backend}' launches a "
                              f"program per query and batch on grid axes 1 and 2, at most {GRID_AXIS_MAX} each")
    for name, t in (("q", q), ("kv", kv), ("indices", indices)):
        if t.numel() >= 2 ** 31:
            raise tle.LaunchError(f"tle.ops.sparse_mla: '{name}' has {t.numel()} elements; backend '{backend}' "
                                  f"addresses it with 32-bit offsets (fewer than 2^31)")


def sparse_mla(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float | None = None,
               d_v: int = 512, *, return_lse: bool = False, backend: str | None = None, fallback: str | None = None):
    """Sparse MLA attention (the module docstring gives layouts and masking). Returns out, or (out, lse)."""
    sm_scale = check_inputs(q, kv, indices, sm_scale, d_v)
    b = SPARSE_MLA.resolve(q.device, backend, fallback)
    check_kernel_inputs(b, q, kv, indices, d_v)
    q, kv, indices = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, kv, indices))
    out, lse = SPARSE_MLA(q, kv, indices, sm_scale, d_v, backend=b)
    return (out, lse) if return_lse else out


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(q, kv, indices, sm_scale=None, d_v=512, *, return_lse=False):
    """The tests' ground truth, plain differentiable torch: the rows gathered whole, softmax over them."""
    sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    seen = _seen(indices, 0, kv.shape[1])
    rows = _gathered(kv, indices, seen)
    p, lse = _probabilities(_scores(q, rows, seen, sm_scale))
    b, s, h, _ = q.shape
    out = torch.einsum("bsvgk,bsvkd->bsvgd", p, rows[..., :d_v]).reshape(b, s, h, d_v)
    return (out, lse.reshape(b, s, h).detach().float()) if return_lse else out


def samples(device, dtype):
    gen = torch.Generator().manual_seed(0)

    def t(*shape):
        return torch.randn(*shape, generator=gen).to(device, dtype)

    def case(b, s, s_kv, h, vg, d_v, tail, topk, ids=None, label="", **kw):
        if ids is None:
            ids = torch.randint(-2, s_kv + 2, (b, s, vg, topk), generator=gen, dtype=torch.int32)
        return Sample((t(b, s, h, d_v + tail), t(b, s_kv, vg, d_v + tail), ids.to(device)), dict(d_v=d_v, **kw),
                      label=label)

    none_seen = torch.full((1, 6, 1, 16), -1, dtype=torch.int32)
    none_seen[0, 3:, 0, :4] = torch.tensor([0, 2, 2, 1], dtype=torch.int32)       # a repeated index
    return [case(1, 3, 4, 2, 1, 16, 16, 4, label="tiny (gradcheck) H2 D16+16 topk4"),
            case(1, 17, 24, 16, 1, 32, 16, 16, label="S17 S_kv24 H16 D32+16 topk16, random and invalid indices"),
            case(2, 9, 9, 8, 2, 16, 16, 40, label="B2 two KV groups of 4 heads, topk 40 (a ragged step)",
                 sm_scale=0.2),
            case(1, 33, 48, 40, 1, 64, 32, 32, make_indices(1, 33, 48, 1, 32, gen),
                 label="DeepSeek-style indices, 40 heads (a partial head block) D64+32", return_lse=True),
            case(1, 6, 8, 4, 1, 32, 16, 16, none_seen, label="queries that see no row (lse -inf), a repeated index",
                 return_lse=True)]


def _bench_make(shape, dtype, device):
    b, s, s_kv, h, d_v, tail, topk = shape
    q = torch.randn(b, s, h, d_v + tail, device=device, dtype=dtype)
    kv = torch.randn(b, s_kv, 1, d_v + tail, device=device, dtype=dtype)
    return Sample((q, kv, make_indices(b, s, s_kv, 1, topk, torch.Generator().manual_seed(0), device)),
                  dict(d_v=d_v))


def _bench_flops(sample, mode):
    q, _, indices = sample.args
    b, s, h, dt = q.shape
    d_v, topk = sample.kwargs["d_v"], indices.shape[-1]
    # every listed index counted, seen or not (TileLang's examples count the same way)
    return 2 * b * s * h * topk * ((dt + d_v) if mode == "fwd" else (2 * d_v + 3 * dt))


def _eager(sample):
    q, kv, indices = sample.args
    return lambda q=q, kv=kv: reference(q, kv, indices, d_v=sample.kwargs["d_v"])


def _tilelang_examples():
    """TileLang's own sparse-MLA example modules (examples/deepseek_v32 of its repository), a benchmark peer kept
    outside this tree: the folder named by TLE_TILELANG_EXAMPLES, default .peers/tilelang_deepseek_v32."""
    import importlib
    import os
    import sys
    folder = os.path.abspath(os.environ.get("TLE_TILELANG_EXAMPLES", os.path.join(".peers", "tilelang_deepseek_v32")))
    if not os.path.isfile(os.path.join(folder, "sparse_mla_bwd.py")):
        raise ImportError(f"TileLang's sparse_mla examples are not in {folder}")
    if folder not in sys.path:
        sys.path.insert(0, folder)             # the examples import their neighbours by bare name
    return importlib.import_module("sparse_mla_fwd"), importlib.import_module("sparse_mla_bwd")


def _tilelang_example_peer(sample):
    """TileLang's `sparse_mla_fwd_interface` and `sparse_mla_bwd` as one differentiable call (bf16, d_v 512, the
    default scale: what the examples take)."""
    q, kv, indices = sample.args
    if q.dtype != torch.bfloat16 or sample.kwargs.get("d_v", 512) != 512 or sample.kwargs.get("sm_scale"):
        return None
    fwd, bwd = _tilelang_examples()

    class Example(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, kv):
            out, lse = fwd.sparse_mla_fwd_interface(q, kv, indices)
            ctx.save_for_backward(q, kv, out, lse)
            return out

        @staticmethod
        def backward(ctx, dout):
            q, kv, out, lse = ctx.saved_tensors
            return bwd.sparse_mla_bwd(q, kv, out, dout.contiguous(), indices, lse)

    return lambda q=q, kv=kv: Example.apply(q, kv)


OPERATOR = Operator(
    "sparse_mla", fn=sparse_mla, reference=reference, samples=samples, grad_inputs=(0, 1), dtypes=KERNEL_DTYPES,
    bench=BenchSpec(dry_shapes=[(1, 64, 128, 16, 512, 64, 64)],
                    shapes=[(1, 4096, 8192, 128, 512, 64, 2048), (1, 4096, 8192, 64, 512, 64, 2048),
                            (1, 2048, 4096, 128, 512, 64, 1024)],
                    make=_bench_make, flops=_bench_flops, eager=_eager,
                    peers={"TileLang example": _tilelang_example_peer}, shape_help="BxSxS_KVxHxD_VxTAILxTOPK"))
