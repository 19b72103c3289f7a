"""The gated delta rule's kernel launches: the chunked forward, its backward and the recurrence, on any kernel
backend. The kernels address tokens through cu_seqlens, across the batch axis: a batch [B, T, ...] is passed as
the one packed sequence batch [1, B * T, ...] it is to them, every tensor with its shape (TileLang copies boxes of
these views).

The chunked forward keeps two of its intermediates for the backward: G, the chunk-local cumulative gates
(fp32), and Ai = (I + A)^-1 (in k's dtype), [tokens, HV, 64]. The backward recomputes the rest (w, u, the
chunk start states and v_new) with the forward's kernels, as recomputing costs less memory than keeping them.
"""
from __future__ import annotations

import torch

from tle.kernels.gated_delta_rule_backward_kernels import (gdr_dqkwg_kernel, gdr_dv_local_kernel,
                                                           gdr_state_backward_kernel, gdr_wy_backward_kernel)
from tle.kernels.gated_delta_rule_kernels import (BC, BT, gdr_chunk_index_kernel, gdr_kkt_kernel,
                                                  gdr_output_kernel, gdr_recurrent_kernel, gdr_scores_kernel,
                                                  gdr_solve_kernel, gdr_state_kernel, gdr_state_output_kernel,
                                                  gdr_wy_kernel)
from tle.oplib.arith import cdiv

INDEX_BLOCK = 64          # sequences (and chunks) a program of the chunk-list kernel reads at once
FUSED_WALK_MAX_K = 128    # the largest K the forward's walk with the output takes (walk_writes_output)


def packed(cu_seqlens: torch.Tensor | None, batch: int, length: int, device) -> torch.Tensor:
    """cu_seqlens as the kernels read it (int32): a fixed-length batch is `batch` sequences of `length` tokens."""
    if cu_seqlens is None:
        return torch.arange(0, (batch + 1) * length, length, device=device, dtype=torch.int32)
    return cu_seqlens.to(torch.int32)


def packed_batch(*xs):
    """[B, T, ...] tensors as the packed batch [1, B * T, ...] (None stays None)."""
    return [None if x is None else x.reshape(1, -1, *x.shape[2:]) for x in xs]


def block(n: int, most: int) -> int:
    return min(n, most)


def dqkwg_warps(bk: int, dtype: torch.dtype, backend: str) -> int:
    """Warps of gdr_dqkwg_kernel: Triton 3.6 builds it wrongly at 4 warps on the H200 with K blocks of 16 and
    16-bit operands (at K = 16 in fp16, dq off from the second warp's rows on against Triton's interpreter;
    right at 8 warps), so 8 there; fp32 operands stay at 4 (the whole backward at 8 warps gave a wrong dk in
    fp32). 4 elsewhere. The same shapes still give a wrong dk in 16 bits (gdr_wy_backward_kernel, whose 8-warp
    build faulted): not fixed."""
    return 8 if backend == "triton" and bk <= 16 and dtype.itemsize == 2 else 4


def state_warps(kd: int, bv: int) -> int:
    """Warps of the state walks: their products are [K, BV] (or [BT, BV]); on TileLang each warp takes at
    least 16 x 8 of one."""
    return max(1, min(4, kd * bv // 128))


# -- launch choices. Triton's are the fastest of a sweep of block sizes, warps and stages on the H200 at
# B1 T32768 H32 K=V=128 and B1 T16384 H16 K=V=256 (the figures are ms there, against the choice before);
# TileLang's are those its layouts need.
def solve_warps(backend: str) -> int:
    """Triton: one warp (0.204 against 0.293 ms with two at K = 128). TileLang: two, each 16 x 8 of the
    [16, 16] products."""
    return 1 if backend == "triton" else 2


def output_options(vd: int, backend: str) -> dict:
    """BV and launch options of the output kernel; 128 columns a program, on Triton with 3 stages (0.507
    against 0.657 ms at K = 128, 0.359 against 0.489 at K = 256), on TileLang 0.518 against 0.704 ms at K = 128
    (dv_local 0.343 against 0.491)."""
    if backend == "triton":
        return dict(BV=block(vd, 128), num_warps=4, num_stages=3)
    return dict(BV=block(vd, 128), num_warps=4)


def dv_local_options(vd: int, backend: str) -> dict:
    """BV and launch options of dv_local; on Triton 128 columns a program, 3 stages (0.312 against 0.465 ms at
    K = 128, 0.241 against 0.357 at K = 256)."""
    return output_options(vd, backend)


def state_backward_options(kd: int, bv: int, backend: str) -> dict:
    """Warps, pipeline stages and the q product of the backward state walk (ms on the H200, B1 T32768 H32
    K=V=128 / 64 packed sequences of it / B1 T16384 H16 K=V=256). Triton at K <= 128: TF32, 4 warps, 3 stages
    (1.27 / 1.18; with SPLIT_Q 1.31 / 1.47). At K = 256 the fp32 q tile of two chunks in flight outgrows
    shared memory: SPLIT_Q, 8 warps and 2 stages (1.30, against 1.79 with TF32 and one stage). TileLang:
    SPLIT_Q (1.74 / 1.39 against 3.05 / 2.47 in TF32, whose transposed operand it takes as mma_sync), one
    stage at K = 256."""
    if backend == "triton":
        wide = kd > 128
        return dict(SPLIT_Q=wide, num_warps=8 if wide else 4, num_stages=2 if wide else 3,
                    READ_AHEAD=read_ahead(kd))
    return dict(SPLIT_Q=True, num_warps=state_warps(kd, bv), num_stages=1 if kd > 128 else None,
                READ_AHEAD=read_ahead(kd))


def state_columns(kd: int, vd: int, walks: int, device) -> int:
    """Value columns of a state-walk program, for `walks` (sequence, value head) pairs. Each walk is one chain of
    chunks: 32 columns keep its programs many while the GPU has an SM for each; once 32-column programs would
    outnumber the SMs, 64 columns read w and k (and q) half as often. At K = 256 the [256, 64] fp32 state
    outgrows the registers: 32. Triton on the H200 (forward / backward walk, ms): 64 packed sequences of
    T32768 H32 K=V=128 0.80 / 1.53 -> 0.58 / 1.10, B4 T4096 H16 0.18 / 0.36 -> 0.13 / 0.26; B1 T32768 H32
    keeps 32 (0.66 / 1.32 against 0.82 / 1.94 with 64)."""
    narrow = block(vd, 32)
    sms = multiprocessors(device)
    if kd > 128 or vd <= narrow or sms is None:
        return narrow
    return 64 if walks * (vd // narrow) > sms else narrow


def multiprocessors(device) -> int | None:
    """The SM count of a CUDA device; None elsewhere."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else None


def state_stages(kd: int, backend: str) -> int | None:
    """Triton's pipeline stages of the forward walk: 4 at K <= 128 (0.63 against 0.66 ms with 3 at B1 T32768
    H32 K=V=128), its default 3 at K = 256 (two K = 256 chunks in flight fill shared memory). TileLang: its
    pipeline plan."""
    return (4 if kd <= 128 else 3) if backend == "triton" else None


def read_ahead(kd: int) -> bool:
    """Do the state walks read their per-chunk tiles ahead (is_async, at least two pipeline stages)? Not at
    K = 256, where the tiles of more than one chunk in flight outgrow shared memory."""
    return kd <= 128


def wy_backward_stages(backend: str) -> int | None:
    """Triton: one stage, so that its k k^T product waits for its operands before the next copy (see the
    kernel); 1.18 against 1.38 ms (with k k^T from fp32 operands and 3 stages) at K = 128."""
    return 1 if backend == "triton" else None


def chunk_index(cu: torch.Tensor, tokens: int, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(chunk list [bound, 2] int32 of each chunk's (first token, end), each sequence's first chunk [N + 1] int32,
    the last entry the chunk count). The list is allocated for the most chunks `tokens` tokens in N sequences
    can make (tokens / BT + N, no host sync); entries past the real chunks hold the empty range (0, 0)."""
    n = cu.numel() - 1
    slots = cdiv(tokens, BT) + n
    index = torch.empty((slots, 2), device=cu.device, dtype=torch.int32)
    first = torch.empty(n + 1, device=cu.device, dtype=torch.int32)
    if n:
        gdr_chunk_index_kernel[(n,)](cu, index, first, n, slots, BT=BT, BLOCK=INDEX_BLOCK, backend=backend, num_warps=2)
    return index, first


def gates_and_inverse(k, g, beta, index, backend):
    """G (fp32) and Ai = (I + A)^-1 (k's dtype), [B, T, HV(, BT)]."""
    b, t, h, kd = k.shape
    hv = g.shape[2]
    gc = torch.empty(b, t, hv, device=k.device, dtype=torch.float32)
    a = torch.empty(b, t, hv, BT, device=k.device, dtype=torch.float32)
    gdr_kkt_kernel[(index.shape[0], hv)](
        k, g, beta, gc, a, index, H=h, HV=hv, K=kd, BK=block(kd, 64), BT=BT, backend=backend, num_warps=4)
    ai = torch.empty(b, t, hv, BT, device=k.device, dtype=k.dtype)
    gdr_solve_kernel[(index.shape[0], hv)](
        a, ai, index, HV=hv, BT=BT, BC=BC, backend=backend, num_warps=solve_warps(backend))
    return gc, ai


def wy_vectors(k, v, beta, gc, ai, index, backend):
    """w and u (k's dtype), [B, T, HV, K] and [B, T, HV, V]."""
    b, t, h, kd = k.shape
    hv, vd = v.shape[2], v.shape[3]
    w = torch.empty(b, t, hv, kd, device=k.device, dtype=k.dtype)
    u = torch.empty(b, t, hv, vd, device=k.device, dtype=k.dtype)
    gdr_wy_kernel[(index.shape[0], hv)](
        k, v, beta, gc, ai, w, u, index, H=h, HV=hv, K=kd, V=vd, BK=block(kd, 64), BV=block(vd, 64), BT=BT,
        backend=backend, num_warps=4)
    return w, u


def _walk_start(k, u, initial_state, cu):
    """(the final states to fill [N, HV, K, V] fp32, the initial state the walk reads, its value columns) of a
    state walk over the sequences of `cu`."""
    kd, hv, vd = k.shape[3], u.shape[2], u.shape[3]
    final = torch.empty(cu.numel() - 1, hv, kd, vd, device=k.device, dtype=torch.float32)
    h0 = final if initial_state is None else initial_state      # not read without one
    return final, h0, state_columns(kd, vd, final.shape[0] * hv, k.device)


def walk(k, w, u, gc, initial_state, cu, first, states, v_new, backend):
    """The state walk of the sequences of `cu` (their chunks from slot first[n] on), from `initial_state`
    [N, HV, K, V] fp32 (None: zeros): writes each chunk's start state into `states` and v_new into `v_new`;
    returns the final states [N, HV, K, V] fp32."""
    h, kd = k.shape[2:]
    hv, vd = u.shape[2], u.shape[3]
    final, h0, bv = _walk_start(k, u, initial_state, cu)
    gdr_state_kernel[(vd // bv, cu.numel() - 1, hv)](
        k, w, u, gc, h0, states, v_new, final, cu, first, H=h, HV=hv, K=kd, V=vd, BV=bv, BT=BT,
        INITIAL=initial_state is not None, UPDATES=True, READ_AHEAD=read_ahead(kd), backend=backend,
        num_warps=state_warps(kd, bv), num_stages=state_stages(kd, backend))
    return final


def states_and_updates(k, v, beta, gc, ai, initial_state, cu, index, first, backend):
    """w, u, the state at each chunk's start [chunks, HV, K, V] (k's dtype), v_new and the final states (fp32)."""
    w, u = wy_vectors(k, v, beta, gc, ai, index, backend)
    hv, vd = u.shape[2], u.shape[3]
    states = torch.empty(index.shape[0], hv, k.shape[3], vd, device=k.device, dtype=k.dtype)
    v_new = torch.empty_like(u)
    final = walk(k, w, u, gc, initial_state, cu, first, states, v_new, backend)
    return w, u, states, v_new, final


def output(q, k, v_new, states, gc, scale, index, backend):
    """o from the chunk start states and v_new."""
    b, t, h, kd = q.shape
    hv, vd = v_new.shape[2], v_new.shape[3]
    o = torch.empty(b, t, hv, vd, device=q.device, dtype=q.dtype)
    options = output_options(vd, backend)
    gdr_output_kernel[(index.shape[0], hv, vd // options["BV"])](
        q, k, v_new, states, gc, o, scale, index, H=h, HV=hv, K=kd, V=vd, BK=block(kd, 64), BT=BT, backend=backend,
        **options)
    return o


def fused_stages(backend: str) -> int | None:
    """Pipeline stages of the walk with the output: q, k and w of a chunk take 48 KB at K = 128, three chunks in
    flight fit (Triton: 1.41 against 1.72 ms with 2 at B1 T32768 H32 K=V=128)."""
    return 3 if backend == "triton" else None


def walk_writes_output(kd: int, vd: int, walks: int, device, backend: str) -> bool:
    """Does the forward's state walk write the output itself (gdr_state_output_kernel), rather than hand the
    chunk states and v_new to the output kernel through memory? Fusing saves that round trip and a launch, and
    puts the output's products on each walk's chain of chunks: it pays once the walks' programs are many, so
    that the SMs have other programs to run while one waits on its chain. Measured on the H200 (ms, walk + output
    unfused -> fused), Triton: 64 packed sequences of T32768 H32 K=V=128 1.10 -> 0.93, B4 T4096 H16 0.25 -> 0.22,
    but B1 T32768 H32 (128 programs of 32 columns) 1.21 -> 1.43 and K=V=64 0.67 -> 1.13; TileLang, whose output
    kernel costs more: 1.38 -> 1.07, 0.32 -> 0.24, B1 T32768 H32 1.56 -> 1.35, but K=V=64 (64 programs)
    0.97 -> 1.13. So Triton fuses once the 32-column programs outnumber the SMs (half of them at K = 128, where
    it reads the scores from a pass before, scores_ahead), TileLang once they outnumber half. Never at K = 256:
    one chunk's q, k and w (96 KB) leave no room to read ahead, and Triton 3.6's build of the fused walk at
    K = 256 read out of bounds on the H200."""
    sms = multiprocessors(device)
    if kd > FUSED_WALK_MAX_K or sms is None:
        return False
    programs = walks * (vd // block(vd, 32))
    return programs > (sms if backend == "triton" and not scores_ahead(kd, backend) else sms // 2)


def scores_ahead(kd: int, backend: str) -> bool:
    """Does the walk with the output read each chunk's causal scores from gdr_scores_kernel rather than compute
    q k^T on its chain of chunks? It takes a product off every chunk's critical path for one parallel pass over
    q and k. Measured on the H200 (ms, Triton, the fused walk with the scores kernel against the fused walk
    alone / the walk and the output unfused): B1 T32768 H32 K=V=128 0.99 against 1.41 / 1.21, 64 packed
    sequences of it 0.79 against 0.91 / 1.10, B4 T4096 H16 0.19 against 0.22 / 0.26; so at K = 128 Triton
    fuses once the 32-column programs outnumber half the SMs, as TileLang does. Not at K = 64 (0.70 against
    0.67 unfused at B1 T32768 H32), nor on TileLang (1.40 against 1.23 fused alone at B1 T32768 H32)."""
    return backend == "triton" and kd == FUSED_WALK_MAX_K


def causal_scores(q, k, gc, index, backend):
    """Each chunk's causal exp(G_i - G_j) q k^T [1, tokens, HV, BT] in q's dtype."""
    b, t, h, kd = q.shape
    hv = gc.shape[2]
    scores = torch.empty(b, t, hv, BT, device=q.device, dtype=q.dtype)
    gdr_scores_kernel[(index.shape[0], hv)](q, k, gc, scores, index, H=h, HV=hv, K=kd, BK=block(kd, 64), BT=BT,
                                            backend=backend, num_warps=4)
    return scores


def walk_output(q, k, w, u, gc, scale, initial_state, cu, index, backend):
    """o [1, tokens, HV, V] and the final states [N, HV, K, V] fp32 from one pass over each sequence's chunks
    (K <= 128, see walk_writes_output), reading the causal scores from a pass before it where scores_ahead."""
    h, kd = k.shape[2:]
    hv, vd = u.shape[2], u.shape[3]
    if kd > FUSED_WALK_MAX_K:
        raise ValueError(f"the fused walk takes K <= {FUSED_WALK_MAX_K} (k's last size), got {kd}")
    given = scores_ahead(kd, backend)
    scores = causal_scores(q, k, gc, index, backend) if given else q      # not read without SCORES_GIVEN
    o = torch.empty(*u.shape, device=q.device, dtype=q.dtype)
    final, h0, bv = _walk_start(k, u, initial_state, cu)
    gdr_state_output_kernel[(vd // bv, cu.numel() - 1, hv)](
        q, k, w, u, gc, scores, h0, o, final, cu, scale, H=h, HV=hv, K=kd, V=vd, BV=bv, BT=BT,
        INITIAL=initial_state is not None, SCORES_GIVEN=given, READ_AHEAD=True, backend=backend,
        num_warps=state_warps(kd, bv), num_stages=fused_stages(backend))
    return o, final


def chunked_forward(q, k, v, g, beta, scale, initial_state, cu, backend):
    """(o, final state, G, Ai) from five kernels or six (see walk_writes_output and scores_ahead; cu: int32
    cumulative lengths over the flattened tokens)."""
    b, t = q.shape[:2]
    q, k, v, g, beta = packed_batch(q, k, v, g, beta)
    index, first = chunk_index(cu, b * t, backend)
    gc, ai = gates_and_inverse(k, g, beta, index, backend)
    hv, kd, vd = v.shape[2], k.shape[3], v.shape[3]
    if walk_writes_output(kd, vd, (cu.numel() - 1) * hv, k.device, backend):
        w, u = wy_vectors(k, v, beta, gc, ai, index, backend)
        o, final = walk_output(q, k, w, u, gc, scale, initial_state, cu, index, backend)
    else:
        _, _, states, v_new, final = states_and_updates(k, v, beta, gc, ai, initial_state, cu, index, first,
                                                        backend)
        o = output(q, k, v_new, states, gc, scale, index, backend)
    return o.view(b, t, *o.shape[2:]), final, gc.view(b, t, -1), ai.view(b, t, *ai.shape[2:])


def _eye(k, hv: int):
    """I for every value head [1, HV, K, K] fp32: a transition walk's start."""
    kd = k.shape[3]
    return torch.eye(kd, device=k.device, dtype=torch.float32).expand(1, hv, kd, kd).contiguous()


def transition(k, w, gc, cu, first, backend):
    """The transition M of the tokens of the one sequence cu = [start, end], S -> M S ([1, HV, K, K] fp32):
    from S = I, the state walk with no updates, which writes only its end."""
    h, kd = k.shape[2:]
    hv = w.shape[2]
    eye, end = _eye(k, hv), torch.empty(1, hv, kd, kd, device=k.device, dtype=torch.float32)
    bv = block(kd, 32)
    gdr_state_kernel[(kd // bv, 1, hv)](
        k, w, w, gc, eye, w, w, end, cu, first, H=h, HV=hv, K=kd, V=kd, BV=bv, BT=BT, INITIAL=True,
        UPDATES=False, READ_AHEAD=read_ahead(kd), backend=backend, num_warps=state_warps(kd, bv))
    return end


def transition_backward(q, k, w, gc, cu, first, backend):
    """M^T of the tokens of the one sequence cu = [start, end] ([1, HV, K, K] fp32): from dS = I at its end, the
    state gradient walked back with no output gradient, which writes only its start."""
    h, kd = k.shape[2:]
    hv = w.shape[2]
    eye, start = _eye(k, hv), torch.empty(1, hv, kd, kd, device=k.device, dtype=torch.float32)
    bv = block(kd, 32)
    gdr_state_backward_kernel[(kd // bv, 1, hv)](
        q, k, w, gc, w, w, eye, w, w, start, 1.0, cu, first, H=h, HV=hv, K=kd, V=kd, BV=bv, BT=BT,
        FINAL_GRAD=True, OUTPUT_GRAD=False, backend=backend, **state_backward_options(kd, bv, backend))
    return start


def local_dv(q, k, gc, do, scale, index, backend):
    """The output's share of dv_new within each chunk [B, T, HV, V] (do's dtype)."""
    b, t, h, kd = q.shape
    hv, vd = do.shape[2], do.shape[3]
    options = dv_local_options(vd, backend)
    dv_local = torch.empty(b, t, hv, vd, device=q.device, dtype=do.dtype)
    gdr_dv_local_kernel[(index.shape[0], hv, vd // options["BV"])](
        q, k, gc, do, dv_local, scale, index, H=h, HV=hv, K=kd, V=vd, BK=block(kd, 64), BT=BT, backend=backend,
        **options)
    return dv_local


def walk_back(q, k, w, gc, do, dv_local, scale, dfinal, cu, first, dstates, dv_new, backend):
    """The state gradient walked back over the sequences of `cu`, from `dfinal` [N, HV, K, V] fp32 (None: zeros):
    writes dS at each chunk's end into `dstates` and dv_new into `dv_new`; returns the initial states' gradient
    [N, HV, K, V] fp32."""
    h, kd = q.shape[2:]
    hv, vd = do.shape[2], do.shape[3]
    dh0 = torch.empty(cu.numel() - 1, hv, kd, vd, device=q.device, dtype=torch.float32)
    bvs = state_columns(kd, vd, dh0.shape[0] * hv, q.device)
    dht = dh0 if dfinal is None else dfinal                     # not read without one
    gdr_state_backward_kernel[(vd // bvs, cu.numel() - 1, hv)](
        q, k, w, gc, do, dv_local, dht, dstates, dv_new, dh0, scale, cu, first, H=h, HV=hv, K=kd, V=vd, BV=bvs, BT=BT,
        FINAL_GRAD=dfinal is not None, OUTPUT_GRAD=True, backend=backend, **state_backward_options(kd, bvs, backend))
    return dh0


def state_gradients(q, k, w, gc, do, scale, dfinal, cu, index, first, backend):
    """dv_local, then the state gradient walked back: (dS at each chunk's end [chunks, HV, K, V] (k's dtype),
    dv_new (k's dtype), the initial states' gradient (fp32))."""
    hv, vd = do.shape[2], do.shape[3]
    dv_local = local_dv(q, k, gc, do, scale, index, backend)
    dstates = torch.empty(index.shape[0], hv, q.shape[3], vd, device=q.device, dtype=k.dtype)
    dv_new = torch.empty(*do.shape, device=q.device, dtype=k.dtype)
    dh0 = walk_back(q, k, w, gc, do, dv_local, scale, dfinal, cu, first, dstates, dv_new, backend)
    return dstates, dv_new, dh0


def input_gradients(q, k, v, g, beta, gc, ai, do, scale, states, v_new, dstates, dv_new, index, backend):
    """(dq, dk, dv, dg, dbeta) from the chunk states, v_new and their gradients; dq and dk summed over the value
    heads that share a q/k head."""
    b, t, h, kd = q.shape
    hv, vd = v.shape[2], v.shape[3]
    tokens = b * t
    chunks = index.shape[0]
    dev = q.device
    bk, bv = block(kd, 64), block(vd, 64)
    # dq and dk per value head: in fp32 where several value heads share a head and are summed below
    shared = hv != h
    dq = torch.empty(b, t, hv, kd, device=dev, dtype=torch.float32 if shared else q.dtype)
    dk_out = torch.empty(b, t, hv, kd, device=dev, dtype=torch.float32)
    dw = torch.empty(b, t, hv, kd, device=dev, dtype=k.dtype)
    dg_parts = torch.empty(kd // bk, b, t, hv, device=dev, dtype=torch.float32)
    gdr_dqkwg_kernel[(chunks, hv, kd // bk)](
        q, k, v_new, gc, do, dv_new, states, dstates, dq, dk_out, dw, dg_parts, scale, index, tokens, H=h, HV=hv, K=kd,
        V=vd, BK=bk, BV=bv, BT=BT, backend=backend, num_warps=dqkwg_warps(bk, k.dtype, backend))
    dk = torch.empty(b, t, hv, kd, device=dev, dtype=torch.float32 if shared else k.dtype)
    dv = torch.empty_like(v)
    dbeta = torch.empty_like(beta)
    dg = torch.empty_like(g)
    gdr_wy_backward_kernel[(chunks, hv)](
        k, v, beta, gc, ai, dw, dv_new, dk_out, dg_parts, dk, dv, dbeta, dg, index, tokens, H=h, HV=hv, K=kd, V=vd,
        BK=bk, BV=bv, BT=BT, NK=kd // bk, backend=backend, num_warps=4, num_stages=wy_backward_stages(backend))
    if shared:
        dq = dq.view(b, t, h, hv // h, kd).sum(3).to(q.dtype)
        dk = dk.view(b, t, h, hv // h, kd).sum(3).to(k.dtype)
    return dq, dk, dv, dg, dbeta


def chunked_backward(q, k, v, g, beta, gc, ai, scale, initial_state, do, dfinal, cu, backend):
    """(dq, dk, dv, dg, dbeta, d initial state (fp32)) from the forward's G and Ai."""
    shapes = [x.shape for x in (q, k, v, g, beta)]
    q, k, v, g, beta, gc, ai, do = packed_batch(q, k, v, g, beta, gc, ai, do)
    index, first = chunk_index(cu, q.shape[1], backend)
    w, _, states, v_new, _ = states_and_updates(k, v, beta, gc, ai, initial_state, cu, index, first, backend)
    dstates, dv_new, dh0 = state_gradients(q, k, w, gc, do, scale, dfinal, cu, index, first, backend)
    grads = input_gradients(q, k, v, g, beta, gc, ai, do, scale, states, v_new, dstates, dv_new, index, backend)
    return (*(d.view(shape) for d, shape in zip(grads, shapes)), dh0)


def recurrent_forward(q, k, v, g, beta, scale, initial_state, cu, l2norm, backend):
    """(o, final state) of the recurrence token by token."""
    b, t = q.shape[:2]
    q, k, v, g, beta = packed_batch(q, k, v, g, beta)
    _, tokens, h, kd = q.shape
    hv, vd = v.shape[2], v.shape[3]
    n = cu.numel() - 1
    o = torch.empty(1, tokens, hv, vd, device=q.device, dtype=q.dtype)
    final = torch.empty(n, hv, kd, vd, device=q.device, dtype=torch.float32)
    bv = block(vd, 32)
    if n:
        h0 = final if initial_state is None else initial_state      # not read without one
        gdr_recurrent_kernel[(vd // bv, n, hv)](
            q, k, v, g, beta, h0, o, final, cu, scale, H=h, HV=hv, K=kd, V=vd, BV=bv, INITIAL=initial_state is not None,
            L2NORM=l2norm, backend=backend, num_warps=4)
    return o.view(b, t, hv, vd), final
