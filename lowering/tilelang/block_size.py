"""A TileLang kernel's threads per block, checked against CUDA's limit before it is launched.

TileLang warp-specializes a pipelined loop on Hopper: beside the compute threads (32 * num_warps) it adds a
producer warpgroup of 128 threads that issues the loop's copies. With num_warps = 32 that makes 1152 threads,
more than a block may hold, and the launch fails inside TileLang's runtime with an unexplained CUDA error. The
compiled source states the block size (`__launch_bounds__`), so the error is raised here instead, naming the
loop."""
from __future__ import annotations

import re

from ..errors import LoweringError
from ..ir import ops
from ..ir.core import KernelIR

MAX_THREADS_PER_BLOCK = 1024
_BOUNDS = re.compile(r"__launch_bounds__\((\d+)")


def check_block_size(cuda_source: str, ir: KernelIR) -> None:
    """Raise a LoweringError if the compiled kernel asks for more threads a block than CUDA allows."""
    found = _BOUNDS.search(cuda_source)
    if found is None or int(found.group(1)) <= MAX_THREADS_PER_BLOCK:
        return
    threads, num_warps = int(found.group(1)), ir.num_warps
    asked = 32 * num_warps
    loop = next((op for op in ir.walk() if op.defn is ops.FOR and op.attrs.get("async_stages")), None)
    what = f"the pipelined loop at line {loop.loc.line}" if loop is not None else "a pipelined loop"
    extra = threads - asked
    fits = max(1, (MAX_THREADS_PER_BLOCK - extra) // 32)
    raise LoweringError(
        f"TileLang compiled {ir.name} for {threads} threads a block, more than CUDA's {MAX_THREADS_PER_BLOCK}: it "
        f"warp-specialized {what}, adding {extra} producer threads to the {asked} of num_warps={num_warps}; "
        f"launch it with num_warps <= {fits}", ir.loc, backend="tilelang", construct="warp-specialized pipelined loop")
