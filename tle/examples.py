"""Example launches that kernels declare, so that `tle show/compare`, the tests and the benchmarks
need no shape flags.

    @tle.example(rmsnorm_fwd_kernel)
    def _(device, size):          # size: "small" (CPU interpreter) or "large" (GPU timing)
        ...
        return tle.Launch(grid=(M,), args=(x, w, y, ...), kwargs=dict(BLOCK_N=...),
                          outputs={"y": y}, reference=lambda: {"y": ref(x, w)}, bytes=...)
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch

SIZES = ("small", "large")


@dataclass
class Launch:
    grid: tuple
    args: tuple
    kwargs: dict
    outputs: dict[str, torch.Tensor]                       # tensors the kernel writes
    reference: Callable[[], dict[str, torch.Tensor]]       # the torch reference, computed in fp32
    bytes: int = 0                                         # bytes moved, for TB/s
    flops: int = 0                                         # floating-point operations, for TFLOP/s
    label: str = ""
    tolerances: dict = field(default_factory=dict)         # output name -> absolute (atol, rtol), overriding TOLERANCES
    no_interpreter: str = ""                               # why Triton's CPU interpreter cannot run it, if it cannot
    accumulates: tuple = ()                                # outputs the kernel adds into (atomics): they start at zero


def example(kernel):
    """Register `fn(device, size) -> Launch` as the example launch of `kernel`; it builds its inputs from a
    fixed seed (`seeded`), so that every run checks the same numbers."""
    def deco(fn):
        kernel.example = seeded(fn)
        return fn
    return deco


EXAMPLE_SEED = 0


def seeded(fn: Callable) -> Callable:
    """`fn(device, ...)` drawing its random inputs from torch's generators seeded with EXAMPLE_SEED; the
    caller's generator states are left as they were."""
    @functools.wraps(fn)
    def build(device, *args, **kwargs):
        on_cuda = torch.device(device).type == "cuda" and torch.cuda.is_available()
        with torch.random.fork_rng(devices=[torch.cuda.current_device()] if on_cuda else []):
            torch.default_generator.manual_seed(EXAMPLE_SEED)
            if on_cuda:
                torch.cuda.manual_seed(EXAMPLE_SEED)
            return fn(device, *args, **kwargs)
    return build


# Default tolerances by output dtype, for outputs computed in fp32 and rounded once (reference in fp32):
# (atol as a fraction of the reference's largest magnitude, rtol). A fixed atol would pass an output of small
# values (a softmax's, around 1e-3) that is wrong by far more than its rounding.
# In units of the dtype's unit roundoff u (the largest relative error of one rounding: bf16 2^-8, fp16 2^-11):
# rtol 2u, for the output's rounding and one more of an intermediate the kernel rounds to the dtype (P before
# P @ V, an operand cast before a dot); atol u x max|ref|, one rounding at the largest magnitude, for elements
# that cancel towards zero. At the largest element that allows 3u (bf16 1.2%, fp16 0.15%): an output 2% off
# fails wherever |ref| > max|ref| / 3 in bf16 (2^-8 M + 2^-7 |ref| < 0.02 |ref|). fp32 (u = 2^-24) keeps
# about 170u: sums over long rows in another order, fast-math exp and rsqrt on the GPU.
TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.float16: (2 ** -11, 2 ** -10), torch.bfloat16: (2 ** -8, 2 ** -7),
              torch.float64: (1e-10, 1e-10)}


def default_tolerance(ref: torch.Tensor, dtype: torch.dtype, fractions=None) -> tuple[float, float]:
    """(atol, rtol) for an output of `dtype` against `ref`, atol scaled by ref's largest finite magnitude;
    `fractions`: (atol's fraction, rtol) in place of TOLERANCES[dtype] (an operator's own, Operator.tolerances)."""
    rel_atol, rtol = fractions or TOLERANCES.get(dtype, (0, 0))
    finite = ref[ref.isfinite()]          # an inf in the reference must not make every error pass
    scale = finite.abs().max().item() if finite.numel() else 0.0
    return rel_atol * max(scale, torch.finfo(torch.float32).tiny), rtol


def tolerance(launch: Launch, name: str, out: torch.Tensor, ref: torch.Tensor):
    if name in launch.tolerances:
        return launch.tolerances[name]                     # the launch's own (atol, rtol), absolute
    return default_tolerance(ref, out.dtype)


def compare_outputs(launch: Launch, outputs: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
    """Max abs error per output against the reference; raises AssertionError past tolerance."""
    outputs = outputs or launch.outputs
    ref = launch.reference()
    errs = {}
    for name, out in outputs.items():
        r = ref[name].to(out.device)
        o = out.float() if out.is_floating_point() else out
        r = r.float() if r.is_floating_point() else r
        if o.is_floating_point():
            # equal elements (infinities of one sign included: masked logits) are no error
            errs[name] = torch.where(o == r, 0.0, (o - r).abs()).max().item() if o.numel() else 0.0
            atol, rtol = tolerance(launch, name, out, r)
            torch.testing.assert_close(o, r, atol=atol, rtol=rtol, msg=lambda m: f"output '{name}': {m}")
        else:
            errs[name] = float((o != r).sum().item())
            torch.testing.assert_close(o, r, msg=lambda m: f"output '{name}': {m}")
    return errs
