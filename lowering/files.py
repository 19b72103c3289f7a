"""Atomic file writes and module loading for generated sources (safe when processes race)."""
from __future__ import annotations

import importlib.util
import os
import sys
import tempfile


def default_cache_dir() -> str:
    """TLE_CACHE_DIR, else ~/.cache/tle."""
    return os.environ.get("TLE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tle")


def atomic_write(path: str, text: str) -> None:
    """Write via a temporary file in the same folder and rename: readers see the old or the new file."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_once(path: str, text: str) -> None:
    """Write `path` unless it already holds `text` (content-addressed files never change)."""
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    atomic_write(path, text)


def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
