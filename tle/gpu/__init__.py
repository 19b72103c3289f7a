"""TLE-Struct, `tle.gpu`: explicit on-chip buffers and a pipelined range, inside `@tle.jit` kernels.

    buf = tle.gpu.alloc([BM, BK], dtype=tl.float16, layout=None, scope=tle.gpu.smem)
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

FlagTree's spellings are the same functions: `scope` (`storage_kind`), `smem`/`tmem`, the layout classes
(`swizzled_shared_layout`, `nv_mma_shared_layout`, `shared_layout`, `tensor_memory_layout`; placement hints,
see tle.gpu.layouts), `alloc(..., nv_mma_shared_layout=)`, `local_ptr` (pointers into a buffer for tl.load and
tl.store), `memory_space`, `copy(desc, buf, shape, offsets)`, `buffered_tensor` (the type of a buffer inside a
kernel) and `tle.gpu.semantic` (the checks alloc makes, callable on their own).
"""
from __future__ import annotations

from tle.gpu.layouts import (layout, nv_mma_shared_layout, scope, shared_layout, smem, swizzled_shared_layout,
                             tensor_memory_layout, tmem)
from tle.lowering.frontend import gpu as _impl
from tle.lowering.frontend.gpu import Buffer
from tle.lowering.frontend import register_tle_builtin, register_tle_context, register_tle_range


storage_kind = scope          # the project's first spelling of FlagTree's `scope`
buffered_tensor = Buffer      # what tle.gpu.alloc returns inside a kernel


def _outside(name):
    raise RuntimeError(f"tle.gpu.{name} can only be called inside a @tle.jit kernel")


def alloc(shape, dtype, layout=None, scope=smem, nv_mma_shared_layout=None):
    """A buffer of `shape` and `dtype` in `scope` (its contents undefined until written). `layout` (a layout
    object) and `nv_mma_shared_layout` (FlagTree's flag: True its NVMMA-swizzled default, False unswizzled) are
    placement hints, which the lowering notes say each backend honored or dropped."""
    _outside("alloc")


def copy(src, dst, shape, mask=None, other=None, offsets=None):
    """Copy a pointer tile into a buffer, a buffer to a pointer tile, or a buffer into a buffer. `shape` is
    the buffer's; `mask`/`other` mean what they mean for tl.load (and `mask` for tl.store). With a tensor
    descriptor on one side (FlagTree's TMA form), `copy(desc, buf, shape, offsets)` reads the descriptor's
    block at `offsets` into the buffer and `copy(buf, desc, shape, offsets)` writes the buffer there."""
    _outside("copy")


def local_load(buf):
    """The tile a buffer holds."""
    _outside("local_load")


def local_store(buf, value):
    """Write a tile (converted to the buffer's dtype, broadcast to its shape) into a buffer."""
    _outside("local_store")


def local_ptr(buffer, offsets=None):
    """Pointers to a buffer's elements, for tl.load and tl.store (FlagTree's feature/tle_local_ptr form):
    `offsets`, an integer tile, are flat row-major element offsets into the buffer (the pointers take its
    shape); without it, one pointer per element in the buffer's shape. A load reads the buffer's latest write,
    a store writes it, as copy and local_store do; adding integers moves the pointers by elements."""
    _outside("local_ptr")


def memory_space(input, space):
    """FlagTree's placement hint for a tile ('shared_memory', 'tensor_memory', 'register', ...): returns
    `input` unchanged. Both backends place tiles themselves, so the hint is dropped with a note."""
    _outside("memory_space")


class pipeline:
    """`for i in tle.gpu.pipeline(start, stop, step, num_stages=k, loop_unroll_factor=u)`: a loop whose buffer
    copies the backend overlaps with compute over k stages (TileLang's T.Pipelined, Triton's
    tl.range(num_stages)). Outside a kernel it is a description of the loop, as tl.range is: start, end, step,
    num_stages and loop_unroll_factor."""

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None):
        self.start, self.end = (0, arg1) if arg2 is None else (arg1, arg2)
        self.step = 1 if step is None else step
        self.num_stages, self.loop_unroll_factor = num_stages, loop_unroll_factor

    def __iter__(self):
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
                      (local_store, _impl.local_store), (local_ptr, _impl.local_ptr),
                      (memory_space, _impl.memory_space)):
    register_tle_builtin(_fn, _builtin)
register_tle_range(pipeline, _impl.pipeline_attrs)
register_tle_context(warp_group, _impl.warp_group_scope)
register_tle_context(turn, _impl.turn_scope)

__all__ = ["alloc", "copy", "local_load", "local_store", "local_ptr", "memory_space", "pipeline", "warp_group",
           "turn", "scope", "storage_kind", "smem", "tmem", "layout", "shared_layout", "swizzled_shared_layout",
           "nv_mma_shared_layout", "tensor_memory_layout", "buffered_tensor"]
