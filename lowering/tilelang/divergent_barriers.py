"""A block-wide barrier that part of the threads never reach, found in TileLang's CUDA source before the launch.

TileLang may run a parallel loop on part of the block's threads (`if (threadIdx.x >> 6 == 0) { ... }`, where the
loop's layout replicates a row over threads) and its barrier pass may put the `__syncthreads()` that the loop
needs inside that branch. The threads outside it never arrive: on the GPU the launch hangs, and nothing returns.
The compiled source shows it, so the error is raised here instead, naming the kernel and the branch."""
from __future__ import annotations

import re

from ..errors import LoweringError
from ..ir.core import KernelIR

_CONTROL = re.compile(r"^(?:else\s+)?(?:if|for|while)\b")


def divergent_barrier(cuda_source: str) -> tuple[int, str] | None:
    """(line, branch header) of the first `__syncthreads()` inside a block entered on a condition of the thread
    index (or in the `else` of one), or None."""
    stack: list[bool] = []           # per open block: entered by some threads only
    closed_dependent = False         # the block that just closed at this depth was (an if's branch, for an else)
    header_start, line = 0, 1
    headers: list[tuple[int, str]] = []
    i, n, parens = 0, len(cuda_source), 0
    while i < n:
        ch = cuda_source[i]
        if ch == "\n":
            line += 1
        elif ch in "()":
            parens += 1 if ch == "(" else -1
        elif ch in ";{}" and parens == 0:      # not the `;` of a for's header
            header = " ".join(cuda_source[header_start:i].split())
            if ch == "{":
                dependent = bool(_CONTROL.match(header)) and "threadIdx" in header
                if header.startswith("else"):
                    dependent = dependent or closed_dependent
                stack.append(dependent or (bool(stack) and stack[-1]))
                headers.append((line, header))
            elif ch == "}" and stack:
                closed_dependent = stack.pop() and not (stack and stack[-1])
                headers.pop()
            elif ch == ";":
                closed_dependent = False
            header_start = i + 1
        elif cuda_source.startswith("__syncthreads()", i) and stack and stack[-1]:
            return line, next(header for (_, header), d in zip(headers, stack) if d)
        i += 1
    return None


def check_barriers(cuda_source: str, ir: KernelIR) -> None:
    """Raise a LoweringError if the compiled kernel has a barrier that not every thread of the block reaches."""
    found = divergent_barrier(cuda_source)
    if found is None:
        return
    line, header = found
    raise LoweringError(
        f"TileLang compiled {ir.name} with a block-wide barrier (__syncthreads) inside a branch on the thread "
        f"index, `{header}` (line {line} of its CUDA source): the threads outside the branch never reach it and "
        f"the launch would hang", ir.loc, backend="tilelang", construct="barrier in a thread-dependent branch")
