"""A TileLang kernel that asks for more shared memory a block than the GPU has, named at its launch.

TileLang sets the kernel's dynamic shared memory when it first launches it; past the device's limit (227 KB on
the H200) that fails inside TVM's runtime with `Failed to set the allowed dynamic shared memory size to N`,
which names neither the kernel nor the limit. The error is raised again here as a LoweringError that does,
with what to change (Triton raises OutOfResources for the same case)."""
from __future__ import annotations

import re

from ..errors import LoweringError
from ..ir.core import KernelIR

_ASKED = re.compile(r"allowed dynamic shared memory size to (\d+)")


def shared_memory_error(err: Exception, ir: KernelIR, limit: int | None) -> LoweringError | None:
    """The LoweringError for TileLang's launch failure `err` when it is a shared-memory request past the device's
    `limit` (bytes a block, None where unknown), else None."""
    found = _ASKED.search(str(err))
    if found is None:
        return None
    asked = int(found.group(1))
    of = f", more than this GPU's {limit}" if limit else ", more than this GPU allows"
    return LoweringError(
        f"TileLang compiled {ir.name} for {asked} bytes of shared memory a block{of}: fewer pipeline stages "
        f"(num_stages) or smaller blocks need less", ir.loc, backend="tilelang", construct="shared memory a block")
