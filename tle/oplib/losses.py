"""What the loss operators share at their surface: torch's reduction arguments and a target of the input's
shape."""
from __future__ import annotations

import torch

from tle.errors import LaunchError
from tle.oplib.tensors import check_float


def reduction_of(size_average, reduce, reduction: str, allowed: tuple) -> str:
    """`reduction`, or what torch's deprecated size_average / reduce spell (converted as torch converts them,
    with its warning), checked against `allowed`."""
    if size_average is not None or reduce is not None:
        reduction = torch.nn._reduction.legacy_get_string(size_average, reduce)
    if reduction not in allowed:
        raise LaunchError(f"'reduction' is {reduction!r}; expected one of {', '.join(map(repr, allowed))}")
    return reduction


def check_input_and_target(input, target) -> None:
    """Floating input (any rank up to 8) and a floating target of its shape on its device."""
    check_float(input, "input", rank=tuple(range(0, 9)))
    check_float(target, "target", device=input.device)
    if target.shape != input.shape:
        raise LaunchError(f"'target' has shape {tuple(target.shape)}; expected the shape of 'input' "
                          f"{tuple(input.shape)}")
