"""TLE-Lite: `tle.load`, the hinted load. Inside a kernel it means exactly `tl.load`; `is_async=True`
asks the backend to bring the tile in asynchronously (see docs/language.md)."""
from __future__ import annotations

from tle.lowering.frontend import register_tle_builtin
from tle.lowering.frontend.builtins import tle_load


def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False, is_async=False):
    """`tl.load` with TLE hints. Only meaningful inside a `@tle.jit` kernel."""
    raise RuntimeError("tle.load can only be called inside a @tle.jit kernel")


register_tle_builtin(load, tle_load)
