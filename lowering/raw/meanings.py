"""What each scalar op of a raw function means, said once for every backend.

An op's `Form` says how its operands combine (an arithmetic operator, a truncating division, a comparison, a
conversion, ...), its meaning which operation of that form it is ("add", "udiv", "exp", "extui", ...).
A backend's renderer writes each form once and spells each meaning in its language
(triton/raw_render.py, tilelang/raw_render.py); neither keeps its own list of MLIR op names.
"""
from __future__ import annotations

from enum import Enum

from .body import MATH_OPS


class Form(str, Enum):
    ARITH = "arith"              # + - * /, on signed integers or floats: add sub mul fdiv
    SIGNED_DIV = "signed_div"    # integer division and remainder truncating toward zero: div rem
    BITWISE = "bitwise"          # and or xor (on i1: logical)
    SHIFT = "shift"              # shl, and shr (arithmetic)
    MINMAX = "minmax"            # max min of signed integers, or of floats taking the number over a NaN
    NAN_MINMAX = "nan_minmax"    # max min of floats, NaN in, NaN out: maximum minimum
    UNSIGNED = "unsigned"        # on the operands' bits read unsigned: udiv urem ushr umax umin
    ROUNDED_DIV = "rounded_div"  # integer division rounding up or down: ceil, floor (signed), uceil (unsigned)
    MATH = "math"                # the math dialect's functions, by their MLIR name: exp, tanh, powf, ...
    NEG = "neg"
    SELECT = "select"
    CMPI = "cmpi"                # a comparison of integers (the predicate says signed or unsigned)
    CMPF = "cmpf"                # a comparison of floats (ordered or unordered)
    CAST = "cast"                # a conversion, by its MLIR name: bitcast, extui, fptoui, ...


MEANINGS: dict[str, tuple[Form, str]] = {
    "arith.addi": (Form.ARITH, "add"), "arith.addf": (Form.ARITH, "add"),
    "arith.subi": (Form.ARITH, "sub"), "arith.subf": (Form.ARITH, "sub"),
    "arith.muli": (Form.ARITH, "mul"), "arith.mulf": (Form.ARITH, "mul"), "arith.divf": (Form.ARITH, "fdiv"),
    "arith.divsi": (Form.SIGNED_DIV, "div"), "arith.remsi": (Form.SIGNED_DIV, "rem"),
    "arith.andi": (Form.BITWISE, "and"), "arith.ori": (Form.BITWISE, "or"), "arith.xori": (Form.BITWISE, "xor"),
    "arith.shli": (Form.SHIFT, "shl"), "arith.shrsi": (Form.SHIFT, "shr"),
    "arith.maxsi": (Form.MINMAX, "max"), "arith.minsi": (Form.MINMAX, "min"),
    "arith.maxnumf": (Form.MINMAX, "max"), "arith.minnumf": (Form.MINMAX, "min"),
    "arith.maximumf": (Form.NAN_MINMAX, "max"), "arith.minimumf": (Form.NAN_MINMAX, "min"),
    "arith.divui": (Form.UNSIGNED, "udiv"), "arith.remui": (Form.UNSIGNED, "urem"),
    "arith.shrui": (Form.UNSIGNED, "ushr"), "arith.maxui": (Form.UNSIGNED, "umax"),
    "arith.minui": (Form.UNSIGNED, "umin"),
    "arith.ceildivsi": (Form.ROUNDED_DIV, "ceil"), "arith.floordivsi": (Form.ROUNDED_DIV, "floor"),
    "arith.ceildivui": (Form.ROUNDED_DIV, "uceil"),
    "arith.negf": (Form.NEG, "neg"), "arith.select": (Form.SELECT, "select"),
    "arith.cmpi": (Form.CMPI, "cmpi"), "arith.cmpf": (Form.CMPF, "cmpf"),
    **{f"arith.{n}": (Form.CAST, n) for n in "index_cast sitofp uitofp fptosi fptoui extf truncf extsi extui trunci "
                                             "bitcast".split()},
    **{op: (Form.MATH, op.split(".")[1]) for op in MATH_OPS},
}
