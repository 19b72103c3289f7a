"""CPU tests: Triton kernels run in Triton's interpreter on CPU tensors.

Triton decides at import time whether its own @jit helpers (tl.sum, tl.max, ...) are interpreted, so
TRITON_INTERPRET is set here, before any test module imports triton.
"""
import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """A fresh on-disk cache (TLE_CACHE_DIR) for this test."""
    d = tmp_path / "tle-cache"
    monkeypatch.setenv("TLE_CACHE_DIR", str(d))
    return d
