"""Which implementation of an operator runs: "torch" (the reference), "triton" or "tilelang".

The call's `backend=` wins (an nn.Module passes its own `backend=` as the call's), then env TLE_BACKEND,
then "triton". A backend that cannot run here on the inputs' device is an error listing those that can,
unless the caller allowed a fallback (`fallback="torch"` or env TLE_FALLBACK=torch): then the torch
reference runs, and a warning says so once per operator, backend and reason. Never a silent switch."""
from __future__ import annotations

import os
import warnings

import torch

from tle import select
from tle.errors import BackendUnavailable
from tle.lowering.backend import DEFAULT_BACKEND, backend_names

KERNEL_BACKENDS = tuple(backend_names())          # the compiler's backends, in their order
OP_BACKENDS = ("torch",) + KERNEL_BACKENDS        # operators also run their torch reference
FALLBACKS = (None, "torch")

_warned: set = set()


def kernel_unusable_reason(name: str, device: torch.device) -> str | None:
    """Why the kernel backend `name` cannot run kernels on `device` here (None if it can)."""
    return _unusable_reason(name, device.type, device.index, select.interpret_setting())


@torch.compiler.assume_constant_result      # torch.compile bakes the answer in instead of tracing imports
def _unusable_reason(name: str, device_type: str, device_index, interpret: str) -> str | None:
    key = (name, device_type, device_index, interpret)
    if key not in _unusable:
        why = select.available_backends().get(name)
        if why is None:
            why = select.launch_unavailable_reason(select.resolve(name), torch.device(device_type, device_index),
                                                   interpret)
        _unusable[key] = why
    return _unusable[key]


_unusable: dict = {}


def usable_backends(device: torch.device) -> list[str]:
    return ["torch"] + [n for n in KERNEL_BACKENDS if kernel_unusable_reason(n, device) is None]


def resolve(op: str, device: torch.device, backend: str | None = None, fallback: str | None = None) -> str:
    """The backend that runs `tle.ops.<op>` on tensors on `device`."""
    name = backend or os.environ.get("TLE_BACKEND") or DEFAULT_BACKEND
    if name not in OP_BACKENDS:
        raise BackendUnavailable(f"tle.ops.{op}: unknown backend {name!r}; operators have "
                                 f"{', '.join(OP_BACKENDS)} (usable on {device}: {', '.join(usable_backends(device))})")
    fallback = fallback if fallback is not None else (os.environ.get("TLE_FALLBACK") or None)
    if fallback not in FALLBACKS:
        raise ValueError(f"tle.ops.{op}: fallback must be None or 'torch', got {fallback!r}")
    if name == "torch":
        return name
    why = kernel_unusable_reason(name, device)
    if why is None:
        return name
    if fallback == "torch":
        key = (op, name, why)
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"tle.ops.{op}: backend '{name}' cannot run on {device} here ({why}); "
                          f"running the torch reference instead, as fallback='torch' allows", stacklevel=3)
        return "torch"
    raise BackendUnavailable(f"tle.ops.{op}: backend '{name}' cannot run on {device} here ({why}); usable: "
                             f"{', '.join(usable_backends(device))} (fallback='torch' or TLE_FALLBACK=torch "
                             f"runs the torch reference instead)")
