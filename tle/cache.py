"""Where compiled artifacts live on disk. In memory, each kernel keeps its own dict of lowerings."""
from __future__ import annotations

import os


def cache_dir() -> str:
    d = os.environ.get("TLE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tle")
    os.makedirs(d, exist_ok=True)
    return d
