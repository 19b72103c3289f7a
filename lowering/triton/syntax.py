"""The pieces of Triton's syntax the generated source is written with: dtype names, operators and their
precedence, literals and constant tiles."""
from __future__ import annotations

from ..ir import types as ir_types
from ..ir.ops import BinaryOp, CmpPred, UnaryOp

TL_DTYPE = {"i1": "tl.int1", "i8": "tl.int8", "i16": "tl.int16", "i32": "tl.int32", "i64": "tl.int64",
            "u8": "tl.uint8", "u16": "tl.uint16", "u32": "tl.uint32", "u64": "tl.uint64",
            "fp16": "tl.float16", "bf16": "tl.bfloat16", "fp32": "tl.float32", "fp64": "tl.float64",
            "fp8e4nv": "tl.float8e4nv", "fp8e5": "tl.float8e5"}
BIN = {BinaryOp.ADD: "+", BinaryOp.SUB: "-", BinaryOp.MUL: "*", BinaryOp.FDIV: "/", BinaryOp.DIV: "//",
       BinaryOp.REM: "%", BinaryOp.AND: "&", BinaryOp.OR: "|", BinaryOp.XOR: "^", BinaryOp.SHL: "<<",
       BinaryOp.SHR: ">>"}
CMP = {CmpPred.LT: "<", CmpPred.LE: "<=", CmpPred.GT: ">", CmpPred.GE: ">=", CmpPred.EQ: "==", CmpPred.NE: "!="}
MATH = {UnaryOp.EXP: "tl.exp", UnaryOp.EXP2: "tl.exp2", UnaryOp.LOG: "tl.log", UnaryOp.LOG2: "tl.log2",
        UnaryOp.SQRT: "tl.sqrt", UnaryOp.RSQRT: "tl.rsqrt", UnaryOp.SIGMOID: "tl.sigmoid", UnaryOp.ABS: "tl.abs",
        UnaryOp.ERF: "tl.erf", UnaryOp.SIN: "tl.sin", UnaryOp.COS: "tl.cos", UnaryOp.FLOOR: "tl.floor",
        UnaryOp.CEIL: "tl.ceil"}
# Python precedence of an operator (higher binds tighter)
PREC = {"|": 1, "^": 2, "&": 3, "<<": 4, ">>": 4, "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6,
        "unary": 7, "<": 0.5, "<=": 0.5, ">": 0.5, ">=": 0.5, "==": 0.5, "!=": 0.5}


def tl_dtype(d: ir_types.DType) -> str:
    return TL_DTYPE[d.name]


def literal(value, dtype: ir_types.DType) -> str:
    if dtype.is_bool:
        return "True" if value else "False"
    if dtype.is_float:
        if value != value:
            return "float('nan')"
        if value in (float("inf"), float("-inf")):
            return f"float('{'-' if value < 0 else ''}inf')"
        return repr(float(value))
    return repr(int(value))


def full(shape: list, value, dtype: ir_types.DType) -> str:
    """A constant tile. bf16 and fp8 constants are made in fp32 and converted (the same value after
    rounding): Triton's interpreter cannot build bf16 constants, and Triton none of fp8 but zero."""
    if dtype.name == "bf16" or dtype.is_fp8:
        return f"tl.full({shape}, {literal(value, dtype)}, tl.float32).to({tl_dtype(dtype)})"
    return f"tl.full({shape}, {literal(value, dtype)}, {tl_dtype(dtype)})"
