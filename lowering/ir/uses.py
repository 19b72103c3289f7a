"""Use lists of SSA values, and identifier names for generated source."""
from __future__ import annotations

import keyword
import re

from .core import KernelIR, Op, Value


def users(k: KernelIR) -> dict[int, list[Op]]:
    """value id -> ops that use it (an op nested in a region counts as the using op itself)."""
    out: dict[int, list[Op]] = {}
    for op in k.walk():
        for v in op.operands:
            if v is not None:
                out.setdefault(v.id, []).append(op)
    return out


class Identifiers:
    """Unique Python identifiers for values, from their source names where there are any."""

    def __init__(self, reserved=()):
        self.names: dict[int, str] = {}
        self.used = set(reserved) | set(keyword.kwlist)

    def fresh(self, base: str) -> str:
        base = re.sub(r"\W", "_", base or "v")
        if base[0].isdigit():
            base = "v" + base
        name, k = base, 1
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name

    def define(self, v: Value, base: str | None = None) -> str:
        name = self.fresh(base or v.name or "t")
        self.names[v.id] = name
        return name

    def alias(self, v: Value, name: str):
        self.names[v.id] = name

    def __getitem__(self, v: Value) -> str:
        return self.names[v.id]

    def __contains__(self, v: Value) -> bool:
        return v.id in self.names
