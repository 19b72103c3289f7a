"""An fp32 tl.dot at each input_precision, and what each precision allows against an fp64 reference, shared by
tests/cpu/test_dot_precision.py and tests/gpu/test_dot_precision_gpu.py.

Bounds per element, with S = |A| @ |B| (fp64) and u = 2^-24: an IEEE fp32 product summed in fp32 is within
(K + 1) u S of the exact product (its K additions and the stored rounding, in any order; the tensor cores'
sums, which truncate, get twice that). A tf32 product reads each operand with 10 mantissa bits: truncated
toward zero (what an H200 does with fp32 bits fed to mma.sync or wgmma, as TileLang and Triton feed them) each
is off by less than 2^-10 relative, so a product by less than 2^-9: within (2^-9 + 2 (K + 1) u) S. Random
operands lose far more than the fp32 bound to tf32, so a tf32 result is also outside it: that is what tells
the precisions apart."""
import torch
import triton.language as tl

import tle

M = N = K = 64
U = 2.0 ** -24


@tle.jit
def fp32_dot(a_ptr, b_ptr, c_ptr, PRECISION: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b, input_precision=PRECISION))


def operands(device="cpu"):
    """Standard-normal fp32 operands: almost none of them is a tf32 value."""
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)
    assert (tf32_truncated(a) != a).float().mean() > 0.99
    return a.to(device), b.to(device)


def tf32_truncated(x: torch.Tensor) -> torch.Tensor:
    """fp32 values with the low 13 of their 23 mantissa bits cleared: tf32, truncated toward zero."""
    return (x.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def errors(c, a, b):
    """|C - A @ B| (exact, fp64) per element, in units of S = |A| @ |B|."""
    a, b = a.double().cpu(), b.double().cpu()
    return (c.double().cpu() - a @ b).abs() / (a.abs() @ b.abs())


def ieee_bound(k=K, truncating_sums=False):
    return (2 if truncating_sums else 1) * (k + 1) * U


def tf32_bound(k=K):
    return 2.0 ** -9 + 2 * (k + 1) * U


def sum_bound(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(K + 1) u |A| @ |B| per element (fp64): how far an fp32 sum of exact products of A and B (fp16 or bf16
    operands, or any in fp64) can be from the exact product, in any order, the stored rounding included.
    Tensor cores, whose sums truncate, can be twice as far."""
    return (a.shape[-1] + 1) * U * (a.double().abs().cpu() @ b.double().abs().cpu())


def roundings(exact: torch.Tensor, bound: torch.Tensor, dtype: torch.dtype):
    """The lowest and highest value of `dtype` that a value within `bound` of `exact` rounds to: an output of
    that dtype, computed in fp32 within `bound` and rounded once, lies between them (both are one value except
    where the rounding could go either way)."""
    return (exact - bound).to(dtype), (exact + bound).to(dtype)
