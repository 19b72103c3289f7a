"""Use lists of SSA values, and identifier names for generated source."""
from __future__ import annotations

import keyword
import re

from .core import KernelIR, Op, Value
from .ops import RESHAPE, Trait


def users(k: KernelIR) -> dict[int, list[Op]]:
    """value id -> ops that use it (an op nested in a region counts as the using op itself)."""
    out: dict[int, list[Op]] = {}
    for op in k.walk():
        for v in op.operands:
            if v is not None:
                out.setdefault(v.id, []).append(op)
    return out


INDEX_OPS = 8        # the most arithmetic an index expression takes (an address in four dimensions and a mask)


def index_only(v: Value) -> bool:
    """Is `v` an integer (or boolean) tile made element-wise of index ranges, program ids, scalars and constants
    alone, in at most INDEX_OPS arithmetic ops, as an address or a mask is: cheap to compute anywhere, and
    holding no data? (Longer integer chains and unsigned arithmetic, a random generator's rounds, are
    computations.)"""
    if not (v.type.elem.is_signed or v.type.elem.is_bool):
        return False
    arithmetic = 0
    todo, seen = [v], set()
    while todo:
        x = todo.pop()
        if x is None or x.id in seen or x.type.is_scalar:
            continue
        seen.add(x.id)
        op = x.defining_op
        if op is None:
            return False                              # a loop-carried tile
        if op.has(Trait.SOURCE):
            continue
        if not (op.has(Trait.ELEMENTWISE) or op.has(Trait.LAYOUT) or op.defn is RESHAPE):
            return False
        if not op.has(Trait.LAYOUT):
            arithmetic += 1
            if arithmetic > INDEX_OPS:
                return False
        todo.extend(op.operands)
    return True


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
