"""What the tracer keeps in a kernel's Python environment, and the helpers every part of it reads:
whether a value can key a table, the tiles an environment holds, a return as an exception."""
from __future__ import annotations

from .gpu import traced
from .semantics import TV


class ReturnSignal(Exception):
    """A `return` inside an inlined function, carrying its value out to the call."""

    def __init__(self, value):
        self.value = value


def hashable(x) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False


def tiles_in(env: dict) -> dict[int, TV]:
    """id -> TV of every tile reachable from the variables in `env` (in tuples, lists and dicts too)."""
    out: dict[int, TV] = {}
    seen: set[int] = set()

    def visit(x, depth):
        if isinstance(x, TV):
            out[id(x)] = x
        elif isinstance(x, (tuple, list, dict)) and depth < 8 and id(x) not in seen:
            seen.add(id(x))
            for item in (list(x.keys()) + list(x.values()) if isinstance(x, dict) else x):
                visit(item, depth + 1)

    for value in env.values():
        visit(value, 0)
    return out


def at_end(x, finals: dict):
    """`x` as it stood at the end of a region whose in-place updates were undone (`finals`)."""
    if isinstance(x, TV) and id(x) in finals:
        return traced(finals[id(x)][1], x.b)
    return x


def same_py(a, b) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:
        return False
