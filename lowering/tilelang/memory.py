"""Global memory: the rules for load, store, atomic and the tle.gpu copies between global memory and a
buffer. A box access is a `T.copy` of a region of the argument's strided view (views.py); a gather or a
general access is a T.Parallel loop over the flat argument, masked with `T.if_then_else` (reads) or `if`
(writes). Inside a T.Pipelined loop, reads are written in the form TileLang issues as asynchronous
copies where that keeps their meaning. (How index tiles are read is decided in gathers.py.)"""
from __future__ import annotations

from ..analysis.access import Access, mask_always_true, mask_fails_at
from ..analysis.affine import Affine
from ..ir import ops
from ..ir.core import Op, Value
from ..ir.ops import PLAIN_LOAD, AtomicKind, MemSem
from .context import Buffer, Context
from .expressions import read_by_split
from .gathers import zero_filled_rows
from ..rules import RuleSet
from .staged_stores import masked_product_store, product_operand_twin, stages_through_shared
from .syntax import element, literal, loop_indices, parallel_header, tl_dtype
from .tma_reductions import reduces_through_tma
from .values import is_zero
from .views import affine_expr, box, region

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table


# -- loads --------------------------------------------------------------------------------------------------
@RULE_SET.rule(ops.LOAD, role="statement")
def load(gen: Context, op: Op, indent: int):
    ptr, mask, other = op.operand("ptr"), op.operand("mask"), op.operand("other")
    v = op.result
    acc = gen.access(op)
    if acc.param is None:
        gen.error("a load through a pointer that is not base + offsets of one argument", op)
    param = gen.ids[acc.param.value]
    if v.id in gen.staged_index:
        # read into registers, then written to shared memory: a read from global straight into shared memory
        # that TileLang's simplifier finds unmasked (a mask it proves true) would be issued as cp.async, and
        # the stage's gathers would read the tile before it lands (its pipeline waits for a copy only in a
        # later stage)
        gen.out.mark_stage0()
        held = gen.alloc((v.name or "t") + "_r", v.type.shape, v.type.elem, "fragment")
        read_global(gen, op, gen.fragment(held, v), "fragment", False, indent)
        # a static shared buffer: in the dynamic one TileLang merges the gathered tiles into, its barrier
        # planner cannot tell the gathers' writes from this tile's reads, and puts a barrier before every
        # cp.async of the gathers (0.88x the speed of the seed's sparse-MLA loop on the H200)
        into = gen.alloc(v.name or "t", v.type.shape, v.type.elem, "shared", static=True)
        idx = loop_indices(v.type.rank)
        gen.out.mark_stage0()
        gen.emit(parallel_header(idx, v.type.shape), indent)
        gen.emit(f"{into}[{', '.join(idx)}] = {held}[{', '.join(idx)}]", indent + 1)
        gen.buffers[v.id] = Buffer(into, v.type.shape, v.type.elem, "shared", gen.blocks[-1])
        gen.report.append((op.loc.line, "load", acc.kind, "T.Parallel into registers then static shared memory "
                           "in stage 0 of T.Pipelined (an index tile the stage's gathers read)"))
        return
    if v.id in gen.index_loads:
        gen.report.append((op.loc.line, "load", acc.kind, "read at each use (an index tile of a gather)"))
        return
    if v.id in gen.product_feeds:
        gen.report.append((op.loc.line, "load", acc.kind, "read inside the element-wise expression that makes a "
                           "product's operand (product_feeds.py)"))
        return
    if v.type.is_scalar:
        gen.report.append((op.loc.line, "load", acc.kind, "scalar expression"))
        e = f"{param}[{gen.offset(ptr, [])}]"
        if mask is not None:
            fill = gen.scalar(other) if other is not None else literal(0, v.type.elem)
            e = f"T.if_then_else({gen.scalar(mask)}, {e}, {fill})"
        name = gen.ids.define(v)
        gen.let(name, e, indent)
        gen.scalars[v.id] = name
        return
    pipelined_async = op.attrs.get("async", PLAIN_LOAD).pipelined
    # a masked box read ahead, whose mask bounds it inside the argument, is copied whole (TMA) and selected by its
    # mask, as a product's operand is: the copy of a stage of its own, which TileLang's pipeline frees after the
    # tile's last read. Element by element (cp.async), TileLang would give it the stage of the loop's first TMA
    # copy, freed after the product that reads that copy (stage_reuse.py)
    selected = box(gen, op, acc, mask, select=True) if pipelined_async and mask is not None and v.type.rank >= 2 \
        else None
    dropped = False
    if selected is not None and selected.select and gen.warp_split_off:
        # the copy and the select are two writes, which TileLang's pipeline planner puts in different stages and
        # refuses ("Multiple writes to overlapping buffer regions") unless the kernel's warps are split into
        # producers and consumers: without the split the hint is dropped
        pipelined_async, selected, dropped = False, None, True
        gen.notes.append(f"line {op.loc.line}: tle.load(is_async=True) of a masked box read as a plain load: "
                         "TileLang cannot pipeline its copy and mask select in a kernel with warp_specialize=False")
    dot_operand = any(u.defn is ops.DOT for u in gen.value_users(v))
    scope = "shared" if pipelined_async or dot_operand or read_by_split(gen, v) else "fragment"
    # a plain load of a dot operand at the top of a pipelined loop is, to TileLang, one more copy of
    # the loop's stage 0 (as a T.copy there would be); only where the trip count is a constant:
    # TileLang 0.1.15 fails on a loop of dynamic length holding asynchronous copies
    plain_copy = not pipelined_async and dot_operand and gen.in_static_pipelined_body(op)
    if selected is not None and selected.select:
        name, how, perm = _copy_then_select(gen, op, acc, selected, indent)
        gen.report.append((op.loc.line, "load", acc.kind, how + ", is_async: a copy TileLang's pipeline issues "
                           "ahead"))
        gen.buffers[v.id] = Buffer(name, v.type.shape, v.type.elem, "shared", gen.blocks[-1], perm)
        return
    ahead = pipelined_async or plain_copy
    if ahead:
        gen.out.mark_stage0()
    name, how, perm = read_global(gen, op, None, scope, ahead, indent)
    kind = "TMA or cp.async bulk copy" if how.startswith("T.copy") else "cp.async per thread"
    if pipelined_async:
        how += f", is_async: stage 0 of T.Pipelined (num_stages={op.attrs['async_stages']}), {kind}"
    else:
        if dropped:
            how += ", is_async dropped: a masked box's copy and select without producer warps (see the notes)"
        if plain_copy:
            how += f", stage 0 of its T.Pipelined loop like the loop's other copies, {kind}"
        elif op.attrs.get("is_async") and not dropped:
            how += f", is_async: {op.attrs.get('async', 'plain')}"
    gen.report.append((op.loc.line, "load", acc.kind, how))
    gen.buffers[v.id] = Buffer(name, v.type.shape, v.type.elem, scope, gen.blocks[-1], perm)


@RULE_SET.rule(ops.LOAD, role="expression")
def index_tile_element(gen: Context, op: Op, idx: list[str]) -> str:
    """An element of an index tile or of a product's feed, read where it is used (index_loads, product_feeds)."""
    if op.result.id not in gen.index_loads and op.result.id not in gen.product_feeds:
        gen.error("'load' as a value", op)
    return load_expr(gen, op, idx)


def load_expr(gen: Context, op: Op, idx: list[str]) -> str:
    """Element `idx` of a load, read from global memory (masked with T.if_then_else)."""
    ptr, mask, other = op.operand("ptr"), op.operand("mask"), op.operand("other")
    acc = gen.access(op)
    e = f"{gen.ids[acc.param.value]}[{gen.offset(ptr, idx)}]"
    if mask is not None:
        oth = gen.elem(other, idx) if other is not None else literal(0, ptr.type.elem.elem)
        e = f"T.if_then_else({gen.elem(mask, idx)}, {e}, {oth})"
    return e


@RULE_SET.rule(ops.COPY_IN, role="statement")
def copy_in(gen: Context, op: Op, indent: int):
    acc = gen.access(op)
    if acc.param is None:
        gen.error("a tle.gpu.copy from a pointer that is not base + offsets of one argument", op)
    buf = gen.buffers[op.operand("buf").id]    # every version maps to its allocation's buffer
    if gen.warp_group is not None:
        how = gen.group_writer.copy_in(gen, op, buf, indent)
        if how is not None:
            gen.buffers[op.result.id] = buf
            gen.report.append((op.loc.line, "tle.gpu.copy", acc.kind, how))
            return
    staged = gen.in_pipelined_loop(op)
    if staged:
        gen.out.mark_stage0()
    _, how, _ = read_global(gen, op, buf, "shared", staged, indent)
    if staged:
        how += ", a stage of T.Pipelined (cp.async or TMA where TileLang can)"
    gen.buffers[op.result.id] = buf
    gen.report.append((op.loc.line, "tle.gpu.copy", acc.kind, how.replace("into shared", f"into {buf.name}")))


def read_global(gen: Context, op: Op, into: Buffer | None, scope: str, asynchronous: bool, indent: int):
    """Emit the read of a load's (or a tle.gpu.copy's) pointer tile into a buffer: `into`, or a new
    one of `scope`. `asynchronous`: the read is a stage of a pipelined loop, so write it in the form
    TileLang issues as cp.async where that keeps its meaning. Returns (buffer name, how, storage
    permutation or None)."""
    ptr, mask, other = op.operand("ptr"), op.operand("mask"), op.operand("other")
    shape, elem = ptr.type.shape, ptr.type.elem.elem
    acc = gen.access(op)
    param = gen.ids[acc.param.value]
    # a read into a fragment inside T.Pipelined stays element-wise: TileLang 0.1.15 gives a T.copy from global
    # into a fragment to the producer warps of its warp-specialized pipeline, and the consumer warps that read
    # the fragment never see it (they read it uninitialized)
    fragment_in_pipeline = scope == "fragment" and gen.in_pipelined_loop(op)
    # a product's operand bounded by its mask inside the argument (a sequence's end) may be the whole box,
    # copied into its shared buffer and selected there; not the stage of a pipeline, whose copy TileLang would
    # issue ahead of the select
    plan = box(gen, op, acc, mask, select=op.defn is ops.LOAD and scope == "shared" and into is None and
               not asynchronous)
    # `other` only matters where the mask can be false
    zero_other = other is None or is_zero(other) or mask_always_true(mask, shape, gen.aff)
    perm = None
    if plan is not None and plan.select:
        return _copy_then_select(gen, op, acc, plan, indent)
    if plan is not None and zero_other and not fragment_in_pipeline:
        into = into or Buffer(gen.alloc(op.results[0].name or "t", shape, elem, scope), shape, elem, scope,
                              gen.blocks[-1])
        gen.emit(f"T.copy({region(gen, acc.param.value, plan)}, {into.region()})", indent)
        return into.name, f"T.copy into {scope}", None
    if plan is None:
        why = acc.reason
    elif not zero_other:
        why = "`other` is not zero where the mask can be false"
    else:
        why = "a plain read in T.Pipelined, kept with the warps that use it"
    tile = op.results[0] if op.defn is ops.LOAD else ptr
    perm = _storage_order(acc, tile) if scope == "shared" and into is None else None
    stored = shape if perm is None else tuple(shape[p] for p in perm)
    into = into or Buffer(gen.alloc(op.results[0].name or "t", stored, elem, scope), stored, elem, scope,
                          gen.blocks[-1])
    idx = loop_indices(len(shape))
    # only reads that are a stage of a pipelined loop take the copy form TileLang issues as cp.async;
    # elsewhere a load stays a synchronous masked read
    fill = zero_filled_rows(gen, op, acc, idx) if asynchronous and zero_other and mask is not None else None
    if fill is not None:
        # masked-off rows are sent out of bounds: TileLang's bounds predication zero-fills them,
        # and the copy stays a plain (vectorizable, asynchronous) global-to-shared copy
        gen.substitutes = fill
        e = f"{param}[{gen.offset(ptr, idx)}]"
        gen.substitutes = {}
        why = ""
    else:
        e = load_expr(gen, op, idx)
    # loop over the buffer's own axes: the innermost one is where consecutive threads go
    order = list(range(len(shape))) if perm is None else list(perm)
    gen.emit(parallel_header([idx[d] for d in order], stored), indent)
    gen.emit(f"{into.at([idx[d] for d in order])} = {e}", indent + 1)
    how = f"T.Parallel into {scope}" + (" (stored transposed: its contiguous axis is the first)"
                                        if perm is not None else "") + (f" ({why})" if why else "")
    if fill is not None:
        how += ", masked rows zero-filled by bounds predication"
    return into.name, how, perm


def _copy_then_select(gen: Context, op: Op, acc: Access, plan, indent: int):
    """The whole box copied into a new shared buffer, then, in place, the mask's elements kept and `other` put
    elsewhere: a vectorized bulk copy where the mask is not the argument's edge. Returns read_global's
    (buffer name, how, None)."""
    mask, other = op.operand("mask"), op.operand("other")
    shape, elem = op.operand("ptr").type.shape, op.operand("ptr").type.elem.elem
    into = Buffer(gen.alloc(op.results[0].name or "t", shape, elem, "shared"), shape, elem, "shared", gen.blocks[-1])
    # outside a pipelined loop TileLang 0.1.15 issues the copy as a TMA load and waits for it only before the
    # first product that reads the buffer, after the select, which then races with it (wrong rows, NaN, on
    # packed attention on the H200): such a copy is a plain one. In T.Pipelined the select is a stage of the
    # consumer, after the wait
    sync = "" if gen.in_pipelined_loop(op) else ", disable_tma=True"
    gen.emit(f"T.copy({region(gen, acc.param.value, plan)}, {into.region()}{sync})", indent)
    idx = loop_indices(len(shape))
    fill = gen.elem(other, idx) if other is not None else literal(0, elem)
    # the select runs only where the mask fails somewhere in the box (a walk's last, partial chunk): every
    # other step keeps the copy as it is
    fails = mask_fails_at(mask, shape, gen.aff)
    guarded = bool(fails) and all(f.syms for f in fails)
    if guarded:
        gen.emit(f"if {' | '.join(f'({_at_least_zero(gen, f)})' for f in fails)}:", indent)
    gen.emit(parallel_header(idx, shape), indent + guarded)
    gen.emit(f"{into.at(idx)} = T.if_then_else({gen.elem(mask, idx)}, {into.at(idx)}, {fill})", indent + guarded + 1)
    how = "T.copy then mask select in shared (the mask bounds it inside the argument)"
    return into.name, how + (", the select only where the mask fails in the box" if guarded else ""), None


def _at_least_zero(gen: Context, f: Affine) -> str:
    """`f >= 0` written as its positive terms >= its negative ones: `bos + c * 64 + 63 >= eos`."""
    pos = Affine(max(f.const, 0), tuple((s, c) for s, c in f.syms if c > 0))
    neg = Affine(max(-f.const, 0), tuple((s, -c) for s, c in f.syms if c < 0))
    return f"{affine_expr(gen, pos)} >= {affine_expr(gen, neg)}"


def _storage_order(acc: Access, v: Value) -> tuple | None:
    """(1, 0) when a 2-D tile read element by element is contiguous in memory along its first axis
    and not its last: stored transposed, consecutive threads read consecutive addresses."""
    if v.type.rank != 2 or acc.offset is None:
        return None
    if acc.offset.axis_coef(0) == 1 and acc.offset.axis_coef(1) != 1:
        return (1, 0)
    return None


# -- stores and atomics -------------------------------------------------------------------------------------
@RULE_SET.rule(ops.STORE, ops.COPY_OUT, role="statement")
def store(gen: Context, op: Op, indent: int):
    """tl.store, and tle.gpu.copy from a buffer to global memory (the buffer is the value stored)."""
    site = "store" if op.defn is ops.STORE else "tle.gpu.copy"
    ptr, val, mask = op.operand("ptr"), op.operand("value" if op.defn is ops.STORE else "buf"), op.operand("mask")
    acc = gen.access(op)
    if acc.param is None:
        gen.error("a store through a pointer that is not base + offsets of one argument", op)
    param = gen.ids[acc.param.value]
    elem = ptr.type.elem.elem
    if ptr.type.is_scalar:
        gen.report.append((op.loc.line, site, acc.kind, "scalar statement"))
        # every thread of the block runs a scalar statement; they all store the same value
        st = f"{param}[{gen.offset(ptr, [])}] = {gen.scalar(val)}"
        if mask is not None:
            gen.emit(f"if {gen.scalar(mask)}:", indent)
            gen.emit(st, indent + 1)
        else:
            gen.emit(st, indent)
        return
    plan = box(gen, op, acc, mask)
    twin = product_operand_twin(gen, val) if plan is not None and site == "store" else None
    if twin is not None:
        # the value is also a product's operand, which lives in shared memory: cast there once, for both
        b = gen.buffer_of(val, indent, "shared")
        gen.buffers[twin.id] = b
        gen.emit(f"T.copy({b.region()}, {region(gen, acc.param.value, plan)})", indent)
        gen.report.append((op.loc.line, site, acc.kind, "T.copy from shared (the buffer of a product's operand)"))
        return
    if plan is not None:
        src = val
        cast = val.defining_op
        if cast is not None and cast.defn is ops.CAST and not cast.attrs.get("bitcast") and \
                cast.operand("x").id in gen.buffers and gen.visible(gen.buffers[cast.operand("x").id]) and \
                gen.buffers[cast.operand("x").id].perm is None:
            src = cast.operand("x")         # T.copy converts to the destination's dtype itself
        b = gen.buffers[src.id] if src is not val else gen.buffer_of(val, indent, "any", dtype=elem)
        how = f"T.copy from {b.scope}" if site == "store" else f"T.copy from {b.name}"
        if stages_through_shared(gen, op, b, acc.param.value):
            # converted to the stored dtype in registers first: stmatrix writes the fragment as it is
            b = gen.buffer_of(val, indent, "fragment", dtype=elem)
            staged = Buffer(gen.alloc((val.name or "t") + "_shared", b.shape, elem, "shared"), b.shape, elem,
                            "shared", gen.blocks[-1])
            gen.emit(f"T.copy({b.region()}, {staged.region()})", indent)
            b, how = staged, "T.copy from fragment through shared"
        gen.emit(f"T.copy({b.region()}, {region(gen, acc.param.value, plan)})", indent)
        gen.report.append((op.loc.line, site, acc.kind, how))
        return
    if masked_product_store(gen, op, acc):
        # from the product's fragment into shared memory first: the masked store then writes whole rows from
        # there, consecutive threads to consecutive addresses, not the fragment's scattered pairs
        b = gen.buffer_of(val, indent, "shared", dtype=elem)
        gen.report.append((op.loc.line, site, acc.kind, f"T.Parallel from shared ({acc.reason})"))
        _masked_parallel(gen, ptr.type.shape, mask, lambda idx: f"{param}[{gen.offset(ptr, idx)}] = {b.at(idx)}",
                         indent)
        return
    gen.report.append((op.loc.line, site, acc.kind, "T.Parallel" + (f" ({acc.reason})" if acc.reason else "")))
    _masked_parallel(gen, ptr.type.shape, mask, lambda idx: f"{param}[{gen.offset(ptr, idx)}] = "
                     f"{gen.elem(val, idx)}", indent)


@RULE_SET.rule(ops.ATOMIC, ops.ATOMIC_CAS, role="statement")
def atomic(gen: Context, op: Op, indent: int):
    """tl.atomic_<kind> and tl.atomic_cas, one atomic per element. TileLang's own T.atomic_add/max/min/or
    where it has them; and, xor, xchg, cas and an or whose value is read are device functions the kernel
    brings (ATOMIC_HELPERS, through T.import_source), called with T.call_extern on the element's address.

    A value the kernel reads back is the previous value: per element into a shared buffer, or, for a scalar
    atomic (one thread does it), through a one-element shared buffer every thread then reads. Where the mask
    is false the returned value is 0, as in the code Triton compiles for a tile atomic (its `atom` writes a
    register set to 0 first); Triton leaves it unspecified otherwise (its interpreter returns uninitialized
    memory, a masked-off scalar atomic leaves its shared slot unwritten)."""
    ptr, val = op.operand("ptr"), op.operand("value")
    if op.defn is ops.ATOMIC_CAS:
        cmp, mask, kind = op.operand("cmp"), None, "cas"
    else:
        cmp, mask, kind = None, op.operand("mask"), op.attrs["kind"]
    used = bool(gen.users.get(op.result.id))
    acc = gen.access(op)
    if acc.param is None:
        gen.error("an atomic through a pointer that is not base + offsets of one argument", op)
    param = gen.ids[acc.param.value]
    elem = op.result.type.elem
    order = atomic_order(gen, op)
    if reduces_through_tma(gen, op, acc, used, order, indent):
        return
    # TileLang's T.atomic_or returns nothing: an or whose value is read is the helper's
    extern = kind not in TILELANG_ATOMICS or (used and kind not in RETURNS_PREVIOUS)
    if extern:
        _check_helper_dtype(gen, op, kind, elem)
        _import_atomic_helpers(gen)
        fn = f"tle_atomic_{kind}<cuda::memory_order_{order or 'relaxed'}>"

        # the element's address as T.access_ptr, which TileLang's own atomics take: its safe-memory pass turns a
        # load inside T.address_of that it cannot prove in bounds into a conditional, whose address CUDA has not
        def call(ix):
            operands = ([gen.elem(cmp, ix)] if cmp is not None else []) + [gen.elem(val, ix)]
            return (f"T.call_extern({tl_dtype(elem)!r}, {fn!r}, T.access_ptr({param}[{gen.offset(ptr, ix)}], 'rw'), "
                    f"{', '.join(operands)})")
        how = f"T.call_extern of the kernel's device function tle_atomic_{kind} ({order or 'relaxed'})"
    else:
        fn = f"T.atomic_{kind}"
        # TileLang's AtomicAdd without return_prev is a plain atomicAdd for 32- and 64-bit values: it drops the
        # memory order, which AtomicAddRet honors; an add with an order is issued in that form (value unused)
        ret = used or (kind is AtomicKind.ADD and order not in (None, MemSem.RELAXED))
        args = (f", memory_order={order!r}" if order else "") + (", return_prev=True" if ret else "")

        def call(ix):
            return f"{fn}({param}[{gen.offset(ptr, ix)}], {gen.elem(val, ix)}{args})"
        how = fn + (" with return_prev" if used else "")
    how += " per element" if ptr.type.shape else " on one thread"
    if used and not ptr.type.shape:
        how += ", the previous value shared with every thread"
    gen.report.append((op.loc.line, "atomic", acc.kind, how))
    if ptr.type.is_scalar:
        # a scalar statement runs on every thread (of the block, or of its warp group): let one do the atomic
        cond = gen.scalar(mask) if mask is not None else None
        if not used:
            gen.emit(f"if {gen.thread()[0]} == 0:", indent)
            if cond:
                gen.emit(f"if {cond}:", indent + 1)
            gen.emit(call([]), indent + 1 + bool(cond))
            return
        shared = gen.alloc((op.result.name or "old") + "_shared", (1,), elem, "shared")
        gen.emit(f"if {gen.thread()[0]} == 0:", indent)
        _write_or_zero(gen, cond, f"{shared}[0]", call([]), literal(0, elem), indent + 1)
        # TileLang puts a barrier between the write and the reads of the other threads (and before the
        # next write where the statement repeats in a loop)
        name = gen.ids.define(op.result)
        gen.let(name, f"{shared}[0]", indent)
        gen.scalars[op.result.id] = name
        return
    shape = ptr.type.shape
    idx = loop_indices(len(shape))
    if not used:
        _masked_parallel(gen, shape, mask, call, indent)
        return
    # into shared memory, not a fragment: TileLang runs a T.Parallel loop that writes a fragment in every
    # thread holding a copy of the element (a tile smaller than the block is replicated over the warps), so
    # the atomic would be repeated; a loop that writes shared memory runs each element on one thread
    name = gen.alloc(op.result.name or "old", shape, elem, "shared")
    gen.emit(parallel_header(idx, shape), indent)
    _write_or_zero(gen, gen.elem(mask, idx) if mask is not None else None, element(name, idx), call(idx),
                   literal(0, elem), indent + 1)
    gen.buffers[op.result.id] = Buffer(name, shape, elem, "shared", gen.blocks[-1])


# TileLang 0.1.15's own atomics (T.atomic_*), and those of them that can return the previous value
# (return_prev=True, element-wise form)
TILELANG_ATOMICS = (AtomicKind.ADD, AtomicKind.MAX, AtomicKind.MIN, AtomicKind.OR)
RETURNS_PREVIOUS = (AtomicKind.ADD, AtomicKind.MAX, AtomicKind.MIN)

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


def _check_helper_dtype(gen: Context, op: Op, kind: str, elem):
    if elem.name not in _HELPER_DTYPES[kind]:
        name = "tl.atomic_cas" if kind == "cas" else f"tl.atomic_{kind}"
        gen.error(f"{name} on {elem} memory", op, f"Triton's atomic_{kind} takes {', '.join(_HELPER_DTYPES[kind])} "
                                                 f"only")


def _import_atomic_helpers(gen: Context):
    """Bring ATOMIC_HELPERS into the kernel's CUDA source (once): T.import_source, written first in the kernel
    body with its declarations."""
    gen.import_device_source(ATOMIC_HELPERS)


def atomic_order(gen: Context, op: Op) -> str | None:
    """The memory_order of an atomic: the kernel's `sem`; where it names none, Triton's default acq_rel in a
    kernel that reads a value an atomic returns (a block can then acquire what another released), else
    None, TileLang's default relaxed order, which no block of such a kernel can tell from acq_rel."""
    if op.attrs.get("sem"):
        return op.attrs["sem"]
    return MemSem.ACQ_REL if gen.reads_atomic_results else None


def _write_or_zero(gen: Context, cond: str | None, target: str, value: str, zero: str, indent: int):
    """`target = value`, where `cond` holds; `target = zero` where it does not."""
    if cond is None:
        gen.emit(f"{target} = {value}", indent)
        return
    gen.emit(f"if {cond}:", indent)
    gen.emit(f"{target} = {value}", indent + 1)
    gen.out.clause("else:", indent)
    gen.emit(f"{target} = {zero}", indent + 1)


def _masked_parallel(gen: Context, shape, mask: Value | None, statement, indent: int):
    """`for i.. in T.Parallel(shape): [if mask[i..]:] statement(i..)`."""
    idx = loop_indices(len(shape))
    gen.emit(parallel_header(idx, shape), indent)
    if mask is not None:
        gen.emit(f"if {gen.elem(mask, idx)}:", indent + 1)
        gen.emit(statement(idx), indent + 2)
    else:
        gen.emit(statement(idx), indent + 1)
