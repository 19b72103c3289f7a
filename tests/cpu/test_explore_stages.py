"""The line maps of the compiler stages (tle/explore/stages.py): the parsers of MLIR locations, PTX `.loc` and CUDA
`#line` directives on small texts written in their forms, then the maps of real stages of two example kernels
(compiled here: Triton for sm_90, TileLang with nvcc)."""
import inspect
import re

import pytest

from kernel_cases import example_kernels, lower_example
from tilelang_oracle import needs_tilelang
from tle.explore import stages
from tle.explore.report import stage_panes
from tle.explore.stages import (cuda_locations, mlir_function_files, mlir_locations, mlir_noted_ops,
                                parse_location, ptx_entry_files, ptx_locations, same_lines, source_lines, stage_notes,
                                through)

GEN = "/cache/triton/k_0123abcd.py"

TTGIR = f"""#blocked = #ttg.blocked<{{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}}>
#loc = loc("{GEN}":9:0)
#loc9 = loc("x_ptr"(#loc))
module attributes {{"ttg.num-warps" = 4 : i32}} {{
  tt.func public @k(%x_ptr: !tt.ptr<f32> loc("x_ptr"(#loc))) attributes {{noinline = false}} {{
    %c0 = arith.constant 0 : i32 loc(#loc1)
    %pid = tt.get_program_id x : i32 loc(#loc5)
    %r = tt.make_range {{end = 4 : i32, start = 0 : i32}} : tensor<4xi32> loc("{GEN}":11:3)
    %acc:2 = scf.for %i = %c0 to %pid step %pid iter_args(%a = %r, %b = %r) -> (tensor<4xi32>, tensor<4xi32>) {{
      %m = arith.maxsi %a, %b : tensor<4xi32> loc(#loc7)
      %s = ttg.local_alloc %m : (tensor<4xi32>) -> !ttg.memdesc<4xi32, #shared, #smem> loc(#loc8)
      scf.yield %m, %m : tensor<4xi32>, tensor<4xi32> loc(#loc3)
    }} {{tt.num_stages = 2 : i32}} loc(#loc6)
    %f = arith.addi %pid, %pid : i32 loc(fused<"fold">[#loc1, #loc4])
    tt.return loc("{GEN}":14:4 to :9)
  }} loc(#loc)
}} loc(#loc)
#loc1 = loc(unknown)
#loc2 = loc("/site-packages/triton/language/standard.py":170:27)
#loc3 = loc("{GEN}":12:8)
#loc4 = loc("{GEN}":13:5)
#loc5 = loc("pid"(#loc10))
#loc6 = loc("acc"(#loc3))
#loc7 = loc(callsite(#loc2 at #loc3))
#loc8 = loc(callsite("{GEN}":15:1 at #loc3))
#loc10 = loc("{GEN}":10:24)
"""


def test_mlir_locations_resolve_aliases_names_call_sites_and_fused_locations():
    lines = TTGIR.splitlines()
    at = {key: next(i for i, ln in enumerate(lines, 1) if key in ln)
          for key in ("get_program_id", "make_range", "scf.for", "maxsi", "local_alloc", "scf.yield", "addi",
                      "tt.return", "arith.constant", "tt.func", "module")}
    locations = mlir_locations(TTGIR)
    assert locations[at["get_program_id"]] == (10,)            # a name around an alias, defined after its use
    assert locations[at["make_range"]] == (11,)                # inline
    assert locations[at["scf.for"]] == (12,)                   # an op with a region: its location ends the region
    assert locations[at["maxsi"]] == (12,)                     # inlined from Triton's library: the call site
    assert locations[at["local_alloc"]] == (15, 12)            # a callee in our file first, then its call site
    assert locations[at["scf.yield"]] == (12,)
    assert locations[at["addi"]] == (13,)                      # fused, with metadata; the unknown part adds nothing
    assert locations[at["tt.return"]] == (14,)                 # a range
    assert at["arith.constant"] not in locations               # unknown
    assert locations[at["tt.func"]] == (9,) and locations[at["module"]] == (9,)
    assert not any(ln.startswith("#") for n, ln in enumerate(lines, 1) if n in locations)   # no alias is an op
    assert mlir_function_files(TTGIR) == {GEN}


def test_only_the_kernels_file_is_mapped():
    # the function compiled from another file: only its own lines there are mapped, none of GEN's
    other = TTGIR.replace(f'loc("{GEN}":9:0)', 'loc("/elsewhere/other.py":9:0)')
    assert set(mlir_locations(other).values()) == {(9,)}
    # a file named by the caller is mapped too, by its name (a copy of the generated file in another folder)
    assert mlir_locations(other, files=["/anywhere/k_0123abcd.py"]) == mlir_locations(TTGIR)


def test_location_forms():
    assert parse_location('loc("a \\"b\\".py":3:4)') == ("file", 'a "b".py', 3)
    assert parse_location("loc(callsite(#loc1 at fused[#loc2, unknown]))") == \
        ("callsite", ("alias", "#loc1"), ("fused", (("alias", "#loc2"), ("unknown",))))
    assert parse_location('loc("name")') == ("name", None)
    with pytest.raises(ValueError):
        parse_location('loc("f.py":3:4')


def test_noted_ops_and_their_source_lines():
    ops = mlir_noted_ops(TTGIR)
    assert list(ops.values()) == ["ttg.local_alloc"]
    gen_to_source = {10: 100, 12: 102, 15: 105}

    class Lowered:
        stages = ("ttgir", "ptx")
        compiled = type("C", (), {"path": GEN, "line_map": gen_to_source})

        def stage(self, name):
            return TTGIR

    notes = stage_notes({"triton": Lowered()}, {"triton"})
    assert notes == {105: ["triton ttgir: ttg.local_alloc (shared memory)"]}
    assert stage_notes({"triton": Lowered()}, set()) == {}


PTX = f"""//
.version 8.7
.target sm_90a
.visible .entry k(
	.param .u64 k_param_0
)
{{
	.reg .b32 	%r<9>;
	.loc	1 9 0                           // k_0123abcd.py:9:0
$L__func_begin0:
	ld.param.b64 	%rd1, [k_param_0];
	.loc	1 13 16                         // k_0123abcd.py:13:16
	// begin inline asm
	{{
	.reg .pred %p;
	@%p1 ld.global.b32 {{ %r1 }}, [ %rd1 + 0 ];
	}}
	// end inline asm
	.loc	2 170 27                        // standard.py:170:27 @[ standard.py:191:40 @[ k_0123abcd.py:16:15 ] ]
	max.f32 	%r2, %r1, %r1;
	.loc	3 5 1, function_name $L__info_string0, inlined_at 1 17 3
	add.s32 	%r3, %r2, 1;
	.loc	4 8 2, function_name $L__info_string1, inlined_at 3 5 1
	add.s32 	%r4, %r3, 1;
	.loc	1 0 7
	mov.u32 	%r5, %r4;
	.loc	1 18 4                          // k_0123abcd.py:18:4
	ret;
}}
	.file	1 "{GEN}"
	.file	2 "/site-packages/triton/language/standard.py"
	.file	3 "/include/helpers.h"
	.file	4 "/include/more.h"
	.section	.debug_abbrev
	{{
.b8 1                                   // Abbreviation Code
	}}
"""


def test_ptx_locs_hold_to_the_next_loc_and_follow_inlining():
    lines = PTX.splitlines()
    by_text = {ln.strip(): n for n, ln in enumerate(lines, 1)}
    locations = ptx_locations(PTX)
    assert ptx_entry_files(PTX) == {GEN}
    assert locations[by_text["ld.param.b64 	%rd1, [k_param_0];"]] == (9,)
    assert locations[by_text["@%p1 ld.global.b32 { %r1 }, [ %rd1 + 0 ];"]] == (13,)     # inside an asm block
    assert locations[by_text["// end inline asm"]] == (13,)
    assert locations[by_text["max.f32 	%r2, %r1, %r1;"]] == (16,)          # Triton's chain in the comment
    assert locations[by_text["add.s32 	%r3, %r2, 1;"]] == (17,)            # nvcc's inlined_at
    assert locations[by_text["add.s32 	%r4, %r3, 1;"]] == (17,)            # inlined at an inlined call
    assert by_text["mov.u32 	%r5, %r4;"] not in locations                  # line 0: no line
    assert locations[by_text["ret;"]] == (18,)
    assert max(locations) < by_text[".file	1 \"" + GEN + "\""]             # nothing after the function's end
    assert by_text["$L__func_begin0:"] in locations and by_text[".reg .b32 	%r<9>;"] not in locations


CUDA = """extern "C" __global__ void k(float* x) {
#line 12 "/cache/tilelang-src/k_0123abcd.py"
  float acc[8];
  if (threadIdx.x == 0) {
    acc[0] = 0.f;
  }
  x[1] = 1.f;
#line 22 "/cache/tilelang-src/k_0123abcd.py"
  #pragma unroll
  for (int i = 0; i < 2; ++i) {
#line 23 "/cache/tilelang-src/k_0123abcd.py"
    float v = x[i];
    if (v > 0.f) {
#line 24 "/cache/tilelang-src/k_0123abcd.py"
      acc[i] = v;
    } else {
      acc[i] = -v;
    }
    acc[i + 2] = v;
  }
  x[0] = acc[0];
  {
#line 600 "/site-packages/tilelang/macro.py"
    tl::wgmma();
  }
#line 30 "/cache/tilelang-src/k_0123abcd.py"
  x[2] = acc[1];
#line 31
  x[3] = acc[2];
}
"""


def test_cuda_line_directives_hold_for_their_statement():
    kept, locations = cuda_locations(CUDA, ["/anywhere/k_0123abcd.py"])
    assert kept.splitlines() == [ln for ln in CUDA.splitlines() if not ln.startswith("#line")]
    rows = kept.splitlines()
    got = {rows[n - 1].strip(): line for n, (line,) in locations.items()}
    assert got["float acc[8];"] == 12 and got["if (threadIdx.x == 0) {"] == 12
    assert got["acc[0] = 0.f;"] == 12
    assert "x[1] = 1.f;" not in got                    # after the if's block closed, the directive's statement ended
    assert got["#pragma unroll"] == 22 and got["for (int i = 0; i < 2; ++i) {"] == 22
    assert got["float v = x[i];"] == 23 and got["if (v > 0.f) {"] == 23
    assert got["acc[i] = v;"] == 24
    assert got["} else {"] == 23 and got["acc[i] = -v;"] == 23   # the block of line 24 closed: the if's line
    assert got["acc[i + 2] = v;"] == 22                # the if of line 23 ended: the loop's line
    assert "x[0] = acc[0];" not in got                 # after the loop: nothing TileLang gave a line
    assert "tl::wgmma();" not in got                   # TileLang's own file
    assert got["x[2] = acc[1];"] == 30 and got["x[3] = acc[2];"] == 31  # a directive without a file keeps it
    assert kept.splitlines()[-1] == "}" and len(rows) not in locations


def test_composing():
    ptx = {1: (5,), 2: (6, 7), 3: (9,)}
    cuda = {5: (30,), 7: (31,)}
    assert through(ptx, cuda) == {1: (30,), 2: (31,)}
    assert source_lines({1: (9, 30), 2: (31,), 3: (8,)}, {30: 100, 31: 101}) == {1: 100, 2: 101}
    assert same_lines("a = workspace_1[i_6];\nb;", "a = workspace_4[i_6];\nb;")
    assert not same_lines("a = 1;", "a = 2;") and not same_lines("a;\nb;", "a;")


# -- the stages of real kernels ---------------------------------------------------------------------------------
def _op_lines(title: str, text: str) -> list[int]:
    """The lines of a stage that are code: TTGIR ops (which end with their location), PTX instructions inside a
    function, CUDA statements."""
    lines = text.splitlines()
    if title.endswith("ttgir"):
        return [n for n, ln in enumerate(lines, 1) if re.search(r"\sloc\(.*\)$", ln.rstrip())
                and not ln.lstrip().startswith(("#", "}"))]
    if title.endswith("ptx"):
        out, depth = [], 0
        for n, ln in enumerate(lines, 1):
            code = ln.split("//")[0].strip()
            if depth > 0 and code.endswith(";") and not code.startswith("."):
                out.append(n)
            depth += code.count("{") - code.count("}")
        return out
    return [n for n, ln in enumerate(lines, 1) if ln.strip().endswith(";")]


def _shares(kernel, lowered) -> dict[str, float]:
    """Pane title -> the share of its code lines mapped to a line of the kernel's def."""
    lines, first = inspect.getsourcelines(kernel.fn)
    last = first + len(lines) - 1
    out = {}
    for pane in stage_panes(lowered, set(lowered)):
        code = _op_lines(pane.title, pane.text)
        inside = [n for n in code if first <= pane.line_map.get(n, 0) <= last]
        out[pane.title] = len(inside) / len(code)
    return out


def _lowered(name):
    kernel = dict(example_kernels())[name]
    lowered = {b: lower_example(kernel, b) for b in ("triton", "tilelang")}
    lowered["tilelang"].stage("cuda")      # without nvcc this raises CompilerUnavailable: the test is skipped
    return kernel, lowered


@needs_tilelang
def test_vector_add_stages_map_to_the_kernels_lines():
    kernel, lowered = _lowered("examples.vector_add.add_kernel")
    panes = stage_panes(lowered, set(lowered))
    assert [p.title for p in panes] == ["triton ttgir", "triton ptx", "tilelang cuda", "tilelang ptx"]
    shares = _shares(kernel, lowered)
    # measured: triton ttgir 95%, ptx 98%; tilelang cuda 83%, ptx 90% (the rest: constants, the entry's parameters)
    assert shares["triton ttgir"] > 0.8 and shares["triton ptx"] > 0.9, shares
    assert shares["tilelang cuda"] > 0.75 and shares["tilelang ptx"] > 0.8, shares
    lines, first = inspect.getsourcelines(kernel.fn)
    load = first + next(i for i, ln in enumerate(lines) if "x = tl.load(" in ln)
    for pane in panes:
        if pane.title.endswith("ptx"):
            rows = pane.text.splitlines()
            assert any("ld.global" in rows[n - 1] for n, src in pane.line_map.items() if src == load), pane.title
    assert stage_panes(lowered, {"triton"}) == panes[:2]


@needs_tilelang
def test_matmul_stages_map_to_the_kernels_lines_and_notes():
    kernel, lowered = _lowered("examples.matmul.matmul_kernel")
    shares = _shares(kernel, lowered)
    # measured: triton ttgir 91%, ptx 95%. TileLang gives no line to its warp-specialized TMA producer and writes
    # its wgmma code from its own macro file: cuda 21%, ptx 25% (the accumulator's clear and the epilogue)
    assert shares["triton ttgir"] > 0.8 and shares["triton ptx"] > 0.85, shares
    assert shares["tilelang cuda"] > 0.1 and shares["tilelang ptx"] > 0.1, shares
    lines, first = inspect.getsourcelines(kernel.fn)
    at = {key: first + next(i for i, ln in enumerate(lines) if key in ln)
          for key in ("a = tl.load", "b = tl.load", "acc = tl.dot", "tl.store(")}
    notes = stage_notes(lowered, set(lowered))
    assert "triton ttgir: ttng.warp_group_dot (wgmma)" in notes[at["acc = tl.dot"]]
    assert "triton ttgir: ttg.local_alloc (shared memory)" in notes[at["a = tl.load"]]
    assert all(len(v) == len(set(v)) for v in notes.values())
    ptx = next(p for p in stage_panes(lowered, {"triton"}) if p.title == "triton ptx")
    rows = ptx.text.splitlines()
    assert any("wgmma" in rows[n - 1] for n, src in ptx.line_map.items() if src == at["acc = tl.dot"])
    cuda = next(p for p in stage_panes(lowered, {"tilelang"}) if p.title == "tilelang cuda")
    rows = cuda.text.splitlines()
    assert any("tma_store" in rows[n - 1] for n, src in cuda.line_map.items() if src == at["tl.store("])


def test_a_stage_that_cannot_be_built_is_left_out():
    class Lowered:
        stages = ("ttgir", "ptx")
        compiled = type("C", (), {"path": GEN, "line_map": {}})

        def stage(self, name):
            if name == "ptx":
                raise RuntimeError("no ptxas")
            return TTGIR

    assert [p.title for p in stages.backend_stage_panes("triton", Lowered())] == ["triton ttgir"]
