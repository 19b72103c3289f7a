"""Kullback-Leibler divergence with torch's semantics (F.kl_div), forward and backward.

    loss = target * (log(target) - input)          (log_target=False; 0 where target is 0)
    loss = exp(target) * (target - input)          (log_target=True)
    dloss/dinput = -target  or  -exp(target)

`tle.ops.kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False)`: input
holds log-probabilities, target probabilities (or their logs with log_target), of one shape; the result has
torch's dtype (input's and target's promoted). Reductions as torch: "none" (the elementwise loss), "sum",
"mean" (over every element, as torch, which warns that it is not the mathematical KL divergence),
"batchmean" (the sum over input.size(0): the KL divergence of distributions along the last dimensions).

The tensors are walked flat in tiles of TILE elements. "none" writes the loss in one pass; the others add
their tiles up in registers, each program writing one fp32 partial, and a one-program kernel adds the
partials up and divides (no atomics: the same result every run). The backward is one element-wise pass
(reading the target and, for "none", the upstream gradient). Only `input` is differentiated: a target that
requires grad is an error."""
from __future__ import annotations

import warnings

import torch
import triton.language as tl

import tle
from tle.kernels.bce_with_logits import bce_with_logits_sum_kernel as partial_sum_kernel   # adds fp32 partials
from tle.oplib import BenchSpec, Operator, Sample, check_kernel_dtypes
from tle.oplib.arith import cdiv
from tle.oplib.losses import check_input_and_target, reduction_of
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype

REDUCTIONS = ("none", "batchmean", "sum", "mean")
TILE = 4096
WARPS = 8
MAX_PARTIALS = 4096
BWD_TILE, BWD_WARPS = 1024, 4      # the backward's: 4.23-4.29 TB/s on the H200 against 4.07-4.15 at (TILE, WARPS)
MAX_NUMEL = 2 ** 31


@tle.jit
def kl_div_fwd_kernel(x_ptr, t_ptr, out_ptr, partial_ptr, n, tiles_per_program, BLOCK: tl.constexpr,
                      LOG_TARGET: tl.constexpr, REDUCE: tl.constexpr):
    # REDUCE: each program adds up its run of tiles and writes one partial; else the loss of every element
    pid = tl.program_id(0)
    if REDUCE:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, tiles_per_program):
        offs = (pid * tiles_per_program + i).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        t = tl.load(t_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if LOG_TARGET:
            loss = tl.exp(t) * (t - x)
        else:
            # torch's xlogy(t, t) - t * x: 0 where t is 0 (not 0 * -inf), NaN where t < 0
            loss = tl.where(t == 0.0, 0.0, t * tl.log(t)) - t * x
        if REDUCE:
            acc += tl.where(mask, loss, 0.0)
        else:
            tl.store(out_ptr + offs, loss.to(out_ptr.dtype.element_ty), mask=mask)
    if REDUCE:
        tl.store(partial_ptr + pid, tl.sum(acc, axis=0))


@tle.jit
def kl_div_bwd_kernel(g_ptr, t_ptr, dx_ptr, n, scale, BLOCK: tl.constexpr, LOG_TARGET: tl.constexpr,
                      PER_ELEMENT: tl.constexpr):
    # dx = -g * target (or -g * exp(target)); g: the upstream gradient of each element (PER_ELEMENT), else the
    # 0-d one times `scale` (1, 1 / numel, 1 / batch)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    t = tl.load(t_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if PER_ELEMENT:
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    else:
        g = tl.load(g_ptr).to(tl.float32) * scale
    if LOG_TARGET:
        t = tl.exp(t)
    tl.store(dx_ptr + offs, (-g * t).to(dx_ptr.dtype.element_ty), mask=mask)


def _divisor(x, reduction) -> float:
    """What the sum is divided by: numel for "mean", the batch (size(0)) for "batchmean"."""
    if reduction == "mean":
        return float(x.numel())
    if reduction == "batchmean":
        return float(x.shape[0]) if x.dim() else 1.0
    return 1.0


# -- the torch backend: the same arithmetic in fp32 (fp64 for fp64 inputs) ----------------------------------
def _torch_forward(x, target, reduction, log_target):
    ct = torch_compute_dtype(x)
    xf, tf = x.to(ct), target.to(ct)
    loss = torch.exp(tf) * (tf - xf) if log_target else torch.xlogy(tf, tf) - tf * xf
    if reduction == "none":
        return loss.to(x.dtype)
    return (loss.sum() / _divisor(x, reduction)).to(x.dtype)


def _torch_backward(grad, x, target, reduction, log_target):
    ct = torch_compute_dtype(x)
    tf = target.to(ct)
    g = grad.to(ct) if reduction == "none" else grad.to(ct) / _divisor(x, reduction)
    return (-g * (torch.exp(tf) if log_target else tf)).to(x.dtype)


# -- the kernel backends ------------------------------------------------------------------------------------
def _kernel_forward(x, target, reduction, log_target, backend):
    # the kernels take the tensors flat: 1-D views, which the TileLang lowering copies as boxes
    n = x.numel()
    if reduction == "none":
        out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        if n:
            kl_div_fwd_kernel[(cdiv(n, TILE),)](x.reshape(-1), target.reshape(-1), out.reshape(-1), out.reshape(-1),
                                                n, 1, BLOCK=TILE, LOG_TARGET=log_target, REDUCE=False,
                                                backend=backend, num_warps=WARPS)
        return out
    out = torch.empty((), device=x.device, dtype=x.dtype)
    if n == 0:
        return out.fill_(float("nan") if reduction in ("mean", "batchmean") and _divisor(x, reduction) == 0 else 0.0)
    tiles = cdiv(n, TILE)
    per_program = cdiv(tiles, MAX_PARTIALS)
    grid = cdiv(tiles, per_program)
    partials = torch.empty(grid, device=x.device, dtype=torch.float32)
    kl_div_fwd_kernel[(grid,)](x.reshape(-1), target.reshape(-1), x.reshape(-1), partials, n, per_program,
                               BLOCK=TILE, LOG_TARGET=log_target, REDUCE=True, backend=backend, num_warps=WARPS)
    partial_sum_kernel[(1,)](partials, out, grid, 1.0 / _divisor(x, reduction), BLOCK=MAX_PARTIALS,
                             backend=backend, num_warps=4)
    return out


def _kernel_backward(grad, x, target, reduction, log_target, backend):
    dx = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    n = x.numel()
    if n:
        per_element = reduction == "none"
        g = grad.reshape(-1) if per_element else grad
        kl_div_bwd_kernel[(cdiv(n, BWD_TILE),)](g, target.reshape(-1), dx.reshape(-1), n,
                                                1.0 / _divisor(x, reduction), BLOCK=BWD_TILE, LOG_TARGET=log_target,
                                                PER_ELEMENT=per_element, backend=backend, num_warps=BWD_WARPS)
    return dx


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_inputs(size, device):
    """(log-probabilities, target probabilities with zeros) over rows: 37 x 1000 fp32, or 8192 x 32000 bf16."""
    (m, n), dtype = ((37, 1000), torch.float32) if size == "small" else ((8192, 32000), torch.bfloat16)
    x = torch.log_softmax(torch.randn(m, n, device=device), dim=-1).to(dtype)
    t = torch.softmax(torch.randn(m, n, device=device) * 2, dim=-1)
    t = torch.where(torch.rand(m, n, device=device) < 0.1, 0.0, t).to(dtype)
    return x, t


@tle.example(kl_div_fwd_kernel)
def _fwd_example(device, size):
    x, t = _example_inputs(size, device)
    n = x.numel()
    out = torch.full_like(x, float("nan"))
    flat = (x.reshape(-1), t.reshape(-1), out.reshape(-1))
    return tle.Launch(grid=(cdiv(n, TILE),), args=(*flat, flat[2], n, 1),
                      kwargs=dict(BLOCK=TILE, LOG_TARGET=False, REDUCE=False, num_warps=WARPS), outputs={"out": out},
                      reference=lambda: {"out": _torch_forward(x.float(), t.float(), "none", False)},
                      bytes=3 * n * x.element_size(), label=f"{tuple(x.shape)} {str(x.dtype)[6:]}, none")


@tle.example(kl_div_bwd_kernel)
def _bwd_example(device, size):
    x, t = _example_inputs(size, device)
    n = x.numel()
    g = torch.tensor(0.5, device=device)
    dx = torch.full_like(x, float("nan"))
    scale = 1.0 / x.shape[0]
    return tle.Launch(grid=(cdiv(n, BWD_TILE),), args=(g, t.reshape(-1), dx.reshape(-1), n, scale),
                      kwargs=dict(BLOCK=BWD_TILE, LOG_TARGET=True, PER_ELEMENT=False, num_warps=BWD_WARPS),
                      outputs={"dx": dx},
                      reference=lambda: {"dx": _torch_backward(g, x.float(), t.float(), "batchmean", True)},
                      bytes=2 * n * x.element_size(), label=f"{tuple(x.shape)} {str(x.dtype)[6:]}, batchmean, log")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _flat(run, x: torch.Tensor, target: torch.Tensor, reduction: str, log_target: bool) -> torch.Tensor:
    return run(x.contiguous(), target.contiguous(), reduction, log_target)


def _backward_flat(run, grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor, reduction: str,
                   log_target: bool) -> torch.Tensor:
    return run(grad.contiguous(), x, target.contiguous(), reduction, log_target)


def _save(ctx, inputs, loss):
    x, target, ctx.reduction, ctx.log_target = inputs
    ctx.save_for_backward(x, target)


def _grads(ctx, backward, grad):
    x, target = ctx.saved_tensors
    return (backward(grad, x, target, ctx.reduction, ctx.log_target),)


KL_DIV = Recipe(
    "kl_div",
    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_flat,
                  fake=lambda x, t, reduction, log_target: x.new_empty(x.shape if reduction == "none" else ())),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_flat,
                   fake=lambda g, x, *_: x.new_empty(x.shape)),
    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def kl_div(input: torch.Tensor, target: torch.Tensor, size_average: bool | None = None, reduce: bool | None = None,
           reduction: str = "mean", log_target: bool = False, *, backend: str | None = None,
           fallback: str | None = None) -> torch.Tensor:
    """torch.nn.functional.kl_div on a tle backend (see the module doc): the pointwise KL divergence of
    target from input (log-probabilities), reduced as torch reduces it."""
    check_input_and_target(input, target)
    reduction = reduction_of(size_average, reduce, reduction, REDUCTIONS)
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size. "
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition.",
                      UserWarning, stacklevel=2)
    if torch.is_grad_enabled() and target.requires_grad:
        raise tle.LaunchError("'target' requires grad; tle.ops.kl_div differentiates 'input' only (detach 'target')")
    b = KL_DIV.resolve(input.device, backend, fallback)
    check_kernel_dtypes("kl_div", b, input=input, target=target)
    if b != "torch" and input.numel() >= MAX_NUMEL:
        raise tle.LaunchError(f"'input' has {input.numel()} elements; kl_div on {b} counts them in 32 bits "
                              f"(fewer than {MAX_NUMEL})")
    promoted = torch.promote_types(input.dtype, target.dtype)
    x = input.to(promoted) if promoted != input.dtype else input
    return KL_DIV(x, target, reduction, bool(log_target), backend=b)


class KLDivLoss(torch.nn.Module):
    """torch.nn.KLDivLoss on a tle backend (`backend=`, else TLE_BACKEND): torch's constructor;
    forward(input, target)."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False, *,
                 backend: str | None = None, fallback: str | None = None):
        super().__init__()
        try:
            reduction = reduction_of(size_average, reduce, reduction, REDUCTIONS)
        except tle.LaunchError as e:
            raise ValueError(f"tle.ops.KLDivLoss: {e}") from None
        self.reduction, self.log_target = reduction, log_target
        self.backend, self.fallback = backend, fallback

    def forward(self, input, target):
        return kl_div(input, target, reduction=self.reduction, log_target=self.log_target,
                      backend=self.backend or None, fallback=self.fallback)

    def extra_repr(self):
        return f"reduction={self.reduction!r}, log_target={self.log_target}, backend={self.backend}"


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Plain differentiable torch: torch's own function, evaluated in fp64."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.nn.functional.kl_div(input, target, size_average, reduce, reduction, log_target)


def samples(device, dtype):
    g = torch.Generator().manual_seed(0)

    def logp(*shape):
        return torch.log_softmax(torch.randn(*shape, generator=g), dim=-1).to(device=device, dtype=dtype)

    def p(*shape, zeros=0.0):
        t = torch.softmax(torch.randn(*shape, generator=g) * 2, dim=-1)
        return torch.where(torch.rand(*shape, generator=g) < zeros, 0.0, t).to(device=device, dtype=dtype)

    return [Sample((logp(8, 10), p(8, 10)), dict(reduction="batchmean"), label="batchmean"),
            Sample((logp(5, 1000), p(5, 1000, zeros=0.2)), dict(reduction="sum"), label="sum, zeros in target"),
            Sample((logp(6, 33), p(6, 33, zeros=0.3)), dict(reduction="none"), label="none"),
            Sample((logp(4, 7), p(4, 7)), dict(reduction="mean"), label="mean (over every element)"),
            Sample((logp(3, 4, 50), logp(3, 4, 50)), dict(reduction="batchmean", log_target=True),
                   label="log_target, rank 3"),
            Sample((logp(2, 9000), p(2, 9000)), dict(reduction="batchmean"), label="9000 columns (three tiles)"),
            Sample((logp(0, 5), p(0, 5)), dict(reduction="sum"), label="empty")]


def _bench_make(shape, dtype, device):
    n, v = shape
    x = torch.log_softmax(torch.randn(n, v, device=device, dtype=torch.float32), dim=-1).to(dtype)
    t = torch.softmax(torch.randn(n, v, device=device, dtype=torch.float32), dim=-1).to(dtype)
    return Sample((x, t), dict(reduction="batchmean"))


def _bench_bytes(sample, mode):
    """fwd: input and target read; bwd: target read, the gradient written (upstream 0-d)."""
    x = sample.args[0]
    return 2 * x.numel() * x.element_size()


def _eager(sample):
    x, t = sample.args
    return lambda x=x, t=t: torch.nn.functional.kl_div(x, t, reduction="batchmean")


def _liger(sample):
    from liger_kernel.transformers import LigerKLDIVLoss
    x, t = sample.args
    loss = LigerKLDIVLoss(reduction="batchmean")
    return lambda x=x, t=t: loss(x, t)


OPERATOR = Operator(
    "kl_div", fn=kl_div, reference=reference, samples=samples, grad_inputs=(0,),
    bench=BenchSpec(dry_shapes=[(32, 1000)], shapes=[(8192, 32000), (8192, 128256), (16384, 128256)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, peers={"liger": _liger},
                    shape_help="ROWSxCOLS"))
