"""The generated kernel body as a list of statement records, rendered to text only at the end.

Each record knows what the passes after emission need, so that none of them reads generated text: the
scalar let it defines, the let names it reads (`read` collects those while an expression is rendered;
the next statement emitted takes them), and whether it is a stage-0 copy of a pipelined loop. Records
are flat, each with its indentation level: the statements of a block are the records at its level
between its header and the next record above that level."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Stmt:
    text: str
    indent: int
    reads: frozenset[str] = frozenset()
    defines: str | None = None      # the name of a scalar let (`name = expr`, a TIR LetStmt)
    stage0: bool = False            # a copy in the first stage of its T.Pipelined loop
    clause: bool = False            # `else:`, part of the `if` statement above it
    src: int = 0                    # the kernel source line of the op it was emitted for (0: none)


@dataclass
class Emission:
    records: list[Stmt] = field(default_factory=list)
    _reads: set[str] = field(default_factory=set)       # read by the expressions rendered since the last record
    _stage0: bool = False
    src: int = 0                    # the source line of the op being lowered: the records emitted take it

    # -- emitting ------------------------------------------------------------------------------------------
    def read(self, name: str) -> str:
        """`name`, noted as read by the statement emitted next."""
        self._reads.add(name)
        return name

    def mark_stage0(self):
        """The next statement is a copy in stage 0 of its pipelined loop."""
        self._stage0 = True

    def statement(self, text: str, indent: int, reads=()) -> Stmt:
        return self._add(Stmt(text, indent), reads)

    def let(self, name: str, expr: str, indent: int, reads=()) -> Stmt:
        return self._add(Stmt(f"{name} = {expr}", indent, defines=name), reads)

    def clause(self, text: str, indent: int, reads=()) -> Stmt:
        return self._add(Stmt(text, indent, clause=True), reads)

    def _add(self, s: Stmt, reads) -> Stmt:
        s.reads = frozenset(self._reads.union(reads))
        s.stage0, self._stage0 = self._stage0, False
        s.src = self.src
        self._reads = set()
        self.records.append(s)
        return s

    # -- reading back ----------------------------------------------------------------------------------------
    def position(self) -> int:
        return len(self.records)

    def emitted_since(self, position: int) -> bool:
        return len(self.records) > position

    def statements_at(self, indent: int, start: int) -> list[Stmt]:
        """The statements at level `indent` among the records from `start` (a block's own statements when
        `start` is its first record): lets included, `else:` clauses not."""
        return [s for s in self.records[start:] if s.indent == indent and not s.clause]

    # -- passes ----------------------------------------------------------------------------------------------
    def drop_dead_lets(self):
        """Remove scalar lets nothing reads (e.g. a bound the mask analysis folded into a T.copy region);
        repeated, since a removed let's reads may have been the last of another let."""
        while True:
            read = Counter(name for s in self.records for name in s.reads)
            dead = [s for s in self.records if s.defines is not None and not read[s.defines]]
            if not dead:
                return
            gone = set(map(id, dead))
            self.records = [s for s in self.records if id(s) not in gone]

    def render(self) -> list[str]:
        return ["    " * s.indent + s.text for s in self.records]

    def sources(self) -> list[int]:
        """The source line of each rendered line (0 where none), in the order of render()."""
        return [s.src for s in self.records for _ in s.text.split("\n")]
