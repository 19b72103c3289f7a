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

The kernel streams q and k as rows of D features, in one launch: a program takes BLOCK_R consecutive rows of
one of them, numbered as they lie in memory ([B, H, S] for q [B, H, S, D] in memory, [B, S, H] for [B, S, H, D];
q's order for both). Each row's batch entry and position come from its number by a division a row, and its
cos and sin rows are gathered by them (they are small and stay in L2). A tile is [BLOCK_R, R/2] a half, with no
loop over heads, so a program's loads are all in flight at once, as an element-wise kernel's are. Where the rows
of q and of k are evenly spaced in memory (contiguous, or a [B, H, S, D] view of [B, S, H, D]) the kernel reads
them as [rows, D] (boxes for TileLang); otherwise by the rows' strides (a slice of a fused projection). The
outputs are laid out as q's rows lie, so they are written as q is read. TILES holds the tile by backend. The
backward is the same kernel with the rotation transposed:
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
# (BLOCK_R, num_warps) of the launch by backend, from a sweep on the H200 at the page's shapes (both row orders
# alike: 3.6-3.9 TB/s, the copy's 3.8-4.0): 16 rows of D = 128 bf16 features, 4 KB read a program
TILES = {"triton": (16, 2), "tilelang": (16, 4)}


@tle.jit
def rope_rows(x_ptr, o_ptr, cos_ptr, sin_ptr, pos_ptr, tile, n_rows, n_heads, sx_b, sx_o, sx_i, c_batch, n_seq,
              half, n_dim, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
              HEADS_INNER: tl.constexpr, FLAT: tl.constexpr, INTERLEAVED: tl.constexpr, HAS_POS: tl.constexpr,
              BACKWARD: tl.constexpr, PARTIAL: tl.constexpr):
    # Rows [tile * BLOCK_R, (tile + 1) * BLOCK_R) of x, its rows of D features numbered in the order [B, S, H]
    # (HEADS_INNER) or [B, H, S]: row r is (b, outer, inner) = (r // (O * I), r // I % O, r % I), by a division
    # a row. x's row at b * sx_b + outer * sx_o + inner * sx_i, or with FLAT (rows evenly spaced) at r * sx_i;
    # out's at r * n_dim. cos and sin are contiguous rows of R = 2 * half: row b * c_batch + s, or with HAS_POS
    # row pos[b * c_batch + s] of a table (c_batch 0 where all batch entries share one); the row number times R
    # in the address itself lets both backends see the rows 16-byte aligned and read them in vectors
    r = tile * BLOCK_R + tl.arange(0, BLOCK_R)
    in_rows = r < n_rows
    if HEADS_INNER:
        n_inner = n_heads
        n_outer = n_seq
    else:
        n_inner = n_seq
        n_outer = n_heads
    inner = r % n_inner
    outer = r // n_inner % n_outer
    b = r // n_inner // n_outer
    if HEADS_INNER:
        s = outer
    else:
        s = inner
    if HAS_POS:
        c_row = tl.load(pos_ptr + b * c_batch + s, mask=in_rows, other=0).to(tl.int64)
    else:
        c_row = (b * c_batch + s).to(tl.int64)
    if FLAT:
        x_row = r.to(tl.int64) * sx_i
    else:
        x_row = b.to(tl.int64) * sx_b + outer.to(tl.int64) * sx_o + inner.to(tl.int64) * sx_i
    o_row = r.to(tl.int64) * n_dim
    j = tl.arange(0, BLOCK_D)
    if INTERLEAVED:
        i1 = 2 * j
        i2 = 2 * j + 1
    else:
        i1 = j
        i2 = j + half
    mask = in_rows[:, None] & (j < half)[None, :]
    x1 = tl.load(x_ptr + x_row[:, None] + i1[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + x_row[:, None] + i2[None, :], mask=mask, other=0.0).to(tl.float32)
    c1 = tl.load(cos_ptr + c_row[:, None] * (2 * half) + i1[None, :], mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + c_row[:, None] * (2 * half) + i2[None, :], mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + c_row[:, None] * (2 * half) + i1[None, :], mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + c_row[:, None] * (2 * half) + i2[None, :], mask=mask, other=0.0).to(tl.float32)
    if BACKWARD:
        y1 = x1 * c1 + x2 * s2
        y2 = x2 * c2 - x1 * s1
    else:
        y1 = x1 * c1 - x2 * s1
        y2 = x2 * c2 + x1 * s2
    tl.store(o_ptr + o_row[:, None] + i1[None, :], y1.to(o_ptr.dtype.element_ty), mask=mask)
    tl.store(o_ptr + o_row[:, None] + i2[None, :], y2.to(o_ptr.dtype.element_ty), mask=mask)
    if PARTIAL:                 # the features past the rotated ones pass through
        t = 2 * half + tl.arange(0, BLOCK_T)
        tmask = in_rows[:, None] & (t < n_dim)[None, :]
        tl.store(o_ptr + o_row[:, None] + t[None, :], tl.load(x_ptr + x_row[:, None] + t[None, :], mask=tmask,
                                                              other=0.0), mask=tmask)


@tle.jit
def rope_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, pos_ptr, qo_ptr, ko_ptr, sq_b, sq_o, sq_i, sk_b, sk_o, sk_i,
                c_batch, n_batch, n_seq, n_q_heads, n_k_heads, half, n_dim, BLOCK_R: tl.constexpr,
                BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr, HEADS_INNER: tl.constexpr, FLAT: tl.constexpr,
                INTERLEAVED: tl.constexpr, HAS_POS: tl.constexpr, BACKWARD: tl.constexpr, PARTIAL: tl.constexpr):
    # q and k in one launch: the first cdiv(B * S * Hq, BLOCK_R) programs take q's tiles, the rest k's, counted
    # from the last program down (a tile index that is plainly never negative, so TileLang copies k's boxes)
    pid = tl.program_id(0)
    q_rows = n_batch * n_seq * n_q_heads
    k_rows = n_batch * n_seq * n_k_heads
    q_tiles = tl.cdiv(q_rows, BLOCK_R)
    last = q_tiles + tl.cdiv(k_rows, BLOCK_R) - 1
    if pid < q_tiles:
        rope_rows(q_ptr, qo_ptr, cos_ptr, sin_ptr, pos_ptr, pid, q_rows, n_q_heads, sq_b, sq_o, sq_i, c_batch,
                  n_seq, half, n_dim, BLOCK_R, BLOCK_D, BLOCK_T, HEADS_INNER, FLAT, INTERLEAVED,
                  HAS_POS, BACKWARD, PARTIAL)
    else:
        rope_rows(k_ptr, ko_ptr, cos_ptr, sin_ptr, pos_ptr, last - pid, k_rows, n_k_heads,
                  sk_b, sk_o, sk_i, c_batch, n_seq, half, n_dim, BLOCK_R, BLOCK_D, BLOCK_T,
                  HEADS_INNER, FLAT, INTERLEAVED, HAS_POS, BACKWARD, PARTIAL)


# -- the row order: the kernel numbers the rows of D features as they lie in memory ----------------------
def _row_order(q, unsqueeze_dim):
    """(heads_inner, swapped): whether q's rows lie in memory as [B, S, H] (else as [B, H, S]), the order the
    kernel numbers them in (with one head or one position the two orders are one); and whether that order swaps
    dimensions 1 and 2 of the caller's layout ([B, H, S, D] with unsqueeze_dim 1, else [B, S, H, D]). Read from
    shapes and strides, no views: this runs on every call."""
    st = q.stride()
    s, h = q.shape[3 - unsqueeze_dim], q.shape[unsqueeze_dim]
    heads_inner = s > 1 and h > 1 and st[unsqueeze_dim] < st[3 - unsqueeze_dim]
    return heads_inner, bool(heads_inner) == (unsqueeze_dim == 1)


def _outputs_and_rows(q, k, swapped):
    """Empty (q_embed, k_embed) whose rows are contiguous in the kernel's order (for q as [B, S, H, D] in memory,
    a [B, H, S, D] view of that), so the kernel writes them as it reads q; and the same memory as [rows, D]."""
    outs, rows = [], []
    for x in (q, k):
        b, n1, n2, d = x.shape
        mem = x.new_empty(b, n2, n1, d) if swapped else x.new_empty(b, n1, n2, d)
        outs.append(mem.transpose(1, 2) if swapped else mem)
        rows.append(mem.view(-1, d))
    return tuple(outs), rows


def _outputs(q, k, unsqueeze_dim):
    """Empty (q_embed, k_embed) laid out by q's row order: every backend's results and the fakes."""
    return _outputs_and_rows(q, k, _row_order(q, unsqueeze_dim)[1])[0]


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


def _torch_stage(q, k, cos, sin, position_ids, unsqueeze_dim, interleaved, backward):
    """The results laid out as the kernels lay theirs (_outputs)."""
    return tuple(o.copy_(_torch_rope(x, cos, sin, position_ids, unsqueeze_dim, interleaved, backward))
                 for o, x in zip(_outputs(q, k, unsqueeze_dim), (q, k)))


def _torch_forward(q, k, cos, sin, position_ids, unsqueeze_dim, interleaved):
    return _torch_stage(q, k, cos, sin, position_ids, unsqueeze_dim, interleaved, False)


def _torch_backward(dq, dk, cos, sin, position_ids, unsqueeze_dim, interleaved):
    return _torch_stage(dq, dk, cos, sin, position_ids, unsqueeze_dim, interleaved, True)


# -- the kernel backends ------------------------------------------------------------------------------------
def _row_step(sizes, strides):
    """The distance between consecutive rows of a tensor [B, O, I, D] (its sizes and strides in that order) when
    they are evenly spaced, else None."""
    step = want = None
    for size, stride in zip(reversed(sizes[:3]), reversed(strides[:3])):
        if size == 1:
            continue
        if want is not None and stride != want:
            return None
        step = stride if step is None else step
        want = stride * size
    return sizes[3] if step is None else step


def _launch_args(q, k, cos, sin, position_ids, unsqueeze_dim, interleaved, backward, tile, backend="triton"):
    """(grid, args, constexprs, (q_out, k_out)) of rope_kernel over q and k; tile (BLOCK_R, num_warps), by
    default TILES' entry for the backend. Evenly spaced rows (FLAT) are passed as [rows, D] views, so the
    TileLang lowering reads them as boxes. Shapes and strides are read as tuples (no views on this path)."""
    b, d = q.shape[0], q.shape[3]
    s, hq, hk = q.shape[3 - unsqueeze_dim], q.shape[unsqueeze_dim], k.shape[unsqueeze_dim]
    heads_inner, swapped = _row_order(q, unsqueeze_dim)
    outs, o_rows = _outputs_and_rows(q, k, swapped)
    block_r, warps = tile or TILES[backend]
    order = (0, 2, 1, 3) if swapped else (0, 1, 2, 3)     # the caller's dimensions in the rows' order [B, O, I, D]
    layouts = []
    for x in (q, k):
        sizes, strides = x.shape, x.stride()
        layouts.append(([sizes[i] for i in order], [strides[i] for i in order]))
    steps = [_row_step(*lay) for lay in layouts]
    flat = None not in steps
    xs, strides = [], []
    for x, (sizes, st), step in zip((q, k), layouts, steps):
        n_outer, n_inner = sizes[1], sizes[2]
        if flat:
            xs.append(x.as_strided((sizes[0] * n_outer * n_inner, d), (step, 1), x.storage_offset()))
            strides += [step * n_outer * n_inner, step * n_inner, step]
        else:
            xs.append(x.permute(order))
            strides += st[:3]
    r = cos.shape[-1]
    # c_batch: how many rows of cos (or of position_ids) apart two batch entries are; 0 where they share them
    if position_ids is not None:
        pos, lead = position_ids, position_ids.shape[:-1]
    else:
        pos, lead = cos, cos.shape[:-2]                   # pos: not read
    c_batch = s if len(lead) == 1 and lead[0] > 1 else 0
    grid = (cdiv(b * s * hq, block_r) + cdiv(b * s * hk, block_r),)
    args = (*xs, cos, sin, pos, *o_rows, *strides, c_batch, b, s, hq, hk, r // 2, d)
    constexprs = dict(BLOCK_R=block_r, BLOCK_D=max(1, next_power_of_2(r // 2)),
                      BLOCK_T=next_power_of_2(d - r) if r < d else 1, HEADS_INNER=heads_inner, FLAT=flat,
                      INTERLEAVED=interleaved, HAS_POS=position_ids is not None, BACKWARD=backward, PARTIAL=r < d,
                      num_warps=warps)
    return grid, args, constexprs, outs


def _launch(q, k, cos, sin, position_ids, unsqueeze_dim, interleaved, backward, backend):
    grid, args, constexprs, outs = _launch_args(q, k, cos, sin, position_ids, unsqueeze_dim, interleaved, backward,
                                                None, backend)
    if grid[0]:
        rope_kernel[grid](*args, backend=backend, **constexprs)
    return outs


def _kernel_forward(q, k, cos, sin, position_ids, unsqueeze_dim, interleaved, backend):
    return _launch(q, k, cos, sin, position_ids, unsqueeze_dim, interleaved, False, backend)


def _kernel_backward(dq, dk, cos, sin, position_ids, unsqueeze_dim, interleaved, backend):
    return _launch(dq, dk, cos, sin, position_ids, unsqueeze_dim, interleaved, True, backend)


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
@tle.example(rope_kernel)
def _example(device, size):
    """Queries [B, H, S, D] and keys with fewer heads rotated in the half-split form, partially (R < D), in tiles
    of 8 rows over small (the last tile of each tensor masked); Llama's 2x32x8x4096x128 bf16 in the operator's
    tile over large."""
    small = size == "small"
    (b, h, hk, s, d, r), dtype = (((2, 4, 2, 5, 20, 16), torch.float32) if small else
                                  ((2, 32, 8, 4096, 128, 128), torch.bfloat16))
    q, k = torch.randn(b, h, s, d, device=device).to(dtype), torch.randn(b, hk, s, d, device=device).to(dtype)
    angles = torch.rand(b, s, r // 2, device=device) * 6.3
    cos, sin = torch.cat([angles.cos()] * 2, -1).to(dtype), torch.cat([angles.sin()] * 2, -1).to(dtype)
    grid, args, constexprs, (q_out, k_out) = _launch_args(q, k, cos, sin, None, 1, False, False,
                                                          (8, 2) if small else None)
    q_out.fill_(float("nan"))
    k_out.fill_(float("nan"))

    def reference():
        want = _torch_forward(q.float(), k.float(), cos.float(), sin.float(), None, 1, False)
        return dict(zip(("q_out", "k_out"), want))
    return tle.Launch(grid=grid, args=args, kwargs=constexprs, outputs={"q_out": q_out, "k_out": k_out},
                      reference=reference,
                      bytes=2 * (q.numel() + k.numel()) * q.element_size() + 2 * cos.numel() * cos.element_size(),
                      label=f"{b}x{h}x{hk}x{s}x{d} rotary {r} {str(dtype)[6:]}")


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
                  fake=lambda q, k, cos, sin, position_ids, unsqueeze_dim, interleaved: _outputs(q, k, unsqueeze_dim)),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_adapt,
                   fake=lambda dq, dk, cos, sin, position_ids, unsqueeze_dim, interleaved:
                   _outputs(dq, dk, unsqueeze_dim)),
    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def _check(q, k, cos, sin, position_ids, unsqueeze_dim):
    check_float(q, "q", rank=4)
    check_float(k, "k", rank=4, device=q.device)
    if unsqueeze_dim not in (1, 2) or isinstance(unsqueeze_dim, bool):
        raise tle.LaunchError(f"'unsqueeze_dim' must be 1 (q [B, H, S, D]) or 2 (q [B, S, H, D]); got "
                              f"{unsqueeze_dim!r}")
    seq_dim = 3 - unsqueeze_dim                     # the sequence's dimension: 2 in [B, H, S, D], 1 in [B, S, H, D]
    b, s, d = q.shape[0], q.shape[seq_dim], q.shape[3]
    if (k.shape[0], k.shape[seq_dim], k.shape[3]) != (b, s, d):
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
            Sample((t(2, 33, 5, 16), t(2, 3, 5, 16), cos, sin), label="33 heads"),
            Sample((t(2, 5, 3, 16).transpose(1, 2), t(2, 5, 2, 16).transpose(1, 2), cos, sin),
                   label="[B, H, S, D] views of [B, S, H, D] (Hugging Face's)")]


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
