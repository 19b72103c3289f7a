"""Softmax over the last dimension, forward and backward.

    y = exp(x - max(x)) / sum(exp(x - max(x)))        dx = y * (dy - sum(dy * y))

`tle.ops.softmax(input, dim=None, _stacklevel=3, dtype=None)` takes torch's F.softmax arguments, any rank
and any dim (moved last for the kernels, which take rows). A program holds BLOCK_M
whole rows in one tile (`row_config`: short rows are stacked), reads them once and writes them once; the
backward reads (dy, y) once from the saved output and writes dx, with no second pass. Rows longer than
MAX_COLS do not fit one tile: the kernel backends refuse them."""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.oplib import BenchSpec, Operator, Sample, as_rows, check_float, check_kernel_dtypes
from tle.oplib.arith import cdiv
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import row_config, torch_compute_dtype
from tle.oplib.tensors import reshaped

MAX_COLS = 65536
MAX_NUMEL = 2 ** 31         # the kernels' offsets are 32-bit


@tle.jit
def softmax_kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, n_rows, n_cols, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    # padding columns take no part in the max and the sum (loaded as 0, a bulk copy; excluded here)
    x = tl.where(col_mask[None, :], x, -float("inf"))
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = e * (1.0 / tl.sum(e, axis=1))[:, None]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@tle.jit
def softmax_bwd_kernel(dy_ptr, y_ptr, dx_ptr, dy_row_stride, y_row_stride, dx_row_stride, n_rows, n_cols,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(dy * y, axis=1)
    dx = y * (dy - dot[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


# -- the torch backend: the same arithmetic in torch (fp32, or fp64 for fp64 inputs) ------------------------
def _torch_forward(x):
    return torch.softmax(x.to(torch_compute_dtype(x)), dim=-1).to(x.dtype)


def _torch_backward(dy, y):
    ct = torch_compute_dtype(y)
    yf = y.to(ct)
    dyf = dy.to(ct)
    return (yf * (dyf - (dyf * yf).sum(-1, keepdim=True))).to(y.dtype)


# -- the kernel backends ------------------------------------------------------------------------------------
def _kernel_forward(x, backend):
    m, n = x.shape
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    if m and n:
        block_m, block_n, warps = row_config(n)
        softmax_kernel[(cdiv(m, block_m),)](x, y, x.stride(0), y.stride(0), m, n, BLOCK_M=block_m,
                                                   BLOCK_N=block_n, backend=backend, num_warps=warps)
    return y


def _kernel_backward(dy, y, backend):
    m, n = y.shape
    dx = torch.empty((m, n), device=y.device, dtype=y.dtype)
    if m and n:
        block_m, block_n, warps = row_config(n)
        softmax_bwd_kernel[(cdiv(m, block_m),)](dy, y, dx, dy.stride(0), y.stride(0), dx.stride(0), m, n,
                                                       BLOCK_M=block_m, BLOCK_N=block_n, backend=backend,
                                                       num_warps=warps)
    return dx


# -- example launches (tle show / compare, the kernel tests and goldens, tle.bench) -------------------------
def _example_shape(size):
    return ((37, 1000), torch.float32) if size == "small" else ((32768, 8192), torch.bfloat16)


@tle.example(softmax_kernel)
def _fwd_example(device, size):
    (m, n), dtype = _example_shape(size)
    x = torch.randn(m, n, device=device, dtype=dtype)
    y = torch.full_like(x, float("nan"))
    block_m, block_n, warps = row_config(n)
    return tle.Launch(grid=(cdiv(m, block_m),), args=(x, y, x.stride(0), y.stride(0), m, n),
                      kwargs=dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps),
                      outputs={"y": y}, reference=lambda: {"y": torch.softmax(x.float(), dim=-1)},
                      bytes=2 * m * n * x.element_size(), label=f"{m}x{n} {str(dtype)[6:]}")


@tle.example(softmax_bwd_kernel)
def _bwd_example(device, size):
    (m, n), dtype = ((19, 33), torch.float32) if size == "small" else _example_shape(size)
    y = torch.softmax(torch.randn(m, n, device=device, dtype=torch.float32), dim=-1).to(dtype)
    dy = torch.randn(m, n, device=device, dtype=dtype)
    dx = torch.full_like(y, float("nan"))
    block_m, block_n, warps = row_config(n)
    return tle.Launch(grid=(cdiv(m, block_m),), args=(dy, y, dx, n, n, n, m, n),
                      kwargs=dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps),
                      outputs={"dx": dx}, reference=lambda: {"dx": _torch_backward(dy, y)},
                      bytes=3 * m * n * y.element_size(), label=f"{m}x{n} {str(dtype)[6:]}")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _by_rows(run, x: torch.Tensor) -> torch.Tensor:
    return reshaped(run(as_rows(x, "x")), x.shape)


def _backward_by_rows(run, dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return run(as_rows(dy, "dy"), as_rows(y, "y")).reshape(y.shape)


def _save(ctx, inputs, y):
    ctx.save_for_backward(y)


def _grads(ctx, backward, dy):
    return (backward(dy, *ctx.saved_tensors),)


SOFTMAX = Recipe("softmax",
                 forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_by_rows,
                               fake=lambda x: x.new_empty(x.shape)),
                 backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_by_rows,
                                fake=lambda dy, y: y.new_empty(y.shape)),
                 save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def softmax(input: torch.Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: torch.dtype | None = None, *,
            backend: str | None = None, fallback: str | None = None):
    """torch.nn.functional.softmax on a tle backend: softmax of `input` along `dim` (any dimension; None picks
    one as torch does, with its deprecation warning), in input's dtype, or in `dtype` when given (the input is
    cast to it first, as in torch)."""
    check_float(input, "input", rank=tuple(range(0, 9)))
    if dim is None:
        dim = torch.nn.functional._get_softmax_dim("softmax", input.dim(), _stacklevel)
    ndim = max(input.dim(), 1)
    if not isinstance(dim, int) or isinstance(dim, bool) or not -ndim <= dim < ndim:
        raise tle.LaunchError(f"tle.ops.softmax: 'dim' is {dim!r}; expected an int in [{-ndim}, {ndim - 1}] for "
                              f"'input' of rank {input.dim()}")
    if dtype is not None:
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise tle.LaunchError(f"tle.ops.softmax: 'dtype' is {dtype!r}; expected a floating torch.dtype")
        input = input.to(dtype)
    b = SOFTMAX.resolve(input.device, backend, fallback)
    check_kernel_dtypes("softmax", b, input=input)
    # the kernels take rows: another dimension is moved last (the rows then a copy) and back
    moved = input.dim() > 0 and dim % input.dim() != input.dim() - 1
    x = input.reshape(1) if input.dim() == 0 else input.movedim(dim, -1) if moved else input
    n = x.shape[-1]
    if b != "torch" and n > MAX_COLS:
        raise tle.LaunchError(f"'input' has {n} elements along dim {dim}; softmax on {b} holds a row in one tile "
                              f"(at most {MAX_COLS})")
    if b != "torch" and x.numel() >= MAX_NUMEL:
        raise tle.LaunchError(f"'input' has {x.numel()} elements; softmax on {b} addresses them with 32-bit "
                              f"offsets (fewer than {MAX_NUMEL})")
    y = SOFTMAX(x, backend=b)
    return y.reshape(()) if input.dim() == 0 else y.movedim(-1, dim) if moved else y


class Softmax(torch.nn.Module):
    """torch.nn.Softmax on a tle backend (`backend=`, else TLE_BACKEND): dim None as in torch."""

    def __init__(self, dim: int | None = None, *, backend: str | None = None, fallback: str | None = None):
        super().__init__()
        self.dim = dim
        self.backend, self.fallback = backend, fallback

    def forward(self, x):
        return softmax(x, self.dim, _stacklevel=5, backend=self.backend or None, fallback=self.fallback)

    def extra_repr(self):
        return f"dim={self.dim}, backend={self.backend}"


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(x, dim=None, _stacklevel=3, dtype=None):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64 (the samples name
    dim and leave dtype: it would cast the fp64 inputs down)."""
    return torch.nn.functional.softmax(x, dim, dtype=dtype)


def samples(device, dtype):
    def t(*shape, scale=1.0):
        return torch.randn(*shape, device=device, dtype=torch.float32).mul(scale).to(dtype)
    return [Sample((t(5, 1), -1), label="1 column"),
            Sample((t(3, 7), 1), label="7 columns"),
            Sample((t(2, 3, 33), -1), label="rank 3, 33 columns"),
            Sample((t(4, 1000, scale=4.0), 1), label="dim=1, 1000 columns, wide range"),
            Sample((t(2, 2, 3, 65), -1), label="rank 4, 65 columns"),
            Sample((t(130), 0), label="rank 1"),
            Sample((t(6, 9), 0), label="dim=0 (a column softmax)"),
            Sample((t(2, 17, 5), 1), label="dim=1 of rank 3"),
            Sample((t(3, 4, 7), -2), label="dim=-2"),
            Sample((t(0, 16), -1), label="no rows")]


def _bench_make(shape, dtype, device):
    return Sample((torch.randn(*shape, device=device, dtype=dtype), -1))


def _bench_bytes(sample, mode):
    x = sample.args[0]
    # fwd: read x, write y; bwd: read dy and y, write dx
    return (2 if mode == "fwd" else 3) * x.numel() * x.element_size()


def _eager(sample):
    x, dim = sample.args
    return lambda x=x: torch.softmax(x, dim=dim)


def _liger(sample):
    from liger_kernel.ops.softmax import LigerSoftmaxFunction
    x, _ = sample.args
    return lambda x=x: LigerSoftmaxFunction.apply(x)


OPERATOR = Operator(
    "softmax", fn=softmax, reference=reference, samples=samples, grad_inputs=(0,),
    bench=BenchSpec(dry_shapes=[(64, 256), (32, 512)],
                    shapes=[(32768, 8192), (32768, 4096), (65536, 2048), (65536, 1024), (131072, 512)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, peers={"liger": _liger},
                    shape_help="ROWSxCOLS"))
