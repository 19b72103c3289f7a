"""torch's `normalized_shape` for the norms (F.rms_norm, F.layer_norm): the trailing dimensions a norm takes
together. The kernels normalize rows, so a norm over k > 1 trailing dimensions runs on the input with those
dimensions folded into one row of their product, its affine parameters flattened alike. Also the norm modules'
affine parameters, made and reset as torch's norms do."""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from tle.errors import LaunchError


def as_shape(normalized_shape, op: str) -> tuple[int, ...]:
    """`normalized_shape` (an int, or a sequence of ints such as a torch.Size) as a tuple; LaunchError naming it
    for anything else, or an empty one."""
    if isinstance(normalized_shape, int) and not isinstance(normalized_shape, bool):
        return (normalized_shape,)
    if isinstance(normalized_shape, torch.Tensor):       # the weight, where tle.ops took it second before
        raise LaunchError(f"tle.ops.{op}: 'normalized_shape' is a tensor; the arguments are torch's, "
                          f"(input, normalized_shape, weight, ...): pass the weight after the shape")
    try:
        shape = tuple(normalized_shape)
    except TypeError:
        raise LaunchError(f"tle.ops.{op}: 'normalized_shape' is {normalized_shape!r}; expected an int or a "
                          f"sequence of ints") from None
    if not shape or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
        raise LaunchError(f"tle.ops.{op}: 'normalized_shape' is {normalized_shape!r}; expected an int or a "
                          f"non-empty sequence of ints")
    return shape


def trailing_dims(normalized_shape, op: str) -> tuple[int, ...]:
    """The dimensions `normalized_shape` names, counted from the end: (-k, ..., -1)."""
    return tuple(range(-len(as_shape(normalized_shape, op)), 0))


class Folded(NamedTuple):
    """An input as the rows the kernels take (`rows`), its affine parameters flattened alike (`params`), and its
    own shape (`shape`): `fold` and `unfold` take another tensor of that shape to rows and back."""
    rows: torch.Tensor
    params: dict
    shape: torch.Size

    def fold(self, t: torch.Tensor) -> torch.Tensor:
        return t.reshape(self.rows.shape) if self.rows.shape != self.shape else t

    def unfold(self, t: torch.Tensor) -> torch.Tensor:
        return t.reshape(self.shape) if self.rows.shape != self.shape else t


def fold(op: str, input: torch.Tensor, normalized_shape, **params) -> Folded:
    """`input` with its trailing `normalized_shape` dimensions folded into one row. Checks, as torch does, that
    the input ends in `normalized_shape` and that each parameter given has exactly that shape."""
    shape = as_shape(normalized_shape, op)
    k = len(shape)
    if input.dim() < k or tuple(input.shape[-k:]) != shape:
        raise LaunchError(f"tle.ops.{op}: 'normalized_shape' is {list(shape)}, but 'input' has shape "
                          f"{list(input.shape)}: its last {k} dimension{'s' if k > 1 else ''} must be that")
    for name, p in params.items():
        if p is not None and tuple(p.shape) != shape:
            raise LaunchError(f"tle.ops.{op}: '{name}' has shape {list(p.shape)}; expected normalized_shape "
                              f"{list(shape)}")
    if k == 1:
        return Folded(input, params, input.shape)
    n = math.prod(shape)
    flat = {name: (p.reshape(n) if p is not None else None) for name, p in params.items()}
    return Folded(input.reshape(*input.shape[:-k], n), flat, input.shape)


def add_affine_parameters(module: torch.nn.Module, shape, weight: bool, bias: bool, device=None, dtype=None) -> None:
    """A norm module's `weight` (ones) and `bias` (zeros) Parameters of `shape`, as torch's norms make them; a
    parameter not wanted is registered as None (bias only with a weight)."""
    factory = dict(device=device, dtype=dtype)
    module.register_parameter("weight", torch.nn.Parameter(torch.ones(shape, **factory)) if weight else None)
    module.register_parameter("bias", torch.nn.Parameter(torch.zeros(shape, **factory)) if weight and bias
                              else None)


def reset_affine_parameters(module: torch.nn.Module) -> None:
    """torch's norms' reset_parameters: weight ones, bias zeros (those present)."""
    if module.weight is not None:
        torch.nn.init.ones_(module.weight)
    if module.bias is not None:
        torch.nn.init.zeros_(module.bias)
