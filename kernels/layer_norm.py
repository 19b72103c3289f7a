"""LayerNorm over the trailing `normalized_shape` dimensions, as torch.nn.functional.layer_norm (biased
variance):

    y = (x - mean(x)) * rstd * weight + bias        rstd = rsqrt(mean((x - mean(x))^2) + eps)

`tle.ops.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)` takes torch's arguments;
`tle.ops.LayerNorm` is torch.nn.LayerNorm. The kernels take rows: several trailing dimensions are folded into
one. The forward keeps each row's mean and rstd (fp32) for the backward. Backward: one pass
over (dy, x) per row block gives dx; each program adds up its rows' weight and bias gradients in
registers and writes one row of partial sums of each, which column_sums adds up in one launch (no second pass over the
input)."""
from __future__ import annotations

from typing import Optional

import torch
import triton.language as tl

import tle
from tle.kernels.column_sum import parameter_grads
from tle.oplib import (BenchSpec, Operator, Sample, as_rows, check_float, check_int32_offsets, check_kernel_dtypes,
                        programs, shared_memory_per_block)
from tle.oplib.arith import cdiv
from tle.oplib.normalized_shape import add_affine_parameters, as_shape, fold, reset_affine_parameters, trailing_dims
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import backward_row_config, row_config, row_stat_like, torch_compute_dtype
from tle.oplib.tensors import reshaped

MAX_COLS = 65536


@tle.jit
def layer_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, x_row_stride, y_row_stride, n_rows,
                          n_cols, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                          HAS_BIAS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / n_cols
    xc = tl.where(col_mask[None, :], x - mean[:, None], 0.0)       # the padding columns add nothing
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
    tl.store(mean_ptr + rows, mean, mask=row_mask)
    tl.store(rstd_ptr + rows, rstd, mask=row_mask)
    y = xc * rstd[:, None]
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS:
        y = y + tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@tle.jit
def layer_norm_bwd_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr, dy_row_stride,
                          x_row_stride, dx_row_stride, n_rows, n_cols, blocks_per_program, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                          PREFETCH: tl.constexpr, ASYNC_LOADS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    if HAS_WEIGHT:      # accumulators only where used: an unused fragment can defeat TileLang layout inference
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if HAS_BIAS:
        db = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    # PREFETCH: the loads of row block i + 1 are issued before the reductions of block i, so that their latency
    # overlaps this block's work; measured to pay for one wide program per multiprocessor (8192 columns) on
    # Triton, not for the narrower rows of many small programs; TileLang pipelines the loads instead (ASYNC_LOADS;
    # its lowering copies register tiles carried across steps), see backward_row_config
    if PREFETCH:
        first = pid * blocks_per_program * BLOCK_M + tl.arange(0, BLOCK_M)
        first_mask = (first < n_rows)[:, None] & col_mask[None, :]
        dy_next = tl.load(dy_ptr + first[:, None] * dy_row_stride + cols[None, :], mask=first_mask, other=0.0)
        x_next = tl.load(x_ptr + first[:, None] * x_row_stride + cols[None, :], mask=first_mask, other=0.0)
    for i in range(0, blocks_per_program):
        rows = (pid * blocks_per_program + i) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        if PREFETCH:
            dy = dy_next.to(tl.float32)
            x = x_next.to(tl.float32)
            # the last step reads the next program's first block (a masked step would be a mask term that
            # TileLang cannot load as a box): one block in blocks_per_program read twice
            next_rows = rows + BLOCK_M
            next_mask = (next_rows < n_rows)[:, None] & col_mask[None, :]
            dy_next = tl.load(dy_ptr + next_rows[:, None] * dy_row_stride + cols[None, :], mask=next_mask, other=0.0)
            x_next = tl.load(x_ptr + next_rows[:, None] * x_row_stride + cols[None, :], mask=next_mask,
                               other=0.0)
        else:       # ASYNC_LOADS: staged through shared memory by the loop's pipeline (TileLang)
            dy = tle.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0,
                          is_async=ASYNC_LOADS).to(tl.float32)
            x = tle.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0,
                         is_async=ASYNC_LOADS).to(tl.float32)
        mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        x_hat = (x - mean[:, None]) * rstd[:, None]      # nonzero in padding columns, where dy is zero
        if HAS_WEIGHT:
            g = dy * w[None, :]
            dw += dy * x_hat
        else:
            g = dy
        if HAS_BIAS:
            db += dy
        c_hat = tl.sum(g * x_hat, axis=1) / n_cols
        c_one = tl.sum(g, axis=1) / n_cols
        dx = (g - x_hat * c_hat[:, None] - c_one[:, None]) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)
    if HAS_WEIGHT:
        tl.store(dw_ptr + pid * n_cols + cols, tl.sum(dw, axis=0), mask=col_mask)
    if HAS_BIAS:
        tl.store(db_ptr + pid * n_cols + cols, tl.sum(db, axis=0), mask=col_mask)


# -- the torch backend: the same arithmetic in torch (fp32, or fp64 for fp64 inputs) ------------------------
def _torch_forward(x, weight, bias, eps):
    ct = torch_compute_dtype(x)
    xf = x.to(ct)
    mean = xf.mean(-1)
    xc = xf - mean[:, None]
    rstd = torch.rsqrt(xc.pow(2).mean(-1) + eps)
    y = xc * rstd[:, None]
    if weight is not None:
        y = y * weight.to(ct)
    if bias is not None:
        y = y + bias.to(ct)
    return y.to(x.dtype), mean, rstd


def _torch_backward(dy, x, weight, bias, mean, rstd):
    ct = rstd.dtype
    x_hat = (x.to(ct) - mean[:, None]) * rstd[:, None]
    dyf = dy.to(ct)
    g = dyf * weight.to(ct) if weight is not None else dyf
    dx = (g - x_hat * (g * x_hat).mean(-1, keepdim=True) - g.mean(-1, keepdim=True)) * rstd[:, None]
    dw = (dyf * x_hat).sum(0).to(weight.dtype) if weight is not None else None
    db = dyf.sum(0).to(bias.dtype) if bias is not None else None
    return dx.to(x.dtype), dw, db


# -- the kernel backends ------------------------------------------------------------------------------------
def _forward_config(n_cols: int) -> tuple[int, int, int]:
    """row_config with at most 8 warps: on the H200 (bf16, 8192 columns) 16 warps ran at 3.81 TB/s on
    Triton and 2.71 on TileLang, 8 warps at 4.13 and 3.83."""
    block_m, block_n, warps = row_config(n_cols)
    return block_m, block_n, min(warps, 8)


def _kernel_forward(x, weight, bias, eps, backend):
    m, n = x.shape
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    mean = torch.empty(m, device=x.device, dtype=torch.float32)
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    if m and n:
        block_m, block_n, warps = _forward_config(n)
        layer_norm_fwd_kernel[(cdiv(m, block_m),)](
            x, weight if weight is not None else x, bias if bias is not None else x, y, mean, rstd, x.stride(0),
            y.stride(0), m, n, float(eps), BLOCK_M=block_m, BLOCK_N=block_n, HAS_WEIGHT=weight is not None,
            HAS_BIAS=bias is not None, backend=backend, num_warps=warps)
    return y, mean, rstd


def _kernel_backward(dy, x, weight, bias, mean, rstd, backend):
    m, n = x.shape
    dx = torch.empty((m, n), device=x.device, dtype=x.dtype)
    # dy and x per column in shared memory; two rows a step on TileLang (3.40 TB/s against 3.23, backward_row_config)
    cfg = backward_row_config(n, backend, staged_bytes=2 * x.element_size(),
                              smem_bytes=shared_memory_per_block(x.device), tilelang_rows=2)
    blocks = cdiv(m, cfg.block_m)
    grid = programs(x.device, cfg.per_sm, blocks)
    per_program = cdiv(blocks, grid)
    # the partials of the weight's and the bias's gradients, in one buffer where both are asked for
    parts = torch.empty(((weight is not None) + (bias is not None), grid, n), device=x.device, dtype=torch.float32)
    dw_parts = parts[0] if weight is not None else None
    db_parts = parts[-1] if bias is not None else None
    if m and n:
        layer_norm_bwd_kernel[(grid,)](
            dy, x, weight if weight is not None else x, mean, rstd, dx,
            dw_parts if dw_parts is not None else rstd, db_parts if db_parts is not None else rstd,
            dy.stride(0), x.stride(0), dx.stride(0), m, n, per_program, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, PREFETCH=cfg.prefetch,
            ASYNC_LOADS=cfg.async_loads, backend=backend, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return (dx,) + parameter_grads(parts, weight, bias, backend, m > 0)


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_shape(size):
    return ((33, 1000), torch.float32) if size == "small" else ((32768, 8192), torch.bfloat16)


def _example_params(n, device, dtype):
    return torch.rand(n, device=device, dtype=dtype) + 0.5, torch.randn(n, device=device, dtype=dtype)


@tle.example(layer_norm_fwd_kernel)
def _fwd_example(device, size):
    (m, n), dtype = _example_shape(size)
    x = torch.randn(m, n, device=device, dtype=dtype).add_(1.0)
    w, b = _example_params(n, device, dtype)
    y = torch.full_like(x, float("nan"))
    mean, rstd = (torch.full((m,), float("nan"), device=device) for _ in range(2))
    block_m, block_n, warps = _forward_config(n)

    def ref():
        y_ref, mean_ref, rstd_ref = _torch_forward(x, w, b, 1e-5)
        return {"y": y_ref, "mean": mean_ref, "rstd": rstd_ref}
    return tle.Launch(grid=(cdiv(m, block_m),), args=(x, w, b, y, mean, rstd, n, n, m, n, 1e-5),
                      kwargs=dict(BLOCK_M=block_m, BLOCK_N=block_n, HAS_WEIGHT=True, HAS_BIAS=True, num_warps=warps),
                      outputs={"y": y, "mean": mean, "rstd": rstd}, reference=ref,
                      bytes=2 * m * n * x.element_size(), label=f"{m}x{n} {str(dtype)[6:]}")


@tle.example(layer_norm_bwd_kernel)
def _bwd_example(device, size):
    (m, n), dtype = _example_shape(size)
    dy, x = torch.randn(m, n, device=device, dtype=dtype), torch.randn(m, n, device=device, dtype=dtype).add_(1.0)
    w, _ = _example_params(n, device, dtype)
    mean = x.float().mean(-1)
    rstd = torch.rsqrt((x.float() - mean[:, None]).pow(2).mean(-1) + 1e-5)
    dx = torch.full_like(x, float("nan"))
    # one launch for both backends: Triton's configuration (the operator launches TileLang's own)
    block_m, block_n, warps, per_sm, prefetch, async_loads, _ = backward_row_config(n, "triton")
    blocks = cdiv(m, block_m)
    grid = 4 if size == "small" else 132 * per_sm
    per_program = cdiv(blocks, grid)
    dw_parts, db_parts = (torch.full((grid, n), float("nan"), device=device) for _ in range(2))

    def ref():
        dx_ref, _, _ = _torch_backward(dy, x, w, None, mean, rstd)
        x_hat = (x.float() - mean[:, None]) * rstd[:, None]
        owner = torch.arange(m, device=device) // block_m // per_program
        parts = torch.zeros(grid, n, device=device)
        return {"dx": dx_ref, "dw_partials": parts.index_add(0, owner, dy.float() * x_hat),
                "db_partials": parts.index_add(0, owner, dy.float())}
    return tle.Launch(grid=(grid,), args=(dy, x, w, mean, rstd, dx, dw_parts, db_parts, n, n, n, m, n, per_program),
                      kwargs=dict(BLOCK_M=block_m, BLOCK_N=block_n, HAS_WEIGHT=True, HAS_BIAS=True, PREFETCH=prefetch,
                                  ASYNC_LOADS=async_loads, num_warps=warps),
                      outputs={"dx": dx, "dw_partials": dw_parts, "db_partials": db_parts}, reference=ref,
                      bytes=3 * m * n * x.element_size(), label=f"{m}x{n} {str(dtype)[6:]}")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _by_rows(run, x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
             eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, mean, rstd = run(as_rows(x, "x"), weight, bias, eps)
    return reshaped(y, x.shape), mean, rstd


def _backward_by_rows(run, dy: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor],
                      bias: Optional[torch.Tensor], mean: torch.Tensor,
                      rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dw, db = run(as_rows(dy, "dy"), as_rows(x, "x"), weight, bias, mean, rstd)
    return (reshaped(dx, x.shape), dw if dw is not None else x.new_empty(0),
            db if db is not None else x.new_empty(0))


def _backward_fake(dy, x, weight, bias, mean, rstd):
    return (x.new_empty(x.shape), weight.new_empty(weight.shape) if weight is not None else x.new_empty(0),
            bias.new_empty(bias.shape) if bias is not None else x.new_empty(0))


def _save(ctx, inputs, output):
    x, weight, bias, eps = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, bias, mean, rstd)
    ctx.set_materialize_grads(False)     # no zeros made on the host for the statistics' unused gradients


def _grads(ctx, backward, dy, _dmean, _drstd):
    if dy is None:
        return ()
    x, weight, bias, mean, rstd = ctx.saved_tensors
    dx, dw, db = backward(dy, x, weight, bias, mean, rstd)
    return dx, (dw if weight is not None else None), (db if bias is not None else None)


LAYER_NORM = Recipe("layer_norm",
                    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_by_rows,
                                  fake=lambda x, weight, bias, eps: (x.new_empty(x.shape), row_stat_like(x),
                                                                     row_stat_like(x))),
                    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_by_rows,
                                   fake=_backward_fake),
                    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def layer_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5, *, backend: str | None = None,
               fallback: str | None = None) -> torch.Tensor:
    """torch.nn.functional.layer_norm on a tle backend: LayerNorm of `input` over its trailing
    `normalized_shape` dimensions (biased variance, as torch), scaled by `weight` and shifted by `bias` (each of
    that shape) where given."""
    check_float(input, "input", rank=tuple(range(1, 9)))
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            check_float(p, name, device=input.device)
    folded = fold("layer_norm", input, normalized_shape, weight=weight, bias=bias)
    x, weight, bias = folded.rows, folded.params["weight"], folded.params["bias"]
    n = x.shape[-1]
    b = LAYER_NORM.resolve(input.device, backend, fallback)
    check_kernel_dtypes("layer_norm", b, input=input, weight=weight, bias=bias)
    check_int32_offsets("layer_norm", b, "input", input)
    if b != "torch" and n > MAX_COLS:
        raise tle.LaunchError(f"'input' has {n} elements a row (normalized_shape); layer_norm on {b} holds a row "
                              f"in one tile (at most {MAX_COLS})")
    y, _, _ = LAYER_NORM(x, weight, bias, float(eps), backend=b)
    return folded.unfold(y)


class LayerNorm(torch.nn.Module):
    """torch.nn.LayerNorm on a tle backend (`backend=`, else TLE_BACKEND), with its constructor and defaults."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None, *, backend: str | None = None, fallback: str | None = None):
        super().__init__()
        shape = self.normalized_shape = as_shape(normalized_shape, "LayerNorm")
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.backend, self.fallback = backend, fallback
        add_affine_parameters(self, shape, elementwise_affine, bias, device, dtype)

    def reset_parameters(self):
        reset_affine_parameters(self)

    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps, backend=self.backend,
                          fallback=self.fallback)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"backend={self.backend}")


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64."""
    dims = trailing_dims(normalized_shape, "layer_norm")
    mean = x.mean(dims, keepdim=True)
    var = (x - mean).pow(2).mean(dims, keepdim=True)
    y = (x - mean) * torch.rsqrt(var + eps)
    y = y * weight if weight is not None else y
    return y + bias if bias is not None else y


def samples(device, dtype):
    def t(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, device=device, dtype=torch.float32).mul(scale).add(shift).to(dtype)
    # one column: x - mean is 0, so the gradient is rounding noise times rsqrt(eps); a larger eps keeps that
    # noise within the tolerance of an fp32 result (with eps=1e-5 a GPU's fused multiply-adds exceed it)
    return [Sample((t(5, 1), 1, t(1, shift=1), t(1), 1e-3), label="1 column"),
            Sample((t(3, 7), (7,), t(7, shift=1)), label="7 columns, weight only"),
            Sample((t(2, 3, 33, shift=3), [33], t(33, shift=1), t(33), 1e-3),
                   label="rank 3, 33 columns, off-centre rows"),
            Sample((t(4, 1000), 1000, None, t(1000)), label="bias only, 1000 columns"),
            Sample((t(6, 33), 33), dict(weight=t(33, shift=1), bias=t(33)), label="keywords"),
            Sample((t(2, 2, 2, 65), 65), label="no affine, rank 4"),
            Sample((t(2, 3, 5, 8), (5, 8), t(5, 8, shift=1), t(5, 8)), label="normalized_shape of 2 dimensions"),
            Sample((t(4, 2, 3, 6), (2, 3, 6), None, t(2, 3, 6)), label="3 dimensions, bias only"),
            Sample((t(0, 16), 16, t(16), t(16)), label="no rows")]


def _bench_make(shape, dtype, device):
    m, n = shape
    x = torch.randn(m, n, device=device, dtype=dtype)
    w = torch.rand(n, device=device, dtype=dtype) + 0.5
    b = torch.randn(n, device=device, dtype=dtype)
    return Sample((x, (n,), w, b, 1e-5))


def _bench_bytes(sample, mode):
    x, _, w, b = sample.args[:4]
    # fwd: read x, write y; bwd: read dy and x, write dx (weight, bias, their grads, mean and rstd: a rounding error)
    return (2 if mode == "fwd" else 3) * x.numel() * x.element_size() + (w.numel() + b.numel()) * w.element_size()


def _eager(sample):
    x, shape, w, b, eps = sample.args
    return lambda x=x, w=w, b=b: torch.nn.functional.layer_norm(x, shape, w, b, eps)


def _liger(sample):
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    x, _, w, b, eps = sample.args
    return lambda x=x, w=w, b=b: LigerLayerNormFunction.apply(x, w, b, eps)


OPERATOR = Operator(
    "layer_norm", fn=layer_norm, reference=reference, samples=samples, grad_inputs=(0, 2, 3, "weight", "bias"),
    bench=BenchSpec(dry_shapes=[(64, 256), (32, 512)],
                    shapes=[(32768, 8192), (32768, 4096), (65536, 2048), (65536, 1024), (131072, 512)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, peers={"liger": _liger},
                    shape_help="ROWSxCOLS"))
