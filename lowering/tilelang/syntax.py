"""How tile-IR values are spelled in TileLang source: dtype names, literals, the grid's variables, and the
index arithmetic that maps an element of a layout op or a reshape to the element of its operand it reads.

Every rule module writes these; none of them holds codegen state."""
from __future__ import annotations

import re

from ..ir import ops
from ..ir import types as ir_types
from ..ir.core import Op

TL_DTYPE = {"i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
            "u16": "uint16", "u32": "uint32", "u64": "uint64", "fp16": "float16", "bf16": "bfloat16",
            "fp32": "float32", "fp64": "float64", "fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2"}
GRID_VARS = ("bx", "by", "bz")
# names the generated module may not define: they would shadow what T.prim_func's parser looks up
PY_BUILTINS = {"sum", "max", "min", "abs", "range", "len", "int", "float", "bool", "pow", "round", "all", "any"}


def tl_dtype(d: ir_types.DType) -> str:
    return TL_DTYPE[d.name]


def literal(value, dtype: ir_types.DType) -> str:
    name = tl_dtype(dtype)
    if dtype.is_bool:
        return "True" if value else "False"
    if dtype.is_fp8:      # an fp32 constant converted, as Triton makes it (saturating: e4m3 has no infinity)
        return f"T.cast({literal(value, ir_types.fp32)}, {name!r})"
    if dtype.is_float:
        if value in (float("inf"), float("-inf")):
            return f"{'-' if value < 0 else ''}T.infinity({name!r})"
        if value != value:
            return f"T.cast(T.float32(float('nan')), {name!r})" if name != "float32" else "T.float32(float('nan'))"
        text = repr(float(value))
        return text if name == "float32" else f"T.{name}({text})"
    return repr(int(value)) if name == "int32" else f"T.{name}({int(value)})"


_ELEMENT_READ = re.compile(r"[A-Za-z_]\w*\[[^\[\]]*\]")


def copied_value(expr: str, dtype: ir_types.DType) -> str:
    """`expr` as the right side of a copy into a buffer of `dtype`. TileLang 0.1.15 vectorizes a T.Parallel copy
    of one bool buffer's elements into another and then cannot write the vector type (boolx8) in CUDA; a select
    of the element is copied one by one."""
    if dtype.is_bool and _ELEMENT_READ.fullmatch(expr):
        return f"T.if_then_else({expr}, True, False)"
    return expr


def loop_indices(rank: int) -> list[str]:
    """The index variables of a T.Parallel loop over a tile of `rank` axes."""
    return [f"i{d}" for d in range(rank)]


def element(buf: str, idx: list[str]) -> str:
    """Element `idx` of buffer `buf`: `buf[i0, i1]`."""
    return f"{buf}[{', '.join(idx)}]"


def parallel_header(idx: list[str], shape) -> str:
    return f"for {', '.join(idx)} in T.Parallel({', '.join(map(str, shape))}):"


def operand_index(op: Op, idx: list[str]) -> list[str]:
    """For a layout op (splat, broadcast, expand_dims, trans, hint): the index into its operand that element
    `idx` of its result reads."""
    a = op.attrs
    if op.defn is ops.SPLAT:
        return []
    if op.defn is ops.HINT:
        return idx
    if op.defn is ops.BROADCAST:
        src = op.operand("x").type.shape
        off = len(idx) - len(src)
        return [("0" if s == 1 else idx[off + i]) for i, s in enumerate(src)]
    if op.defn is ops.EXPAND_DIMS:
        return idx[:a["axis"]] + idx[a["axis"] + 1:]
    src = [None] * len(a["perm"])          # trans: result axis i is operand axis perm[i]
    for i, p in enumerate(a["perm"]):
        src[p] = idx[i]
    return src


def reindex(idx: list[str], new_shape, old_shape) -> list[str]:
    """For a reshape: the index into the operand (of `old_shape`) that element `idx` of the result reads
    (both row-major)."""
    flat_terms = []
    stride = 1
    for i in reversed(range(len(new_shape))):
        flat_terms.append(idx[i] if stride == 1 else f"{idx[i]} * {stride}")
        stride *= new_shape[i]
    flat = "(" + " + ".join(reversed(flat_terms)) + ")"
    out = []
    stride = 1
    strides = []
    for s in reversed(old_shape):
        strides.append(stride)
        stride *= s
    strides = list(reversed(strides))
    for s, st in zip(old_shape, strides):
        out.append(f"({flat} // {st} % {s})" if st > 1 else f"({flat} % {s})")
    return out


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def mentions(text: str, name: str) -> bool:
    """Does generated `text` read identifier `name` (as a whole word)?"""
    return re.search(rf"\b{re.escape(name)}\b", text) is not None
