"""The TileLang backend's rule table: per IR op, the statement rule that emits it and/or the expression
rule that writes one element of it as a TIR expression, and what becomes of each of its attributes.

The rules themselves live with their concern (expressions, memory, reductions, control, buffers, raw_call),
each module's in a RuleSet that codegen.py includes here (`RULES.include`). The attribute table below says,
for every attribute of every op, whether TileLang honors it, drops it with a note (`RULES.check_attributes`
writes the notes) or refuses it (a lowering error naming the attribute and the kernel's line)."""
from __future__ import annotations

from ..ir import ops
from ..ir.ops import CACHE_HINTS, InputPrecision, MemScope, Storage
from ..rules import Rules

RULES = Rules("tilelang", roles=("statement", "expression"))

# -- element-wise ops --------------------------------------------------------------------------------------
RULES.honors(ops.CONST, "value", how="a TIR literal of the result's dtype")
RULES.honors(ops.PROGRAM_ID, "axis", how="the T.Kernel block index bx, by or bz")
RULES.honors(ops.NUM_PROGRAMS, "axis", how="the grid's extent, a constant (TileLang compiles per grid)")
RULES.honors(ops.ARANGE, "start", "end", how="the T.Parallel index plus start, over end - start elements")
RULES.honors(ops.SPLAT, "shape", how="every element reads the scalar")
RULES.honors(ops.BROADCAST, "shape", how="unit axes read index 0")
RULES.honors(ops.EXPAND_DIMS, "axis", how="the unit axis is left out of the operand's index")
RULES.honors(ops.RESHAPE, "shape", how="the element's row-major flat index, split over the operand's shape")
RULES.honors(ops.TRANS, "perm", how="the index is permuted")
RULES.honors(ops.SPLIT, "half", how="the operand's element at that index of its last axis")
RULES.drops(ops.HINT, "kind", "values", why="hint dropped, TileLang derives alignment and contiguity from the "
                                            "index expressions itself")
RULES.honors(ops.BINARY, "op", how="TIR operators; div and rem truncate like C (T.truncdiv, T.truncmod, T.fmod), "
                                   "maximum and minimum are T.max and T.min")
RULES.honors(ops.CMP, "pred", how="TIR comparisons")
RULES.honors(ops.UNARY, "op", how="TIR operators and T.* math; fp32 exp and log as Triton computes them (exp2, log2)")
RULES.honors(ops.CAST, "dtype", how="T.cast to the TIR dtype")
RULES.honors(ops.CAST, "bitcast", how="T.reinterpret")
RULES.honors(ops.LIBDEVICE, "fn", how="the TIR intrinsic of the same CUDA function (T.tanh, T.pow, ...); a function "
                                      "TIR has none for is a lowering error naming it")

# -- global memory -----------------------------------------------------------------------------------------
for _op in (ops.LOAD, ops.STORE):
    RULES.drops(_op, *CACHE_HINTS, why="hint dropped, TileLang's loads and stores into registers take no cache hints")
RULES.refuses(ops.LOAD, "volatile", why="TileLang's reads cannot be made volatile (its language has no volatile load)")
RULES.honors(ops.LOAD, "is_async", how="a pipelined is_async load is a stage-0 copy of its T.Pipelined loop; the "
                                       "access report says how each one was issued")
RULES.honors(ops.LOAD, "async", how="'pipelined': a stage-0 copy of the loop's T.Pipelined; 'plain: ...': a plain read")
RULES.honors(ops.LOAD, "async_stages", how="the num_stages of the T.Pipelined loop the load is a stage of")
RULES.honors(ops.ATOMIC, "kind", how="T.atomic_add, T.atomic_max, T.atomic_min or T.atomic_or per element (an fp32 "
                                    "tile add in a warp group, relaxed, unread, over a box masked at most by the "
                                    "tensor's edge: one TMA reduction from shared memory); and, xor, "
                                    "xchg (and an or whose value is read) are device functions the kernel brings "
                                    "with T.import_source (cuda::atomic_ref fetch_and, fetch_xor, exchange, fetch_or: "
                                    "one atom instruction each, as Triton's), called through T.call_extern on the "
                                    "element's address; the value an atomic returns goes into a shared buffer (a "
                                    "fragment would repeat the atomic in each thread holding a copy of the element; "
                                    "a scalar atomic: one element every thread reads), 0 where the mask is false")
RULES.honors(ops.ATOMIC_CAS, "sem", how="the cuda::memory_order template argument of tle_atomic_cas, a device "
                                        "function the kernel brings (cuda::atomic_ref compare_exchange_strong; a "
                                        "16-bit element: PTX atom.cas.b16) called through T.call_extern per element, "
                                        "its previous value in a shared buffer; an empty sem as for tl.atomic_*")
RULES.honors(ops.ATOMIC_CAS, "scope", how="device-scoped, as for tl.atomic_*: 'gpu', and 'cta'")
RULES.refuses(ops.ATOMIC_CAS, "scope", why="TileLang's atomics are device-scoped; a system-scope atomic (seen by the "
                                           "host or other GPUs) cannot be expressed", when=lambda v: v is MemScope.SYS)
# Triton's atomics default to acq_rel, TileLang's (an empty memory_order) to relaxed. The difference shows only
# where one block acquires what another released, which in a kernel needs a value an atomic returns: such a
# kernel gets acq_rel written out on every atomic that names no sem, any other keeps TileLang's default.
# TileLang's AtomicAdd without return_prev drops the memory order of 32- and 64-bit values (a plain
# atomicAdd); an add with an order is issued as T.atomic_add(return_prev=True), whose AtomicAddRet keeps it.
RULES.honors(ops.ATOMIC, "sem", how="passed as T.atomic_*(memory_order=sem), or as the cuda::memory_order template "
                                    "argument of a device function; an empty sem is acq_rel, Triton's default, in a "
                                    "kernel that uses a value an atomic returns, else TileLang's relaxed order, which "
                                    "no block of such a kernel can tell apart (none acquires); an add with an order "
                                    "is issued with return_prev=True, the form that keeps it")
RULES.honors(ops.ATOMIC, "scope", how="TileLang's atomics are device-scoped: 'gpu', and 'cta' (a device-scoped "
                                      "atomic is atomic within the block too)")
RULES.refuses(ops.ATOMIC, "scope", why="TileLang's atomics are device-scoped; a system-scope atomic (seen by the host "
                                       "or other GPUs) cannot be expressed", when=lambda v: v is MemScope.SYS)

# -- reductions and products -------------------------------------------------------------------------------
RULES.honors(ops.REDUCE, "kind", how="T.reduce_sum/max/min; argmax/argmin: the extreme, then the least index "
                                     "holding it")
RULES.honors(ops.REDUCE, "axis", how="the dim= of T.reduce_*")
RULES.honors(ops.REDUCE, "keep_dims", how="the result's unit axis is left out of its fragment's index")
RULES.honors(ops.DOT, "out_dtype", how="the dtype of T.gemm's fragment accumulator")
RULES.honors(ops.DOT, "input_precision", how="'tf32': T.gemm, which computes fp32 operands in TF32; 'ieee': no "
                                                 "T.gemm but an fp32 multiply-add loop over K for each element, on the "
                                                 "CUDA cores, as Triton's IEEE product")
RULES.refuses(ops.DOT, "input_precision", why="T.gemm computes fp32 operands in TF32 and has no three-pass TF32 "
                                              "product (use 'tf32', or 'ieee' for full fp32 products)",
              when=lambda v: v is InputPrecision.TF32X3)
RULES.refuses(ops.DOT, "max_num_imprecise_acc", why="T.gemm cannot be told how many fp8 products to accumulate "
                                                    "before promoting the sum")
RULES.honors(ops.SCAN, "kind", how="'sum': T.cumsum (inclusive, as tl.cumsum) of 1-D and 2-D tiles; 'prod', and sums "
                                  "of more axes: a log-step inclusive scan of * (+) over two shared buffers in turn")
RULES.honors(ops.SCAN, "axis", "reverse", how="the dim= and reverse= of T.cumsum; the log-step scan's axis, and "
                                              "the side it combines from (from the end: the left operand is the "
                                              "later part, as Triton's flip-scan-flip)")
RULES.honors(ops.COMBINE_REDUCE, "axis", "keep_dims", how="as for tl.sum/max/min where the combine function is a plain "
                                                        "sum, max or min (T.reduce_*); any other: a tree combining "
                                                        "neighbours in order along the axis in shared memory, the "
                                                        "result stored without the axis")
RULES.honors(ops.COMBINE_SCAN, "axis", "reverse", how="the dim= and reverse= of T.cumsum where the combine function is "
                                                     "a plain sum; any other: a log-step inclusive scan along the "
                                                     "axis in shared memory, from the end when reverse")
for _op in (ops.COMBINE_REDUCE, ops.COMBINE_SCAN):
    RULES.honors(_op, "fn", how="names the combine function; its traced body is written as TIR expressions in the "
                                "scan's or reduction's loops (or picks T.cumsum / T.reduce_* where it is a plain "
                                "sum, max or min)")

# -- sorting and counting, written out in TileLang (sorting.py) -------------------------------------------
RULES.honors(ops.SORT, "axis", how="the last axis, the only one Triton sorts: a bitonic network over it, each row "
                                   "of the tile on its own")
RULES.honors(ops.SORT, "descending", how="the direction of the network's last merge, as in Triton's sort_impl")
RULES.honors(ops.TOPK, "k", how="runs of k sorted, then halved by keeping the larger of pairs of runs until k "
                                "remain, largest first (Triton's sort_impl)")
RULES.honors(ops.TOPK, "axis", how="the last axis, the only one Triton selects along")
RULES.honors(ops.GATHER, "axis", how="the source tile copied to shared memory, then each result element read from it "
                                   "at its index along the axis")
RULES.honors(ops.HISTOGRAM, "num_bins", how="a zeroed shared int32 buffer of num_bins counts, T.atomic_add per "
                                            "element into the bin of its low log2(max(num_bins, 32)) bits where that "
                                            "bin is below num_bins, as compiled Triton counts (no range check)")

# -- tensor descriptors: each access becomes the masked block window it stands for (T.copy where it can) -----
for _op in (ops.MAKE_DESCRIPTOR, ops.DESCRIPTOR_LOAD, ops.DESCRIPTOR_STORE, ops.DESCRIPTOR_ATOMIC):
    RULES.rewritten(_op, by="transforms.expand_descriptors")
RULES.honors(ops.DESCRIPTOR_ATOMIC, "kind", how="tl.atomic_<kind> over the window, masked to the tensor")

# -- what TileLang has no counterpart for -----------------------------------------------------------------
RULES.honors(ops.INLINE_ASM, "asm", "constraints", how="the PTX in asm() of a device function of the kernel's CUDA "
                                                       "source, with the same constraints, called for each element "
                                                       "(inline_asm.py)")
RULES.honors(ops.INLINE_ASM, "is_pure", how="asm volatile unless pure")
RULES.honors(ops.INLINE_ASM, "pack", how="one element per asm")
RULES.refuses(ops.INLINE_ASM, "pack", why="TileLang's lowering runs the asm once per element, with 32- or 64-bit "
                                          "operands; Triton's pack hands one asm several narrow elements in a register",
              when=lambda v: v != 1)

# -- debugging -------------------------------------------------------------------------------------------
RULES.honors(ops.PRINT, "prefix", how="written into the printf format of Triton's line (pid (x, y, z) idx (i, j)"
                                      " prefix: value), spaced and ended with ': ' as Triton does; a tile prints each "
                                      "element once (from a shared copy, one thread per element; Triton prints an "
                                      "element once per thread holding a copy), a scalar once per thread (as Triton); "
                                      "lines reach stdout in the GPU's order")
RULES.refuses(ops.PRINT, "prefix", why="Triton writes the prefix into printf's format string, where a '%' reads an "
                                       "argument that is not there", when=lambda v: "%" in v)
RULES.honors(ops.PRINT, "hex", how="Triton's 0x%0<n>x of the value as printf is given it: integers widened to 32 "
                                   "bits, 16- and 32-bit floats widened to double (the low 32 bits of it printed), "
                                   "fp64 its bits")
RULES.honors(ops.ASSERT, "msg", how="the message of TileLang's tl.device_assert_with_msg builtin (with the kernel's "
                                    "file:line), on every element of the condition; written only when Triton's debug "
                                    "mode (TRITON_DEBUG) is on as the kernel is lowered, as Triton keeps it only then")

# -- control flow ------------------------------------------------------------------------------------------
RULES.honors(ops.FOR, "kind", how="T.serial, or T.Pipelined where the loop is pipelined")
RULES.honors(ops.FOR, "num_stages", how="T.Pipelined(num_stages=...) from 2 stages on, else T.serial")
RULES.drops(ops.FOR, "loop_unroll_factor", "flatten", "disallow_acc_multi_buffer", "disable_licm",
            why="hint dropped, TileLang's T.serial and T.Pipelined loops take no such hint")
RULES.honors(ops.FOR, "warp_specialize", how="False: the kernel is compiled with TileLang's "
             "tl.disable_warp_specialized (a switch of the whole kernel in TileLang)")
RULES.drops(ops.FOR, "warp_specialize", why="True is TileLang's own choice: it splits producer and consumer warps by "
            "itself where its pipelined copies allow (False is honored: tl.disable_warp_specialized)",
            when=lambda v: v is True)
RULES.honors(ops.FOR, "async_stages", how="the num_stages of the loop's T.Pipelined, for its is_async loads")
RULES.honors(ops.FOR, "async_raised_from", how="pipeline_async_loads says in the notes which num_stages it raised")

# -- tle.call ----------------------------------------------------------------------------------------------
RULES.honors(ops.RAW_CALL, "fn", how="its body, rendered as thread-level TIR on shared copies of the argument tiles")
RULES.honors(ops.RAW_CALL, "threads", how="the kernel's own threads (their count must be 32 * num_warps), split "
                                          "per axis from T.get_thread_binding")
RULES.honors(ops.RAW_CALL, "outputs", how="each written argument gets a fresh shared copy, the call's result")
RULES.honors(ops.RAW_CALL, "layout", how="TileLang infers shared layouts itself; a non-row-major order is reported "
                                         "in the notes as a hint")

# -- tle.gpu buffers ---------------------------------------------------------------------------------------
RULES.honors(ops.ALLOC, "scope", how="'smem': T.alloc_shared")
RULES.refuses(ops.ALLOC, "scope", why="TileLang keeps tle.gpu buffers in shared memory only",
              when=lambda v: v is not Storage.SMEM)
RULES.drops(ops.ALLOC, "layout", why="layout hint dropped, TileLang chooses shared layouts itself")
RULES.honors_everywhere("warp_group", how="the op runs in its warp group's branch of the block (threads 128*k to "
                                          "128*k+127), which synchronizes with the others through mbarriers "
                                          "(warp_groups.py)")
RULES.honors_everywhere("turn", how="the group waits for its turn (an mbarrier the previous group's turn arrives "
                                    "on) before the block's first op, and hands the turn on after its last "
                                    "(warp_groups.py)")
