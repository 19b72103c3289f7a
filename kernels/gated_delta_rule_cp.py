"""Context parallelism for the gated delta rule: one packed batch split over the ranks of a process group.

Rank r of W holds tokens r T .. (r + 1) T of the global packed batch (T tokens each); cu_seqlens is the global
batch's. A sequence crossing from rank r - 1 into rank r continues there from the state rank r - 1 ended with.
The recurrence is linear in that state: over its tokens a rank maps an incoming state S to M S + S_ext, with
M [K, K] (the product of the tokens' exp(g)(I - beta k k^T)) and S_ext its own contribution from a zero state.
So the ranks do not pass the state along one after another:

1. the split kernel (`gdr_cp_split_kernel`) gives each rank its local cu_seqlens, which sequences start and
   end on it, and for every rank the sequence coming in from the rank before and the one going out to the next;
2. each rank computes (S_ext, M) of its outgoing piece: the chunked forward over it from the piece's own
   initial state (S_ext), and over it with v = 0 from I (M), the latter only where the piece came in too;
3. one all_gather of every rank's (S_ext, M);
4. each rank folds the ranks before it, S <- M_j S + S_ext_j, into the state its incoming sequence starts from
   (a piece that started on rank j has M_j = 0, which restarts the fold there), and runs the chunked forward
   over its tokens with it.

Rank 0 has nothing coming in: it runs its forward first and hands on its outgoing sequence's final state. The
last rank hands nothing on. The backward mirrors the forward through autograd: each rank's gradient of the
gathered (S_ext, M) is summed over the ranks (one all_reduce) and flows back through step 2.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import triton.language as tl

import tle

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
    gdr_cp_split_kernel[(world,)](cu.int(), local_cu, roles, links.view(-1), n, world, rank, local_tokens,
                                  BLOCK=SPLIT_BLOCK, backend=backend, num_warps=2)
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


class _Exchange(torch.autograd.Function):
    """all_gather of every rank's [HV, K, V + K] handoff into [W, HV, K, V + K]. Its gradient: each rank's
    gradient of the gathered tensor, summed over the ranks (all_reduce), at this rank's slice."""

    @staticmethod
    def forward(ctx, handoff, group):
        ctx.group = group
        parts = [torch.empty_like(handoff) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, handoff.contiguous(), group=group)
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad[dist.get_rank(ctx.group)], None


def _row(states: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """states[index] for a device index that may be -1 (none): zeros then, with no host sync."""
    return states[index.clamp(min=0)] * (index >= 0).to(states.dtype)


def chunk_forward(forward, q, k, v, g, beta, scale, initial_state, plan, group, state_dtype):
    """(o, final_state) of this rank's shard. `forward(q, k, v, g, beta, scale, h0, cu) -> (o, final)` is the
    differentiable chunked forward of one backend; `plan` the split's (local cu_seqlens, roles, links);
    `initial_state` [N, HV, K, V] or None, the same on every rank. final_state row n is sequence n's final
    state on the rank holding its last token, zeros on the others."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    _, local_tokens, hv, vd = v.shape
    kd = q.shape[3]
    local_cu, roles, links = plan
    n = local_cu.numel() - 1

    def role(bit):
        return (roles & bit).bool()[:, None, None, None].to(state_dtype)
    h0 = q.new_zeros(n, hv, kd, vd, dtype=state_dtype) if initial_state is None else \
        initial_state.to(state_dtype) * role(STARTS_HERE)
    incoming, outgoing = links[rank, 0].long(), links[rank, 1].long()

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
        spans = ((outgoing >= 0) & (outgoing == incoming)).to(state_dtype)
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
        return o + 0 * gathered.sum().to(o.dtype), final * role(ENDS_HERE)
    state = gathered[0, ..., :vd]                            # rank 0's piece starts there: M_0 = 0
    for j in range(1, rank):
        state = gathered[j, ..., vd:] @ state + gathered[j, ..., :vd]
    state = state * (incoming >= 0).to(state_dtype)
    start_states = h0.index_add(0, incoming.clamp(min=0).view(1), state[None])
    o, final = forward(q, k, v, g, beta, scale, start_states, local_cu)
    return o, final * role(ENDS_HERE)
