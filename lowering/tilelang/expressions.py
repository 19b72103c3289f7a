"""Element-wise ops: the expression rule writing element `idx` of each as a TIR expression, and the one
statement rule they share, which decides whether a value is written inline at its uses, bound to a
scalar let, or materialized in a fragment."""
from __future__ import annotations

from ..ir import types as T
from ..ir.core import Op, Value
from ..ir.ops import ELEMENTWISE, LAYOUT, with_trait
from .context import Buffer, Context
from .rules import RULES
from .syntax import GRID_VARS, literal, operand_index, reindex, tl_dtype

ELEMENTWISE_OPS = with_trait(ELEMENTWISE)
_BIN = {"add": "+", "sub": "-", "mul": "*", "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_MATH = {"exp": "T.exp", "exp2": "T.exp2", "log": "T.log", "log2": "T.log2", "sqrt": "T.sqrt",
         "rsqrt": "T.rsqrt", "sigmoid": "T.sigmoid", "abs": "T.abs", "erf": "T.erf", "sin": "T.sin",
         "cos": "T.cos", "floor": "T.floor", "ceil": "T.ceil"}
_EXPENSIVE = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "erf", "sin", "cos", "fdiv", "div", "rem",
              "umulhi"}
# ops that only name or re-index a value: recomputing them costs nothing
_FREE = with_trait(LAYOUT) | {"const", "program_id", "num_programs", "arange", "reshape"}
_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453


# -- the statement rule -----------------------------------------------------------------------------------
@RULES.rule(*sorted(ELEMENTWISE_OPS), role="statement")
def inline_or_materialize(g: Context, op: Op, indent: int):
    v = op.result
    if op.name == "split":
        stage_split_operand(g, op, indent)
    if v.type.is_scalar:
        if binds_let(g, op):
            name = g.ids.define(v)
            g.let(name, g.render(op, []), indent)
            g.scalars[v.id] = name
        return
    if materializes(g, op, held=lambda u: u.id in g.buffers or u.id in g.scalars):
        g.buffer_of(v, indent, "shared" if read_by_split(g, v) else "fragment")


def binds_let(g: Context, op: Op) -> bool:
    """Is scalar `op` bound to a let: named in the source, used twice, or used in another block?
    (Pointers and constants are always written inline.)"""
    v = op.result
    if v.type.is_pointer or op.name == "const":
        return False
    us = g.users.get(v.id, [])
    return bool(v.name) or len(us) > 1 or any(u.parent is not op.parent for u in us)


def materializes(g: Context, op: Op, held) -> bool:
    """Is tile `op` materialized in a fragment: costly to recompute, and used more than once or inside a
    block it is not in? `held(value)`: whether a value already lives in a buffer or a scalar."""
    v = op.result
    if v.type.is_pointer or v.type.elem.is_bool:
        return False
    us = g.users.get(v.id, [])
    nested = any(u.parent is not op.parent for u in us)
    return cost(v, held) >= 4 and (len(us) > 1 or nested)


def cost(v: Value, held) -> int:
    """Rough cost of recomputing `v` inline (expensive ops count more)."""
    if held(v):
        return 0
    op = v.defining_op
    if op is None or op.name not in ELEMENTWISE_OPS:
        return 0
    expensive = op.name == "libdevice" or op.attrs.get("op") in _EXPENSIVE
    c = 0 if op.name in _FREE or _widens_int(op) else 4 if expensive else 1
    return c + sum(cost(o, held) for o in op.operands if o is not None)


def _widens_int(op: Op) -> bool:
    """A scalar's or an arange's integer cast to a wider integer (a block pointer's 64-bit indices): a sign
    extension of a value that is free itself, so free."""
    if op.name != "cast":
        return False
    x = op.operands[0]
    src, dst = x.type.elem, op.result.type.elem
    widens = src.is_int and dst.is_int and not src.is_bool and src.bits <= dst.bits
    return widens and (x.type.is_scalar or (x.defining_op is not None and x.defining_op.name == "arange"))


# -- tl.split: where the tile it halves is read from ------------------------------------------------------
# TileLang places a T.Parallel loop's iterations by inverting the index at which it reads a fragment: a read
# of one element of every pair (`x[i0 * 2 + 1]`, `x[i0, 1]`) has no inverse, so the tile a split reads
# lives in shared memory, which any thread may read at any index.
def split_reads(g: Context, op: Op, ahead=None) -> list[Value]:
    """The tiles whose elements split `op` reads at an index that its half fixes (through the element-wise
    ops written inline, down to values held in a buffer): a join on that axis or a broadcast of it reads
    its operands at the split's own index, and a reshape mixes the half into every axis. `ahead(value)`,
    asked before the ops between are emitted: whether a value counts as held, to tell which of those ops
    will be materialized (and read in place of what they compute from)."""
    x = op.operands[0]
    out, seen = [], set()
    todo = [(x, x.type.rank - 1)]          # (value, the axis the half indexes; None: mixed by a reshape)
    while todo:
        v, axis = todo.pop()
        if v is None or v.type.is_scalar or v.type.is_pointer or (v.id, axis) in seen:
            continue
        seen.add((v.id, axis))
        out.append(v)
        d = v.defining_op
        held = v.id in g.scalars or (v.id in g.buffers and g.visible(g.buffers[v.id]))
        if held or d is None or d.name not in ELEMENTWISE_OPS or (d.name == "split" and _staged(g, d)):
            continue
        if ahead is not None and not ahead(v) and materializes(g, d, held=ahead):
            continue
        todo.extend((o, a) for o, a in _half_axis(d, axis) if o is not None)
    return out


def _half_axis(op: Op, axis: int | None) -> list[tuple[Value, int | None]]:
    """The operands of `op` whose index the half still fixes, with the axis it fixes there."""
    rank = op.result.type.rank
    if op.name == "reshape":
        return [(op.operands[0], None)]
    if op.name == "splat":
        return []
    if axis is None:
        return [(o, None) for o in op.operands]
    if op.name == "join":
        return [] if axis == rank - 1 else [(o, axis) for o in op.operands]
    if op.name == "broadcast":
        src = op.operands[0].type.shape
        off = rank - len(src)
        return [] if axis < off or src[axis - off] == 1 else [(op.operands[0], axis - off)]
    if op.name == "expand_dims":
        ax = op.attrs["axis"]
        return [] if axis == ax else [(op.operands[0], axis - (axis > ax))]
    if op.name == "trans":
        return [(op.operands[0], op.attrs["perm"][axis])]
    return [(o, axis) for o in op.operands]     # element-wise, hint, split: the same index


def read_by_split(g: Context, v: Value) -> bool:
    """Does a split read tile `v` at an index that its half fixes (so `v` belongs in shared memory)?"""
    ahead = lambda u: u.id == v.id or u.id in g.buffers or u.id in g.scalars     # noqa: E731
    return any(v.id == r.id for o in g.splits for r in split_reads(g, o, ahead))


def stage_split_operand(g: Context, op: Op, indent: int):
    """Copy the tile split `op` halves to shared memory when it would read a fragment at the half's index
    (a tile held in a fragment before the split was seen: a carried tile, a reduction's result)."""
    x = op.operands[0]
    held = [g.buffers[v.id] for v in split_reads(g, op) if v.id in g.buffers]
    if not any(b.scope == "fragment" and g.visible(b) for b in held) or _staged(g, op):
        return
    b = g.buffers.get(x.id)
    if b is None or not g.visible(b) or b.perm is not None or x.id in g.keepdims:
        g.buffer_of(x, indent, "shared")
        return
    name = g.alloc((x.name or "t") + "_shared", x.type.shape, x.type.elem, "shared")
    g.emit(f"T.copy({b.region()}, {name})", indent)
    g.copies[(x.id, "shared", x.type.elem)] = Buffer(name, x.type.shape, x.type.elem, "shared", g.blocks[-1])


def _staged(g: Context, op: Op) -> Buffer | None:
    """The shared copy stage_split_operand made of the tile split `op` halves, where it is visible."""
    x = op.operands[0]
    b = g.copies.get((x.id, "shared", x.type.elem))
    return b if b is not None and g.visible(b) else None


# -- expression rules -------------------------------------------------------------------------------------
@RULES.rule("const", role="expression")
def const(g: Context, op: Op, idx: list[str]) -> str:
    return literal(op.attrs["value"], op.result.type.elem)


@RULES.rule("program_id", role="expression")
def program_id(g: Context, op: Op, idx: list[str]) -> str:
    return GRID_VARS[op.attrs["axis"]]


@RULES.rule("num_programs", role="expression")
def num_programs(g: Context, op: Op, idx: list[str]) -> str:
    axis = op.attrs["axis"]
    return str(g.grid[axis] if axis < len(g.grid) else 1)


@RULES.rule("arange", role="expression")
def arange(g: Context, op: Op, idx: list[str]) -> str:
    start = op.attrs["start"]
    return idx[0] if start == 0 else f"({idx[0]} + {start})"


@RULES.rule(*sorted(with_trait(LAYOUT)), role="expression")
def relayout(g: Context, op: Op, idx: list[str]) -> str:
    return g.elem(op.operands[0], operand_index(op, idx))


@RULES.rule("reshape", role="expression")
def reshape(g: Context, op: Op, idx: list[str]) -> str:
    x = op.operands[0]
    return g.elem(x, reindex(idx, op.result.type.shape, x.type.shape))


@RULES.rule("join", role="expression")
def join(g: Context, op: Op, idx: list[str]) -> str:
    a, b = op.operands
    rest = idx[:-1]
    return f"T.if_then_else({idx[-1]} == 0, {g.elem(a, rest)}, {g.elem(b, rest)})"


@RULES.rule("split", role="expression")
def split(g: Context, op: Op, idx: list[str]) -> str:
    at = list(idx) + [str(op.attrs["half"])]
    staged = _staged(g, op)
    return staged.at(at) if staged is not None else g.elem(op.operands[0], at)


@RULES.rule("binary", role="expression")
def binary(g: Context, op: Op, idx: list[str]) -> str:
    lhs, rhs = op.operands
    x, y = g.elem(lhs, idx), g.elem(rhs, idx)
    k = op.attrs["op"]
    if k in _BIN:
        return f"({x} {_BIN[k]} {y})"
    if k == "fdiv":
        return f"({x} / {y})"
    if k == "div":
        return f"T.truncdiv({x}, {y})"    # Triton's integer division truncates, like C
    if k == "rem":
        return f"T.truncmod({x}, {y})" if lhs.type.elem.is_int else f"T.fmod({x}, {y})"
    if k == "umulhi":     # the high half of the unsigned double-width product
        bits = lhs.type.elem.bits
        wide, narrow = ("uint64", "uint32") if bits == 32 else (None, None)
        if wide is None:
            g.error("tl.umulhi of 64-bit integers", op, "TIR has no 128-bit product to take the high half of")
        return (f"T.reinterpret(T.Cast({narrow!r}, (T.Cast({wide!r}, T.reinterpret({x}, {narrow!r})) * "
                f"T.Cast({wide!r}, T.reinterpret({y}, {narrow!r}))) >> T.uint64(32)), {tl_dtype(lhs.type.elem)!r})")
    if k == "maximum":
        return f"T.max({x}, {y})"
    if k == "minimum":
        return f"T.min({x}, {y})"
    g.error(f"binary op '{k}'", op)


@RULES.rule("cmp", role="expression")
def cmp(g: Context, op: Op, idx: list[str]) -> str:
    lhs, rhs = op.operands
    return f"({g.elem(lhs, idx)} {_CMP[op.attrs['pred']]} {g.elem(rhs, idx)})"


@RULES.rule("unary", role="expression")
def unary(g: Context, op: Op, idx: list[str]) -> str:
    k = op.attrs["op"]
    operand = op.operands[0]
    x = g.elem(operand, idx)
    if k == "neg":
        return f"(-{x})"
    if k in ("invert", "not"):
        return f"T.Not({x})" if operand.type.elem.is_bool else f"(~{x})"
    if k == "abs" and operand.type.elem.is_fp8:        # TIR has no fp8 abs: clear the sign bit
        return f"T.reinterpret(T.reinterpret({x}, 'uint8') & T.uint8(127), {tl_dtype(operand.type.elem)!r})"
    if k == "exp" and operand.type.elem == T.fp32:     # as Triton lowers tl.exp: 2^(x*log2(e))
        return f"T.exp2({x} * {_LOG2E})"
    if k == "log" and operand.type.elem == T.fp32:     # as Triton lowers tl.log: log2(x)*ln(2)
        return f"(T.log2({x}) * {_LN2})"
    return f"{_MATH[k]}({x})"


# libdevice functions with a TIR intrinsic computing the same function (CUDA's own, for fp32 and fp64)
LIBDEVICE = {name: f"T.{name}" for name in (
    "tanh", "sinh", "cosh", "tan", "asin", "acos", "atan", "asinh", "acosh", "atanh", "exp", "exp2", "exp10",
    "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "erf", "floor", "ceil", "trunc", "nearbyint", "sin",
    "cos", "pow", "fmod", "atan2", "hypot", "copysign", "fma")}
LIBDEVICE["rint"] = "T.nearbyint"        # both round half to even


@RULES.rule("libdevice", role="expression")
def libdevice(g: Context, op: Op, idx: list[str]) -> str:
    fn = LIBDEVICE.get(op.attrs["fn"])
    if fn is None:
        g.error(f"libdevice.{op.attrs['fn']}", op, "TIR has no intrinsic computing this CUDA function")
    return f"{fn}({', '.join(g.elem(v, idx) for v in op.operands)})"


@RULES.rule("cast", role="expression")
def cast(g: Context, op: Op, idx: list[str]) -> str:
    fn = "T.reinterpret" if op.attrs.get("bitcast") else "T.cast"
    return f"{fn}({g.elem(op.operands[0], idx)}, {tl_dtype(op.attrs['dtype'])!r})"


@RULES.rule("where", role="expression")
def where(g: Context, op: Op, idx: list[str]) -> str:
    cond, x, y = op.operands
    return f"T.if_then_else({g.elem(cond, idx)}, {g.elem(x, idx)}, {g.elem(y, idx)})"


@RULES.rule("addptr", role="expression")
def addptr(g: Context, op: Op, idx: list[str]) -> str:
    return g.offset(op.result, idx)
