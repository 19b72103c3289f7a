"""Cache hints on loads and stores, which the TileLang lowering cannot honor.

TileLang emits a global access into registers as a plain C++ load or store: it carries no cache operator
(`cache_modifier`) and no L2 eviction priority (`eviction_policy`); TileLang attaches eviction hints to its TMA
copies only. The hints are performance hints, so the program means the same without them; each one dropped is
said once in the kernel's notes."""
from __future__ import annotations

from ..ir.core import KernelIR
from ..ir.ops import CACHE_HINTS


def dropped_cache_hints(k: KernelIR) -> list[str]:
    """One note per load or store that asks for a cache hint."""
    notes = []
    for op in k.walk():
        if op.name not in ("load", "store"):
            continue
        asked = [f"{key}={op.attrs[key]!r}" for key in CACHE_HINTS if op.attrs.get(key)]
        if asked:
            notes.append(f"line {op.loc.line}: tl.{op.name}({', '.join(asked)}): hint dropped, TileLang's loads and "
                         f"stores into registers take no cache hints")
    return notes
