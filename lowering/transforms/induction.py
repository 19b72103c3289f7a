"""Loop inductions: a carried pointer or integer advanced by a loop-invariant step each iteration
(`a_ptrs += BLOCK_K * stride_ak`) is rewritten to `init + i * step`, where i counts iterations.

The loop then no longer carries it, and its address is affine in the loop counter, so the access
analysis can see a box where the program walks a pointer tile through memory.
"""
from __future__ import annotations

from ..ir import ops
from ..ir import types as ir_types
from ..ir.core import Block, KernelIR, Op, Value
from ..ir.ops import BinaryOp, OpDef, Trait, ops_of, with_trait


class _Emitter:
    def __init__(self, k: KernelIR):
        self.next_id = 1 + max([v.id for op in k.walk() for v in op.results] +
                               [a.id for op in k.walk() for r in op.regions for a in r.args] +
                               [p.value.id for p in k.params] + [0])

    def value(self, type, owner=None, name=None):
        v = Value(self.next_id, type, name, owner)
        self.next_id += 1
        return v

    def op(self, defn: OpDef, operands, result_type, attrs, loc) -> Op:
        return Op(defn, operands, [result_type] if result_type else [], attrs, None, loc, new_value=self.value)


def _defined_inside(v: Value, region: Block) -> bool:
    owner = v.owner
    while owner is not None:
        if owner is region:
            return True
        if isinstance(owner, Op):
            owner = owner.parent
        elif isinstance(owner, Block):
            owner = owner.parent_op
        else:
            return False
    return False


# the ops a loop-invariant step may be computed with (they move out of the loop with it): the element-wise ops of
# index arithmetic; where, addptr, join, split, libdevice and hint stay in the loop
_PURE = with_trait(Trait.ELEMENTWISE) - ops_of(ops.WHERE, ops.ADDPTR, ops.JOIN, ops.SPLIT, ops.LIBDEVICE, ops.HINT)


def _hoistable(v: Value, body: Block) -> bool:
    """Is `v` loop-invariant: defined outside the body, or by pure ops over loop-invariant values?"""
    if not _defined_inside(v, body):
        return True
    op = v.defining_op
    if op is None or op.parent is not body or op.defn not in _PURE:
        return False
    return all(o is None or _hoistable(o, body) for o in op.operands)


def _hoist(v: Value, body: Block, loop: Op):
    """Move the pure ops computing loop-invariant `v` out of the body, just before the loop."""
    op = v.defining_op
    if op is None or op.parent is not body:
        return
    for o in op.operands:
        if o is not None:
            _hoist(o, body, loop)
    body.ops.remove(op)
    outer = loop.parent
    outer.ops.insert(outer.ops.index(loop), op)
    op.parent = outer


def _step_of(carried: Value, out: Value, body: Block) -> Value | None:
    op = out.defining_op
    if op is None or op.parent is not body:
        return None
    if op.defn is ops.ADDPTR and op.operand("ptr") is carried:
        inc = op.operand("offset")
    elif op.defn is ops.BINARY and op.attrs["op"] is BinaryOp.ADD and carried in op.operands:
        inc = op.operand("rhs") if op.operand("lhs") is carried else op.operand("lhs")
    else:
        return None
    if not _hoistable(inc, body):
        return None
    _hoist(inc, body, body.parent_op)
    return inc


def _replace_uses(block: Block, old: Value, new: Value):
    for op in block.walk():
        op.operands = [new if v is old else v for v in op.operands]


def _rewrite_for(k: KernelIR, loop: Op, em: _Emitter):
    body = loop.body
    lo, hi, step = loop.operand("lower"), loop.operand("upper"), loop.operand("step")
    inits = loop.operand_group("inits")
    iv, *carried = body.args
    y = body.terminator
    keep = []
    prologue: list[Op] = []
    counter = None
    for j, (c, init, out, res) in enumerate(zip(carried, inits, y.operands, loop.results)):
        inc = _step_of(c, out, body)
        if inc is None or not (c.type.is_pointer or c.type.elem.is_int):
            keep.append(j)
            continue
        if _used_after(k, res):
            keep.append(j)   # its value after the loop is read: leave it carried
            continue
        loc = out.defining_op.loc
        if counter is None:
            counter = iv
            if not _is_const(lo, 0):
                d = em.op(ops.BINARY, [counter, lo], iv.type, {"op": BinaryOp.SUB}, loc)
                prologue.append(d)
                counter = d.result
            if not _is_const(step, 1):
                d = em.op(ops.BINARY, [counter, step], iv.type, {"op": BinaryOp.DIV}, loc)
                prologue.append(d)
                counter = d.result
        n = counter
        if n.type.elem != inc.type.elem:
            d = em.op(ops.CAST, [n], ir_types.scalar(inc.type.elem), {"dtype": inc.type.elem}, loc)
            prologue.append(d)
            n = d.result
        if inc.type.shape:
            d = em.op(ops.SPLAT, [n], inc.type.with_elem(n.type.elem), {"shape": inc.type.shape}, loc)
            prologue.append(d)
            n = d.result
        mul = em.op(ops.BINARY, [n, inc], inc.type, {"op": BinaryOp.MUL}, loc)
        prologue.append(mul)
        defn = ops.ADDPTR if c.type.is_pointer else ops.BINARY
        attrs = {} if c.type.is_pointer else {"op": BinaryOp.ADD}
        cur = em.op(defn, [init, mul.result], c.type, attrs, loc)
        cur.result.name = c.name
        prologue.append(cur)
        _replace_uses(body, c, cur.result)
    if len(keep) == len(carried):
        return
    for p in prologue:
        p.parent = body
    body.ops[0:0] = prologue
    body.args = [iv] + [carried[j] for j in keep]
    loop.operands = [lo, hi, step] + [inits[j] for j in keep]
    y.operands = [y.operands[j] for j in keep]
    loop.results = [loop.results[j] for j in keep]


def _is_const(v: Value, value) -> bool:
    return v.defining_op is not None and v.defining_op.defn is ops.CONST and v.defining_op.attrs["value"] == value


def _used_after(k: KernelIR, v: Value) -> bool:
    return any(v in op.operands for op in k.walk())


def rewrite_inductions(k: KernelIR) -> KernelIR:
    """In place; returns the kernel for chaining."""
    em = _Emitter(k)
    loops = [op for op in k.walk() if op.defn is ops.FOR]
    for loop in loops:
        _rewrite_for(k, loop, em)
    return k
