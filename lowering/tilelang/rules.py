"""The TileLang backend's rule table: per IR op, the statement rule that emits it and/or the expression
rule that writes one element of it as a TIR expression, and what becomes of each of its attributes.

The rules themselves live with their concern (expressions, memory, reductions, control, buffers, raw_call)
and register here when codegen.py imports them. The attribute table below says, for every attribute of
every op, whether TileLang honors it, drops it with a note (`RULES.check_attributes` writes the notes) or
refuses it (a lowering error naming the attribute and the kernel's line)."""
from __future__ import annotations

from ..ir.ops import CACHE_HINTS
from ..rules import Rules

RULES = Rules("tilelang", roles=("statement", "expression"))

# -- element-wise ops --------------------------------------------------------------------------------------
RULES.honors("const", "value", how="a TIR literal of the result's dtype")
RULES.honors("program_id", "axis", how="the T.Kernel block index bx, by or bz")
RULES.honors("num_programs", "axis", how="the grid's extent, a constant (TileLang compiles per grid)")
RULES.honors("arange", "start", "end", how="the T.Parallel index plus start, over end - start elements")
RULES.honors("splat", "shape", how="every element reads the scalar")
RULES.honors("broadcast", "shape", how="unit axes read index 0")
RULES.honors("expand_dims", "axis", how="the unit axis is left out of the operand's index")
RULES.honors("reshape", "shape", how="the element's row-major flat index, split over the operand's shape")
RULES.honors("trans", "perm", how="the index is permuted")
RULES.honors("split", "half", how="the operand's element at that index of its last axis")
RULES.drops("hint", "kind", "values", why="hint dropped, TileLang derives alignment and contiguity from the "
                                          "index expressions itself")
RULES.honors("binary", "op", how="TIR operators; div and rem truncate like C (T.truncdiv, T.truncmod, T.fmod), "
                                 "maximum and minimum are T.max and T.min")
RULES.honors("cmp", "pred", how="TIR comparisons")
RULES.honors("unary", "op", how="TIR operators and T.* math; fp32 exp and log as Triton computes them (exp2, log2)")
RULES.honors("cast", "dtype", how="T.cast to the TIR dtype")
RULES.honors("cast", "bitcast", how="T.reinterpret")
RULES.honors("libdevice", "fn", how="the TIR intrinsic of the same CUDA function (T.tanh, T.pow, ...); a function "
                                    "TIR has none for is a lowering error naming it")

# -- global memory -----------------------------------------------------------------------------------------
for _op in ("load", "store"):
    RULES.drops(_op, *CACHE_HINTS, why="hint dropped, TileLang's loads and stores into registers take no cache hints")
RULES.refuses("load", "volatile", why="TileLang's reads cannot be made volatile (its language has no volatile load)")
RULES.honors("load", "is_async", how="a pipelined is_async load is a stage-0 copy of its T.Pipelined loop; the "
                                     "access report says how each one was issued")
RULES.honors("load", "async", how="'pipelined': a stage-0 copy of the loop's T.Pipelined; 'plain: ...': a plain read")
RULES.honors("load", "async_stages", how="the num_stages of the T.Pipelined loop the load is a stage of")
RULES.honors("atomic", "kind", how="T.atomic_add, T.atomic_max, T.atomic_min or T.atomic_or per element; the value "
                                  "an add, max or min returns is T.atomic_*(return_prev=True), into a shared buffer "
                                  "(a fragment would repeat the atomic in each thread holding a copy of the "
                                  "element; a scalar atomic: one element every thread reads), 0 where "
                                  "the mask is false; T.atomic_or returns nothing (using its value is an error)")
RULES.refuses("atomic", "kind", why="TileLang 0.1.15 has no atomic and, xor or exchange (T.atomic_add, max, min and "
                                    "or only)", when=lambda v: v in ("and", "xor", "xchg"))
RULES.unsupported("atomic_cas", "TileLang 0.1.15 has no compare-and-swap (T.atomic_* are add, max, min and or)")
# Triton's atomics default to acq_rel, TileLang's (an empty memory_order) to relaxed. The difference shows only
# where one block acquires what another released, which in a kernel needs a value an atomic returns: such a
# kernel gets acq_rel written out on every atomic that names no sem, any other keeps TileLang's default.
# TileLang's AtomicAdd without return_prev drops the memory order of 32- and 64-bit values (a plain
# atomicAdd); an add with an order is issued as T.atomic_add(return_prev=True), whose AtomicAddRet keeps it.
RULES.honors("atomic", "sem", how="passed as T.atomic_*(memory_order=sem); an empty sem is acq_rel, Triton's "
                                  "default, in a kernel that uses a value an atomic returns, else TileLang's "
                                  "relaxed order, which no block of such a kernel can tell apart (none acquires); "
                                  "an add with an order is issued with return_prev=True, the form that keeps it")
RULES.honors("atomic", "scope", how="TileLang's atomics are device-scoped: 'gpu', and 'cta' (a device-scoped "
                                    "atomic is atomic within the block too)")
RULES.refuses("atomic", "scope", why="TileLang's atomics are device-scoped; a system-scope atomic (seen by the host "
                                     "or other GPUs) cannot be expressed", when=lambda v: v == "sys")

# -- reductions and products -------------------------------------------------------------------------------
RULES.honors("reduce", "kind", how="T.reduce_sum/max/min; argmax/argmin: the extreme, then the least index holding it")
RULES.honors("reduce", "axis", how="the dim= of T.reduce_*")
RULES.honors("reduce", "keep_dims", how="the result's unit axis is left out of its fragment's index")
RULES.honors("dot", "out_dtype", how="the dtype of T.gemm's fragment accumulator")
RULES.honors("dot", "input_precision", how="T.gemm computes fp32 operands in TF32, as 'tf32' asks")
RULES.refuses("dot", "input_precision", why="T.gemm computes fp32 operands in TF32; it has no IEEE fp32 product "
                                            "(use input_precision='tf32', or the Triton backend)",
              when=lambda v: v in ("ieee", "tf32x3"))
RULES.refuses("dot", "max_num_imprecise_acc", why="T.gemm cannot be told how many fp8 products to accumulate "
                                                  "before promoting the sum")
RULES.honors("scan", "kind", how="'sum': T.cumsum (inclusive, as tl.cumsum)")
RULES.refuses("scan", "kind", why="TileLang 0.1.15 has no cumulative product (its scans are T.cumsum and T.cummax)",
              when=lambda v: v == "prod")
RULES.honors("scan", "axis", "reverse", how="the dim= and reverse= of T.cumsum")
RULES.honors("combine_reduce", "axis", "keep_dims", how="as for tl.sum/max/min (a combine function that is a plain "
                                                      "sum, max or min is T.reduce_*; others are refused)")
RULES.honors("combine_scan", "axis", "reverse", how="the dim= and reverse= of T.cumsum (a combine function that is "
                                                   "a plain sum; others are refused)")
for _op in ("combine_reduce", "combine_scan"):
    RULES.honors(_op, "fn", how="only names the combine function; its traced body decides the lowering")

# -- tensor descriptors: each access becomes the masked block window it stands for (T.copy where it can) -----
for _op in ("make_descriptor", "descriptor_load", "descriptor_store", "descriptor_atomic"):
    RULES.rewritten(_op, by="transforms.expand_descriptors")
RULES.honors("descriptor_atomic", "kind", how="tl.atomic_<kind> over the window, masked to the tensor")

# -- what TileLang has no counterpart for -----------------------------------------------------------------
RULES.unsupported("sort", "TileLang 0.1.15 has no sort (tl.sort)")
RULES.unsupported("topk", "TileLang 0.1.15 has no top-k selection (tl.topk)")
RULES.unsupported("histogram", "TileLang 0.1.15 has no histogram (tl.histogram); count with tl.atomic_add instead")
RULES.unsupported("inline_asm", "TileLang kernels are not written in PTX: tl.inline_asm_elementwise has no faithful "
                                "lowering there")
RULES.unsupported("print", "TileLang's T.print prints one buffer or value from chosen threads, not Triton's "
                           "per-element lines; tl.device_print is not lowered there")

# -- debugging -------------------------------------------------------------------------------------------
RULES.honors("assert", "msg", how="the message of TileLang's tl.device_assert_with_msg builtin (with the kernel's "
                                  "file:line), on every element of the condition; written only when Triton's debug "
                                  "mode (TRITON_DEBUG) is on as the kernel is lowered, as Triton keeps it only then")

# -- control flow ------------------------------------------------------------------------------------------
RULES.honors("for", "kind", how="T.serial, or T.Pipelined where the loop is pipelined")
RULES.honors("for", "num_stages", how="T.Pipelined(num_stages=...) from 2 stages on, else T.serial")
RULES.drops("for", "loop_unroll_factor", "warp_specialize", "flatten", "disallow_acc_multi_buffer", "disable_licm",
            why="hint dropped, TileLang's T.serial and T.Pipelined loops take no such hint")
RULES.honors("for", "async_stages", how="the num_stages of the loop's T.Pipelined, for its is_async loads")
RULES.honors("for", "async_raised_from", how="pipeline_async_loads says in the notes which num_stages it raised")

# -- tle.call ----------------------------------------------------------------------------------------------
RULES.honors("raw_call", "fn", how="its body, rendered as thread-level TIR on shared copies of the argument tiles")
RULES.honors("raw_call", "threads", how="the kernel's own threads (their count must be 32 * num_warps), split "
                                        "per axis from T.get_thread_binding")
RULES.honors("raw_call", "outputs", how="each written argument gets a fresh shared copy, the call's result")
RULES.honors("raw_call", "layout", how="TileLang infers shared layouts itself; a non-row-major order is reported "
                                       "in the notes as a hint")

# -- tle.gpu buffers ---------------------------------------------------------------------------------------
RULES.honors("alloc", "scope", how="'smem': T.alloc_shared")
RULES.refuses("alloc", "scope", why="TileLang keeps tle.gpu buffers in shared memory only",
              when=lambda v: v != "smem")
RULES.drops("alloc", "layout", why="layout hint dropped, TileLang chooses shared layouts itself")
