"""Shared by the CPU and GPU operator tests: running an operator of tle.ops on a backend, forward and
backward, against its reference evaluated in fp64, and capturing the custom-op calls it makes."""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch.library import opcheck

from tle.examples import default_tolerance
from tle.ops import OPERATORS

OPS = sorted(OPERATORS)


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def run(op, sample, backend: str | None, grads_out=None, *, cast=None):
    """Outputs and input gradients of `op` on `sample` (inputs cast to `cast` first, if given): with
    backend None, the reference. `grads_out`: the upstream gradients (one per floating output)."""
    positions = op.grad_keys(sample) if not op.forward_only else []
    replace = {}
    for i, a in list(enumerate(sample.args)) + list(sample.kwargs.items()):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            t = a.detach().to(cast) if cast is not None else a.detach().clone()
            replace[i] = t.requires_grad_(i in positions)
    call = sample.replaced(replace)
    args, kwargs = call.args, call.kwargs
    if backend is None:
        outs = as_tuple(op.reference(*args, **kwargs))
    else:
        outs = as_tuple(op.fn(*args, backend=backend, **kwargs))
    grads = ()
    if positions:
        diff = [o for o in outs if o.is_floating_point() and o.requires_grad]
        if grads_out is None:
            grads_out = [torch.randn(o.shape, dtype=torch.float32, device=o.device) for o in diff]
        grads = torch.autograd.grad(diff, [replace[p] for p in positions], [g.to(o.dtype) for g, o in zip(grads_out, diff)],
                                    allow_unused=False)
    return outs, grads, grads_out


def assert_matches_reference(op, sample, backend: str, what: str = "", ref_dtype=torch.float64):
    """`op` on `backend` against its reference in `ref_dtype` (fp64; fp32 for large cases): every output,
    and every gradient."""
    outs, grads, grads_out = run(op, sample, backend)
    ref_outs, ref_grads, _ = run(op, sample, None, grads_out, cast=ref_dtype)
    dtype = next((a.dtype for a in sample.args if isinstance(a, torch.Tensor) and a.is_floating_point()), torch.float32)
    for i, (got, ref) in enumerate(zip(outs, ref_outs)):
        close(got, ref, dtype, f"{op.name} [{sample.label}] {what} output {i}", tolerances=op.tolerances)
    # a gradient that cancels to ~0 (one column of a norm) is rounding noise on the scale of the upstream
    # gradient's largest element (randn: 2-4 over these sizes): the tolerance is relative to at least that
    upstream = max([g.abs().max().item() for g in grads_out or () if g.numel()] + [1.0])
    for p, got, ref in zip(op.grad_keys(sample), grads, ref_grads):
        close(got, ref, dtype, f"{op.name} [{sample.label}] {what} gradient of input {p}", floor=upstream,
              tolerances=op.tolerances)


def close(got, ref, dtype, msg, floor=0.0, tolerances=None):
    """got against ref within the tolerances of `dtype` (tle.examples.TOLERANCES, or the operator's own
    `tolerances` for that dtype), atol scaled by ref's largest magnitude and at least by `floor`'s."""
    assert got.shape == ref.shape, f"{msg}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
    if not got.is_floating_point():
        torch.testing.assert_close(got, ref.to(got.dtype), msg=lambda m: f"{msg}: {m}")
        return
    ref = ref.double()
    dtype = dtype if got.dtype != torch.float64 else torch.float64
    if tolerances and dtype in tolerances:
        rel_atol, rtol = tolerances[dtype]
        atol = rel_atol * max(ref[ref.isfinite()].abs().max().item() if ref.numel() else 0.0, floor)
    else:
        atol, rtol = default_tolerance(ref, dtype)
        atol = max(atol, default_tolerance(torch.tensor([floor], dtype=torch.float64), dtype)[0])
    # an fp32 output of a half-precision operator (statistics, losses) carries the inputs' rounding
    torch.testing.assert_close(got.double(), ref, atol=atol, rtol=rtol, msg=lambda m: f"{msg}: {m}")


class CustomOpCalls(TorchDispatchMode):
    """Records every call of a tle:: custom op (OpOverload, args, kwargs), for opcheck."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "tle":
            self.calls.append((func, args, kwargs or {}))
        return func(*args, **(kwargs or {}))


def custom_op_calls(op, samples, backend: str) -> list:
    """The tle:: custom-op calls (OpOverload, args, kwargs) of `op` on `backend` over `samples`, forward and
    backward; the backward ops' inputs detached (they are first-order only)."""
    recorder = CustomOpCalls()
    for sample in samples:
        with recorder:
            call = sample.replaced({k: sample.get(k).detach().requires_grad_() for k in op.grad_keys(sample)})
            outs = [o for o in as_tuple(op.fn(*call.args, backend=backend, **call.kwargs)) if o.requires_grad]
            if outs:
                torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    return [(func, [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
             if func._opname.endswith("_backward") else args, kwargs) for func, args, kwargs in recorder.calls]


def opcheck_calls(calls) -> None:
    for func, args, kwargs in calls:
        opcheck(func, args, kwargs)
