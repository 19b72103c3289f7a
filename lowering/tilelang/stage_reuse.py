"""A pipeline stage freed before its last read, found in TileLang's CUDA source before the launch.

On Hopper TileLang splits a pipelined loop between producer warps, which fill each stage's shared buffers
(TMA, cp.async) once the compute warps have freed it (`mbarrier[e].wait` in the producer, `mbarrier[e].arrive()`
in the compute warps), and the compute warps. TileLang 0.1.15 gives the cp.async copies of a loop (a masked
`is_async` tile, say) the barrier of the loop's first TMA copy, and the compute warps free that barrier's stage
after the product that reads that copy: a cp.async tile read after it can be overwritten by a later step's copy
while it is read. The results are wrong, with no error. The compiled source shows it, so the error is raised here
instead, naming the buffer."""
from __future__ import annotations

import re

from ..errors import LoweringError
from ..ir.core import KernelIR

_BUFFER = re.compile(r"\(\((?:[A-Za-z_]\w*)\*\)([A-Za-z_]\w*)\)")
_WAIT = re.compile(r"mbarrier\[(.+?)\]\.wait\((.*)\);")
_ARRIVE = re.compile(r"mbarrier\[(.+?)\]\.arrive\(\)")
_NAME = re.compile(r"[A-Za-z_]\w*")
_FILLS = ("tma_load", "cp_async_gs")


def _barrier(expr: str) -> str:
    """A barrier index with its loop variables made alike (the producer's `c` is the compute warps' `c_1`)."""
    return _NAME.sub("v", expr.replace(" ", ""))


def freed_before_read(cuda_source: str) -> tuple[int, str] | None:
    """(line, buffer) of the first read by the compute warps of a shared buffer that the producer warps fill, in
    a loop, after waiting on a barrier the compute warps have already arrived at in the same step, or None."""
    lines = [line.strip() for line in cuda_source.splitlines()]
    steps = _step_of_each_line(lines)
    filled_after: dict[str, str] = {}        # buffer -> the barrier the producer waits on before filling it
    waiting = None
    for line, step in zip(lines, steps):
        found = _WAIT.search(line)
        if found:
            # a constant phase: each stage is filled once (no more steps than stages), never again after a release
            refills = step is not None and not found.group(2).strip().isdigit()
            waiting = _barrier(found.group(1)) if refills else None
        if waiting is not None and any(f in line for f in _FILLS):
            for buf in _BUFFER.findall(line):
                filled_after.setdefault(buf, waiting)
    if not filled_after:
        return None
    freed: set[str] = set()
    freed_in = None                          # the loop step the barriers were freed in
    for n, (line, step) in enumerate(zip(lines, steps), 1):
        if step != freed_in:
            freed, freed_in = set(), step      # a new step waits for its stage again
        if step is None or any(f in line for f in _FILLS) or _WAIT.search(line):
            continue                                   # outside a loop, or the producer's side
        arrive = _ARRIVE.search(line)
        if arrive:
            freed.add(_barrier(arrive.group(1)))
        elif freed:
            for buf in _BUFFER.findall(line):
                if filled_after.get(buf) in freed:
                    return n, buf
    return None


def _step_of_each_line(lines: list[str]) -> list[int | None]:
    """Per line, the index of the outermost `for` block it lies in (a loop over the pipeline's steps), or None."""
    out, depth, outer, count = [], 0, None, 0
    for line in lines:
        opened = False
        for ch in line:
            if ch == "{":
                depth += 1
                if outer is None and line.startswith("for"):
                    outer, count, opened = depth, count + 1, True
            elif ch == "}":
                if outer == depth:
                    outer = None
                depth -= 1
        out.append(count if outer is not None or opened else None)
    return out


def check_stage_reuse(cuda_source: str, ir: KernelIR) -> None:
    """Raise a LoweringError if the compiled kernel reads a pipeline stage after freeing it for the next copy."""
    found = freed_before_read(cuda_source)
    if found is None:
        return
    line, buf = found
    raise LoweringError(
        f"TileLang compiled {ir.name} with the compute warps reading the shared tile '{buf}' (line {line} of its "
        f"CUDA source) after freeing its pipeline stage for the producer warps' next copy: that copy can overwrite "
        f"it while it is read. TileLang gives the loop's cp.async copies (a masked is_async load) the stage of the "
        f"loop's first product; read such a tile before that product, or load it without is_async", ir.loc,
        backend="tilelang", construct="a pipeline stage read after it is freed")
