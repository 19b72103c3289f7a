"""Products whose rows stay with one warp: `T.GemmWarpPolicy.FullRow`, and the A operand read from registers.

T.gemm's default policy splits a product's warps over its rows and its columns, so each warp holds part of a
row. Attention computes a softmax along the rows of one product and multiplies the result by the next: split
that way, a row reduction needs the warps to exchange partial rows, and the next product's A operand cannot
be the registers the probabilities are in (their layout is not the one an A operand takes), so it goes
through shared memory. With FullRow each warp holds whole rows of its products; a value computed element by
element from such products is then, in registers, the A operand the next FullRow product takes (TileLang's
register-A form of T.gemm), as TileLang's own attention kernels write it. On the H100 this took the
flash_attention forward at B4 H32 S8192 D128 from 372 to 480 TFLOP/s causal (401 to 530 full), the source edited
by hand before this module.

The decision is made per family of products that share an accumulator (`c = dot(a, b, c)` chains, through
element-wise updates such as a rescale, and through loops: an accumulator carried by a loop or handed from one
loop to the next or to the code after it), since they write one fragment and must agree on its layout. A
family takes FullRow when a member's result is reduced along its rows, (element-wise) feeds a product's A
operand or meets a row vector the kernel loads (a per-row gate broadcast along the columns: that vector's
fragment has one layout, which FullRow products sharing it fix), or when a member reads its A operand from
registers; and only when every member's rows divide among the warps (16 rows per warp). A product reads its
A operand from registers when that operand has 16-bit elements (a TF32 operand's register layout is not the
accumulator's), is computed element-wise from results of FullRow products (row vectors broadcast into it,
constants, index ranges and tiles loaded element by element, such as a score bias, aside) and is not transposed. A tile passed through the branches of an `if` (masks applied to some blocks only) counts as
computed element-wise, and so does a tile a loop carries from a product before it to one in its body (the scores
of the next block of keys, computed a step ahead)."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Op, Value
from ..ir.ops import Trait, ops_of, with_trait

# ops whose result element i is an expression of their same-shaped operands' elements i: a fragment keeps its
# layout through them
SAME_LAYOUT = with_trait(Trait.MAP) - ops_of(ops.ADDPTR)
# operands that bring no layout of their own into such an expression
FREE = ops_of(ops.BROADCAST, ops.SPLAT, ops.CONST, ops.EXPAND_DIMS, ops.ARANGE, ops.REDUCE)
ROWS_PER_WARP = 16


class RowProducts:
    """The FullRow and register-A decisions for the products of one kernel."""

    def __init__(self, kernel, users: dict, warps_of):
        """`warps_of(op)`: the warps that run `op` (the kernel's, or its warp group's)."""
        self.users = users
        self.warps_of = warps_of
        self.dots = [o for o in kernel.walk() if o.defn is ops.DOT]
        self._family = {id(d): id(d) for d in self.dots}
        for d in self.dots:
            for e in self._accumulated_by(d):
                self._union(d, e)
        self._sources = {id(d): self._register_sources(d) for d in self.dots}
        full = {}
        for d in self.dots:
            root = self._find(d)
            full.setdefault(root, [True, False])
            full[root][0] &= self._rows_divide(d)
            full[root][1] |= self._feeds_rows(d)
        # a family reading an A operand from registers takes FullRow too, provided its sources do
        changed = True
        while changed:
            changed = False
            for d in self.dots:
                root = self._find(d)
                if full[root][0] and not full[root][1] and self._register_a(d, full):
                    full[root][1] = changed = True
        self._full = {root: ok and wanted for root, (ok, wanted) in full.items()}

    # -- the decisions ---------------------------------------------------------------------------------------
    def full_row(self, dot: Op) -> bool:
        return self._full.get(self._find(dot), False)

    def register_a(self, dot: Op) -> bool:
        """Does `dot` read its A operand from the registers it was computed in?"""
        srcs = self._sources.get(id(dot))
        # an accumulator's layout is the A operand's for 16-bit elements only (a 32-bit A, TF32, takes another)
        sixteen_bit = dot.operand("a").type.elem.bits == 16
        return bool(srcs) and sixteen_bit and self.full_row(dot) and all(self.full_row(s) for s in srcs)

    # -- families --------------------------------------------------------------------------------------------
    def _find(self, d: Op) -> int:
        k = id(d)
        while self._family[k] != k:
            self._family[k] = self._family[self._family[k]]
            k = self._family[k]
        return k

    def _union(self, a: Op, b: Op):
        self._family[self._find(a)] = self._find(b)

    def _accumulated_by(self, d: Op) -> list[Op]:
        """The products whose accumulator is `d`'s result, through same-layout element-wise updates."""
        return [u for u, v in self._uses(d.result) if u.defn is ops.DOT and u.operand("acc") is v]

    def _uses(self, start: Value):
        """(op, the value it reads) for each use of `start` and of what same-layout element-wise ops make of it
        (those ops themselves walked through, not yielded)."""
        return ((u, v) for u, v, through in self._walk(start) if not through)

    def _walk(self, start: Value):
        """(op, the value it reads, whether the walk goes on through it) for each use of `start` and of what
        same-layout element-wise ops, branches and loops make of it."""
        seen, todo = set(), [start]
        while todo:
            v = todo.pop()
            if v.id in seen:
                continue
            seen.add(v.id)
            for u in self.users.get(v.id, []):
                if u.defn in SAME_LAYOUT and u.results and u.result.type.shape == v.type.shape:
                    yield u, v, True
                    todo.append(u.result)
                elif _branch_results(u, v):
                    todo.extend(_branch_results(u, v))
                else:
                    yield u, v, False

    # -- what each product needs -----------------------------------------------------------------------------
    def _rows_divide(self, d: Op) -> bool:
        shape = d.result.type.shape
        return len(shape) == 2 and shape[0] % (ROWS_PER_WARP * self.warps_of(d)) == 0

    def _feeds_rows(self, d: Op) -> bool:
        """Is `d`'s result, element-wise, reduced along its rows, the A operand of a product, or combined with a
        row vector (a per-row value of the kernel broadcast along the columns)? A row vector's fragment takes one
        layout for the whole kernel, and the row reductions of FullRow products give it theirs."""
        return any((u.defn is ops.REDUCE and u.attrs["axis"] == len(v.type.shape) - 1) or
                   (u.defn is ops.DOT and u.operand("a") is v) for u, v in self._uses(d.result)) or \
            self._meets_row_vector(d.result)

    def _meets_row_vector(self, start: Value) -> bool:
        """Do the same-layout element-wise ops on `start` (and on what they make of it) read a row vector?"""
        return any(through and any(o is not v and _row_vector(o) for o in u.operands)
                   for u, v, through in self._walk(start))

    def _register_sources(self, d: Op) -> list[Op] | None:
        """The products `d`'s A operand is computed from element-wise, or None where it is not such a value
        (a load, a transpose, a value of another layout)."""
        a = d.operand("a")
        shape = a.type.shape
        found, seen, todo = [], set(), [a]
        while todo:
            v = todo.pop()
            if v is None or v.id in seen:
                continue
            seen.add(v.id)
            op = v.defining_op
            if op is None and v.type.shape == shape:
                carried = _carried_from(v)
                if carried is None:
                    return None               # an argument of another kind: its layout is not known here
                todo.extend(carried)          # a loop-carried tile: what starts it and what each step yields
                continue
            if op is None or v.type.shape != shape:
                continue
            if op.defn is ops.DOT:
                found.append(op)
            elif op.defn in SAME_LAYOUT:
                todo.extend(op.operands)
            elif op.defn is ops.IF:
                i = op.results.index(v)
                todo.extend(blk.terminator.operands[i] for blk in op.regions if blk.terminator is not None)
            elif op.defn is ops.LOAD:
                continue                      # a tile loaded element by element takes the layout its use gives it
            elif op.defn not in FREE:
                return None
        return found or None

    def _register_a(self, d: Op, full: dict) -> bool:
        srcs = self._sources.get(id(d))
        if not srcs:
            return False
        for s in srcs:
            ok, wanted = full[self._find(s)]
            if not (ok and wanted):
                return False
        return True


def _carried_from(v: Value) -> list[Value] | None:
    """For a for loop's carried value `v` (its body's argument) that is a product's result both where the loop
    starts it and where its body yields it, those two values; None for any other block argument (a tile carried
    from anything else, a constant weight say, has a layout of its own)."""
    blk = v.owner
    loop = getattr(blk, "parent_op", None)
    if loop is None or loop.defn is not ops.FOR or v not in blk.args[1:]:
        return None
    k = blk.args.index(v) - 1
    ends = [loop.operand_group("inits")[k], blk.terminator.operands[k]]
    return ends if all(e.defining_op is not None and e.defining_op.defn is ops.DOT for e in ends) else None


def _row_vector(v: Value | None) -> bool:
    """Is `v` a per-row vector the kernel loads (through element-wise ops, no reduction among its sources),
    given a unit column axis and broadcast? (Row statistics reduced from a product, as attention's running
    max, take the layout of the product they come from and decide nothing here.)"""
    if v is None or len(v.type.shape) != 2:
        return False
    op = v.defining_op
    while op is not None and op.defn is ops.BROADCAST:
        op = op.operand("x").defining_op
    if op is None or op.defn is not ops.EXPAND_DIMS or op.attrs["axis"] != 1:
        return False
    return _loaded_vector(op.operand("x"))


def _loaded_vector(x: Value) -> bool:
    """Is 1-D `x` computed element-wise from loads alone (index ranges, scalars and constants aside)?"""
    if len(x.type.shape) != 1:
        return False
    loads, todo, seen = 0, [x], set()
    while todo:
        y = todo.pop()
        if y is None or y.id in seen or y.type.is_scalar:
            continue
        seen.add(y.id)
        op = y.defining_op
        if op is None:
            return False
        if op.defn is ops.LOAD:
            loads += 1
        elif op.defn in SAME_LAYOUT or (op.defn in FREE and op.defn is not ops.REDUCE):
            todo.extend(op.operands)
        else:
            return False
    return loads > 0


def _branch_results(u: Op, v: Value) -> list[Value]:
    """Where `v` goes on as the same tile through `u`, a yield or a `for` (same shape), else []:
    - the yield of a branch of an `if`: the if's results that `v` becomes. A tile one branch computes and the
      other passes on keeps its layout through the if, as through an element-wise op;
    - the yield of a `for` body: the loop's results and the next step's carried arguments that `v` becomes;
    - a `for` taking `v` as the initial value of a carried tile: that argument of its body, and its result.
    An accumulator carried over a loop, or from one loop into the next, is one fragment: its layout is one."""
    if u.defn is ops.FOR:
        inits = u.operand_group("inits")
        body = u.regions[0]
        return [x for i, init in enumerate(inits) if init is v
                for x in (body.args[i + 1], u.results[i]) if x.type.shape == v.type.shape]
    block = getattr(u, "parent", None)
    owner = block.parent_op if block is not None else None
    if u.defn is not ops.YIELD or owner is None:
        return []
    if owner.defn is ops.IF:
        return [r for x, r in zip(u.operands, owner.results) if x is v and r.type.shape == v.type.shape]
    if owner.defn is ops.FOR:
        body = owner.regions[0]
        return [y for i, x in enumerate(u.operands) if x is v
                for y in (owner.results[i], body.args[i + 1]) if y.type.shape == v.type.shape]
    return []
