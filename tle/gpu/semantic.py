"""FlagTree's `tle.gpu.semantic`: the checks tle.gpu.alloc makes of a buffer's shape and dtype, callable on
their own. They are the lowering's own checks (tle.lowering.frontend.gpu), not a second copy."""
from __future__ import annotations

from tle.lowering.frontend.gpu import BufferSpecError, buffer_dtype, buffer_shape

TLESemanticError = BufferSpecError


class TLESemantic:
    """The alloc checks. `builder` is kept for FlagTree's signature; the checks do not use it."""

    def __init__(self, builder=None):
        self.builder = builder

    def validate_alloc_shape(self, shape) -> list[int]:
        """The shape as a list of positive ints; TLESemanticError otherwise."""
        return list(buffer_shape(shape))

    def validate_alloc_dtype(self, dtype):
        """`dtype` itself when buffers can hold it (a Triton dtype); TLESemanticError otherwise."""
        buffer_dtype(dtype)
        return dtype

    def analyze_alloc_operation(self, shape, dtype, layout=None, scope=None):
        """(shape, dtype), both checked."""
        return self.validate_alloc_shape(shape), self.validate_alloc_dtype(dtype)


__all__ = ["TLESemantic", "TLESemanticError"]
