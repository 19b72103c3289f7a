"""`tl.inline_asm_elementwise` on TileLang: the PTX runs element by element over the tile, as in Triton, from
a device function of the kernel's CUDA source that carries it in `asm(...)` with the same constraints.

Each op gets its own function (T.import_source), called with T.call_extern for every element in a T.Parallel
loop: `__device__ __forceinline__ float tle_asm(float a0) { float r; asm("...": "=f"(r) : "f"(a0)); return r; }`.
Triton's `$N` operand references become CUDA's `%N`, and a literal `%` (a PTX register name) `%%`. The asm is
`volatile` unless the kernel says it is pure. Operands and the result travel as 32- or 64-bit values: an asm
of `pack` > 1 elements (Triton packs several narrow elements into one register) is refused with that reason.
"""
from __future__ import annotations

import re

from ..ir import ops
from ..ir import types as ir_types
from ..ir.core import Op
from ..rules import RuleSet
from .context import Buffer, Context
from .syntax import element, loop_indices, parallel_header, tl_dtype

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table

# the C type of an operand or result, by the IR's dtype name, and its size in bytes
C_TYPES = {"fp32": ("float", 4), "fp64": ("double", 8), "i32": ("int", 4), "u32": ("unsigned int", 4),
           "i64": ("long long", 8), "u64": ("unsigned long long", 8)}
# the register a constraint letter names: its C type and size (an element of another type of that size is
# passed through it bit for bit, as Triton's LLVM bitcasts it)
REGISTERS = {"r": ("unsigned int", 4), "l": ("unsigned long long", 8), "f": ("float", 4), "d": ("double", 8)}


def cuda_asm_text(asm: str) -> str:
    """Triton's asm text as CUDA's asm() takes it: `%` doubled, `$N` as `%N`."""
    return re.sub(r"\$(\d+)", r"%\1", asm.replace("%", "%%"))


def c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def device_function(name: str, asm: str, constraints: list[str], result: str, params: list[str],
                    volatile: bool) -> str:
    """The CUDA text of the function running `asm` once: result `result` (a C type), one parameter per type
    in `params`, `constraints` as Triton gives them (the output's first); each value moved bit for bit into the
    register type its constraint letter names (memcpy)."""
    out, ins = constraints[0], constraints[1:]
    args = ", ".join(f"{t} a{i}" for i, t in enumerate(params))
    lines = [f"__device__ __forceinline__ {result} {name}({args}) {{"]
    for i, c in enumerate(ins):
        reg = REGISTERS[c][0]
        lines.append(f"  {reg} x{i}; memcpy(&x{i}, &a{i}, sizeof(x{i}));")
    reg = REGISTERS[out.lstrip("=")][0]
    inputs = ", ".join(f'"{c}"(x{i})' for i, c in enumerate(ins))
    lines += [f"  {reg} y;",
              f"  asm{' volatile' if volatile else ''}({c_string(cuda_asm_text(asm))} : \"{out}\"(y) : {inputs});",
              f"  {result} r; memcpy(&r, &y, sizeof(r));", "  return r;", "}", ""]
    return "\n".join(lines)


def _c_type(gen: Context, op: Op, dtype: ir_types.DType, constraint: str, what: str) -> str:
    """The C type of an operand or result of `dtype`, checked against its constraint's register."""
    t = C_TYPES.get(dtype.name)
    if t is None:
        gen.error(f"tl.inline_asm_elementwise with a {dtype} {what}", op,
                  f"TileLang's lowering passes operands and results as 32- or 64-bit registers "
                  f"({', '.join(C_TYPES)}); Triton packs narrower ones several to a register")
    reg = REGISTERS.get(constraint.lstrip("="))
    if reg is None:
        gen.error(f"tl.inline_asm_elementwise constraint {constraint!r}", op,
                  f"TileLang's lowering passes values in registers named by {', '.join(REGISTERS)}")
    if reg[1] != t[1]:
        gen.error(f"tl.inline_asm_elementwise: a {dtype} {what} in a {constraint!r} register", op,
                  f"the register holds {reg[1]} bytes, the value {t[1]}")
    return t[0]


@RULE_SET.rule(ops.INLINE_ASM, role="statement")
def inline_asm(gen: Context, op: Op, indent: int):
    constraints = [c.strip() for c in op.attrs["constraints"].split(",")]
    if len(constraints) != len(op.operands) + 1 or not constraints[0].startswith("=") or \
            any(c.startswith("=") for c in constraints[1:]):
        gen.error("tl.inline_asm_elementwise", op, f"constraints {op.attrs['constraints']!r}: one output ('=...') "
                  f"then one input per argument ({len(op.operands)}) are what TileLang's lowering passes")
    v = op.result
    result = _c_type(gen, op, v.type.elem, constraints[0], "result")
    params = [_c_type(gen, op, a.type.elem, c, "operand") for a, c in zip(op.operands, constraints[1:])]
    name = gen.ids.fresh("tle_asm")
    source = device_function(name, op.attrs["asm"], constraints, result, params, not op.attrs["is_pure"])
    gen.import_device_source(source)
    dtype = tl_dtype(v.type.elem)
    if v.type.is_scalar:
        call = f"T.call_extern({dtype!r}, {name!r}, {', '.join(gen.elem(a, []) for a in op.operands)})"
        local = gen.ids.fresh(v.name or "asm")
        gen.let(local, call, indent)
        gen.scalars[v.id] = local
        return
    out = gen.alloc(v.name or "asm", v.type.shape, v.type.elem, "fragment")
    idx = loop_indices(len(v.type.shape))
    gen.emit(parallel_header(idx, v.type.shape) + f"  # the asm once per element ({name})", indent)
    args = ", ".join(gen.elem(a, idx) for a in op.operands)
    gen.emit(f"{element(out, idx)} = T.call_extern({dtype!r}, {name!r}, {args})", indent + 1)
    gen.buffers[v.id] = Buffer(out, tuple(v.type.shape), v.type.elem, "fragment", gen.blocks[-1])
