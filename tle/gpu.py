"""TLE-Struct, `tle.gpu`: explicit on-chip buffers and a pipelined range, inside `@tle.jit` kernels.

    buf = tle.gpu.alloc([BM, BK], dtype=tl.float16, layout=None, scope=tle.gpu.storage_kind.smem)
    tle.gpu.copy(a_ptrs, buf, [BM, BK], mask=..., other=0.0)    # pointer tile -> buffer
    a = tle.gpu.local_load(buf)                                   # buffer -> tile
    tle.gpu.local_store(buf, a * 2)                               # tile -> buffer
    tle.gpu.copy(buf, c_ptrs, [BM, BK], mask=...)                 # buffer -> pointer tile
    for k in tle.gpu.pipeline(0, n, num_stages=2): ...            # a software-pipelined loop
    with tle.gpu.warp_group(1, registers=240): ...                # code one warp group (4 warps) runs
        with tle.gpu.turn(): ...                                  # ...taking turns with the other groups'

A buffer holds a tile; reads see the latest write, on every backend. TileLang places it in shared
memory (T.alloc_shared, T.copy, buffers feeding T.gemm directly); stock Triton has no explicit shared
memory, so there the buffer is a register tile and Triton chooses shared-memory staging itself
(docs/language.md). These functions only have a meaning inside a kernel.

Warp groups give a kernel's code roles. The program means what it means without them: the blocks run in
program order. TileLang gives each warp group its own branch of the block, and the tle.gpu buffers one
group writes and others read become the hand-offs between them, each guarded by a pair of mbarriers
(docs/language.md, "Warp groups").
"""
from __future__ import annotations

import enum

from tle.lowering.frontend import gpu as _impl
from tle.lowering.frontend import register_tle_builtin, register_tle_context, register_tle_range


class storage_kind(enum.Enum):
    """Where a buffer lives. `smem`: shared memory. `tmem` (tensor memory) names a kind no backend here
    supports: alloc with it is an error that says so."""
    smem = "smem"
    tmem = "tmem"


smem = storage_kind.smem


def _outside(name):
    raise RuntimeError(f"tle.gpu.{name} can only be called inside a @tle.jit kernel")


def alloc(shape, dtype, layout=None, scope=storage_kind.smem):
    """A buffer of `shape` and `dtype` in `scope` (its contents undefined until written)."""
    _outside("alloc")


def copy(src, dst, shape, mask=None, other=None):
    """Copy a pointer tile into a buffer, a buffer to a pointer tile, or a buffer into a buffer. `shape` is
    the buffer's; `mask`/`other` mean what they mean for tl.load (and `mask` for tl.store)."""
    _outside("copy")


def local_load(buf):
    """The tile a buffer holds."""
    _outside("local_load")


def local_store(buf, value):
    """Write a tile (converted to the buffer's dtype, broadcast to its shape) into a buffer."""
    _outside("local_store")


class pipeline:
    """`for i in tle.gpu.pipeline(start, stop, step, num_stages=k)`: a loop whose buffer copies the
    backend overlaps with compute over k stages (TileLang's T.Pipelined, Triton's tl.range(num_stages))."""

    def __init__(self, *args, num_stages=None):
        _outside("pipeline")


class warp_group:
    """`with tle.gpu.warp_group(k, registers=None):` the ops inside run on warp group k (warps 4k to 4k+3) on
    a backend that honors it; `registers` asks for that many registers per thread in the group (setmaxnreg).
    A kernel with warp groups launches with num_warps = 4 x their number; tile values pass between groups
    only through tle.gpu buffers."""

    def __init__(self, index, registers=None):
        _outside("warp_group")


class turn:
    """`with tle.gpu.turn():` inside a warp-group block in a loop: the warp groups that have turn blocks run them
    one group at a time, taking turns in group order, each step (a consumer's products while the other runs
    its softmax: FlashAttention 3's ping-pong). Only an order: the program means the same without it.
    `enabled=False` (a constexpr) makes the block a plain one."""

    def __init__(self, enabled=True):
        _outside("turn")


for _fn, _builtin in ((alloc, _impl.alloc), (copy, _impl.copy), (local_load, _impl.local_load),
                      (local_store, _impl.local_store)):
    register_tle_builtin(_fn, _builtin)
register_tle_range(pipeline, _impl.pipeline_attrs)
register_tle_context(warp_group, _impl.warp_group_scope)
register_tle_context(turn, _impl.turn_scope)

__all__ = ["alloc", "copy", "local_load", "local_store", "pipeline", "warp_group", "turn", "storage_kind", "smem"]
