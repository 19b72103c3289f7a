"""Launch arguments that are Triton's host tensor descriptors (triton.tools.tensor_descriptor.TensorDescriptor:
base tensor, shape, strides, block_shape, padding), as FlagTree's TMA kernels take them.

In the kernel such a parameter is the descriptor `tl.make_tensor_descriptor(base, shape, strides, block_shape,
padding)` would make: the lowering sees it as that call on parameters of its own (`<name>_base`, a pointer;
`<name>_shape<k>` and `<name>_stride<k>`, ints; the last stride the constant 1, which TMA needs), so every
backend compiles it as it compiles an in-kernel descriptor. The launch passes those parts in their place.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tle.errors import LaunchError
from tle.lowering.frontend import DescriptorParam

try:                                    # Triton's host class; absent from older Triton builds
    from triton.tools.tensor_descriptor import TensorDescriptor as HostDescriptor
except ImportError:                     # pragma: no cover - Triton 3.6 has it
    HostDescriptor = None


def is_descriptor(v) -> bool:
    return HostDescriptor is not None and isinstance(v, HostDescriptor)


def parts(d) -> list:
    """The values passed for the kernel parameters a descriptor argument becomes (DescriptorParam.part_names:
    the base, the extents, the strides but the last, which is the constant 1)."""
    return [d.base, *(int(s) for s in d.shape), *(int(s) for s in d.strides[:-1])]


def checked(kernel: str, name: str, d):
    """The checks Triton's class makes when it is built, made again (its fields may have changed since)."""
    base = d.base
    if not isinstance(base, torch.Tensor):
        raise LaunchError(f"{kernel}: argument '{name}' is a tensor descriptor whose base is not a torch.Tensor")
    rank = len(d.shape)
    if not 1 <= rank <= 5 or len(d.strides) != rank or len(d.block_shape) != rank:
        raise LaunchError(f"{kernel}: argument '{name}': a tensor descriptor of rank 1 to 5 with one stride and one "
                          f"block extent per axis, got shape {list(d.shape)}, strides {list(d.strides)}, block_shape "
                          f"{list(d.block_shape)}")
    if int(d.strides[-1]) != 1:
        raise LaunchError(f"{kernel}: argument '{name}': the descriptor's last axis must be contiguous (stride 1), "
                          f"got strides {list(d.strides)}")
    if str(d.padding) not in ("zero", "nan"):
        raise LaunchError(f"{kernel}: argument '{name}': padding must be 'zero' or 'nan', got {d.padding!r}")


def key(d, shapes: bool, ints: bool) -> tuple:
    """What a kernel compiled for descriptor `d` depends on: the element type, block shape and padding; the
    base's alignment (and shape and strides where the backend compiles for them); the extents and strides where
    the backend compiles ints in."""
    base = d.base
    aligned = base.device.type == "meta" or base.data_ptr() % 16 == 0
    sizes = tuple(int(s) for s in (*d.shape, *d.strides)) if ints else len(d.shape)
    return ("descriptor", base.dtype, tuple(int(b) for b in d.block_shape), str(d.padding), aligned, sizes,
            (tuple(base.shape), base.stride()) if shapes else None)


@dataclass(frozen=True)
class Expansion:
    """Where a launch's values come from once descriptors are split: for each kernel parameter in order, the
    index of the argument and, for a descriptor's part, which part."""
    sources: tuple[tuple[int, int | None], ...]

    def values(self, values: list) -> list:
        cache = {}
        out = []
        for i, part in self.sources:
            if part is None:
                out.append(values[i])
            else:
                if i not in cache:
                    cache[i] = parts(values[i])
                out.append(cache[i][part])
        return out


def param(name: str, d) -> DescriptorParam:
    """The tracer's view of descriptor argument `name`."""
    return DescriptorParam(name, len(d.shape), tuple(int(b) for b in d.block_shape), str(d.padding))

