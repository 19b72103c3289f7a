"""tle.oplib.recipe: what one declaration gives an operator (schemas, routing by backend, fakes, autograd),
and the declarations it refuses."""
from __future__ import annotations

import pytest
import torch
from torch.library import opcheck

from tle.oplib.recipe import Recipe, Stage

CALLS: list = []          # (stage, implementation, backend) of every run of the probes below


def _scale_torch(x, k):
    CALLS.append(("forward", "torch", None))
    return x * k


def _scale_kernels(x, k, backend):
    CALLS.append(("forward", "kernels", backend))
    return x * k


def _scale_backward_torch(dy, k):
    CALLS.append(("backward", "torch", None))
    return dy * k


def _scale_backward_kernels(dy, k, backend):
    CALLS.append(("backward", "kernels", backend))
    return dy * k


def _flat(run, x: torch.Tensor, k: float) -> torch.Tensor:
    return run(x.reshape(-1), k).reshape(x.shape)


def _flat_backward(run, dy: torch.Tensor, k: float) -> torch.Tensor:
    return run(dy.reshape(-1), k).reshape(dy.shape)


def _save(ctx, inputs, y):
    _, ctx.k = inputs


PROBE = Recipe("recipe_probe_scale",
               forward=Stage(torch=_scale_torch, kernels=_scale_kernels, adapt=_flat,
                             fake=lambda x, k: x.new_empty(x.shape)),
               backward=Stage(torch=_scale_backward_torch, kernels=_scale_backward_kernels, adapt=_flat_backward,
                              fake=lambda dy, k: dy.new_empty(dy.shape)),
               save=_save, grads=lambda ctx, backward, dy: (backward(dy, ctx.k),))


def _annotated_torch(x: torch.Tensor, bias: torch.Tensor | None, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x + (bias if bias is not None else 0) + n, x.sum(-1)


FORWARD_ONLY = Recipe("recipe_probe_forward_only",
                      forward=Stage(torch=_annotated_torch, kernels=lambda x, bias, n, backend: _annotated_torch(
                          x, bias, n), fake=lambda x, bias, n: (x.new_empty(x.shape), x.new_empty(x.shape[:-1]))))


def test_schema_is_read_from_the_adapter_or_the_torch_implementation():
    assert str(torch.ops.tle.recipe_probe_scale.default._schema) == \
        "tle::recipe_probe_scale(Tensor x, float k, str backend) -> Tensor"
    assert str(torch.ops.tle.recipe_probe_scale_backward.default._schema) == \
        "tle::recipe_probe_scale_backward(Tensor dy, float k, str backend) -> Tensor"
    assert str(torch.ops.tle.recipe_probe_forward_only.default._schema) == \
        "tle::recipe_probe_forward_only(Tensor x, Tensor? bias, SymInt n, str backend) -> (Tensor, Tensor)"


@pytest.mark.parametrize("backend", ["torch", "triton", "tilelang"])
def test_the_backend_picks_the_implementation_and_the_backward_runs_on_the_forwards(backend):
    CALLS.clear()
    x = torch.randn(2, 3, requires_grad=True)
    y = PROBE(x, 1.5, backend=backend)
    y.backward(torch.ones_like(y))
    impl, chosen = ("torch", None) if backend == "torch" else ("kernels", backend)
    assert CALLS == [("forward", impl, chosen), ("backward", impl, chosen)]
    torch.testing.assert_close(x.grad, torch.full_like(x, 1.5))


def test_the_ops_pass_opcheck():
    x = torch.randn(4, 5, requires_grad=True)
    opcheck(torch.ops.tle.recipe_probe_scale.default, (x, 0.5, "torch"))
    opcheck(torch.ops.tle.recipe_probe_scale_backward.default, (torch.randn(4, 5), 0.5, "torch"))
    opcheck(torch.ops.tle.recipe_probe_forward_only.default, (torch.randn(4, 5), None, 3, "torch"))


def test_a_forward_only_recipe_refuses_to_be_differentiated():
    y, _ = FORWARD_ONLY(torch.randn(2, 3, requires_grad=True), None, 1, backend="torch")
    with pytest.raises(RuntimeError, match="no autograd formula|does not require grad|not have autograd"):
        y.sum().backward()


def test_an_unannotated_stage_is_refused_naming_what_lacks_a_type():
    with pytest.raises(TypeError, match=r"annotate k, return"):
        Recipe("recipe_probe_unannotated",
               forward=Stage(torch=lambda x, k: x, kernels=lambda x, k, backend: x, fake=lambda x, k: x,
                             adapt=_half_annotated))


def _half_annotated(run, x: torch.Tensor, k):
    return run(x, k)


def test_a_backward_without_grads_is_refused():
    with pytest.raises(TypeError, match="a backward stage comes with grads"):
        Recipe("recipe_probe_no_grads", forward=PROBE_STAGE, backward=PROBE_STAGE)


PROBE_STAGE = Stage(torch=_scale_torch, kernels=_scale_kernels, adapt=_flat, fake=lambda x, k: x.new_empty(x.shape))


def test_grads_for_more_inputs_than_the_forward_has_are_refused():
    too_many = Recipe("recipe_probe_too_many_grads", forward=PROBE_STAGE,
                      backward=Stage(torch=_scale_backward_torch, kernels=_scale_backward_kernels,
                                     adapt=_flat_backward, fake=lambda dy, k: dy.new_empty(dy.shape)),
                      grads=lambda ctx, backward, dy: (dy, None, None))
    y = too_many(torch.randn(3, requires_grad=True), 2.0, backend="torch")
    with pytest.raises(TypeError, match="grads returned 3 gradients for 2 inputs"):
        y.sum().backward()
