"""The gated delta rule's kernels, each one text lowered to Triton and to TileLang.

Tokens are addressed flat: the batch [B, T] is read as one packed batch of sequences, sequence n spanning
tokens cu_seqlens[n] .. cu_seqlens[n + 1] (a fixed-length batch is B sequences of T tokens). Chunks of BT = 64
tokens start at each sequence's first token; `chunk_index` lists them as (first token, end) ranges, and the
entries past the batch's last chunk hold the empty range (0, 0): their programs write nothing. q, k [tokens, H, K];
v [tokens, HV, V]; g, beta [tokens, HV]; value head hv reads q/k head hv // (HV // H).

Forward, per chunk and value head, with G the chunk-local cumulative sum of g and S the state at the
chunk's start:
- `gdr_chunk_index_kernel`: cu_seqlens -> the chunks' token ranges and each sequence's first chunk.
- `gdr_kkt_kernel`: G; A = strict lower (beta_i exp(G_i - G_j) k_i.k_j), fp32.
- `gdr_solve_kernel`: Ai = (I + A)^-1, by forward substitution on A's four 16 x 16 diagonal blocks and their
  block merge (products in TF32, as Triton's default and TileLang's T.gemm compute fp32 operands).
- `gdr_wy_kernel`: w = Ai (beta exp(G) k), u = Ai (beta v).
- `gdr_state_kernel`: walks a sequence's chunks: stores S, v_new = u - w S, then
  S <- exp(G_last) S + k^T (exp(G_last - G) v_new); the final state at the end.
- `gdr_output_kernel`: o = scale (exp(G) q S + (causal exp(G_i - G_j) q k^T) v_new).
- `gdr_state_output_kernel`: the walk and the output in one pass (the forward's); the backward and context
  parallelism use the two above, which keep the chunk states and v_new.
- `gdr_scores_kernel`: causal exp(G_i - G_j) q k^T of each chunk, for the walk with the output to read rather
  than compute on its chain of chunks.
- `gdr_recurrent_kernel`: the recurrence token by token (decoding).
"""
from __future__ import annotations

import triton.language as tl

import tle

BT = 64       # tokens per chunk
BC = 16       # rows of the diagonal blocks the intra-chunk solve inverts one by one


@tle.jit
def gdr_chunk_index_kernel(cu_ptr, index_ptr, first_ptr, n_seqs, slots, BT: tl.constexpr, BLOCK: tl.constexpr):
    """Program n: sequence n's first chunk (the chunks of the sequences before it) and its chunks' token ranges;
    the last program also gives the list's `slots` past the last chunk the empty range (0, 0)."""
    n = tl.program_id(0)
    first = tl.full([], 0, dtype=tl.int32)
    for s0 in range(0, n_seqs, BLOCK):
        seqs = s0 + tl.arange(0, BLOCK)
        ok = seqs < n
        length = tl.load(cu_ptr + seqs + 1, mask=ok, other=0) - tl.load(cu_ptr + seqs, mask=ok, other=0)
        first += tl.sum(tl.where(ok, (length + BT - 1) // BT, 0), 0)
    bos, eos = tl.load(cu_ptr + n), tl.load(cu_ptr + n + 1)
    chunks = (eos - bos + BT - 1) // BT
    tl.store(first_ptr + n, first)
    for c0 in range(0, chunks, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        ok = c < chunks
        tl.store(index_ptr + 2 * (first + c), bos + c * BT, mask=ok)
        tl.store(index_ptr + 2 * (first + c) + 1, tl.minimum(bos + c * BT + BT, eos), mask=ok)
    if n == n_seqs - 1:
        tl.store(first_ptr + n + 1, first + chunks)          # the batch's chunk count
        for e0 in range(first + chunks, slots, BLOCK):
            e = e0 + tl.arange(0, BLOCK)
            tl.store(index_ptr + 2 * e, tl.zeros([BLOCK], dtype=tl.int32), mask=e < slots)
            tl.store(index_ptr + 2 * e + 1, tl.zeros([BLOCK], dtype=tl.int32), mask=e < slots)


@tle.jit
def _chunk(index_ptr):
    """(first token, end) of the chunk at program_id(0), read as they are stored: TileLang proves its masks
    (token < end) per vector of a parallel loop, quickly for two loaded values, slowly (minutes) for the
    min and select that would compute them here from cu_seqlens."""
    entry = tl.program_id(0)
    return tl.load(index_ptr + 2 * entry), tl.load(index_ptr + 2 * entry + 1)


@tle.jit
def _unit_lower_inverse(a, BC: tl.constexpr):
    """(I + a)^-1 for a strictly lower [BC, BC] tile. Its strict lower part L solves L_i = -a_i - sum_j a_ij L_j,
    row after row; L starts as -a, so row i of L is still -a_i when its turn comes. The row's update is a
    product of the tile with that row alone (the other rows masked out): TileLang lays a product's operands
    out itself, where a row vector broadcast along the other axis would need a second layout."""
    rows = tl.arange(0, BC)
    inv = -a
    for i in range(2, BC):
        row_i = tl.where(rows[:, None] == i, inv, 0.0)
        inv = tl.where(rows[:, None] == i, inv + tl.dot(row_i, inv), inv)
    return inv + (rows[:, None] == rows[None, :]).to(tl.float32)


@tle.jit
def gdr_kkt_kernel(k_ptr, g_ptr, beta_ptr, gc_ptr, a_ptr, index_ptr,
                   H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr):
    """Program (chunk, value head): G, the chunk's cumulative gate, and A = strict lower
    (beta_i exp(G_i - G_j) k_i.k_j) in fp32, [tokens, HV, BT]."""
    start, end = _chunk(index_ptr)
    hv = tl.program_id(1)
    r = tl.arange(0, BT)
    t = start + r
    ok = t < end
    # G indexes both the rows and the columns of A: two copies, one for each (TileLang lays out a tile read
    # along both axes of one expression twice, which it cannot)
    g_rows = tl.cumsum(tl.load(g_ptr + t * HV + hv, mask=ok, other=0.0).to(tl.float32), 0)
    g_cols = tl.cumsum(tl.load(g_ptr + t * HV + hv, mask=ok, other=0.0).to(tl.float32), 0)
    tl.store(gc_ptr + t * HV + hv, g_rows, mask=ok)
    k_base = k_ptr + (hv // (HV // H)) * K
    a = tl.zeros([BT, BT], dtype=tl.float32)
    for c0 in range(0, K, BK):
        cols = c0 + tl.arange(0, BK)
        kb = tl.load(k_base + t[:, None] * (H * K) + cols[None, :], mask=ok[:, None], other=0.0)
        a = tl.dot(kb, tl.trans(kb), a)
    beta = tl.load(beta_ptr + t * HV + hv, mask=ok, other=0.0).to(tl.float32)
    keep = (r[:, None] > r[None, :]) & ok[:, None]
    a = tl.where(keep, a * tl.exp(g_rows[:, None] - g_cols[None, :]), 0.0) * beta[:, None]
    tl.store(a_ptr + (t[:, None] * HV + hv) * BT + r[None, :], a, mask=ok[:, None])


@tle.jit
def _load_block(a_ptr, rows, ok, col0, hv, HV: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    return tl.load(a_ptr + (rows[:, None] * HV + hv) * BT + col0 + tl.arange(0, BC)[None, :], mask=ok[:, None],
                   other=0.0)


@tle.jit
def _store_block_row(ai_ptr, rows, ok, hv, x0, x1, x2, x3, HV: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    """One block row of Ai: its four [BC, BC] blocks side by side."""
    base = ai_ptr + (rows[:, None] * HV + hv) * BT + tl.arange(0, BC)[None, :]
    tl.store(base, x0.to(ai_ptr.dtype.element_ty), mask=ok[:, None])
    tl.store(base + BC, x1.to(ai_ptr.dtype.element_ty), mask=ok[:, None])
    tl.store(base + 2 * BC, x2.to(ai_ptr.dtype.element_ty), mask=ok[:, None])
    tl.store(base + 3 * BC, x3.to(ai_ptr.dtype.element_ty), mask=ok[:, None])


@tle.jit
def gdr_solve_kernel(a_ptr, ai_ptr, index_ptr, HV: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    """Program (chunk, value head): Ai = (I + A)^-1 from A's ten [BC, BC] blocks on or below the diagonal:
    the diagonal blocks' inverses X_ii, then block row i's X_ij = -X_ii sum_{j <= m < i} A_im X_mj."""
    start, end = _chunk(index_ptr)
    hv = tl.program_id(1)
    r = tl.arange(0, BC)
    t0, t1, t2, t3 = start + r, start + BC + r, start + 2 * BC + r, start + 3 * BC + r
    ok0, ok1, ok2, ok3 = t0 < end, t1 < end, t2 < end, t3 < end
    x00 = _unit_lower_inverse(_load_block(a_ptr, t0, ok0, 0, hv, HV, BT, BC), BC)
    x11 = _unit_lower_inverse(_load_block(a_ptr, t1, ok1, BC, hv, HV, BT, BC), BC)
    x22 = _unit_lower_inverse(_load_block(a_ptr, t2, ok2, 2 * BC, hv, HV, BT, BC), BC)
    x33 = _unit_lower_inverse(_load_block(a_ptr, t3, ok3, 3 * BC, hv, HV, BT, BC), BC)
    a10 = _load_block(a_ptr, t1, ok1, 0, hv, HV, BT, BC)
    a20 = _load_block(a_ptr, t2, ok2, 0, hv, HV, BT, BC)
    a21 = _load_block(a_ptr, t2, ok2, BC, hv, HV, BT, BC)
    a30 = _load_block(a_ptr, t3, ok3, 0, hv, HV, BT, BC)
    a31 = _load_block(a_ptr, t3, ok3, BC, hv, HV, BT, BC)
    a32 = _load_block(a_ptr, t3, ok3, 2 * BC, hv, HV, BT, BC)
    x10 = -tl.dot(x11, tl.dot(a10, x00))
    x21 = -tl.dot(x22, tl.dot(a21, x11))
    x32 = -tl.dot(x33, tl.dot(a32, x22))
    x20 = -tl.dot(x22, tl.dot(a20, x00) + tl.dot(a21, x10))
    x31 = -tl.dot(x33, tl.dot(a31, x11) + tl.dot(a32, x21))
    x30 = -tl.dot(x33, tl.dot(a30, x00) + tl.dot(a31, x10) + tl.dot(a32, x20))
    # the blocks above the diagonal are zero
    zero = tl.zeros([BC, BC], dtype=tl.float32)
    _store_block_row(ai_ptr, t0, ok0, hv, x00, zero, zero, zero, HV, BT, BC)
    _store_block_row(ai_ptr, t1, ok1, hv, x10, x11, zero, zero, HV, BT, BC)
    _store_block_row(ai_ptr, t2, ok2, hv, x20, x21, x22, zero, HV, BT, BC)
    _store_block_row(ai_ptr, t3, ok3, hv, x30, x31, x32, x33, HV, BT, BC)


@tle.jit
def gdr_wy_kernel(k_ptr, v_ptr, beta_ptr, gc_ptr, ai_ptr, w_ptr, u_ptr, index_ptr,
                  H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr,
                  BV: tl.constexpr, BT: tl.constexpr):
    start, end = _chunk(index_ptr)
    hv = tl.program_id(1)
    t = start + tl.arange(0, BT)
    ok = t < end
    ai = tl.load(ai_ptr + (t[:, None] * HV + hv) * BT + tl.arange(0, BT)[None, :], mask=ok[:, None], other=0.0)
    beta = tl.load(beta_ptr + t * HV + hv, mask=ok, other=0.0).to(tl.float32)
    decay = tl.exp(tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0))
    k_base = k_ptr + (hv // (HV // H)) * K
    for c0 in range(0, K, BK):
        cols = c0 + tl.arange(0, BK)
        kb = tl.load(k_base + t[:, None] * (H * K) + cols[None, :], mask=ok[:, None], other=0.0)
        w = tl.dot(ai, (kb * (beta * decay)[:, None]).to(kb.dtype))
        tl.store(w_ptr + (t[:, None] * HV + hv) * K + cols[None, :], w.to(w_ptr.dtype.element_ty), mask=ok[:, None])
    for c0 in range(0, V, BV):
        cols = c0 + tl.arange(0, BV)
        vb = tl.load(v_ptr + (t[:, None] * HV + hv) * V + cols[None, :], mask=ok[:, None], other=0.0)
        u = tl.dot(ai, (vb * beta[:, None]).to(vb.dtype))
        tl.store(u_ptr + (t[:, None] * HV + hv) * V + cols[None, :], u.to(u_ptr.dtype.element_ty), mask=ok[:, None])


@tle.jit
def gdr_state_kernel(k_ptr, w_ptr, u_ptr, gc_ptr, h0_ptr, h_ptr, v_new_ptr, ht_ptr, cu_ptr, first_ptr,
                     H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
                     BT: tl.constexpr, INITIAL: tl.constexpr, UPDATES: tl.constexpr, READ_AHEAD: tl.constexpr = True):
    """Program (value block, sequence, value head): the state of its columns, carried over the sequence's
    chunks in fp32; h [chunks, HV, K, V] gets the state at each chunk's start. Without UPDATES, u is taken as
    zero and not read, and only the end state is written: from S = I that walks the transition S -> M S of the
    tokens (context parallelism)."""
    cols = tl.program_id(0) * BV + tl.arange(0, BV)
    n, hv = tl.program_id(1), tl.program_id(2)
    bos, eos = tl.load(cu_ptr + n), tl.load(cu_ptr + n + 1)
    first = tl.load(first_ptr + n)
    kr = tl.arange(0, K)
    state_at = (n * HV + hv) * K * V + kr[:, None] * V + cols[None, :]
    if INITIAL:
        state = tl.load(h0_ptr + state_at)
    else:
        state = tl.zeros([K, BV], dtype=tl.float32)
    k_base = k_ptr + (hv // (HV // H)) * K
    for c in range(0, (eos - bos + BT - 1) // BT):
        if UPDATES:
            tl.store(h_ptr + ((first + c) * HV + hv) * K * V + kr[:, None] * V + cols[None, :],
                     state.to(h_ptr.dtype.element_ty))
        t = bos + c * BT + tl.arange(0, BT)
        ok = t < eos
        # the walk is one chain of chunks: what it waits for at a chunk it pays once per chunk. With READ_AHEAD u
        # is read ahead (is_async); g and g_last are asked for first, their registers awaited only by the decay,
        # after the chunk's first product
        g_last = tl.load(gc_ptr + (tl.minimum(bos + c * BT + BT, eos) - 1) * HV + hv)
        g = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
        w = tl.load(w_ptr + (t[:, None] * HV + hv) * K + kr[None, :], mask=ok[:, None], other=0.0)
        if UPDATES:
            u = tle.load(u_ptr + (t[:, None] * HV + hv) * V + cols[None, :], mask=ok[:, None], other=0.0,
                         is_async=READ_AHEAD)
            v_new = u.to(tl.float32) - tl.dot(w, state.to(w.dtype))
            tl.store(v_new_ptr + (t[:, None] * HV + hv) * V + cols[None, :], v_new.to(v_new_ptr.dtype.element_ty),
                     mask=ok[:, None])
        else:
            v_new = -tl.dot(w, state.to(w.dtype))
        kb = tl.load(k_base + t[:, None] * (H * K) + kr[None, :], mask=ok[:, None], other=0.0)
        # the decay to the chunk's end scales the [BT, BV] updates in fp32, not k: one rounding fewer
        kept = (v_new * tl.where(ok, tl.exp(g_last - g), 0.0)[:, None]).to(kb.dtype)
        state = state * tl.exp(g_last) + tl.dot(tl.trans(kb), kept)
    tl.store(ht_ptr + state_at, state)


@tle.jit
def gdr_state_output_kernel(q_ptr, k_ptr, w_ptr, u_ptr, gc_ptr, scores_ptr, h0_ptr, o_ptr, ht_ptr, cu_ptr, scale,
                            H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
                            BT: tl.constexpr, INITIAL: tl.constexpr, SCORES_GIVEN: tl.constexpr,
                            READ_AHEAD: tl.constexpr = True):
    """The state walk and the output in one pass, program (value block, sequence, value head): at each chunk
    v_new = u - w S, o = scale (exp(G) q S + (causal exp(G_i - G_j) q k^T) v_new), then
    S <- exp(G_last) S + k^T (exp(G_last - G) v_new). Neither the chunk states nor v_new leave the program:
    the forward writes only o and the final states (the backward recomputes both). With SCORES_GIVEN the
    causal scores are read from scores_ptr [tokens, HV, BT] (gdr_scores_kernel), off the chain of chunks;
    otherwise they are computed here and scores_ptr is not read."""
    cols = tl.program_id(0) * BV + tl.arange(0, BV)
    n, hv = tl.program_id(1), tl.program_id(2)
    bos, eos = tl.load(cu_ptr + n), tl.load(cu_ptr + n + 1)
    kr = tl.arange(0, K)
    r = tl.arange(0, BT)
    state_at = (n * HV + hv) * K * V + kr[:, None] * V + cols[None, :]
    if INITIAL:
        state = tl.load(h0_ptr + state_at)
    else:
        state = tl.zeros([K, BV], dtype=tl.float32)
    qk_base = (hv // (HV // H)) * K
    for c in range(0, (eos - bos + BT - 1) // BT):
        t = bos + c * BT + r
        ok = t < eos
        g_last = tl.load(gc_ptr + (tl.minimum(bos + c * BT + BT, eos) - 1) * HV + hv)
        g = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
        g_col = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
        w = tl.load(w_ptr + (t[:, None] * HV + hv) * K + kr[None, :], mask=ok[:, None], other=0.0)
        u = tle.load(u_ptr + (t[:, None] * HV + hv) * V + cols[None, :], mask=ok[:, None], other=0.0,
                     is_async=READ_AHEAD)
        qb = tl.load(q_ptr + qk_base + t[:, None] * (H * K) + kr[None, :], mask=ok[:, None], other=0.0)
        kb = tl.load(k_ptr + qk_base + t[:, None] * (H * K) + kr[None, :], mask=ok[:, None], other=0.0)
        # the state in k's dtype serves the chain's product and the output's, as the chunk states stored in
        # k's dtype serve the output kernel
        low = state.to(w.dtype)
        v_new = u.to(tl.float32) - tl.dot(w, low)
        if SCORES_GIVEN:
            scores = tl.load(scores_ptr + (t[:, None] * HV + hv) * BT + r[None, :], mask=ok[:, None], other=0.0)
        else:
            scores = tl.dot(qb, tl.trans(kb))
            causal = (r[:, None] >= r[None, :]) & ok[:, None] & ok[None, :]
            scores = tl.where(causal, scores * tl.exp(g[:, None] - g_col[None, :]), 0.0).to(w.dtype)
        o = (tl.dot(qb, low) * tl.exp(g)[:, None] + tl.dot(scores, v_new.to(w.dtype))) * scale
        tl.store(o_ptr + (t[:, None] * HV + hv) * V + cols[None, :], o.to(o_ptr.dtype.element_ty), mask=ok[:, None])
        kept = (v_new * tl.where(ok, tl.exp(g_last - g), 0.0)[:, None]).to(kb.dtype)
        state = state * tl.exp(g_last) + tl.dot(tl.trans(kb), kept)
    tl.store(ht_ptr + state_at, state)


@tle.jit
def gdr_scores_kernel(q_ptr, k_ptr, gc_ptr, scores_ptr, index_ptr, H: tl.constexpr, HV: tl.constexpr,
                      K: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr):
    """Program (chunk, value head): the chunk's causal scores exp(G_i - G_j) q_i.k_j (j <= i), [BT, BT] rounded
    to the scores' dtype as the output's product takes them, into scores [tokens, HV, BT]."""
    start, end = _chunk(index_ptr)
    hv = tl.program_id(1)
    r = tl.arange(0, BT)
    t = start + r
    ok = t < end
    qk_base = (hv // (HV // H)) * K
    scores = tl.zeros([BT, BT], dtype=tl.float32)
    for c0 in range(0, K, BK):
        kc = c0 + tl.arange(0, BK)
        qb = tl.load(q_ptr + qk_base + t[:, None] * (H * K) + kc[None, :], mask=ok[:, None], other=0.0)
        kb = tl.load(k_ptr + qk_base + t[:, None] * (H * K) + kc[None, :], mask=ok[:, None], other=0.0)
        scores = tl.dot(qb, tl.trans(kb), scores)
    g = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
    g_col = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
    causal = (r[:, None] >= r[None, :]) & ok[:, None] & ok[None, :]
    scores = tl.where(causal, scores * tl.exp(g[:, None] - g_col[None, :]), 0.0)
    tl.store(scores_ptr + (t[:, None] * HV + hv) * BT + r[None, :], scores.to(scores_ptr.dtype.element_ty),
             mask=ok[:, None])


@tle.jit
def gdr_output_kernel(q_ptr, k_ptr, v_new_ptr, h_ptr, gc_ptr, o_ptr, scale, index_ptr,
                      H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr,
                      BV: tl.constexpr, BT: tl.constexpr):
    """Program (chunk, value head, value block): o = scale (exp(G) q S + (causal exp(G_i - G_j) q k^T) v_new)."""
    start, end = _chunk(index_ptr)
    hv = tl.program_id(1)
    cols = tl.program_id(2) * BV + tl.arange(0, BV)
    r = tl.arange(0, BT)
    t = start + r
    ok = t < end
    qk_base = (hv // (HV // H)) * K
    h_base = h_ptr + (tl.program_id(0) * HV + hv) * K * V
    inter = tl.zeros([BT, BV], dtype=tl.float32)
    scores = tl.zeros([BT, BT], dtype=tl.float32)
    # no producer warps: TileLang's split gives each program 256 threads of 140 registers, one program an SM,
    # for a loop of K / BK steps (0.70 against 1.06 ms at K = 128 on the H200)
    for c0 in tl.range(0, K, BK, warp_specialize=False):
        kc = c0 + tl.arange(0, BK)
        qb = tl.load(q_ptr + qk_base + t[:, None] * (H * K) + kc[None, :], mask=ok[:, None], other=0.0)
        kb = tl.load(k_ptr + qk_base + t[:, None] * (H * K) + kc[None, :], mask=ok[:, None], other=0.0)
        hb = tl.load(h_base + kc[:, None] * V + cols[None, :])
        # the product with the state last: TileLang frees the step's stage after its product with h, the one
        # TMA copy among them, so both products must have read q and k by then (stage_reuse.py)
        scores = tl.dot(qb, tl.trans(kb), scores)
        inter = tl.dot(qb, hb.to(qb.dtype), inter)
    g = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
    g_col = tl.load(gc_ptr + t * HV + hv, mask=ok, other=0.0)
    causal = (r[:, None] >= r[None, :]) & ok[:, None] & ok[None, :]
    scores = tl.where(causal, scores * tl.exp(g[:, None] - g_col[None, :]), 0.0)
    v_new = tl.load(v_new_ptr + (t[:, None] * HV + hv) * V + cols[None, :], mask=ok[:, None], other=0.0)
    o = (inter * tl.exp(g)[:, None] + tl.dot(scores.to(v_new.dtype), v_new)) * scale
    tl.store(o_ptr + (t[:, None] * HV + hv) * V + cols[None, :], o.to(o_ptr.dtype.element_ty), mask=ok[:, None])


@tle.jit
def gdr_recurrent_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, h0_ptr, o_ptr, ht_ptr, cu_ptr, scale,
                         H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
                         INITIAL: tl.constexpr, L2NORM: tl.constexpr):
    """Program (value block, sequence, value head): the state's columns [K, BV] in fp32, token after token:
    S <- exp(g) S, then S += k (beta (v - S^T k))^T and o = scale S^T q."""
    cols = tl.program_id(0) * BV + tl.arange(0, BV)
    n, hv = tl.program_id(1), tl.program_id(2)
    bos, eos = tl.load(cu_ptr + n), tl.load(cu_ptr + n + 1)
    kr = tl.arange(0, K)
    state_at = (n * HV + hv) * K * V + kr[:, None] * V + cols[None, :]
    if INITIAL:
        state = tl.load(h0_ptr + state_at)
    else:
        state = tl.zeros([K, BV], dtype=tl.float32)
    qk_base = (hv // (HV // H)) * K
    for t in range(bos, eos):
        q = tl.load(q_ptr + qk_base + t * (H * K) + kr).to(tl.float32)
        k = tl.load(k_ptr + qk_base + t * (H * K) + kr).to(tl.float32)
        if L2NORM:
            q = q * tl.rsqrt(tl.sum(q * q, 0) + 1e-6)
            k = k * tl.rsqrt(tl.sum(k * k, 0) + 1e-6)
        v = tl.load(v_ptr + (t * HV + hv) * V + cols).to(tl.float32)
        state = state * tl.exp(tl.load(g_ptr + t * HV + hv).to(tl.float32))
        delta = (v - tl.sum(state * k[:, None], 0)) * tl.load(beta_ptr + t * HV + hv).to(tl.float32)
        state = state + k[:, None] * delta[None, :]
        o = tl.sum(state * q[:, None], 0) * scale
        tl.store(o_ptr + (t * HV + hv) * V + cols, o.to(o_ptr.dtype.element_ty))
    tl.store(ht_ptr + state_at, state)
