"""Expression rules: each op that yields a value, written as the Triton expression computing it. `gen` is the
code generator (lowering/triton/codegen.py); a rule asks it for its operands' expressions, so a value
used once is written inline where it is used, and one with a name is read through that name."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Op, Value
from ..ir.ops import CACHE_HINTS, BinaryOp, UnaryOp
from ..rules import RuleSet
from .syntax import BIN, CMP, MATH, PREC, full, literal, tl_dtype

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table


def _rule(*defs):
    return RULE_SET.rule(*defs, role="expression")


@_rule(ops.CONST)
def const(gen, op: Op) -> str:
    elem = op.result.type.elem
    if elem.name in ("i32", "fp32", "i1") or (gen.typed_by_context(op) and not elem.is_fp8):
        return literal(op.attrs["value"], elem)
    return full([], op.attrs["value"], elem)


@_rule(ops.PROGRAM_ID, ops.NUM_PROGRAMS)
def grid_index(gen, op: Op) -> str:
    return f"tl.{op.name}({op.attrs['axis']})"


@_rule(ops.ARANGE)
def arange(gen, op: Op) -> str:
    return f"tl.arange({op.attrs['start']}, {op.attrs['end']})"


@_rule(ops.SPLAT, ops.BROADCAST)
def splat_or_broadcast(gen, op: Op) -> str:
    x, shape = op.operand("x"), list(op.attrs["shape"])
    if gen.implicitly_broadcast(op):
        return gen.expr(x)
    if op.defn is ops.BROADCAST or op.result.type.is_pointer:
        return f"tl.broadcast_to({gen.expr(x)}, {shape})"
    src = x.defining_op
    if src is not None and src.defn is ops.CONST and x not in gen.ids:
        return full(shape, src.attrs["value"], op.result.type.elem)
    return f"tl.full({shape}, {gen.expr(x)}, {tl_dtype(op.result.type.elem)})"


@_rule(ops.EXPAND_DIMS)
def expand_dims(gen, op: Op) -> str:
    idx = [":"] * op.result.type.rank
    idx[op.attrs["axis"]] = "None"
    return f"{gen.paren(op.operand('x'))}[{', '.join(idx)}]"


@_rule(ops.RESHAPE)
def reshape(gen, op: Op) -> str:
    return f"tl.reshape({gen.expr(op.operand('x'))}, {list(op.attrs['shape'])})"


@_rule(ops.JOIN)
def join(gen, op: Op) -> str:
    return f"tl.join({gen.expr(op.operand('a'))}, {gen.expr(op.operand('b'))})"


@_rule(ops.SPLIT)
def split(gen, op: Op) -> str:
    return f"tl.split({gen.expr(op.operand('x'))})[{op.attrs['half']}]"


@_rule(ops.TRANS)
def trans(gen, op: Op) -> str:
    perm = tuple(op.attrs["perm"])
    if perm == (1, 0):
        return f"tl.trans({gen.expr(op.operand('x'))})"
    return f"tl.permute({gen.expr(op.operand('x'))}, {perm})"


@_rule(ops.BINARY)
def binary(gen, op: Op) -> str:
    o, x, y = op.attrs["op"], op.operand("lhs"), op.operand("rhs")
    if o in (BinaryOp.MAXIMUM, BinaryOp.MINIMUM, BinaryOp.UMULHI):
        return f"tl.{o}({gen.expr(x)}, {gen.expr(y)})"
    return gen.binop(BIN[o], x, y)


@_rule(ops.CMP)
def cmp(gen, op: Op) -> str:
    return gen.binop(CMP[op.attrs["pred"]], op.operand("lhs"), op.operand("rhs"))


@_rule(ops.UNARY)
def unary(gen, op: Op) -> str:
    o, x = op.attrs["op"], op.operand("x")
    if o is UnaryOp.NEG:
        return f"-{gen.paren(x, PREC['unary'], right=True)}"
    if o in (UnaryOp.INVERT, UnaryOp.NOT):
        return f"~{gen.paren(x, PREC['unary'], right=True)}"
    return f"{MATH[o]}({gen.expr(x)})"


@_rule(ops.LIBDEVICE)
def libdevice(gen, op: Op) -> str:
    gen.need_import("from triton.language.extra.cuda import libdevice")
    return f"libdevice.{op.attrs['fn']}({', '.join(gen.expr(v) for v in op.operands)})"


@_rule(ops.CAST)
def cast(gen, op: Op) -> str:
    x, dtype = op.operand("x"), tl_dtype(op.attrs["dtype"])
    extra = ", bitcast=True" if op.attrs.get("bitcast") else ""
    if x.type.is_scalar:
        # a loop counter is a Python int in Triton's interpreter, where int has no .to()
        return f"tl.cast({gen.expr(x)}, {dtype}{extra})"
    return f"{gen.paren(x)}.to({dtype}{extra})"


@_rule(ops.WHERE)
def where(gen, op: Op) -> str:
    return f"tl.where({', '.join(gen.expr(v) for v in op.operands)})"


@_rule(ops.HINT)
def hint(gen, op: Op) -> str:
    values = list(op.attrs["values"])
    return f"tl.{op.attrs['kind']}({gen.expr(op.operand('x'))}, {values[0] if len(values) == 1 else values})"


@_rule(ops.ADDPTR)
def addptr(gen, op: Op) -> str:
    return gen.binop("+", op.operand("ptr"), op.operand("offset"))


# tle.gpu buffers are register tiles here (stock Triton has no explicit shared memory): a buffer version is
# the tile it holds, an allocation's contents (undefined) are zeros.
@_rule(ops.ALLOC)
def alloc(gen, op: Op) -> str:
    return full(list(op.result.type.shape), 0, op.result.type.elem)


@_rule(ops.LOCAL_LOAD)
def local_load(gen, op: Op) -> str:
    return gen.expr(op.operand("buf"))


@_rule(ops.LOCAL_STORE)
def local_store(gen, op: Op) -> str:
    return gen.expr(op.operand("value"))


# tle.gpu.local_ptr accesses: the buffer is a register tile, so a load through the pointers is tl.gather from the
# flattened tile, and a store a select over the tile's elements (each takes the value of the last lane whose
# offset names it): O(buffer elements x pointers), the price of no shared-memory pointers in stock Triton.
@_rule(ops.LOCAL_GATHER)
def local_gather(gen, op: Op) -> str:
    buf, offsets, mask, other = (op.operand(n) for n in ("buf", "offsets", "mask", "other"))
    n, shape = buf.type.numel, list(offsets.type.shape)
    params = ["buf", "offsets"] + (["mask", "other"] if mask is not None else [])
    index = "tl.where(mask, offsets, 0)" if mask is not None else "offsets"   # masked-off lanes read element 0
    body = [f"    flat = tl.reshape(buf, [{n}])",
            f"    picked = tl.reshape(tl.gather(flat, tl.reshape({index}, [{offsets.type.numel}]), 0), {shape})"]
    if mask is not None:
        body.append("    return tl.where(mask, picked, other)")
    else:
        body.append("    return picked")
    name = gen.function("local_gather", params, body)
    args = [gen.expr(buf), gen.expr(offsets)]
    if mask is not None:
        args += [gen.expr(mask), gen.other(other) if other is not None else "0"]
    return f"{name}({', '.join(args)})"


@_rule(ops.LOCAL_SCATTER)
def local_scatter(gen, op: Op) -> str:
    buf, offsets, value, mask = (op.operand(n) for n in ("buf", "offsets", "value", "mask"))
    if offsets is None:                          # each element at its own place, where the mask holds
        return f"tl.where({gen.expr(mask)}, {gen.expr(value)}, {gen.expr(buf)})"
    n, m = buf.type.numel, offsets.type.numel
    params = ["buf", "offsets", "value"] + (["mask"] if mask is not None else [])
    hit = f"tl.reshape(offsets, [{m}])[None, :] == tl.arange(0, {n})[:, None]"
    if mask is not None:
        hit = f"({hit}) & tl.reshape(mask, [{m}])[None, :]"
    body = [f"    hit = {hit}  # [element, lane]",
            f"    writer = tl.max(tl.where(hit, tl.arange(0, {m})[None, :], -1), axis=1)  # the last lane naming it",
            f"    written = tl.gather(tl.reshape(value, [{m}]), tl.maximum(writer, 0), 0)",
            f"    return tl.reshape(tl.where(writer >= 0, written, tl.reshape(buf, [{n}])), "
            f"{list(buf.type.shape)})"]
    name = gen.function("local_scatter", params, body)
    args = [gen.expr(buf), gen.expr(offsets), gen.expr(value)] + ([gen.expr(mask)] if mask is not None else [])
    return f"{name}({', '.join(args)})"


@_rule(ops.LOAD, ops.COPY_IN)
def load(gen, op: Op) -> str:
    ptr, mask, other = op.operand("ptr"), op.operand("mask"), op.operand("other")
    args = [gen.expr(ptr)]
    if mask is not None:
        args.append(f"mask={gen.expr(mask)}")
    if other is not None:
        args.append(f"other={gen.other(other)}")
    for key in CACHE_HINTS:
        if op.attrs.get(key):
              args.append(f"{key}={op.attrs[key]!r}")
    if op.attrs.get("volatile"):
        args.append("volatile=True")
    return f"tl.load({', '.join(args)})"


@_rule(ops.ATOMIC)
def atomic(gen, op: Op) -> str:
    ptr, val, mask = op.operand("ptr"), op.operand("value"), op.operand("mask")
    args = [gen.expr(ptr), gen.expr(val)]
    if mask is not None:
        args.append(f"mask={gen.expr(mask)}")
    return f"tl.atomic_{op.attrs['kind']}({', '.join(args + _ordering(op))})"


@_rule(ops.ATOMIC_CAS)
def atomic_cas(gen, op: Op) -> str:
    return f"tl.atomic_cas({', '.join([gen.expr(v) for v in op.operands] + _ordering(op))})"


# -- tensor descriptors, written back as descriptors (TMA on Hopper) ------------------------------------
def _int_arg(gen, v: Value) -> str:
    """An integer as Triton's descriptor functions take it: they widen it themselves, and read a last
    stride of 1 only as a literal (or an argument Triton compiled in as 1)."""
    while v not in gen.ids and v.defining_op is not None and v.defining_op.defn is ops.CAST \
            and v.defining_op.operand("x").type.elem.is_int:
        v = v.defining_op.operand("x")
    d = v.defining_op
    if v not in gen.ids and d is not None and d.defn is ops.CONST:
        return str(int(d.attrs["value"]))
    return gen.expr(v)


def ints(gen, values) -> str:
    """A list of integers for a descriptor function (offsets, shape, strides)."""
    return f"[{', '.join(_int_arg(gen, v) for v in values)}]"


@_rule(ops.MAKE_DESCRIPTOR)
def make_descriptor(gen, op: Op) -> str:
    d = op.result.type.elem
    base, shape, strides = op.operand("base"), op.operand_group("shape"), op.operand_group("strides")
    return (f"tl.make_tensor_descriptor({gen.expr(base)}, shape={ints(gen, shape)}, strides={ints(gen, strides)}, "
            f"block_shape={list(d.block_shape)}, padding_option={d.padding!r})")


@_rule(ops.DESCRIPTOR_LOAD)
def descriptor_load(gen, op: Op) -> str:
    return f"{gen.expr(op.operand('desc'))}.load({ints(gen, op.operand_group('offsets'))})"


def _ordering(op: Op) -> list[str]:
    return [f"{key}={op.attrs[key]!r}" for key in ("sem", "scope") if op.attrs.get(key)]


@_rule(ops.REDUCE)
def reduce(gen, op: Op) -> str:
    kd = ", keep_dims=True" if op.attrs["keep_dims"] else ""
    return f"tl.{op.attrs['kind']}({gen.expr(op.operand('x'))}, axis={op.attrs['axis']}{kd})"


@_rule(ops.SCAN)
def scan(gen, op: Op) -> str:
    rev = ", reverse=True" if op.attrs["reverse"] else ""
    return f"tl.cum{op.attrs['kind']}({gen.expr(op.operand('x'))}, axis={op.attrs['axis']}{rev})"


@_rule(ops.SORT)
def sort(gen, op: Op) -> str:
    desc = ", descending=True" if op.attrs["descending"] else ""
    return f"tl.sort({gen.expr(op.operand('x'))}, dim={op.attrs['axis']}{desc})"


@_rule(ops.GATHER)
def gather(gen, op: Op) -> str:
    return f"tl.gather({gen.expr(op.operand('src'))}, {gen.expr(op.operand('index'))}, {op.attrs['axis']})"


@_rule(ops.TOPK)
def topk(gen, op: Op) -> str:
    return f"tl.topk({gen.expr(op.operand('x'))}, {op.attrs['k']}, dim={op.attrs['axis']})"


@_rule(ops.HISTOGRAM)
def histogram(gen, op: Op) -> str:
    x, mask = op.operand("x"), op.operand("mask")
    m = f", mask={gen.expr(mask)}" if mask is not None else ""
    return f"tl.histogram({gen.expr(x)}, {op.attrs['num_bins']}{m})"


@_rule(ops.INLINE_ASM)
def inline_asm(gen, op: Op) -> str:
    a = op.attrs
    args = ", ".join(gen.expr(v) for v in op.operands)
    return (f"tl.inline_asm_elementwise({a['asm']!r}, {a['constraints']!r}, [{args}], "
            f"dtype={tl_dtype(op.result.type.elem)}, is_pure={a['is_pure']}, pack={a['pack']})")


@_rule(ops.DOT)
def dot(gen, op: Op) -> str:
    a = op.attrs
    args = [gen.expr(v) for v in op.operands]
    if a.get("input_precision"):
        args.append(f"input_precision={a['input_precision']!r}")
    if a.get("max_num_imprecise_acc"):
        args.append(f"max_num_imprecise_acc={a['max_num_imprecise_acc']}")
    args.append(f"out_dtype={tl_dtype(a['out_dtype'])}")
    return f"tl.dot({', '.join(args)})"
