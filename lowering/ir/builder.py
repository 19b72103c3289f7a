"""Builds tile-IR ops with their result types inferred.

Shape and dtype rules are Triton's; the frontend makes operands explicit (splat / broadcast / cast)
before calling here, so every op below sees operands whose shapes and dtypes already agree.
"""
from __future__ import annotations

from contextlib import contextmanager

from . import ops
from . import types as ir_types
from .core import Block, IdGen, Loc, Op, UNKNOWN_LOC, Value
from .ops import BinaryOp, CmpPred, OpDef, ReduceKind, UnaryOp
from .types import Type


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

    def _op(self, defn: OpDef, operands, result_types, attrs=None, regions=None) -> Op:
        """A new op at the insertion point; its operand count and attributes are checked against `defn`."""
        if self.stamp:
            attrs = {**(attrs or {}), **self.stamp}
        op = Op(defn, operands, result_types, attrs, regions, self.loc, new_value=self.ids.value)
        self.block.append(op)
        return op

    def _one(self, *a, **k) -> Value:
        return self._op(*a, **k).result

    # -- leaves -----------------------------------------------------------------------------------
    def const(self, value, dtype: ir_types.DType) -> Value:
        if dtype.is_float:
            value = float(value)
        elif dtype.is_bool:
            value = bool(value)
        else:
            value = int(value)
        return self._one(ops.CONST, [], [ir_types.scalar(dtype)], {"value": value})

    def program_id(self, axis: int) -> Value:
        return self._one(ops.PROGRAM_ID, [], [ir_types.scalar(ir_types.i32)], {"axis": axis})

    def num_programs(self, axis: int) -> Value:
        return self._one(ops.NUM_PROGRAMS, [], [ir_types.scalar(ir_types.i32)], {"axis": axis})

    def arange(self, start: int, end: int) -> Value:
        return self._one(ops.ARANGE, [], [ir_types.tile([end - start], ir_types.i32)], {"start": start, "end": end})

    # -- shape ops --------------------------------------------------------------------------------
    def splat(self, x: Value, shape) -> Value:
        assert x.type.is_scalar
        return self._one(ops.SPLAT, [x], [ir_types.tile(shape, x.type.elem)], {"shape": tuple(shape)})

    def broadcast(self, x: Value, shape) -> Value:
        shape = tuple(shape)
        if x.type.shape == shape:
            return x
        if x.type.is_scalar:
            return self.splat(x, shape)
        return self._one(ops.BROADCAST, [x], [ir_types.tile(shape, x.type.elem)], {"shape": shape})

    def expand_dims(self, x: Value, axis: int) -> Value:
        shape = list(x.type.shape)
        shape.insert(axis, 1)
        return self._one(ops.EXPAND_DIMS, [x], [ir_types.tile(shape, x.type.elem)], {"axis": axis})

    def reshape(self, x: Value, shape) -> Value:
        return self._one(ops.RESHAPE, [x], [ir_types.tile(shape, x.type.elem)], {"shape": tuple(shape)})

    def join(self, a: Value, b: Value) -> Value:
        return self._one(ops.JOIN, [a, b], [ir_types.tile(tuple(a.type.shape) + (2,), a.type.elem)])

    def split(self, x: Value, half: int) -> Value:
        shape = x.type.shape[:-1]
        return self._one(ops.SPLIT, [x], [ir_types.tile(shape, x.type.elem) if shape else ir_types.scalar(x.type.elem)],
                         {"half": half})

    def trans(self, x: Value, perm) -> Value:
        shape = [x.type.shape[p] for p in perm]
        return self._one(ops.TRANS, [x], [ir_types.tile(shape, x.type.elem)], {"perm": tuple(perm)})

    # -- element-wise -----------------------------------------------------------------------------
    def binary(self, op: BinaryOp | str, a: Value, b: Value) -> Value:
        assert a.type == b.type or (a.type.is_pointer is False and a.type.shape == b.type.shape), (a.type, b.type)
        return self._one(ops.BINARY, [a, b], [a.type], {"op": op})

    def cmp(self, pred: CmpPred | str, a: Value, b: Value) -> Value:
        return self._one(ops.CMP, [a, b], [a.type.with_elem(ir_types.i1)], {"pred": pred})

    def unary(self, op: UnaryOp | str, x: Value) -> Value:
        return self._one(ops.UNARY, [x], [x.type], {"op": op})

    def libdevice(self, fn: str, args: list[Value]) -> Value:
        return self._one(ops.LIBDEVICE, list(args), [args[0].type], {"fn": fn})

    def cast(self, x: Value, dtype: ir_types.DType, bitcast: bool = False) -> Value:
        if x.type.elem == dtype:
            return x
        attrs = {"dtype": dtype}
        if bitcast:
            attrs["bitcast"] = True
        return self._one(ops.CAST, [x], [x.type.with_elem(dtype)], attrs)

    def where(self, cond: Value, x: Value, y: Value) -> Value:
        return self._one(ops.WHERE, [cond, x, y], [x.type])

    def hint(self, kind: str, x: Value, values: tuple[int, ...]) -> Value:
        return self._one(ops.HINT, [x], [x.type], {"kind": kind, "values": tuple(values)})

    def addptr(self, ptr: Value, offset: Value) -> Value:
        return self._one(ops.ADDPTR, [ptr, offset], [ptr.type.with_shape(offset.type.shape)])

    # -- memory -----------------------------------------------------------------------------------
    def load(self, ptr: Value, mask: Value | None, other: Value | None, hints: dict) -> Value:
        result = ptr.type.with_elem(ptr.type.elem.elem)
        return self._one(ops.LOAD, [ptr, mask, other], [result], hints)

    def store(self, ptr: Value, value: Value, mask: Value | None, hints: dict) -> Op:
        return self._op(ops.STORE, [ptr, value, mask], [], hints)

    def atomic(self, kind: str, ptr: Value, value: Value, mask: Value | None, attrs: dict) -> Value:
        return self._one(ops.ATOMIC, [ptr, value, mask], [value.type], {"kind": kind, **attrs})

    def atomic_cas(self, ptr: Value, cmp: Value, value: Value, attrs: dict) -> Value:
        return self._one(ops.ATOMIC_CAS, [ptr, cmp, value], [value.type], dict(attrs))

    # -- tensor descriptors -----------------------------------------------------------------------
    def make_descriptor(self, base: Value, shape: list[Value], strides: list[Value], block_shape, padding: str):
        desc = ir_types.DescriptorType(base.type.elem.elem, tuple(block_shape), padding)
        return self._one(ops.MAKE_DESCRIPTOR, [base, *shape, *strides], [ir_types.scalar(desc)])

    def descriptor_load(self, desc: Value, offsets: list[Value]) -> Value:
        d = desc.type.elem
        return self._one(ops.DESCRIPTOR_LOAD, [desc, *offsets], [ir_types.tile(d.block_shape, d.elem)])

    def descriptor_store(self, desc: Value, value: Value, offsets: list[Value]) -> Op:
        return self._op(ops.DESCRIPTOR_STORE, [desc, value, *offsets], [])

    def descriptor_atomic(self, kind: str, desc: Value, value: Value, offsets: list[Value]) -> Op:
        return self._op(ops.DESCRIPTOR_ATOMIC, [desc, value, *offsets], [], {"kind": kind})

    # -- tle.gpu buffers --------------------------------------------------------------------------
    def alloc(self, shape, elem: ir_types.DType, space: str, layout) -> Value:
        return self._one(ops.ALLOC, [], [ir_types.buffer(shape, elem, space)], {"scope": space, "layout": layout})

    def local_load(self, buf: Value) -> Value:
        return self._one(ops.LOCAL_LOAD, [buf], [ir_types.tile(buf.type.shape, buf.type.elem)])

    def local_gather(self, buf: Value, offsets: Value, mask: Value | None, other: Value | None) -> Value:
        result = ir_types.tile(offsets.type.shape, buf.type.elem)
        return self._one(ops.LOCAL_GATHER, [buf, offsets, mask, other], [result])

    def local_scatter(self, buf: Value, offsets: Value | None, value: Value, mask: Value | None) -> Value:
        return self._one(ops.LOCAL_SCATTER, [buf, offsets, value, mask], [buf.type])

    def local_store(self, buf: Value, value: Value) -> Value:
        return self._one(ops.LOCAL_STORE, [buf, value], [buf.type])

    def copy_in(self, ptr: Value, mask: Value | None, other: Value | None, buf: Value) -> Value:
        return self._one(ops.COPY_IN, [ptr, mask, other, buf], [buf.type])

    def copy_out(self, ptr: Value, buf: Value, mask: Value | None) -> Op:
        return self._op(ops.COPY_OUT, [ptr, buf, mask], [])

    # -- reductions and matrix products ----------------------------------------------------------
    def reduce(self, kind: ReduceKind | str, x: Value, axis: int, keep_dims: bool = False) -> Value:
        kind = ReduceKind(kind)
        shape = list(x.type.shape)
        if keep_dims:
            shape[axis] = 1
        else:
            del shape[axis]
        elem = ir_types.i32 if kind in (ReduceKind.ARGMAX, ReduceKind.ARGMIN) else x.type.elem
        return self._one(ops.REDUCE, [x], [Type(tuple(shape), elem)],
                         {"kind": kind, "axis": axis, "keep_dims": keep_dims})

    def scan(self, kind: str, x: Value, axis: int, reverse: bool) -> Value:
        return self._one(ops.SCAN, [x], [x.type], {"kind": kind, "axis": axis, "reverse": reverse})

    def combine(self, defn: OpDef, inputs: list[Value], result_types: list[Type], combine: Block, attrs: dict) -> Op:
        """combine_scan / combine_reduce of the tiles `inputs` with the traced combine function `combine`."""
        return self._op(defn, list(inputs), result_types, dict(attrs), [combine])

    def sort(self, x: Value, axis: int, descending: bool) -> Value:
        return self._one(ops.SORT, [x], [x.type], {"axis": axis, "descending": descending})

    def gather(self, src: Value, index: Value, axis: int) -> Value:
        return self._one(ops.GATHER, [src, index], [ir_types.tile(index.type.shape, src.type.elem)], {"axis": axis})

    def topk(self, x: Value, k: int, axis: int) -> Value:
        shape = list(x.type.shape)
        shape[axis] = k
        return self._one(ops.TOPK, [x], [ir_types.tile(shape, x.type.elem)], {"k": k, "axis": axis})

    def histogram(self, x: Value, mask: Value | None, num_bins: int) -> Value:
        return self._one(ops.HISTOGRAM, [x, mask], [ir_types.tile([num_bins], ir_types.i32)], {"num_bins": num_bins})

    def inline_asm(self, args: list[Value], result: Type, attrs: dict) -> Value:
        return self._one(ops.INLINE_ASM, list(args), [result], dict(attrs))

    def print_(self, prefix: str, args: list[Value], hex: bool) -> Op:
        return self._op(ops.PRINT, list(args), [], {"prefix": prefix, "hex": hex})

    def assume(self, cond: Value) -> Op:
        return self._op(ops.ASSUME, [cond], [], {})

    def assert_(self, cond: Value, msg: str) -> Op:
        return self._op(ops.ASSERT, [cond], [], {"msg": msg})

    def barrier(self) -> Op:
        return self._op(ops.BARRIER, [], [], {})

    def dot(self, a: Value, b: Value, acc: Value, out_dtype: ir_types.DType, attrs: dict) -> Value:
        shape = (a.type.shape[0], b.type.shape[1])
        return self._one(ops.DOT, [a, b, acc], [ir_types.tile(shape, out_dtype)], {"out_dtype": out_dtype, **attrs})

    # -- raw functions ----------------------------------------------------------------------------
    def raw_call(self, fn, args: list[Value], outputs, threads, layout) -> Op:
        """tle.call of raw function `fn` on the tiles `args`; one result per written argument (`outputs`:
        their indices), of that argument's type. `layout`: per argument, a dict or None."""
        outputs = tuple(outputs)
        return self._op(ops.RAW_CALL, list(args), [args[k].type for k in outputs],
                        {"fn": fn, "threads": tuple(threads), "layout": tuple(layout), "outputs": outputs})

    # -- control flow -----------------------------------------------------------------------------
    def for_op(self, lower: Value, upper: Value, step: Value, inits: list[Value], body: Block,
               attrs: dict) -> Op:
        return self._op(ops.FOR, [lower, upper, step, *inits], [v.type for v in inits], attrs, [body])

    def while_op(self, inits: list[Value], before: Block, body: Block) -> Op:
        return self._op(ops.WHILE, list(inits), [v.type for v in inits], {}, [before, body])

    def if_op(self, cond: Value, then_block: Block, else_block: Block, result_types: list[Type]) -> Op:
        return self._op(ops.IF, [cond], result_types, {}, [then_block, else_block])

    def yield_(self, values: list[Value]) -> Op:
        return self._op(ops.YIELD, values, [])
