"""Which loops the Triton lowering hands to Triton's software pipeliner, at the kernel's source lines: read back
from its own generated source through the line map. What Triton's compiler then puts in shared memory is in its
TTGIR (`tle explore` reads that stage for it)."""
from __future__ import annotations

import re

_PIPELINED = re.compile(r"^\s*for \w+ in tl\.range\(.*num_stages=(\d+)")


def placements(source: str, line_map: dict[int, int]) -> list[tuple[int, str]]:
    """(kernel source line, what was placed there): loops given stages."""
    out = []
    for number, text in enumerate(source.splitlines(), 1):
        pipelined = _PIPELINED.match(text)
        if pipelined and line_map.get(number):
            out.append((line_map[number], f"loop pipelined by Triton's compiler, num_stages={pipelined.group(1)} "
                                          f"(tl.range)"))
    return out
