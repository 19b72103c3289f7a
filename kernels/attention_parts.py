"""What FlashAttention's kernels and its warp-group forward (flash_attention_warp_groups.py) share, and the
attention operators built on them: the programs' sequence bounds and online softmax (@tle.jit helpers), the
layout of a call (Problem), the torch forward the examples and the torch backend compute, and the examples'
inputs."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton.language as tl

import tle
from tle.kernels.dropout_add import scale_of, threshold_of
from tle.kernels.philox import counter_words, split_u64, stream_words_torch
from tle.oplib.rows import torch_compute_dtype


# -- the programs' helpers ------------------------------------------------------------------------------------
@tle.jit
def _sequence(cu_ptr, b, dense_len, VARLEN: tl.constexpr):
    """(first row, length) of sequence b: from cu_seqlens when packed, else (0, the dense length)."""
    if VARLEN:
        start = tl.load(cu_ptr + b)
        length = tl.load(cu_ptr + b + 1) - start
    else:
        start = 0
        length = dense_len
    return start, length


@tle.jit
def _dropout_keep(q0, q_in, k0, k_in, bh, seqlen_q, seqlen_k, seed_lo, seed_hi, offset_lo, offset_hi,
                  drop_threshold):
    """Which probabilities of a tile of head bh = b · H + h dropout keeps (queries q0 + q_in, keys k0 + k_in;
    q0 and k0 multiples of 16): those whose word of the stream (attention_parts.dropout_keep) is at least the
    threshold. The four elements of queries {q, q + 8} and keys {k, k + 8} (q, k mod 16 < 8) take the four
    words of one Philox: they are the elements one thread holds in a tensor-core product's accumulator, with
    queries or with keys as its rows, so the compiler computes the Philox once for them where it sees their
    counters equal: a loop's block origin (start_n, start_m) comes apart from the offsets in the block, whose
    low bits the compiler then knows (a program's origin, pid · BLOCK, it sees itself)."""
    groups_q = (seqlen_q + 15) // 16 * 8
    groups_k = (seqlen_k + 15) // 16 * 8
    g_q = (q0 >> 1) + (((q_in >> 4) << 3) | (q_in & 7))
    g_k = (k0 >> 1) + (((k_in >> 4) << 3) | (k_in & 7))
    n = (bh * groups_q + g_q).to(tl.int64) * groups_k + g_k
    w = ((q_in >> 2) & 2) | ((k_in >> 3) & 1)
    return counter_words(n, w, seed_lo, seed_hi, offset_lo, offset_hi).to(tl.int64) >= drop_threshold


@tle.jit
def _fwd_program(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_q_ptr, cu_k_ptr, stride_qb, stride_qm, stride_qh, stride_kb,
                 stride_kn, stride_kh, stride_vb, stride_vn, stride_vh, stride_ob, stride_om, stride_oh, stride_lb,
                 stride_lh, seqlen_q, seqlen_k, H: tl.constexpr, GROUP: tl.constexpr, VARLEN: tl.constexpr):
    """A forward program's sequence lengths, the starts of its query head's rows in q, out and lse and of its
    KV head's rows in k and v (axis 1 of the grid: batch x head), and its sequence's first row in q."""
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    q_start, len_q = _sequence(cu_q_ptr, b, seqlen_q, VARLEN)
    k_start, len_k = _sequence(cu_k_ptr, b, seqlen_k, VARLEN)
    q_base = q_ptr + b * stride_qb + q_start * stride_qm + h * stride_qh
    k_base = k_ptr + b * stride_kb + k_start * stride_kn + (h // GROUP) * stride_kh
    v_base = v_ptr + b * stride_vb + k_start * stride_vn + (h // GROUP) * stride_vh
    o_base = o_ptr + b * stride_ob + q_start * stride_om + h * stride_oh
    lse_base = lse_ptr + b * stride_lb + h * stride_lh + q_start
    return len_q, len_k, q_base, k_base, v_base, o_base, lse_base, q_start


@tle.jit
def _folded_softmax(qk, m_i, l_i, qk_scale):
    """One block's online softmax in base 2 with the scale folded into exp2's argument (one multiply-add an
    element): m_i stays in unscaled scores. P, the rescale alpha of what came before, and the new l_i, m_i."""
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.math.exp2((m_i - m_new) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - (m_new * qk_scale)[:, None])
    return p, alpha, l_i * alpha + tl.sum(p, 1), m_new


# -- the problem, as the kernels and the torch backend see it -----------------------------------------------
class Problem:
    """The layout of one call: dense [B, S, H, D] or packed [total, H, D] with cu_seqlens."""

    def __init__(self, q, k, cu_q, cu_k, max_q, max_k):
        self.varlen = cu_q is not None
        self.h, self.d = q.shape[-2], q.shape[-1]
        self.h_kv = k.shape[-2]
        self.group = self.h // self.h_kv
        if self.varlen:
            self.b = cu_q.shape[0] - 1
            self.seqlen_q, self.seqlen_k = max_q, max_k
            self.rows_q = q.shape[0]           # the packed tensor's rows
        else:
            self.b = q.shape[0]
            self.seqlen_q, self.seqlen_k = q.shape[1], k.shape[1]
            self.rows_q = self.seqlen_q

    def lse_shape(self, q):
        return (self.h, q.shape[0]) if self.varlen else (self.b, self.h, self.seqlen_q)

    def strides(self, t):
        """(batch, row, head) strides of an input or output: the batch stride is 0 when packed."""
        return (0, t.stride(0), t.stride(1)) if self.varlen else (t.stride(0), t.stride(1), t.stride(2))

    def lse_strides(self, lse):
        return (0, lse.stride(0)) if self.varlen else (lse.stride(0), lse.stride(1))


def cu_or_dummy(cu, like):
    """The cu_seqlens pointer a dense launch passes and never reads."""
    return cu if cu is not None else like


# -- what shapes the scores beyond q kᵀ · scale ------------------------------------------------------------
@dataclass(frozen=True)
class Scores:
    """How an attention call turns q kᵀ · scale into probabilities, beyond the softmax:

    - window (left, right): query i sees key j when i + base - left <= j <= i + base + right, base = S_k - S_q
      (the diagonal through the bottom-right corner); None leaves that side open. Causal is (None, 0); the
      top-left causal mask (SDPA's, when S_q != S_k) is (None, S_q - S_k).
    - softcap > 0: scores become softcap · tanh(scores / softcap) (logit soft-capping, after the scale).
    - bias: added to the scores (after the cap), broadcast to [B, H, S_q, S_k]; -inf masks a key out.
    - dropout_p > 0: the probabilities are dropped, each kept one scaled by 1 / (1 - p), with the mask of the
      Philox stream of (seed, offset), four probabilities to a counter (dropout_keep); the lse and
      the normalizer are of the probabilities before dropout.
    A query that sees no key gets output 0 and lse -inf."""
    window: tuple[int | None, int | None] = (None, None)
    softcap: float = 0.0
    bias: torch.Tensor | None = None
    dropout_p: float = 0.0
    seed: int = 0
    offset: int = 0


CAUSAL = Scores(window=(None, 0))


# -- the torch forward: fp32 (fp64 for fp64 inputs), one sequence at a time ----------------------------------
def _keep(s_q, s_k, window, device):
    """[S_q, S_k]: which keys each query sees (the window of Scores)."""
    left, right = window
    i = torch.arange(s_q, device=device)[:, None]
    j = torch.arange(s_k, device=device)[None, :]
    keep = torch.ones(s_q, s_k, dtype=torch.bool, device=device)
    if right is not None:
        keep = keep & (j <= i + (s_k - s_q) + right)
    if left is not None:
        keep = keep & (j >= i + (s_k - s_q) - left)
    return keep


def _logits(q, kk, scale, sc: Scores):
    """The scores [B, H, S_q, S_k] before the window's mask, and the soft cap's tanh (None without one)."""
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    t = None
    if sc.softcap > 0:
        t = torch.tanh(s / sc.softcap)
        s = sc.softcap * t
    if sc.bias is not None:
        s = s + sc.bias.to(s.dtype)
    return s, t


# the kernels' dropout arguments, which a launch passes as they are: no recompile for a new seed or offset
DROPOUT_RUNTIME_INTS = ("seed_lo", "seed_hi", "offset_lo", "offset_hi", "drop_threshold")


def dropout_args(sc: Scores) -> tuple:
    """The kernels' arguments seed_lo .. drop_scale for `sc` (the seed's and offset's 32-bit halves, the threshold a
    word must reach to keep a probability, the scale of a kept one)."""
    return (*split_u64(sc.seed), *split_u64(sc.offset), threshold_of(sc.dropout_p), scale_of(sc.dropout_p))


def dropout_keep(shape, sc: Scores, device):
    """The dropout's mask over [B, H, S_q, S_k] (bool), the words every backend draws: element (b, h, i, j)
    takes word 2 · (i div 8 mod 2) + (j div 8 mod 2) of the Philox counter
    ((b · H + h) · G(S_q) + g(i)) · G(S_k) + g(j) of the stream of (seed, offset) (kernels/philox.py), with
    g(x) = x div 16 · 8 + x mod 8 and G(S) = ceil(S / 16) · 8. Queries i, i + 8 and keys j, j + 8 (i, j mod 16
    < 8) share one counter: the four elements a thread holds of a tensor-core product's accumulator, so a
    kernel runs one Philox for four probabilities."""
    b, h, s_q, s_k = shape

    def group(s):
        x = torch.arange(s, device=device)
        return x // 16 * 8 + x % 8, x // 8 % 2
    (g_q, w_q), (g_k, w_k) = group(s_q), group(s_k)
    bh = torch.arange(b * h, device=device).view(b, h, 1, 1)
    counter = (bh * _groups(s_q) + g_q.view(-1, 1)) * _groups(s_k) + g_k
    words = stream_words_torch(4 * dropout_counters(shape), sc.seed, sc.offset, device)
    return words[counter * 4 + w_q.view(-1, 1) * 2 + w_k] >= threshold_of(sc.dropout_p)


def _groups(s: int) -> int:
    return (s + 15) // 16 * 8


def dropout_counters(shape) -> int:
    """How many Philox counters the dropout of [B, H, S_q, S_k] probabilities uses (dropout_keep)."""
    b, h, s_q, s_k = shape
    return b * h * _groups(s_q) * _groups(s_k)


def _dense_attention(q, k, v, scale, sc: Scores):
    """out [B, S_q, H, D] and lse [B, H, S_q] of dense inputs, differentiable (the reference uses it too): a query
    that sees no key gets 0 and lse -inf, with finite gradients."""
    group = q.shape[2] // k.shape[2]
    kk, vv = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    s, _ = _logits(q, kk, scale, sc)
    s = torch.where(_keep(q.shape[1], k.shape[1], sc.window, q.device), s, -math.inf)
    seen = (s > -math.inf).any(-1, keepdim=True)                        # [B, H, S_q, 1]
    s = torch.where(seen, s, 0.0)                                       # an unseen row: finite, zeroed below
    lse = torch.logsumexp(s, dim=-1)
    p = torch.where(seen, torch.exp(s - lse[..., None]), 0.0)
    if sc.dropout_p > 0:
        p = p * dropout_keep(p.shape, sc, q.device) * scale_of(sc.dropout_p)
    out = torch.einsum("bhqk,bkhd->bqhd", p, vv)
    return out, torch.where(seen[..., 0], lse, -math.inf)


def sequence_slices(cu_q, cu_k):
    """(q rows, k rows) slices of each packed sequence."""
    qs, ks = cu_q.tolist(), cu_k.tolist()
    return [(slice(qs[i], qs[i + 1]), slice(ks[i], ks[i + 1])) for i in range(len(qs) - 1)]


def _torch_forward(q, k, v, cu_q, cu_k, sc: Scores, scale):
    ct = torch_compute_dtype(q)
    qf, kf, vf = q.to(ct), k.to(ct), v.to(ct)
    if cu_q is None:
        out, lse = _dense_attention(qf, kf, vf, scale, sc)
        return out.to(q.dtype).contiguous(), lse.float().contiguous()
    out = q.new_zeros(q.shape)
    lse = torch.empty(q.shape[1], q.shape[0], device=q.device, dtype=torch.float32)
    for rq, rk in sequence_slices(cu_q, cu_k):
        o, l = _dense_attention(qf[None, rq], kf[None, rk], vf[None, rk], scale, sc)
        out[rq], lse[:, rq] = o[0].to(q.dtype), l[0].float()
    return out, lse


# -- the torch backward: the same formulas, fp32 (fp64 for fp64 inputs), one sequence at a time -----------
def _dense_attention_backward(do, q, k, v, out, lse, scale, sc: Scores):
    group = q.shape[2] // k.shape[2]
    kk, vv = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    s, t = _logits(q, kk, scale, sc)
    keep = _keep(q.shape[1], k.shape[1], sc.window, q.device)
    lse = torch.where(lse == -math.inf, 0.0, lse)          # a row that sees no key: every score is masked
    p = torch.where(keep, torch.exp(s - lse[..., None]), 0.0)
    delta = (do * out).sum(-1).transpose(1, 2)                          # [B, H, S_q]
    dp = torch.einsum("bqhd,bkhd->bhqk", do, vv)
    p_dropped = p
    if sc.dropout_p > 0:
        kept = dropout_keep(p.shape, sc, q.device) * scale_of(sc.dropout_p)
        p_dropped, dp = p * kept, dp * kept
    ds = p * (dp - delta[..., None])
    if t is not None:
        ds = ds * (1 - t * t)
    dq = torch.einsum("bhqk,bkhd->bqhd", ds, kk) * scale
    dk = torch.einsum("bhqk,bqhd->bkhd", ds, q) * scale
    dv = torch.einsum("bhqk,bqhd->bkhd", p_dropped, do)
    b, s_k, h_kv, d = k.shape
    return dq, dk.view(b, s_k, h_kv, group, d).sum(3), dv.view(b, s_k, h_kv, group, d).sum(3)


def _torch_backward(do, q, k, v, out, lse, cu_q, cu_k, sc, scale):
    ct = torch_compute_dtype(q)
    t = [x.to(ct) for x in (do, q, k, v, out)]
    if cu_q is None:
        grads = _dense_attention_backward(*t, lse.to(ct), scale, sc)
        return tuple(g.to(x.dtype).contiguous() for g, x in zip(grads, (q, k, v)))
    dq, dk, dv = q.new_zeros(q.shape), k.new_zeros(k.shape), v.new_zeros(v.shape)
    for rq, rk in sequence_slices(cu_q, cu_k):
        g = _dense_attention_backward(*(x[None, r] for x, r in zip(t, (rq, rq, rk, rk, rq))),
                                      lse[None, :, rq].to(ct), scale, sc)
        dq[rq], dk[rk], dv[rk] = (x[0].to(q.dtype) for x in g)
    return dq, dk, dv


# -- the examples' inputs ----------------------------------------------------------------------------------
def _example_inputs(device, size):
    """A causal GQA problem: small for the CPU, a mid-sized one for the GPU (its fp32 reference must fit)."""
    b, s, h, h_kv, d, dtype = (1, 72, 4, 2, 32, torch.float16) if size == "small" else \
        (2, 2048, 16, 4, 128, torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, s, n, d, generator=gen).to(device, dtype) for n in (h, h_kv, h_kv))
    label = f"B{b} S{s} H{h}/{h_kv} D{d} causal {str(dtype)[6:]}"
    return q, k, v, d ** -0.5, label


def nan_like(t, dtype=None):
    return torch.full(t.shape, float("nan"), device=t.device, dtype=dtype or t.dtype)
