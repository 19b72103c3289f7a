"""Tile atomic adds issued as one TMA reduction from shared memory.

`tl.atomic_add(ptrs, tile, mask)` over a box is, per element, one `red.global.add` from the thread holding the
element (TileLang pairs them: `AtomicAddx2`). A product's fp32 accumulator added into global memory every step
of a loop (attention's dQ, added by each block of keys) is then 32 such instructions a thread per 64x128 tile,
issued from the threads that compute the products. Staged in a shared buffer instead, the tile goes out as one
`cp.reduce.async.bulk.tensor` add (`T.atomic_add(region, shared, use_tma=True)`): one thread issues it, the L2
adds whole lines, and elements outside the tensor are dropped by the hardware, as a box store drops them.

Taken inside a warp-group branch (whose kernels are sm_90 ones: setmaxnreg, TMA loads) for an fp32 add whose
previous value nothing reads, relaxed (the TMA reduction has no ordering), over a box of two or more axes whose
mask is at most the tensor's edge, rows of a multiple of 16 bytes, into an argument a tensor map can describe
(views.tensor_map_fits). Otherwise the per-element atomics stay."""
from __future__ import annotations

from ..analysis.access import Access
from ..ir import ops
from ..ir.core import Op
from ..ir.ops import AtomicKind, MemSem
from ..ir.types import fp32
from .context import Context
from .views import box, region, tensor_map_fits


def reduces_through_tma(gen: Context, op: Op, acc: Access, used: bool, order, indent: int) -> bool:
    """Emit `op` as a TMA reduction from shared memory, if it qualifies (module docstring); False otherwise."""
    if op.defn is not ops.ATOMIC or op.attrs["kind"] is not AtomicKind.ADD or used:
        return False
    if order not in (None, MemSem.RELAXED) or gen.warp_group is None:
        return False
    ptr, val, mask = op.operand("ptr"), op.operand("value"), op.operand("mask")
    shape = ptr.type.shape
    if len(shape) < 2 or op.result.type.elem != fp32 or shape[-1] * 4 % 16:
        return False
    if not tensor_map_fits(gen, acc.param.value, 4):
        return False
    plan = box(gen, op, acc, mask)
    if plan is None:
        return False
    staged = gen.buffer_of(val, indent, "shared", dtype=fp32)
    gen.emit(f"T.atomic_add({region(gen, acc.param.value, plan)}, {staged.region()}, use_tma=True)", indent)
    gen.report.append((op.loc.line, "atomic", acc.kind, f"TMA reduce-add from shared ({staged.name})"))
    return True
