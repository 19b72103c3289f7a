"""The activation functions of the element-wise and gated operators, written once: as `@tle.jit` helpers
that the kernels of kernels/activations.py and kernels/gated_activations.py call (the frontend inlines
them), and as torch functions for those modules' torch backend. Both compute in fp32 (fp64 on the torch
backend for fp64 inputs) and take the activation as a name, a constexpr in the kernels:

    "silu"        x * sigmoid(x)
    "gelu"        x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
    "gelu_tanh"   0.5 * x * (1 + tanh(u)),  u = sqrt(2 / pi) * (x + 0.044715 * x^3)
    "relu"        max(x, 0), derivative 1 where x > 0 (0 at x = 0, as torch's)

The tanh form is written through a sigmoid: 0.5 * (1 + tanh(u)) = sigmoid(2u), so it is x * sigmoid(2u),
the same shape as silu (x * sigmoid(z) with z = x); its derivative is then
    sigmoid(z) + x * sigmoid(z) * (1 - sigmoid(z)) * dz/dx
for both. The erf form's derivative is Phi(x) + x * exp(-x^2 / 2) / sqrt(2 pi)."""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.errors import LaunchError

ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu")
GELU_APPROXIMATIONS = ("none", "tanh")


def gelu_activation(approximate: str) -> str:
    """The activation name of torch's gelu(approximate=...): "gelu" or "gelu_tanh"; names a bad value."""
    if approximate not in GELU_APPROXIMATIONS:
        raise LaunchError(f"'approximate' is {approximate!r}; expected 'none' or 'tanh'")
    return "gelu" if approximate == "none" else "gelu_tanh"


# -- the kernels' helpers (inlined at each call; ACT is a constexpr) ---------------------------------------
@tle.jit
def normal_cdf(x):
    """Phi(x) of an fp32 tile, branch-free: with t = |x|, the upper tail h = Phi(-t) = 2^q(t) and
    q(t) = P(min(t, 6) / 6) - t^2 / (2 ln 2), P the degree-10 polynomial closest to q(t) + t^2 / (2 ln 2) on
    [0, 6] (a Chebyshev fit); Phi(x) = 1 - h for x >= 0, else h. Within 4e-7 of Phi absolutely and 2e-6
    relatively in the lower tail, in one exp2 and multiply-adds (the erf of libdevice branches on |x|, and
    both branches run in a warp of random inputs, which made erf-GELU compute-bound)."""
    t = tl.abs(x)
    u = tl.minimum(t, 6.0) * 0.16666666666666666
    p = u * -0.7121808367064665 + 4.016912978676161
    p = p * u - 9.632367507578083
    p = p * u + 12.274486416251197
    p = p * u - 7.3819548891968125
    p = p * u - 2.1496497665872076
    p = p * u + 9.493103913221193
    p = p * u - 11.39061091703949
    p = p * u + 9.440664139822637
    p = p * u - 6.906727228762565
    p = p * u - 0.9999995869153444
    h = tl.exp2(p - 0.7213475204444817 * t * t)
    return tl.where(x >= 0.0, 1.0 - h, h)


@tle.jit
def activation(x, ACT: tl.constexpr):
    """act(x) of an fp32 tile."""
    if ACT == "gelu":
        act = x * normal_cdf(x)
    elif ACT == "gelu_tanh":
        act = x * tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))     # 2u
    elif ACT == "relu":
        act = tl.maximum(x, 0.0)
    else:
        act = x * tl.sigmoid(x)
    return act


@tle.jit
def activation_and_grad(x, ACT: tl.constexpr):
    """(act(x), act'(x)) of an fp32 tile, sharing their common terms."""
    if ACT == "gelu":
        cdf = normal_cdf(x)
        act = x * cdf
        dact = cdf + x * 0.3989422804014327 * tl.exp(-0.5 * x * x)                # 1 / sqrt(2 pi)
    elif ACT == "gelu_tanh":
        s = tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))          # sigmoid(2u)
        act = x * s
        dact = s + act * (1.0 - s) * (1.5957691216057308 + 0.21406444881780076 * x * x)  # d(2u)/dx
    elif ACT == "relu":
        act = tl.maximum(x, 0.0)
        dact = tl.where(x > 0.0, 1.0, 0.0)
    else:
        s = tl.sigmoid(x)
        act = x * s
        dact = s + act * (1.0 - s)
    return act, dact


# -- the torch backend's formulas (the same arithmetic, on tensors already in the compute dtype) -------------
_TWO_SQRT_2_OVER_PI = 1.5957691216057308
_GELU_K = 0.044715


def torch_activation(x: torch.Tensor, act: str) -> torch.Tensor:
    if act == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))
    if act == "gelu_tanh":
        return x * torch.sigmoid(_TWO_SQRT_2_OVER_PI * (x + _GELU_K * x * x * x))
    if act == "relu":
        return torch.clamp_min(x, 0.0)
    return x * torch.sigmoid(x)


def torch_activation_and_grad(x: torch.Tensor, act: str) -> tuple[torch.Tensor, torch.Tensor]:
    if act == "gelu":
        cdf = 0.5 * (1.0 + torch.erf(x * 0.7071067811865476))
        return x * cdf, cdf + x * 0.3989422804014327 * torch.exp(-0.5 * x * x)
    if act == "gelu_tanh":
        s = torch.sigmoid(_TWO_SQRT_2_OVER_PI * (x + _GELU_K * x * x * x))
        y = x * s
        return y, s + y * (1.0 - s) * (_TWO_SQRT_2_OVER_PI + 0.21406444881780076 * x * x)
    if act == "relu":
        return torch.clamp_min(x, 0.0), (x > 0).to(x.dtype)
    s = torch.sigmoid(x)
    y = x * s
    return y, s + y * (1.0 - s)


def reference_activation(x: torch.Tensor, act: str) -> torch.Tensor:
    """torch's own functions (differentiable, any dtype): the tests' ground truth."""
    if act == "silu":
        return torch.nn.functional.silu(x)
    if act == "relu":
        return torch.nn.functional.relu(x)
    return torch.nn.functional.gelu(x, approximate="tanh" if act == "gelu_tanh" else "none")
