"""tle.gpu buffer versions: every write to a buffer makes its next version, and TileLang keeps all versions
of one tle.gpu.alloc in its one shared allocation. These find the allocation a version descends from."""
from __future__ import annotations

from ..ir import ops
from ..ir.core import Op, Value
from ..ir.ops import Trait
from .context import Buffer, Context


def root(v: Value) -> Value:
    """The tle.gpu.alloc result that buffer version `v` descends from."""
    while True:
        op = v.defining_op
        if op is None:                                   # a loop's carried version: its init
            blk = v.owner
            loop = blk.parent_op
            v = loop.operand_group("inits")[blk.args.index(v) - 1]
        elif op.defn is ops.ALLOC:
            return v
        elif op.has(Trait.BUFFER_WRITE):               # copy_in, local_store, local_scatter
            v = op.operand("buf")
        elif op.defn is ops.FOR:
            v = op.operand_group("inits")[op.results.index(v)]
        elif op.defn is ops.IF:
            v = op.regions[0].terminator.operands[op.results.index(v)]
        else:
            raise AssertionError(f"buffer version from '{op.name}'")


def same_buffer(gen: Context, versions: list[Value], op: Op, what: str) -> Buffer:
    """The one shared allocation that all `versions` are versions of."""
    roots = {id(root(v)) for v in versions}
    if len(roots) != 1:
        gen.error(f"{what} that stands for different allocations on different paths", op,
                  "TileLang keeps each tle.gpu.alloc in one shared buffer; write the same buffer on every "
                  "path (swap buffers by index, not by rebinding names)")
    return gen.buffers[root(versions[0]).id]
