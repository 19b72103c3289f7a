"""Box accesses: the strided view of an argument with its tensor's shape, and the region of it a box
access covers, written with the kernel's own named scalars where they fit (`pid_m * 64`, not the
program id and quotients it was computed from)."""
from __future__ import annotations

from ..analysis.access import Access, BoxPlan, Ranges, plan_box
from ..analysis.affine import Affine
from ..ir.core import Op, Value
from .context import Context
from .syntax import contiguous_strides, tl_dtype


def tensor_map_fits(gen: Context, param_value: Value, elem_bytes: int) -> bool:
    """Can a TMA tensor map describe argument `param_value`: a 16-byte aligned address, the last stride 1 and
    every other stride a multiple of 16 bytes?"""
    a = gen.arg[param_value.id]
    return a.aligned16 and a.strides[-1] == 1 and all(st * elem_bytes % 16 == 0 for st in a.strides[:-1])


def view(gen: Context, param_value: Value) -> str:
    """The name of argument `param_value` seen with its tensor's shape and strides."""
    p = gen.params[param_value.id]
    if p.name in gen.views:
        return gen.views[p.name]
    a = gen.arg[param_value.id]
    name = gen.ids.fresh(p.name + "_v")
    dt = tl_dtype(a.type.elem.elem)
    contiguous = contiguous_strides(a.shape) == tuple(a.strides)
    if contiguous and len(a.shape) == 1:
        gen.views[p.name] = gen.ids[param_value]      # the flat buffer is already this view
        return gen.views[p.name]
    # T.StridedTensor rather than T.view: T.view checks sizes in bits with an int32 and overflows
    # on tensors of 2^31 bits or more
    gen.view_lines.append(f"{name} = T.StridedTensor({tuple(a.shape)!r}, {tuple(a.strides)!r}, {dt!r}, "
                        f"data={gen.ids[param_value]}.data)")
    gen.views[p.name] = name
    return name


def box(gen: Context, op: Op, acc: Access, mask: Value | None, select: bool = False) -> BoxPlan | None:
    """The box region access `op` covers of its argument, or None (the reason is left in acc.reason).
    `select`: the access may be a whole box selected by its mask afterwards (a load's)."""
    if acc.kind != "box" or acc.param is None:
        return None
    a = gen.arg[acc.param.value.id]
    plan, why = plan_box(acc, mask, op.operand("ptr").type.shape, a.shape, a.strides, gen.aff,
                         Ranges(gen.aff, gen.grid), select)
    if plan is None:
        acc.reason = why
    return plan


def region(gen: Context, param_value: Value, plan: BoxPlan) -> str:
    """The region of argument `param_value`'s view that `plan` covers."""
    shape = gen.arg[param_value.id].shape
    parts = []
    for d, extent in zip(plan.dims, shape):
        used: list[Value] = []
        s = affine_expr(gen, d.start, used)
        if any(v.type.elem.bits == 64 for v in used) and extent < 2**31:
            # 64-bit offsets (a block pointer's) into an int32-sized dimension: TileLang's copy refuses a mix
            # of 64- and 32-bit indices, and the box starts inside the dimension
            s = f"T.cast({s}, 'int32')"
        parts.append(s if d.axis is None else f"{s}:{s} + {d.extent}" if s != "0" else f"0:{d.extent}")
    return f"{view(gen, param_value)}[{', '.join(parts)}]"


def affine_expr(gen: Context, f: Affine, used: list | None = None) -> str:
    """Render a scalar affine form, preferring the kernel's own named scalars (pid_m * 64) over
    the program ids and quotients they were computed from. `used` collects the values it names."""
    used = [] if used is None else used
    named = []
    for vid, name in gen.scalars.items():
        form = gen.aff.memo.get(vid)
        if form is not None and form.syms and form.is_scalar_form and not (len(form.syms) == 1 and
                                                                          form.syms[0][1] == 1 and not form.const):
            named.append((name, form, vid))
    named.sort(key=lambda nf: -len(nf[1].syms))
    prefix = []
    for name, form, vid in named:
        sym0, c0 = form.syms[0]
        fc = dict(f.syms).get(sym0)
        if fc is None or fc % c0:
            continue
        k = fc // c0
        if k <= 0:
            continue
        rest = f - form.scale(k)
        if all(s not in dict(rest.syms) for s, _ in form.syms) and \
                len(rest.syms) < len(f.syms):
            gen.out.read(name)
            used.append(gen.aff.values[vid])
            prefix.append(name if k == 1 else f"{name} * {k}")
            f = rest
    terms = list(prefix)
    for sym, c in f.syms:
        v = gen.aff.symbols[sym]
        used.append(v)
        e = gen.scalar(v)
        terms.append(e if c == 1 else f"{e} * {c}")
    if f.const or not terms:
        terms.append(str(f.const))
    return " + ".join(terms)
