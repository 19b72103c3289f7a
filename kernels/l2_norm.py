"""L2 normalization over the last dimension, in the form the gated delta rule applies to its queries and keys:

    y = x * rsqrt(sum(x^2) + eps)            (eps = 1e-6 by default, added to the sum of squares)

This is not torch.nn.functional.normalize, which divides by max(||x||, eps): here eps enters under the
square root, so every row, the zero row included, has a smooth gradient. Backward, with rstd the saved
rsqrt(sum(x^2) + eps) (fp32, one per row) and y recomputed from x in fp32:

    dx = rstd * (dy - y * sum(dy * y))

`tle.ops.l2_norm(x, eps=1e-6)`; `tle.ops.L2Norm(eps)` is the same as a module."""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.oplib import (BenchSpec, Operator, Sample, as_rows, check_float, check_int32_offsets, check_kernel_dtypes,
                        row_stat_like)
from tle.oplib.arith import cdiv
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import forward_row_config, row_config, torch_compute_dtype
from tle.oplib.tensors import reshaped

MAX_COLS = 65536


@tle.jit
def l2_norm_fwd_kernel(x_ptr, y_ptr, rstd_ptr, x_row_stride, y_row_stride, n_rows, n_cols, eps,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TWO_PASS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    if TWO_PASS:
        # rows wider than a tile (see forward_row_config): the first loop adds up the squares chunk by chunk and
        # asks L2 to keep the row, the second reads it again from there
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, axis=1) + eps)
        tl.store(rstd_ptr + rows, rstd, mask=row_mask)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :],
                     (x * rstd[:, None]).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        cols = tl.arange(0, BLOCK_N)
        mask = row_mask[:, None] & (cols < n_cols)[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) + eps)
        tl.store(rstd_ptr + rows, rstd, mask=row_mask)
        tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :],
                 (x * rstd[:, None]).to(y_ptr.dtype.element_ty), mask=mask)


@tle.jit
def l2_norm_bwd_kernel(dy_ptr, x_ptr, rstd_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, n_rows, n_cols,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    mask = row_mask[:, None] & (cols < n_cols)[None, :]
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
    y = x * rstd[:, None]
    dot = tl.sum(dy * y, axis=1)
    dx = (dy - y * dot[:, None]) * rstd[:, None]
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


# -- the torch backend: the same arithmetic in torch (fp32, or fp64 for fp64 inputs) ------------------------
def _torch_forward(x, eps):
    xf = x.to(torch_compute_dtype(x))
    rstd = torch.rsqrt(xf.pow(2).sum(-1) + eps)
    return (xf * rstd[:, None]).to(x.dtype), rstd


def _torch_backward(dy, x, rstd):
    dyf = dy.to(rstd.dtype)
    y = x.to(rstd.dtype) * rstd[:, None]
    dx = (dyf - y * (dyf * y).sum(-1, keepdim=True)) * rstd[:, None]
    return dx.to(x.dtype)


# -- the kernel backends ------------------------------------------------------------------------------------
def _kernel_forward(x, eps, backend):
    m, n = x.shape
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    if m and n:
        cfg = forward_row_config(n, backend)
        l2_norm_fwd_kernel[(cdiv(m, cfg.block_m),)](
            x, y, rstd, x.stride(0), y.stride(0), m, n, float(eps), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            TWO_PASS=cfg.two_pass, backend=backend, num_warps=cfg.num_warps)
    return y, rstd


def _kernel_backward(dy, x, rstd, backend):
    m, n = x.shape
    dx = torch.empty((m, n), device=x.device, dtype=x.dtype)
    if m and n:
        block_m, block_n, warps = row_config(n)
        l2_norm_bwd_kernel[(cdiv(m, block_m),)](
            dy, x, rstd, dx, dy.stride(0), x.stride(0), dx.stride(0), m, n, BLOCK_M=block_m, BLOCK_N=block_n,
            backend=backend, num_warps=warps)
    return dx


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_shape(size):
    return ((33, 100), torch.float32) if size == "small" else ((32768, 8192), torch.bfloat16)


@tle.example(l2_norm_fwd_kernel)
def _fwd_example(device, size):
    (m, n), dtype = _example_shape(size)
    x = torch.randn(m, n, device=device, dtype=dtype)
    y = torch.full_like(x, float("nan"))
    rstd = torch.full((m,), float("nan"), device=device)
    cfg = forward_row_config(n, "triton")      # one launch for both lowerings

    def ref():
        y_ref, rstd_ref = _torch_forward(x, 1e-6)
        return {"y": y_ref, "rstd": rstd_ref}
    return tle.Launch(grid=(cdiv(m, cfg.block_m),), args=(x, y, rstd, n, n, m, n, 1e-6),
                      kwargs=dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, TWO_PASS=cfg.two_pass,
                                  num_warps=cfg.num_warps),
                      outputs={"y": y, "rstd": rstd}, reference=ref,
                      bytes=2 * m * n * x.element_size(), label=f"{m}x{n} {str(dtype)[6:]}")


@tle.example(l2_norm_bwd_kernel)
def _bwd_example(device, size):
    (m, n), dtype = _example_shape(size)
    dy, x = torch.randn(m, n, device=device, dtype=dtype), torch.randn(m, n, device=device, dtype=dtype)
    rstd = torch.rsqrt(x.float().pow(2).sum(-1) + 1e-6)
    dx = torch.full_like(x, float("nan"))
    block_m, block_n, warps = row_config(n)
    return tle.Launch(grid=(cdiv(m, block_m),), args=(dy, x, rstd, dx, n, n, n, m, n),
                      kwargs=dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps),
                      outputs={"dx": dx}, reference=lambda: {"dx": _torch_backward(dy, x, rstd)},
                      bytes=3 * m * n * x.element_size(), label=f"{m}x{n} {str(dtype)[6:]}")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _by_rows(run, x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    y, rstd = run(as_rows(x, "x"), eps)
    return reshaped(y, x.shape), rstd


def _backward_by_rows(run, dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    return reshaped(run(as_rows(dy, "dy"), as_rows(x, "x"), rstd), x.shape)


def _save(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output[1])
    ctx.set_materialize_grads(False)     # no zeros made on the host for the statistics' unused gradients


def _grads(ctx, backward, dy, _drstd):
    return (backward(dy, *ctx.saved_tensors),) if dy is not None else ()


L2_NORM = Recipe("l2_norm",
                 forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_by_rows,
                               fake=lambda x, eps: (x.new_empty(x.shape), row_stat_like(x))),
                 backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_by_rows,
                                fake=lambda dy, x, rstd: x.new_empty(x.shape)),
                 save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def l2_norm(x: torch.Tensor, eps: float = 1e-6, *, backend: str | None = None,
            fallback: str | None = None) -> torch.Tensor:
    """x * rsqrt(sum(x^2) + eps) over the last dimension of `x` (not F.normalize's x / max(||x||, eps))."""
    check_float(x, "x", rank=tuple(range(1, 9)))
    n = x.shape[-1]
    b = L2_NORM.resolve(x.device, backend, fallback)
    check_kernel_dtypes("l2_norm", b, x=x)
    check_int32_offsets("l2_norm", b, "x", x)
    if b != "torch" and n > MAX_COLS:
        raise tle.LaunchError(f"'x' has {n} columns; l2_norm on {b} holds a row in one tile (at most {MAX_COLS})")
    y, _ = L2_NORM(x, float(eps), backend=b)
    return y


class L2Norm(torch.nn.Module):
    """l2_norm as a module (no parameters), on a tle backend (`backend=`, else TLE_BACKEND)."""

    def __init__(self, eps: float = 1e-6, *, backend: str | None = None, fallback: str | None = None):
        super().__init__()
        self.eps = eps
        self.backend, self.fallback = backend, fallback

    def forward(self, x):
        return l2_norm(x, self.eps, backend=self.backend, fallback=self.fallback)

    def extra_repr(self):
        return f"eps={self.eps}, backend={self.backend}"


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(x, eps=1e-6):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def samples(device, dtype):
    def t(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, device=device, dtype=torch.float32).mul(scale).add(shift).to(dtype)
    return [Sample((t(5, 1),), label="1 column"),
            Sample((t(3, 7),), label="7 columns"),
            Sample((t(2, 3, 33), 1e-3), label="rank 3, 33 columns, eps 1e-3"),
            Sample((t(4, 1000),), label="1000 columns"),
            Sample((t(2, 4, 3, 128, shift=0.5),), label="rank 4, head dim 128"),
            Sample((t(6, 33, scale=1e-3),), dict(eps=1e-5), label="small rows, eps comparable to the sum"),
            Sample((t(0, 16),), label="no rows")]


def _bench_make(shape, dtype, device):
    m, n = shape
    return Sample((torch.randn(m, n, device=device, dtype=dtype), 1e-6))


def _bench_bytes(sample, mode):
    x = sample.args[0]
    # fwd: read x, write y; bwd: read dy and x, write dx (rstd, one fp32 a row, is a rounding error)
    return (2 if mode == "fwd" else 3) * x.numel() * x.element_size()


def _eager(sample):
    x, eps = sample.args

    def f(x=x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps)).to(x.dtype)
    return f


OPERATOR = Operator(
    "l2_norm", fn=l2_norm, reference=reference, samples=samples, grad_inputs=(0,),
    bench=BenchSpec(dry_shapes=[(64, 256), (32, 512)],
                    shapes=[(32768, 8192), (65536, 2048), (262144, 512), (1048576, 128)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, shape_help="ROWSxCOLS"))
