"""Context parallelism for the gated delta rule: one packed batch split over the ranks of a process group.

Rank r of W holds tokens r T .. (r + 1) T of the global packed batch (T tokens each); cu_seqlens is the global
batch's. A sequence crossing from rank r - 1 into rank r continues there from the state rank r - 1 ended with.
The recurrence is linear in that state: over its tokens a rank maps an incoming state S to M S + S_ext, with
M [K, K] the product of the tokens' exp(g)(I - beta k k^T) and S_ext the rank's own contribution. So the ranks
do not hand the state on one after another:

1. the split kernel (`gdr_cp_split_kernel`) gives each rank its local cu_seqlens, which sequences start and
   end on it, and for every rank the sequence coming in from the rank before and the one going out;
2. each rank computes its (S_ext, M): the final state of its outgoing piece, and M where that piece also came
   in (it spans the rank), else 0;
3. one all_gather of every rank's (S_ext, M);
4. each rank folds the ranks before it, S <- M_j S + S_ext_j, into the state its incoming sequence starts
   from (a piece that started on rank j has M_j = 0, which restarts the fold there).

On the kernel backends (`KernelContextParallel`) each rank walks its shard once and, beside it, the
transition M of its incoming piece (the state walk without updates, from I, which writes only its end). The
incoming piece is walked from zero only where its end state is handed on (the piece spans the rank); after step
4 it is walked again from its true incoming state, which rewrites its chunk states and updates, and the output
kernel runs. The backward mirrors it: the state gradient walked back once, the outgoing piece's transposed
transition beside it, one all_gather, the fold from the last rank down, and the outgoing piece walked back
again from its true end gradient.
On the torch backend (`chunk_forward`) the operator itself is composed: the forward over the outgoing piece
(twice: from its own initial state, and with v = 0 from I), the exchange, the forward with the true initial
state; autograd differentiates it, the exchange's gradient summed over the ranks (one all_reduce).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import triton.language as tl

import tle
from tle.kernels import gated_delta_rule_launch as launches

SPLIT_BLOCK = 64          # sequences a program of the split kernel reads at once
STARTS_HERE, ENDS_HERE = 1, 2


@tle.jit
def gdr_cp_split_kernel(cu_ptr, local_cu_ptr, roles_ptr, links_ptr, n_seqs, world, rank, local_tokens,
                        BLOCK: tl.constexpr):
    """Program p (a rank): links[p] = (the sequence coming into rank p from rank p - 1, the one going out to
    rank p + 1), -1 where none. Program `rank` also writes this rank's local cu_seqlens (each sequence clipped
    to the rank's tokens, empty where it has none there) and each sequence's roles: 1 if its initial state is
    read here (its first token is here; an empty sequence belongs where its position is), 2 if its final state
    is written here (its last token is here)."""
    p = tl.program_id(0)
    lo = p * local_tokens
    hi = lo + local_tokens
    incoming = tl.full([], -1, dtype=tl.int32)
    outgoing = tl.full([], -1, dtype=tl.int32)
    for s0 in range(0, n_seqs, BLOCK):
        n = s0 + tl.arange(0, BLOCK)
        ok = n < n_seqs
        start = tl.load(cu_ptr + n, mask=ok, other=0)
        end = tl.load(cu_ptr + n + 1, mask=ok, other=0)
        incoming = tl.maximum(incoming, tl.max(tl.where(ok & (start < lo) & (lo < end), n, -1), 0))
        outgoing = tl.maximum(outgoing, tl.max(tl.where(ok & (start < hi) & (hi < end), n, -1), 0))
        if p == rank:
            tl.store(local_cu_ptr + n, tl.minimum(tl.maximum(start - lo, 0), local_tokens), mask=ok)
            first_rank = tl.minimum(start // local_tokens, world - 1)
            last_rank = tl.where(end > start, (end + local_tokens - 1) // local_tokens - 1, first_rank)
            roles = tl.where(first_rank == p, STARTS_HERE, 0) + tl.where(last_rank == p, ENDS_HERE, 0)
            tl.store(roles_ptr + n, roles, mask=ok)
    if p == rank:
        tl.store(local_cu_ptr + n_seqs, tl.minimum(tl.maximum(tl.load(cu_ptr + n_seqs) - lo, 0), local_tokens))
    tl.store(links_ptr + 2 * p, incoming)
    tl.store(links_ptr + 2 * p + 1, outgoing)


def split_torch(cu: torch.Tensor, world: int, rank: int, local_tokens: int):
    """The split kernel's results in torch: (local cu_seqlens [N + 1], roles [N], links [W, 2]), int32."""
    cu = cu.long()
    start, end = cu[:-1], cu[1:]
    lo = torch.arange(world, device=cu.device)[:, None] * local_tokens
    none = torch.full_like(start, -1).expand(world, -1)
    seqs = torch.arange(start.numel(), device=cu.device).expand(world, -1)

    def crossing(at):
        return torch.where((start < at) & (at < end), seqs, none).max(1).values if start.numel() else \
            torch.full((world,), -1, device=cu.device)
    links = torch.stack([crossing(lo), crossing(lo + local_tokens)], 1)
    local_cu = (cu - rank * local_tokens).clamp(0, local_tokens)
    first_rank = (start // local_tokens).clamp(max=world - 1)
    last_rank = torch.where(end > start, (end + local_tokens - 1) // local_tokens - 1, first_rank)
    roles = (first_rank == rank).long() * STARTS_HERE + (last_rank == rank).long() * ENDS_HERE
    return local_cu.int(), roles.int(), links.int()


def split(cu: torch.Tensor, world: int, rank: int, local_tokens: int, backend: str):
    """(local cu_seqlens, roles, links) of `rank`, by the split kernel (or in torch on the torch backend)."""
    if backend == "torch":
        return split_torch(cu, world, rank, local_tokens)
    n = cu.numel() - 1
    local_cu = torch.empty(n + 1, device=cu.device, dtype=torch.int32)
    roles = torch.empty(n, device=cu.device, dtype=torch.int32)
    links = torch.empty(world, 2, device=cu.device, dtype=torch.int32)
    gdr_cp_split_kernel[(world,)](
        cu.int(), local_cu, roles, links.view(-1), n, world, rank, local_tokens, BLOCK=SPLIT_BLOCK, backend=backend,
        num_warps=2)
    return local_cu, roles, links


@tle.example(gdr_cp_split_kernel)
def _split_example(device, size):
    lengths = [0, 5, 70, 0, 1, 44, 40, 0] if size == "small" else [1000 + 37 * i for i in range(300)]
    world = 4 if size == "small" else 8
    total = sum(lengths)
    local_tokens = -(-total // world)
    lengths[-1] += world * local_tokens - total          # the batch fills the ranks' shards exactly
    cu = torch.tensor([0] + lengths, device=device, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    n = len(lengths)
    rank = 1
    # integer outputs start at a sentinel the kernel must overwrite (as float outputs start at NaN)
    local_cu = torch.full((n + 1,), -7, device=device, dtype=torch.int32)
    roles = torch.full((n,), -7, device=device, dtype=torch.int32)
    links = torch.full((world, 2), -7, device=device, dtype=torch.int32)
    ref = dict(zip(("local_cu", "roles", "links"), split_torch(cu.cpu(), world, rank, local_tokens)))
    return tle.Launch(grid=(world,), args=(cu, local_cu, roles, links.view(-1), n, world, rank, local_tokens),
                      kwargs=dict(BLOCK=SPLIT_BLOCK, num_warps=2),
                      outputs={"local_cu": local_cu, "roles": roles, "links": links}, reference=lambda: ref,
                      label=f"{n} sequences over {world} ranks")


def _gather(x: torch.Tensor, group) -> torch.Tensor:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.stack(parts)


def _fold(gathered: torch.Tensor, ranks, width: int) -> torch.Tensor:
    """S <- M_j S + S_j over `ranks` in order, from S = 0, with gathered[j] = [S_j | M_j] ([HV, K, width + K])."""
    state = torch.zeros_like(gathered[0, ..., :width])
    for j in ranks:
        state = gathered[j, ..., width:] @ state + gathered[j, ..., :width]
    return state


class _Exchange(torch.autograd.Function):
    """all_gather of every rank's [HV, K, V + K] handoff into [W, HV, K, V + K]. Its gradient: each rank's
    gradient of the gathered tensor, summed over the ranks (all_reduce), at this rank's slice."""

    @staticmethod
    def forward(ctx, handoff, group):
        ctx.group = group
        return _gather(handoff, group)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad[dist.get_rank(ctx.group)], None


def _row(states: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """states[index] for a device index that may be -1 (none): zeros then, with no host sync."""
    return states[index.clamp(min=0)] * (index >= 0).to(states.dtype)


def _role(roles: torch.Tensor, bit: int, dtype: torch.dtype) -> torch.Tensor:
    """1 for the sequences with role `bit` on this rank, else 0, shaped to scale states [N, 1, 1, 1]."""
    return (roles & bit).bool().view(-1, 1, 1, 1).to(dtype)


def _crossings(links: torch.Tensor, rank: int):
    """(incoming, outgoing, has_in, has_out, spans) of `rank`: its crossing sequences (device scalars, -1 for
    none), whether it has them, and whether one sequence is both (it spans the rank)."""
    incoming, outgoing = links[rank, 0].long(), links[rank, 1].long()
    has_in, has_out = incoming >= 0, outgoing >= 0
    return incoming, outgoing, has_in, has_out, has_in & (incoming == outgoing)


def chunk_forward(forward, q, k, v, g, beta, scale, initial_state, plan, group, state_dtype):
    """(o, final_state) of this rank's shard, the operator composed (the torch backend). Rank 0 has nothing
    coming in: it runs its forward first and hands on its outgoing sequence's final state; the last rank
    hands nothing on. `forward(q, k, v, g, beta, scale, h0, cu) -> (o, final)` is the
    differentiable chunked forward of one backend; `plan` the split's (local cu_seqlens, roles, links);
    `initial_state` [N, HV, K, V] or None, the same on every rank. final_state row n is sequence n's final
    state on the rank holding its last token, zeros on the others."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    _, local_tokens, hv, vd = v.shape
    kd = q.shape[3]
    local_cu, roles, links = plan
    n = local_cu.numel() - 1

    h0 = q.new_zeros(n, hv, kd, vd, dtype=state_dtype) if initial_state is None else \
        initial_state.to(state_dtype) * _role(roles, STARTS_HERE, state_dtype)
    incoming, outgoing, has_in, has_out, spans = _crossings(links, rank)

    def piece_final(values, state):
        """The final state, from `state`, of the outgoing piece (this rank's tokens from the piece's local
        start on), run as the second of two sequences (the first, the tokens before it, from zero)."""
        at = torch.where(outgoing >= 0, local_cu[outgoing.clamp(min=0)].long(), local_tokens)
        cu = torch.stack([torch.zeros_like(at), at, torch.full_like(at, local_tokens)]).int()
        _, final = forward(q, k, values, g, beta, scale, torch.stack([torch.zeros_like(state), state]), cu)
        return final[1]

    if rank == 0:
        o, final = forward(q, k, v, g, beta, scale, h0, local_cu)
        handoff = torch.cat([_row(final, outgoing), final.new_zeros(hv, kd, kd)], -1)
    elif rank < world - 1:
        spans = spans.to(state_dtype)
        own = _row(h0, outgoing) * (1 - spans)               # a piece that starts here starts from its own h0
        eye = torch.eye(kd, device=q.device, dtype=state_dtype).expand(hv, kd, kd) * spans
        handoff = torch.cat([piece_final(v, own), piece_final(q.new_zeros(1, local_tokens, hv, kd), eye)], -1)
    else:                                                    # the last rank hands nothing on
        handoff = q.new_zeros(hv, kd, vd + kd, dtype=state_dtype)
        if torch.is_grad_enabled() and any(x is not None and x.requires_grad
                                           for x in (q, k, v, g, beta, initial_state)):
            handoff.requires_grad_()                         # so that it takes part in the backward's all_reduce
    gathered = _Exchange.apply(handoff, group)
    if rank == 0:
        # rank 0 reads nothing back, yet takes part in the exchange's backward (its all_reduce): a zero term
        return o + 0 * gathered.sum().to(o.dtype), final * _role(roles, ENDS_HERE, state_dtype)
    state = _fold(gathered, range(rank), vd) * has_in.to(state_dtype)
    start_states = h0.index_add(0, incoming.clamp(min=0).view(1), state[None])
    o, final = forward(q, k, v, g, beta, scale, start_states, local_cu)
    return o, final * _role(roles, ENDS_HERE, state_dtype)


# -- the kernel backends: each rank walks its shard once, then walks again the piece that depends on another rank
def _emptied(cu: torch.Tensor, seqs: torch.Tensor, to: torch.Tensor) -> torch.Tensor:
    """cu with every entry where `seqs` holds set to `to`: the sequences bounded only by those entries made empty
    (a crossing piece the first walk skips), the others as they were."""
    return torch.where(seqs, to.to(cu.dtype), cu)


class KernelContextParallel(torch.autograd.Function):
    """The chunked forward and backward of one rank's shard on a kernel backend.

    Forward: the shard is walked once, and beside it the transition M of the incoming piece (its end map only).
    The incoming piece is skipped by that walk unless its end state from zero is handed on (it spans the rank).
    After the exchange and the fold give the true incoming state S, the piece is walked from S: its chunk states,
    updates and final state as the unsplit walk makes them; then the output kernel runs.
    Backward, mirrored: the state gradient is walked back once (the outgoing piece skipped unless it spans the
    rank, its end gradient taken as zero); beside it the piece's transposed transition; the exchange and the fold
    from the last rank give the true end gradient dS, from which the outgoing piece is walked back again."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, initial_state, scale, plan, group, backend):
        rank = dist.get_rank(group)
        local_cu, roles, links = plan
        t, hv, vd = v.shape[1:]
        kd = q.shape[3]
        n = local_cu.numel() - 1
        h0 = (q.new_zeros(n, hv, kd, vd, dtype=torch.float32) if initial_state is None
              else initial_state.float() * _role(roles, STARTS_HERE, torch.float32))
        incoming, outgoing, has_in, has_out, spans = _crossings(links, rank)
        index, first = launches.chunk_index(local_cu, t, backend)
        gc, ai = launches.gates_and_inverse(k, g, beta, index, backend)
        # the incoming piece (local tokens 0 .. end, sequence seq_in; the sequences before it are empty here):
        # the first walk skips it where it ends on this rank
        seq_in = incoming.clamp(min=0)
        end = local_cu[seq_in + 1] * has_in
        before = torch.arange(n + 1, device=q.device) <= seq_in
        walk_cu = _emptied(local_cu, before & has_in & ~spans, end)
        w, u, states, v_new, final = launches.states_and_updates(k, v, beta, gc, ai, h0, walk_cu, index, first,
                                                                 backend)
        piece = torch.stack([torch.zeros_like(end), end]).int()
        piece_first = first[seq_in].view(1)
        transition = launches.transition(k, w, gc, piece, piece_first, backend)
        gathered = _gather(torch.cat([_row(final, outgoing), transition[0] * spans], -1), group)
        shift = _fold(gathered, range(rank), vd) * has_in
        piece_final = launches.walk(k, w, u, gc, shift[None].contiguous(), piece, piece_first, states, v_new,
                                    backend)
        final[seq_in] = torch.where(has_in, piece_final[0], final[seq_in])
        o = launches.output(q, k, v_new, states, gc, scale, index, backend)
        ctx.save_for_backward(q, k, v, g, beta, gc, ai, h0.index_add(0, seq_in.view(1), shift[None]), local_cu,
                              roles, links)
        ctx.scale, ctx.group, ctx.backend = scale, group, backend
        ctx.initial_dtype = None if initial_state is None else initial_state.dtype
        return o, final * _role(roles, ENDS_HERE, torch.float32)

    @staticmethod
    def backward(ctx, do, dfinal):
        q, k, v, g, beta, gc, ai, h0, local_cu, roles, links = ctx.saved_tensors
        group, backend, scale = ctx.group, ctx.backend, ctx.scale
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        t, hv, vd = v.shape[1:]
        kd = q.shape[3]
        n = local_cu.numel() - 1
        do = torch.zeros_like(v) if do is None else do.contiguous()
        dht = torch.zeros_like(h0) if dfinal is None else \
            (dfinal.float() * _role(roles, ENDS_HERE, torch.float32)).contiguous()
        incoming, outgoing, has_in, has_out, spans = _crossings(links, rank)
        index, first = launches.chunk_index(local_cu, t, backend)
        w, _, states, v_new, _ = launches.states_and_updates(k, v, beta, gc, ai, h0, local_cu, index, first, backend)
        dv_local = launches.local_dv(q, k, gc, do, scale, index, backend)
        dstates = torch.empty(index.shape[0], hv, kd, vd, device=q.device, dtype=k.dtype)
        dv_new = torch.empty_like(v_new)
        # the outgoing piece (local tokens start .. t, sequence seq_out; the sequences after it are empty here):
        # the first walk back skips it where it starts on this rank
        seq_out = outgoing.clamp(min=0)
        start = torch.where(has_out, local_cu[seq_out], t)
        after = torch.arange(n + 1, device=q.device) > seq_out
        walk_cu = _emptied(local_cu, after & has_out & ~spans, start)
        dh0 = launches.walk_back(q, k, w, gc, do, dv_local, scale, dht, walk_cu, first, dstates, dv_new, backend)
        piece = torch.stack([start, torch.full_like(start, t)]).int()
        piece_first = first[seq_out].view(1)
        transition_t = launches.transition_backward(q, k, w, gc, piece, piece_first, backend)
        gathered = _gather(torch.cat([_row(dh0, incoming), transition_t[0] * spans], -1), group)
        shift = _fold(gathered, range(world - 1, rank, -1), vd) * has_out
        piece_dh0 = launches.walk_back(q, k, w, gc, do, dv_local, scale, shift[None].contiguous(), piece,
                                       piece_first, dstates, dv_new, backend)
        dh0[seq_out] = torch.where(has_out, piece_dh0[0], dh0[seq_out])
        dq, dk, dv, dg, dbeta = launches.input_gradients(q, k, v, g, beta, gc, ai, do, scale, states, v_new, dstates,
                                                         dv_new, index, backend)
        dinitial = None if ctx.initial_dtype is None else \
            (dh0 * _role(roles, STARTS_HERE, torch.float32)).to(ctx.initial_dtype)
        return dq, dk, dv, dg, dbeta, dinitial, None, None, None, None
