"""What a kernel is compiled for: the runtime arguments' types and, where a backend asks, their shapes,
strides and integer values."""
from __future__ import annotations

from dataclasses import dataclass, field

from .ir import types as ir_types


@dataclass(frozen=True)
class ArgSpec:
    name: str
    type: ir_types.Type                      # ptr<dtype> scalar type for tensors, a scalar type otherwise
    shape: tuple[int, ...] | None = None    # tensors
    strides: tuple[int, ...] | None = None  # tensors, in elements
    value: object = None              # scalars, when the backend specializes on them
    aligned16: bool = True            # tensors: data pointer divisible by 16 bytes

    @property
    def is_tensor(self) -> bool:
        return self.type.is_pointer

    @property
    def extent(self) -> int:
        """Elements spanned in storage from the data pointer: 1 + sum((size-1)*stride)."""
        if not self.shape or any(s == 0 for s in self.shape):
            return 1 if self.shape == () else 0
        return 1 + sum((s - 1) * st for s, st in zip(self.shape, self.strides))


@dataclass(frozen=True)
class Spec:
    """The arguments a lowering is compiled for; its launch options are the KernelIR's (`ir.options`)."""
    args: tuple[ArgSpec, ...]
    specialized: tuple[str, ...] = field(default=())   # names of int args compiled in as constants
    grid: tuple[int, ...] | None = None                # for backends that compile per grid

    def arg(self, name: str) -> ArgSpec:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)
