"""The gated delta rule (Gated DeltaNet's recurrent attention) in plain torch: the token-by-token recurrence,
and the chunked (WY) forward and backward that the GPU kernels follow step for step.

Layout (flash-linear-attention's `chunk_gated_delta_rule`):
- q, k [B, T, H, K]; v [B, T, HV, V]; g (the decay, in log space) and beta [B, T, HV]. HV is a multiple of H and
  value head hv reads q/k head hv // (HV // H).
- States [N, HV, K, V]: N = B, or with `cu_seqlens` (an int tensor [N + 1] of cumulative lengths, B = 1) the N
  packed sequences, each with its own state; a sequence may be empty.
- Per sequence and value head, from S = initial_state (or 0):
      S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - exp(g_t) S_{t-1}^T k_t)^T,    o_t = scale S_t^T q_t
  scale defaults to K ** -0.5. use_qk_l2norm_in_kernel: q and k are first scaled by rsqrt(sum(x^2) + 1e-6).
- o [B, T, HV, V] in q's dtype; states in fp32 (fp64 when the inputs are fp64, as is all arithmetic here).

Chunked form. Chunks of C tokens start at each sequence's first token (the last may be partial). In a chunk,
with G the chunk-local cumulative sum of g, S0 the state at the chunk's start, and rows i, j its tokens:
    A_ij = beta_i exp(G_i - G_j) k_i.k_j  (i > j, else 0),      T = (I + A)^-1
    w = T (beta exp(G) k),   u = T (beta v),   v_new = u - w S0
    o_i = scale (exp(G_i) q_i^T S0 + sum_{j <= i} exp(G_i - G_j) (q_i.k_j) v_new_j)
    S_end = exp(G_last) S0 + sum_i exp(G_last - G_i) k_i v_new_i^T
v_new_i is the update e_i = beta_i (v_i - exp(g_i) S_{i-1}^T k_i) of the recurrence (S_i = exp(g_i) S_{i-1} +
k_i e_i^T): unrolling S_{i-1} inside the chunk makes (I + A) e = beta v - beta exp(G) k S0, a unit lower
triangular system.

Backward (`chunked_backward`), per chunk, dS the gradient of the state at the chunk's end:
    recompute T, w, u, S0 and v_new;  dv_new = P^T do  (P = scale causal exp(G_i - G_j) q k^T)
    in reverse over chunks: dv_new += exp(G_last - G) k dS;  dS <- exp(G_last) dS + scale (exp(G) q)^T do - w^T dv_new
    dq, dk, dw = -dv_new S0^T and dG through o and S_end;  dk, dv, dbeta, dG through w, u, T and A
    dg = the chunk-local reverse cumsum of dG

Inside this module a sequence's chunks are laid out [b, HV, chunks, C, ...], the tail of the last chunk padded
with zeros (q, k, v, beta) and with the last token's G, so that a padded token changes nothing. q and k are
first repeated onto the value heads, and their gradients summed back over the heads that share them.
"""
from __future__ import annotations

import torch

CHUNK = 64
L2NORM_EPS = 1e-6


# -- shared helpers -----------------------------------------------------------------------------------------
def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """fp64 for fp64 inputs (the test oracle), fp32 for everything else."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """x * rsqrt(sum(x^2) + 1e-6) over the last axis: the eps sits under the root, as in the kernels."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


def repeat_heads(x: torch.Tensor, value_heads: int) -> torch.Tensor:
    """q or k [B, T, H, K] -> [B, T, HV, K]: value head hv gets head hv // (HV // H)."""
    return x.repeat_interleave(value_heads // x.shape[2], dim=2)


def sum_heads(dx: torch.Tensor, heads: int) -> torch.Tensor:
    """The gradient of repeat_heads: [B, T, HV, K] -> [B, T, H, K], summing each group of value heads."""
    b, t, hv, d = dx.shape
    return dx.view(b, t, heads, hv // heads, d).sum(3)


def segments(batch: int, length: int, cu_seqlens: torch.Tensor | None) -> list[tuple[slice, slice, slice]]:
    """(batch rows, tokens, state rows) of each run of sequences sharing one length: the whole batch at once,
    or each packed sequence of cu_seqlens alone."""
    if cu_seqlens is None:
        return [(slice(0, batch), slice(0, length), slice(0, batch))]
    if batch != 1:
        raise ValueError(f"with cu_seqlens the batch must be 1, got {batch}")
    bounds = cu_seqlens.tolist()
    return [(slice(0, 1), slice(bounds[n], bounds[n + 1]), slice(n, n + 1)) for n in range(len(bounds) - 1)]


def state_count(batch: int, cu_seqlens: torch.Tensor | None) -> int:
    return batch if cu_seqlens is None else len(cu_seqlens) - 1


def causal_decay(G: torch.Tensor, strict: bool = False) -> torch.Tensor:
    """D_ij = exp(G_i - G_j) for j <= i (j < i if strict), else 0; [..., C] -> [..., C, C]. The exponent is
    masked before exp: above the diagonal G_i - G_j >= 0 and could overflow, and inf * 0 is nan."""
    c = G.shape[-1]
    keep = torch.ones(c, c, dtype=torch.bool, device=G.device).tril(-1 if strict else 0)
    diff = G[..., :, None] - G[..., None, :]
    return diff.masked_fill(~keep, float("-inf")).exp()


def decay_to_end(G: torch.Tensor) -> torch.Tensor:
    """exp(G_last - G_i): how much of token i's update survives to the chunk's end."""
    return (G[..., -1:] - G).exp()


# -- chunk layout -------------------------------------------------------------------------------------------
def to_chunks(x: torch.Tensor, chunk: int, pad_with_last: bool = False) -> torch.Tensor:
    """[b, L, HV, ...] -> [b, HV, chunks, C, ...]. The last chunk's tail is zeros, or copies of the last token
    (for G: a padded token then decays nothing, and G at the chunk's last row is the sequence's last G)."""
    b, length = x.shape[:2]
    pad = -length % chunk
    if pad:
        tail = x[:, -1:].expand(b, pad, *x.shape[2:]) if pad_with_last else x.new_zeros(b, pad, *x.shape[2:])
        x = torch.cat([x, tail], dim=1)
    return x.reshape(b, (length + pad) // chunk, chunk, *x.shape[2:]).movedim(3, 1)


def from_chunks(x: torch.Tensor, length: int, fold_padding: bool = False) -> torch.Tensor:
    """[b, HV, chunks, C, ...] -> [b, L, HV, ...]. fold_padding: the gradient of to_chunks(pad_with_last=True),
    which adds what the padded rows received onto the last token."""
    b, hv, n, c = x.shape[:4]
    x = x.movedim(1, 3).reshape(b, n * c, hv, *x.shape[4:])
    if fold_padding and n * c > length:
        x = torch.cat([x[:, :length - 1], x[:, length - 1:].sum(1, keepdim=True)], dim=1)
    return x[:, :length]


def chunk_local_cumsum(g: torch.Tensor, chunk: int = CHUNK, cu_seqlens: torch.Tensor | None = None,
                       reverse: bool = False) -> torch.Tensor:
    """The cumulative sum of g [B, T, ...] within each chunk, chunks counted from each sequence's start.
    reverse: the sum from each token to its chunk's end (the gradient of the forward sum)."""
    g = g.to(compute_dtype(g))
    out = torch.empty_like(g)
    for rows, tokens, _ in segments(g.shape[0], g.shape[1], cu_seqlens):
        x = g[rows, tokens]
        b, length = x.shape[:2]
        padded = length + -length % chunk
        x = torch.cat([x, x.new_zeros(b, padded - length, *x.shape[2:])], dim=1)
        x = x.reshape(b, padded // chunk, chunk, *x.shape[2:])
        x = x.flip(2).cumsum(2).flip(2) if reverse else x.cumsum(2)
        out[rows, tokens] = x.reshape(b, padded, *x.shape[3:])[:, :length]
    return out


# -- the recurrence (the oracle) ----------------------------------------------------------------------------
def recurrent(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
              use_qk_l2norm_in_kernel=False):
    """The recurrence token by token, vectorized over the batch and heads; differentiable by autograd.
    Returns (o [B, T, HV, V] in q's dtype, final_state [N, HV, K, V] or None)."""
    dtype = compute_dtype(q)
    out_dtype = q.dtype
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    if use_qk_l2norm_in_kernel:
        q, k = l2_normalize(q), l2_normalize(k)
    b, t, hv = v.shape[:3]
    q, k = repeat_heads(q, hv), repeat_heads(k, hv)
    scale = k.shape[-1] ** -0.5 if scale is None else scale
    n = state_count(b, cu_seqlens)
    h0 = zero_state(n, k, v) if initial_state is None else initial_state.to(dtype)
    outputs, finals = [], []
    for rows, tokens, states in segments(b, t, cu_seqlens):
        o, final = recur_sequence(q[rows, tokens], k[rows, tokens], v[rows, tokens], g[rows, tokens],
                                  beta[rows, tokens], scale, h0[states])
        outputs.append(o)
        finals.append(final)
    o = torch.cat(outputs, dim=1).to(out_dtype)
    return o, (torch.cat(finals, dim=0) if output_final_state else None)


def zero_state(n: int, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return k.new_zeros(n, v.shape[2], k.shape[-1], v.shape[-1])


def recur_sequence(q, k, v, g, beta, scale, state):
    """One run of equal-length sequences [b, L, HV, ...] from state [b, HV, K, V]; builds no in-place
    updates, so autograd sees every step."""
    outputs = []
    for i in range(q.shape[1]):
        state = state * g[:, i].exp()[..., None, None]
        predicted = torch.einsum("bhkv,bhk->bhv", state, k[:, i])
        update = beta[:, i, :, None] * (v[:, i] - predicted)
        state = state + torch.einsum("bhk,bhv->bhkv", k[:, i], update)
        outputs.append(scale * torch.einsum("bhkv,bhk->bhv", state, q[:, i]))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(v.shape)
    return o, state


# -- the chunked forward's steps (one GPU kernel each) ------------------------------------------------------
def chunk_kkt(k, G, beta):
    """A = strict lower (beta_i exp(G_i - G_j) k_i.k_j), [..., C, C]."""
    return beta[..., :, None] * causal_decay(G, strict=True) * (k @ k.transpose(-1, -2))


def solve_unit_lower(A):
    """T = (I + A)^-1 for strictly lower A: the inverse of a unit lower triangular matrix, by substitution."""
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand_as(A)
    return torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True)


def wy_vectors(T, k, v, G, beta):
    """w = T (beta exp(G) k), u = T (beta v): the chunk's updates are u - w S0 for any start state S0."""
    w = T @ ((beta * G.exp())[..., None] * k)
    u = T @ (beta[..., None] * v)
    return w, u


def chunk_states(k, w, u, G, initial_state):
    """Walks the chunks in order. Returns (the state at each chunk's start [..., chunks, K, V], v_new = u - w S0
    [..., chunks, C, V], the state after the last chunk). Built without in-place writes: autograd differentiates
    it (the benchmark's eager anchor in bwd mode)."""
    state = initial_state
    starts, v_new = [], []
    for c in range(k.shape[-3]):
        starts.append(state)
        v_new.append(u[..., c, :, :] - w[..., c, :, :] @ state)
        kept = decay_to_end(G[..., c, :])[..., None] * k[..., c, :, :]
        state = G[..., c, -1].exp()[..., None, None] * state + kept.transpose(-1, -2) @ v_new[-1]
    if not starts:
        return state.new_empty(*k.shape[:-2], *state.shape[-2:]), torch.empty_like(u), state
    return torch.stack(starts, -3), torch.stack(v_new, -3), state


def chunk_output(q, k, v_new, G, starts, scale):
    """o = scale (exp(G) q S0 + (causal exp(G_i - G_j) q_i.k_j) v_new)."""
    inter = G.exp()[..., None] * (q @ starts)
    attention = causal_decay(G) * (q @ k.transpose(-1, -2))
    return scale * (inter + attention @ v_new)


def forward_chunks(k, v, G, beta, initial_state):
    """The steps every pass needs: (T, w, u, chunk start states, v_new, final state)."""
    T = solve_unit_lower(chunk_kkt(k, G, beta))
    w, u = wy_vectors(T, k, v, G, beta)
    starts, v_new, final = chunk_states(k, w, u, G, initial_state)
    return T, w, u, starts, v_new, final


def prepare(q, k, v, g, beta, scale, initial_state, cu_seqlens, chunk):
    """Common inputs of the chunked passes: compute-dtype tensors, q/k on the value heads, the chunk-local
    cumulative gates, the scale and the initial states."""
    dtype = compute_dtype(q)
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    hv = v.shape[2]
    q, k = repeat_heads(q, hv), repeat_heads(k, hv)
    scale = k.shape[-1] ** -0.5 if scale is None else scale
    G = chunk_local_cumsum(g, chunk, cu_seqlens)
    n = state_count(v.shape[0], cu_seqlens)
    h0 = zero_state(n, k, v) if initial_state is None else initial_state.to(dtype)
    return q, k, v, G, beta, scale, h0


def chunk_views(rows, tokens, chunk, q, k, v, G, beta):
    """One segment's tensors in the chunk layout."""
    return (to_chunks(q[rows, tokens], chunk), to_chunks(k[rows, tokens], chunk),
            to_chunks(v[rows, tokens], chunk), to_chunks(G[rows, tokens], chunk, pad_with_last=True),
            to_chunks(beta[rows, tokens], chunk))


def chunked_forward(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens=None, chunk=CHUNK):
    """The chunked (WY) forward. Returns (o [B, T, HV, V] in q's dtype, final_state [N, HV, K, V] or None)."""
    out_dtype = q.dtype
    q, k, v, G, beta, scale, h0 = prepare(q, k, v, g, beta, scale, initial_state, cu_seqlens, chunk)
    o = torch.zeros_like(v)
    final = torch.empty_like(h0)
    for rows, tokens, states in segments(v.shape[0], v.shape[1], cu_seqlens):
        qc, kc, vc, Gc, bc = chunk_views(rows, tokens, chunk, q, k, v, G, beta)
        _, _, _, starts, v_new, final[states] = forward_chunks(kc, vc, Gc, bc, h0[states])
        o[rows, tokens] = from_chunks(chunk_output(qc, kc, v_new, Gc, starts, scale), tokens.stop - tokens.start)
    return o.to(out_dtype), (final if output_final_state else None)


def chunk_inverse(k, G, beta, cu_seqlens=None, chunk=CHUNK):
    """Each token's row of its chunk's T = (I + A)^-1, [B, T, HV, C] (k, G and beta as `prepare` gives them):
    with G, what the chunked forward keeps for its backward."""
    inverse = k.new_zeros(*G.shape, chunk)
    for rows, tokens, _ in segments(k.shape[0], k.shape[1], cu_seqlens):
        kc, Gc, bc = (to_chunks(k[rows, tokens], chunk), to_chunks(G[rows, tokens], chunk, pad_with_last=True),
                      to_chunks(beta[rows, tokens], chunk))
        inverse[rows, tokens] = from_chunks(solve_unit_lower(chunk_kkt(kc, Gc, bc)), tokens.stop - tokens.start)
    return inverse


# -- the chunked backward's steps ---------------------------------------------------------------------------
def chunk_local_dv(q, k, G, do, scale):
    """dv_new from the intra-chunk attention alone: P^T do, P_ij = scale exp(G_i - G_j) q_i.k_j (j <= i)."""
    attention = scale * causal_decay(G) * (q @ k.transpose(-1, -2))
    return attention.transpose(-1, -2) @ do


def chunk_states_backward(q, k, w, G, do, dv_local, dfinal_state, scale):
    """Walks the chunks in reverse, carrying dS, the gradient of the state at a chunk's end, to its start:
        dv_new = dv_local + exp(G_last - G) k dS                  (S_end reads v_new)
        dS0    = exp(G_last) dS + scale (exp(G) q)^T do - w^T dv_new   (S_end, o, and v_new = u - w S0)
    Returns (dS at each chunk's end [..., chunks, K, V], the full dv_new, dS at the first chunk's start)."""
    dstate = dfinal_state
    dstate_ends = dstate.new_empty(*k.shape[:-2], *dstate.shape[-2:])
    dv_new = torch.empty_like(dv_local)
    for c in reversed(range(k.shape[-3])):
        dstate_ends[..., c, :, :] = dstate
        kept = decay_to_end(G[..., c, :])[..., None] * k[..., c, :, :]
        dv_new[..., c, :, :] = dv_local[..., c, :, :] + kept @ dstate
        q_decayed = G[..., c, :].exp()[..., None] * q[..., c, :, :]
        dstate = (G[..., c, -1].exp()[..., None, None] * dstate
                  + scale * q_decayed.transpose(-1, -2) @ do[..., c, :, :]
                  - w[..., c, :, :].transpose(-1, -2) @ dv_new[..., c, :, :])
    return dstate_ends, dv_new, dstate


def chunk_dqkwg(q, k, v_new, G, starts, dstate_ends, do, dv_new, scale):
    """dq, dk (through o and S_end), dw (through v_new = u - w S0) and dG, the gradient of the cumulative gates.
    dG collapses to sum(dq q) - sum(dk k) per token, since every G_i - G_j factor multiplies a q_i.k_j (or k_j
    against S_end); the last token also gets the factors exp(G_last) of S_end."""
    dw = -dv_new @ starts.transpose(-1, -2)
    dscores = scale * causal_decay(G) * (do @ v_new.transpose(-1, -2))   # d(loss) / d(q_i.k_j)
    dq = scale * G.exp()[..., None] * (do @ starts.transpose(-1, -2)) + dscores @ k
    dk_state = decay_to_end(G)[..., None] * (v_new @ dstate_ends.transpose(-1, -2))
    dk = dscores.transpose(-1, -2) @ q + dk_state
    dG = (dq * q).sum(-1) - (dk * k).sum(-1)
    dG_last = G[..., -1].exp() * (starts * dstate_ends).sum((-1, -2)) + (dk_state * k).sum((-1, -2))
    dG = torch.cat([dG[..., :-1], dG[..., -1:] + dG_last[..., None]], dim=-1)
    return dq, dk, dw, dG


def wy_backward(k, v, G, beta, T, dw, du):
    """Through w = T (beta exp(G) k), u = T (beta v), T = (I + A)^-1 and A = strict lower (beta_i exp(G_i - G_j)
    k_i.k_j). Returns (dk, dv, dbeta, dG)."""
    gate = G.exp()
    k_scaled = (beta * gate)[..., None] * k
    v_scaled = beta[..., None] * v
    dk_scaled = T.transpose(-1, -2) @ dw
    dv_scaled = T.transpose(-1, -2) @ du
    dT = dw @ k_scaled.transpose(-1, -2) + du @ v_scaled.transpose(-1, -2)
    # d(M^-1) = -M^-1 dM M^-1, and only A's strict lower part is a variable
    dA = (-T.transpose(-1, -2) @ dT @ T.transpose(-1, -2)).tril(-1)
    decay = causal_decay(G, strict=True)
    kk = k @ k.transpose(-1, -2)
    dkk = dA * beta[..., :, None] * decay                                  # d(loss) / d(k_i.k_j)
    dk = (beta * gate)[..., None] * dk_scaled + dkk @ k + dkk.transpose(-1, -2) @ k
    dv = beta[..., None] * dv_scaled
    dbeta = (dk_scaled * gate[..., None] * k).sum(-1) + (dv_scaled * v).sum(-1) + (dA * decay * kk).sum(-1)
    dA_weighted = dA * beta[..., :, None] * decay * kk                     # dA_ij A_ij
    dG = (dk_scaled * k_scaled).sum(-1) + dA_weighted.sum(-1) - dA_weighted.sum(-2)
    return dk, dv, dbeta, dG


def chunked_backward(q, k, v, g, beta, scale, initial_state, do, dfinal_state, cu_seqlens=None, chunk=CHUNK):
    """The chunked backward as explicit formulas (no autograd), step by step as the GPU kernels run it.
    Returns (dq, dk, dv, dg, dbeta, dinitial_state), each in its input's dtype; dinitial_state in the compute
    dtype, None without initial_state. The gradient through use_qk_l2norm_in_kernel is not part of it: the
    caller normalizes q and k itself and lets autograd differentiate the normalization."""
    dtypes = (q.dtype, k.dtype, v.dtype, g.dtype, beta.dtype)
    heads = q.shape[2]
    q, k, v, G, beta, scale, h0 = prepare(q, k, v, g, beta, scale, initial_state, cu_seqlens, chunk)
    do = do.to(v.dtype)
    dht = torch.zeros_like(h0) if dfinal_state is None else dfinal_state.to(v.dtype)
    dq, dk, dv, dG, dbeta = (torch.zeros_like(x) for x in (q, k, v, G, beta))
    dh0 = torch.empty_like(h0)
    for rows, tokens, states in segments(v.shape[0], v.shape[1], cu_seqlens):
        length = tokens.stop - tokens.start
        qc, kc, vc, Gc, bc = chunk_views(rows, tokens, chunk, q, k, v, G, beta)
        doc = to_chunks(do[rows, tokens], chunk)
        # recompute the forward's T, w, u, chunk start states and v_new
        T, w, u, starts, v_new, _ = forward_chunks(kc, vc, Gc, bc, h0[states])
        # dv_new from the intra-chunk attention, then the state gradient walked back over the chunks
        dv_local = chunk_local_dv(qc, kc, Gc, doc, scale)
        dstate_ends, dv_new, dh0[states] = chunk_states_backward(qc, kc, w, Gc, doc, dv_local, dht[states], scale)
        # dq, dk, dw and the gate gradient of o and S_end
        dq_c, dk_out, dw, dG_out = chunk_dqkwg(qc, kc, v_new, Gc, starts, dstate_ends, doc, dv_new, scale)
        # through the WY representation: du = dv_new, since v_new = u - w S0
        dk_wy, dv_c, dbeta_c, dG_wy = wy_backward(kc, vc, Gc, bc, T, dw, dv_new)
        dq[rows, tokens] = from_chunks(dq_c, length)
        dk[rows, tokens] = from_chunks(dk_out + dk_wy, length)
        dv[rows, tokens] = from_chunks(dv_c, length)
        dbeta[rows, tokens] = from_chunks(dbeta_c, length)
        dG[rows, tokens] = from_chunks(dG_out + dG_wy, length, fold_padding=True)
    # G is the chunk-local cumsum of g: its gradient is the reverse cumsum
    dg = chunk_local_cumsum(dG, chunk, cu_seqlens, reverse=True)
    dq, dk = sum_heads(dq, heads), sum_heads(dk, heads)
    grads = tuple(x.to(dt) for x, dt in zip((dq, dk, dv, dg, dbeta), dtypes))
    return (*grads, dh0 if initial_state is not None else None)
