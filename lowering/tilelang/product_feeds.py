"""Loads read where they are used: a tile loaded only to be turned, element by element, into a product's operand.

Such a tile (q in `q * exp(g) * scale`, cast to fp32 for a TF32 product) is held by nothing but that expression,
whose result goes to shared memory for the product. As a fragment of its own, TileLang lays it out from the
expression's loop and replicates it across the threads that share a row (each of them loads the whole row, and
only one writes the result: a 4x load and a branch on `tx % 4`). Read inside the expression instead, each
element is loaded once, by the thread that writes it."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Op, Value
from .context import Context
from .gathers import written_arguments
from .row_products import SAME_LAYOUT


def product_feeds(gen: Context) -> set[int]:
    """Ids of the 2-D loads whose one use is an element-wise chain (one use at each step, the same shape, the
    same block) that ends as a product's operand, from an argument nothing in the kernel writes."""
    written = written_arguments(gen)
    out = set()
    for o in gen.kernel.walk():
        if o.defn is ops.LOAD and o.result.type.rank == 2 and not o.attrs.get("is_async") and \
                o.result.id not in gen.index_loads and id(gen.access(o).param) not in written and \
                _feeds_a_product(gen, o, o.result):
            out.add(o.result.id)
    return out


def _feeds_a_product(gen: Context, load: Op, v: Value) -> bool:
    seen = 0
    while seen < 16:
        users = gen.value_users(v)           # through a transpose
        if len(users) != 1 or users[0].parent is not load.parent:
            return False
        (user,) = users
        if user.defn is ops.DOT:
            # an operand a or b, staged in shared memory (a load that is the operand itself is copied there as
            # it is, memory.py); the accumulator is a fragment of the product's own layout
            return seen > 0 and user.operand("acc") is not v
        if user.defn not in SAME_LAYOUT or not user.results or user.result.type.shape != v.type.shape:
            return False
        v, seen = user.result, seen + 1
    return False
