"""Binary cross-entropy with logits, with torch's semantics, forward and backward.

    loss = w * ((1 - t) * x + (1 + (pw - 1) * t) * (log1p(exp(-|x|)) + max(-x, 0)))
    dloss/dx = w * ((1 + (pw - 1) * t) * sigmoid(x) - pw * t)

`tle.ops.binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
reduction="mean", pos_weight=None)`, torch's signature; the loss in torch's dtype (input's and target's promoted).
The kernels see the tensors as [rows, C] (C the last dimension) and walk tiles of TILE elements: a weight
or pos_weight of one value is read once, one over the last dimension ([C], or [1, .., 1, C]) is read per
tile's columns, any other broadcast of them is materialized to the input's shape first. Without per-column
vectors, contiguous tensors are walked as one flat run of elements in 1-D tiles (full contiguous boxes).

reduction "none" writes the loss (one pass: read logits and target, write the loss). "mean" and "sum" are
reduced in the same pass: each program adds up the losses of its tiles in registers and writes one fp32
partial; a one-program kernel adds the partials up (scaled by 1/N for "mean") into the 0-d result, in the
logits' dtype. No atomics: the result is the same from run to run. The backward is one element-wise pass for
all three reductions; for "mean" and "sum" the upstream gradient (0-d) is read by the kernel, never synced
to the host. Gradients reach `logits` only: target, weight and pos_weight get none (passing one that
requires grad is an error)."""
from __future__ import annotations

from typing import Optional

import torch
import triton.language as tl

import tle
from tle.oplib import BenchSpec, Operator, Sample, as_rows, check_float, check_kernel_dtypes
from tle.oplib.arith import cdiv, next_power_of_2
from tle.oplib.losses import check_input_and_target, reduction_of
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype

REDUCTIONS = ("none", "mean", "sum")
TILE = 4096                 # elements per tile: 16 per thread at 8 warps
WARPS = 8
MAX_PARTIALS = 4096         # "mean" and "sum": programs (partials) at most; each walks a run of tiles
SUM_BLOCK = MAX_PARTIALS    # the partials in one step (in 4 steps of 1024, 13% slower at 32768x8192 mean)
MAX_NUMEL = 2 ** 31         # the kernels' offsets are 32-bit
# how a kernel reads a weight or a pos_weight
ABSENT, ONE_VALUE, PER_COLUMN, FULL = 0, 1, 2, 3


@tle.jit
def _softplus_neg_tile(x):
    # log(1 + exp(-x)) = log1p(z) + max(-x, 0) with z = exp(-|x|) in (0, 1]. log1p(z) = z * P(z), P the degree-8
    # polynomial closest to log1p(z) / z on [0, 1] (Chebyshev fit): within 2e-7 relative for every z, the tiny
    # values where log(1 + z) would round to 0 included, in multiply-adds only (no division, no log)
    z = tl.exp(-tl.abs(x))
    p = z * 0.0052534577968815785 - 0.02958850739193005
    p = p * z + 0.07836166801651995
    p = p * z - 0.1367476970528438
    p = p * z + 0.1911143108043114
    p = p * z - 0.24844369892417056
    p = p * z + 0.33319271342491596
    p = p * z - 0.4999950151678635
    p = p * z + 0.9999999705406548
    return z * p + tl.maximum(-x, 0.0)


@tle.jit
def bce_with_logits_fwd_kernel(x_ptr, t_ptr, w_ptr, pw_ptr, out_ptr, partial_ptr, x_row_stride, t_row_stride,
                               w_row_stride, pw_row_stride, out_row_stride, n_rows, n_cols, col_blocks,
                               tiles_per_program, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               W_MODE: tl.constexpr, PW_MODE: tl.constexpr, REDUCE: tl.constexpr,
                               FLAT: tl.constexpr):
    # FLAT: the tensors are 1-D (n_cols elements) and a tile is BLOCK_N of them; else [n_rows, n_cols]
    # matrices and a tile is BLOCK_M x BLOCK_N, tile i at row block i // col_blocks, column block
    # i % col_blocks. W_MODE / PW_MODE: 0 absent, 1 one value, 2 one per column, 3 full.
    pid = tl.program_id(0)
    if W_MODE == 1:
        w = tl.load(w_ptr).to(tl.float32)
    if PW_MODE == 1:
        pw = tl.load(pw_ptr).to(tl.float32)
    if REDUCE:
        if FLAT:
            acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        else:
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for i in range(0, tiles_per_program):
        tile = pid * tiles_per_program + i
        if FLAT:
            offs = tile * BLOCK_N + tl.arange(0, BLOCK_N)
            mask = offs < n_cols
            x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            t = tl.load(t_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            if W_MODE == 3:
                w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            if PW_MODE == 3:
                pw = tl.load(pw_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        else:
            rows = (tile // col_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
            cols = (tile % col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
            col_mask = cols < n_cols
            mask = (rows < n_rows)[:, None] & col_mask[None, :]
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            t = tl.load(t_ptr + rows[:, None] * t_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if W_MODE == 2:
                w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
            if W_MODE == 3:
                w = tl.load(w_ptr + rows[:, None] * w_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if PW_MODE == 2:
                pw = tl.load(pw_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
            if PW_MODE == 3:
                pw = tl.load(pw_ptr + rows[:, None] * pw_row_stride + cols[None, :], mask=mask,
                             other=0.0).to(tl.float32)
        if PW_MODE == 0:
            loss = (1.0 - t) * x + _softplus_neg_tile(x)
        else:
            loss = (1.0 - t) * x + (1.0 + (pw - 1.0) * t) * _softplus_neg_tile(x)
        if W_MODE != 0:
            loss = loss * w
        if REDUCE:
            acc += tl.where(mask, loss, 0.0)
        elif FLAT:
            tl.store(out_ptr + offs, loss.to(out_ptr.dtype.element_ty), mask=mask)
        else:
            tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], loss.to(out_ptr.dtype.element_ty),
                     mask=mask)
    if REDUCE:      # this program's partial sum
        if FLAT:
            tl.store(partial_ptr + pid, tl.sum(acc, axis=0))
        else:
            tl.store(partial_ptr + pid, tl.sum(tl.sum(acc, axis=1), axis=0))


@tle.jit
def bce_with_logits_sum_kernel(p_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(p_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, (tl.sum(acc, axis=0) * scale).to(out_ptr.dtype.element_ty))


@tle.jit
def bce_with_logits_bwd_kernel(g_ptr, x_ptr, t_ptr, w_ptr, pw_ptr, dx_ptr, g_row_stride, x_row_stride,
                               t_row_stride, w_row_stride, pw_row_stride, dx_row_stride, n_rows, n_cols,
                               col_blocks, scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               W_MODE: tl.constexpr, PW_MODE: tl.constexpr, REDUCE: tl.constexpr,
                               FLAT: tl.constexpr):
    # one tile per program, tiled as the forward; REDUCE: the upstream gradient is one value (0-d)
    tile = tl.program_id(0)
    if FLAT:
        offs = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = offs < n_cols
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        t = tl.load(t_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if W_MODE == 3:
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if PW_MODE == 3:
            pw = tl.load(pw_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if not REDUCE:
            g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    else:
        rows = (tile // col_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = (tile % col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
        col_mask = cols < n_cols
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        t = tl.load(t_ptr + rows[:, None] * t_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if W_MODE == 2:
            w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        if W_MODE == 3:
            w = tl.load(w_ptr + rows[:, None] * w_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if PW_MODE == 2:
            pw = tl.load(pw_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        if PW_MODE == 3:
            pw = tl.load(pw_ptr + rows[:, None] * pw_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if not REDUCE:
            g = tl.load(g_ptr + rows[:, None] * g_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if W_MODE == 1:
        w = tl.load(w_ptr).to(tl.float32)
    if PW_MODE == 1:
        pw = tl.load(pw_ptr).to(tl.float32)
    if REDUCE:      # "mean" / "sum": one upstream value for every element, times 1/N or 1
        g = tl.load(g_ptr).to(tl.float32) * scale
    s = tl.sigmoid(x)
    if PW_MODE == 0:
        d = s - t
    else:
        d = (1.0 + (pw - 1.0) * t) * s - pw * t
    if W_MODE != 0:
        d = d * w
    d = d * g
    if FLAT:
        tl.store(dx_ptr + offs, d.to(dx_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], d.to(dx_ptr.dtype.element_ty), mask=mask)


# -- the torch backend: the same arithmetic in torch (fp32, or fp64 for fp64 inputs) ------------------------
def _softplus_neg(x):
    return torch.log1p(torch.exp(-x.abs())) + torch.clamp(-x, min=0)


def _torch_forward(x, target, weight, pos_weight, reduction):
    ct = torch_compute_dtype(x)
    xf, tf = x.to(ct), target.to(ct)
    if pos_weight is not None:
        loss = (1 - tf) * xf + (1 + (pos_weight.to(ct) - 1) * tf) * _softplus_neg(xf)
    else:
        loss = (1 - tf) * xf + _softplus_neg(xf)
    if weight is not None:
        loss = loss * weight.to(ct)
    if reduction == "mean":
        loss = loss.mean()
    elif reduction == "sum":
        loss = loss.sum()
    return loss.to(x.dtype)


def _torch_backward(grad, x, target, weight, pos_weight, reduction):
    ct = torch_compute_dtype(x)
    xf, tf = x.to(ct), target.to(ct)
    s = torch.sigmoid(xf)
    if pos_weight is not None:
        pw = pos_weight.to(ct)
        d = (1 + (pw - 1) * tf) * s - pw * tf
    else:
        d = s - tf
    if weight is not None:
        d = d * weight.to(ct)
    g = grad.to(ct)
    if reduction == "mean":
        g = g / max(x.numel(), 1)
    return (d * g).to(x.dtype)


# -- the kernel backends ------------------------------------------------------------------------------------
def _tiles(n_cols):
    """(BLOCK_M, BLOCK_N) of a TILE-element tile of rows of `n_cols`: whole rows where they are short."""
    block_n = min(next_power_of_2(max(n_cols, 1)), TILE)
    return TILE // block_n, block_n


def _vector_mode(v, shape):
    """How the kernels read the weight or pos_weight `v` for an input of `shape`: (mode, tensor)."""
    if v is None:
        return ABSENT, None
    if v.numel() == 1:
        return ONE_VALUE, v.reshape(1)
    if v.dim() >= 1 and v.numel() == v.shape[-1] == shape[-1]:
        return PER_COLUMN, v.reshape(-1).contiguous()
    if tuple(v.shape) != tuple(shape):          # any other broadcast: materialized to the input's shape
        v = v.expand(shape).contiguous()
    return FULL, v


def _rows(t):
    """`t` as [rows, C] with a unit-stride last dimension (as_rows), and no zero row stride (an expanded
    upstream gradient of one column): rows the kernels read are real rows."""
    r = as_rows(t.reshape(1) if t.dim() == 0 else t, "tensor")
    return r.contiguous() if r.shape[0] > 1 and r.stride(0) == 0 else r


class _Plan:
    """How the kernels walk an input: as one flat run of elements (contiguous tensors, no per-column
    vector), else as [rows, C] matrices; the tiling, and how they read the weight and pos_weight."""

    def __init__(self, x, target, weight, pos_weight, extra=()):
        self.w_mode, w = _vector_mode(weight, x.shape)
        self.pw_mode, pw = _vector_mode(pos_weight, x.shape)
        # FULL vectors are contiguous (materialized where they were a broadcast)
        self.flat = (PER_COLUMN not in (self.w_mode, self.pw_mode)
                     and all(t.is_contiguous() for t in (x, target, *extra)))
        self.view = (lambda t: t.reshape(-1)) if self.flat else _rows
        if self.flat:
            self.n_rows, self.n_cols = 1, x.numel()
            self.block_m, self.block_n = 1, TILE
        else:
            self.n_rows, self.n_cols = self.view(x).shape
            self.block_m, self.block_n = _tiles(self.n_cols)
        self.col_blocks = cdiv(self.n_cols, self.block_n)
        self.n_tiles = cdiv(self.n_rows, self.block_m) * self.col_blocks
        self.w = self.view(w) if self.w_mode == FULL else w
        self.pw = self.view(pw) if self.pw_mode == FULL else pw

    def stride(self, t):
        """The row stride the kernels take for `t` (0 where they do not use one)."""
        return t.stride(0) if t is not None and t.dim() == 2 and not self.flat else 0

    def constexprs(self, reduce):
        return dict(BLOCK_M=self.block_m, BLOCK_N=self.block_n, W_MODE=self.w_mode, PW_MODE=self.pw_mode,
                    REDUCE=reduce, FLAT=self.flat, num_warps=WARPS)


def _kernel_forward(x, target, weight, pos_weight, reduction, backend):
    out = torch.empty(x.shape if reduction == "none" else (1,), device=x.device, dtype=x.dtype)
    if x.numel() == 0:
        if reduction != "none":
            out.fill_(float("nan") if reduction == "mean" else 0.0)
        return out.reshape(x.shape if reduction == "none" else ())
    p = _Plan(x, target, weight, pos_weight)
    xv, tv = p.view(x), p.view(target)
    w = p.w if p.w is not None else xv                  # absent vectors: any tensor, never read
    pw = p.pw if p.pw is not None else xv
    if reduction == "none":
        o = p.view(out)
        grid, per_program, partials = p.n_tiles, 1, o
    else:
        o = xv                                          # not written
        per_program = cdiv(p.n_tiles, MAX_PARTIALS)
        grid = cdiv(p.n_tiles, per_program)
        partials = torch.empty(grid, device=x.device, dtype=torch.float32)
    bce_with_logits_fwd_kernel[(grid,)](
        xv, tv, w, pw, o, partials, p.stride(xv), p.stride(tv), p.stride(p.w), p.stride(p.pw), p.stride(o),
        p.n_rows, p.n_cols, p.col_blocks, per_program, backend=backend, **p.constexprs(reduction != "none"))
    if reduction == "none":
        return out
    scale = 1.0 / x.numel() if reduction == "mean" else 1.0
    bce_with_logits_sum_kernel[(1,)](partials, out, grid, scale, BLOCK=SUM_BLOCK, backend=backend, num_warps=4)
    return out.reshape(())


def _kernel_backward(grad, x, target, weight, pos_weight, reduction, backend):
    dx = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    if x.numel() == 0:
        return dx
    reduce = reduction != "none"
    p = _Plan(x, target, weight, pos_weight, extra=() if reduce else (grad,))
    xv, tv, dxv = p.view(x), p.view(target), p.view(dx)
    g = grad.reshape(1) if reduce else p.view(grad)
    w = p.w if p.w is not None else xv
    pw = p.pw if p.pw is not None else xv
    scale = 1.0 / x.numel() if reduction == "mean" else 1.0
    bce_with_logits_bwd_kernel[(p.n_tiles,)](
        g, xv, tv, w, pw, dxv, 0 if reduce else p.stride(g), p.stride(xv), p.stride(tv), p.stride(p.w),
        p.stride(p.pw), p.stride(dxv), p.n_rows, p.n_cols, p.col_blocks, scale, backend=backend,
        **p.constexprs(reduce))
    return dx


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_shape(size):
    return ((33, 1000), torch.float32) if size == "small" else ((32768, 8192), torch.bfloat16)


def _example_inputs(size, device):
    (m, n), dtype = _example_shape(size)
    x = torch.randn(m, n, device=device, dtype=dtype) * 3
    t = torch.rand(m, n, device=device, dtype=dtype)
    return m, n, dtype, x, t


@tle.example(bce_with_logits_fwd_kernel)
def _fwd_example(device, size):
    """small: flat, a full weight and a pos_weight of one value, reduced to partials (3 programs);
    large: the headline, flat, reduction "none"."""
    m, n, dtype, x, t = _example_inputs(size, device)
    tiles = cdiv(m * n, TILE)
    label = f"{m}x{n} {str(dtype)[6:]}"
    xv, tv = x.view(-1), t.view(-1)
    if size == "small":
        w = torch.rand(m, n, device=device, dtype=dtype) + 0.5
        pw = torch.tensor([2.5], device=device, dtype=dtype)
        grid, per_program = 3, cdiv(tiles, 3)
        partials = torch.full((grid,), float("nan"), device=device)

        def ref():
            loss = _torch_forward(x, t, w, pw, "none").float().reshape(-1)
            program = torch.arange(m * n, device=device) // TILE // per_program
            return {"partials": torch.zeros(grid, device=device).index_add_(0, program, loss)}
        return tle.Launch(grid=(grid,), args=(xv, tv, w.view(-1), pw, xv, partials, 0, 0, 0, 0, 0, 1, m * n, tiles,
                                              per_program),
                          kwargs=dict(BLOCK_M=1, BLOCK_N=TILE, W_MODE=FULL, PW_MODE=ONE_VALUE, REDUCE=True, FLAT=True,
                                      num_warps=WARPS),
                          outputs={"partials": partials}, reference=ref,
                          bytes=3 * m * n * x.element_size(), label=label + ", reduced")
    out = torch.full_like(x, float("nan"))
    return tle.Launch(grid=(tiles,), args=(xv, tv, xv, xv, out.view(-1), out, 0, 0, 0, 0, 0, 1, m * n, tiles, 1),
                      kwargs=dict(BLOCK_M=1, BLOCK_N=TILE, W_MODE=ABSENT, PW_MODE=ABSENT, REDUCE=False, FLAT=True,
                                  num_warps=WARPS),
                      outputs={"loss": out}, reference=lambda: {"loss": _torch_forward(x, t, None, None, "none")},
                      bytes=3 * m * n * x.element_size(), label=label)


@tle.example(bce_with_logits_sum_kernel)
def _sum_example(device, size):
    p = 1500 if size == "small" else MAX_PARTIALS
    partials = torch.randn(p, device=device)
    out = torch.full((1,), float("nan"), device=device)
    return tle.Launch(grid=(1,), args=(partials, out, p, 0.5), kwargs=dict(BLOCK=SUM_BLOCK, num_warps=4),
                      outputs={"out": out}, reference=lambda: {"out": partials.sum().reshape(1) * 0.5},
                      bytes=(p + 1) * 4, label=f"{p} partials")


@tle.example(bce_with_logits_bwd_kernel)
def _bwd_example(device, size):
    """small: [rows, C] tiles, a full weight, a pos_weight per column, an upstream gradient per element
    (reduction "none"); large: the headline, flat, reduction "none"."""
    m, n, dtype, x, t = _example_inputs(size, device)
    g = torch.randn(m, n, device=device, dtype=dtype)
    dx = torch.full_like(x, float("nan"))
    label = f"{m}x{n} {str(dtype)[6:]}"
    if size == "small":
        w = torch.rand(m, n, device=device, dtype=dtype) + 0.5
        pw = torch.rand(n, device=device, dtype=dtype) * 3
        block_m, block_n = _tiles(n)
        col_blocks = cdiv(n, block_n)
        tiles = cdiv(m, block_m) * col_blocks
        return tle.Launch(grid=(tiles,), args=(g, x, t, w, pw, dx, n, n, n, n, 0, n, m, n, col_blocks, 1.0),
                          kwargs=dict(BLOCK_M=block_m, BLOCK_N=block_n, W_MODE=FULL, PW_MODE=PER_COLUMN,
                                      REDUCE=False, FLAT=False, num_warps=WARPS),
                          outputs={"dx": dx}, reference=lambda: {"dx": _torch_backward(g, x, t, w, pw, "none")},
                          bytes=6 * m * n * x.element_size(), label=label)
    tiles = cdiv(m * n, TILE)
    xv = x.view(-1)
    return tle.Launch(grid=(tiles,), args=(g.view(-1), xv, t.view(-1), xv, xv, dx.view(-1), 0, 0, 0, 0, 0, 0, 1,
                                           m * n, tiles, 1.0),
                      kwargs=dict(BLOCK_M=1, BLOCK_N=TILE, W_MODE=ABSENT, PW_MODE=ABSENT, REDUCE=False, FLAT=True,
                                  num_warps=WARPS),
                      outputs={"dx": dx}, reference=lambda: {"dx": _torch_backward(g, x, t, None, None, "none")},
                      bytes=4 * m * n * x.element_size(), label=label)


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _contiguous(run, logits: torch.Tensor, target: torch.Tensor, weight: Optional[torch.Tensor],
                pos_weight: Optional[torch.Tensor], reduction: str) -> torch.Tensor:
    return run(logits, target, weight, pos_weight, reduction).contiguous()


def _backward_contiguous(run, grad: torch.Tensor, logits: torch.Tensor, target: torch.Tensor,
                         weight: Optional[torch.Tensor], pos_weight: Optional[torch.Tensor],
                         reduction: str) -> torch.Tensor:
    return run(grad, logits, target, weight, pos_weight, reduction).contiguous()


def _save(ctx, inputs, loss):
    logits, target, weight, pos_weight, ctx.reduction = inputs
    ctx.save_for_backward(logits, target, weight, pos_weight)


def _grads(ctx, backward, grad):
    return (backward(grad, *ctx.saved_tensors, ctx.reduction),)


BCE_WITH_LOGITS = Recipe(
    "binary_cross_entropy_with_logits",
    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_contiguous,
                  fake=lambda logits, target, weight, pos_weight, reduction: logits.new_empty(
                      logits.shape if reduction == "none" else ())),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_contiguous,
                   fake=lambda grad, logits, *_: logits.new_empty(logits.shape)),
    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def _check_broadcast(v, name, x):
    check_float(v, name, device=x.device)
    try:
        ok = torch.broadcast_shapes(v.shape, x.shape) == x.shape
    except RuntimeError:
        ok = False
    if not ok:
        raise tle.LaunchError(f"'{name}' has shape {tuple(v.shape)}, which does not broadcast to the shape of "
                              f"'input' {tuple(x.shape)}")


def binary_cross_entropy_with_logits(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                                     size_average: bool | None = None, reduce: bool | None = None,
                                     reduction: str = "mean", pos_weight: torch.Tensor | None = None, *,
                                     backend: str | None = None, fallback: str | None = None) -> torch.Tensor:
    """torch.nn.functional.binary_cross_entropy_with_logits on a tle backend, with its arguments in its order
    (size_average and reduce: torch's deprecated spellings of `reduction`, converted as torch converts them).

    `target` has the shape of `input` and values in [0, 1] (soft labels too); `weight` and `pos_weight`
    broadcast to that shape (pos_weight usually [C], over the last dimension). The loss has the dtype torch gives
    it, input's and target's promoted (bf16 logits with fp32 targets: fp32): the input's shape for reduction
    "none", 0-d for "mean" and "sum". Only `input` is differentiated: target, weight and pos_weight must not
    require grad."""
    check_input_and_target(input, target)
    if weight is not None:
        _check_broadcast(weight, "weight", input)
    if pos_weight is not None:
        _check_broadcast(pos_weight, "pos_weight", input)
    reduction = reduction_of(size_average, reduce, reduction, REDUCTIONS)
    if torch.is_grad_enabled():
        for name, v in (("target", target), ("weight", weight), ("pos_weight", pos_weight)):
            if v is not None and v.requires_grad:
                raise tle.LaunchError(f"'{name}' requires grad; tle.ops.binary_cross_entropy_with_logits "
                                      f"differentiates 'input' only (detach '{name}')")
    b = BCE_WITH_LOGITS.resolve(input.device, backend, fallback)
    check_kernel_dtypes("binary_cross_entropy_with_logits", b, input=input, target=target, weight=weight,
                        pos_weight=pos_weight)
    if b != "torch" and input.numel() >= MAX_NUMEL:
        raise tle.LaunchError(f"'input' has {input.numel()} elements; binary_cross_entropy_with_logits on {b} "
                              f"addresses them with 32-bit offsets (fewer than {MAX_NUMEL})")
    # the loss's dtype is torch's promotion of input and target: the kernels compute in the input's
    promoted = torch.promote_types(input.dtype, target.dtype)
    logits = input.to(promoted) if promoted != input.dtype else input
    return BCE_WITH_LOGITS(logits, target, weight, pos_weight, reduction, backend=b)


class BCEWithLogitsLoss(torch.nn.Module):
    """torch.nn.BCEWithLogitsLoss on a tle backend (`backend=`, else TLE_BACKEND), its constructor in its order;
    weight and pos_weight are buffers, as in torch."""

    def __init__(self, weight: torch.Tensor | None = None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight: torch.Tensor | None = None, *, backend: str | None = None, fallback: str | None = None):
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = torch.nn._reduction.legacy_get_string(size_average, reduce)
        if reduction not in REDUCTIONS:
            raise ValueError(f"tle.ops.BCEWithLogitsLoss: reduction must be one of {REDUCTIONS}, got {reduction!r}")
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)
        self.reduction = reduction
        self.backend, self.fallback = backend, fallback

    def forward(self, input, target):
        return binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                pos_weight=self.pos_weight, backend=self.backend or None,
                                                fallback=self.fallback)

    def extra_repr(self):
        return f"reduction={self.reduction!r}, backend={self.backend}"


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(input, target, weight=None, size_average=None, reduce=None, reduction="mean", pos_weight=None):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64."""
    return torch.nn.functional.binary_cross_entropy_with_logits(input, target, weight, size_average, reduce,
                                                                reduction, pos_weight)


def samples(device, dtype):
    def x(*shape):
        return (torch.randn(*shape, device=device, dtype=torch.float32) * 4).to(dtype)

    def soft(*shape):
        return torch.rand(*shape, device=device, dtype=torch.float32).to(dtype)

    def hard(*shape):
        return torch.randint(0, 2, shape, device=device).to(dtype)

    def pos(*shape):
        return (torch.rand(*shape, device=device, dtype=torch.float32) * 2 + 0.25).to(dtype)
    return [Sample((x(5, 1), hard(5, 1)), label="1 column, mean"),
            Sample((x(3, 7), soft(3, 7), pos(7), None, None, "none"), label="7 columns, weight [C], none"),
            Sample((x(2, 3, 33), soft(2, 3, 33), None, None, None, "sum", pos(1, 33)),
                   label="rank 3, pos_weight [1, C], sum"),
            Sample((x(4, 1000), hard(4, 1000), pos(4, 1000), None, None, "mean", pos(1000)),
                   label="1000 columns, full weight and pos_weight [C], mean"),
            Sample((x(6, 33), soft(6, 33), pos(6, 1)), dict(reduction="none", pos_weight=pos(1)),
                   label="weight [M, 1] (materialized), pos_weight of one value, none"),
            Sample((x(37), soft(37), pos(())), dict(pos_weight=pos(37)),
                   label="rank 1, 0-d weight, pos_weight [C], mean"),
            Sample((x(2, 5, 9), soft(2, 5, 9), pos(5, 9)), dict(reduction="sum", pos_weight=pos(2, 1, 9)),
                   label="weight [5, 9], pos_weight [2, 1, 9] (both materialized), sum"),
            Sample((x(0, 16), soft(0, 16)), dict(reduction="none"), label="no rows, none"),
            Sample((x(0, 16), soft(0, 16)), dict(reduction="sum"), label="no rows, sum")]


def _bench_make(shape, dtype, device):
    m, n, *rest = shape
    x = torch.randn(m, n, device=device, dtype=dtype)
    t = torch.rand(m, n, device=device, dtype=dtype)
    return Sample((x, t), dict(reduction=rest[0] if rest else "none"))


def _bench_bytes(sample, mode):
    x, reduction = sample.args[0], sample.kwargs["reduction"]
    per = x.numel() * x.element_size()
    # fwd: read logits and target (write the loss for "none"); bwd: read logits and target (and the upstream
    # gradient for "none"), write dlogits
    if mode == "fwd":
        return (3 if reduction == "none" else 2) * per
    return (4 if reduction == "none" else 3) * per


def _eager(sample):
    x, t = sample.args
    return lambda x=x: torch.nn.functional.binary_cross_entropy_with_logits(x, t, **sample.kwargs)


OPERATOR = Operator(
    "binary_cross_entropy_with_logits", fn=binary_cross_entropy_with_logits, reference=reference, samples=samples,
    grad_inputs=(0,),
    bench=BenchSpec(dry_shapes=[(64, 256), (64, 256, "mean")],
                    shapes=[(32768, 8192), (32768, 8192, "mean"), (32768, 4096), (65536, 1024), (262144, 128)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, shape_help="ROWSxCOLS[xREDUCTION]"))
