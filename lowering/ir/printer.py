"""Textual form of the tile IR: one op per line, nested regions indented, source line at the right.

Value names come from the source variables they were assigned to; unnamed values are numbered. The
form is deterministic, so golden tests can compare it.
"""
from __future__ import annotations

from . import ops
from .core import Block, KernelIR, Op, Value


class _Namer:
    def __init__(self):
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.counter = 0

    def define(self, v: Value) -> str:
        if v.name:
            base = v.name
            name = base
            k = 1
            while name in self.used:
                name = f"{base}.{k}"
                k += 1
        else:
            while str(self.counter) in self.used:
                self.counter += 1
            name = str(self.counter)
            self.counter += 1
        self.used.add(name)
        self.names[v.id] = name
        return "%" + name

    def __call__(self, v: Value | None) -> str:
        if v is None:
            return "none"
        return "%" + self.names.get(v.id, f"?{v.id}")


def _fmt_attr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, tuple):
        return "[" + ", ".join(_fmt_attr(x) for x in v) + "]"
    return str(v)


def _attrs(op: Op, skip=()) -> str:
    items = [(k, v) for k, v in op.attrs.items() if k not in skip and v is not None and v is not False
             and v != ""]
    if not items:
        return ""
    return " {" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in items) + "}"


def _print_block(block: Block, namer: _Namer, indent: int, out: list[str]):
    pad = "  " * indent
    for op in block.ops:
        _print_op(op, namer, indent, pad, out)


def _print_op(op: Op, namer: _Namer, indent: int, pad: str, out: list[str]):
    loc = f"  # line {op.loc.line}" if op.loc.line else ""
    if op.defn is ops.FOR:
        lo, hi, st = op.operand("lower"), op.operand("upper"), op.operand("step")
        inits = op.operand_group("inits")
        iv, *carried = op.body.args
        head = f"{pad}"
        if op.results:
            head += ", ".join(namer.define(r) for r in op.results) + " = "
        head += f"for {namer.define(iv)} = {namer(lo)} to {namer(hi)} step {namer(st)}"
        if carried:
            pairs = ", ".join(f"{namer.define(c)} = {namer(i)}" for c, i in zip(carried, inits))
            head += f" iter_args({pairs})"
        out.append(head + _attrs(op) + " {" + loc)
        _print_block(op.body, namer, indent + 1, out)
        out.append(pad + "}")
        return
    if op.defn is ops.WHILE:
        before, body = op.regions
        head = pad + (", ".join(namer.define(r) for r in op.results) + " = " if op.results else "")
        pairs = ", ".join(f"{namer.define(c)} = {namer(i)}" for c, i in zip(before.args, op.operand_group("inits")))
        out.append(f"{head}while ({pairs}) {{{loc}")
        _print_block(before, namer, indent + 1, out)
        out.append(f"{pad}}} do ({', '.join(namer.define(a) for a in body.args)}) {{")
        _print_block(body, namer, indent + 1, out)
        out.append(pad + "}")
        return
    if op.defn is ops.IF:
        head = pad
        if op.results:
            head += ", ".join(namer.define(r) for r in op.results) + " = "
        out.append(f"{head}if {namer(op.operand('cond'))} {{{loc}")
        _print_block(op.regions[0], namer, indent + 1, out)
        out.append(pad + "} else {")
        _print_block(op.regions[1], namer, indent + 1, out)
        out.append(pad + "}")
        return
    if op.defn is ops.RAW_CALL:
        out.append(pad + _raw_call(op, namer) + loc)
        return
    if op.defn in (ops.COMBINE_SCAN, ops.COMBINE_REDUCE):
        _print_combine(op, namer, indent, pad, loc, out)
        return
    args = []
    names = {at: name for name, at in op.defn.operand_slots(len(op.operands)).items() if isinstance(at, int)}
    for i, v in enumerate(op.operands):
        if v is None:
            continue
        name = names.get(i)
        if i > 0 and name in ("mask", "other", "acc"):
            args.append(f"{name}={namer(v)}")
        elif op.defn is ops.COPY_IN and name == "buf":
            args.append(f"into={namer(v)}")
        else:
            args.append(namer(v))
    kind = op.attrs.get("op") or op.attrs.get("pred") or op.attrs.get("kind")
    opname = f"{op.name}.{kind}" if kind else op.name
    lhs = ", ".join(namer.define(r) for r in op.results)
    lhs = f"{lhs} = " if lhs else ""
    rtype = f" : {op.results[0].type}" if op.results else ""
    text = f"{pad}{lhs}{opname} {', '.join(args)}".rstrip()
    text += _attrs(op, skip=("op", "pred", "kind")) + rtype
    out.append(text + loc)


def _print_combine(op: Op, namer: _Namer, indent: int, pad: str, loc: str, out: list[str]):
    """`%s, %i = combine_scan %x, %idx {axis=0, fn=f} : types combine(%a, %ia, %b, %ib) {` then the
    combine function's body and `}`."""
    region = op.regions[0]
    args = ", ".join(namer(v) for v in op.operands)
    lhs = ", ".join(namer.define(r) for r in op.results)
    types = ", ".join(str(r.type) for r in op.results)
    params = ", ".join(namer.define(a) for a in region.args)
    out.append(f"{pad}{lhs} = {op.name} {args}{_attrs(op)} : {types} combine({params}) {{{loc}")
    _print_block(region, namer, indent + 1, out)
    out.append(pad + "}")


def _raw_call(op: Op, namer: _Namer) -> str:
    """`%out = raw_call @fn(%x, %y, %output) threads=(1024,) layout={...} : type`"""
    a = op.attrs
    lhs = ", ".join(namer.define(r) for r in op.results)
    text = f"{lhs} = " if lhs else ""
    threads = "(" + ", ".join(map(str, a["threads"])) + ("," if len(a["threads"]) == 1 else "") + ")"
    if not a["threads"]:            # a tle.raw.dialect function: the program's own threads
        threads = "program"
    text += f"raw_call @{a['fn'].name}({', '.join(namer(v) for v in op.operands)}) threads={threads}"
    params = a["fn"].params
    layout = []
    for p, spec in zip(params, a.get("layout") or ()):
        if spec is not None:
            order = "" if spec.get("order") is None else f" order={list(spec['order'])}"
            layout.append(f"{p}: {spec['space']}{order}")
    if layout:
        text += " layout={" + ", ".join(layout) + "}"
    if op.results:
        text += " : " + ", ".join(str(r.type) for r in op.results)
    return text


def print_kernel(k: KernelIR) -> str:
    namer = _Namer()
    params = ", ".join(f"{namer.define(p.value)}: {p.value.type}" for p in k.params)
    out = [f"kernel {k.name}({params})"]
    if k.constexprs:
        out.append("  constexprs {" + ", ".join(f"{n}={v!r}" for n, v in k.constexprs.items()) + "}")
    out.append(f"  launch {{num_warps={k.num_warps}, num_stages={k.num_stages}}}")
    out.append("{")
    _print_block(k.body, namer, 1, out)
    out.append("}")
    return "\n".join(out)
