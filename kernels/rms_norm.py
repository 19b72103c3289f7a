"""RMSNorm over the trailing `normalized_shape` dimensions, and the fused residual-add variant of a pre-norm
transformer block.

    y = h * rsqrt(mean(h^2) + eps) * weight        h = x, or h = x + residual (rounded to x's dtype)

`tle.ops.rms_norm(input, normalized_shape, weight=None, eps=None, *, residual=None)` takes torch's
F.rms_norm arguments and returns y, or (y, h) with a residual: h is what the next block adds to, and what is
normalized. The kernels take rows: several trailing dimensions are folded into one. Backward: one pass over
(dy, h) per row block; each program adds up its rows' weight gradient in registers and writes one row of
partial sums, which column_sum adds up (no second pass over the input)."""
from __future__ import annotations

from typing import Optional

import torch
import triton.language as tl

import tle
from tle.kernels.column_sum import column_sum
from tle.oplib import (BenchSpec, Operator, Sample, as_rows, check_float, check_int32_offsets, check_kernel_dtypes,
                        programs, shared_memory_per_block)
from tle.oplib.arith import cdiv
from tle.oplib.normalized_shape import as_shape, fold, trailing_dims
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import backward_row_config, forward_row_config, row_stat_like, torch_compute_dtype
from tle.oplib.tensors import reshaped

MAX_COLS = 65536


@tle.jit
def rms_norm_fwd_kernel(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, rstd_ptr, x_row_stride, r_row_stride, y_row_stride,
                        h_row_stride, n_rows, n_cols, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        HAS_RESIDUAL: tl.constexpr, HAS_WEIGHT: tl.constexpr, TWO_PASS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    if TWO_PASS:
        # rows wider than a tile (see forward_row_config): the first loop adds up the squares chunk by chunk and
        # asks L2 to keep the row, the second reads it again from there (h recomputed from x and r, bit for bit)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            h = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
            if HAS_RESIDUAL:
                r = tl.load(r_ptr + rows[:, None] * r_row_stride + cols[None, :], mask=mask, other=0.0,
                            eviction_policy="evict_last").to(tl.float32)
                h_out = (h + r).to(h_ptr.dtype.element_ty)
                tl.store(h_ptr + rows[:, None] * h_row_stride + cols[None, :], h_out, mask=mask)
                h = h_out.to(tl.float32)
            acc += h * h
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)
        tl.store(rstd_ptr + rows, rstd, mask=row_mask)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            h = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            if HAS_RESIDUAL:
                r = tl.load(r_ptr + rows[:, None] * r_row_stride + cols[None, :], mask=mask, other=0.0,
                            eviction_policy="evict_first").to(tl.float32)
                h = (h + r).to(h_ptr.dtype.element_ty).to(tl.float32)
            y = h * rstd[:, None]
            if HAS_WEIGHT:
                y = y * tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0,
                                eviction_policy="evict_last").to(tl.float32)[None, :]
            tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        cols = tl.arange(0, BLOCK_N)
        mask = row_mask[:, None] & (cols < n_cols)[None, :]
        h = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:
            r = tl.load(r_ptr + rows[:, None] * r_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            h_out = (h + r).to(h_ptr.dtype.element_ty)
            tl.store(h_ptr + rows[:, None] * h_row_stride + cols[None, :], h_out, mask=mask)
            h = h_out.to(tl.float32)          # normalize the sum as rounded, as the unfused code would
        rstd = tl.rsqrt(tl.sum(h * h, axis=1) / n_cols + eps)
        tl.store(rstd_ptr + rows, rstd, mask=row_mask)
        y = h * rstd[:, None]
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@tle.jit
def rms_norm_bwd_kernel(dy_ptr, h_ptr, w_ptr, rstd_ptr, dh_ptr, dx_ptr, dw_ptr, dy_row_stride, h_row_stride,
                        dh_row_stride, dx_row_stride, n_rows, n_cols, blocks_per_program, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_DH: tl.constexpr,
                        PREFETCH: tl.constexpr, ASYNC_LOADS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    # PREFETCH: the loads of row block i + 1 are issued before the reductions of block i, so that their latency
    # overlaps this block's work; measured to pay for one wide program per multiprocessor (8192 columns) on
    # Triton, not for the narrower rows of many small programs; TileLang pipelines the loads instead (ASYNC_LOADS;
    # its lowering copies register tiles carried across steps), see backward_row_config
    if PREFETCH:
        first = pid * blocks_per_program * BLOCK_M + tl.arange(0, BLOCK_M)
        first_mask = (first < n_rows)[:, None] & col_mask[None, :]
        dy_next = tl.load(dy_ptr + first[:, None] * dy_row_stride + cols[None, :], mask=first_mask, other=0.0)
        h_next = tl.load(h_ptr + first[:, None] * h_row_stride + cols[None, :], mask=first_mask, other=0.0)
        if HAS_DH:
            dh_next = tl.load(dh_ptr + first[:, None] * dh_row_stride + cols[None, :], mask=first_mask, other=0.0)
    for i in range(0, blocks_per_program):
        rows = (pid * blocks_per_program + i) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        if PREFETCH:
            dy = dy_next.to(tl.float32)
            h = h_next.to(tl.float32)
            # the last step reads the next program's first block (a masked step would be a mask term that
            # TileLang cannot load as a box): one block in blocks_per_program read twice
            next_rows = rows + BLOCK_M
            next_mask = (next_rows < n_rows)[:, None] & col_mask[None, :]
            dy_next = tl.load(dy_ptr + next_rows[:, None] * dy_row_stride + cols[None, :], mask=next_mask, other=0.0)
            h_next = tl.load(h_ptr + next_rows[:, None] * h_row_stride + cols[None, :], mask=next_mask,
                               other=0.0)
            if HAS_DH:
                dh = dh_next.to(tl.float32)
                dh_next = tl.load(dh_ptr + next_rows[:, None] * dh_row_stride + cols[None, :], mask=next_mask,
                                  other=0.0)
        else:       # ASYNC_LOADS: staged through shared memory by the loop's pipeline (TileLang)
            dy = tle.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0,
                          is_async=ASYNC_LOADS).to(tl.float32)
            h = tle.load(h_ptr + rows[:, None] * h_row_stride + cols[None, :], mask=mask, other=0.0,
                         is_async=ASYNC_LOADS).to(tl.float32)
            if HAS_DH:
                dh = tle.load(dh_ptr + rows[:, None] * dh_row_stride + cols[None, :], mask=mask, other=0.0,
                              is_async=ASYNC_LOADS).to(tl.float32)
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        h_hat = h * rstd[:, None]
        if HAS_WEIGHT:
            g = dy * w[None, :]
            dw += dy * h_hat
        else:
            g = dy
        dot = tl.sum(g * h_hat, axis=1) / n_cols
        dx = (g - h_hat * dot[:, None]) * rstd[:, None]
        if HAS_DH:         # the gradient reaching h directly (the residual stream) adds to x's
            dx += dh
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)
    if HAS_WEIGHT:
        tl.store(dw_ptr + pid * n_cols + cols, tl.sum(dw, axis=0), mask=col_mask)


# -- the torch backend: the same arithmetic in torch (fp32, or fp64 for fp64 inputs) ------------------------
def _torch_forward(x, weight, residual, eps):
    ct = torch_compute_dtype(x)
    h = (x.to(ct) + residual.to(ct)).to(x.dtype) if residual is not None else x
    hf = h.to(ct)
    rstd = torch.rsqrt(hf.pow(2).mean(-1) + eps)
    y = hf * rstd[:, None]
    if weight is not None:
        y = y * weight.to(ct)
    return y.to(x.dtype), h, rstd


def _torch_backward(dy, h, weight, rstd, dh):
    ct = rstd.dtype
    h_hat = h.to(ct) * rstd[:, None]
    g = dy.to(ct) * weight.to(ct) if weight is not None else dy.to(ct)
    dx = (g - h_hat * (g * h_hat).mean(-1, keepdim=True)) * rstd[:, None]
    if dh is not None:
        dx = dx + dh.to(ct)
    dw = (dy.to(ct) * h_hat).sum(0).to(weight.dtype) if weight is not None else None
    return dx.to(h.dtype), dw


# -- the kernel backends ------------------------------------------------------------------------------------
def _kernel_forward(x, weight, residual, eps, backend):
    m, n = x.shape
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    h = torch.empty_like(y) if residual is not None else x
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    if m and n:
        cfg = forward_row_config(n, backend)
        r = residual if residual is not None else x
        rms_norm_fwd_kernel[(cdiv(m, cfg.block_m),)](
            x, r, weight if weight is not None else x, y, h, rstd, x.stride(0), r.stride(0), y.stride(0),
            h.stride(0), m, n, float(eps), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, HAS_RESIDUAL=residual is not None,
            HAS_WEIGHT=weight is not None, TWO_PASS=cfg.two_pass, backend=backend, num_warps=cfg.num_warps)
    return y, h, rstd


def _kernel_backward(dy, h, weight, rstd, dh, backend):
    m, n = h.shape
    dx = torch.empty((m, n), device=h.device, dtype=h.dtype)
    dw = None
    staged = h.element_size() * (3 if dh is not None else 2)       # dy, h (and dh) per column, in shared memory
    cfg = backward_row_config(n, backend, staged_bytes=staged, smem_bytes=shared_memory_per_block(h.device))
    blocks = cdiv(m, cfg.block_m)
    grid = programs(h.device, cfg.per_sm, blocks)
    per_program = cdiv(blocks, grid)
    partials = torch.empty((grid, n), device=h.device, dtype=torch.float32) if weight is not None else None
    if m and n:
        rms_norm_bwd_kernel[(grid,)](
            dy, h, weight if weight is not None else h, rstd, dh if dh is not None else dy, dx,
            partials if partials is not None else rstd, dy.stride(0), h.stride(0),
            dh.stride(0) if dh is not None else 0, dx.stride(0), m, n, per_program, BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n, HAS_WEIGHT=weight is not None, HAS_DH=dh is not None, PREFETCH=cfg.prefetch,
            ASYNC_LOADS=cfg.async_loads, backend=backend, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if weight is not None:
        dw = column_sum(partials, weight.dtype, backend) if m else torch.zeros_like(weight)
    return dx, dw


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_shape(size):
    return ((33, 1000), torch.float32) if size == "small" else ((32768, 8192), torch.bfloat16)


@tle.example(rms_norm_fwd_kernel)
def _fwd_example(device, size):
    (m, n), dtype = _example_shape(size)
    x, r = torch.randn(m, n, device=device, dtype=dtype), torch.randn(m, n, device=device, dtype=dtype)
    w = torch.rand(n, device=device, dtype=dtype) + 0.5
    y, h = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    rstd = torch.full((m,), float("nan"), device=device)
    cfg = forward_row_config(n, "triton")      # one launch for both lowerings

    def ref():
        y_ref, h_ref, rstd_ref = _torch_forward(x, w, r, 1e-6)
        return {"y": y_ref, "h": h_ref, "rstd": rstd_ref}
    return tle.Launch(grid=(cdiv(m, cfg.block_m),), args=(x, r, w, y, h, rstd, n, n, n, n, m, n, 1e-6),
                      kwargs=dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, HAS_RESIDUAL=True, HAS_WEIGHT=True,
                                  TWO_PASS=cfg.two_pass, num_warps=cfg.num_warps),
                      outputs={"y": y, "h": h, "rstd": rstd}, reference=ref,
                      bytes=4 * m * n * x.element_size(), label=f"{m}x{n} {str(dtype)[6:]}")


@tle.example(rms_norm_bwd_kernel)
def _bwd_example(device, size):
    (m, n), dtype = _example_shape(size)
    dy, h, dh = (torch.randn(m, n, device=device, dtype=dtype) for _ in range(3))
    w = torch.rand(n, device=device, dtype=dtype) + 0.5
    rstd = torch.rsqrt(h.float().pow(2).mean(-1) + 1e-6)
    dx = torch.full_like(h, float("nan"))
    # one launch for both backends: Triton's configuration (the operator launches TileLang's own)
    block_m, block_n, warps, per_sm, prefetch, async_loads, _ = backward_row_config(n, "triton")
    blocks = cdiv(m, block_m)
    grid = 4 if size == "small" else 132 * per_sm
    per_program = cdiv(blocks, grid)
    partials = torch.full((grid, n), float("nan"), device=device)

    def ref():
        dx_ref, _ = _torch_backward(dy, h, w, rstd, dh)
        h_hat = h.float() * rstd[:, None]
        rows = torch.arange(m, device=device) // block_m // per_program
        dw_parts = torch.zeros(grid, n, device=device).index_add_(0, rows, dy.float() * h_hat)
        return {"dx": dx_ref, "dw_partials": dw_parts}
    return tle.Launch(grid=(grid,), args=(dy, h, w, rstd, dh, dx, partials, n, n, n, n, m, n, per_program),
                      kwargs=dict(BLOCK_M=block_m, BLOCK_N=block_n, HAS_WEIGHT=True, HAS_DH=True, PREFETCH=prefetch,
                                  ASYNC_LOADS=async_loads, num_warps=warps),
                      outputs={"dx": dx, "dw_partials": partials}, reference=ref,
                      bytes=4 * m * n * h.element_size(), label=f"{m}x{n} {str(dtype)[6:]}")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _by_rows(run, x: torch.Tensor, weight: Optional[torch.Tensor], residual: Optional[torch.Tensor],
             eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, h, rstd); h is x + residual, or an empty placeholder without a residual."""
    r2 = as_rows(residual, "residual") if residual is not None else None
    y, h, rstd = run(as_rows(x, "x"), weight, r2, eps)
    return reshaped(y, x.shape), (reshaped(h, x.shape) if residual is not None else x.new_empty(0)), rstd


def _backward_by_rows(run, dy: torch.Tensor, h: torch.Tensor, weight: Optional[torch.Tensor], rstd: torch.Tensor,
                      dh: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    dh2 = as_rows(dh, "dh") if dh is not None else None
    dx, dw = run(as_rows(dy, "dy"), as_rows(h, "h"), weight, rstd, dh2)
    return reshaped(dx, h.shape), (dw if dw is not None else h.new_empty(0))


def _forward_fake(x, weight, residual, eps):
    h = x.new_empty(x.shape) if residual is not None else x.new_empty(0)
    return x.new_empty(x.shape), h, row_stat_like(x)


def _backward_fake(dy, h, weight, rstd, dh):
    return h.new_empty(h.shape), (weight.new_empty(weight.shape) if weight is not None else h.new_empty(0))


def _save(ctx, inputs, output):
    x, weight, residual, eps = inputs
    _, h, rstd = output
    ctx.save_for_backward(h if residual is not None else x, weight, rstd)
    ctx.has_residual = residual is not None
    ctx.set_materialize_grads(False)     # no zeros made on the host for the statistics' unused gradients


def _grads(ctx, backward, dy, dh, _drstd):
    dh = dh if ctx.has_residual else None
    if dy is None and dh is None:
        return ()
    h, weight, rstd = ctx.saved_tensors
    if dy is None:                                       # only x + residual was used downstream
        dy = torch.zeros_like(h)
    dx, dw = backward(dy, h, weight, rstd, dh)
    return dx, (dw if weight is not None else None), (dx if ctx.has_residual else None)


RMS_NORM = Recipe("rms_norm",
                  forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_by_rows, fake=_forward_fake),
                  backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_by_rows,
                                 fake=_backward_fake),
                  save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def rms_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None, eps: float | None = None,
             *, residual: torch.Tensor | None = None, backend: str | None = None, fallback: str | None = None):
    """torch.nn.functional.rms_norm on a tle backend: RMSNorm of `input` over its trailing `normalized_shape`
    dimensions, scaled by `weight` (of that shape) where given; eps None is torch.finfo(input.dtype).eps, as in
    torch. With `residual` (keyword-only, input's shape and dtype) the norm is of h = input + residual, and the
    result is (y, h)."""
    check_float(input, "input", rank=tuple(range(1, 9)))
    if weight is not None:
        check_float(weight, "weight", device=input.device)
    folded = fold("rms_norm", input, normalized_shape, weight=weight)
    x, weight = folded.rows, folded.params["weight"]
    n = x.shape[-1]
    if residual is not None:
        check_float(residual, "residual", device=input.device, shape=tuple(input.shape))
        if residual.dtype != input.dtype:
            raise tle.LaunchError(f"'residual' has dtype {residual.dtype}; expected input's dtype {input.dtype}")
        residual = folded.fold(residual)
    b = RMS_NORM.resolve(input.device, backend, fallback)
    check_kernel_dtypes("rms_norm", b, input=input, weight=weight)
    check_int32_offsets("rms_norm", b, "input", input)
    if residual is not None:
        check_int32_offsets("rms_norm", b, "residual", residual)
    if b != "torch" and n > MAX_COLS:
        raise tle.LaunchError(f"'input' has {n} elements a row (normalized_shape); rms_norm on {b} holds a row in "
                              f"one tile (at most {MAX_COLS})")
    eps = torch.finfo(input.dtype).eps if eps is None else eps
    y, h, _ = RMS_NORM(x, weight, residual, float(eps), backend=b)
    return (folded.unfold(y), folded.unfold(h)) if residual is not None else folded.unfold(y)


class RMSNorm(torch.nn.Module):
    """torch.nn.RMSNorm on a tle backend (`backend=`, else TLE_BACKEND): its constructor and defaults (eps None:
    the input dtype's eps); forward(x, residual=None) also takes a residual to add first (then it returns
    (y, x + residual))."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None, *, backend: str | None = None, fallback: str | None = None):
        super().__init__()
        self.normalized_shape = as_shape(normalized_shape, "RMSNorm")
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.backend, self.fallback = backend, fallback
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self):
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)

    def forward(self, x, residual=None):
        return rms_norm(x, self.normalized_shape, self.weight, self.eps, residual=residual, backend=self.backend,
                        fallback=self.fallback)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"backend={self.backend}")


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(x, normalized_shape, weight=None, eps=None, residual=None):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64 (the samples give
    eps: None would be fp64's eps here, not that of the dtype the operator ran in)."""
    dims = trailing_dims(normalized_shape, "rms_norm")
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    h = x + residual if residual is not None else x
    y = h * torch.rsqrt(h.pow(2).mean(dims, keepdim=True) + eps)
    y = y * weight if weight is not None else y
    return (y, h) if residual is not None else y


def samples(device, dtype):
    def t(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, device=device, dtype=torch.float32).mul(scale).add(shift).to(dtype)
    return [Sample((t(5, 1), 1, t(1, shift=1), 1e-6), label="1 column"),
            Sample((t(3, 7), (7,), t(7, shift=1), 1e-6), label="7 columns"),
            Sample((t(2, 3, 33), [33], t(33, shift=1), 1e-5), label="rank 3, 33 columns"),
            Sample((t(4, 1000), 1000, None, 1e-6), label="no weight, 1000 columns"),
            Sample((t(6, 33), 33, t(33, shift=1), 1e-6), dict(residual=t(6, 33)), label="residual"),
            Sample((t(2, 5, 3, 4), (3, 4), t(3, 4, shift=1), 1e-6), label="normalized_shape of 2 dimensions"),
            Sample((t(3, 2, 40), (2, 40), t(2, 40, shift=1), 1e-6), dict(residual=t(3, 2, 40)),
                   label="2 dimensions, residual"),
            Sample((t(0, 16), 16, t(16), 1e-6), label="no rows")]


def _bench_make(shape, dtype, device):
    m, n = shape
    x = torch.randn(m, n, device=device, dtype=dtype)
    w = torch.rand(n, device=device, dtype=dtype) + 0.5
    return Sample((x, (n,), w, 1e-6))


def _bench_bytes(sample, mode):
    x, w = sample.args[0], sample.args[2]
    # fwd: read x, write y; bwd: read dy and x, write dx (the weight and rstd are a rounding error)
    return (2 if mode == "fwd" else 3) * x.numel() * x.element_size() + w.numel() * w.element_size()


def _eager(sample):
    x, shape, w, eps = sample.args
    return lambda x=x, w=w: torch.nn.functional.rms_norm(x, shape, w, eps)


def _liger(sample):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    x, _, w, eps = sample.args
    # in_place=False: by default Liger writes dx into the upstream gradient
    return lambda x=x, w=w: LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False)


OPERATOR = Operator(
    "rms_norm", fn=rms_norm, reference=reference, samples=samples, grad_inputs=(0, 2, "residual"),
    bench=BenchSpec(dry_shapes=[(64, 256), (32, 512)],
                    shapes=[(32768, 8192), (32768, 4096), (65536, 2048), (65536, 1024), (131072, 512)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, peers={"liger": _liger},
                    shape_help="ROWSxCOLS"))
