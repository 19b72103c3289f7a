"""The gated delta rule's backward kernels, each one text lowered to Triton and to TileLang.

They follow `gated_delta_rule_torch.chunked_backward` step for step, with the layout of the forward kernels
(tokens addressed flat through cu_seqlens, chunks of BT = 64 listed by `gdr_chunk_index_kernel`). The
backward first runs the forward's WY and state kernels again (w, u, each chunk's start state S and v_new)
from the chunk gates G and the inverses Ai the forward kept; then, per chunk and value head:
- `gdr_dv_local_kernel`: dv_local = P^T do, P = scale causal exp(G_i - G_j) q_i.k_j.
- `gdr_state_backward_kernel`: walks a sequence's chunks backwards carrying dS, the gradient of the state at
  a chunk's end: stores dS, dv_new = dv_local + exp(G_last - G) k dS, then
  dS <- exp(G_last) dS + scale (exp(G) q)^T do - w^T dv_new; the initial state's gradient at the start.
- `gdr_dqkwg_kernel`: per block of K columns, dq, dk (through o and the chunk's end state), dw = -dv_new S^T
  and the block's share of dG, the gradient of the chunk gates.
- `gdr_wy_backward_kernel`: through w = Ai (beta exp(G) k), u = Ai (beta v) and Ai = (I + A)^-1: adds its dk
  to the one above, dv, dbeta, and dg, the reverse chunk-local cumulative sum of all of dG.
"""
from __future__ import annotations

import triton.language as tl

import tle
from tle.kernels.gated_delta_rule_kernels import _chunk


@tle.jit
def gdr_dv_local_kernel(q_ptr, k_ptr, gc_ptr, do_ptr, dv_ptr, scale, index_ptr,
                        H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr,
                        BV: tl.constexpr, BT: tl.constexpr):
    """Program (chunk, value head, value block): dv_local = P^T do, built as (k q^T) masked to i >= j."""
    start, end = _chunk(index_ptr)
    hv = tl.program_id(1)
    cols = tl.program_id(2) * BV + tl.arange(0, BV)
    r = tl.arange(0, BT)
    t = start + r
    ok = t < end
    qk_base = (hv // (HV // H)) * K
    scores_t = tl.zeros([BT, BT], dtype=tl.float32)          # [j, i] = k_j . q_i
    for c0 in range(0, K, BK):
        kc = c0 + tl.arange(0, BK)
        qb = tl.load(q_ptr + qk_base + t[:, None] * (H * K) + kc[None, :], mask=ok[:, None], other=0.0)
        kb = tl.load(k_ptr + qk_base + t[:, None] * (H * K) + kc[None, :], mask=ok[:, None], other=0.0)
        scores_t = tl.dot(kb, tl.trans(qb), scores_t)
    g_j = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
    g_i = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
    causal = (r[None, :] >= r[:, None]) & ok[:, None] & ok[None, :]
    p_t = tl.where(causal, scores_t * tl.exp(g_i[None, :] - g_j[:, None]), 0.0) * scale
    do = tl.load(do_ptr + (t[:, None] * HV + hv) * V + cols[None, :], mask=ok[:, None], other=0.0)
    dv = tl.dot(p_t.to(do.dtype), do)
    tl.store(dv_ptr + (t[:, None] * HV + hv) * V + cols[None, :], dv.to(dv_ptr.dtype.element_ty), mask=ok[:, None])


@tle.jit
def gdr_state_backward_kernel(q_ptr, k_ptr, w_ptr, gc_ptr, do_ptr, dv_local_ptr, dht_ptr, dh_ptr, dv_new_ptr,
                              dh0_ptr, scale, cu_ptr, first_ptr, H: tl.constexpr, HV: tl.constexpr,
                              K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, BT: tl.constexpr,
                              FINAL_GRAD: tl.constexpr, OUTPUT_GRAD: tl.constexpr, SPLIT_Q: tl.constexpr,
                              READ_AHEAD: tl.constexpr = True):
    """Program (value block, sequence, value head): dS of its columns [K, BV] in fp32, from the final state's
    gradient (or 0) back over the sequence's chunks; dh [chunks, HV, K, V] gets dS at each chunk's end.
    Without OUTPUT_GRAD, do and dv_local are taken as zero and not read, and only the start's dS is written:
    from dS = I that walks the transposed transition dS -> M^T dS of the tokens (context parallelism).
    The product with q: from fp32 operands (TF32), or with SPLIT_Q from two 16-bit ones, q exp(G) scale split
    into its 16-bit rounding and the rest (a tensor-core product of half the operand bytes, and as precise);
    the product with w from w's dtype, as FLA takes it."""
    cols = tl.program_id(0) * BV + tl.arange(0, BV)
    n, hv = tl.program_id(1), tl.program_id(2)
    bos, eos = tl.load(cu_ptr + n), tl.load(cu_ptr + n + 1)
    first = tl.load(first_ptr + n)
    kr = tl.arange(0, K)
    state_at = (n * HV + hv) * K * V + kr[:, None] * V + cols[None, :]
    if FINAL_GRAD:
        dstate = tl.load(dht_ptr + state_at)
    else:
        dstate = tl.zeros([K, BV], dtype=tl.float32)
    qk_base = (hv // (HV // H)) * K
    chunks = (eos - bos + BT - 1) // BT
    for i in range(0, chunks):
        c = chunks - 1 - i
        if OUTPUT_GRAD:
            tl.store(dh_ptr + ((first + c) * HV + hv) * K * V + kr[:, None] * V + cols[None, :],
                     dstate.to(dh_ptr.dtype.element_ty))
        t = bos + c * BT + tl.arange(0, BT)
        ok = t < eos
        g_last = tl.load(gc_ptr + (tl.minimum(bos + c * BT + BT, eos) - 1) * HV + hv)
        g = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
        kb = tl.load(k_ptr + qk_base + t[:, None] * (H * K) + kr[None, :], mask=ok[:, None], other=0.0)
        # the decay from a token to the chunk's end scales the [BT, BV] product in fp32, not k; with READ_AHEAD
        # dv_local and do are read ahead (is_async): the walk pays a wait once per chunk
        kept = tl.dot(kb, dstate.to(kb.dtype)) * tl.where(ok, tl.exp(g_last - g), 0.0)[:, None]
        if OUTPUT_GRAD:
            dv_local = tle.load(dv_local_ptr + (t[:, None] * HV + hv) * V + cols[None, :], mask=ok[:, None],
                                other=0.0, is_async=READ_AHEAD)
            dv_new = dv_local.to(tl.float32) + kept
            tl.store(dv_new_ptr + (t[:, None] * HV + hv) * V + cols[None, :],
                     dv_new.to(dv_new_ptr.dtype.element_ty), mask=ok[:, None])
        else:
            dv_new = kept
        if OUTPUT_GRAD:
            qb = tl.load(q_ptr + qk_base + t[:, None] * (H * K) + kr[None, :], mask=ok[:, None], other=0.0)
            # dS sums this product over the chunks: rounded to q's dtype, q exp(G) scale leaves the initial
            # state's gradient four times further off than from fp32 operands (TF32)
            if SPLIT_Q:
                # the row factor goes through shared memory: read from the [BT] gate tile, TileLang would lay
                # the [BT, K] product out as that tile, each row on four threads, computed on a quarter of them
                row = tle.gpu.alloc([BT], tl.float32)
                tle.gpu.local_store(row, tl.where(ok, tl.exp(g), 0.0) * scale)
                qd = qb.to(tl.float32) * tle.gpu.local_load(row)[:, None]
                qd_high = qd.to(qb.dtype)
                qd_low = (qd - qd_high.to(tl.float32)).to(qb.dtype)
                do = tle.load(do_ptr + (t[:, None] * HV + hv) * V + cols[None, :], mask=ok[:, None], other=0.0,
                              is_async=READ_AHEAD)
                carried = tl.dot(tl.trans(qd_low), do, tl.dot(tl.trans(qd_high), do, dstate * tl.exp(g_last)))
            else:
                qd = qb.to(tl.float32) * (tl.where(ok, tl.exp(g), 0.0) * scale)[:, None]
                do = tle.load(do_ptr + (t[:, None] * HV + hv) * V + cols[None, :], mask=ok[:, None], other=0.0,
                              is_async=READ_AHEAD)
                carried = dstate * tl.exp(g_last) + tl.dot(tl.trans(qd), do.to(tl.float32))
        else:
            carried = dstate * tl.exp(g_last)
        w = tl.load(w_ptr + (t[:, None] * HV + hv) * K + kr[None, :], mask=ok[:, None], other=0.0)
        dstate = carried - tl.dot(tl.trans(w), dv_new.to(w.dtype))
    tl.store(dh0_ptr + state_at, dstate)


@tle.jit
def gdr_dqkwg_kernel(q_ptr, k_ptr, v_new_ptr, gc_ptr, do_ptr, dv_new_ptr, h_ptr, dh_ptr, dq_ptr, dk_ptr, dw_ptr,
                     dg_ptr, scale, index_ptr, tokens, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr,
                     V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BT: tl.constexpr):
    """Program (chunk, value head, block of K columns), with S the chunk's start state and dS the gradient at
    its end, D_ij = causal exp(G_i - G_j), dP = scale D (do v_new^T):
        dq = scale exp(G) (do S^T) + dP k,   dk = dP^T q + exp(G_last - G) (v_new dS^T),   dw = -dv_new S^T
        dG = sum(dq q) - sum(dk k), and the last token adds exp(G_last) sum(S dS) + sum(exp(G_last - G) k (v_new dS^T))
    dg [K / BK, tokens, HV] gets each block's share of dG (the WY backward adds them up)."""
    start, end = _chunk(index_ptr)
    hv = tl.program_id(1)
    kc = tl.program_id(2) * BK + tl.arange(0, BK)
    r = tl.arange(0, BT)
    t = start + r
    ok = t < end
    state_base = (tl.program_id(0) * HV + hv) * K * V
    dscores = tl.zeros([BT, BT], dtype=tl.float32)
    dq_state = tl.zeros([BT, BK], dtype=tl.float32)
    dk_state = tl.zeros([BT, BK], dtype=tl.float32)
    dw = tl.zeros([BT, BK], dtype=tl.float32)
    state_dstate = tl.zeros([BK, BV], dtype=tl.float32)     # summed to sum(S dS) below
    # no producer warps on TileLang: 1.81 against 2.35 ms at K = 128 on the H200 (one program an SM with them)
    for v0 in tl.range(0, V, BV, warp_specialize=False):
        vc = v0 + tl.arange(0, BV)
        rows = (t[:, None] * HV + hv) * V + vc[None, :]
        v_new = tl.load(v_new_ptr + rows, mask=ok[:, None], other=0.0)
        do = tl.load(do_ptr + rows, mask=ok[:, None], other=0.0).to(v_new.dtype)
        dv_new = tl.load(dv_new_ptr + rows, mask=ok[:, None], other=0.0)
        state = tl.load(h_ptr + state_base + kc[:, None] * V + vc[None, :])
        dstate = tl.load(dh_ptr + state_base + kc[:, None] * V + vc[None, :])
        dscores = tl.dot(do, tl.trans(v_new), dscores)
        dq_state = tl.dot(do, tl.trans(state).to(do.dtype), dq_state)
        dk_state = tl.dot(v_new, tl.trans(dstate).to(v_new.dtype), dk_state)
        dw = tl.dot(dv_new.to(state.dtype), tl.trans(state), dw)
        state_dstate += state.to(tl.float32) * dstate.to(tl.float32)
    g = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
    g_col = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
    last = tl.minimum(start + BT, end) - 1
    g_last = tl.load(gc_ptr + tl.maximum(last, 0) * HV + hv)
    causal = (r[:, None] >= r[None, :]) & ok[:, None] & ok[None, :]
    dscores = tl.where(causal, dscores * tl.exp(g[:, None] - g_col[None, :]), 0.0) * scale
    qk_base = (hv // (HV // H)) * K
    qb = tl.load(q_ptr + qk_base + t[:, None] * (H * K) + kc[None, :], mask=ok[:, None], other=0.0)
    kb = tl.load(k_ptr + qk_base + t[:, None] * (H * K) + kc[None, :], mask=ok[:, None], other=0.0)
    dq = dq_state * (tl.exp(g) * scale)[:, None] + tl.dot(dscores.to(kb.dtype), kb)
    dk_state = dk_state * tl.where(ok, tl.exp(g_last - g), 0.0)[:, None]
    dk = tl.dot(tl.trans(dscores).to(qb.dtype), qb) + dk_state
    dgate = tl.sum(dq * qb.to(tl.float32), 1) - tl.sum(dk * kb.to(tl.float32), 1)
    dgate_last = (tl.exp(g_last) * tl.sum(tl.sum(state_dstate, 1), 0)
                  + tl.sum(tl.sum(dk_state * kb.to(tl.float32), 1), 0))
    dgate = tl.where(t == last, dgate + dgate_last, dgate)
    at = (t[:, None] * HV + hv) * K + kc[None, :]
    tl.store(dq_ptr + at, dq.to(dq_ptr.dtype.element_ty), mask=ok[:, None])
    tl.store(dk_ptr + at, dk.to(dk_ptr.dtype.element_ty), mask=ok[:, None])
    tl.store(dw_ptr + at, (-dw).to(dw_ptr.dtype.element_ty), mask=ok[:, None])
    tl.store(dg_ptr + tl.program_id(2) * tokens * HV + t * HV + hv, dgate, mask=ok)


@tle.jit
def gdr_wy_backward_kernel(k_ptr, v_ptr, beta_ptr, gc_ptr, ai_ptr, dw_ptr, du_ptr, dk_in_ptr, dg_in_ptr,
                           dk_ptr, dv_ptr, dbeta_ptr, dg_ptr, index_ptr, tokens, H: tl.constexpr,
                           HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                           BT: tl.constexpr, NK: tl.constexpr):
    """Program (chunk, value head), with ks = beta exp(G) k, vs = beta v, dks = Ai^T dw, dvs = Ai^T du:
        dAi = dw ks^T + du vs^T,   dA = strict lower (-Ai^T dAi Ai^T),   dkk = beta_i exp(G_i - G_j) dA
        dk = dk_in + beta exp(G) dks + dkk k + dkk^T k,   dv = beta dvs
        dbeta = sum(dks exp(G) k) + sum(dvs v) + sum_j dA exp(G_i - G_j) k_i.k_j
        dG = dG_in + sum(dks ks) + sum_j dkk_ij k_i.k_j - sum_i dkk_ij k_i.k_j;   dg = its reverse chunk cumsum."""
    start, end = _chunk(index_ptr)
    hv = tl.program_id(1)
    r = tl.arange(0, BT)
    t = start + r
    ok = t < end
    ai = tl.load(ai_ptr + (t[:, None] * HV + hv) * BT + r[None, :], mask=ok[:, None], other=0.0)
    beta = tl.load(beta_ptr + t * HV + hv, mask=ok, other=0.0).to(tl.float32)
    g = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
    g_col = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
    gate = tl.where(ok, tl.exp(g), 0.0)
    k_base = k_ptr + (hv // (HV // H)) * K
    dai = tl.zeros([BT, BT], dtype=tl.float32)
    kk = tl.zeros([BT, BT], dtype=tl.float32)
    dbeta = tl.zeros([BT], dtype=tl.float32)
    dgate = tl.zeros([BT], dtype=tl.float32)
    for c0 in range(0, K, BK):
        cols = c0 + tl.arange(0, BK)
        kb = tl.load(k_base + t[:, None] * (H * K) + cols[None, :], mask=ok[:, None], other=0.0)
        dwb = tl.load(dw_ptr + (t[:, None] * HV + hv) * K + cols[None, :], mask=ok[:, None], other=0.0)
        ks = kb.to(tl.float32) * (beta * gate)[:, None]
        dks = tl.dot(tl.trans(ai), dwb.to(ai.dtype))
        dai = tl.dot(dwb.to(kb.dtype), tl.trans(ks.to(kb.dtype)), dai)
        # with more than one pipeline stage, Triton 3.6 runs this product async straight from its copy ring and
        # refills the ring before it waits (dbeta and dg then 3-10x FLA's error): its launch takes one stage
        kk = tl.dot(kb, tl.trans(kb), kk)
        dbeta += tl.sum(dks * kb.to(tl.float32) * gate[:, None], 1)
        dgate += tl.sum(dks * ks, 1)
    for c0 in range(0, V, BV):
        cols = c0 + tl.arange(0, BV)
        rows = (t[:, None] * HV + hv) * V + cols[None, :]
        vb = tl.load(v_ptr + rows, mask=ok[:, None], other=0.0)
        dub = tl.load(du_ptr + rows, mask=ok[:, None], other=0.0)
        dvs = tl.dot(tl.trans(ai), dub.to(ai.dtype))
        dai = tl.dot(dub.to(vb.dtype), tl.trans((vb.to(tl.float32) * beta[:, None]).to(vb.dtype)), dai)
        dbeta += tl.sum(dvs * vb.to(tl.float32), 1)
        tl.store(dv_ptr + rows, (dvs * beta[:, None]).to(dv_ptr.dtype.element_ty), mask=ok[:, None])
    # d(M^-1) = -M^-1 dM M^-1, and only A's strict lower part is a variable
    da = -tl.dot(tl.dot(tl.trans(ai), dai.to(ai.dtype)).to(ai.dtype), tl.trans(ai))
    strict = (r[:, None] > r[None, :]) & ok[:, None] & ok[None, :]
    da = tl.where(strict, da * tl.exp(g[:, None] - g_col[None, :]), 0.0)
    dbeta += tl.sum(da * kk, 1)
    dkk = da * beta[:, None]
    # G_i enters A_ij with a plus sign and A_ji with a minus: the row sums minus the column sums of one tile
    # (two separately rounded tiles would leave their rounding in the small difference)
    dkk_kk = dkk * kk
    dgate += tl.sum(dkk_kk, 1) - tl.sum(dkk_kk, 0)
    for c0 in range(0, K, BK):
        cols = c0 + tl.arange(0, BK)
        at = (t[:, None] * HV + hv) * K + cols[None, :]
        kb = tl.load(k_base + t[:, None] * (H * K) + cols[None, :], mask=ok[:, None], other=0.0)
        dwb = tl.load(dw_ptr + at, mask=ok[:, None], other=0.0)
        dk = tl.load(dk_in_ptr + at, mask=ok[:, None], other=0.0).to(tl.float32)
        dk += tl.dot(tl.trans(ai), dwb.to(ai.dtype)) * (beta * gate)[:, None]
        dk += tl.dot(dkk.to(kb.dtype), kb) + tl.dot(tl.trans(dkk).to(kb.dtype), kb)
        tl.store(dk_ptr + at, dk.to(dk_ptr.dtype.element_ty), mask=ok[:, None])
    for p in range(0, NK):
        dgate += tl.load(dg_in_ptr + p * tokens * HV + t * HV + hv, mask=ok, other=0.0)
    # G is the chunk-local cumulative sum of g: g's gradient is dG summed from each token to the chunk's end
    dg = tl.cumsum(dgate, 0, reverse=True)
    tl.store(dbeta_ptr + t * HV + hv, dbeta.to(dbeta_ptr.dtype.element_ty), mask=ok)
    tl.store(dg_ptr + t * HV + hv, dg.to(dg_ptr.dtype.element_ty), mask=ok)
