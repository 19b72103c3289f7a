"""Element-wise ops: the expression rule writing element `idx` of each as a TIR expression, and the one
statement rule they share, which decides whether a value is written inline at its uses, bound to a
scalar let, or materialized in a fragment."""
from __future__ import annotations

from ..ir import ops
from ..ir import types as ir_types
from ..ir.core import Op, Value
from ..ir.ops import BinaryOp, CmpPred, Trait, UnaryOp, ops_of, with_trait
from ..ir.uses import index_only
from .context import Buffer, Context
from ..rules import RuleSet
from .syntax import GRID_VARS, literal, operand_index, reindex, tl_dtype

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table

ELEMENTWISE_OPS = with_trait(Trait.ELEMENTWISE)
_BIN = {BinaryOp.ADD: "+", BinaryOp.SUB: "-", BinaryOp.MUL: "*", BinaryOp.AND: "&", BinaryOp.OR: "|",
        BinaryOp.XOR: "^", BinaryOp.SHL: "<<", BinaryOp.SHR: ">>"}
_CMP = {CmpPred.LT: "<", CmpPred.LE: "<=", CmpPred.GT: ">", CmpPred.GE: ">=", CmpPred.EQ: "==", CmpPred.NE: "!="}
_MATH = {UnaryOp.EXP: "T.exp", UnaryOp.EXP2: "T.exp2", UnaryOp.LOG: "T.log", UnaryOp.LOG2: "T.log2",
         UnaryOp.SQRT: "T.sqrt", UnaryOp.RSQRT: "T.rsqrt", UnaryOp.SIGMOID: "T.sigmoid", UnaryOp.ABS: "T.abs",
         UnaryOp.ERF: "T.erf", UnaryOp.SIN: "T.sin", UnaryOp.COS: "T.cos", UnaryOp.FLOOR: "T.floor",
         UnaryOp.CEIL: "T.ceil"}
_EXPENSIVE = {UnaryOp.EXP, UnaryOp.EXP2, UnaryOp.LOG, UnaryOp.LOG2, UnaryOp.SQRT, UnaryOp.RSQRT, UnaryOp.SIGMOID,
              UnaryOp.ERF, UnaryOp.SIN, UnaryOp.COS, BinaryOp.FDIV, BinaryOp.DIV, BinaryOp.REM, BinaryOp.UMULHI}
# ops that only name or re-index a value: recomputing them costs nothing
_FREE = with_trait(Trait.LAYOUT) | with_trait(Trait.SOURCE) | ops_of(ops.RESHAPE)
_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453


# -- the statement rule -----------------------------------------------------------------------------------
@RULE_SET.rule(*sorted(ELEMENTWISE_OPS), role="statement")
def inline_or_materialize(gen: Context, op: Op, indent: int):
    v = op.result
    if op.defn is ops.SPLIT:
        stage_split_operand(gen, op, indent)
    if v.type.is_scalar:
        if binds_let(gen, op):
            name = gen.ids.define(v)
            gen.let(name, gen.render(op, []), indent)
            gen.scalars[v.id] = name
        return
    if materializes(gen, op, held=lambda u: u.id in gen.buffers or u.id in gen.scalars):
        gen.buffer_of(v, indent, "shared" if read_by_split(gen, v) else "fragment")


def binds_let(gen: Context, op: Op) -> bool:
    """Is scalar `op` bound to a let: named in the source, used twice, or used in another block?
    (Pointers and constants are always written inline.)"""
    v = op.result
    if v.type.is_pointer or op.defn is ops.CONST:
        return False
    us = gen.users.get(v.id, [])
    return bool(v.name) or len(us) > 1 or any(u.parent is not op.parent for u in us)


def materializes(gen: Context, op: Op, held) -> bool:
    """Is tile `op` materialized in a fragment: costly to recompute, and used more than once or inside a
    block it is not in? `held(value)`: whether a value already lives in a buffer or a scalar."""
    v = op.result
    # an index (an address, a mask) is written inline at every use: a few integer operations, where a fragment
    # holding it would give every tile it addresses (stores of products of different warp layouts) one layout
    if v.type.is_pointer or v.type.elem.is_bool or index_only(v):
        return False
    us = gen.users.get(v.id, [])
    nested = any(u.parent is not op.parent for u in us)
    return cost(v, held) >= 4 and (len(us) > 1 or nested or broadcast_later(gen, v))


def broadcast_later(gen: Context, v: Value) -> bool:
    """Is tile `v` stretched by a broadcast (through unit axes and reshapes) before anything computes with it?
    Written inline, it would be recomputed for every element of the wider tile: an exp of a [2048] row in a
    [8, 2048] comparison is 8 exps an element, an [M] rescale factor in an [M, D] accumulator D of them."""
    todo = list(gen.users.get(v.id, []))
    while todo:
        u = todo.pop()
        if u.defn is ops.BROADCAST:
            return True
        if u.defn in (ops.EXPAND_DIMS, ops.RESHAPE):
            todo.extend(gen.users.get(u.result.id, []))
    return False


def cost(v: Value, held) -> int:
    """Rough cost of recomputing `v` inline (expensive ops count more)."""
    if held(v):
        return 0
    op = v.defining_op
    if op is None or not op.has(Trait.ELEMENTWISE):
        return 0
    expensive = op.defn is ops.LIBDEVICE or op.attrs.get("op") in _EXPENSIVE
    c = 0 if op.defn in _FREE or _widens_int(op) else 4 if expensive else 1
    return c + sum(cost(o, held) for o in op.operands if o is not None)


def _widens_int(op: Op) -> bool:
    """A scalar's or an arange's integer cast to a wider integer (a block pointer's 64-bit indices): a sign
    extension of a value that is free itself, so free."""
    if op.defn is not ops.CAST:
        return False
    x = op.operand("x")
    src, dst = x.type.elem, op.result.type.elem
    widens = src.is_int and dst.is_int and not src.is_bool and src.bits <= dst.bits
    return widens and (x.type.is_scalar or (x.defining_op is not None and x.defining_op.defn is ops.ARANGE))


# -- tl.split: where the tile it halves is read from ------------------------------------------------------
# TileLang places a T.Parallel loop's iterations by inverting the index at which it reads a fragment: a read
# of one element of every pair (`x[i0 * 2 + 1]`, `x[i0, 1]`) has no inverse, so the tile a split reads
# lives in shared memory, which any thread may read at any index.
def split_reads(gen: Context, op: Op, ahead=None) -> list[Value]:
    """The tiles whose elements split `op` reads at an index that its half fixes (through the element-wise
    ops written inline, down to values held in a buffer): a join on that axis or a broadcast of it reads
    its operands at the split's own index, and a reshape mixes the half into every axis. `ahead(value)`,
    asked before the ops between are emitted: whether a value counts as held, to tell which of those ops
    will be materialized (and read in place of what they compute from)."""
    x = op.operand("x")
    out, seen = [], set()
    todo = [(x, x.type.rank - 1)]          # (value, the axis the half indexes; None: mixed by a reshape)
    while todo:
        v, axis = todo.pop()
        if v is None or v.type.is_scalar or v.type.is_pointer or (v.id, axis) in seen:
            continue
        seen.add((v.id, axis))
        out.append(v)
        d = v.defining_op
        held = v.id in gen.scalars or (v.id in gen.buffers and gen.visible(gen.buffers[v.id]))
        if held or d is None or not d.has(Trait.ELEMENTWISE) or (d.defn is ops.SPLIT and _staged(gen, d)):
            continue
        if ahead is not None and not ahead(v) and materializes(gen, d, held=ahead):
            continue
        todo.extend((o, a) for o, a in _half_axis(d, axis) if o is not None)
    return out


def _half_axis(op: Op, axis: int | None) -> list[tuple[Value, int | None]]:
    """The operands of `op` whose index the half still fixes, with the axis it fixes there."""
    rank = op.result.type.rank
    if op.defn is ops.RESHAPE:
        return [(op.operand("x"), None)]
    if op.defn is ops.SPLAT:
        return []
    if axis is None:
        return [(o, None) for o in op.operands]
    if op.defn is ops.JOIN:
        return [] if axis == rank - 1 else [(o, axis) for o in op.operands]
    if op.defn is ops.BROADCAST:
        src = op.operand("x").type.shape
        off = rank - len(src)
        return [] if axis < off or src[axis - off] == 1 else [(op.operand("x"), axis - off)]
    if op.defn is ops.EXPAND_DIMS:
        ax = op.attrs["axis"]
        return [] if axis == ax else [(op.operand("x"), axis - (axis > ax))]
    if op.defn is ops.TRANS:
        return [(op.operand("x"), op.attrs["perm"][axis])]
    return [(o, axis) for o in op.operands]     # element-wise, hint, split: the same index


def read_by_split(gen: Context, v: Value) -> bool:
    """Does a split read tile `v` at an index that its half fixes (so `v` belongs in shared memory)?"""
    ahead = lambda u: u.id == v.id or u.id in gen.buffers or u.id in gen.scalars     # noqa: E731
    return any(v.id == r.id for o in gen.splits for r in split_reads(gen, o, ahead))


def stage_split_operand(gen: Context, op: Op, indent: int):
    """Copy the tile split `op` halves to shared memory when it would read a fragment at the half's index
    (a tile held in a fragment before the split was seen: a carried tile, a reduction's result)."""
    x = op.operand("x")
    held = [gen.buffers[v.id] for v in split_reads(gen, op) if v.id in gen.buffers]
    if not any(b.scope == "fragment" and gen.visible(b) for b in held) or _staged(gen, op):
        return
    b = gen.buffers.get(x.id)
    if b is None or not gen.visible(b) or b.perm is not None or x.id in gen.keepdims:
        gen.buffer_of(x, indent, "shared")
        return
    name = gen.alloc((x.name or "t") + "_shared", x.type.shape, x.type.elem, "shared")
    gen.emit(f"T.copy({b.region()}, {name})", indent)
    gen.copies[(x.id, "shared", x.type.elem)] = Buffer(name, x.type.shape, x.type.elem, "shared", gen.blocks[-1])


def _staged(gen: Context, op: Op) -> Buffer | None:
    """The shared copy stage_split_operand made of the tile split `op` halves, where it is visible."""
    x = op.operand("x")
    b = gen.copies.get((x.id, "shared", x.type.elem))
    return b if b is not None and gen.visible(b) else None


# -- expression rules -------------------------------------------------------------------------------------
@RULE_SET.rule(ops.CONST, role="expression")
def const(gen: Context, op: Op, idx: list[str]) -> str:
    return literal(op.attrs["value"], op.result.type.elem)


@RULE_SET.rule(ops.PROGRAM_ID, role="expression")
def program_id(gen: Context, op: Op, idx: list[str]) -> str:
    return GRID_VARS[op.attrs["axis"]]


@RULE_SET.rule(ops.NUM_PROGRAMS, role="expression")
def num_programs(gen: Context, op: Op, idx: list[str]) -> str:
    axis = op.attrs["axis"]
    return str(gen.grid[axis] if axis < len(gen.grid) else 1)


@RULE_SET.rule(ops.ARANGE, role="expression")
def arange(gen: Context, op: Op, idx: list[str]) -> str:
    start = op.attrs["start"]
    return idx[0] if start == 0 else f"({idx[0]} + {start})"


@RULE_SET.rule(*sorted(with_trait(Trait.LAYOUT)), role="expression")
def relayout(gen: Context, op: Op, idx: list[str]) -> str:
    return gen.elem(op.operand("x"), operand_index(op, idx))


@RULE_SET.rule(ops.RESHAPE, role="expression")
def reshape(gen: Context, op: Op, idx: list[str]) -> str:
    x = op.operand("x")
    return gen.elem(x, reindex(idx, op.result.type.shape, x.type.shape))


@RULE_SET.rule(ops.JOIN, role="expression")
def join(gen: Context, op: Op, idx: list[str]) -> str:
    a, b = op.operand("a"), op.operand("b")
    rest = idx[:-1]
    return f"T.if_then_else({idx[-1]} == 0, {gen.elem(a, rest)}, {gen.elem(b, rest)})"


@RULE_SET.rule(ops.SPLIT, role="expression")
def split(gen: Context, op: Op, idx: list[str]) -> str:
    at = list(idx) + [str(op.attrs["half"])]
    staged = _staged(gen, op)
    return staged.at(at) if staged is not None else gen.elem(op.operand("x"), at)


@RULE_SET.rule(ops.BINARY, role="expression")
def binary(gen: Context, op: Op, idx: list[str]) -> str:
    lhs, rhs = op.operand("lhs"), op.operand("rhs")
    x, y = gen.elem(lhs, idx), gen.elem(rhs, idx)
    k = op.attrs["op"]
    if k in _BIN:
        return f"({x} {_BIN[k]} {y})"
    if k is BinaryOp.FDIV:
        return f"({x} / {y})"
    if k is BinaryOp.DIV:
        return f"T.truncdiv({x}, {y})"    # Triton's integer division truncates, like C
    if k is BinaryOp.REM:
        return f"T.truncmod({x}, {y})" if lhs.type.elem.is_int else f"T.fmod({x}, {y})"
    if k is BinaryOp.UMULHI:     # the high half of the unsigned double-width product
        bits = lhs.type.elem.bits
        wide, narrow = ("uint64", "uint32") if bits == 32 else (None, None)
        if wide is None:
            gen.error("tl.umulhi of 64-bit integers", op, "TIR has no 128-bit product to take the high half of")
        return (f"T.reinterpret(T.Cast({narrow!r}, (T.Cast({wide!r}, T.reinterpret({x}, {narrow!r})) * "
                f"T.Cast({wide!r}, T.reinterpret({y}, {narrow!r}))) >> T.uint64(32)), {tl_dtype(lhs.type.elem)!r})")
    if k is BinaryOp.MAXIMUM:
        return f"T.max({x}, {y})"
    if k is BinaryOp.MINIMUM:
        return f"T.min({x}, {y})"
    gen.error(f"binary op '{k}'", op)


@RULE_SET.rule(ops.CMP, role="expression")
def cmp(gen: Context, op: Op, idx: list[str]) -> str:
    lhs, rhs = op.operand("lhs"), op.operand("rhs")
    return f"({gen.elem(lhs, idx)} {_CMP[op.attrs['pred']]} {gen.elem(rhs, idx)})"


@RULE_SET.rule(ops.UNARY, role="expression")
def unary(gen: Context, op: Op, idx: list[str]) -> str:
    k = op.attrs["op"]
    operand = op.operand("x")
    x = gen.elem(operand, idx)
    if k is UnaryOp.NEG:
        return f"(-{x})"
    if k in (UnaryOp.INVERT, UnaryOp.NOT):
        return f"T.Not({x})" if operand.type.elem.is_bool else f"(~{x})"
    if k is UnaryOp.ABS and operand.type.elem.is_fp8:        # TIR has no fp8 abs: clear the sign bit
        return f"T.reinterpret(T.reinterpret({x}, 'uint8') & T.uint8(127), {tl_dtype(operand.type.elem)!r})"
    if k is UnaryOp.EXP and operand.type.elem == ir_types.fp32:     # as Triton lowers tl.exp: 2^(x*log2(e))
        return f"T.exp2({x} * {_LOG2E})"
    if k is UnaryOp.LOG and operand.type.elem == ir_types.fp32:     # as Triton lowers tl.log: log2(x)*ln(2)
        return f"(T.log2({x}) * {_LN2})"
    return f"{_MATH[k]}({x})"


# libdevice functions with a TIR intrinsic computing the same function (CUDA's own, for fp32 and fp64)
LIBDEVICE = {name: f"T.{name}" for name in (
    "tanh", "sinh", "cosh", "tan", "asin", "acos", "atan", "asinh", "acosh", "atanh", "exp", "exp2", "exp10",
    "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "erf", "floor", "ceil", "trunc", "nearbyint", "sin",
    "cos", "pow", "fmod", "atan2", "hypot", "copysign", "fma")}
LIBDEVICE["rint"] = "T.nearbyint"        # both round half to even


@RULE_SET.rule(ops.LIBDEVICE, role="expression")
def libdevice(gen: Context, op: Op, idx: list[str]) -> str:
    fn = LIBDEVICE.get(op.attrs["fn"])
    if fn is None:
        gen.error(f"libdevice.{op.attrs['fn']}", op, "TIR has no intrinsic computing this CUDA function")
    return f"{fn}({', '.join(gen.elem(v, idx) for v in op.operands)})"


@RULE_SET.rule(ops.CAST, role="expression")
def cast(gen: Context, op: Op, idx: list[str]) -> str:
    fn = "T.reinterpret" if op.attrs.get("bitcast") else "T.cast"
    return f"{fn}({gen.elem(op.operand('x'), idx)}, {tl_dtype(op.attrs['dtype'])!r})"


@RULE_SET.rule(ops.WHERE, role="expression")
def where(gen: Context, op: Op, idx: list[str]) -> str:
    cond, x, y = op.operand("cond"), op.operand("x"), op.operand("y")
    return f"T.if_then_else({gen.elem(cond, idx)}, {gen.elem(x, idx)}, {gen.elem(y, idx)})"


@RULE_SET.rule(ops.ADDPTR, role="expression")
def addptr(gen: Context, op: Op, idx: list[str]) -> str:
    return gen.offset(op.result, idx)
