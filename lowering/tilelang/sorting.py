"""Sorting, counting and gathering, which TileLang 0.1.15 has no operation for, written out in TileLang.

`tl.sort` and `tl.topk` are Triton's own bitonic network (triton/language/standard.py, `sort_impl`), step for
step, along the last axis of a shared-memory copy of the tile (each row of a 2-D tile on its own). Each
compare-exchange step is one `T.Parallel` loop in which every element computes its own new value from
itself and its partner (index i ^ d) in the buffer the previous step wrote, into the other buffer of a
pair: no iteration writes an element another reads. The element takes its partner's value when
`(x > y) != (flip ^ right)`, as Triton's `_compare_and_swap` does (`right`: it is the upper element of its
pair; `flip`: its run is merged descending), so equal keys, -0.0 and NaN end up where Triton puts them.
`tl.topk` sorts runs of k (the first log2(k) stages), then, as Triton does, repeatedly keeps the larger of
elements i and i + k of each pair of runs (halving the row) and merges the runs again: the k largest,
largest first.

`tl.histogram` counts with `T.atomic_add` on a zeroed shared int32 buffer. The bin of a value is what compiled
Triton makes of it (HistogramOpToLLVM): its low log2(max(num_bins, 32)) bits, from one warp ballot per bit,
with no range check; bins past num_bins (Triton pads the bins to one per lane of a warp) are dropped. A value
in [0, num_bins) is counted in its bin, and a value outside it where compiled Triton counts it (-1 with 32
bins: bin 31; 40 with 16 bins: bin 8, 20 with 16 bins: not at all). The loop that issues the atomics reads
shared memory only (the bin of each element, -1 where the mask is false or the bin is dropped), so TileLang
runs each of its iterations on one thread; an element read from a fragment, which TileLang may replicate
over threads, would be counted once per copy.

`tl.gather` copies its source tile to shared memory and reads each result element from there: a fragment's
element lives on the thread that owns it, and an index may ask for any element.

The barriers between these loops are written out (`T.sync_threads()`): TileLang inserts none between
shared-memory loops that it maps onto fewer than 32 threads (a tile of 16 elements), trusting one warp to
run in step, which neither the hardware (independent thread scheduling) nor the compiler (free to move a
read of element i ^ d above the store of element i) promises. With the barriers in the source TileLang
adds none of its own. A loop that TileLang pipelines may be split between producer and consumer warps,
where a block-wide barrier would deadlock: there these constructs are refused. A kernel's own `tl.debug_barrier`
is the same `T.sync_threads()`, refused in the same places."""
from __future__ import annotations

from ..ir import ops
from ..ir import types as ir_types
from ..ir.core import Op
from .context import Buffer, Context, enclosing_loops, innermost_loop
from ..rules import RuleSet
from .syntax import element, loop_indices, parallel_header, tl_dtype

RULE_SET = RuleSet()          # this module's rules; codegen.py includes them in the table

BARRIER = "T.sync_threads()"


@RULE_SET.rule(ops.SORT, role="statement")
def sort(gen: Context, op: Op, indent: int):
    _bitonic(gen, op, "tl.sort", None, bool(op.attrs["descending"]), indent)


@RULE_SET.rule(ops.TOPK, role="statement")
def topk(gen: Context, op: Op, indent: int):
    _bitonic(gen, op, "tl.topk", op.attrs["k"], True, indent)


def _log2(n: int) -> int | None:
    return n.bit_length() - 1 if n > 0 and n & (n - 1) == 0 else None


def network(log_n: int, log_k: int, descending: bool) -> list[tuple]:
    """Triton's sort_impl as a list of steps over a row of 2**log_n elements, leaving 2**log_k sorted:
    ("swap", stage, bit, flip) compares each element with the one whose index differs in `bit`, merging
    runs of 2**stage in the direction `flip` ("alternate": by bit `stage` of the index, else descending or
    not); ("reduce", k) keeps the larger (descending) or smaller of elements i and i + k of each pair of
    runs of k, halving the row."""
    steps = []

    def merge(stage: int, flip):
        steps.extend(("swap", stage, bit, flip) for bit in reversed(range(stage)))
    for stage in range(1, log_k + 1):
        merge(stage, "alternate" if stage < log_n else descending)
    for level in range(log_k + 1, log_n + 1):
        steps.append(("reduce", 1 << log_k))
        merge(log_k, "alternate" if level < log_n else descending)
    return steps


def _bitonic(gen: Context, op: Op, construct: str, k: int | None, descending: bool, indent: int):
    x, v = op.operand("x"), op.result
    check_placement(gen, op, construct)
    shape = tuple(x.type.shape)
    n = shape[-1]
    log_n = _log2(n)
    log_k = log_n if k is None else _log2(k)
    if log_n is None or log_k is None or log_k > log_n:
        gen.error(construct, op, f"the sorted axis ({n}) and k must be powers of two, k no larger than the axis")
    elem = x.type.elem
    out_shape = shape[:-1] + (1 << log_k,)
    steps = network(log_n, log_k, descending)
    base = v.name or ("topk" if k is not None else "sorted")
    # a pair of buffers the steps write in turn; the last step writes the result: one of the pair when it
    # has the tile's shape (the pair ordered so that it is the one named after the value), else its own
    if out_shape == shape:
        out = gen.alloc(base, shape, elem, "shared")
        other = gen.alloc(base + "_swap", shape, elem, "shared") if steps else out
        pair = [out, other] if len(steps) % 2 == 0 else [other, out]
    else:
        pair = [gen.alloc(base + "_a", shape, elem, "shared"), gen.alloc(base + "_b", shape, elem, "shared")]
        out = gen.alloc(base, out_shape, elem, "shared")
    if _in_loop(op):            # the previous iteration's readers of the pair are done
        gen.emit(BARRIER, indent)
    gen.fill(pair[0], x, indent)
    gen.emit(BARRIER, indent)
    idx = loop_indices(len(shape))
    rows, i = idx[:-1], idx[-1]
    length, cur = n, 0
    for s, step in enumerate(steps):
        src = pair[cur]
        dst = out if s == len(steps) - 1 else pair[1 - cur]
        if step[0] == "reduce":
            run = step[1]
            length //= 2
            first = f"{i} // {run} * {2 * run} + {i} % {run}" if run > 1 else f"{i} * 2"
            a, b = element(src, rows + [first]), element(src, rows + [f"{first} + {run}"])
            note = f"the {'larger' if descending else 'smaller'} of elements {first} and {first} + {run}"
            gen.emit(parallel_header(idx, shape[:-1] + (length,)) + f"  # {note}", indent)
            gen.emit(f"{element(dst, rows + [i])} = {'T.max' if descending else 'T.min'}({a}, {b})", indent + 1)
        else:
            _, stage, bit, flip = step
            d = 1 << bit
            x_, y_ = element(src, rows + [i]), element(src, rows + [f"{i} ^ {d}"])
            # the element keeps the larger of the two when it is the upper one of its pair in an ascending
            # run or the lower one in a descending run (Triton's `flip ^ right`)
            if flip == "alternate":
                  order = "alternately ascending and descending"
                  larger = f"(({i} & {1 << stage}) == 0) != (({i} & {d}) == 0)"
            else:
                  order = "descending" if flip else "ascending"
                  larger = f"({i} & {d}) {'==' if flip else '!='} 0"
            note = f"runs of {1 << stage}, {order}: element {i} against {i} ^ {d}"
            gen.emit(parallel_header(idx, shape[:-1] + (length,)) + f"  # {note}", indent)
            gen.emit(f"{element(dst, rows + [i])} = T.if_then_else(({_key(x_, elem)} > {_key(y_, elem)}) "
                     f"!= ({larger}), {y_}, {x_})", indent + 1)
        gen.emit(BARRIER, indent)
        cur = 1 - cur
    gen.buffers[v.id] = Buffer(out, out_shape, elem, "shared", gen.blocks[-1])


def _key(e: str, elem: ir_types.DType) -> str:
    """How an element is compared: fp8 through fp32 (CUDA has no fp8 comparison), booleans as integers."""
    if elem.is_fp8:
        return f"T.cast({e}, 'float32')"
    if elem.is_bool:
        return f"T.cast({e}, 'int8')"
    return e


def _in_loop(op: Op) -> bool:
    return innermost_loop(op) is not None


_STEPS_APART = ("its steps are separated by block-wide barriers, which TileLang's producer and consumer warps of a "
                "pipelined loop do not all reach; compute it outside the loop or drop num_stages")


def check_placement(gen: Context, op: Op, construct: str, why: str = _STEPS_APART):
    if any(id(loop) in gen.pipelined for loop in enclosing_loops(op)):
        gen.error(construct + " in a pipelined loop", op, why)


@RULE_SET.rule(ops.BARRIER, role="statement")
def debug_barrier(gen: Context, op: Op, indent: int):
    # a kernel's own barrier (between its writes to global memory and its reads of them): written out as the
    # steps' barriers are, and refused where they are
    check_placement(gen, op, "tl.debug_barrier",
                     "a block-wide barrier, which TileLang's producer and consumer warps of a pipelined loop do not "
                     "all reach; put it outside the loop or drop num_stages")
    gen.emit(BARRIER, indent)


@RULE_SET.rule(ops.GATHER, role="statement")
def gather(gen: Context, op: Op, indent: int):
    """tl.gather: the source through a shared-memory copy (a fragment element lives on one thread; an index
    may ask for any element), each result element read from it where its index points along the axis."""
    src, index, v = op.operand("src"), op.operand("index"), op.result
    check_placement(gen, op, "tl.gather")
    axis = op.attrs["axis"]
    base = v.name or "gathered"
    staged = gen.alloc(base + "_src", src.type.shape, src.type.elem, "shared")
    out = gen.alloc(base, index.type.shape, src.type.elem, "fragment")
    if _in_loop(op):            # the previous iteration's readers of the copy are done
        gen.emit(BARRIER, indent)
    gen.fill(staged, src, indent)
    gen.emit(BARRIER, indent)
    idx = loop_indices(len(index.type.shape))
    at = list(idx)
    at[axis] = gen.elem(index, idx)
    gen.emit(parallel_header(idx, index.type.shape), indent)
    gen.emit(f"{element(out, idx)} = {element(staged, at)}", indent + 1)
    gen.buffers[v.id] = Buffer(out, tuple(index.type.shape), src.type.elem, "fragment", gen.blocks[-1])


@RULE_SET.rule(ops.HISTOGRAM, role="statement")
def histogram(gen: Context, op: Op, indent: int):
    x, mask = op.operand("x"), op.operand("mask")
    v = op.result
    check_placement(gen, op, "tl.histogram")
    bins = op.attrs["num_bins"]
    (n,) = x.type.shape
    elem = x.type.elem
    base = v.name or "hist"
    hist = gen.alloc(base, (bins,), ir_types.i32, "shared")
    slot = gen.alloc(base + "_bin", (n,), ir_types.i32, "shared")
    (i,) = loop_indices(1)
    if _in_loop(op):            # the previous iteration's readers of the counts are done
        gen.emit(BARRIER, indent)
    gen.emit(f"T.clear({hist})", indent)
    gen.emit(parallel_header([i], (n,)) + "  # the bin of each element, -1 where it is not counted", indent)
    value = gen.elem(x, [i])
    if elem.bits < 32:           # compared and used as an index in int32 (num_bins may not fit the dtype)
        value = f"T.cast({value}, {tl_dtype(ir_types.i32)!r})"
    value = gen.once(value, base + "_value", indent + 1)
    # compiled Triton's bin: the value's low bits (the bins padded to 32, one per lane of a warp); the bins
    # past num_bins are dropped
    low = f"T.cast({value}, {tl_dtype(ir_types.i32)!r})" if elem.bits > 32 or elem == ir_types.u32 else value
    bin_ = f"({low} & {max(bins, 32) - 1})"
    counted = f"({bin_} < {bins})" if bins < 32 else None
    if mask is not None:
        counted = gen.elem(mask, [i]) + (f" & {counted}" if counted else "")
    written = f"T.if_then_else({counted}, {bin_}, -1)" if counted else bin_
    gen.emit(f"{slot}[{i}] = {written}", indent + 1)
    gen.emit(BARRIER, indent)
    # a loop reading shared memory only: each element on one thread, so each is counted once
    gen.emit(parallel_header([i], (n,)), indent)
    gen.emit(f"if {slot}[{i}] >= 0:", indent + 1)
    gen.emit(f"T.atomic_add({hist}[{slot}[{i}]], 1)", indent + 2)
    gen.emit(BARRIER, indent)
    gen.buffers[v.id] = Buffer(hist, (bins,), ir_types.i32, "shared", gen.blocks[-1])
