"""An operator's wiring, said once: its forward and backward custom ops, their fakes and its autograd
formula follow from one `Recipe`.

An operator module writes what is its own: each stage (forward, backward) once in torch and once on the
kernels, what the stage returns given only shapes (its fake), what the forward saves and how the upstream
gradients become the inputs' gradients:

    SOFTMAX = Recipe(
        "softmax",
        forward=Stage(torch=_torch_forward, kernels=_kernel_forward, fake=_forward_fake, adapt=_by_rows),
        backward=Stage(torch=_torch_backward, kernels=_kernel_backward, fake=_backward_fake, adapt=_by_rows),
        save=_save, grads=_grads)

    y = SOFTMAX(x, backend="triton")           # the forward op, tle::softmax(Tensor x, str backend)

From it: the custom op `tle::<name>` and, with a backward, `tle::<name>_backward`, each taking the stage's
arguments and a last `backend` (torch runs `torch(*args)`, a kernel backend `kernels(*args, backend)`); their
schema read from the stage's annotations (`adapt`'s where there is one, else `torch`'s); their fakes; the
forward's autograd (`grads` gets the backward op as `backward`, bound to the backend the forward ran on, and
returns the gradients of the leading inputs; the rest are None). A stage's `adapt(run, *args)` is what both
implementations share around the call (shapes folded into rows and back, inputs made contiguous): `run` is
the chosen implementation. The ops are `dispatch.CustomOp`s: plain eager calls skip the dispatcher."""
from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import Callable

import torch

from tle.oplib.backend import resolve
from tle.oplib.dispatch import CustomOp


@dataclass(frozen=True)
class Stage:
    """One custom op of an operator: two implementations of the same arguments, and its fake.

    torch: (*args) -> outputs, plain torch (the "torch" backend);
    kernels: (*args, backend) -> outputs, launching the layer's kernels on `backend`;
    fake: (*args) -> outputs of the right shapes, dtypes and devices, computing nothing;
    adapt: (run, *args) -> outputs, around either implementation (None: the implementation alone)."""
    torch: Callable
    kernels: Callable
    fake: Callable
    adapt: Callable | None = None

    def signature(self) -> inspect.Signature:
        """The op's arguments and results, annotations resolved, with `backend: str` last."""
        fn = self.adapt or self.torch
        hints = typing.get_type_hints(fn)
        params = list(inspect.signature(fn).parameters.values())[1 if self.adapt else 0:]
        missing = [p.name for p in params if p.name not in hints] + ([] if "return" in hints else ["return"])
        if missing:
            raise TypeError(f"{fn.__qualname__}: a stage's schema is read from its annotations; "
                            f"annotate {', '.join(missing)}")
        params = [p.replace(annotation=hints[p.name]) for p in params]
        backend = inspect.Parameter("backend", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str)
        return inspect.Signature(params + [backend], return_annotation=hints["return"])

    def run(self, *args):
        """The op's implementation: args as the schema has them, backend last."""
        *inputs, backend = args
        if backend == "torch":
            impl = self.torch
        else:
            def impl(*a):
                return self.kernels(*a, backend)
        return self.adapt(impl, *inputs) if self.adapt is not None else impl(*inputs)


def _custom_op(qualname: str, stage: Stage) -> CustomOp:
    def prototype(*args):
        pass
    prototype.__signature__ = stage.signature()
    op = CustomOp(qualname, stage.run, schema=torch.library.infer_schema(prototype, mutates_args=()))
    op.register_fake(lambda *args: stage.fake(*args[:-1]))
    return op


class Recipe:
    """An operator's custom ops and autograd formula, from its stages (see the module doc).

    save: (ctx, inputs, output) -> None, what the backward needs (inputs without the backend);
    grads: (ctx, backward, *upstream) -> the gradients of the forward's inputs, in order; those left off are
        None; backward(*args) runs the backward op on the backend the forward ran on.
    Without a backward (and so without save and grads) the operator is forward-only and
    differentiating it raises."""

    def __init__(self, name: str, *, forward: Stage, backward: Stage | None = None,
                 save: Callable | None = None, grads: Callable | None = None):
        if (backward is None) != (grads is None) or (save is not None and backward is None):
            raise TypeError(f"Recipe {name!r}: a backward stage comes with grads (and save, if it saves anything)")
        self.name = name
        self.forward_op = _custom_op(f"tle::{name}", forward)
        self.backward_op = _custom_op(f"tle::{name}_backward", backward) if backward is not None else None
        self._inputs = len(forward.signature().parameters)      # the backend included
        self._save, self._grads = save, grads
        if backward is not None:
            self.forward_op.register_autograd(self._backward, setup_context=self._setup_context)

    def __call__(self, *args, backend: str):
        """The forward op on `args` (as the forward stage takes them) on a resolved `backend`."""
        return self.forward_op(*args, backend)

    def resolve(self, device: torch.device, backend: str | None, fallback: str | None) -> str:
        """The backend that runs this operator on tensors on `device` (see tle.oplib.backend.resolve)."""
        return resolve(self.name, device, backend, fallback=fallback)

    def _setup_context(self, ctx, inputs, output):
        ctx.backend = inputs[-1]
        if self._save is not None:
            self._save(ctx, inputs[:-1], output)

    def _backward(self, ctx, *upstream):
        def backward(*args):
            return self.backward_op(*args, ctx.backend)
        grads = tuple(self._grads(ctx, backward, *upstream))
        if len(grads) >= self._inputs:
            raise TypeError(f"tle::{self.name}: grads returned {len(grads)} gradients for "
                            f"{self._inputs - 1} inputs")
        return grads + (None,) * (self._inputs - len(grads))
