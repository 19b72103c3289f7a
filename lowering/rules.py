"""One backend's lowering rules: per IR op (lowering/ir/ops.py), the function that lowers it, or the reason
the backend cannot; per attribute of every op, what the backend does with it.

A backend keeps one `Rules` table. Each of its rule modules collects its rules in a `RuleSet` of its own
(`@rules.rule(ops.LOAD)`; a backend may keep rules of several roles, e.g. TileLang's statements and element
expressions), and the backend's code generator includes those sets by name (`RULES.include(...)`), so that
one list says what the table holds and importing a module registers nothing. The table declares what the
backend cannot express with `RULES.unsupported(op, reason)`, and says for every attribute whether it is
honored, dropped (a note the user sees) or refused (a lowering error). The reason and the note
are written once, here, and `tests/cpu/test_lowering_rules.py` checks that no op and no attribute is
left out on any backend.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .errors import UnsupportedConstruct
from .ir.core import KernelIR, Op
from .ir.ops import COMMON_ATTRS, OPS, OpDef

HONORED, DROPPED, REFUSED = "honored", "dropped", "refused"


def _is_set(value) -> bool:
    """Whether an attribute asks for something: attributes default to an empty or false value."""
    return value not in (None, "", False, (), [])


@dataclass(frozen=True)
class Treatment:
    kind: str                          # HONORED, DROPPED or REFUSED
    detail: str                        # how it is honored, or why it is dropped or refused
    # for DROPPED/REFUSED: which values the drop or refusal applies to (default: any value that is set)
    applies: Callable[[Any], bool] = _is_set


class RuleSet:
    """The op rules one module of a backend writes: `@rules.rule(ops.FOR, role="statement")` collects them
    until the backend's table includes the set (Rules.include)."""

    def __init__(self):
        self.entries: list[tuple[tuple[OpDef, ...], str | None, Callable]] = []

    def rule(self, *ops: OpDef, role: str | None = None):
        """Decorator: `fn` lowers each op in `ops` (in `role`, by default the table's first)."""
        for op in ops:
            Rules._check_op(op)

        def collect(fn):
            self.entries.append((ops, role, fn))
            return fn
        return collect


class Rules:
    def __init__(self, backend: str, roles: Iterable[str] = ("lower",)):
        self.backend = backend
        self.roles = tuple(roles)
        self._rules: dict[str, dict[OpDef, Callable]] = {r: {} for r in self.roles}
        self._unsupported: dict[OpDef, str] = {}
        self._rewritten: dict[OpDef, str] = {}
        self._attrs: dict[tuple[OpDef, str], list[Treatment]] = {}
        self._included: list[RuleSet] = []

    # -- declaring ------------------------------------------------------------------------------------
    def rule(self, *ops: OpDef, role: str | None = None):
        """Decorator: `fn` lowers each op in `ops` (in `role`, by default the table's first)."""
        role = role or self.roles[0]
        for op in ops:
            self._check_op(op)

        def register(fn):
            for op in ops:
                if op in self._rules[role]:
                    raise ValueError(f"{self.backend}: two {role} rules for op '{op.name}'")
                self._rules[role][op] = fn
            return fn
        return register

    def include(self, *sets: RuleSet):
        """Register the rules of each set (a rule module's); a set is included once."""
        for rule_set in sets:
            if any(rule_set is s for s in self._included):
                raise ValueError(f"{self.backend}: a rule set is included twice")
            self._included.append(rule_set)
            for ops, role, fn in rule_set.entries:
                self.rule(*ops, role=role)(fn)

    def unsupported(self, op: OpDef, reason: str):
        self._check_op(op)
        self._unsupported[op] = reason

    def rewritten(self, op: OpDef, by: str):
        """`op` never reaches this backend's rules: the pass `by` rewrites it into other ops first."""
        self._check_op(op)
        self._rewritten[op] = by

    def honors_everywhere(self, attr: str, how: str):
        """`attr`, an attribute every op may carry (lowering/ir/ops.py COMMON_ATTRS), is honored on every op."""
        for op in OPS.values():
            self.honors(op, attr, how=how)

    def drops_everywhere(self, attr: str, why: str):
        """`attr`, an attribute every op may carry, is dropped on every op (one note per kernel lists the lines)."""
        for op in OPS.values():
            self.drops(op, attr, why=why)

    def honors(self, op: OpDef, *attrs: str, how: str = ""):
        for a in attrs:
            self._treat(op, a, Treatment(HONORED, how))

    def drops(self, op: OpDef, *attrs: str, why: str, when: Callable[[Any], bool] = _is_set):
        for a in attrs:
            self._treat(op, a, Treatment(DROPPED, why, when))

    def refuses(self, op: OpDef, *attrs: str, why: str, when: Callable[[Any], bool] = _is_set):
        for a in attrs:
            self._treat(op, a, Treatment(REFUSED, why, when))

    def _treat(self, op: OpDef, attr: str, t: Treatment):
        self._check_op(op)
        if attr not in op.attrs and attr not in COMMON_ATTRS:
            raise ValueError(f"{self.backend}: op '{op.name}' has no attribute '{attr}' (lowering/ir/ops.py)")
        self._attrs.setdefault((op, attr), []).append(t)

    @staticmethod
    def _check_op(op):
        if not isinstance(op, OpDef) or OPS.get(op.name) is not op:
            raise ValueError(f"{op!r} is not an IR op of lowering/ir/ops.py")

    # -- reading ----------------------------------------------------------------------------------------
    def get(self, op: Op, role: str | None = None) -> Callable | None:
        """The rule lowering `op` in `role`, or None where it has none in that role. An op declared
        unsupported raises the lowering error with the declared reason, at the op's file:line."""
        if op.defn in self._unsupported:
            raise UnsupportedConstruct(op.spelling, self.backend, op.loc, self._unsupported[op.defn])
        if op.defn in self._rewritten:
            raise AssertionError(f"{self.backend}: op '{op.name}' at {op.loc} should have been rewritten by "
                                 f"{self._rewritten[op.defn]} before code generation")
        return self._rules[role or self.roles[0]].get(op.defn)

    def has_rule(self, op: OpDef) -> bool:
        """Whether the backend lowers `op`: with a rule of its own, or by rewriting it into ops it has rules for."""
        return op in self._rewritten or any(op in table for table in self._rules.values())

    def unsupported_reason(self, op: OpDef) -> str | None:
        return self._unsupported.get(op)

    def treatments(self, op: OpDef, attr: str) -> list[Treatment]:
        return list(self._attrs.get((op, attr), ()))

    # -- applying the attribute table to a kernel --------------------------------------------------------
    def check_attributes(self, k: KernelIR) -> list[str]:
        """Refuse the attributes this backend refuses (a lowering error naming the attribute and the op's
        file:line); return one note per op and reason for the attributes it drops:
        `line N: tl.load(eviction_policy='evict_last'): <why>`."""
        notes = []
        common: dict[tuple[str, str], list[int]] = {}    # (attribute, why) -> lines: one note for the kernel
        for op in k.walk():
            dropped: dict[str, list[str]] = {}
            for attr, value in op.attrs.items():
                if attr in COMMON_ATTRS:
                    for t in self._attrs.get((op.defn, attr), ()):
                        if t.kind == DROPPED and t.applies(value):
                            common.setdefault((attr, t.detail), []).append(op.loc.line)
                    continue
                for t in self._attrs.get((op.defn, attr), ()):
                    if t.kind == HONORED or not t.applies(value):
                        continue
                    if t.kind == REFUSED:
                        raise UnsupportedConstruct(f"{op.spelling}({attr}={value!r})", self.backend, op.loc,
                                                   t.detail)
                    dropped.setdefault(t.detail, []).append(f"{attr}={value!r}")
            for why, asked in dropped.items():
                notes.append(f"line {op.loc.line}: {op.spelling}({', '.join(asked)}): {why}")
        for (attr, why), lines in common.items():
            lines = sorted(set(lines))
            notes.append(f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}: {attr}: {why}")
        return notes


def attribute_table(tables: list[Rules]) -> str:
    """docs/lowering.md's table of what each backend does with each attribute that is not plainly honored
    everywhere: one row per op attribute, one column per backend."""
    head = "| op | attribute | " + " | ".join(t.backend for t in tables) + " |"
    rows = [head, "|---|---|" + "---|" * len(tables)]
    for attr in COMMON_ATTRS:
        first = next(iter(OPS.values()))
        cells = [_cell(t.treatments(first, attr)) for t in tables]
        rows.append(f"| every op | `{attr}` | " + " | ".join(cells) + " |")
    for op, d in OPS.items():
        for attr in d.attrs:
            treated = [t.treatments(d, attr) for t in tables]
            if all(tr and all(x.kind == HONORED for x in tr) for tr in treated):
                continue
            cells = [_cell(tr) for tr in treated]
            rows.append(f"| `{op}` | `{attr}` | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _cell(treatments: list[Treatment]) -> str:
    if not treatments:
        return "(none declared)"
    parts = []
    for t in treatments:
        parts.append(t.kind if t.kind == HONORED else f"{t.kind}: {t.detail}")
    return "; ".join(parts)
