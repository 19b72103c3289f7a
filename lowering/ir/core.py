"""The tile IR: SSA values, operations with regions, blocks, and the kernel that holds them.

Every op records the source location it came from, so that an error raised by any later stage can name
the kernel's file:line. Hints (is_async, num_stages, ...) are plain attributes, visible to every backend.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from .ops import OpDef, Trait
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


class Attributes(dict):
    """An op's attributes, checked against its declaration (lowering/ir/ops.py) wherever they are written: an
    attribute the op does not declare, or a value of another type, is a ValueError; a Word's text becomes
    the Word."""

    __slots__ = ("defn",)

    def __init__(self, defn: OpDef, values=None):
        super().__init__()
        self.defn = defn
        self.update(values or {})

    def __setitem__(self, name, value):
        super().__setitem__(name, self.defn.check_attr(name, value))

    def update(self, *args, **kwargs):
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def setdefault(self, name, default=None):
        if name not in self:
            self[name] = default
        return self[name]

    def __ior__(self, other):
        self.update(other)
        return self

    def copy(self) -> dict:
        return dict(self)


class Op:
    """One operation: its definition in the op table (`defn`, with `name` its text), operands (read them by
    name: `op.operand("mask")`, `op.operand_group("inits")`), results, checked attributes and regions."""

    __slots__ = ("defn", "operands", "results", "_attrs", "regions", "loc", "parent")

    def __init__(self, defn: OpDef, operands: list, result_types: list[Type], attrs: dict | None = None,
                 regions: list["Block"] | None = None, loc: Loc = UNKNOWN_LOC, new_value=None):
        if not isinstance(defn, OpDef):
            raise TypeError(f"an Op is made from its definition in lowering/ir/ops.py (ops.LOAD, ...), not {defn!r}")
        self.defn = defn
        self.operands: list[Value | None] = list(operands)
        self.defn.operand_slots(len(self.operands))          # the count the op declares
        self._attrs = Attributes(self.defn, attrs)
        self.regions: list[Block] = list(regions or [])
        self.loc = loc
        self.parent: Block | None = None
        self.results = [new_value(t, self) for t in result_types] if new_value else []
        for r in self.regions:
            r.parent_op = self

    @property
    def name(self) -> str:
        return self.defn.name

    @property
    def attrs(self) -> Attributes:
        return self._attrs

    @attrs.setter
    def attrs(self, values: dict):
        self._attrs = Attributes(self.defn, values)

    def has(self, trait: Trait) -> bool:
        return trait in self.defn.traits

    def become(self, defn: OpDef, operands: list, attrs: dict):
        """Turn this op into another one in place (constant folding), its results and users unchanged."""
        defn.operand_slots(len(operands))
        self.defn, self.operands, self._attrs = defn, list(operands), Attributes(defn, attrs)

    @property
    def spelling(self) -> str:
        """How the kernel wrote the op ("tl.load", "tl.atomic_add", ...)."""
        return self.defn.spelling(self.attrs)

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.name} has {len(self.results)} results"
        return self.results[0]

    def operand(self, name: str) -> Value | None:
        """The operand the op's declaration calls `name` (None: an optional one not given)."""
        at = self.defn.operand_slots(len(self.operands))[name]
        if isinstance(at, slice):
            raise ValueError(f"operand '{name}' of op '{self.name}' is a group: use operand_group")
        return self.operands[at]

    def set_operand(self, name: str, value: Value | None):
        """Replace the operand the op's declaration calls `name`."""
        at = self.defn.operand_slots(len(self.operands))[name]
        if isinstance(at, slice):
            raise ValueError(f"operand '{name}' of op '{self.name}' is a group")
        self.operands[at] = value

    def operand_group(self, name: str) -> list[Value]:
        """The operands of the variadic group `name` ("*name" in the declaration)."""
        at = self.defn.operand_slots(len(self.operands))[name]
        if not isinstance(at, slice):
            raise ValueError(f"operand '{name}' of op '{self.name}' is not a group: use operand")
        return self.operands[at]

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
        return self.ops[-1] if self.ops and self.ops[-1].has(Trait.TERMINATOR) else None

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
    # int parameters whose values change from launch to launch (seeds, offsets): no backend specializes on them
    unspecialized: tuple = ()
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


class IdGen:
    def __init__(self):
        self.next = 0

    def value(self, type: Type, owner=None, name=None) -> Value:
        v = Value(self.next, type, name, owner)
        self.next += 1
        return v
