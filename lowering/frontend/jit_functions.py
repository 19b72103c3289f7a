"""The Python function behind a jit object: what the tracer traces when a kernel calls a @triton.jit or
@tle.jit function (and what a reduction's or scan's combine function is)."""
from __future__ import annotations

import triton


def unwrap_jit(obj):
    """The Python function behind a @tle.jit kernel or a @triton.jit function, else None."""
    inner = getattr(obj, "__tle_fn__", None)
    if inner is not None:
        return inner
    if isinstance(obj, triton.runtime.jit.JITFunction):
        return obj.fn
    interpreted = getattr(getattr(triton.runtime, "interpreter", None), "InterpretedFunction", None)
    if interpreted is not None and isinstance(obj, interpreted):   # @triton.jit under TRITON_INTERPRET=1
        return obj.fn
    return None
