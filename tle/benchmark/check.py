"""Is an implementation right before it is timed: its outputs, and in bwd/full modes its gradients, against
the eager torch implementation evaluated on the inputs cast to fp32.

Tolerances scale with the benchmarked dtype as tle.examples.default_tolerance does: |got - ref| <= atol +
rtol * |ref|, with atol a fraction of that tensor's largest finite magnitude in the reference (no absolute
floor: a gradient that is small everywhere, as a mean's is, is still held to its own scale), or the
operator's own tolerance at that dtype where it declares one (Operator.tolerances: its kernels round more, as
its tests allow). An operator whose forward is random brings its own check (BenchSpec.check)."""
from __future__ import annotations

import torch

from tle.examples import TOLERANCES, default_tolerance


class CheckFailed(AssertionError):
    """An implementation's result is wrong; the message says where and by how much."""


def _compare_one(got, ref, dtype: torch.dtype, what: str, own=None) -> float:
    if got is None:
        if ref is None:
            return 0.0
        raise CheckFailed(f"{what}: none given, the reference has one")
    if ref is None:
        return 0.0           # the reference has no gradient there: nothing to hold it to
    if tuple(got.shape) != tuple(ref.shape):
        raise CheckFailed(f"{what}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
    got, ref = got.detach(), ref.detach().to(got.device)
    if not (got.is_floating_point() or ref.is_floating_point()):
        wrong = int((got != ref.to(got.dtype)).sum().item())
        if wrong:
            raise CheckFailed(f"{what}: {wrong} of {got.numel()} elements differ")
        return 0.0
    if got.numel() == 0:
        return 0.0
    g, r = got.float(), ref.float()
    atol, rtol = default_tolerance(r, dtype, own)
    diff = (g - r).abs()
    ok = (diff <= atol + rtol * r.abs()) | (g == r)            # NaN anywhere in diff is not ok
    err = diff.nan_to_num(nan=float("inf")).max().item()
    if not bool(ok.all()):
        bad = int((~ok).sum().item())
        raise CheckFailed(f"{what}: max error {err:.3g} beyond atol {atol:.3g} + rtol {rtol:.3g}*|ref| "
                          f"({bad} of {got.numel()} elements)")
    return err


def compare(outputs, grads, ref_outputs, ref_grads, dtype: torch.dtype, grad_names=(), own=None) -> float:
    """The largest error of `outputs` and `grads` against the reference's; raises CheckFailed past tolerance
    (`own`: the operator's (atol fraction, rtol) at `dtype`, else the default's)."""
    if len(outputs) < len(ref_outputs):
        raise CheckFailed(f"{len(outputs)} outputs, the reference has {len(ref_outputs)}")
    err = 0.0
    for i, (got, ref) in enumerate(zip(outputs, ref_outputs)):
        err = max(err, _compare_one(got, ref, dtype, f"output {i}", own))
    for i, (got, ref) in enumerate(zip(grads, ref_grads)):
        name = grad_names[i] if i < len(grad_names) else str(i)
        err = max(err, _compare_one(got, ref, dtype, f"gradient of {name}", own))
    return err


def criteria(dtype: torch.dtype, custom=None, own=None) -> str:
    """The error criterion of a check at `dtype`, in words (for the benchmark page); `own`: the operator's
    tolerance at `dtype` (Operator.tolerances), if it declares one."""
    if custom is not None:
        doc = (getattr(custom, "__doc__", None) or "").strip().split("\n\n")[0]
        doc = " ".join(doc.split())
        return f"the operator's own check (BenchSpec.check): {doc or getattr(custom, '__name__', 'undocumented')}"
    frac, rtol = own or TOLERANCES.get(dtype, (0, 0))
    return (f"outputs and gradients against the eager torch implementation evaluated on the inputs cast to fp32 "
            f"(the same standard-normal upstream gradients): |got - ref| <= atol + rtol*|ref| with rtol {rtol:g} "
            f"and atol {frac:g} x max|ref| of that tensor" + (" (the operator's own tolerance)" if own else ""))
