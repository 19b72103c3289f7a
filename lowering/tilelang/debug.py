"""tl.device_assert: TileLang's `tl.device_assert_with_msg` builtin, on every element of the condition;
tl.device_print: CUDA's printf, in the format of the lines Triton prints.

Triton keeps a device_assert only when its debug mode is on at the launch (TRITON_DEBUG=1, or
`triton.knobs.runtime.debug`; tle passes no `debug=` of its own) and compiles it away otherwise; its
interpreter never checks one. The TileLang lowering follows the same switch, read when the kernel is lowered
(tle keys its lowerings on it): with debug on, the assertion is written as the builtin called directly
(`T.call_intrin("void", tvm.ir.Op.get("tl.device_assert_with_msg"), cond, msg)`); with it off, nothing.
TileLang's own `T.device_assert` is not used: it writes nothing when CUDA was not found when TileLang was
imported, so the kernel compiled on a machine without a GPU would differ from the one compiled with one.
A failed assertion prints the message and traps the kernel, as Triton's does (the CUDA error is reported at
the next synchronization).

Triton prints one line per element a thread holds, `pid (0, 1, 0) idx ( 3,  7) x: 1.500000`: the program id,
the element's index (each axis padded to the digits of its extent), its prefix (spaced and ended with ': ' by
`tl.device_print`), `(operand n) ` where several tiles are printed, and the value as printf's %f (floats
widened to double), %i / %u (integers widened to 32 bits; %lli / %llu at 64), or 0x%0<n>x with hex=True.
The TileLang lowering calls printf with the same format string and the same values (T.call_extern). A tile is
printed from a shared copy by thread-level code, one element per thread, so that each element prints once
(TileLang would run a T.Parallel loop over a replicated fragment in every thread holding a copy, or one
without a fragment in every thread); Triton prints an element once per thread holding a copy, which the layout
decides. A scalar prints once per thread, as on Triton. The order of the lines is the GPU's."""
from __future__ import annotations

import math
import os

from ..ir import ops
from ..ir import types as ir_types
from ..ir.core import Op, Value
from .context import Context
from ..rules import RuleSet
from .syntax import GRID_VARS, element, loop_indices, parallel_header

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table

_ASSERT = 'T.call_intrin("void", tvm.ir.Op.get("tl.device_assert_with_msg"), {cond}, {msg})'


@RULE_SET.rule(ops.ASSUME, role="statement")
def assume(gen: Context, op: Op, indent: int):
    # TVM's assume intrinsic: its simplifier may use the condition; the CUDA carries no trace of it
    gen.emit(f"T.assume({gen.scalar(op.operand('cond'))})", indent)


@RULE_SET.rule(ops.ASSERT, role="statement")
def device_assert(gen: Context, op: Op, indent: int):
    if not gen.debug:
        return
    cond = op.operand("cond")
    gen.imports_tvm = True
    msg = f"{op.attrs['msg']} (at {os.path.basename(op.loc.file)}:{op.loc.line} in {gen.kernel.name})"
    if cond.type.is_scalar:
        gen.emit(_ASSERT.format(cond=gen.scalar(cond), msg=repr(msg)), indent)
        return
    shape = cond.type.shape
    idx = loop_indices(len(shape))
    gen.emit(parallel_header(idx, shape), indent)
    gen.emit(_ASSERT.format(cond=gen.elem(cond, idx), msg=repr(msg)), indent + 1)


@RULE_SET.rule(ops.PRINT, role="statement")
def device_print(gen: Context, op: Op, indent: int):
    prefix = triton_prefix(op.attrs["prefix"], bool(op.operands))
    pid = [GRID_VARS[a] if a < len(gen.grid) else "0" for a in range(3)]
    head = "pid (%u, %u, %u)"
    if not op.operands:                       # the prefix alone, from every thread
        gen.emit(_printf(f"{head}{prefix}\n", pid), indent)
        return
    for n, v in enumerate(op.operands):
        operand = f"(operand {n}) " if len(op.operands) > 1 else ""
        spec, widen = value_format(gen, v, op)
        if v.type.is_scalar:
            gen.emit(_printf(f"{head} idx (){prefix}{operand}{spec}\n", pid + [widen(gen.scalar(v))]), indent)
            continue
        shape = v.type.shape
        fmt = f"{head} idx ({', '.join(f'%{index_width(d)}u' for d in shape)}){prefix}{operand}{spec}\n"
        buf = gen.buffer_of(v, indent, "shared")
        _each_element_once(gen, shape, lambda idx: _printf(fmt, pid + idx + [widen(element(buf.name, idx))]),
                           indent)


def triton_prefix(prefix: str, has_values: bool) -> str:
    """The prefix as tl.device_print passes it on: ending with ': ' when values follow, and starting with a
    space when longer than two characters."""
    if has_values and not prefix.endswith(" "):
        prefix += " "
    if has_values and not prefix.endswith(": "):
        prefix = prefix[:-1] + ": "
    if len(prefix) > 2 and not prefix.startswith(" "):
        prefix = " " + prefix
    return prefix


def index_width(extent: int) -> int:
    """The digits Triton pads an index of an axis of `extent` elements to: ceil(log10(extent))."""
    return math.ceil(math.log10(extent)) if extent > 0 else 0


def value_format(gen: Context, v: Value, op: Op):
    """(printf conversion, function writing the argument printf is given for an element's TIR expression), as
    Triton formats and widens a value of v's dtype."""
    d, hex = v.type.elem, op.attrs["hex"]
    if not isinstance(d, ir_types.DType):
        gen.error("tl.device_print of a pointer", op, "a TileLang kernel's tensors are buffers, not pointers")
    if d.is_float and not d.is_fp8:
        if d.bits == 64:
            return ("0x%016llx", lambda e: f"T.reinterpret({e}, 'uint64')") if hex else ("%f", lambda e: e)
        if hex:       # printf reads 32 bits of the double it is given: the low half
            return (f"0x%0{d.bits // 4}x", lambda e: f"T.cast(T.reinterpret(T.cast({e}, 'float64'), 'uint64'), "
                                                     f"'uint32')")
        return "%f", lambda e: f"T.cast({e}, 'float64')"
    if d.is_fp8:      # Triton prints an fp8 value's bits as an unsigned integer
        return ("0x%02x" if hex else "%u"), lambda e: f"T.cast(T.reinterpret({e}, 'uint8'), 'uint32')"
    wide = d.bits == 64
    if hex:
        spec = f"0x%0{d.bits // 4}{'ll' if wide else ''}x"
    else:
        spec = "%" + ("ll" if wide else "") + ("i" if d.is_signed else "u")
    if wide or d.bits == 32:
        return spec, lambda e: e
    target = "int32" if d.is_signed else "uint32"         # sign- or zero-extended, as printf takes it
    return spec, lambda e: f"T.cast({e}, {target!r})"


def _printf(fmt: str, args: list[str]) -> str:
    return f"T.call_extern('int32', 'printf', {fmt!r}, {', '.join(args)})"


def _each_element_once(gen: Context, shape, statement, indent: int):
    """`statement(idx)` for every element of a tile of `shape`, each on one thread: element e (row-major) on
    thread e % threads, in step e // threads (the threads of the block, or of the warp group running it)."""
    t, threads = gen.thread()
    count = math.prod(shape)
    steps = -(-count // threads)
    if steps > 1:
        step = gen.ids.fresh("step")
        gen.emit(f"for {step} in T.serial({steps}):", indent)
        indent += 1
        flat = f"({step} * {threads} + {t})"
    else:
        flat = t
    if count % threads:
        gen.emit(f"if {flat} < {count}:", indent)
        indent += 1
    idx, inner = [], 1
    for d in reversed(shape):
        e = flat if inner == 1 else f"{flat} // {inner}"
        idx.append(e if inner * d == count else f"{e} % {d}")
        inner *= d
    gen.emit(statement(idx[::-1]), indent)
