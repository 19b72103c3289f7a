"""Every op of the tile IR, declared once: its operands by name, its attributes with their types, its traits,
and how a user writes it.

This is the vocabulary the rest of the compiler agrees on:
- the builder and every pass write attributes through the table: an attribute an op does not declare, or a
  value of the wrong type, is an error where it is written (core.Attributes);
- passes ask the table what an op is (`op.defn.has(Trait.LOOP)`, `op.defn is ops.LOAD`) instead of keeping
  their own lists of op names;
- a backend registers one lowering rule per op (or declares the op unsupported, with the reason its users
  will read) and says for each attribute what it does with it: honors it, drops it with a note, or refuses
  it; `tests/cpu/test_lowering_rules.py` fails when an op or an attribute has no entry in some backend;
- errors name an op the way the kernel wrote it (`OpDef.spelling`).

Attribute values of a closed set are enums (`BinaryOp.ADD`). They are str enums whose text is the value
("add"), so the printed IR, the generated code and error messages read as the kernel's own words.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from .types import DType


# -- traits ------------------------------------------------------------------------------------------------
class Trait(enum.Enum):
    PURE = "pure"                  # no effect: may be computed anywhere, any number of times, or not at all
    ELEMENTWISE = "elementwise"    # element i of the result is an expression of its operands' elements
    LAYOUT = "layout"              # only re-indexes its operand (splat, broadcast, expand_dims, trans)
    STRETCH = "stretch"            # repeats its operand along new or unit axes (splat, broadcast)
    MAP = "map"                    # element i of the result from element i of each operand, all of its shape
    SOURCE = "source"              # no operands: a value from the program's position (const, program_id, arange)
    MEMORY = "memory"              # reads or writes global memory through a pointer tile (the access analysis)
    READS = "reads"                # reads global memory into a tile or a buffer, writing none
    DESCRIPTOR = "descriptor"      # reaches global memory through a tensor descriptor (its operand "desc")
    BUFFER_WRITE = "buffer_write"  # makes the next version of a tle.gpu buffer (its operand "buf")
    LOOP = "loop"                  # a loop: its body region runs any number of times
    BRANCH = "branch"              # runs one of its regions
    TERMINATOR = "terminator"      # ends a block

    def __repr__(self) -> str:
        return f"Trait.{self.name}"


# -- attribute values --------------------------------------------------------------------------------------
class Word(str, enum.Enum):
    """A value of a closed set of words; it prints, formats and compares as its text."""

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class BinaryOp(Word):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    FDIV = "fdiv"            # true division (floats)
    DIV = "div"              # truncating division (integers)
    REM = "rem"
    AND = "and"
    OR = "or"
    XOR = "xor"
    SHL = "shl"
    SHR = "shr"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    UMULHI = "umulhi"        # the high half of the unsigned product


class UnaryOp(Word):
    NEG = "neg"
    ABS = "abs"
    INVERT = "invert"
    NOT = "not"
    EXP = "exp"
    EXP2 = "exp2"
    LOG = "log"
    LOG2 = "log2"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    SIGMOID = "sigmoid"
    ERF = "erf"
    SIN = "sin"
    COS = "cos"
    FLOOR = "floor"
    CEIL = "ceil"

    @property
    def float_only(self) -> bool:
        return self not in (UnaryOp.NEG, UnaryOp.ABS, UnaryOp.INVERT, UnaryOp.NOT)


class CmpPred(Word):
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"


class ReduceKind(Word):
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    ARGMAX = "argmax"
    ARGMIN = "argmin"


class ScanKind(Word):
    SUM = "sum"              # tl.cumsum
    PROD = "prod"            # tl.cumprod


class AtomicKind(Word):
    ADD = "add"
    MAX = "max"
    MIN = "min"
    AND = "and"
    OR = "or"
    XOR = "xor"
    XCHG = "xchg"


class MemSem(Word):
    DEFAULT = ""             # Triton's default: acq_rel
    ACQ_REL = "acq_rel"
    ACQUIRE = "acquire"
    RELEASE = "release"
    RELAXED = "relaxed"


class MemScope(Word):
    DEFAULT = ""             # gpu
    GPU = "gpu"
    CTA = "cta"
    SYS = "sys"


class HintKind(Word):
    MULTIPLE_OF = "multiple_of"
    MAX_CONTIGUOUS = "max_contiguous"


class InputPrecision(Word):
    NONE = ""                # not an fp32 product
    TF32 = "tf32"
    TF32X3 = "tf32x3"
    IEEE = "ieee"


class LoopKind(Word):
    RANGE = "range"                          # a Python range
    TL_RANGE = "tl.range"
    PIPELINE = "tle.gpu.pipeline"            # (tl.static_range is unrolled by the frontend)


class Storage(Word):
    SMEM = "smem"            # tle.gpu.storage_kind.smem: shared memory


@dataclass(frozen=True)
class AsyncIssue:
    """How pipeline_async_loads issues a tle.load(is_async=True): pipelined, or plain and why."""
    pipelined: bool
    why: str = ""

    def __str__(self) -> str:
        return "pipelined" if self.pipelined else f"plain: {self.why}"

    def __eq__(self, other):
        if isinstance(other, str):          # the text it once was: read .pipelined and .why instead
            raise TypeError(f"compare AsyncIssue's fields, not its text {other!r}")
        return isinstance(other, AsyncIssue) and (self.pipelined, self.why) == (other.pipelined, other.why)

    __hash__ = object.__hash__


PIPELINED = AsyncIssue(True)
PLAIN_LOAD = AsyncIssue(False, "not an is_async load")    # what a load without the attribute amounts to


def plain(why: str) -> AsyncIssue:
    return AsyncIssue(False, why)


@dataclass(frozen=True)
class Attr:
    """An attribute: what it means and what its values are (an isinstance check; a Word enum is a closed
    set, and its text converts to it). None means "not set" for every attribute."""
    doc: str
    type: type | tuple[type, ...] = object

    def convert(self, value):
        if value is None or isinstance(value, self.type):
            return value
        if isinstance(self.type, type) and issubclass(self.type, Word) and isinstance(value, str):
            try:
                return self.type(value)
            except ValueError:
                pass
        return _WRONG


_WRONG = object()


# -- ops ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class OpDef:
    name: str
    # operand names in order; "*name" is a variadic group: the operands left over, split evenly between the
    # op's groups (make_descriptor: one shape and one stride per axis). A missing optional operand is None.
    operands: tuple[str, ...]
    attrs: dict[str, Attr] = field(default_factory=dict)
    traits: frozenset[Trait] = frozenset()
    doc: str = ""
    # how a kernel writes it, for errors and notes: a text formatted with the op's attributes, or a function
    # of them
    spelled: str | Callable[[dict], str] = ""

    def has(self, trait: Trait) -> bool:
        return trait in self.traits

    @property
    def has_effect(self) -> bool:
        """Whether the op does something besides its results (memory, buffers, printing, assertions, raw
        code); structured control flow is not an effect in itself."""
        return not (self.traits & {Trait.PURE, Trait.LOOP, Trait.BRANCH, Trait.TERMINATOR})

    def spelling(self, attrs: dict) -> str:
        if callable(self.spelled):
            return self.spelled(attrs)
        return self.spelled.format(**{k: attrs.get(k, "") for k in self.attrs}) if self.spelled \
            else f"op '{self.name}'"

    def operand_slots(self, count: int) -> dict[str, slice | int]:
        """Where each named operand sits among `count` operands: an index, or a slice for a group."""
        fixed = [n for n in self.operands if not n.startswith("*")]
        groups = [n[1:] for n in self.operands if n.startswith("*")]
        if not groups:
            if count != len(fixed):
                raise ValueError(f"op '{self.name}' takes {len(fixed)} operands {fixed}, got {count}")
            return {n: i for i, n in enumerate(fixed)}
        rest = count - len(fixed)
        if rest < 0 or rest % len(groups):
            raise ValueError(f"op '{self.name}' takes {fixed} and {len(groups)} equal groups {groups}, got {count}")
        each, slots, at = rest // len(groups), {}, 0
        for n in self.operands:
            if n.startswith("*"):
                slots[n[1:]] = slice(at, at + each)
                at += each
            else:
                slots[n] = at
                at += 1
        return slots

    def check_attr(self, name: str, value):
        """`value` as the attribute holds it (a Word's text becomes the Word); ValueError for an attribute the
        op does not declare, or a value of another type."""
        attr = self.attrs.get(name) or COMMON_ATTRS.get(name)
        if attr is None:
            raise ValueError(f"op '{self.name}' has no attribute '{name}' (lowering/ir/ops.py declares its "
                             f"attributes: {', '.join(self.attrs) or 'none'})")
        checked = attr.convert(value)
        if checked is _WRONG:
            raise ValueError(f"op '{self.name}': attribute '{name}' takes {_type_name(attr.type)}, got {value!r}")
        return checked

    def __repr__(self) -> str:
        return f"<op {self.name}>"

    # An op is its definition: compared by identity. Comparing one with a name is a mistake the type system
    # of Python would not catch (always unequal), so it raises.
    def __eq__(self, other):
        if isinstance(other, str):
            raise TypeError(f"compare op definitions (ops.{self.name.upper()}), not the name {other!r}")
        return self is other

    __hash__ = object.__hash__

    def __lt__(self, other: "OpDef") -> bool:        # a stable order (by name) for tables and messages
        return self.name < other.name


def _type_name(t) -> str:
    if isinstance(t, tuple):
        return " or ".join(_type_name(x) for x in t)
    if isinstance(t, type) and issubclass(t, Word):
        return f"one of {[w.value for w in t]}"
    return getattr(t, "__name__", str(t))


# attributes any op may carry
COMMON_ATTRS = {
    "warp_group": Attr("tle.gpu.warp_group: the index of the warp group (4 warps) that runs the op; absent: every "
                       "warp of the block", int),
    "turn": Attr("tle.gpu.turn: the number of the turn block holding the op (the groups run their turn blocks one "
                 "group at a time)", int),
}

_CACHE_ATTRS = {
    "cache_modifier": Attr("Triton's cache modifier ('.ca', '.cg', '.cv', ...); only a hint, never changes results",
                           str),
    "eviction_policy": Attr("'evict_first' / 'evict_last': an L2 hint, never changes results", str),
}
# attributes of load and store that only hint at caching: a backend that cannot honor one drops it with a note
CACHE_HINTS = tuple(_CACHE_ATTRS)

_ATOMIC_ATTRS = {
    "sem": Attr("memory ordering: acq_rel (Triton's default when empty), acquire, release, relaxed", MemSem),
    "scope": Attr("gpu (the default when empty), cta or sys", MemScope),
}

_INT, _BOOL, _STR, _TUPLE = int, bool, str, tuple
_EXPR = frozenset({Trait.PURE, Trait.ELEMENTWISE})
_MAP = _EXPR | {Trait.MAP}
_SOURCE = _EXPR | {Trait.SOURCE}


def _load_spelling(a: dict) -> str:
    return "tle.load" if a.get("is_async") else "tl.load"


def _loop_spelling(a: dict) -> str:
    return {LoopKind.PIPELINE: "tle.gpu.pipeline", LoopKind.TL_RANGE: "tl.range"}.get(a.get("kind"), "for loop")


CONST = OpDef("const", (), {"value": Attr("the Python value (bool, int or float) of the scalar", (bool, int, float))},
              _SOURCE, spelled="a constant")
PROGRAM_ID = OpDef("program_id", (), {"axis": Attr("grid axis 0, 1 or 2", _INT)}, _SOURCE, spelled="tl.program_id")
NUM_PROGRAMS = OpDef("num_programs", (), {"axis": Attr("grid axis 0, 1 or 2", _INT)}, _SOURCE,
                     spelled="tl.num_programs")
ARANGE = OpDef("arange", (), {"start": Attr("first value", _INT), "end": Attr("one past the last value", _INT)},
               _SOURCE, spelled="tl.arange")
SPLAT = OpDef("splat", ("x",), {"shape": Attr("the tile shape a scalar fills", _TUPLE)},
              _EXPR | {Trait.LAYOUT, Trait.STRETCH},
              spelled="a splat")
BROADCAST = OpDef("broadcast", ("x",), {"shape": Attr("the shape unit axes are stretched to", _TUPLE)},
                  _EXPR | {Trait.LAYOUT, Trait.STRETCH}, spelled="tl.broadcast_to")
EXPAND_DIMS = OpDef("expand_dims", ("x",), {"axis": Attr("where the unit axis goes", _INT)}, _EXPR | {Trait.LAYOUT},
                    spelled="tl.expand_dims")
RESHAPE = OpDef("reshape", ("x",), {"shape": Attr("the new shape (row-major order kept)", _TUPLE)}, _EXPR,
                spelled="tl.reshape")
JOIN = OpDef("join", ("a", "b"), {}, _EXPR, "tl.join: a new last axis of extent 2 holding a, then b",
             spelled="tl.join")
SPLIT = OpDef("split", ("x",), {"half": Attr("0 or 1: which element of the last axis (of extent 2) the result "
                                             "holds", _INT)},
              _EXPR, "one result of tl.split: the last axis dropped", spelled="tl.split")
TRANS = OpDef("trans", ("x",), {"perm": Attr("result axis i is operand axis perm[i]", _TUPLE)},
              _EXPR | {Trait.LAYOUT}, spelled="tl.trans")
BINARY = OpDef("binary", ("lhs", "rhs"), {"op": Attr("the operation", BinaryOp)}, _MAP, spelled="a binary '{op}'")
CMP = OpDef("cmp", ("lhs", "rhs"), {"pred": Attr("the comparison", CmpPred)}, _MAP, spelled="a comparison '{pred}'")
UNARY = OpDef("unary", ("x",), {"op": Attr("the operation", UnaryOp)}, _MAP, spelled="a unary '{op}'")
LIBDEVICE = OpDef("libdevice", ("*args",),
                  {"fn": Attr("the CUDA libdevice function (tl.extra.cuda.libdevice), e.g. 'tanh', 'pow'", _STR)},
                  _MAP, "float operands of one dtype (fp32 or fp64); the result has that dtype",
                  spelled="libdevice.{fn}")
CAST = OpDef("cast", ("x",), {"dtype": Attr("the result's element type", DType),
                              "bitcast": Attr("reinterpret the bits instead of converting the value", _BOOL)},
             _MAP, spelled="a cast to {dtype}")
WHERE = OpDef("where", ("cond", "x", "y"), {}, _MAP, spelled="tl.where")
HINT = OpDef("hint", ("x",), {"kind": Attr("what the kernel promises about its values", HintKind),
                              "values": Attr("per axis: the divisor, or the length of the contiguous runs", _TUPLE)},
             _MAP | {Trait.LAYOUT}, "tl.multiple_of / tl.max_contiguous: the operand itself, with a promise for the "
                                     "compiler", spelled="tl.{kind}")
ADDPTR = OpDef("addptr", ("ptr", "offset"), {}, _MAP, "a pointer tile: the argument's pointer plus element offsets",
               spelled="a pointer offset")
LOAD = OpDef("load", ("ptr", "mask", "other"), {
    **_CACHE_ATTRS,
    "volatile": Attr("read memory every time (no caching across the load)", _BOOL),
    "is_async": Attr("tle.load(is_async=True): issue the read ahead of its use; never changes results", _BOOL),
    "async": Attr("set by pipeline_async_loads: how an is_async load is issued (pipelined, or plain and why)",
                  AsyncIssue),
    "async_stages": Attr("set by pipeline_async_loads: the pipeline depth an is_async load is issued with", _INT),
}, frozenset({Trait.MEMORY, Trait.READS}), spelled=_load_spelling)
STORE = OpDef("store", ("ptr", "value", "mask"), dict(_CACHE_ATTRS), frozenset({Trait.MEMORY}), spelled="tl.store")
ATOMIC = OpDef("atomic", ("ptr", "value", "mask"), {
    "kind": Attr("the read-modify-write", AtomicKind),
    **_ATOMIC_ATTRS,
}, frozenset({Trait.MEMORY}), "result: the values the memory held before", spelled="tl.atomic_{kind}")
ATOMIC_CAS = OpDef("atomic_cas", ("ptr", "cmp", "value"), dict(_ATOMIC_ATTRS), frozenset({Trait.MEMORY}),
                   "tl.atomic_cas: where memory holds cmp, write value; result: the values it held before",
                   spelled="tl.atomic_cas")
# Tensor descriptors. make_descriptor's operands: the base pointer, then one i32 extent and one i64 stride per
# axis (the last stride 1); the access ops take the descriptor, then (store / atomic) the value tile, then one
# i32 offset per axis. Elements outside the tensor read as the padding and are not written.
MAKE_DESCRIPTOR = OpDef("make_descriptor", ("base", "*shape", "*strides"), {}, frozenset({Trait.PURE}),
                        "tl.make_tensor_descriptor: the block shape and padding are in its result's type",
                        spelled="tl.make_tensor_descriptor")
DESCRIPTOR_LOAD = OpDef("descriptor_load", ("desc", "*offsets"), {}, frozenset({Trait.READS, Trait.DESCRIPTOR}),
                        "desc.load(offsets)",
                        spelled="desc.load")
DESCRIPTOR_STORE = OpDef("descriptor_store", ("desc", "value", "*offsets"), {}, frozenset({Trait.DESCRIPTOR}),
                         "desc.store(offsets, value)", spelled="desc.store")
DESCRIPTOR_ATOMIC = OpDef("descriptor_atomic", ("desc", "value", "*offsets"),
                          {"kind": Attr("add (desc.atomic_add)", AtomicKind)}, frozenset({Trait.DESCRIPTOR}),
                          "desc.atomic_<kind>(offsets, value); no result (as in Triton)", spelled="desc.atomic_{kind}")
REDUCE = OpDef("reduce", ("x",), {"kind": Attr("the reduction", ReduceKind), "axis": Attr("the reduced axis", _INT),
                                  "keep_dims": Attr("keep the reduced axis with extent 1", _BOOL)},
               frozenset({Trait.PURE}), spelled="tl.{kind}")
SCAN = OpDef("scan", ("x",), {"kind": Attr("sum or prod (tl.cumsum, tl.cumprod)", ScanKind),
                              "axis": Attr("the scanned axis", _INT),
                              "reverse": Attr("scan from the end of the axis", _BOOL)},
             frozenset({Trait.PURE}), "inclusive prefix sums or products along one axis", spelled="tl.cum{kind}")
# tl.associative_scan / tl.reduce with the kernel's own combine function, traced once into the region: its block
# arguments are the left group of scalars then the right group (one per input), and its yield the combined group.
# The region is pure scalar code (the frontend checks it).
COMBINE_SCAN = OpDef("combine_scan", ("*inputs",), {
    "axis": Attr("the scanned axis", _INT), "reverse": Attr("scan from the end of the axis", _BOOL),
    "fn": Attr("the name of the kernel's combine function", _STR)}, frozenset({Trait.PURE}),
    "tl.associative_scan: the input tiles (one shape); one result per input, of its type",
    spelled="tl.associative_scan")
COMBINE_REDUCE = OpDef("combine_reduce", ("*inputs",), {
    "axis": Attr("the reduced axis", _INT), "keep_dims": Attr("keep the reduced axis with extent 1", _BOOL),
    "fn": Attr("the name of the kernel's combine function", _STR)}, frozenset({Trait.PURE}),
    "tl.reduce: the input tiles (one shape); one result per input, the axis reduced", spelled="tl.reduce")
SORT = OpDef("sort", ("x",), {"axis": Attr("the sorted axis (the last one)", _INT),
                              "descending": Attr("largest first", _BOOL)}, frozenset({Trait.PURE}), spelled="tl.sort")
GATHER = OpDef("gather", ("src", "index"), {"axis": Attr("the axis the indices select along", _INT)},
               frozenset({Trait.PURE}), "tl.gather: element i of the result is src's element at i with its `axis` "
               "coordinate replaced by index[i] (index has src's rank and its extents off the axis)",
               spelled="tl.gather")
TOPK = OpDef("topk", ("x",), {"k": Attr("how many of the largest values are kept, largest first", _INT),
                              "axis": Attr("the reduced axis (the last one)", _INT)}, frozenset({Trait.PURE}),
             spelled="tl.topk")
HISTOGRAM = OpDef("histogram", ("x", "mask"), {"num_bins": Attr("bins 0 .. num_bins-1; other values are not "
                                                                "counted", _INT)},
                  frozenset({Trait.PURE}), "i32 counts of each value of an integer tile", spelled="tl.histogram")
DOT = OpDef("dot", ("a", "b", "acc"), {
    "out_dtype": Attr("the accumulator's element type", DType),
    "input_precision": Attr("fp32 operands: 'tf32', 'tf32x3' or 'ieee'; empty for other dtypes", InputPrecision),
    "max_num_imprecise_acc": Attr("fp8: how many products are accumulated at low precision before promotion",
                                  _INT),
}, frozenset({Trait.PURE}), spelled="tl.dot")
INLINE_ASM = OpDef("inline_asm", ("*args",), {
    "asm": Attr("the PTX text, run once per element (or per `pack` elements)", _STR),
    "constraints": Attr("LLVM inline-assembly constraints: outputs, then inputs", _STR),
    "is_pure": Attr("the asm has no effect besides its result", _BOOL),
    "pack": Attr("how many elements one asm instance handles", _INT),
}, frozenset(), "tl.inline_asm_elementwise with one result; operands: the argument tiles",
    spelled="tl.inline_asm_elementwise")
PRINT = OpDef("print", ("*values",), {"prefix": Attr("the text before the values", _STR),
                                      "hex": Attr("print integers in hexadecimal", _BOOL)},
              frozenset(), "tl.device_print: each program prints the operand tiles' elements",
              spelled="tl.device_print")
ASSUME = OpDef("assume", ("cond",), {}, frozenset(),
               "tl.assume: the kernel promises the scalar condition holds (a hint for the compiler; a false one is "
               "undefined behaviour)", spelled="tl.assume")
ASSERT = OpDef("assert", ("cond",), {"msg": Attr("the message of a failed assertion", _STR)}, frozenset(),
               "tl.device_assert: every element of cond must hold (checked when Triton's debug mode is on)",
               spelled="tl.device_assert")
BARRIER = OpDef("barrier", (), {}, frozenset(),
                "tl.debug_barrier: every thread of the program waits here until all have arrived, and the program's "
                "memory writes before it are seen by its reads after it", spelled="tl.debug_barrier")
FOR = OpDef("for", ("lower", "upper", "step", "*inits"), {
    "kind": Attr("how the loop was written (tl.static_range is unrolled by the frontend)", LoopKind),
    "num_stages": Attr("software-pipeline depth the kernel asked for", _INT),
    "loop_unroll_factor": Attr("tl.range: unroll the loop body this many times", _INT),
    "warp_specialize": Attr("tl.range: split producer and consumer warps", _BOOL),
    "flatten": Attr("tl.range: flatten nested loops into one", _BOOL),
    "disallow_acc_multi_buffer": Attr("tl.range: keep one accumulator buffer in a pipelined loop", _BOOL),
    "disable_licm": Attr("tl.range: do not hoist loop invariants", _BOOL),
    "async_stages": Attr("set by pipeline_async_loads: the depth its is_async loads need", _INT),
    "async_raised_from": Attr("set by pipeline_async_loads: the num_stages it raised for is_async loads", _INT),
}, frozenset({Trait.LOOP}), "the body's arguments are (counter, *carried); results: the carried values after the "
                            "last step", spelled=_loop_spelling)
WHILE = OpDef("while", ("*inits",), {}, frozenset({Trait.LOOP}),
              "regions (before, body), both taking the carried values as arguments: before yields the condition (a "
              "bool scalar), body yields the next carried values; results: the carried values when the condition "
              "first fails", spelled="while loop")
IF = OpDef("if", ("cond",), {}, frozenset({Trait.BRANCH}), "regions (then, else); results: what both branches yield",
           spelled="if")
YIELD = OpDef("yield", ("*values",), {}, frozenset({Trait.TERMINATOR}), "the values a loop body or a branch hands on",
              spelled="yield")
RAW_CALL = OpDef("raw_call", ("*args",), {
    "fn": Attr("the tle.raw function"),
    "threads": Attr("the hardware threads the function runs on (tle.hardware_constraint / hardware=)", _TUPLE),
    "layout": Attr("per argument: a layout dict (its 'order') or None", _TUPLE),
    "outputs": Attr("indices of the arguments the function writes; one result per written argument", _TUPLE),
}, frozenset(), "tle.call: operands are the argument tiles", spelled="tle.call")
# tle.gpu buffers. A buffer is a value: every write makes its next version (the result), and the versions of one
# allocation are used one after the other, so a backend may keep them in one place.
ALLOC = OpDef("alloc", (), {"scope": Attr("the storage kind", Storage), "layout": Attr("a layout hint or None")},
              frozenset({Trait.PURE}), "tle.gpu.alloc: a buffer with undefined contents", spelled="tle.gpu.alloc")
LOCAL_LOAD = OpDef("local_load", ("buf",), {}, frozenset({Trait.PURE}),
                   "tle.gpu.local_load: the buffer version as a tile", spelled="tle.gpu.local_load")
LOCAL_STORE = OpDef("local_store", ("buf", "value"), {}, frozenset({Trait.BUFFER_WRITE}),
                    "tle.gpu.local_store: result is the buffer's next version", spelled="tle.gpu.local_store")
LOCAL_GATHER = OpDef("local_gather", ("buf", "offsets", "mask", "other"), {}, frozenset({Trait.PURE}),
                     "tl.load through tle.gpu.local_ptr(buf, offsets): the buffer version's elements at flat "
                     "row-major offsets (other where mask is false)", spelled="tl.load of a tle.gpu.local_ptr")
LOCAL_SCATTER = OpDef("local_scatter", ("buf", "offsets", "value", "mask"), {}, frozenset({Trait.BUFFER_WRITE}),
                      "tl.store through tle.gpu.local_ptr(buf, offsets): the buffer's next version, value written "
                      "at flat row-major offsets (no offsets: each element at its own place) where mask holds",
                      spelled="tl.store of a tle.gpu.local_ptr")
COPY_IN = OpDef("copy_in", ("ptr", "mask", "other", "buf"), {}, frozenset({Trait.MEMORY, Trait.READS,
                                                                          Trait.BUFFER_WRITE}),
                "tle.gpu.copy from global memory; result is the buffer's next version", spelled="tle.gpu.copy")
COPY_OUT = OpDef("copy_out", ("ptr", "buf", "mask"), {}, frozenset({Trait.MEMORY}), "tle.gpu.copy to global memory",
                 spelled="tle.gpu.copy")

OPS: dict[str, OpDef] = {d.name: d for d in list(globals().values()) if isinstance(d, OpDef)}


class OpSet(frozenset):
    """A set of op definitions; asking it about an op's name (a str) is a mistake and raises."""

    def __new__(cls, items=()):
        items = tuple(items)
        if not all(isinstance(i, OpDef) for i in items):
            raise TypeError(f"an OpSet holds op definitions, got {[i for i in items if not isinstance(i, OpDef)]}")
        return super().__new__(cls, items)

    def __contains__(self, item) -> bool:
        if isinstance(item, str):
            raise TypeError(f"ask an OpSet about an op definition (op.defn), not the name {item!r}")
        return super().__contains__(item)

    def __or__(self, other) -> "OpSet":
        return OpSet(frozenset.__or__(self, OpSet(other)))

    def __sub__(self, other) -> "OpSet":
        return OpSet(frozenset.__sub__(self, OpSet(other)))

    def __and__(self, other) -> "OpSet":
        return OpSet(frozenset.__and__(self, OpSet(other)))


def ops_of(*defs: OpDef) -> OpSet:
    return OpSet(defs)


def with_trait(trait: Trait) -> OpSet:
    """The ops that have `trait`."""
    return OpSet(d for d in OPS.values() if trait in d.traits)


def op_named(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise ValueError(f"no IR op '{name}' (lowering/ir/ops.py declares them)") from None
