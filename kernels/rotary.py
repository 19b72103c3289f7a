"""Rotary position embedding of queries and keys, forward and backward (the form of Hugging Face's
apply_rotary_pos_emb and Liger's liger_rotary_pos_emb).

    out = x * cos + rotate(x) * sin          over the first R = cos.shape[-1] features of each head; the rest
                                             of the head (partial rotary, R < D) passes through
    rotate: the half-split form   (x1, x2) -> (-x2, x1),   x1 = x[:R/2], x2 = x[R/2:R]     (Llama, NeoX)
            the interleaved form  pairs (x[2i], x[2i+1]) -> (-x[2i+1], x[2i])           (GPT-J, interleaved=True)

`tle.ops.apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, *, interleaved=False)`
returns (q_embed, k_embed). q [B, Hq, S, D] and k [B, Hk, S, D] with unsqueeze_dim=1 (cos [B, S, R] is
broadcast over the heads), or [B, S, Hq, D] / [B, S, Hk, D] with unsqueeze_dim=2; cos and sin [B or 1, S, R]
or [S, R]; with position_ids [B or 1, S], cos and sin are tables [P, R] and row position_ids[b, s] is taken
(the older Hugging Face form). cos and sin are not differentiated (a cos or sin that requires grad is an
error); the outputs have q's and k's dtype, computed in fp32 and rounded once.

The kernel: one program per tile of BLOCK_S consecutive positions of one batch entry and a group of HEADS heads
(grid (B * cdiv(S, BLOCK_S), H / HEADS); q and k are two launches). It reads the tile's cos and sin once, as
[BLOCK_S, R/2] halves, and rotates its heads one after another, each head's halves read as [BLOCK_S, R/2] tiles
by strides, so both layouts are read in place (TILES picks the tile by which of them x has). The backward is
the same kernel with the rotation transposed:
    dx1 = g1 * cos1 + g2 * sin2,    dx2 = g2 * cos2 - g1 * sin1."""
from __future__ import annotations

from typing import Optional

import torch
import triton.language as tl

import tle
from tle.checks import check_tensor
from tle.oplib import BenchSpec, Operator, Sample, check_float, check_kernel_dtypes
from tle.oplib.arith import cdiv, next_power_of_2
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype

POSITION_DTYPES = (torch.int64, torch.int32)
# (BLOCK_S, HEADS, num_warps) of a launch, by which rows of x are contiguous. [B, H, S, D]: a head's positions, so
# a program reads HEADS runs of BLOCK_S * D elements; 16 positions x 4 heads (16 KB of bf16 read at D = 128) hold
# the angles in 64 registers a thread, fit eight programs on an SM and launch thousands of programs at Llama's
# shapes. [B, S, H, D]: a position's heads, so more heads and fewer positions make a program's reads one run of
# BLOCK_S * HEADS * D elements.
TILES = {"heads outer": (16, 4, 4), "positions outer": (8, 16, 2)}


@tle.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, pos_ptr, out_ptr, sx_b, sx_s, sx_h, so_b, so_s, so_h, sc_b, sc_s,
                sp_b, sp_s, n_seq, half, n_dim, BLOCK_S: tl.constexpr, HEADS: tl.constexpr, BLOCK_D: tl.constexpr,
                BLOCK_T: tl.constexpr, INTERLEAVED: tl.constexpr, HAS_POS: tl.constexpr, BACKWARD: tl.constexpr,
                PARTIAL: tl.constexpr):
    # x and out addressed as [B, S, H, D] by their strides (the feature stride is 1). Program (i, j): positions
    # [s0, s0 + BLOCK_S) of batch entry b = i // cdiv(S, BLOCK_S), heads [j * HEADS, (j + 1) * HEADS) (HEADS
    # divides H). cos and sin rows [R] at b * sc_b + s * sc_s, or with HAS_POS at row pos[b, s] of a table
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(n_seq, BLOCK_S)
    b = pid // n_tiles
    s0 = (pid % n_tiles) * BLOCK_S
    h0 = tl.program_id(1) * HEADS
    seq = s0 + tl.arange(0, BLOCK_S)
    in_seq = seq < n_seq
    if HAS_POS:
        rows = tl.load(pos_ptr + b * sp_b + seq * sp_s, mask=in_seq, other=0).to(tl.int64) * sc_s
    else:
        rows = b.to(tl.int64) * sc_b + seq.to(tl.int64) * sc_s
    j = tl.arange(0, BLOCK_D)
    if INTERLEAVED:
        i1 = 2 * j
        i2 = 2 * j + 1
    else:
        i1 = j
        i2 = j + half
    mask = in_seq[:, None] & (j < half)[None, :]
    # the angles of the tile, read once for all HEADS heads
    c1 = tl.load(cos_ptr + rows[:, None] + i1[None, :], mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + rows[:, None] + i2[None, :], mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + rows[:, None] + i1[None, :], mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + rows[:, None] + i2[None, :], mask=mask, other=0.0).to(tl.float32)
    x_tile = x_ptr + b.to(tl.int64) * sx_b + seq.to(tl.int64)[:, None] * sx_s
    o_tile = out_ptr + b.to(tl.int64) * so_b + seq.to(tl.int64)[:, None] * so_s
    for i in range(HEADS):
        h = h0 + i
        xh = x_tile + h.to(tl.int64) * sx_h
        oh = o_tile + h.to(tl.int64) * so_h
        x1 = tl.load(xh + i1[None, :], mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(xh + i2[None, :], mask=mask, other=0.0).to(tl.float32)
        if BACKWARD:
            y1 = x1 * c1 + x2 * s2
            y2 = x2 * c2 - x1 * s1
        else:
            y1 = x1 * c1 - x2 * s1
            y2 = x2 * c2 + x1 * s2
        tl.store(oh + i1[None, :], y1.to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(oh + i2[None, :], y2.to(out_ptr.dtype.element_ty), mask=mask)
        if PARTIAL:             # the features past the rotated ones pass through
            t = 2 * half + tl.arange(0, BLOCK_T)
            tmask = in_seq[:, None] & (t < n_dim)[None, :]
            tl.store(oh + t[None, :], tl.load(xh + t[None, :], mask=tmask, other=0.0), mask=tmask)


# -- the torch backend: the same arithmetic in fp32 (fp64 for fp64 inputs) ----------------------------------
def _rotate(x, interleaved):
    if interleaved:
        return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate_transposed(g, interleaved):
    """The adjoint of _rotate: (g1, g2) -> (g2, -g1) (pairwise for the interleaved form)."""
    if interleaved:
        return torch.stack((g[..., 1::2], -g[..., 0::2]), dim=-1).flatten(-2)
    half = g.shape[-1] // 2
    return torch.cat((g[..., half:], -g[..., :half]), dim=-1)


def _tables(cos, sin, position_ids, unsqueeze_dim, ct):
    """cos and sin as they broadcast against x."""
    if position_ids is not None:
        cos, sin = cos[position_ids.long()], sin[position_ids.long()]
    elif cos.dim() == 2:
        cos, sin = cos[None], sin[None]
    return cos.to(ct).unsqueeze(unsqueeze_dim), sin.to(ct).unsqueeze(unsqueeze_dim)


def _torch_rope(x, cos, sin, position_ids, unsqueeze_dim, interleaved, backward):
    ct = torch_compute_dtype(x)
    c, s = _tables(cos, sin, position_ids, unsqueeze_dim, ct)
    r = c.shape[-1]
    xf = x.to(ct)
    head, tail = xf[..., :r], xf[..., r:]
    if backward:       # out = x c + rot(x) s  ->  dx = g c + rot^T(g s)
        y = head * c + _rotate_transposed(head * s, interleaved)
    else:
        y = head * c + _rotate(head, interleaved) * s
    return torch.cat((y, tail), dim=-1).to(x.dtype)


def _torch_forward(q, k, cos, sin, position_ids, unsqueeze_dim, interleaved):
    return tuple(_torch_rope(x, cos, sin, position_ids, unsqueeze_dim, interleaved, False) for x in (q, k))


def _torch_backward(dq, dk, cos, sin, position_ids, unsqueeze_dim, interleaved):
    return tuple(_torch_rope(g, cos, sin, position_ids, unsqueeze_dim, interleaved, True) for g in (dq, dk))


# -- the kernel backends ------------------------------------------------------------------------------------
def _bshd(x, unsqueeze_dim):
    """x as [B, S, H, D] (a view: unsqueeze_dim 1 means x is [B, H, S, D])."""
    return x.transpose(1, 2) if unsqueeze_dim == 1 else x


def _tiling(xv):
    """(BLOCK_S, HEADS, num_warps) for x viewed as [B, S, H, D], from TILES."""
    _, s, h, _ = xv.shape
    block_s, heads, warps = TILES["heads outer" if xv.stride(2) >= xv.stride(1) else "positions outer"]
    block_s = min(block_s, next_power_of_2(s))
    heads = max(g for g in range(1, min(heads, h) + 1) if h % g == 0)      # a divisor: no head is masked
    return block_s, heads, warps


def _launch(x, cos, sin, position_ids, unsqueeze_dim, interleaved, backward, backend):
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    xv, ov = _bshd(x, unsqueeze_dim), _bshd(out, unsqueeze_dim)
    b, s, h, d = xv.shape
    if xv.numel() == 0:
        return out
    r = cos.shape[-1]
    half = r // 2
    if position_ids is not None:
        pos = position_ids if position_ids.dim() == 2 else position_ids[None]
        sc_b, sc_s = 0, cos.stride(0)
        sp_b, sp_s = (pos.stride(0) if pos.shape[0] > 1 else 0), pos.stride(1)
    else:
        pos = cos                                         # not read
        c3 = cos if cos.dim() == 3 else cos[None]
        sc_b, sc_s = (c3.stride(0) if c3.shape[0] > 1 else 0), c3.stride(1)
        sp_b = sp_s = 0
    block_d = max(1, next_power_of_2(half))
    block_s, heads, warps = _tiling(xv)
    partial = r < d
    block_t = next_power_of_2(d - r) if partial else 1
    grid = (b * cdiv(s, block_s), h // heads)
    rope_kernel[grid](xv, cos, sin, pos, ov, xv.stride(0), xv.stride(1), xv.stride(2), ov.stride(0), ov.stride(1),
                      ov.stride(2), sc_b, sc_s, sp_b, sp_s, s, half, d, BLOCK_S=block_s, HEADS=heads,
                      BLOCK_D=block_d, BLOCK_T=block_t, INTERLEAVED=interleaved, HAS_POS=position_ids is not None,
                      BACKWARD=backward, PARTIAL=partial, backend=backend, num_warps=warps)
    return out


def _kernel_forward(q, k, cos, sin, position_ids, unsqueeze_dim, interleaved, backend):
    return tuple(_launch(x, cos, sin, position_ids, unsqueeze_dim, interleaved, False, backend) for x in (q, k))


def _kernel_backward(dq, dk, cos, sin, position_ids, unsqueeze_dim, interleaved, backend):
    return tuple(_launch(g, cos, sin, position_ids, unsqueeze_dim, interleaved, True, backend) for g in (dq, dk))


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
@tle.example(rope_kernel)
def _example(device, size):
    """Queries [B, H, S, D] rotated in the half-split form, partially (R < D), in tiles of 4 positions and 2 heads
    over small (the last tile of positions masked); Llama's 2x32x4096x128 bf16 in the operator's tiles over large."""
    small = size == "small"
    (b, h, s, d, r), dtype = ((2, 4, 5, 20, 16), torch.float32) if small else ((2, 32, 4096, 128, 128), torch.bfloat16)
    x = torch.randn(b, h, s, d, device=device).to(dtype)
    angles = torch.rand(b, s, r // 2, device=device) * 6.3
    cos, sin = torch.cat([angles.cos()] * 2, -1).to(dtype), torch.cat([angles.sin()] * 2, -1).to(dtype)
    out = torch.full_like(x, float("nan"))
    xv, ov = x.transpose(1, 2), out.transpose(1, 2)
    block_d = next_power_of_2(r // 2)
    block_s, heads, warps = (4, 2, 2) if small else _tiling(xv)
    return tle.Launch(grid=(b * cdiv(s, block_s), h // heads),
                      args=(xv, cos, sin, cos, ov, *xv.stride()[:3], *ov.stride()[:3], cos.stride(0), cos.stride(1),
                            0, 0, s, r // 2, d),
                      kwargs=dict(BLOCK_S=block_s, HEADS=heads, BLOCK_D=block_d, BLOCK_T=next_power_of_2(max(d - r, 1)),
                                  INTERLEAVED=False, HAS_POS=False, BACKWARD=False, PARTIAL=r < d, num_warps=warps),
                      outputs={"out": out},
                      reference=lambda: {"out": _torch_rope(x.float(), cos.float(), sin.float(), None, 1, False,
                                                            False)},
                      bytes=2 * x.numel() * x.element_size() + 2 * cos.numel() * cos.element_size(),
                      label=f"{b}x{h}x{s}x{d} rotary {r} {str(dtype)[6:]}")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _adapt(run, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           position_ids: Optional[torch.Tensor], unsqueeze_dim: int, interleaved: bool
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_embed, k_embed); the features of each head must be contiguous (copied where not)."""
    q, k = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k))
    return run(q, k, cos.contiguous(), sin.contiguous(),
               position_ids.contiguous() if position_ids is not None else None, unsqueeze_dim, interleaved)


def _backward_adapt(run, dq: torch.Tensor, dk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                    position_ids: Optional[torch.Tensor], unsqueeze_dim: int, interleaved: bool
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    return _adapt(run, dq, dk, cos, sin, position_ids, unsqueeze_dim, interleaved)


def _save(ctx, inputs, output):
    _, _, cos, sin, position_ids, ctx.unsqueeze_dim, ctx.interleaved = inputs
    ctx.save_for_backward(cos, sin, position_ids)


def _grads(ctx, backward, dq, dk):
    cos, sin, position_ids = ctx.saved_tensors
    return backward(dq, dk, cos, sin, position_ids, ctx.unsqueeze_dim, ctx.interleaved)


ROTARY = Recipe(
    "apply_rotary_pos_emb",
    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_adapt,
                  fake=lambda q, k, *_: (torch.empty_like(q, memory_format=torch.contiguous_format),
                                         torch.empty_like(k, memory_format=torch.contiguous_format))),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_adapt,
                   fake=lambda dq, dk, *_: (torch.empty_like(dq, memory_format=torch.contiguous_format),
                                            torch.empty_like(dk, memory_format=torch.contiguous_format))),
    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def _check(q, k, cos, sin, position_ids, unsqueeze_dim):
    check_float(q, "q", rank=4)
    check_float(k, "k", rank=4, device=q.device)
    if unsqueeze_dim not in (1, 2) or isinstance(unsqueeze_dim, bool):
        raise tle.LaunchError(f"'unsqueeze_dim' must be 1 (q [B, H, S, D]) or 2 (q [B, S, H, D]); got "
                              f"{unsqueeze_dim!r}")
    qv, kv = _bshd(q, unsqueeze_dim), _bshd(k, unsqueeze_dim)
    b, s, _, d = qv.shape
    if (kv.shape[0], kv.shape[1], kv.shape[3]) != (b, s, d):
        raise tle.LaunchError(f"'k' has shape {tuple(k.shape)}; expected the batch, sequence and head size of 'q' "
                              f"{tuple(q.shape)} (unsqueeze_dim={unsqueeze_dim})")
    check_float(cos, "cos", device=q.device, rank=(2, 3))
    check_float(sin, "sin", device=q.device, shape=tuple(cos.shape))
    r = cos.shape[-1]
    if r % 2 or r > d or r == 0:
        raise tle.LaunchError(f"'cos' has {r} features; expected an even number of at most the head size {d}")
    if position_ids is not None:
        check_tensor(position_ids, "position_ids", dtypes=POSITION_DTYPES, rank=(1, 2), device=q.device)
        if cos.dim() != 2:
            raise tle.LaunchError(f"'cos' has shape {tuple(cos.shape)}; with position_ids it is a table [P, "
                                  f"{r}] whose rows position_ids picks")
        if position_ids.shape[-1] != s or (position_ids.dim() == 2 and position_ids.shape[0] not in (1, b)):
            raise tle.LaunchError(f"'position_ids' has shape {tuple(position_ids.shape)}; expected [{b}, {s}], "
                                  f"[1, {s}] or [{s}]")
    else:
        lead = cos.shape[:-1]
        if lead[-1] != s or (len(lead) == 2 and lead[0] not in (1, b)):
            raise tle.LaunchError(f"'cos' has shape {tuple(cos.shape)}; expected [{b}, {s}, R], [1, {s}, R] or "
                                  f"[{s}, R]")
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        raise tle.LaunchError("'cos' or 'sin' requires grad; tle.ops.apply_rotary_pos_emb differentiates q and k "
                              "only (detach them)")


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         position_ids: torch.Tensor | None = None, unsqueeze_dim: int = 1, *,
                         interleaved: bool = False, backend: str | None = None, fallback: str | None = None):
    """(q_embed, k_embed): q and k rotated by the angles whose cosines and sines are cos and sin (see the module
    doc); the half-split form, or with interleaved=True the pairwise one."""
    _check(q, k, cos, sin, position_ids, unsqueeze_dim)
    b = ROTARY.resolve(q.device, backend, fallback)
    check_kernel_dtypes("apply_rotary_pos_emb", b, q=q, k=k, cos=cos, sin=sin)
    return ROTARY(q, k, cos, sin, position_ids, unsqueeze_dim, bool(interleaved), backend=b)


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, *, interleaved=False):
    """Plain differentiable torch, Hugging Face's formula, evaluated in fp64."""
    c, s = _tables(cos, sin, position_ids, unsqueeze_dim, q.dtype)
    r = c.shape[-1]
    return tuple(torch.cat((x[..., :r] * c + _rotate(x[..., :r], interleaved) * s, x[..., r:]), dim=-1)
                 for x in (q, k))


def _angles(b, s, r, device, dtype, g, interleaved=False):
    ang = torch.rand(b, s, r // 2, generator=g) * 6.3
    rep = (lambda t: t.repeat_interleave(2, -1)) if interleaved else (lambda t: torch.cat([t, t], -1))
    return rep(ang.cos()).to(device=device, dtype=dtype), rep(ang.sin()).to(device=device, dtype=dtype)


def samples(device, dtype):
    g = torch.Generator().manual_seed(0)

    def t(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    cos, sin = _angles(2, 5, 16, device, dtype, g)
    icos, isin = _angles(1, 5, 16, device, dtype, g, interleaved=True)
    pcos, psin = _angles(1, 12, 8, device, dtype, g)
    table_cos, table_sin = pcos[0], psin[0]
    pos = torch.tensor([[3, 4, 5, 6, 7], [0, 1, 2, 11, 11]], device=device)
    return [Sample((t(2, 4, 5, 16), t(2, 2, 5, 16), cos, sin), label="[B, H, S, D], GQA"),
            Sample((t(2, 5, 4, 16), t(2, 5, 1, 16), cos, sin, None, 2), label="[B, S, H, D]"),
            Sample((t(1, 3, 5, 16), t(1, 3, 5, 16), icos, isin), dict(interleaved=True), label="interleaved"),
            Sample((t(2, 3, 5, 24), t(2, 1, 5, 24), cos, sin), label="partial rotary (16 of 24)"),
            Sample((t(2, 3, 5, 8), t(2, 3, 5, 8), table_cos, table_sin, pos), label="position_ids into a table"),
            Sample((t(1, 2, 5, 16), t(1, 2, 5, 16), cos[0], sin[0]), label="cos [S, R]"),
            Sample((t(2, 33, 5, 16), t(2, 3, 5, 16), cos, sin), label="33 heads (a block of 64, masked)")]


def _bench_make(shape, dtype, device):
    b, h, hk, s, d = shape
    g = torch.Generator().manual_seed(0)
    cos, sin = _angles(1, s, d, device, dtype, g)
    return Sample((torch.randn(b, h, s, d, device=device, dtype=dtype),
                   torch.randn(b, hk, s, d, device=device, dtype=dtype), cos, sin))


def _bench_bytes(sample, mode):
    """q and k read and written once (cos and sin, one row per position, left out)."""
    q, k = sample.args[:2]
    return 2 * (q.numel() + k.numel()) * q.element_size()


def _eager(sample):
    q, k, cos, sin = sample.args
    return lambda q=q, k=k: reference(q, k, cos, sin)


def _liger(sample):
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
    q, k, cos, sin = sample.args
    return lambda q=q, k=k: liger_rotary_pos_emb(q, k, cos, sin)


OPERATOR = Operator(
    "apply_rotary_pos_emb", fn=apply_rotary_pos_emb, reference=reference, samples=samples, grad_inputs=(0, 1),
    bench=BenchSpec(dry_shapes=[(1, 4, 2, 64, 64)],
                    shapes=[(2, 32, 8, 4096, 128), (1, 32, 32, 8192, 128), (4, 64, 8, 2048, 128)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, peers={"liger": _liger},
                    shape_help="BATCHxHEADSxKV_HEADSxSEQxHEAD_DIM"))
