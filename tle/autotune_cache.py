"""The on-disk record of autotuning choices: one small JSON file per (kernel, backend, device, key values,
dtypes, versions, config space), so that a second process reuses a choice without timing anything.

Folder: TLE_AUTOTUNE_CACHE_DIR, else `autotune/` in tle's cache folder (TLE_CACHE_DIR, else ~/.cache/tle).
One file per choice means processes never rewrite each other's entries; each is written atomically."""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import json
import os
import re

import torch

from tle.autotune_config import Config, canonical
from tle.version import __version__
from tle.lowering.files import atomic_write, default_cache_dir


def cache_folder() -> str:
    return os.environ.get("TLE_AUTOTUNE_CACHE_DIR") or os.path.join(default_cache_dir(), "autotune")


@functools.lru_cache(maxsize=None)
def versions() -> dict:
    out = {"tle": __version__}         # its own version also from a source tree that pip never installed
    for pkg in ("triton", "tilelang"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def device_name(device: torch.device | None) -> str:
    """The device's model and compute capability; "cpu" (or the device type) off CUDA."""
    if device is None or device.type != "cuda":
        return device.type if device is not None else "cpu"
    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)} sm_{major}{minor}"


def source_hash(fn) -> str:
    """A hash of the kernel's text: an edited kernel is tuned again."""
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        text = repr((fn.__code__.co_code, fn.__code__.co_consts))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def identity(fn, backend: str, device, key_values: tuple, dtypes: tuple, space: list[Config]) -> dict:
    """Everything a choice depends on. The config space is part of it: a stored choice always names a
    config of the current space."""
    return {"kernel": f"{fn.__module__}.{fn.__qualname__}", "source": source_hash(fn), "backend": backend,
            "device": device_name(device), "key": list(key_values), "dtypes": list(dtypes),
            "versions": versions(), "configs": [c.describe() for c in space]}


def path_of(ident: dict) -> str:
    digest = hashlib.sha256(canonical(ident).encode()).hexdigest()[:24]
    folder = re.sub(r"[^A-Za-z0-9_.-]", "_", ident["kernel"])      # "<locals>" of nested kernels
    return os.path.join(cache_folder(), folder, f"{ident['backend']}-{digest}.json")


def read(path: str, space: list[Config]) -> Config | None:
    """The stored choice as a config of `space`, or None (no file, or one that cannot be read)."""
    try:
        with open(path) as f:
            chosen = canonical(json.load(f)["best"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return next((c for c in space if canonical(c.describe()) == chosen), None)


def write(path: str, ident: dict, best: Config, timings: dict, failures: dict) -> None:
    record = {**ident, "best": best.describe(),
              "timings_ms": [[c.describe(), ms] for c, ms in timings.items()],
              "failures": [[c.describe(), why] for c, why in failures.items()]}
    try:
        atomic_write(path, json.dumps(record, indent=1, default=repr) + "\n")
    except OSError:
        pass        # a read-only or full disk costs a retune next time, never the launch
