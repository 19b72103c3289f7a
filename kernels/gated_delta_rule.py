"""The gated delta rule (Gated DeltaNet's recurrent attention), with flash-linear-attention's API and layout.

`tle.ops.chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
use_qk_l2norm_in_kernel=False, cu_seqlens=None, cp_group=None, backend=None)` -> (o, final_state)
`tle.ops.fused_recurrent_gated_delta_rule(...)`, the same arguments: the recurrence token by token, for decoding

- q, k [B, T, H, K]; v [B, T, HV, V]; g (the decay, in log space) and beta [B, T, HV]; HV a multiple of H, value
  head hv reading q/k head hv // (HV // H). States [N, HV, K, V] in fp32: N = B, or with `cu_seqlens` (an int
  tensor [N + 1] of cumulative lengths, B = 1) the N packed sequences, each with its own state.
- Per sequence and value head, from S = initial_state (or 0):
      S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - exp(g_t) S_{t-1}^T k_t)^T,    o_t = scale S_t^T q_t
  scale defaults to K ** -0.5. use_qk_l2norm_in_kernel: q and k are first normalized, x rsqrt(sum(x^2) + 1e-6)
  (tle.ops.l2_norm).
- o [B, T, HV, V] in q's dtype; final_state [N, HV, K, V] fp32 (fp64 for fp64 inputs) when
  output_final_state, else None.

The chunked forward runs six kernels (kernels/gated_delta_rule_kernels.py has their mathematics): the chunk
list, the gated kk^T, its triangular solve, the WY vectors, the state recurrence over chunks, the output. Its
backward (kernels/gated_delta_rule_backward_kernels.py) runs the WY and state kernels again, then four of its
own: the output's dv, the state gradient walked back over the chunks, dq/dk/dw and the gates' gradient, and
the WY backward with the gates' reverse cumulative sum. It gives q, k, v, g, beta and initial_state their
gradients. The "torch" backend runs the same chunked mathematics in torch (tle.kernels.gated_delta_rule_torch).
fused_recurrent_gated_delta_rule is forward-only (decoding): differentiating it raises.
With `cp_group`, each rank passes its shard of one packed batch split over a torch.distributed group
(tle.kernels.gated_delta_rule_cp has how the ranks exchange their states).
"""
from __future__ import annotations

import math

import torch

import tle
from tle.kernels import gated_delta_rule_torch as reference_math
from tle.kernels.gated_delta_rule_backward_kernels import (gdr_dqkwg_kernel, gdr_dv_local_kernel,
                                                           gdr_state_backward_kernel, gdr_wy_backward_kernel)
from tle.kernels.gated_delta_rule_kernels import (BC, BT, gdr_chunk_index_kernel, gdr_kkt_kernel,
                                                  gdr_output_kernel, gdr_recurrent_kernel, gdr_scores_kernel,
                                                  gdr_solve_kernel, gdr_state_kernel, gdr_state_output_kernel,
                                                  gdr_wy_kernel)
from tle.kernels.gated_delta_rule_launch import INDEX_BLOCK, block as _block, packed as _packed, state_warps
from tle.kernels import gated_delta_rule_cp as context_parallel
from tle.kernels import gated_delta_rule_launch as launches
from tle.kernels.l2_norm import l2_norm
from tle.oplib import BenchSpec, Operator, Sample, Sweep, check_tensor
from tle.oplib.arith import cdiv
from tle.oplib.recipe import Recipe, Stage

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


# -- the kernel backends ------------------------------------------------------------------------------------
def _check_packing(cu: torch.Tensor, tokens: int) -> None:
    """The kernels index memory through cu_seqlens: refuse one that does not pack `tokens` tokens (one host sync)."""
    bad = (cu[0] != 0) | (cu[-1] != tokens) | (cu[1:] < cu[:-1]).any()
    if bool(bad):
        raise tle.LaunchError(f"'cu_seqlens' must start at 0, never decrease and end at the {tokens} tokens of "
                              f"the batch; got {cu.tolist() if cu.numel() <= 16 else 'another'}")


def _kernel_inputs(q, initial_state, cu_seqlens):
    """(cu_seqlens as the kernels read it, checked; the initial state in fp32 or None)."""
    b, t = q.shape[:2]
    cu = _packed(cu_seqlens, b, t, q.device)
    if cu_seqlens is not None:
        _check_packing(cu, b * t)
    return cu, None if initial_state is None else initial_state.float().contiguous()


def _chunk_kernels(q, k, v, g, beta, scale, initial_state, cu_seqlens, backend):
    cu, h0 = _kernel_inputs(q, initial_state, cu_seqlens)
    return launches.chunked_forward(q, k, v, g, beta, scale, h0, cu, backend)


def _chunk_backward_kernels(do, dfinal, q, k, v, g, beta, gc, ai, scale, initial_state, cu_seqlens, backend):
    cu, h0 = _kernel_inputs(q, initial_state, cu_seqlens)
    dfinal = None if dfinal is None else dfinal.float().contiguous()
    return launches.chunked_backward(q, k, v, g, beta, gc, ai, scale, h0, do, dfinal, cu, backend)


def _recurrent_kernels(q, k, v, g, beta, scale, initial_state, cu_seqlens, l2norm, backend):
    cu, h0 = _kernel_inputs(q, initial_state, cu_seqlens)
    return launches.recurrent_forward(q, k, v, g, beta, scale, h0, cu, l2norm, backend)


# -- the torch backend --------------------------------------------------------------------------------------
def _chunk_torch(q, k, v, g, beta, scale, initial_state, cu_seqlens):
    o, final = reference_math.chunked_forward(q, k, v, g, beta, scale, initial_state, True, cu_seqlens=cu_seqlens)
    _, kk, _, G, bb, _, _ = reference_math.prepare(q, k, v, g, beta, scale, None, cu_seqlens, BT)
    ai = reference_math.chunk_inverse(kk, G, bb, cu_seqlens)
    return o.to(q.dtype), final.to(state_dtype(q)), G.to(state_dtype(q)), ai.to(k.dtype)


def _chunk_backward_torch(do, dfinal, q, k, v, g, beta, gc, ai, scale, initial_state, cu_seqlens):
    """The chunked backward in torch; it recomputes G and Ai rather than reading the forward's."""
    if initial_state is None:
        initial_state = q.new_zeros(_sequences(q, cu_seqlens), v.shape[2], q.shape[3], v.shape[3],
                                    dtype=state_dtype(q))
    *grads, dh0 = reference_math.chunked_backward(q, k, v, g, beta, scale, initial_state, do, dfinal,
                                                  cu_seqlens=cu_seqlens)
    return (*grads, dh0.to(state_dtype(q)))


def _recurrent_torch(q, k, v, g, beta, scale, initial_state, cu_seqlens, l2norm):
    o, final = reference_math.recurrent(q, k, v, g, beta, scale, initial_state, True, cu_seqlens=cu_seqlens,
                                        use_qk_l2norm_in_kernel=l2norm)
    return o.to(q.dtype), final.to(state_dtype(q))


# -- the operators' recipes ---------------------------------------------------------------------------------
def _contiguous(*ts):
    return tuple(None if x is None else x.contiguous() for x in ts)


def _chunk_stage(run, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                 scale: float, initial_state: torch.Tensor | None,
                 cu_seqlens: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(o, final state, and for the backward G and Ai)."""
    return run(*_contiguous(q, k, v, g, beta), scale, *_contiguous(initial_state, cu_seqlens))


def _chunk_backward_stage(run, do: torch.Tensor, dfinal: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor,
                          v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, gc: torch.Tensor, ai: torch.Tensor,
                          scale: float, initial_state: torch.Tensor | None, cu_seqlens: torch.Tensor | None
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                     torch.Tensor]:
    """(dq, dk, dv, dg, dbeta, the initial state's gradient in fp32)."""
    return run(*_contiguous(do, dfinal, q, k, v, g, beta, gc, ai), scale, *_contiguous(initial_state, cu_seqlens))


def _recurrent_stage(run, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                     scale: float, initial_state: torch.Tensor | None, cu_seqlens: torch.Tensor | None,
                     l2norm: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return run(*_contiguous(q, k, v, g, beta), scale, *_contiguous(initial_state, cu_seqlens), l2norm)


def state_dtype(q: torch.Tensor) -> torch.dtype:
    """States (and the chunk gates kept for the backward) are fp32, fp64 for fp64 inputs (the torch backend)."""
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _outputs_fake(q, v, n):
    b, t, _, kd = q.shape
    return (q.new_empty(b, t, v.shape[2], v.shape[3]),
            q.new_empty(n, v.shape[2], kd, v.shape[3], dtype=state_dtype(q)))


def _chunk_fake(q, k, v, g, beta, scale, h0, cu):
    b, t, hv = g.shape
    return (*_outputs_fake(q, v, _sequences(q, cu)), g.new_empty(b, t, hv, dtype=state_dtype(q)),
            k.new_empty(b, t, hv, BT))


def _chunk_backward_fake(do, dfinal, q, k, v, g, beta, gc, ai, scale, h0, cu):
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(g),
            torch.empty_like(beta), _outputs_fake(q, v, _sequences(q, cu))[1])


def _chunk_save(ctx, inputs, output):
    q, k, v, g, beta, ctx.scale, h0, cu = inputs
    ctx.save_for_backward(q, k, v, g, beta, output[2], output[3], h0, cu)
    ctx.mark_non_differentiable(output[2], output[3])


def _chunk_grads(ctx, backward, do, dfinal, _dgc, _dai):
    q, k, v, g, beta, gc, ai, h0, cu = ctx.saved_tensors
    if do is None:
        do = q.new_zeros(*v.shape[:3], v.shape[3])
    dq, dk, dv, dg, dbeta, dh0 = backward(do, dfinal, q, k, v, g, beta, gc, ai, ctx.scale, h0, cu)
    return dq, dk, dv, dg, dbeta, None, (None if h0 is None else dh0.to(h0.dtype))


def _sequences(q, cu_seqlens):
    return q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1


CHUNK_GATED_DELTA_RULE = Recipe(
    "chunk_gated_delta_rule",
    forward=Stage(torch=_chunk_torch, kernels=_chunk_kernels, adapt=_chunk_stage, fake=_chunk_fake),
    backward=Stage(torch=_chunk_backward_torch, kernels=_chunk_backward_kernels, adapt=_chunk_backward_stage,
                   fake=_chunk_backward_fake),
    save=_chunk_save, grads=_chunk_grads)

FUSED_RECURRENT_GATED_DELTA_RULE = Recipe(
    "fused_recurrent_gated_delta_rule",
    forward=Stage(torch=_recurrent_torch, kernels=_recurrent_kernels, adapt=_recurrent_stage,
                  fake=lambda q, k, v, g, beta, scale, h0, cu, l2: _outputs_fake(q, v, _sequences(q, cu))))


# -- the public surface -------------------------------------------------------------------------------------
def _power_of_two_width(n: int) -> bool:
    return 16 <= n <= 256 and n & (n - 1) == 0


def check_inputs(op, q, k, v, g, beta, scale, initial_state, cu_seqlens) -> float:
    """The contract of both operators (FLA's); returns the scale to use."""
    floats = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    check_tensor(q, "q", dtypes=floats, rank=4)
    check_tensor(k, "k", dtypes=(q.dtype,), rank=4, device=q.device, shape=tuple(q.shape))
    check_tensor(v, "v", dtypes=(q.dtype,), rank=4, device=q.device)
    b, t, h, _ = q.shape
    if tuple(v.shape[:2]) != (b, t) or v.shape[2] == 0 or v.shape[2] % h:
        raise tle.LaunchError(f"tle.ops.{op}: 'v' has shape {tuple(v.shape)}; expected [{b}, {t}, HV, V] with HV "
                              f"a multiple of q's {h} heads")
    hv = v.shape[2]
    check_tensor(g, "g", dtypes=floats, rank=3, device=q.device, shape=(b, t, hv))
    check_tensor(beta, "beta", dtypes=floats, rank=3, device=q.device, shape=(b, t, hv))
    n = b
    if cu_seqlens is not None:
        check_tensor(cu_seqlens, "cu_seqlens", dtypes=(torch.int32, torch.int64), rank=1, device=q.device)
        if b != 1:
            raise tle.LaunchError(f"tle.ops.{op}: with 'cu_seqlens' the batch is packed: q has batch {b}, expected 1")
        if cu_seqlens.shape[0] < 1:
            raise tle.LaunchError(f"tle.ops.{op}: 'cu_seqlens' is empty; it holds N + 1 offsets")
        n = cu_seqlens.shape[0] - 1
    if initial_state is not None:
        check_tensor(initial_state, "initial_state", dtypes=floats, rank=4, device=q.device,
                     shape=(n, hv, q.shape[3], v.shape[3]))
    if scale is None:
        return q.shape[3] ** -0.5
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise tle.LaunchError(f"tle.ops.{op}: 'scale' must be a finite float or None, got {scale!r}")
    return float(scale)


def check_kernel_inputs(op, backend, q, v):
    """What the kernels take: fp16/bf16/fp32, K and V powers of two from 16 to 256, 32-bit offsets."""
    if backend == "torch":
        return
    if q.dtype not in KERNEL_DTYPES:
        raise tle.LaunchError(f"tle.ops.{op}: 'q' has dtype {str(q.dtype)[6:]}, which backend '{backend}' does not "
                              f"take (float16, bfloat16, float32; float64 runs on 'torch')")
    for name, width in (("K (q's last dim)", q.shape[3]), ("V (v's last dim)", v.shape[3])):
        if not _power_of_two_width(width):
            raise tle.LaunchError(f"tle.ops.{op}: backend '{backend}' takes {name} a power of two from 16 to 256, "
                                  f"got {width} (any runs on 'torch')")
    tokens = q.shape[0] * q.shape[1]
    if tokens * max(q.shape[2] * q.shape[3], v.shape[2] * max(v.shape[3], BT)) >= 2 ** 31:
        raise tle.LaunchError(f"tle.ops.{op}: {tokens} tokens of q {tuple(q.shape[2:])} and v "
                              f"{tuple(v.shape[2:])}; backend '{backend}' addresses them with 32-bit offsets")


def _prepare(op, recipe, q, k, v, g, beta, scale, initial_state, cu_seqlens, backend, fallback):
    scale = check_inputs(op, q, k, v, g, beta, scale, initial_state, cu_seqlens)
    b = recipe.resolve(q.device, backend, fallback)
    check_kernel_inputs(op, b, q, v)
    return scale, b


def chunk_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                           scale: float | None = None, initial_state: torch.Tensor | None = None,
                           output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                           cu_seqlens: torch.Tensor | None = None, cp_group=None, *, backend: str | None = None,
                           fallback: str | None = None):
    """The gated delta rule over whole sequences, in chunks of 64 tokens (the module docstring has the contract).
    Returns (o, final_state); final_state is None unless output_final_state. Differentiable in q, k, v, g,
    beta and initial_state. With `cp_group` (a torch.distributed process group), this rank's shard of a batch
    split over the group's ranks (tle.kernels.gated_delta_rule_cp)."""
    op = "chunk_gated_delta_rule"
    scale, b = _prepare(op, CHUNK_GATED_DELTA_RULE, q, k, v, g, beta, scale, initial_state, cu_seqlens, backend,
                        fallback)
    if use_qk_l2norm_in_kernel:
        q, k = l2_norm(q, backend=b), l2_norm(k, backend=b)
    if cp_group is not None:
        o, final = _context_parallel(q, k, v, g, beta, scale, initial_state, cu_seqlens, cp_group, b)
    else:
        o, final, _, _ = CHUNK_GATED_DELTA_RULE(q, k, v, g, beta, scale, initial_state, cu_seqlens, backend=b)
    return o, (final if output_final_state else None)


def _context_parallel(q, k, v, g, beta, scale, initial_state, cu_seqlens, group, backend):
    """This rank's (o, final_state) of a batch split over `group`: q .. beta its shard of T tokens, the global
    batch W T tokens long, cu_seqlens the global batch's (None: one sequence)."""
    op = "chunk_gated_delta_rule"
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        raise tle.LaunchError(f"tle.ops.{op}: 'cp_group' needs torch.distributed initialized")
    world, rank = torch.distributed.get_world_size(group), torch.distributed.get_rank(group)
    if q.shape[0] != 1:
        raise tle.LaunchError(f"tle.ops.{op}: with 'cp_group' each rank passes its shard of one packed batch: q "
                              f"has batch {q.shape[0]}, expected 1")
    tokens = world * q.shape[1]
    # made on the device (a copy from the host would wait for the stream's work: a host sync every call)
    cu = launches.packed(None, 1, tokens, q.device) if cu_seqlens is None else cu_seqlens.to(torch.int32)
    # a given cu_seqlens is checked (one host sync); the one made here needs none
    if cu_seqlens is not None and int(cu[-1]) != tokens:
        raise tle.LaunchError(f"tle.ops.{op}: 'cu_seqlens' ends at {int(cu[-1])} tokens; with 'cp_group' it is the "
                              f"global batch's: {world} ranks x {q.shape[1]} tokens = {tokens}")
    plan = context_parallel.split(cu, world, rank, q.shape[1], backend)
    if backend != "torch":
        return context_parallel.KernelContextParallel.apply(*_contiguous(q, k, v, g, beta, initial_state), scale,
                                                            plan, group, backend)

    # the torch backend: the operator itself, composed (see context_parallel.chunk_forward)
    def forward(q, k, v, g, beta, scale, h0, cu):
        return CHUNK_GATED_DELTA_RULE(*_contiguous(q, k, v, g, beta), scale, h0, cu, backend=backend)[:2]
    return context_parallel.chunk_forward(forward, q, k, v, g, beta, scale, initial_state, plan, group,
                                          state_dtype(q))


def fused_recurrent_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                                     beta: torch.Tensor, scale: float | None = None,
                                     initial_state: torch.Tensor | None = None, output_final_state: bool = False,
                                     use_qk_l2norm_in_kernel: bool = False, cu_seqlens: torch.Tensor | None = None,
                                     *, backend: str | None = None, fallback: str | None = None):
    """The gated delta rule token by token, for decoding a few tokens per call with the state carried between
    calls (initial_state in, final_state out). Forward only: it has no backward (train with
    chunk_gated_delta_rule). Returns (o, final_state); final_state is None unless output_final_state."""
    op = "fused_recurrent_gated_delta_rule"
    scale, b = _prepare(op, FUSED_RECURRENT_GATED_DELTA_RULE, q, k, v, g, beta, scale, initial_state, cu_seqlens,
                        backend, fallback)
    o, final = FUSED_RECURRENT_GATED_DELTA_RULE(q, k, v, g, beta, scale, initial_state, cu_seqlens,
                                                bool(use_qk_l2norm_in_kernel), backend=b)
    return o, (final if output_final_state else None)


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
# fp32 inputs still meet TF32 products (Triton's default for fp32 dots, TileLang's T.gemm): a few of them
# chained, as the solve and the state's walk do, keep about 2^-9 of the largest magnitude; bf16/fp16 inputs
# round w, u, Ai, v_new and the states to the dtype, as FLA does: about 2^-6.
EXAMPLE_ERROR = {torch.float32: 2 ** -9, torch.float16: 2 ** -6, torch.bfloat16: 2 ** -6}
EXAMPLE_ERROR_RTOL = {dtype: (err, err) for dtype, err in EXAMPLE_ERROR.items()}     # the operator tests' share


def _example_inputs(device, size):
    """A fixed batch (B sequences of T tokens, one partial chunk each), its inputs and their chunked mathematics
    in torch (fp32), by name: what each kernel's example feeds it and expects back."""
    b, t, h, hv, kd, vd, dtype = (2, 70, 1, 2, 16, 32, torch.float32) if size == "small" else \
        (2, 4100, 8, 16, 128, 128, torch.bfloat16)
    q = torch.randn(b, t, h, kd, device=device).to(dtype)
    k = torch.nn.functional.normalize(torch.randn(b, t, h, kd, device=device), dim=-1).to(dtype)
    v = torch.randn(b, t, hv, vd, device=device).to(dtype)
    g = torch.nn.functional.logsigmoid(torch.randn(b, t, hv, device=device)).to(dtype)
    beta = torch.rand(b, t, hv, device=device).to(dtype)
    h0 = torch.randn(b, hv, kd, vd, device=device)
    scale = kd ** -0.5
    qq, kk, vv, G, bb, _, _ = reference_math.prepare(q, k, v, g, beta, scale, h0, None, BT)
    qc, kc, vc, gcc, bc = reference_math.chunk_views(slice(None), slice(0, t), BT, qq, kk, vv, G, bb)
    a = reference_math.chunk_kkt(kc, gcc, bc)
    ai = reference_math.solve_unit_lower(a)
    w, u = reference_math.wy_vectors(ai, kc, vc, gcc, bc)
    starts, v_new, final = reference_math.chunk_states(kc, w, u, gcc, h0)
    o = reference_math.chunk_output(qc, kc, v_new, gcc, starts, scale)

    def flat(x):
        return reference_math.from_chunks(x, t)
    scores = reference_math.causal_decay(gcc) * (qc @ kc.transpose(-1, -2))
    math_ = dict(gc=G.float(), a=flat(a), ai=flat(ai), w=flat(w), u=flat(u), v_new=flat(v_new),
                 states=starts.movedim(1, 2).reshape(-1, hv, kd, vd), final=final, o=flat(o), scores=flat(scores))
    chunked = dict(q=qc, k=kc, v=vc, G=gcc, beta=bc, ai=ai, w=w, starts=starts, v_new=v_new)
    return dict(q=q, k=k, v=v, g=g, beta=beta, h0=h0, scale=scale, dims=(b, t, h, hv, kd, vd), dtype=dtype,
                cu=_packed(None, b, t, device), index=_example_index(b, t, device), math=math_, chunked=chunked)


def _example_index(b, t, device):
    """The chunk list of B sequences of T tokens, and their first chunks, as gdr_chunk_index_kernel makes them."""
    per = cdiv(t, BT)
    index = torch.tensor([[n * t + c * BT, min(n * t + c * BT + BT, (n + 1) * t)] for n in range(b) for c in range(per)],
                         dtype=torch.int32, device=device)
    first = torch.arange(0, (b + 1) * per, per, dtype=torch.int32, device=device)
    return index, first


def _nan(shape, device, dtype):
    return torch.full(shape, float("nan"), device=device, dtype=dtype)


def _example(case, grid, args, kwargs, outputs, names, warps=4, flops=0):
    """A Launch writing `outputs`, checked against the case's mathematics of the same names; its [B, T, ...]
    arguments passed as the launches pass them, the packed batch [1, B * T, ...]."""
    dtype = case["dtype"]
    ref = {name: case["math"][name].to(outputs[name].dtype) for name in names}
    err = EXAMPLE_ERROR[dtype]
    tolerances = {name: (err * float(r.abs().max()), err) for name, r in ref.items()}
    b, t, h, hv, kd, vd = case["dims"]

    def launched(a):
        if isinstance(a, torch.Tensor) and a.dim() >= 2 and tuple(a.shape[:2]) == (b, t):
            return launches.packed_batch(a)[0]
        return a
    return tle.Launch(grid=grid, args=tuple(launched(a) for a in args),
                      kwargs=dict(kwargs, num_warps=warps), outputs=outputs, reference=lambda: ref, flops=flops,
                      tolerances=tolerances, label=f"B{b} T{t} H{h} HV{hv} K{kd} V{vd} {str(dtype)[6:]}")


@tle.example(gdr_chunk_index_kernel)
def _chunk_index_example(device, size):
    lengths = [0, 1, 64, 65, 200, 0, 3] if size == "small" else [1000 + 37 * i for i in range(300)]
    cu = torch.tensor([0] + lengths, device=device, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    n = len(lengths)
    bounds = cu.tolist()
    ranges = [[bounds[s] + c * BT, min(bounds[s] + c * BT + BT, bounds[s + 1])] for s, length in enumerate(lengths)
              for c in range(cdiv(length, BT))]
    firsts = [0]
    for length in lengths:
        firsts.append(firsts[-1] + cdiv(length, BT))
    bound = cdiv(int(cu[-1]), BT) + n
    # Integer outputs start at a sentinel the kernel must overwrite (as float outputs start at NaN).
    index = torch.full((bound, 2), -7, device=device, dtype=torch.int32)
    first = torch.full((n + 1,), -7, device=device, dtype=torch.int32)
    ref_index = torch.zeros((bound, 2), dtype=torch.int32)
    ref_index[:len(ranges)] = torch.tensor(ranges, dtype=torch.int32)
    ref = {"index": ref_index, "first": torch.tensor(firsts, dtype=torch.int32)}
    return tle.Launch(grid=(n,), args=(cu, index, first, n, bound), kwargs=dict(BT=BT, BLOCK=INDEX_BLOCK, num_warps=2),
                      outputs={"index": index, "first": first}, reference=lambda: ref, label=f"{n} sequences")


@tle.example(gdr_kkt_kernel)
def _kkt_example(device, size):
    c = _example_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    gc, a = _nan((b, t, hv), device, torch.float32), _nan((b, t, hv, BT), device, torch.float32)
    index = c["index"][0]
    return _example(c, (index.shape[0], hv), (c["k"], c["g"], c["beta"], gc, a, index),
                    dict(H=h, HV=hv, K=kd, BK=_block(kd, 64), BT=BT), {"gc": gc, "a": a}, ("gc", "a"),
                    flops=2 * b * t * hv * BT * kd)


@tle.example(gdr_solve_kernel)
def _solve_example(device, size):
    c = _example_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    ai = _nan((b, t, hv, BT), device, c["dtype"])
    index = c["index"][0]
    return _example(c, (index.shape[0], hv), (c["math"]["a"].float().contiguous(), ai, index),
                    dict(HV=hv, BT=BT, BC=BC), {"ai": ai}, ("ai",), warps=2)


@tle.example(gdr_wy_kernel)
def _wy_example(device, size):
    c = _example_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    m = c["math"]
    w, u = _nan((b, t, hv, kd), device, c["dtype"]), _nan((b, t, hv, vd), device, c["dtype"])
    index = c["index"][0]
    return _example(c, (index.shape[0], hv),
                    (c["k"], c["v"], c["beta"], m["gc"].contiguous(), m["ai"].to(c["dtype"]).contiguous(), w, u,
                     index),
                    dict(H=h, HV=hv, K=kd, V=vd, BK=_block(kd, 64), BV=_block(vd, 64), BT=BT), {"w": w, "u": u},
                    ("w", "u"), flops=2 * b * t * hv * BT * (kd + vd))


@tle.example(gdr_state_kernel)
def _state_example(device, size):
    c = _example_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    m = c["math"]
    index, first = c["index"]
    states = _nan((index.shape[0], hv, kd, vd), device, c["dtype"])
    v_new = _nan((b, t, hv, vd), device, c["dtype"])
    final = _nan((b, hv, kd, vd), device, torch.float32)
    bv = _block(vd, 32)
    w, u = (m[name].to(c["dtype"]).contiguous() for name in ("w", "u"))
    return _example(c, (vd // bv, b, hv),
                    (c["k"], w, u, m["gc"].contiguous(), c["h0"], states, v_new, final, c["cu"], first),
                    dict(H=h, HV=hv, K=kd, V=vd, BV=bv, BT=BT, INITIAL=True, UPDATES=True),
                    {"states": states, "v_new": v_new, "final": final}, ("states", "v_new", "final"),
                    warps=max(1, min(4, kd * bv // 128)), flops=4 * b * t * hv * kd * vd)


@tle.example(gdr_output_kernel)
def _output_example(device, size):
    c = _example_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    m = c["math"]
    index = c["index"][0]
    o = _nan((b, t, hv, vd), device, c["dtype"])
    bv = _block(vd, 64)
    return _example(c, (index.shape[0], hv, vd // bv),
                    (c["q"], c["k"], m["v_new"].to(c["dtype"]).contiguous(), m["states"].to(c["dtype"]).contiguous(),
                     m["gc"].contiguous(), o, c["scale"], index),
                    dict(H=h, HV=hv, K=kd, V=vd, BK=_block(kd, 64), BV=bv, BT=BT), {"o": o}, ("o",),
                    flops=2 * b * t * hv * (kd * vd + BT * (kd + vd)))


@tle.example(gdr_state_output_kernel)
def _state_output_example(device, size):
    c = _example_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    m = c["math"]
    o = _nan((b, t, hv, vd), device, c["dtype"])
    final = _nan((b, hv, kd, vd), device, torch.float32)
    bv = _block(vd, 32)
    w, u = (m[name].to(c["dtype"]).contiguous() for name in ("w", "u"))
    return _example(c, (vd // bv, b, hv),
                    (c["q"], c["k"], w, u, m["gc"].contiguous(), c["q"], c["h0"], o, final, c["cu"], c["scale"]),
                    dict(H=h, HV=hv, K=kd, V=vd, BV=bv, BT=BT, INITIAL=True, SCORES_GIVEN=False),
                    {"o": o, "final": final},
                    ("o", "final"), warps=state_warps(kd, bv),
                    flops=2 * b * t * hv * (3 * kd * vd + BT * (kd + vd)))


@tle.example(gdr_scores_kernel)
def _scores_example(device, size):
    c = _example_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    scores = _nan((b, t, hv, BT), device, c["dtype"])
    index = c["index"][0]
    return _example(c, (index.shape[0], hv), (c["q"], c["k"], c["math"]["gc"].contiguous(), scores, index),
                    dict(H=h, HV=hv, K=kd, BK=_block(kd, 64), BT=BT), {"scores": scores}, ("scores",),
                    flops=2 * b * t * hv * BT * kd)


@tle.example(gdr_recurrent_kernel)
def _recurrent_example(device, size):
    c = _example_inputs(device, "small" if size == "small" else "large")
    b, t, h, hv, kd, vd = c["dims"]
    if size != "small":          # decoding: a few tokens of many sequences
        t = 4
        c = {**c, **{name: c[name][:, :t] for name in ("q", "k", "v", "g", "beta")}}
    o = _nan((b, t, hv, vd), device, c["dtype"])
    final = _nan((b, hv, kd, vd), device, torch.float32)
    ro, rfinal = reference_math.recurrent(*(c[name].float() for name in ("q", "k", "v", "g", "beta")), c["scale"],
                                          c["h0"], True)
    c = {**c, "dims": (b, t, h, hv, kd, vd), "math": {"o": ro, "final": rfinal}}
    bv = _block(vd, 32)
    return _example(c, (vd // bv, b, hv),
                    (c["q"], c["k"], c["v"], c["g"], c["beta"], c["h0"], o, final, _packed(None, b, t, device),
                     c["scale"]),
                    dict(H=h, HV=hv, K=kd, V=vd, BV=bv, INITIAL=True, L2NORM=False), {"o": o, "final": final},
                    ("o", "final"), flops=6 * b * t * hv * kd * vd)


def _example_backward_inputs(device, size):
    """The forward's example case with an upstream gradient (do, and dht for the final state) and the chunked
    backward's mathematics in torch (fp32), by name."""
    c = _example_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    do = torch.randn(b, t, hv, vd, device=device).to(c["dtype"])
    dht = torch.randn(b, hv, kd, vd, device=device)
    scale = c["scale"]
    x = c["chunked"]
    qc, kc, vc, gcc, bc, ai, w, starts, v_new = (x[name] for name in ("q", "k", "v", "G", "beta", "ai", "w",
                                                                      "starts", "v_new"))
    doc = reference_math.to_chunks(do.float(), BT)
    dv_local = reference_math.chunk_local_dv(qc, kc, gcc, doc, scale)
    dstate_ends, dv_new, dh0 = reference_math.chunk_states_backward(qc, kc, w, gcc, doc, dv_local, dht, scale)
    bk = _block(kd, 64)
    parts = [reference_math.chunk_dqkwg(qc[..., c0:c0 + bk], kc[..., c0:c0 + bk], v_new, gcc,
                                        starts[..., c0:c0 + bk, :], dstate_ends[..., c0:c0 + bk, :], doc, dv_new,
                                        scale) for c0 in range(0, kd, bk)]
    dq, dk_out, dw = (torch.cat([part[i] for part in parts], -1) for i in range(3))
    dk_wy, dv, dbeta, dG_wy = reference_math.wy_backward(kc, vc, gcc, bc, ai, dw, dv_new)

    def flat(x, fold=False):
        return reference_math.from_chunks(x, t, fold_padding=fold)
    dG = flat(dG_wy, True) + sum(flat(part[3], True) for part in parts)
    dg = reference_math.chunk_local_cumsum(dG, BT, reverse=True)

    def states(x):
        return x.movedim(1, 2).reshape(-1, hv, kd, vd)
    c["math"].update(dv_local=flat(dv_local), dstates=states(dstate_ends), dv_new=flat(dv_new), dh0=dh0,
                     dq=flat(dq), dk_out=flat(dk_out), dw=flat(dw), dg_parts=torch.stack([flat(p[3], True) for p in parts]),
                     dk=flat(dk_out + dk_wy), dv=flat(dv), dbeta=flat(dbeta), dg=dg)
    return dict(c, do=do, dht=dht)


def _given(c, name):
    """An intermediate of the mathematics as the kernels take it: in the inputs' dtype, contiguous."""
    return c["math"][name].to(c["dtype"]).contiguous()


@tle.example(gdr_dv_local_kernel)
def _dv_local_example(device, size):
    c = _example_backward_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    index = c["index"][0]
    dv = _nan((b, t, hv, vd), device, c["dtype"])
    bv = _block(vd, 64)
    return _example(c, (index.shape[0], hv, vd // bv),
                    (c["q"], c["k"], c["math"]["gc"].contiguous(), c["do"], dv, c["scale"], index),
                    dict(H=h, HV=hv, K=kd, V=vd, BK=_block(kd, 64), BV=bv, BT=BT), {"dv_local": dv}, ("dv_local",),
                    flops=2 * b * t * hv * BT * (kd + vd))


@tle.example(gdr_state_backward_kernel)
def _state_backward_example(device, size):
    c = _example_backward_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    index, first = c["index"]
    dstates = _nan((index.shape[0], hv, kd, vd), device, c["dtype"])
    dv_new = _nan((b, t, hv, vd), device, c["dtype"])
    dh0 = _nan((b, hv, kd, vd), device, torch.float32)
    bv = _block(vd, 32)
    return _example(c, (vd // bv, b, hv),
                    (c["q"], c["k"], _given(c, "w"), c["math"]["gc"].contiguous(), c["do"], _given(c, "dv_local"),
                     c["dht"], dstates, dv_new, dh0, c["scale"], c["cu"], first),
                    dict(H=h, HV=hv, K=kd, V=vd, BV=bv, BT=BT, FINAL_GRAD=True, OUTPUT_GRAD=True, SPLIT_Q=True),
                    {"dstates": dstates, "dv_new": dv_new, "dh0": dh0}, ("dstates", "dv_new", "dh0"),
                    warps=state_warps(kd, bv), flops=6 * b * t * hv * kd * vd)


@tle.example(gdr_dqkwg_kernel)
def _dqkwg_example(device, size):
    c = _example_backward_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    index = c["index"][0]
    bk = _block(kd, 64)
    dq, dk, dw = (_nan((b, t, hv, kd), device, dtype) for dtype in (torch.float32, torch.float32, c["dtype"]))
    dg = _nan((kd // bk, b, t, hv), device, torch.float32)
    return _example(c, (index.shape[0], hv, kd // bk),
                    (c["q"], c["k"], _given(c, "v_new"), c["math"]["gc"].contiguous(), c["do"], _given(c, "dv_new"),
                     _given(c, "states"), _given(c, "dstates"), dq, dk, dw, dg, c["scale"], index, b * t),
                    dict(H=h, HV=hv, K=kd, V=vd, BK=bk, BV=_block(vd, 64), BT=BT),
                    {"dq": dq, "dk_out": dk, "dw": dw, "dg_parts": dg}, ("dq", "dk_out", "dw", "dg_parts"),
                    flops=2 * b * t * hv * (BT * vd + 3 * kd * vd + 2 * BT * kd))


@tle.example(gdr_wy_backward_kernel)
def _wy_backward_example(device, size):
    c = _example_backward_inputs(device, size)
    b, t, h, hv, kd, vd = c["dims"]
    m = c["math"]
    index = c["index"][0]
    bk = _block(kd, 64)
    dk = _nan((b, t, hv, kd), device, torch.float32)
    dv = _nan((b, t, hv, vd), device, c["dtype"])
    dbeta, dg = _nan((b, t, hv), device, c["dtype"]), _nan((b, t, hv), device, c["dtype"])
    return _example(c, (index.shape[0], hv),
                    (c["k"], c["v"], c["beta"], m["gc"].contiguous(), _given(c, "ai"), _given(c, "dw"),
                     _given(c, "dv_new"), m["dk_out"].contiguous(), m["dg_parts"].float().contiguous(), dk, dv, dbeta,
                     dg, index, b * t),
                    dict(H=h, HV=hv, K=kd, V=vd, BK=bk, BV=_block(vd, 64), BT=BT, NK=kd // bk),
                    {"dk": dk, "dv": dv, "dbeta": dbeta, "dg": dg}, ("dk", "dv", "dbeta", "dg"),
                    flops=2 * b * t * hv * BT * (4 * kd + 2 * vd + 2 * BT))


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    """The tests' ground truth: the recurrence token by token in plain torch (differentiable)."""
    return reference_math.recurrent(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens=cu_seqlens,
                                    use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)


def samples(device, dtype):
    gen = torch.Generator().manual_seed(0)

    def case(b, t, h, hv, kd, vd, lengths=None, initial=True, label="", **kw):
        n = b if lengths is None else len(lengths)
        q = torch.randn(b, t, h, kd, generator=gen)
        k = torch.nn.functional.normalize(torch.randn(b, t, h, kd, generator=gen), dim=-1)
        v = torch.randn(b, t, hv, vd, generator=gen)
        g = torch.nn.functional.logsigmoid(torch.randn(b, t, hv, generator=gen))
        beta = torch.rand(b, t, hv, generator=gen)
        args = tuple(x.to(device, dtype) for x in (q, k, v, g, beta))
        kwargs = dict(output_final_state=True, **kw)
        if initial:
            kwargs["initial_state"] = torch.randn(n, hv, kd, vd, generator=gen).to(device, state_dtype(args[0]))
        if lengths is not None:
            kwargs["cu_seqlens"] = torch.tensor([0] + lengths, device=device).cumsum(0)
        return Sample(args, kwargs, label=label)
    return [case(2, 70, 1, 2, 16, 32, label="two sequences of 70 tokens, grouped value heads"),
            case(1, 70, 2, 2, 16, 16, lengths=[1, 0, 65, 4], initial=False,
                 label="packed lengths 1, 0, 65, 4, no initial state"),
            case(2, 1, 1, 1, 32, 16, scale=0.5, use_qk_l2norm_in_kernel=True, label="one token, q/k normalized"),
            case(1, 9, 1, 2, 16, 16, lengths=[3, 0, 6], label="packed lengths 3, 0, 6 (small enough for gradcheck)")]


def _mixed_lengths(total: int, n: int) -> list[int]:
    """n sequence lengths summing to `total`, from about a sixth to about twice the mean (a fixed pattern)."""
    weights = [1 + 7 * i % 11 for i in range(n)]
    lengths = [max(1, total * w // sum(weights)) for w in weights]
    lengths[-1] += total - sum(lengths)
    return lengths


def _bench_make(shape, dtype, device):
    """shape (B, T, H, D), or (1, T, H, D, N): N packed sequences of mixed lengths."""
    b, t, h, d = shape[:4]
    q = torch.randn(b, t, h, d, device=device, dtype=dtype)
    k = torch.nn.functional.normalize(torch.randn(b, t, h, d, device=device), dim=-1).to(dtype)
    v = torch.randn(b, t, h, d, device=device, dtype=dtype)
    g = torch.nn.functional.logsigmoid(torch.randn(b, t, h, device=device))    # fp32, as models keep the gates
    beta = torch.rand(b, t, h, device=device).to(dtype)
    kwargs = dict(output_final_state=True)
    if len(shape) > 4:
        lengths = torch.tensor([0] + _mixed_lengths(t, shape[4]), device=device)
        kwargs["cu_seqlens"] = lengths.cumsum(0)
    return Sample((q, k, v, g, beta), kwargs)


def _decode_make(shape, dtype, device):
    """shape (N, T, H, D): N sequences decoding T tokens each from a state."""
    sample = _bench_make(shape, dtype, device)
    n, _, h, d = shape
    return Sample(sample.args, dict(sample.kwargs, initial_state=torch.randn(n, h, d, d, device=device)))


def _decode_bytes(sample, mode):
    """The states read and written (fp32) and the tokens' q, k, v, o."""
    q, v = sample.args[0], sample.args[2]
    return 2 * sample.kwargs["initial_state"].numel() * 4 + (3 * q.numel() + v.numel()) * q.element_size()


def _decode_eager(sample):
    q, k, v, g, beta = sample.args
    return lambda: reference_math.recurrent(q, k, v, g, beta, None, sample.kwargs["initial_state"], True)


def _fla_decode_peer(sample):
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_recurrent
    q, k, v, g, beta = sample.args
    return lambda: fla_recurrent(q, k, v, g, beta, initial_state=sample.kwargs["initial_state"],
                                 output_final_state=True)


def _bench_flops(sample, mode):
    """The chunked passes' products, per token of a head (chunks of C tokens). Forward: kk^T, the WY vectors,
    the state's two products and the output's, 2CK + 2C(K+V) + 4KV + 2(KV + C(K+V)). Backward: the WY vectors
    and the state walk again, then dv_local 2C(K+V), the state gradient 6KV, dq/dk/dw 2CV + 6KV + 4CK, the WY
    backward 2C(5K+2V) + 8C^2."""
    q, v = sample.args[0], sample.args[2]
    b, t, hv, vd = v.shape
    kd = q.shape[3]
    c = BT
    forward = 2 * c * kd + 2 * c * (kd + vd) + 4 * kd * vd + 2 * (kd * vd + c * (kd + vd))
    backward = (2 * c * (kd + vd) + 4 * kd * vd + 2 * c * (kd + vd) + 6 * kd * vd + 2 * c * vd + 6 * kd * vd
                + 4 * c * kd + 2 * c * (5 * kd + 2 * vd) + 8 * c * c)
    per_token = forward if mode == "fwd" else backward if mode == "bwd" else forward + backward
    return b * t * hv * per_token


_BENCH_REFERENCES: dict = {}


def _bench_check(sample, outputs, grads, upstream):
    """Each output within 2^-6 and each gradient within 2^-5 of the largest magnitude of its reference: the
    chunked mathematics in torch on the inputs cast to fp32, with the same upstream gradients."""
    q = sample.args[0]
    key = (q.data_ptr(), tuple(q.shape), bool(grads))
    if key not in _BENCH_REFERENCES:
        _BENCH_REFERENCES.clear()                  # one case at a time: the last one's references go
        leaves = [x.detach().float().requires_grad_(bool(grads)) for x in sample.args]
        with torch.enable_grad():
            outs = reference_math.chunked_forward(*leaves, None, None, True,
                                                  cu_seqlens=sample.kwargs.get("cu_seqlens"))
            ref_grads = (torch.autograd.grad(outs, leaves, [u.float() for u in upstream]) if grads else ())
        _BENCH_REFERENCES[key] = ([o.detach() for o in outs], ref_grads)
    ref_outs, ref_grads = _BENCH_REFERENCES[key]
    worst = 0.0
    for what, got, ref, bound in ([(f"output {i}", o, r, 2 ** -6) for i, (o, r) in enumerate(zip(outputs, ref_outs))]
                                  + [(name, g_, r, 2 ** -5) for name, g_, r in zip(("dq", "dk", "dv", "dg", "dbeta"),
                                                                                  grads, ref_grads)]):
        err = ((got.float() - ref).abs().max() / ref.abs().max()).item()
        assert err < bound, f"{what}: error {err:.3g} of the largest magnitude, beyond {bound:g}"
        worst = max(worst, err)
    return worst


def _eager(sample):
    q, k, v, g, beta = sample.args

    return lambda: reference_math.chunked_forward(q, k, v, g, beta, None, None, True,
                                                  cu_seqlens=sample.kwargs.get("cu_seqlens"))


def _fla_peer(sample):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
    q, k, v, g, beta = sample.args
    return lambda: fla_chunk(q, k, v, g, beta, output_final_state=True, cu_seqlens=sample.kwargs.get("cu_seqlens"))


OPERATOR = (
    Operator("chunk_gated_delta_rule", fn=chunk_gated_delta_rule, reference=reference, samples=samples,
             grad_inputs=(0, 1, 2, 3, 4, "initial_state"),
             dtypes=(torch.float16, torch.bfloat16, torch.float32), tolerances=EXAMPLE_ERROR_RTOL,
             bench=BenchSpec(dry_shapes=[(1, 128, 2, 64), (1, 256, 2, 64, 4)],
                             shapes=[(1, 32768, 32, 128), (4, 4096, 16, 128), (1, 32768, 32, 128, 64), (1, 32768, 32, 64),
                                     (1, 16384, 16, 256)],
                             make=_bench_make, flops=_bench_flops, eager=_eager, peers={"fla": _fla_peer},
                             check=_bench_check,
                             shape_help="BxTxHxD, or 1xTxHxDxN: N packed sequences of mixed lengths",
                             sweep=Sweep("T", (1, 32768, 32, 128), 1, (4096, 8192, 16384, 32768, 65536)))),
    Operator("fused_recurrent_gated_delta_rule", fn=fused_recurrent_gated_delta_rule, reference=reference,
             samples=samples, forward_only="a decoding operator: train with chunk_gated_delta_rule",
             dtypes=(torch.float16, torch.bfloat16, torch.float32), tolerances=EXAMPLE_ERROR_RTOL,
             bench=BenchSpec(dry_shapes=[(2, 1, 2, 64), (2, 3, 2, 64)],
                             shapes=[(64, 1, 32, 128), (256, 1, 32, 128), (64, 4, 32, 128)], make=_decode_make,
                             bytes=_decode_bytes, eager=_decode_eager, peers={"fla": _fla_decode_peer},
                             shape_help="NxTxHxD")),
)
