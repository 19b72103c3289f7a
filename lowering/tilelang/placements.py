"""Where the TileLang lowering put tiles in shared memory and which loops it software-pipelined, at the kernel's
source lines: read back from its own generated source through the line map, so that what is reported is what
the program says (`tle explore` shows them at their lines)."""
from __future__ import annotations

import math
import re

_SHARED = re.compile(r"^\s*(\w+) = T\.alloc_shared\(\(([\d, ]*)\), '(\w+)'")
_PIPELINED = re.compile(r"^\s*for \w+ in T\.Pipelined\(.*num_stages=(\d+)")
_BITS = {"float64": 64, "float32": 32, "float16": 16, "bfloat16": 16, "int64": 64, "int32": 32, "int16": 16,
         "int8": 8, "uint8": 8, "bool": 8, "float8_e4m3": 8, "float8_e5m2": 8, "uint32": 32, "uint16": 16}


def placements(source: str, line_map: dict[int, int]) -> list[tuple[int, str]]:
    """(kernel source line, what was placed there): shared buffers with their size, pipelined loops."""
    out = []
    for number, text in enumerate(source.splitlines(), 1):
        line = line_map.get(number)
        if not line:
            continue
        shared = _SHARED.match(text)
        if shared:
            name, shape, dtype = shared.groups()
            dims = [int(d) for d in shape.replace(" ", "").split(",") if d]
            size = f", {math.prod(dims) * _BITS[dtype] // 8} bytes" if dtype in _BITS else ""
            out.append((line, f"shared memory: {name} {'x'.join(map(str, dims))} {dtype}{size}"))
        pipelined = _PIPELINED.match(text)
        if pipelined:
            out.append((line, f"loop software-pipelined by TileLang, {pipelined.group(1)} stages (T.Pipelined)"))
    return out
