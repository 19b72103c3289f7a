"""Loop guards as loop bounds: a loop whose whole body is `if iv * c <= X: ...` (X loop-invariant,
c > 0, the else branch leaving every carried value unchanged) does nothing once the guard turns false,
and the guard can only turn false once. The loop is rewritten to stop there:

    for ck in range(NK):                  for ck in range(min(NK, (max(X, -1) + c) // c)):
        if ck * c <= X:          ==>          body
            body

This keeps the program's meaning and leaves a loop with no branch in it, which both backends can
pipeline (Triton's pipeliner does not reach loads inside a branch; TileLang copies every carried tile
at the end of each branch).
"""
from __future__ import annotations

from ..ir import ops
from ..ir import types as ir_types
from ..ir.core import Block, KernelIR, Op, Value
from ..ir.ops import BinaryOp, CmpPred, Trait, ops_of, with_trait
from .induction import _Emitter, _defined_inside, _is_const, _replace_uses

_FLIP = {CmpPred.GE: CmpPred.LE, CmpPred.GT: CmpPred.LT}


def _lost_when_skipped(op: Op) -> bool:
    """Whether a step the bound skips would lose what `op` does beside the branch: an effect other than reading
    memory or making a buffer's next version (whose results the skipped steps would not use), such as a store,
    an atomic, a copy to global memory, a print or a raw call."""
    return op.defn.has_effect and not (op.has(Trait.READS) or op.has(Trait.BUFFER_WRITE))


def _scaled_iv(v: Value, iv: Value) -> int | None:
    """c when v is iv * c (or c * iv, or iv itself) with a constant c > 0."""
    if v is iv:
        return 1
    op = v.defining_op
    if op is None or op.defn is not ops.BINARY or op.attrs["op"] is not BinaryOp.MUL:
        return None
    a, b = op.operand("lhs"), op.operand("rhs")
    if a is iv and b.defining_op is not None and b.defining_op.defn is ops.CONST:
        c = b.defining_op.attrs["value"]
    elif b is iv and a.defining_op is not None and a.defining_op.defn is ops.CONST:
        c = a.defining_op.attrs["value"]
    else:
        return None
    return c if isinstance(c, int) and c > 0 else None


def _guard(cond: Value, iv: Value, body: Block):
    """(c, X, strict) for a guard `iv * c <= X` (strict: `<`), else None."""
    op = cond.defining_op
    if op is None or op.defn is not ops.CMP or not cond.type.is_scalar:
        return None
    pred, lhs, rhs = op.attrs["pred"], op.operand("lhs"), op.operand("rhs")
    if pred in _FLIP:
        pred, lhs, rhs = _FLIP[pred], rhs, lhs
    if pred not in (CmpPred.LE, CmpPred.LT):
        return None
    c = _scaled_iv(lhs, iv)
    if c is None or _defined_inside(rhs, body) or not rhs.type.elem.is_int or rhs.type.elem.bits > 32:
        return None
    return c, rhs, pred is CmpPred.LT


def match_guard(loop: Op):
    """(the guarding if, c, X, strict) when `loop` has the guarded form described above, else None."""
    body = loop.body
    lo, step = loop.operand("lower"), loop.operand("step")
    iv, *carried = body.args
    if not (_is_const(lo, 0) or (lo.defining_op is not None and lo.defining_op.defn is ops.CONST
                                  and lo.defining_op.attrs["value"] >= 0)):
        return None
    if not (step.defining_op is not None and step.defining_op.defn is ops.CONST
            and step.defining_op.attrs["value"] > 0):
        return None
    ifs = [o for o in body.ops if o.defn is ops.IF]
    y = body.terminator
    if len(ifs) != 1 or y is None or any(o.regions for o in body.ops if o is not ifs[0]):
        return None
    guard = ifs[0]
    # the branch must be the last statement, the loop yielding exactly its results
    if len(body.ops) < 2 or body.ops[-2] is not guard or list(y.operands) != list(guard.results):
        return None
    then_blk, else_blk = guard.regions
    if any(o.defn is not ops.YIELD for o in else_blk.ops) or \
            list(else_blk.terminator.operands if else_blk.terminator else []) != list(carried):
        return None
    if any(_lost_when_skipped(o) for o in body.ops if o is not guard):
        return None
    g = _guard(guard.operand("cond"), iv, body)
    if g is None:
        return None
    return (guard, *g)


def _rewrite(loop: Op, em: _Emitter) -> bool:
    m = match_guard(loop)
    if m is None:
        return False
    guard, c, x, strict = m
    body = loop.body
    lo, hi, step = loop.operand("lower"), loop.operand("upper"), loop.operand("step")
    inits = loop.operand_group("inits")
    iv, *carried = body.args
    then_blk = guard.regions[0]
    loc = guard.loc
    i32 = ir_types.scalar(ir_types.i32)
    pre: list[Op] = []

    def emit(defn, operands, attrs, type=i32):
        op = em.op(defn, operands, type, attrs, loc)
        pre.append(op)
        return op.result

    def const(v):
        return emit(ops.CONST, [], {"value": v})

    if x.type.elem != ir_types.i32:
        x = emit(ops.CAST, [x], {"dtype": ir_types.i32})
    if strict:
        x = emit(ops.BINARY, [x, const(1)], {"op": BinaryOp.SUB})
    # the first iteration where the guard is false: floor(X / c) + 1, or 0 when X < 0
    x = emit(ops.BINARY, [x, const(-1)], {"op": BinaryOp.MAXIMUM})
    stop = emit(ops.BINARY, [emit(ops.BINARY, [x, const(c)], {"op": BinaryOp.ADD}), const(c)], {"op": BinaryOp.DIV})
    stop.name = "stop"
    if hi.type.elem != ir_types.i32:
        hi = emit(ops.CAST, [hi], {"dtype": ir_types.i32})
    new_hi = emit(ops.BINARY, [hi, stop], {"op": BinaryOp.MINIMUM})
    outer = loop.parent
    at = outer.ops.index(loop)
    for p in pre:
        p.parent = outer
    outer.ops[at:at] = pre
    loop.operands = [lo, new_hi, step, *inits]
    # splice the branch body into the loop
    then_y = then_blk.terminator
    moved = [o for o in then_blk.ops if o is not then_y]
    for o in moved:
        o.parent = body
    idx = body.ops.index(guard)
    body.ops[idx:idx + 1] = moved
    for r, v in zip(guard.results, then_y.operands if then_y else []):
        _replace_uses(body, r, v)
    _drop_unused(body, guard.operand("cond"))
    return True


def _drop_unused(body: Block, v: Value):
    """Remove the now-unused pure op defining v (and its now-unused operands) from the body."""
    op = v.defining_op
    if op is None or op.parent is not body or op.regions or op.defn.has_effect:
        return
    if any(v in o.operands for o in body.walk()):
        return
    body.ops.remove(op)
    for o in op.operands:
        if o is not None:
            _drop_unused(body, o)


def bound_guarded_loops(k: KernelIR) -> KernelIR:
    """In place; returns the kernel for chaining."""
    em = _Emitter(k)
    for loop in [op for op in k.walk() if op.defn is ops.FOR]:
        _rewrite(loop, em)
    return k


# the reads that move in front of the branch, masked by the guard: through a pointer tile, with a mask (tl.load,
# tle.gpu.copy into a buffer)
_READS = with_trait(Trait.READS) & with_trait(Trait.MEMORY)
# what may move with them: the element-wise ops of their addresses and masks (join, split, libdevice and hint stay
# in the branch)
_HOISTABLE = (with_trait(Trait.ELEMENTWISE) - ops_of(ops.JOIN, ops.SPLIT, ops.LIBDEVICE, ops.HINT)) | _READS


def _copy_hoistable(op: Op, loop: Op, guard: Op, k: KernelIR) -> bool:
    """A tle.gpu.copy at the head of the branch may move in front of it when the version it overwrites
    comes from outside the branch and nothing can see the buffer once the guard is false: the loop's
    final version of it is not read after the loop (later iterations only take the else branch)."""
    buf = op.operand("buf")
    if _defined_inside(buf, guard.regions[0]):
        return False
    body = loop.body
    if buf in body.args:
        res = loop.results[body.args.index(buf) - 1]
        if any(res in o.operands for o in k.walk()):
            return False
    return True


def hoist_guarded_loads(k: KernelIR) -> KernelIR:
    """For a loop of the guarded form: move the loads and tle.gpu copies at the head of the branch (and
    the pure ops they need) in front of it, each masked by the guard as well. A masked-off load reads nothing, and their
    values are only used inside the branch, so the meaning is unchanged; a pipeliner can then issue
    them ahead while the branch keeps only computation. For backends that cannot pipeline a loop of
    dynamic length (see bound_guarded_loops for the alternative)."""
    em = _Emitter(k)
    for loop in [op for op in k.walk() if op.defn is ops.FOR]:
        m = match_guard(loop)
        if m is None:
            continue
        guard = m[0]
        then_blk = guard.regions[0]
        cond = guard.operand("cond")
        moved = []
        for o in then_blk.ops:
            if o.defn is ops.YIELD or o.defn not in _HOISTABLE or o.regions or \
                    (o.defn is ops.COPY_IN and not _copy_hoistable(o, loop, guard, k)):
                break
            moved.append(o)
        # keep only the loads and copies and what they need
        need, keep = set(), []
        for o in reversed(moved):
            if o.defn in _READS or any(r.id in need for r in o.results):
                keep.append(o)
                # (a copy's buffer operand is the version it overwrites, defined outside the branch)
                overwritten = o.operand("buf") if o.has(Trait.BUFFER_WRITE) else None
                need.update(v.id for v in o.operands if v is not None and v is not overwritten)
        keep.reverse()
        if not any(o.defn in _READS for o in keep):
            continue
        body = loop.body
        at = body.ops.index(guard)
        new_ops = []
        for o in keep:
            then_blk.ops.remove(o)
            o.parent = body
            new_ops.append(o)
            if o.defn is ops.COPY_IN:
                # the else branch now hands on the copied version (unseen: see _copy_hoistable)
                else_y = guard.regions[1].terminator
                if else_y is not None:
                    buf = o.operand("buf")
                    else_y.operands = [o.result if v is buf else v for v in else_y.operands]
            if o.defn in _READS:
                mask = o.operand("mask")
                shape = o.operand("ptr").type.shape
                g = cond
                if shape:
                    sp = em.op(ops.SPLAT, [cond], cond.type.with_shape(shape), {"shape": shape}, o.loc)
                    sp.parent = body
                    new_ops.insert(len(new_ops) - 1, sp)
                    g = sp.result
                if mask is None:
                    o.set_operand("mask", g)
                else:
                    a = em.op(ops.BINARY, [mask, g], mask.type, {"op": BinaryOp.AND}, o.loc)
                    a.parent = body
                    new_ops.insert(len(new_ops) - 1, a)
                    o.set_operand("mask", a.result)
        body.ops[at:at] = new_ops
    return k
