"""tle.call on TileLang: the raw function's body (rendered by raw_render.py) runs as written, thread by
thread, on shared-memory copies of its argument tiles."""
from __future__ import annotations

import math

from ..ir import ops
from ..ir.core import Op, Trait, Value
from .context import BACKEND, Buffer, Context
from ..raw.bounds import check_bounds
from .raw_cuda import device_function
from .raw_render import Program, render_tilelang_rows
from ..rules import RuleSet
from .syntax import GRID_VARS, loop_indices, parallel_header

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table


@RULE_SET.rule(ops.RAW_CALL, role="statement")
def raw_call(gen: Context, op: Op, indent: int):
    """The copies of the written arguments are the call's results (their other positions keep the
    argument's value). Its threads are the kernel's own; TileLang's thread synchronization pass puts the
    barriers between the copies and the thread-level code."""
    fn, threads, outputs = op.attrs["fn"], tuple(op.attrs["threads"]), tuple(op.attrs["outputs"])
    body = fn.body()
    body.check(BACKEND)
    if getattr(fn, "flagtree", False):
        return flagtree_call(gen, op, body, indent)
    count, kernel_threads = _thread_count(threads), 32 * gen.kernel.num_warps
    if count != kernel_threads:     # the frontend settles num_warps so that they agree; IR built otherwise may not
        gen.error(f"tle.call({fn.name}) with hardware threads {threads}", op,
                  f"on TileLang the raw function's threads are the kernel's threads, and the kernel runs "
                f"{kernel_threads} (32 * num_warps={gen.kernel.num_warps}), not {count}")
    for k, v in enumerate(op.operands):
        if not v.type.shape:
            gen.error(f"tle.call({fn.name}) on a rank-0 tile ('{fn.params[k]}')", op, "pass tiles of rank 1 or more")
    names = []
    for k, v in enumerate(op.operands):
        if k in outputs:               # a fresh copy: the function writes it, the argument stays as it was
            r = op.results[outputs.index(k)]
            name = gen.alloc(r.name or fn.params[k], v.type.shape, v.type.elem, "shared")
            gen.fill(name, v, indent)
        else:
            name = gen.buffer_of(v, indent, "shared").name
        names.append(name)
    tid = gen.ids.fresh("tid")
    gen.let(tid, "T.get_thread_binding(0)", indent)
    thread_vars = [tid]
    if len(threads) > 1:               # axis x varies fastest over the kernel's flat thread index
        thread_vars = []
        for axis, expr in enumerate(_thread_axes(tid, threads)):
            name = gen.ids.fresh(f"{tid}_{'xyz'[axis]}")
            gen.let(name, expr, indent, reads=(tid,))
            thread_vars.append(name)
    prefix = gen.ids.fresh(fn.name) + "_"
    rendered = render_tilelang_rows(body, names, thread_vars=thread_vars, block_dims=list(threads), indent=indent,
                                    prefix=prefix)
    gen.ids.used.update(rendered.defined)
    for row, (level, text) in enumerate(rendered.rows):
        if row in rendered.clauses:
            gen.out.clause(text, level)
        else:       # the rows read the thread variables (lets of this call) the body asks for
            gen.emit(text, level, reads=rendered.threads_read if row == 0 else ())
    for k, r in zip(outputs, op.results):
        gen.buffers[r.id] = Buffer(names[k], tuple(r.type.shape), r.type.elem, "shared", gen.blocks[-1])
    gen.report.append((op.loc.line, "tle.call", "raw", "thread-level code on shared buffers"))
    for k, spec in enumerate(op.attrs.get("layout") or ()):
        order = spec.get("order") if spec else None
        if order is not None and tuple(order) != _row_major(len(order)):
            gen.notes.append(f"line {op.loc.line}: tle.call({fn.name}): the order {list(order)} of "
                             f"'{fn.params[k]}' is a layout hint; TileLang infers shared layouts itself")


TEMPLATES = "#include <tl_templates/cuda/common.h>\n"


def flagtree_call(gen: Context, op: Op, body, indent: int):
    """A tle.raw.dialect function on the program's threads, with CUDA's meaning (its barriers are the
    program's). The compiled program calls it as a CUDA device function (raw_cuda.py) on every thread: TileLang
    then places no barriers of its own inside it, where they could sit in code only some threads run. The
    program the interpreter of TileLang programs runs in its place writes it as thread-level TIR
    (raw_render.py), from the same body (codegen.generate's raw_form)."""
    check_bounds(body, [tuple(v.type.shape) for v in op.operands], 32 * gen.kernel.num_warps, gen.grid)
    if gen.raw_form == "tir":
        return _flagtree_tir(gen, op, body, indent)
    fn, outputs = op.attrs["fn"], tuple(op.attrs["outputs"])
    args, shapes, pointees, copies = [], [], {}, {}
    for k, (v, arg) in enumerate(zip(op.operands, body.args)):
        shapes.append(tuple(v.type.shape))
        if arg.kind == "scalar":
            args.append(gen.scalar(v))
        elif arg.kind == "pointer":
            param, offset = _pointer(gen, op, v, fn.params[k])
            pointees[k] = v.type.elem.elem.name
            args.append(f"T.access_ptr({param}[{offset}], 'rw')")
        else:       # a fresh row-major copy: the function indexes it by itself, whatever layout TileLang chose
            name = gen.alloc(fn.params[k], v.type.shape, v.type.elem, "shared")
            if k in outputs or arg.read:
                gen.fill(name, v, indent)
            copies[k] = name
            args.append(f"T.access_ptr({name}[{', '.join(['0'] * len(v.type.shape))}], 'rw')")
    symbol = gen.ids.fresh(f"tle_raw_{fn.name}")
    gen.import_device_source(TEMPLATES)        # its types (half_t, ...): the source comes before TileLang's includes
    gen.import_device_source(device_function(body, symbol, shapes, pointees))
    gen.emit("T.sync_threads()", indent)          # the copies, seen by every thread
    gen.emit(f"T.evaluate(T.call_extern('int32', {symbol!r}, {', '.join(args)}))", indent)
    gen.emit("T.sync_threads()", indent)          # what the function wrote, seen by every thread
    for k, r in zip(outputs, op.results):      # read out element-wise, so the copy stays row-major
        shared = Buffer(copies[k], tuple(r.type.shape), r.type.elem, "shared", gen.blocks[-1])
        name = gen.alloc(f"{fn.params[k]}_out", r.type.shape, r.type.elem, "fragment")
        idx = loop_indices(len(r.type.shape))
        gen.emit(parallel_header(idx, r.type.shape), indent)
        gen.emit(f"{name}[{', '.join(idx)}] = {shared.at(idx)}", indent + 1)
        gen.buffers[r.id] = Buffer(name, tuple(r.type.shape), r.type.elem, "fragment", gen.blocks[-1])
    gen.report.append((op.loc.line, "tle.raw.call", "raw", f"CUDA device function {symbol} on every thread of "
                                                            "the program, tiles in row-major shared copies"))


def _flagtree_tir(gen: Context, op: Op, body, indent: int):
    """The function as thread-level TIR on the program's threads (the interpreter's form)."""
    fn, outputs = op.attrs["fn"], tuple(op.attrs["outputs"])
    names, values, pointers, shapes = [], {}, {}, []
    for k, (v, arg) in enumerate(zip(op.operands, body.args)):
        shapes.append(tuple(v.type.shape))
        if arg.kind == "scalar":
            values[arg.value] = gen.scalar(v)
            names.append(None)
        elif arg.kind == "pointer":
            param, offset = _pointer(gen, op, v, fn.params[k])
            pointers[arg.value] = (param, offset, v.type.elem.elem.name)
            values[arg.value] = param
            names.append(None)
        elif k in outputs or arg.written:      # written: a fresh copy, the kernel's tile keeps its value
            name = gen.alloc(fn.params[k], v.type.shape, v.type.elem, "shared")
            gen.fill(name, v, indent)
            names.append(name)
        else:
            names.append(gen.buffer_of(v, indent, "shared").name)
    tid = gen.ids.fresh("tid")
    gen.let(tid, "T.get_thread_binding(0)", indent)
    program = Program(shapes, values, pointers, list(GRID_VARS[:len(gen.grid)]), list(gen.grid))
    prefix = gen.ids.fresh(fn.name) + "_"
    rendered = render_tilelang_rows(body, names, thread_vars=[tid], block_dims=[32 * gen.kernel.num_warps],
                                    indent=indent, prefix=prefix, program=program)
    gen.imports_tvm = gen.imports_tvm or rendered.imports_tvm
    gen.ids.used.update(rendered.defined)
    for row, (level, text) in enumerate(rendered.rows):
        if row in rendered.clauses:
            gen.out.clause(text, level)
        else:
            gen.emit(text, level, reads=rendered.threads_read if row == 0 else ())
    for k, r in zip(outputs, op.results):
        gen.buffers[r.id] = Buffer(names[k], tuple(r.type.shape), r.type.elem, "shared", gen.blocks[-1])
    gen.report.append((op.loc.line, "tle.raw.call", "raw", "thread-level code on the program's threads, tiles in "
                                                            "shared copies"))


def _pointer(gen: Context, op: Op, v: Value, param: str) -> tuple[str, str]:
    """(the flat kernel argument, the element offset) of the scalar pointer `v`: an argument plus offsets."""
    root = v
    while root.id not in gen.params:
        d = root.defining_op
        if d is None or not (d.defn is ops.ADDPTR or d.has(Trait.LAYOUT)):
            gen.error(f"tle.raw.call({op.attrs['fn'].name}) with the pointer '{param}'", op,
                      "a pointer passed to a raw function must be a kernel argument plus offsets")
        root = d.operand("ptr") if d.defn is ops.ADDPTR else d.operand("x")
    return gen.ids[gen.params[root.id].value], gen.offset(v, [])


def _thread_count(threads) -> int:
    """The number of threads a tle.call asks for (the product over its thread axes)."""
    return math.prod(int(t) for t in threads)


def _thread_axes(tid: str, threads) -> list[str]:
    """Per thread axis of a tle.call, its index from the flat thread index `tid` (axis x fastest)."""
    out, stride = [], 1
    for axis, t in enumerate(threads):
        e = tid if stride == 1 else f"{tid} // {stride}"
        out.append(e if axis == len(threads) - 1 else f"{e} % {t}" if stride == 1 else f"({e}) % {t}")
        stride *= int(t)
    return out


def _row_major(rank: int) -> tuple[int, ...]:
    """A layout `order` (axes fastest-varying first, as Triton writes it) that is plain row-major."""
    return tuple(reversed(range(rank)))
