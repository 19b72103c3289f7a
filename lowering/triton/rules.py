"""The Triton backend's rule table: per IR op, the function writing it as a Triton expression or statement,
and what becomes of each attribute. Triton is the language the kernels are written in, so nearly every
attribute is written back as the user gave it."""
from __future__ import annotations

from ..rules import Rules

RULES = Rules("triton", roles=("expression", "statement"))

_AS_WRITTEN = "written back as the kernel gave it"
for _op, _attrs in {
    "const": ("value",), "program_id": ("axis",), "num_programs": ("axis",), "arange": ("start", "end"),
    "splat": ("shape",), "broadcast": ("shape",), "expand_dims": ("axis",), "reshape": ("shape",),
    "trans": ("perm",), "hint": ("kind", "values"), "split": ("half",),
    "scan": ("kind", "axis", "reverse"), "sort": ("axis", "descending"), "topk": ("k", "axis"),
    "histogram": ("num_bins",), "inline_asm": ("asm", "constraints", "is_pure", "pack"), "print": ("prefix", "hex"),
    "assert": ("msg",), "cmp": ("pred",), "unary": ("op",), "cast": ("dtype", "bitcast"),
    "load": ("cache_modifier", "eviction_policy", "volatile"), "store": ("cache_modifier", "eviction_policy"),
    "atomic": ("kind", "sem", "scope"), "atomic_cas": ("sem", "scope"), "reduce": ("kind", "axis", "keep_dims"),
    "dot": ("out_dtype", "input_precision", "max_num_imprecise_acc"),
    "for": ("kind", "num_stages", "loop_unroll_factor", "warp_specialize", "flatten", "disallow_acc_multi_buffer",
            "disable_licm"),
}.items():
    RULES.honors(_op, *_attrs, how=_AS_WRITTEN)
RULES.honors("descriptor_atomic", "kind", how="desc.atomic_<kind>, as the kernel wrote it (a TMA reduction)")
RULES.honors("binary", "op", how="Python operators and tl.maximum / tl.minimum / tl.umulhi")
RULES.honors("libdevice", "fn", how="libdevice.<fn>, from triton.language.extra.cuda")
RULES.honors("load", "is_async", "async", "async_stages",
             how="the loop around the load is pipelined; Triton's pipeliner picks the loads it issues ahead")
RULES.honors("for", "async_stages", "async_raised_from", how="the loop's num_stages, raised for is_async loads")
RULES.honors("raw_call", "fn", "threads", "outputs", how="an element-wise raw function inlined as tile code")
RULES.honors("raw_call", "layout", how="an element-wise function's result does not depend on its layout")
RULES.honors("alloc", "scope", "layout",
             how="a buffer is a register tile (stock Triton has no explicit shared memory; it stages through "
                 "shared memory itself), so its placement hints do not apply")
RULES.honors("combine_scan", "axis", "reverse", how=_AS_WRITTEN + ", in tl.associative_scan")
RULES.honors("combine_reduce", "axis", "keep_dims", how=_AS_WRITTEN + ", in tl.reduce")
RULES.honors("combine_scan", "fn", how="names the module-level @triton.jit helper the combine function becomes")
RULES.honors("combine_reduce", "fn", how="names the module-level @triton.jit helper the combine function becomes")
RULES.drops_everywhere("warp_group", why="stock Triton has no warp-group roles: every warp runs the warp groups' code "
                                         "in program order (the same results; the buffers between them are register "
                                         "tiles)")
RULES.drops_everywhere("turn", why="with no warp-group roles there are no turns to take: the code runs in program "
                                   "order")
