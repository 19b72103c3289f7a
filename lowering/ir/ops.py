"""Every op of the tile IR, declared once: its operands, its attributes and what they mean, and its traits.

This is the list the rest of the compiler agrees on. A backend registers one lowering rule per op here
(or declares the op unsupported, with the reason its users will read), and says for each attribute what
it does with it: honors it, drops it with a note, or refuses it. `tests/cpu/test_lowering_rules.py` fails
when an op or an attribute has no entry in some backend.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Traits
PURE = "pure"                  # no effect: may be computed anywhere, any number of times, or not at all
ELEMENTWISE = "elementwise"    # element i of the result is an expression of its operands' elements
LAYOUT = "layout"              # only re-indexes its operand (splat, broadcast, expand_dims, trans)
MEMORY = "memory"              # reads or writes global memory through a pointer tile
BUFFER_WRITE = "buffer_write"  # makes the next version of a tle.gpu buffer
REGIONS = "regions"            # holds blocks (structured control flow)
TERMINATOR = "terminator"      # ends a block


@dataclass(frozen=True)
class OpDef:
    name: str
    operands: tuple[str, ...] | None    # names in order (a missing optional one is None); None: variadic
    attrs: dict[str, str] = field(default_factory=dict)     # attribute -> what it means
    traits: frozenset[str] = frozenset()
    doc: str = ""


_CACHE_ATTRS = {
    "cache_modifier": "Triton's cache modifier ('.ca', '.cg', '.cv', ...); only a hint, never changes results",
    "eviction_policy": "'evict_first' / 'evict_last': an L2 hint, never changes results",
}
# attributes of load and store that only hint at caching: a backend that cannot honor one drops it with a note
CACHE_HINTS = tuple(_CACHE_ATTRS)

_ATOMIC_ATTRS = {
    "sem": "memory ordering: acq_rel (Triton's default when empty), acquire, release, relaxed",
    "scope": "gpu (the default when empty), cta or sys",
}

_EXPR = frozenset({PURE, ELEMENTWISE})
_DEFS = [
    OpDef("const", (), {"value": "the Python value (bool, int or float) of the scalar"}, _EXPR),
    OpDef("program_id", (), {"axis": "grid axis 0, 1 or 2"}, _EXPR),
    OpDef("num_programs", (), {"axis": "grid axis 0, 1 or 2"}, _EXPR),
    OpDef("arange", (), {"start": "first value", "end": "one past the last value"}, _EXPR),
    OpDef("splat", ("x",), {"shape": "the tile shape a scalar fills"}, _EXPR | {LAYOUT}),
    OpDef("broadcast", ("x",), {"shape": "the shape unit axes are stretched to"}, _EXPR | {LAYOUT}),
    OpDef("expand_dims", ("x",), {"axis": "where the unit axis goes"}, _EXPR | {LAYOUT}),
    OpDef("reshape", ("x",), {"shape": "the new shape (row-major order kept)"}, _EXPR),
    OpDef("join", ("a", "b"), {}, _EXPR, "tl.join: a new last axis of extent 2 holding a, then b"),
    OpDef("split", ("x",), {"half": "0 or 1: which element of the last axis (of extent 2) the result holds"},
          _EXPR, "one result of tl.split: the last axis dropped"),
    OpDef("trans", ("x",), {"perm": "result axis i is operand axis perm[i]"}, _EXPR | {LAYOUT}),
    OpDef("binary", ("lhs", "rhs"), {"op": "add, sub, mul, fdiv, div (truncating), rem, and, or, xor, shl, "
                                           "shr, maximum, minimum, umulhi (high half of the unsigned product)"},
          _EXPR),
    OpDef("cmp", ("lhs", "rhs"), {"pred": "lt, le, gt, ge, eq, ne"}, _EXPR),
    OpDef("unary", ("x",), {"op": "neg, abs, invert, not, exp, exp2, log, log2, sqrt, rsqrt, sigmoid, erf, "
                                  "sin, cos, floor, ceil"}, _EXPR),
    OpDef("libdevice", None, {"fn": "the CUDA libdevice function (tl.extra.cuda.libdevice), e.g. 'tanh', 'pow'"},
          _EXPR, "float operands of one dtype (fp32 or fp64); the result has that dtype"),
    OpDef("cast", ("x",), {"dtype": "the result's element type",
                           "bitcast": "reinterpret the bits instead of converting the value"}, _EXPR),
    OpDef("where", ("cond", "x", "y"), {}, _EXPR),
    OpDef("hint", ("x",), {"kind": "'multiple_of' or 'max_contiguous': what the kernel promises about its values",
                           "values": "per axis: the divisor, or the length of the contiguous runs"},
          _EXPR | {LAYOUT}, "tl.multiple_of / tl.max_contiguous: the operand itself, with a promise for the compiler"),
    OpDef("addptr", ("ptr", "offset"), {}, _EXPR, "a pointer tile: the argument's pointer plus element offsets"),
    OpDef("load", ("ptr", "mask", "other"), {
        **_CACHE_ATTRS,
        "volatile": "read memory every time (no caching across the load)",
        "is_async": "tle.load(is_async=True): issue the read ahead of its use; never changes results",
        "async": "set by pipeline_async_loads: how an is_async load is issued ('pipelined' or 'plain: why')",
        "async_stages": "set by pipeline_async_loads: the pipeline depth an is_async load is issued with",
    }, frozenset({MEMORY})),
    OpDef("store", ("ptr", "value", "mask"), dict(_CACHE_ATTRS), frozenset({MEMORY})),
    OpDef("atomic", ("ptr", "value", "mask"), {
        "kind": "add, max, min, and, or, xor or xchg",
        **_ATOMIC_ATTRS,
    }, frozenset({MEMORY}), "result: the values the memory held before"),
    OpDef("atomic_cas", ("ptr", "cmp", "value"), dict(_ATOMIC_ATTRS), frozenset({MEMORY}),
          "tl.atomic_cas: where memory holds cmp, write value; result: the values it held before"),
    # Tensor descriptors. make_descriptor's operands: the base pointer, then one i32 extent and one i64 stride
    # per axis (the last stride 1); the access ops take the descriptor, then (store / atomic) the value tile,
    # then one i32 offset per axis. Elements outside the tensor read as the padding and are not written.
    OpDef("make_descriptor", None, {}, frozenset({PURE}),
          "tl.make_tensor_descriptor: operands (base, *shape, *strides); the block shape and padding are in "
          "its result's type"),
    OpDef("descriptor_load", None, {}, frozenset(), "desc.load(offsets): operands (desc, *offsets)"),
    OpDef("descriptor_store", None, {}, frozenset(), "desc.store(offsets, value): operands (desc, value, *offsets)"),
    OpDef("descriptor_atomic", None, {"kind": "add (desc.atomic_add)"}, frozenset(),
          "desc.atomic_<kind>(offsets, value): operands (desc, value, *offsets); no result (as in Triton)"),
    OpDef("reduce", ("x",), {"kind": "sum, max, min, argmax, argmin", "axis": "the reduced axis",
                             "keep_dims": "keep the reduced axis with extent 1"}, frozenset({PURE})),
    OpDef("scan", ("x",), {"kind": "sum or prod (tl.cumsum, tl.cumprod)", "axis": "the scanned axis",
                           "reverse": "scan from the end of the axis"}, frozenset({PURE}),
          "inclusive prefix sums or products along one axis"),
    # tl.associative_scan / tl.reduce with the kernel's own combine function, traced once into the region:
    # its block arguments are the left group of scalars then the right group (one per input), and its
    # yield the combined group. The region is pure scalar code (the frontend checks it).
    OpDef("combine_scan", None, {"axis": "the scanned axis", "reverse": "scan from the end of the axis",
                                 "fn": "the name of the kernel's combine function"}, frozenset({PURE, REGIONS}),
          "tl.associative_scan: operands are the input tiles (one shape); one result per input, of its type"),
    OpDef("combine_reduce", None, {"axis": "the reduced axis", "keep_dims": "keep the reduced axis with extent 1",
                                   "fn": "the name of the kernel's combine function"}, frozenset({PURE, REGIONS}),
          "tl.reduce: operands are the input tiles (one shape); one result per input, the axis reduced"),
    OpDef("sort", ("x",), {"axis": "the sorted axis (the last one)", "descending": "largest first"},
          frozenset({PURE})),
    OpDef("topk", ("x",), {"k": "how many of the largest values are kept, largest first",
                           "axis": "the reduced axis (the last one)"}, frozenset({PURE})),
    OpDef("histogram", ("x", "mask"), {"num_bins": "bins 0 .. num_bins-1; other values are not counted"},
          frozenset({PURE}), "i32 counts of each value of an integer tile"),
    OpDef("dot", ("a", "b", "acc"), {
        "out_dtype": "the accumulator's element type",
        "input_precision": "fp32 operands: 'tf32', 'tf32x3' or 'ieee'; empty for other dtypes",
        "max_num_imprecise_acc": "fp8: how many products are accumulated at low precision before promotion",
    }, frozenset({PURE})),
    OpDef("inline_asm", None, {
        "asm": "the PTX text, run once per element (or per `pack` elements)",
        "constraints": "LLVM inline-assembly constraints: outputs, then inputs",
        "is_pure": "the asm has no effect besides its result",
        "pack": "how many elements one asm instance handles",
    }, frozenset(), "tl.inline_asm_elementwise with one result; operands: the argument tiles"),
    OpDef("print", None, {"prefix": "the text before the values", "hex": "print integers in hexadecimal"},
          frozenset(), "tl.device_print: each program prints the operand tiles' elements"),
    OpDef("assert", ("cond",), {"msg": "the message of a failed assertion"}, frozenset(),
          "tl.device_assert: every element of cond must hold (checked when Triton's debug mode is on)"),
    OpDef("for", None, {
        "kind": "how the loop was written: 'range', 'tl.range' or 'tle.gpu.pipeline' (tl.static_range is "
                "unrolled by the frontend)",
        "num_stages": "software-pipeline depth the kernel asked for",
        "loop_unroll_factor": "tl.range: unroll the loop body this many times",
        "warp_specialize": "tl.range: split producer and consumer warps",
        "flatten": "tl.range: flatten nested loops into one",
        "disallow_acc_multi_buffer": "tl.range: keep one accumulator buffer in a pipelined loop",
        "disable_licm": "tl.range: do not hoist loop invariants",
        "async_stages": "set by pipeline_async_loads: the depth its is_async loads need",
        "async_raised_from": "set by pipeline_async_loads: the num_stages it raised for is_async loads",
    }, frozenset({REGIONS}), "operands (lower, upper, step, *inits); the body's arguments are (counter, "
                             "*carried); results: the carried values after the last step"),
    OpDef("while", None, {}, frozenset({REGIONS}),
          "operands: the carried values' initial values; regions (before, body), both taking the carried values "
          "as arguments: before yields the condition (a bool scalar), body yields the next carried values; "
          "results: the carried values when the condition first fails"),
    OpDef("if", ("cond",), {}, frozenset({REGIONS}), "regions (then, else); results: what both branches yield"),
    OpDef("yield", None, {}, frozenset({TERMINATOR}), "the values a loop body or a branch hands on"),
    OpDef("raw_call", None, {
        "fn": "the tle.raw function",
        "threads": "the hardware threads the function runs on (tle.hardware_constraint / hardware=)",
        "layout": "per argument: a layout dict (its 'order') or None",
        "outputs": "indices of the arguments the function writes; one result per written argument",
    }, frozenset(), "tle.call: operands are the argument tiles"),
    # tle.gpu buffers. A buffer is a value: every write makes its next version (the result), and the
    # versions of one allocation are used one after the other, so a backend may keep them in one place.
    OpDef("alloc", (), {"scope": "the storage kind ('smem')", "layout": "a layout hint or None"},
          frozenset({PURE}), "tle.gpu.alloc: a buffer with undefined contents"),
    OpDef("local_load", ("buf",), {}, frozenset({PURE}), "tle.gpu.local_load: the buffer version as a tile"),
    OpDef("local_store", ("buf", "value"), {}, frozenset({BUFFER_WRITE}),
          "tle.gpu.local_store: result is the buffer's next version"),
    OpDef("copy_in", ("ptr", "mask", "other", "buf"), {}, frozenset({MEMORY, BUFFER_WRITE}),
          "tle.gpu.copy from global memory; result is the buffer's next version"),
    OpDef("copy_out", ("ptr", "buf", "mask"), {}, frozenset({MEMORY}), "tle.gpu.copy to global memory"),
]

# attributes any op may carry
COMMON_ATTRS = {
    "warp_group": "tle.gpu.warp_group: the index of the warp group (4 warps) that runs the op; absent: every "
                  "warp of the block",
    "turn": "tle.gpu.turn: the number of the turn block holding the op (the groups run their turn blocks one "
            "group at a time)",
}
_DEFS = [OpDef(d.name, d.operands, {**d.attrs, **COMMON_ATTRS}, d.traits, d.doc) for d in _DEFS]

OPS: dict[str, OpDef] = {d.name: d for d in _DEFS}


def with_trait(trait: str) -> frozenset[str]:
    """The names of the ops that have `trait`."""
    return frozenset(n for n, d in OPS.items() if trait in d.traits)
