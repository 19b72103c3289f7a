"""Expression rules: each op that yields a value, written as the Triton expression computing it. `g` is the
code generator (lowering/triton/codegen.py); a rule asks it for its operands' expressions, so a value
used once is written inline where it is used, and one with a name is read through that name."""
from __future__ import annotations

from ..ir.core import Op, Value
from ..ir.ops import CACHE_HINTS
from .rules import RULES
from .syntax import BIN, CMP, MATH, PREC, full, literal, tl_dtype


def _rule(*ops):
    return RULES.rule(*ops, role="expression")


@_rule("const")
def const(g, op: Op) -> str:
    elem = op.result.type.elem
    if elem.name in ("i32", "fp32", "i1") or (g.typed_by_context(op) and not elem.is_fp8):
        return literal(op.attrs["value"], elem)
    return full([], op.attrs["value"], elem)


@_rule("program_id", "num_programs")
def grid_index(g, op: Op) -> str:
    return f"tl.{op.name}({op.attrs['axis']})"


@_rule("arange")
def arange(g, op: Op) -> str:
    return f"tl.arange({op.attrs['start']}, {op.attrs['end']})"


@_rule("splat", "broadcast")
def splat_or_broadcast(g, op: Op) -> str:
    x, shape = op.operands[0], list(op.attrs["shape"])
    if g.implicitly_broadcast(op):
        return g.expr(x)
    if op.name == "broadcast" or op.result.type.is_pointer:
        return f"tl.broadcast_to({g.expr(x)}, {shape})"
    src = x.defining_op
    if src is not None and src.name == "const" and x not in g.ids:
        return full(shape, src.attrs["value"], op.result.type.elem)
    return f"tl.full({shape}, {g.expr(x)}, {tl_dtype(op.result.type.elem)})"


@_rule("expand_dims")
def expand_dims(g, op: Op) -> str:
    idx = [":"] * op.result.type.rank
    idx[op.attrs["axis"]] = "None"
    return f"{g.paren(op.operands[0])}[{', '.join(idx)}]"


@_rule("reshape")
def reshape(g, op: Op) -> str:
    return f"tl.reshape({g.expr(op.operands[0])}, {list(op.attrs['shape'])})"


@_rule("join")
def join(g, op: Op) -> str:
    return f"tl.join({g.expr(op.operands[0])}, {g.expr(op.operands[1])})"


@_rule("split")
def split(g, op: Op) -> str:
    return f"tl.split({g.expr(op.operands[0])})[{op.attrs['half']}]"


@_rule("trans")
def trans(g, op: Op) -> str:
    perm = tuple(op.attrs["perm"])
    if perm == (1, 0):
        return f"tl.trans({g.expr(op.operands[0])})"
    return f"tl.permute({g.expr(op.operands[0])}, {perm})"


@_rule("binary")
def binary(g, op: Op) -> str:
    o, (x, y) = op.attrs["op"], op.operands
    if o in ("maximum", "minimum", "umulhi"):
        return f"tl.{o}({g.expr(x)}, {g.expr(y)})"
    return g.binop(BIN[o], x, y)


@_rule("cmp")
def cmp(g, op: Op) -> str:
    return g.binop(CMP[op.attrs["pred"]], *op.operands)


@_rule("unary")
def unary(g, op: Op) -> str:
    o, x = op.attrs["op"], op.operands[0]
    if o == "neg":
        return f"-{g.paren(x, PREC['unary'], right=True)}"
    if o in ("invert", "not"):
        return f"~{g.paren(x, PREC['unary'], right=True)}"
    return f"{MATH[o]}({g.expr(x)})"


@_rule("libdevice")
def libdevice(g, op: Op) -> str:
    g.need_import("from triton.language.extra.cuda import libdevice")
    return f"libdevice.{op.attrs['fn']}({', '.join(g.expr(v) for v in op.operands)})"


@_rule("cast")
def cast(g, op: Op) -> str:
    x, dtype = op.operands[0], tl_dtype(op.attrs["dtype"])
    extra = ", bitcast=True" if op.attrs.get("bitcast") else ""
    if x.type.is_scalar:
        # a loop counter is a Python int in Triton's interpreter, where int has no .to()
        return f"tl.cast({g.expr(x)}, {dtype}{extra})"
    return f"{g.paren(x)}.to({dtype}{extra})"


@_rule("where")
def where(g, op: Op) -> str:
    return f"tl.where({', '.join(g.expr(v) for v in op.operands)})"


@_rule("hint")
def hint(g, op: Op) -> str:
    values = list(op.attrs["values"])
    return f"tl.{op.attrs['kind']}({g.expr(op.operands[0])}, {values[0] if len(values) == 1 else values})"


@_rule("addptr")
def addptr(g, op: Op) -> str:
    return g.binop("+", *op.operands)


# tle.gpu buffers are register tiles here (stock Triton has no explicit shared memory): a buffer version is
# the tile it holds, an allocation's contents (undefined) are zeros.
@_rule("alloc")
def alloc(g, op: Op) -> str:
    return full(list(op.result.type.shape), 0, op.result.type.elem)


@_rule("local_load")
def local_load(g, op: Op) -> str:
    return g.expr(op.operands[0])


@_rule("local_store")
def local_store(g, op: Op) -> str:
    return g.expr(op.operands[1])


@_rule("load", "copy_in")
def load(g, op: Op) -> str:
    ptr, mask, other = op.operands[:3]
    args = [g.expr(ptr)]
    if mask is not None:
        args.append(f"mask={g.expr(mask)}")
    if other is not None:
        args.append(f"other={g.other(other)}")
    for key in CACHE_HINTS:
        if op.attrs.get(key):
            args.append(f"{key}={op.attrs[key]!r}")
    if op.attrs.get("volatile"):
        args.append("volatile=True")
    return f"tl.load({', '.join(args)})"


@_rule("atomic")
def atomic(g, op: Op) -> str:
    ptr, val, mask = op.operands
    args = [g.expr(ptr), g.expr(val)]
    if mask is not None:
        args.append(f"mask={g.expr(mask)}")
    return f"tl.atomic_{op.attrs['kind']}({', '.join(args + _ordering(op))})"


@_rule("atomic_cas")
def atomic_cas(g, op: Op) -> str:
    return f"tl.atomic_cas({', '.join([g.expr(v) for v in op.operands] + _ordering(op))})"


# -- tensor descriptors, written back as descriptors (TMA on Hopper) ------------------------------------
def _int_arg(g, v: Value) -> str:
    """An integer as Triton's descriptor functions take it: they widen it themselves, and read a last
    stride of 1 only as a literal (or an argument Triton compiled in as 1)."""
    while v not in g.ids and v.defining_op is not None and v.defining_op.name == "cast" \
            and v.defining_op.operands[0].type.elem.is_int:
        v = v.defining_op.operands[0]
    d = v.defining_op
    if v not in g.ids and d is not None and d.name == "const":
        return str(int(d.attrs["value"]))
    return g.expr(v)


def ints(g, values) -> str:
    """A list of integers for a descriptor function (offsets, shape, strides)."""
    return f"[{', '.join(_int_arg(g, v) for v in values)}]"


@_rule("make_descriptor")
def make_descriptor(g, op: Op) -> str:
    d = op.result.type.elem
    rank = len(d.block_shape)
    base, shape, strides = op.operands[0], op.operands[1:1 + rank], op.operands[1 + rank:]
    return (f"tl.make_tensor_descriptor({g.expr(base)}, shape={ints(g, shape)}, strides={ints(g, strides)}, "
            f"block_shape={list(d.block_shape)}, padding_option={d.padding!r})")


@_rule("descriptor_load")
def descriptor_load(g, op: Op) -> str:
    return f"{g.expr(op.operands[0])}.load({ints(g, op.operands[1:])})"


def _ordering(op: Op) -> list[str]:
    return [f"{key}={op.attrs[key]!r}" for key in ("sem", "scope") if op.attrs.get(key)]


@_rule("reduce")
def reduce(g, op: Op) -> str:
    kd = ", keep_dims=True" if op.attrs["keep_dims"] else ""
    return f"tl.{op.attrs['kind']}({g.expr(op.operands[0])}, axis={op.attrs['axis']}{kd})"


@_rule("scan")
def scan(g, op: Op) -> str:
    rev = ", reverse=True" if op.attrs["reverse"] else ""
    return f"tl.cum{op.attrs['kind']}({g.expr(op.operands[0])}, axis={op.attrs['axis']}{rev})"


@_rule("sort")
def sort(g, op: Op) -> str:
    desc = ", descending=True" if op.attrs["descending"] else ""
    return f"tl.sort({g.expr(op.operands[0])}, dim={op.attrs['axis']}{desc})"


@_rule("topk")
def topk(g, op: Op) -> str:
    return f"tl.topk({g.expr(op.operands[0])}, {op.attrs['k']}, dim={op.attrs['axis']})"


@_rule("histogram")
def histogram(g, op: Op) -> str:
    x, mask = op.operands
    m = f", mask={g.expr(mask)}" if mask is not None else ""
    return f"tl.histogram({g.expr(x)}, {op.attrs['num_bins']}{m})"


@_rule("inline_asm")
def inline_asm(g, op: Op) -> str:
    a = op.attrs
    args = ", ".join(g.expr(v) for v in op.operands)
    return (f"tl.inline_asm_elementwise({a['asm']!r}, {a['constraints']!r}, [{args}], "
            f"dtype={tl_dtype(op.result.type.elem)}, is_pure={a['is_pure']}, pack={a['pack']})")


@_rule("dot")
def dot(g, op: Op) -> str:
    a = op.attrs
    args = [g.expr(v) for v in op.operands]
    if a.get("input_precision"):
        args.append(f"input_precision={a['input_precision']!r}")
    if a.get("max_num_imprecise_acc"):
        args.append(f"max_num_imprecise_acc={a['max_num_imprecise_acc']}")
    args.append(f"out_dtype={tl_dtype(a['out_dtype'])}")
    return f"tl.dot({', '.join(args)})"
