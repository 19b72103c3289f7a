"""Backend selection: the call's `backend=`, then the decorator's, then env TLE_BACKEND, then "triton".
Never a silent switch: an unknown or unusable backend is an error listing the usable ones."""
from __future__ import annotations

import os

from tle.errors import BackendUnavailable
from tle.lowering.backend import DEFAULT_BACKEND, Backend, backend_names, get_backend


def available_backends() -> dict[str, str | None]:
    """name -> None if usable here, else the reason it is not."""
    out = {}
    for name in backend_names():
        try:
            out[name] = get_backend(name).unavailable_reason()
        except ImportError as e:
            out[name] = f"cannot import: {e}"
    return out


def choose(call: str | None, decorator: str | None) -> str:
    return call or decorator or os.environ.get("TLE_BACKEND") or DEFAULT_BACKEND


_resolved: dict[str, Backend] = {}


def resolve(name: str, extra: tuple[str, ...] = ()) -> Backend:
    """The usable backend called `name` (remembered once it has been found usable)."""
    b = _resolved.get(name)
    if b is not None:
        return b
    names = backend_names()
    if name not in names:
        usable = [n for n, why in available_backends().items() if why is None] + list(extra)
        raise BackendUnavailable(f"unknown backend '{name}'; available: {', '.join(usable)}")
    try:
        b = get_backend(name)
        why = b.unavailable_reason()
    except ImportError as e:
        why = f"cannot import: {e}"
    if why is not None:
        usable = [n for n, w in available_backends().items() if w is None] + list(extra)
        raise BackendUnavailable(f"backend '{name}' is unavailable here ({why}); available: {', '.join(usable)}")
    _resolved[name] = b
    return b


_launchable: dict = {}


def interpret_setting() -> str:
    """TRITON_INTERPRET as set ("" when unset): what Triton's jit builds depends on it."""
    return os.environ.get("TRITON_INTERPRET", "")


def launch_unavailable_reason(b: Backend, device, interpret: str) -> str | None:
    """Why `b` cannot run kernels on `device` here (None if it can); remembered per device and per
    interpreter setting (`interpret_setting()`), so that a warm launch does not ask CUDA again."""
    key = (b.name, device, interpret)
    if key not in _launchable:
        _launchable[key] = b.launch_unavailable_reason(device)
    return _launchable[key]
