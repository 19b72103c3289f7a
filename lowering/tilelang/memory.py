"""Global memory: the rules for load, store, atomic and the tle.gpu copies between global memory and a
buffer. A box access is a `T.copy` of a region of the argument's strided view (views.py); a gather or a
general access is a T.Parallel loop over the flat argument, masked with `T.if_then_else` (reads) or `if`
(writes). Inside a T.Pipelined loop, reads are written in the form TileLang issues as asynchronous
copies where that keeps their meaning. (How index tiles are read is decided in gathers.py.)"""
from __future__ import annotations

from ..analysis.access import Access, mask_always_true
from ..ir.core import Op, Value
from .context import Buffer, Context
from .expressions import read_by_split
from .gathers import zero_filled_rows
from .rules import RULES
from .staged_stores import stages_through_shared
from .syntax import element, literal, loop_indices, parallel_header, tl_dtype
from .values import is_zero
from .views import box, region, view


# -- loads --------------------------------------------------------------------------------------------------
@RULES.rule("load", role="statement")
def load(g: Context, op: Op, indent: int):
    ptr, mask, other = op.operands[:3]
    v = op.result
    acc = g.access(op)
    if acc.param is None:
        g.error("a load through a pointer that is not base + offsets of one argument", op)
    param = g.ids[acc.param.value]
    if v.id in g.staged_index:
        # read into registers, then written to shared memory: a read from global straight into shared memory
        # that TileLang's simplifier finds unmasked (a mask it proves true) would be issued as cp.async, and
        # the stage's gathers would read the tile before it lands (its pipeline waits for a copy only in a
        # later stage)
        g.out.mark_stage0()
        held = g.alloc((v.name or "t") + "_r", v.type.shape, v.type.elem, "fragment")
        read_global(g, op, g.fragment(held, v), "fragment", False, indent)
        # a static shared buffer: in the dynamic one TileLang merges the gathered tiles into, its barrier
        # planner cannot tell the gathers' writes from this tile's reads, and puts a barrier before every
        # cp.async of the gathers (0.88x the speed of the seed's sparse-MLA loop on the H200)
        into = g.alloc(v.name or "t", v.type.shape, v.type.elem, "shared", static=True)
        idx = loop_indices(v.type.rank)
        g.out.mark_stage0()
        g.emit(parallel_header(idx, v.type.shape), indent)
        g.emit(f"{into}[{', '.join(idx)}] = {held}[{', '.join(idx)}]", indent + 1)
        g.buffers[v.id] = Buffer(into, v.type.shape, v.type.elem, "shared", g.blocks[-1])
        g.report.append((op.loc.line, "load", acc.kind, "T.Parallel into registers then static shared memory "
                         "in stage 0 of T.Pipelined (an index tile the stage's gathers read)"))
        return
    if v.id in g.index_loads:
        g.report.append((op.loc.line, "load", acc.kind, "read at each use (an index tile of a gather)"))
        return
    if v.type.is_scalar:
        g.report.append((op.loc.line, "load", acc.kind, "scalar expression"))
        e = f"{param}[{g.offset(ptr, [])}]"
        if mask is not None:
            e = f"T.if_then_else({g.scalar(mask)}, {e}, {g.scalar(other) if other is not None else literal(0, v.type.elem)})"
        name = g.ids.define(v)
        g.let(name, e, indent)
        g.scalars[v.id] = name
        return
    pipelined_async = op.attrs.get("async") == "pipelined"
    dot_operand = any(u.name == "dot" for u in g.value_users(v))
    scope = "shared" if pipelined_async or dot_operand or read_by_split(g, v) else "fragment"
    # a plain load of a dot operand at the top of a pipelined loop is, to TileLang, one more copy of
    # the loop's stage 0 (as a T.copy there would be); only where the trip count is a constant:
    # TileLang 0.1.15 fails on a loop of dynamic length holding asynchronous copies
    plain_copy = not pipelined_async and dot_operand and g.in_static_pipelined_body(op)
    ahead = pipelined_async or plain_copy
    if ahead:
        g.out.mark_stage0()
    name, how, perm = read_global(g, op, None, scope, ahead, indent)
    kind = "TMA or cp.async bulk copy" if how.startswith("T.copy") else "cp.async per thread"
    if pipelined_async:
        how += f", is_async: stage 0 of T.Pipelined (num_stages={op.attrs['async_stages']}), {kind}"
    elif plain_copy:
        how += f", stage 0 of its T.Pipelined loop like the loop's other copies, {kind}"
    elif op.attrs.get("is_async"):
        how += f", is_async: {op.attrs.get('async', 'plain')}"
    g.report.append((op.loc.line, "load", acc.kind, how))
    g.buffers[v.id] = Buffer(name, v.type.shape, v.type.elem, scope, g.blocks[-1], perm)


@RULES.rule("load", role="expression")
def index_tile_element(g: Context, op: Op, idx: list[str]) -> str:
    """An element of an index tile, read where it is used (see index_loads)."""
    if op.result.id not in g.index_loads:
        g.error("'load' as a value", op)
    return load_expr(g, op, idx)


def load_expr(g: Context, op: Op, idx: list[str]) -> str:
    """Element `idx` of a load, read from global memory (masked with T.if_then_else)."""
    ptr, mask, other = op.operands[:3]
    acc = g.access(op)
    e = f"{g.ids[acc.param.value]}[{g.offset(ptr, idx)}]"
    if mask is not None:
        oth = g.elem(other, idx) if other is not None else literal(0, ptr.type.elem.elem)
        e = f"T.if_then_else({g.elem(mask, idx)}, {e}, {oth})"
    return e


@RULES.rule("copy_in", role="statement")
def copy_in(g: Context, op: Op, indent: int):
    acc = g.access(op)
    if acc.param is None:
        g.error("a tle.gpu.copy from a pointer that is not base + offsets of one argument", op)
    buf = g.buffers[op.operands[3].id]       # every version maps to its allocation's buffer
    if g.warp_group is not None:
        from .warp_group_code import group_copy_in
        if group_copy_in(g, op, buf, indent):
            g.buffers[op.result.id] = buf
            g.report.append((op.loc.line, "tle.gpu.copy", acc.kind, f"cp.async rows into {buf.name} (16 bytes a "
                                                                    f"copy, zero-filled where masked off)"))
            return
    staged = g.in_pipelined_loop(op)
    if staged:
        g.out.mark_stage0()
    _, how, _ = read_global(g, op, buf, "shared", staged, indent)
    if staged:
        how += ", a stage of T.Pipelined (cp.async or TMA where TileLang can)"
    g.buffers[op.result.id] = buf
    g.report.append((op.loc.line, "tle.gpu.copy", acc.kind, how.replace("into shared", f"into {buf.name}")))


def read_global(g: Context, op: Op, into: Buffer | None, scope: str, asynchronous: bool, indent: int):
    """Emit the read of a load's (or a tle.gpu.copy's) pointer tile into a buffer: `into`, or a new
    one of `scope`. `asynchronous`: the read is a stage of a pipelined loop, so write it in the form
    TileLang issues as cp.async where that keeps its meaning. Returns (buffer name, how, storage
    permutation or None)."""
    ptr, mask, other = op.operands[:3]
    shape, elem = ptr.type.shape, ptr.type.elem.elem
    acc = g.access(op)
    param = g.ids[acc.param.value]
    plan = box(g, op, acc, mask)
    # `other` only matters where the mask can be false
    zero_other = other is None or is_zero(other) or mask_always_true(mask, shape, g.aff)
    perm = None
    # a read into a fragment inside T.Pipelined stays element-wise: TileLang 0.1.15 gives a T.copy from global
    # into a fragment to the producer warps of its warp-specialized pipeline, and the consumer warps that read
    # the fragment never see it (they read it uninitialized)
    fragment_in_pipeline = scope == "fragment" and g.in_pipelined_loop(op)
    if plan is not None and zero_other and not fragment_in_pipeline:
        into = into or Buffer(g.alloc(op.results[0].name or "t", shape, elem, scope), shape, elem, scope,
                              g.blocks[-1])
        g.emit(f"T.copy({region(g, acc.param.value, plan)}, {into.region()})", indent)
        return into.name, f"T.copy into {scope}", None
    if plan is None:
        why = acc.reason
    elif not zero_other:
        why = "`other` is not zero where the mask can be false"
    else:
        why = "a plain read in T.Pipelined, kept with the warps that use it"
    tile = op.results[0] if op.name == "load" else ptr
    perm = _storage_order(acc, tile) if scope == "shared" and into is None else None
    stored = shape if perm is None else tuple(shape[p] for p in perm)
    into = into or Buffer(g.alloc(op.results[0].name or "t", stored, elem, scope), stored, elem, scope, g.blocks[-1])
    idx = loop_indices(len(shape))
    # only reads that are a stage of a pipelined loop take the copy form TileLang issues as cp.async;
    # elsewhere a load stays a synchronous masked read
    fill = zero_filled_rows(g, op, acc, idx) if asynchronous and zero_other and mask is not None else None
    if fill is not None:
        # masked-off rows are sent out of bounds: TileLang's bounds predication zero-fills them,
        # and the copy stays a plain (vectorizable, asynchronous) global-to-shared copy
        g.substitutes = fill
        e = f"{param}[{g.offset(ptr, idx)}]"
        g.substitutes = {}
        why = ""
    else:
        e = load_expr(g, op, idx)
    # loop over the buffer's own axes: the innermost one is where consecutive threads go
    order = list(range(len(shape))) if perm is None else list(perm)
    g.emit(parallel_header([idx[d] for d in order], stored), indent)
    g.emit(f"{into.at([idx[d] for d in order])} = {e}", indent + 1)
    how = f"T.Parallel into {scope}" + (" (stored transposed: its contiguous axis is the first)"
                                        if perm is not None else "") + (f" ({why})" if why else "")
    if fill is not None:
        how += ", masked rows zero-filled by bounds predication"
    return into.name, how, perm


def _storage_order(acc: Access, v: Value) -> tuple | None:
    """(1, 0) when a 2-D tile read element by element is contiguous in memory along its first axis
    and not its last: stored transposed, consecutive threads read consecutive addresses."""
    if v.type.rank != 2 or acc.offset is None:
        return None
    if acc.offset.axis_coef(0) == 1 and acc.offset.axis_coef(1) != 1:
        return (1, 0)
    return None


# -- stores and atomics -------------------------------------------------------------------------------------
@RULES.rule("store", "copy_out", role="statement")
def store(g: Context, op: Op, indent: int):
    """tl.store, and tle.gpu.copy from a buffer to global memory (the buffer is the value stored)."""
    site = "store" if op.name == "store" else "tle.gpu.copy"
    ptr, val, mask = op.operands
    acc = g.access(op)
    if acc.param is None:
        g.error("a store through a pointer that is not base + offsets of one argument", op)
    param = g.ids[acc.param.value]
    elem = ptr.type.elem.elem
    if ptr.type.is_scalar:
        g.report.append((op.loc.line, site, acc.kind, "scalar statement"))
        # every thread of the block runs a scalar statement; they all store the same value
        st = f"{param}[{g.offset(ptr, [])}] = {g.scalar(val)}"
        if mask is not None:
            g.emit(f"if {g.scalar(mask)}:", indent)
            g.emit(st, indent + 1)
        else:
            g.emit(st, indent)
        return
    plan = box(g, op, acc, mask)
    if plan is not None:
        src = val
        cast = val.defining_op
        if cast is not None and cast.name == "cast" and not cast.attrs.get("bitcast") and \
                cast.operands[0].id in g.buffers and g.visible(g.buffers[cast.operands[0].id]) and \
                g.buffers[cast.operands[0].id].perm is None:
            src = cast.operands[0]          # T.copy converts to the destination's dtype itself
        b = g.buffers[src.id] if src is not val else g.buffer_of(val, indent, "any", dtype=elem)
        how = f"T.copy from {b.scope}" if site == "store" else f"T.copy from {b.name}"
        if stages_through_shared(g, op, b, acc.param.value):
            # converted to the stored dtype in registers first: stmatrix writes the fragment as it is
            b = g.buffer_of(val, indent, "fragment", dtype=elem)
            staged = Buffer(g.alloc((val.name or "t") + "_shared", b.shape, elem, "shared"), b.shape, elem,
                            "shared", g.blocks[-1])
            g.emit(f"T.copy({b.region()}, {staged.region()})", indent)
            b, how = staged, "T.copy from fragment through shared"
        g.emit(f"T.copy({b.region()}, {region(g, acc.param.value, plan)})", indent)
        g.report.append((op.loc.line, site, acc.kind, how))
        return
    g.report.append((op.loc.line, site, acc.kind, "T.Parallel" + (f" ({acc.reason})" if acc.reason else "")))
    _masked_parallel(g, ptr.type.shape, mask, lambda idx: f"{param}[{g.offset(ptr, idx)}] = "
                     f"{g.elem(val, idx)}", indent)


@RULES.rule("atomic", "atomic_cas", role="statement")
def atomic(g: Context, op: Op, indent: int):
    """tl.atomic_<kind> and tl.atomic_cas, one atomic per element. TileLang's own T.atomic_add/max/min/or
    where it has them; and, xor, xchg, cas and an or whose value is read are device functions the kernel
    brings (ATOMIC_HELPERS, through T.import_source), called with T.call_extern on the element's address.

    A value the kernel reads back is the previous value: per element into a shared buffer, or, for a scalar
    atomic (one thread does it), through a one-element shared buffer every thread then reads. Where the mask
    is false the returned value is 0, as in the code Triton compiles for a tile atomic (its `atom` writes a
    register set to 0 first); Triton leaves it unspecified otherwise (its interpreter returns uninitialized
    memory, a masked-off scalar atomic leaves its shared slot unwritten)."""
    if op.name == "atomic_cas":
        (ptr, cmp, val), mask, kind = op.operands, None, "cas"
    else:
        (ptr, val, mask), cmp, kind = op.operands, None, op.attrs["kind"]
    used = bool(g.users.get(op.result.id))
    acc = g.access(op)
    if acc.param is None:
        g.error("an atomic through a pointer that is not base + offsets of one argument", op)
    param = g.ids[acc.param.value]
    elem = op.result.type.elem
    order = atomic_order(g, op)
    # TileLang's T.atomic_or returns nothing: an or whose value is read is the helper's
    extern = kind not in TILELANG_ATOMICS or (used and kind not in RETURNS_PREVIOUS)
    if extern:
        _check_helper_dtype(g, op, kind, elem)
        _import_atomic_helpers(g)
        fn = f"tle_atomic_{kind}<cuda::memory_order_{order or 'relaxed'}>"

        # the element's address as T.access_ptr, which TileLang's own atomics take: its safe-memory pass turns a
        # load inside T.address_of that it cannot prove in bounds into a conditional, whose address CUDA has not
        def call(ix):
            operands = ([g.elem(cmp, ix)] if cmp is not None else []) + [g.elem(val, ix)]
            return (f"T.call_extern({tl_dtype(elem)!r}, {fn!r}, T.access_ptr({param}[{g.offset(ptr, ix)}], 'rw'), "
                    f"{', '.join(operands)})")
        how = f"T.call_extern of the kernel's device function tle_atomic_{kind} ({order or 'relaxed'})"
    else:
        fn = f"T.atomic_{kind}"
        # TileLang's AtomicAdd without return_prev is a plain atomicAdd for 32- and 64-bit values: it drops the
        # memory order, which AtomicAddRet honors; an add with an order is issued in that form (value unused)
        ret = used or (kind == "add" and order not in (None, "relaxed"))
        args = (f", memory_order={order!r}" if order else "") + (", return_prev=True" if ret else "")

        def call(ix):
            return f"{fn}({param}[{g.offset(ptr, ix)}], {g.elem(val, ix)}{args})"
        how = fn + (" with return_prev" if used else "")
    how += " per element" if ptr.type.shape else " on one thread"
    if used and not ptr.type.shape:
        how += ", the previous value shared with every thread"
    g.report.append((op.loc.line, "atomic", acc.kind, how))
    if ptr.type.is_scalar:
        # a scalar statement runs on every thread: let one thread do the atomic
        cond = g.scalar(mask) if mask is not None else None
        if not used:
            g.emit("if T.get_thread_binding() == 0:", indent)
            if cond:
                g.emit(f"if {cond}:", indent + 1)
            g.emit(call([]), indent + 1 + bool(cond))
            return
        shared = g.alloc((op.result.name or "old") + "_shared", (1,), elem, "shared")
        g.emit("if T.get_thread_binding() == 0:", indent)
        _write_or_zero(g, cond, f"{shared}[0]", call([]), literal(0, elem), indent + 1)
        # TileLang puts a barrier between the write and the reads of the other threads (and before the
        # next write where the statement repeats in a loop)
        name = g.ids.define(op.result)
        g.let(name, f"{shared}[0]", indent)
        g.scalars[op.result.id] = name
        return
    shape = ptr.type.shape
    idx = loop_indices(len(shape))
    if not used:
        _masked_parallel(g, shape, mask, call, indent)
        return
    # into shared memory, not a fragment: TileLang runs a T.Parallel loop that writes a fragment in every
    # thread holding a copy of the element (a tile smaller than the block is replicated over the warps), so
    # the atomic would be repeated; a loop that writes shared memory runs each element on one thread
    name = g.alloc(op.result.name or "old", shape, elem, "shared")
    g.emit(parallel_header(idx, shape), indent)
    _write_or_zero(g, g.elem(mask, idx) if mask is not None else None, element(name, idx), call(idx),
                   literal(0, elem), indent + 1)
    g.buffers[op.result.id] = Buffer(name, shape, elem, "shared", g.blocks[-1])


# TileLang 0.1.15's own atomics (T.atomic_*), and those of them that can return the previous value
# (return_prev=True, element-wise form)
TILELANG_ATOMICS = ("add", "max", "min", "or")
RETURNS_PREVIOUS = ("add", "max", "min")

# The atomics TileLang 0.1.15 lacks, as device functions on an element's bits: cuda::atomic_ref at device
# scope (as TileLang's own T.atomic_* are) in the memory order of the template argument, which compiles to
# one `atom.<op>.<order>.gpu` instruction, as Triton's do. A 16-bit compare-and-swap is written in PTX
# (atom.cas.b16): cuda::atomic_ref would emulate it with a loop of 32-bit ones. Every call passes the value
# (and cmp) in the element's own dtype.
ATOMIC_HELPERS = r'''
#include <cuda/atomic>
#include <cuda/std/bit>

template <typename T> using tle_bits = cuda::std::conditional_t<sizeof(T) == 2, unsigned short,
    cuda::std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>>;
template <typename T> using tle_same = cuda::std::type_identity_t<T>;

template <typename T>
__device__ __forceinline__ cuda::atomic_ref<tle_bits<T>, cuda::thread_scope_device> tle_ref(T* p) {
  return cuda::atomic_ref<tle_bits<T>, cuda::thread_scope_device>(*reinterpret_cast<tle_bits<T>*>(p));
}
template <typename T> __device__ __forceinline__ tle_bits<T> tle_to_bits(T v) {
  return cuda::std::bit_cast<tle_bits<T>>(v);
}
template <typename T> __device__ __forceinline__ T tle_from_bits(tle_bits<T> b) {
  return cuda::std::bit_cast<T>(b);
}

template <cuda::memory_order O, typename T> __device__ __forceinline__ T tle_atomic_and(T* p, tle_same<T> v) {
  return tle_from_bits<T>(tle_ref(p).fetch_and(tle_to_bits(v), O));
}
template <cuda::memory_order O, typename T> __device__ __forceinline__ T tle_atomic_or(T* p, tle_same<T> v) {
  return tle_from_bits<T>(tle_ref(p).fetch_or(tle_to_bits(v), O));
}
template <cuda::memory_order O, typename T> __device__ __forceinline__ T tle_atomic_xor(T* p, tle_same<T> v) {
  return tle_from_bits<T>(tle_ref(p).fetch_xor(tle_to_bits(v), O));
}
template <cuda::memory_order O, typename T> __device__ __forceinline__ T tle_atomic_xchg(T* p, tle_same<T> v) {
  return tle_from_bits<T>(tle_ref(p).exchange(tle_to_bits(v), O));
}
// where *p holds cmp's bits, write val; returns what *p held
template <cuda::memory_order O, typename T>
__device__ __forceinline__ T tle_atomic_cas(T* p, tle_same<T> cmp, tle_same<T> val) {
  tle_bits<T> old = tle_to_bits(cmp), v = tle_to_bits(val);
  if constexpr (sizeof(T) == 2) {
    if constexpr (O == cuda::memory_order_relaxed)
      asm volatile("atom.cas.relaxed.gpu.b16 %0, [%1], %0, %2;" : "+h"(old) : "l"(p), "h"(v) : "memory");
    else if constexpr (O == cuda::memory_order_acquire)
      asm volatile("atom.cas.acquire.gpu.b16 %0, [%1], %0, %2;" : "+h"(old) : "l"(p), "h"(v) : "memory");
    else if constexpr (O == cuda::memory_order_release)
      asm volatile("atom.cas.release.gpu.b16 %0, [%1], %0, %2;" : "+h"(old) : "l"(p), "h"(v) : "memory");
    else
      asm volatile("atom.cas.acq_rel.gpu.b16 %0, [%1], %0, %2;" : "+h"(old) : "l"(p), "h"(v) : "memory");
  } else {
    tle_ref(p).compare_exchange_strong(old, v, O);
  }
  return tle_from_bits<T>(old);
}
'''

# the element dtypes Triton takes for each atomic (triton/language/semantic.py): no 8-bit or 16-bit integers,
# fp16 and bf16 for add only; and, or and xor on integers (the frontend checks that); cas on any 16-, 32- or
# 64-bit element
_HELPER_DTYPES = {"and": ("i32", "u32", "i64", "u64"), "or": ("i32", "u32", "i64", "u64"),
                  "xor": ("i32", "u32", "i64", "u64"), "xchg": ("i32", "u32", "i64", "u64", "fp32", "fp64"),
                  "cas": ("i16", "u16", "fp16", "bf16", "i32", "u32", "fp32", "i64", "u64", "fp64")}


def _check_helper_dtype(g: Context, op: Op, kind: str, elem):
    if elem.name not in _HELPER_DTYPES[kind]:
        name = "tl.atomic_cas" if kind == "cas" else f"tl.atomic_{kind}"
        g.error(f"{name} on {elem} memory", op, f"Triton's atomic_{kind} takes {', '.join(_HELPER_DTYPES[kind])} "
                                               f"only")


def _import_atomic_helpers(g: Context):
    """Bring ATOMIC_HELPERS into the kernel's CUDA source (once): T.import_source, written first in the kernel
    body with its declarations."""
    line = f'T.import_source("""{ATOMIC_HELPERS}""")'
    if line not in g.allocs:
        g.allocs.insert(0, line)


def atomic_order(g: Context, op: Op) -> str | None:
    """The memory_order of an atomic: the kernel's `sem`; where it names none, Triton's default acq_rel in a
    kernel that reads a value an atomic returns (a block can then acquire what another released), else
    None, TileLang's default relaxed order, which no block of such a kernel can tell from acq_rel."""
    if op.attrs.get("sem"):
        return op.attrs["sem"]
    return "acq_rel" if g.reads_atomic_results else None


def _write_or_zero(g: Context, cond: str | None, target: str, value: str, zero: str, indent: int):
    """`target = value`, where `cond` holds; `target = zero` where it does not."""
    if cond is None:
        g.emit(f"{target} = {value}", indent)
        return
    g.emit(f"if {cond}:", indent)
    g.emit(f"{target} = {value}", indent + 1)
    g.out.clause("else:", indent)
    g.emit(f"{target} = {zero}", indent + 1)


def _masked_parallel(g: Context, shape, mask: Value | None, statement, indent: int):
    """`for i.. in T.Parallel(shape): [if mask[i..]:] statement(i..)`."""
    idx = loop_indices(len(shape))
    g.emit(parallel_header(idx, shape), indent)
    if mask is not None:
        g.emit(f"if {g.elem(mask, idx)}:", indent + 1)
        g.emit(statement(idx), indent + 2)
    else:
        g.emit(statement(idx), indent + 1)
