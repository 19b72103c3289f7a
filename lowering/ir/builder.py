"""Builds tile-IR ops with their result types inferred.

Shape and dtype rules are Triton's; the frontend makes operands explicit (splat / broadcast / cast)
before calling here, so every op below sees operands whose shapes and dtypes already agree.
"""
from __future__ import annotations

from contextlib import contextmanager

from . import types as T
from .core import Block, IdGen, Loc, Op, UNKNOWN_LOC, Value
from .types import Type

UNARY_FLOAT_ONLY = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "erf", "sin", "cos",
                    "floor", "ceil"}
UNARY_OPS = UNARY_FLOAT_ONLY | {"neg", "abs", "invert", "not"}
BINARY_OPS = {"add", "sub", "mul", "fdiv", "div", "rem", "and", "or", "xor", "shl", "shr",
              "maximum", "minimum", "umulhi"}
CMP_PREDS = {"lt", "le", "gt", "ge", "eq", "ne"}
REDUCE_KINDS = {"sum", "max", "min", "argmax", "argmin"}


class Builder:
    def __init__(self):
        self.ids = IdGen()
        self._blocks: list[Block] = []
        self.loc: Loc = UNKNOWN_LOC
        self.stamp: dict = {}       # attributes every op built now carries (a tle.gpu.warp_group block's)

    # -- insertion points -------------------------------------------------------------------------
    @property
    def block(self) -> Block:
        return self._blocks[-1]

    @contextmanager
    def insert_into(self, block: Block):
        self._blocks.append(block)
        try:
            yield block
        finally:
            self._blocks.pop()

    def new_block(self, arg_types: list[Type], names: list[str | None] | None = None) -> Block:
        names = names or [None] * len(arg_types)
        return Block([self.ids.value(t, None, n) for t, n in zip(arg_types, names)])

    def _op(self, name, operands, result_types, attrs=None, regions=None) -> Op:
        if self.stamp:
            attrs = {**(attrs or {}), **self.stamp}
        op = Op(name, operands, result_types, attrs, regions, self.loc, new_value=self.ids.value)
        self.block.append(op)
        return op

    def _one(self, *a, **k) -> Value:
        return self._op(*a, **k).result

    # -- leaves -----------------------------------------------------------------------------------
    def const(self, value, dtype: T.DType) -> Value:
        if dtype.is_float:
            value = float(value)
        elif dtype.is_bool:
            value = bool(value)
        else:
            value = int(value)
        return self._one("const", [], [T.scalar(dtype)], {"value": value})

    def program_id(self, axis: int) -> Value:
        return self._one("program_id", [], [T.scalar(T.i32)], {"axis": axis})

    def num_programs(self, axis: int) -> Value:
        return self._one("num_programs", [], [T.scalar(T.i32)], {"axis": axis})

    def arange(self, start: int, end: int) -> Value:
        return self._one("arange", [], [T.tile([end - start], T.i32)], {"start": start, "end": end})

    # -- shape ops --------------------------------------------------------------------------------
    def splat(self, x: Value, shape) -> Value:
        assert x.type.is_scalar
        return self._one("splat", [x], [T.tile(shape, x.type.elem)], {"shape": tuple(shape)})

    def broadcast(self, x: Value, shape) -> Value:
        shape = tuple(shape)
        if x.type.shape == shape:
            return x
        if x.type.is_scalar:
            return self.splat(x, shape)
        return self._one("broadcast", [x], [T.tile(shape, x.type.elem)], {"shape": shape})

    def expand_dims(self, x: Value, axis: int) -> Value:
        shape = list(x.type.shape)
        shape.insert(axis, 1)
        return self._one("expand_dims", [x], [T.tile(shape, x.type.elem)], {"axis": axis})

    def reshape(self, x: Value, shape) -> Value:
        return self._one("reshape", [x], [T.tile(shape, x.type.elem)], {"shape": tuple(shape)})

    def join(self, a: Value, b: Value) -> Value:
        return self._one("join", [a, b], [T.tile(tuple(a.type.shape) + (2,), a.type.elem)])

    def split(self, x: Value, half: int) -> Value:
        shape = x.type.shape[:-1]
        return self._one("split", [x], [T.tile(shape, x.type.elem) if shape else T.scalar(x.type.elem)],
                         {"half": half})

    def trans(self, x: Value, perm) -> Value:
        shape = [x.type.shape[p] for p in perm]
        return self._one("trans", [x], [T.tile(shape, x.type.elem)], {"perm": tuple(perm)})

    # -- element-wise -----------------------------------------------------------------------------
    def binary(self, op: str, a: Value, b: Value) -> Value:
        assert op in BINARY_OPS, op
        assert a.type == b.type or (a.type.is_pointer is False and a.type.shape == b.type.shape), (a.type, b.type)
        return self._one("binary", [a, b], [a.type], {"op": op})

    def cmp(self, pred: str, a: Value, b: Value) -> Value:
        assert pred in CMP_PREDS
        return self._one("cmp", [a, b], [a.type.with_elem(T.i1)], {"pred": pred})

    def unary(self, op: str, x: Value) -> Value:
        assert op in UNARY_OPS, op
        return self._one("unary", [x], [x.type], {"op": op})

    def libdevice(self, fn: str, args: list[Value]) -> Value:
        return self._one("libdevice", list(args), [args[0].type], {"fn": fn})

    def cast(self, x: Value, dtype: T.DType, bitcast: bool = False) -> Value:
        if x.type.elem == dtype:
            return x
        attrs = {"dtype": dtype}
        if bitcast:
            attrs["bitcast"] = True
        return self._one("cast", [x], [x.type.with_elem(dtype)], attrs)

    def where(self, cond: Value, x: Value, y: Value) -> Value:
        return self._one("where", [cond, x, y], [x.type])

    def hint(self, kind: str, x: Value, values: tuple[int, ...]) -> Value:
        return self._one("hint", [x], [x.type], {"kind": kind, "values": tuple(values)})

    def addptr(self, ptr: Value, offset: Value) -> Value:
        return self._one("addptr", [ptr, offset], [ptr.type.with_shape(offset.type.shape)])

    # -- memory -----------------------------------------------------------------------------------
    def load(self, ptr: Value, mask: Value | None, other: Value | None, hints: dict) -> Value:
        result = ptr.type.with_elem(ptr.type.elem.elem)
        return self._one("load", [ptr, mask, other], [result], hints)

    def store(self, ptr: Value, value: Value, mask: Value | None, hints: dict) -> Op:
        return self._op("store", [ptr, value, mask], [], hints)

    def atomic(self, kind: str, ptr: Value, value: Value, mask: Value | None, attrs: dict) -> Value:
        return self._one("atomic", [ptr, value, mask], [value.type], {"kind": kind, **attrs})

    def atomic_cas(self, ptr: Value, cmp: Value, value: Value, attrs: dict) -> Value:
        return self._one("atomic_cas", [ptr, cmp, value], [value.type], dict(attrs))

    # -- tensor descriptors -----------------------------------------------------------------------
    def make_descriptor(self, base: Value, shape: list[Value], strides: list[Value], block_shape, padding: str):
        desc = T.DescriptorType(base.type.elem.elem, tuple(block_shape), padding)
        return self._one("make_descriptor", [base, *shape, *strides], [T.scalar(desc)])

    def descriptor_load(self, desc: Value, offsets: list[Value]) -> Value:
        d = desc.type.elem
        return self._one("descriptor_load", [desc, *offsets], [T.tile(d.block_shape, d.elem)])

    def descriptor_store(self, desc: Value, value: Value, offsets: list[Value]) -> Op:
        return self._op("descriptor_store", [desc, value, *offsets], [])

    def descriptor_atomic(self, kind: str, desc: Value, value: Value, offsets: list[Value]) -> Op:
        return self._op("descriptor_atomic", [desc, value, *offsets], [], {"kind": kind})

    # -- tle.gpu buffers --------------------------------------------------------------------------
    def alloc(self, shape, elem: T.DType, space: str, layout) -> Value:
        return self._one("alloc", [], [T.buffer(shape, elem, space)], {"scope": space, "layout": layout})

    def local_load(self, buf: Value) -> Value:
        return self._one("local_load", [buf], [T.tile(buf.type.shape, buf.type.elem)])

    def local_store(self, buf: Value, value: Value) -> Value:
        return self._one("local_store", [buf, value], [buf.type])

    def copy_in(self, ptr: Value, mask: Value | None, other: Value | None, buf: Value) -> Value:
        return self._one("copy_in", [ptr, mask, other, buf], [buf.type])

    def copy_out(self, ptr: Value, buf: Value, mask: Value | None) -> Op:
        return self._op("copy_out", [ptr, buf, mask], [])

    # -- reductions and matrix products ----------------------------------------------------------
    def reduce(self, kind: str, x: Value, axis: int, keep_dims: bool = False) -> Value:
        assert kind in REDUCE_KINDS
        shape = list(x.type.shape)
        if keep_dims:
            shape[axis] = 1
        else:
            del shape[axis]
        elem = T.i32 if kind in ("argmax", "argmin") else x.type.elem
        return self._one("reduce", [x], [Type(tuple(shape), elem)],
                         {"kind": kind, "axis": axis, "keep_dims": keep_dims})

    def scan(self, kind: str, x: Value, axis: int, reverse: bool) -> Value:
        return self._one("scan", [x], [x.type], {"kind": kind, "axis": axis, "reverse": reverse})

    def combine(self, name: str, inputs: list[Value], result_types: list[Type], combine: Block, attrs: dict) -> Op:
        """combine_scan / combine_reduce of the tiles `inputs` with the traced combine function `combine`."""
        return self._op(name, list(inputs), result_types, dict(attrs), [combine])

    def sort(self, x: Value, axis: int, descending: bool) -> Value:
        return self._one("sort", [x], [x.type], {"axis": axis, "descending": descending})

    def topk(self, x: Value, k: int, axis: int) -> Value:
        shape = list(x.type.shape)
        shape[axis] = k
        return self._one("topk", [x], [T.tile(shape, x.type.elem)], {"k": k, "axis": axis})

    def histogram(self, x: Value, mask: Value | None, num_bins: int) -> Value:
        return self._one("histogram", [x, mask], [T.tile([num_bins], T.i32)], {"num_bins": num_bins})

    def inline_asm(self, args: list[Value], result: Type, attrs: dict) -> Value:
        return self._one("inline_asm", list(args), [result], dict(attrs))

    def print_(self, prefix: str, args: list[Value], hex: bool) -> Op:
        return self._op("print", list(args), [], {"prefix": prefix, "hex": hex})

    def assert_(self, cond: Value, msg: str) -> Op:
        return self._op("assert", [cond], [], {"msg": msg})

    def dot(self, a: Value, b: Value, acc: Value, out_dtype: T.DType, attrs: dict) -> Value:
        shape = (a.type.shape[0], b.type.shape[1])
        return self._one("dot", [a, b, acc], [T.tile(shape, out_dtype)], {"out_dtype": out_dtype, **attrs})

    # -- raw functions ----------------------------------------------------------------------------
    def raw_call(self, fn, args: list[Value], outputs, threads, layout) -> Op:
        """tle.call of raw function `fn` on the tiles `args`; one result per written argument (`outputs`:
        their indices), of that argument's type. `layout`: per argument, a dict or None."""
        outputs = tuple(outputs)
        return self._op("raw_call", list(args), [args[k].type for k in outputs],
                        {"fn": fn, "threads": tuple(threads), "layout": tuple(layout), "outputs": outputs})

    # -- control flow -----------------------------------------------------------------------------
    def for_op(self, lower: Value, upper: Value, step: Value, inits: list[Value], body: Block,
               attrs: dict) -> Op:
        return self._op("for", [lower, upper, step, *inits], [v.type for v in inits], attrs, [body])

    def while_op(self, inits: list[Value], before: Block, body: Block) -> Op:
        return self._op("while", list(inits), [v.type for v in inits], {}, [before, body])

    def if_op(self, cond: Value, then_block: Block, else_block: Block, result_types: list[Type]) -> Op:
        return self._op("if", [cond], result_types, {}, [then_block, else_block])

    def yield_(self, values: list[Value]) -> Op:
        return self._op("yield", values, [])
