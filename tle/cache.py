"""Where compiled artifacts live on disk. In memory, each kernel keeps its own dict of lowerings."""
from __future__ import annotations

import os

from tle.lowering.files import default_cache_dir


def cache_dir() -> str:
    d = default_cache_dir()
    os.makedirs(d, exist_ok=True)
    return d
