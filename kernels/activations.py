"""Element-wise GELU and SiLU, forward and backward.

    y = gelu(x)   x * Phi(x), or with approximate="tanh" 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
    y = silu(x)   x * sigmoid(x)

`tle.ops.gelu(x, approximate="none")` and `tle.ops.silu(x)` take a tensor of any shape; the kernels run over
it as one flat vector in 1-D box tiles (a non-contiguous input is copied first), computing in fp32 and
rounding once. The backward recomputes the activation's derivative from x (dx = dy * act'(x)), so nothing
but x is kept for it. The math is kernels/activation_math.py's, shared with the gated activations."""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.kernels.activation_math import (activation, activation_and_grad, gelu_activation, reference_activation,
                                         torch_activation, torch_activation_and_grad)
from tle.oplib import BenchSpec, Operator, Sample, check_float, check_kernel_dtypes
from tle.oplib.arith import cdiv, next_power_of_2
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype

BLOCK = 2048          # elements per program: 16 per thread at 4 warps
CHUNK = 1 << 30       # elements per launch, so that every offset fits an int32


@tle.jit
def activation_fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, ACT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, activation(x, ACT).to(y_ptr.dtype.element_ty), mask=mask)


@tle.jit
def activation_bwd_kernel(dy_ptr, x_ptr, dx_ptr, n, BLOCK: tl.constexpr, ACT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    _, grad = activation_and_grad(x, ACT)
    tl.store(dx_ptr + offs, (dy * grad).to(dx_ptr.dtype.element_ty), mask=mask)


def _config(n: int) -> tuple[int, int]:
    """(BLOCK, num_warps) for n elements: BLOCK-element tiles at 4 warps, smaller ones for small tensors.
    Measured on the H200 (silu, bf16, 32768x8192, TB/s forward / backward): [2048] x 4 warps 4.18 / 4.31 on Triton
    and 4.14 / 4.34 on TileLang, against 4.04 / 4.28 and 4.03 / 4.33 for [4096] x 8 warps."""
    return min(BLOCK, max(256, next_power_of_2(n))), 4


# -- the torch backend: the same arithmetic in torch (fp32, or fp64 for fp64 inputs) ------------------------
def _torch_forward(x, act):
    x = x.contiguous()                      # the result is contiguous, as the kernels' is
    return torch_activation(x.to(torch_compute_dtype(x)), act).to(x.dtype)


def _torch_backward(dy, x, act):
    ct = torch_compute_dtype(x)
    dy, x = dy.contiguous(), x.contiguous()
    return (dy.to(ct) * torch_activation_and_grad(x.to(ct), act)[1]).to(x.dtype)


# -- the kernel backends: flat views, one launch per CHUNK elements ------------------------------------------
def _kernel_forward(x, act, backend):
    xf = x.contiguous().view(-1)
    y = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    yf = y.view(-1)
    for s in range(0, xf.numel(), CHUNK):
        n = min(CHUNK, xf.numel() - s)
        block, warps = _config(n)
        activation_fwd_kernel[(cdiv(n, block),)](xf[s:s + n], yf[s:s + n], n, BLOCK=block, ACT=act,
                                                        backend=backend, num_warps=warps)
    return y


def _kernel_backward(dy, x, act, backend):
    dyf, xf = dy.contiguous().view(-1), x.contiguous().view(-1)
    dx = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    dxf = dx.view(-1)
    for s in range(0, xf.numel(), CHUNK):
        n = min(CHUNK, xf.numel() - s)
        block, warps = _config(n)
        activation_bwd_kernel[(cdiv(n, block),)](dyf[s:s + n], xf[s:s + n], dxf[s:s + n], n, BLOCK=block,
                                                        ACT=act, backend=backend, num_warps=warps)
    return dx


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_n(size):
    return (33 * 1000 + 7, torch.float32) if size == "small" else (32768 * 8192, torch.bfloat16)


@tle.example(activation_fwd_kernel)
def _fwd_example(device, size):
    n, dtype = _example_n(size)
    x = (torch.randn(n, device=device) * 3).to(dtype)
    y = torch.full_like(x, float("nan"))
    block, warps = _config(n)
    return tle.Launch(grid=(cdiv(n, block),), args=(x, y, n),
                      kwargs=dict(BLOCK=block, ACT="gelu", num_warps=warps),
                      outputs={"y": y}, reference=lambda: {"y": torch_activation(x.float(), "gelu")},
                      bytes=2 * n * x.element_size(), label=f"gelu {n} {str(dtype)[6:]}")


@tle.example(activation_bwd_kernel)
def _bwd_example(device, size):
    n, dtype = _example_n(size)
    dy, x = torch.randn(n, device=device).to(dtype), (torch.randn(n, device=device) * 3).to(dtype)
    dx = torch.full_like(x, float("nan"))
    block, warps = _config(n)
    return tle.Launch(grid=(cdiv(n, block),), args=(dy, x, dx, n),
                      kwargs=dict(BLOCK=block, ACT="gelu_tanh", num_warps=warps), outputs={"dx": dx},
                      reference=lambda: {"dx": dy.float() * torch_activation_and_grad(x.float(), "gelu_tanh")[1]},
                      bytes=3 * n * x.element_size(), label=f"gelu tanh backward {n} {str(dtype)[6:]}")


# -- the operators' recipes: their custom ops and autograd -------------------------------------------------
def _gelu(run, x: torch.Tensor, approximate: str) -> torch.Tensor:
    return run(x, gelu_activation(approximate))


def _gelu_backward(run, dy: torch.Tensor, x: torch.Tensor, approximate: str) -> torch.Tensor:
    return run(dy, x, gelu_activation(approximate))


def _silu(run, x: torch.Tensor) -> torch.Tensor:
    return run(x, "silu")


def _silu_backward(run, dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return run(dy, x, "silu")


def _save_input(ctx, inputs, y):
    x, *ctx.attributes = inputs          # gelu's approximate, or nothing
    ctx.save_for_backward(x)


def _grads(ctx, backward, dy):
    return (backward(dy, *ctx.saved_tensors, *ctx.attributes),)


GELU_OP = Recipe("gelu", forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_gelu,
                                       fake=lambda x, approximate: x.new_empty(x.shape)),
                 backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_gelu_backward,
                                fake=lambda dy, x, approximate: x.new_empty(x.shape)),
                 save=_save_input, grads=_grads)
SILU_OP = Recipe("silu", forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_silu,
                                       fake=lambda x: x.new_empty(x.shape)),
                 backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_silu_backward,
                                fake=lambda dy, x: x.new_empty(x.shape)),
                 save=_save_input, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def gelu(input: torch.Tensor, approximate: str = "none", *, backend: str | None = None,
         fallback: str | None = None):
    """torch.nn.functional.gelu: input * Phi(input), or its tanh approximation with approximate="tanh"."""
    check_float(input, "input")
    gelu_activation(approximate)
    b = GELU_OP.resolve(input.device, backend, fallback)
    check_kernel_dtypes("gelu", b, input=input)
    return GELU_OP(input, approximate, backend=b)


def silu(input: torch.Tensor, inplace: bool = False, *, backend: str | None = None, fallback: str | None = None):
    """torch.nn.functional.silu: input * sigmoid(input); with inplace=True the result is written into `input`,
    which is returned (through a copy: the kernels write a new tensor; under autograd the backward keeps a copy
    of the input the copy overwrites, as torch's in-place silu does)."""
    check_float(input, "input")
    if not isinstance(inplace, bool):
        raise tle.LaunchError(f"tle.ops.silu: 'inplace' is {inplace!r}; expected a bool")
    b = SILU_OP.resolve(input.device, backend, fallback)
    check_kernel_dtypes("silu", b, input=input)
    if not inplace:
        return SILU_OP(input, backend=b)
    saved = input.clone() if input.requires_grad and torch.is_grad_enabled() else input
    return input.copy_(SILU_OP(saved, backend=b))


class GELU(torch.nn.Module):
    """torch.nn.GELU on a tle backend (`backend=`, else TLE_BACKEND)."""

    def __init__(self, approximate: str = "none", *, backend: str | None = None, fallback: str | None = None):
        super().__init__()
        gelu_activation(approximate)
        self.approximate, self.backend, self.fallback = approximate, backend, fallback

    def forward(self, x):
        return gelu(x, self.approximate, backend=self.backend, fallback=self.fallback)

    def extra_repr(self):
        return f"approximate={self.approximate!r}, backend={self.backend}"


class SiLU(torch.nn.Module):
    """torch.nn.SiLU on a tle backend (`backend=`, else TLE_BACKEND), inplace as in torch."""

    def __init__(self, inplace: bool = False, *, backend: str | None = None, fallback: str | None = None):
        super().__init__()
        self.inplace, self.backend, self.fallback = inplace, backend, fallback

    def forward(self, x):
        return silu(x, self.inplace, backend=self.backend, fallback=self.fallback)

    def extra_repr(self):
        return f"inplace={self.inplace}, backend={self.backend}" if self.inplace else f"backend={self.backend}"


# -- tests and benchmarks -----------------------------------------------------------------------------------
def gelu_reference(x, approximate="none"):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64."""
    return reference_activation(x, gelu_activation(approximate))


def silu_reference(x):
    return reference_activation(x, "silu")


def _tensors(device, dtype):
    def t(*shape):
        return (torch.randn(*shape, device=device, dtype=torch.float32) * 3).to(dtype)
    return [(t(1), "1 element"), (t(7), "7 elements"), (t(3, 33), "3x33"), (t(33, 40).t(), "transposed (copied)"),
            (t(()), "a scalar"), (t(0, 16), "empty"), (t(2, 3, 1000), "rank 3, 6000 elements: 2 tiles")]


def gelu_samples(device, dtype):
    out = [Sample((x,), label=label) for x, label in _tensors(device, dtype)]
    return out + [Sample((x, "tanh"), label=f"tanh, {label}") for x, label in _tensors(device, dtype)[:6]]


def silu_samples(device, dtype):
    return [Sample((x,), label=label) for x, label in _tensors(device, dtype)]


_SHAPES = [(32768, 8192), (32768, 4096), (65536, 2048), (65536, 1024), (131072, 512)]


def _bench_make(shape, dtype, device):
    return Sample((torch.randn(*shape, device=device, dtype=dtype),))


def _bench_bytes(sample, mode):
    x = sample.args[0]
    return (2 if mode == "fwd" else 3) * x.numel() * x.element_size()     # fwd: x, y; bwd: dy, x, dx


GELU_OPERATOR = Operator(
    "gelu", fn=gelu, reference=gelu_reference, samples=gelu_samples, grad_inputs=(0,),
    bench=BenchSpec(dry_shapes=[(64, 256), (32, 512)],
                    shapes=_SHAPES, make=_bench_make, bytes=_bench_bytes,
                    eager=lambda s: (lambda x=s.args[0]: torch.nn.functional.gelu(x)), shape_help="ROWSxCOLS"))
SILU_OPERATOR = Operator(
    "silu", fn=silu, reference=silu_reference, samples=silu_samples, grad_inputs=(0,),
    bench=BenchSpec(dry_shapes=[(64, 256), (32, 512)],
                    shapes=_SHAPES, make=_bench_make, bytes=_bench_bytes,
                    eager=lambda s: (lambda x=s.args[0]: torch.nn.functional.silu(x)), shape_help="ROWSxCOLS"))
OPERATOR = (GELU_OPERATOR, SILU_OPERATOR)
