"""tle.gpu buffer versions: every write to a buffer makes its next version, and TileLang keeps all versions
of one tle.gpu.alloc in its one shared allocation. These find the allocation a version descends from."""
from __future__ import annotations

from ..ir.core import Op, Value
from .context import Buffer, Context


def root(v: Value) -> Value:
    """The tle.gpu.alloc result that buffer version `v` descends from."""
    while True:
        op = v.defining_op
        if op is None:                                   # a loop's carried version: its init
            blk = v.owner
            loop = blk.parent_op
            v = loop.operands[3 + blk.args.index(v) - 1]
        elif op.name == "alloc":
            return v
        elif op.name == "copy_in":
            v = op.operands[3]
        elif op.name == "local_store":
            v = op.operands[0]
        elif op.name == "for":
            v = op.operands[3 + op.results.index(v)]
        elif op.name == "if":
            v = op.regions[0].terminator.operands[op.results.index(v)]
        else:
            raise AssertionError(f"buffer version from '{op.name}'")


def same_buffer(g: Context, versions: list[Value], op: Op, what: str) -> Buffer:
    """The one shared allocation that all `versions` are versions of."""
    roots = {id(root(v)) for v in versions}
    if len(roots) != 1:
        g.error(f"{what} that stands for different allocations on different paths", op,
                "TileLang keeps each tle.gpu.alloc in one shared buffer; write the same buffer on every "
                "path (swap buffers by index, not by rebinding names)")
    return g.buffers[root(versions[0]).id]
