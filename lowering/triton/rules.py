"""The Triton backend's rule table: per IR op, the function writing it as a Triton expression or statement,
and what becomes of each attribute. Triton is the language the kernels are written in, so nearly every
attribute is written back as the user gave it."""
from __future__ import annotations

from ..ir import ops
from ..rules import Rules

RULES = Rules("triton", roles=("expression", "statement"))

_AS_WRITTEN = "written back as the kernel gave it"
for _op, _attrs in {
    ops.CONST: ("value",), ops.PROGRAM_ID: ("axis",), ops.NUM_PROGRAMS: ("axis",), ops.ARANGE: ("start", "end"),
    ops.SPLAT: ("shape",), ops.BROADCAST: ("shape",), ops.EXPAND_DIMS: ("axis",), ops.RESHAPE: ("shape",),
    ops.TRANS: ("perm",), ops.HINT: ("kind", "values"), ops.SPLIT: ("half",),
    ops.SCAN: ("kind", "axis", "reverse"), ops.SORT: ("axis", "descending"), ops.TOPK: ("k", "axis"),
    ops.GATHER: ("axis",),
    ops.HISTOGRAM: ("num_bins",), ops.INLINE_ASM: ("asm", "constraints", "is_pure", "pack"),
    ops.PRINT: ("prefix", "hex"), ops.ASSERT: ("msg",), ops.CMP: ("pred",), ops.UNARY: ("op",),
    ops.CAST: ("dtype", "bitcast"),
    ops.LOAD: ("cache_modifier", "eviction_policy", "volatile"), ops.STORE: ("cache_modifier", "eviction_policy"),
    ops.ATOMIC: ("kind", "sem", "scope"), ops.ATOMIC_CAS: ("sem", "scope"),
    ops.REDUCE: ("kind", "axis", "keep_dims"),
    ops.DOT: ("out_dtype", "input_precision", "max_num_imprecise_acc"),
    ops.FOR: ("kind", "num_stages", "loop_unroll_factor", "warp_specialize", "flatten", "disallow_acc_multi_buffer",
              "disable_licm"),
}.items():
    RULES.honors(_op, *_attrs, how=_AS_WRITTEN)
RULES.honors(ops.DESCRIPTOR_ATOMIC, "kind", how="desc.atomic_<kind>, as the kernel wrote it (a TMA reduction)")
RULES.honors(ops.BINARY, "op", how="Python operators and tl.maximum / tl.minimum / tl.umulhi")
RULES.honors(ops.LIBDEVICE, "fn", how="libdevice.<fn>, from triton.language.extra.cuda")
RULES.honors(ops.LOAD, "is_async", "async", "async_stages",
             how="the loop around the load is pipelined; Triton's pipeliner picks the loads it issues ahead")
RULES.honors(ops.FOR, "async_stages", "async_raised_from", how="the loop's num_stages, raised for is_async loads")
RULES.honors(ops.RAW_CALL, "fn", "threads", "outputs", how="an element-wise raw function inlined as tile code")
RULES.honors(ops.RAW_CALL, "layout", how="an element-wise function's result does not depend on its layout")
RULES.honors(ops.ALLOC, "scope", "layout",
             how="a buffer is a register tile (stock Triton has no explicit shared memory; it stages through "
                 "shared memory itself), so its placement hints do not apply")
RULES.honors(ops.COMBINE_SCAN, "axis", "reverse", how=_AS_WRITTEN + ", in tl.associative_scan")
RULES.honors(ops.COMBINE_REDUCE, "axis", "keep_dims", how=_AS_WRITTEN + ", in tl.reduce")
RULES.honors(ops.COMBINE_SCAN, "fn", how="names the module-level @triton.jit helper the combine function becomes")
RULES.honors(ops.COMBINE_REDUCE, "fn", how="names the module-level @triton.jit helper the combine function becomes")
RULES.drops_everywhere("warp_group", why="stock Triton has no warp-group roles: every warp runs the warp groups' code "
                                         "in program order (the same results; the buffers between them are register "
                                         "tiles)")
RULES.drops_everywhere("turn", why="with no warp-group roles there are no turns to take: the code runs in program "
                                   "order")
