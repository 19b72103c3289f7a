"""The tile IR: SSA values, operations with regions, blocks, and the kernel that holds them.

Every op records the source location it came from, so that an error raised by any later stage can name
the kernel's file:line. Hints (is_async, num_stages, ...) are plain attributes, visible to every backend.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from .ops import BUFFER_WRITE, OPS, with_trait
from .types import Type


@dataclass(frozen=True)
class Loc:
    file: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


UNKNOWN_LOC = Loc("<unknown>", 0)


class Value:
    """An SSA value. `name` is a readable hint taken from the source variable it was assigned to."""

    __slots__ = ("id", "type", "name", "owner")

    def __init__(self, id: int, type: Type, name: str | None = None, owner: "Op | Block | None" = None):
        self.id = id
        self.type = type
        self.name = name
        self.owner = owner

    @property
    def defining_op(self) -> "Op | None":
        return self.owner if isinstance(self.owner, Op) else None

    def __repr__(self) -> str:
        return f"%{self.name or ''}{self.id}"


# Operand names of each op, in order (None: variadic). The ops themselves are declared in ops.py.
OPERANDS: dict[str, tuple[str, ...] | None] = {name: d.operands for name, d in OPS.items()}
BUFFER_WRITES = tuple(sorted(with_trait(BUFFER_WRITE)))


class Op:
    __slots__ = ("name", "operands", "results", "attrs", "regions", "loc", "parent")

    def __init__(self, name: str, operands: list, result_types: list[Type], attrs: dict | None = None,
                 regions: list["Block"] | None = None, loc: Loc = UNKNOWN_LOC, new_value=None):
        self.name = name
        self.operands: list[Value | None] = list(operands)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.regions: list[Block] = list(regions or [])
        self.loc = loc
        self.parent: Block | None = None
        self.results = [new_value(t, self) for t in result_types] if new_value else []
        for r in self.regions:
            r.parent_op = self

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.name} has {len(self.results)} results"
        return self.results[0]

    def operand(self, name: str) -> Value | None:
        names = OPERANDS.get(self.name)
        return self.operands[names.index(name)]

    # for-op accessors
    @property
    def body(self) -> "Block":
        return self.regions[0]

    def __repr__(self) -> str:
        return f"<Op {self.name} at {self.loc}>"


class Block:
    __slots__ = ("args", "ops", "parent_op")

    def __init__(self, args: list[Value] | None = None):
        self.args: list[Value] = list(args or [])
        self.ops: list[Op] = []
        self.parent_op: Op | None = None
        for a in self.args:
            a.owner = self

    def append(self, op: Op) -> Op:
        op.parent = self
        self.ops.append(op)
        return op

    @property
    def terminator(self) -> Op | None:
        return self.ops[-1] if self.ops and self.ops[-1].name == "yield" else None

    def walk(self) -> Iterator[Op]:
        """All ops in this block and nested regions, in program order (pre-order)."""
        for op in self.ops:
            yield op
            for r in op.regions:
                yield from r.walk()


@dataclass
class Param:
    """A runtime parameter of the kernel: a pointer (a tensor argument) or a scalar."""
    name: str
    value: Value
    index: int          # position among the Python function's parameters

    @property
    def is_pointer(self) -> bool:
        return self.value.type.is_pointer


DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 3


@dataclass(frozen=True)
class LaunchOptions:
    """What a kernel is launched with; decided once per lowering (lowering/launch_options.py)."""
    num_warps: int
    num_stages: int


@dataclass
class KernelIR:
    name: str
    params: list[Param]
    body: Block
    constexprs: dict[str, Any]
    loc: Loc
    notes: list[str] = field(default_factory=list)   # visible messages (e.g. dropped hints)
    specialized: dict = field(default_factory=dict)  # runtime ints compiled in as constants (name -> value)
    warp_groups: dict = field(default_factory=dict)  # tle.gpu.warp_group index -> registers asked for (or None)
    # the launch options, settled after tracing (None until then): the one place backends read them from
    options: LaunchOptions | None = None

    @property
    def num_warps(self) -> int:
        return self._settled().num_warps

    @property
    def num_stages(self) -> int:
        return self._settled().num_stages

    def _settled(self) -> LaunchOptions:
        if self.options is None:
            raise AssertionError(f"{self.name}: launch options read before settle_launch_options")
        return self.options

    def walk(self) -> Iterator[Op]:
        return self.body.walk()

    def __str__(self) -> str:
        from .printer import print_kernel
        return print_kernel(self)


class IdGen:
    def __init__(self):
        self.next = 0

    def value(self, type: Type, owner=None, name=None) -> Value:
        v = Value(self.next, type, name, owner)
        self.next += 1
        return v
