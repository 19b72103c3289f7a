"""Loop inductions: a carried pointer or integer advanced by a loop-invariant step each iteration
(`a_ptrs += BLOCK_K * stride_ak`) is rewritten to `init + i * step`, where i counts iterations.

The loop then no longer carries it, and its address is affine in the loop counter, so the access
analysis can see a box where the program walks a pointer tile through memory.
"""
from __future__ import annotations

from ..ir import types as T
from ..ir.core import Block, KernelIR, Op, Value


class _Emitter:
    def __init__(self, k: KernelIR):
        self.next_id = 1 + max([v.id for op in k.walk() for v in op.results] +
                               [a.id for op in k.walk() for r in op.regions for a in r.args] +
                               [p.value.id for p in k.params] + [0])

    def value(self, type, owner=None, name=None):
        v = Value(self.next_id, type, name, owner)
        self.next_id += 1
        return v

    def op(self, name, operands, result_type, attrs, loc) -> Op:
        return Op(name, operands, [result_type] if result_type else [], attrs, None, loc, new_value=self.value)


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


_PURE = {"const", "program_id", "num_programs", "arange", "splat", "broadcast", "expand_dims", "binary",
         "cmp", "unary", "cast", "trans", "reshape"}


def _hoistable(v: Value, body: Block) -> bool:
    """Is `v` loop-invariant: defined outside the body, or by pure ops over loop-invariant values?"""
    if not _defined_inside(v, body):
        return True
    op = v.defining_op
    if op is None or op.parent is not body or op.name not in _PURE:
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
    if op.name == "addptr" and op.operands[0] is carried:
        inc = op.operands[1]
    elif op.name == "binary" and op.attrs["op"] == "add" and carried in op.operands:
        inc = op.operands[1] if op.operands[0] is carried else op.operands[0]
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
    lo, hi, step, *inits = loop.operands
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
                d = em.op("binary", [counter, lo], iv.type, {"op": "sub"}, loc)
                prologue.append(d)
                counter = d.result
            if not _is_const(step, 1):
                d = em.op("binary", [counter, step], iv.type, {"op": "div"}, loc)
                prologue.append(d)
                counter = d.result
        n = counter
        if n.type.elem != inc.type.elem:
            d = em.op("cast", [n], T.scalar(inc.type.elem), {"dtype": inc.type.elem}, loc)
            prologue.append(d)
            n = d.result
        if inc.type.shape:
            d = em.op("splat", [n], inc.type.with_elem(n.type.elem), {"shape": inc.type.shape}, loc)
            prologue.append(d)
            n = d.result
        mul = em.op("binary", [n, inc], inc.type, {"op": "mul"}, loc)
        prologue.append(mul)
        name = "addptr" if c.type.is_pointer else "binary"
        attrs = {} if c.type.is_pointer else {"op": "add"}
        cur = em.op(name, [init, mul.result], c.type, attrs, loc)
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
    return v.defining_op is not None and v.defining_op.name == "const" and v.defining_op.attrs["value"] == value


def _used_after(k: KernelIR, v: Value) -> bool:
    return any(v in op.operands for op in k.walk())


def rewrite_inductions(k: KernelIR) -> KernelIR:
    """In place; returns the kernel for chaining."""
    em = _Emitter(k)
    loops = [op for op in k.walk() if op.name == "for"]
    for loop in loops:
        _rewrite_for(k, loop, em)
    return k
