"""fp8 (tl.float8e4nv, tl.float8e5): Triton's typing of fp8 values, what the frontend refuses and where, what
each backend cannot express, and the CPU interpreters' conversions against the GPU's rounding. The numbers of
fp8 loads, stores, conversions, bitcasts and tl.dot on both backends are the corpus cases fp8_round_trips and
fp8_dot (tests/syntax_corpus.py)."""
import os
import re

import pytest
import torch
import triton.language as tl
from triton.language.semantic import TritonSemantic

import tle
from tle.dtypes import from_torch
from tle.lowering.frontend import semantics as S
from tle.lowering.ir import types as T
from tle.lowering.tilelang.interpreter import dtypes as interpreter_dtypes

from syntax_corpus import CASES
from tilelang_oracle import needs_tilelang, run_on
from markers import marked_line

HERE = os.path.basename(__file__)
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
BACKENDS = ["triton", "tilelang"]


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


def saturated(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x converted as the GPU converts to fp8: to nearest even, saturating at the largest finite value."""
    limit = torch.finfo(dtype).max
    return x.clamp(-limit, limit).to(dtype)


def meta(n, dtype):
    return torch.empty(n, dtype=dtype, device="meta")


# -- typing: Triton's rules ------------------------------------------------------------------------------
TYPES = {"fp8e4nv": tl.float8e4nv, "fp8e5": tl.float8e5, "fp16": tl.float16, "bf16": tl.bfloat16,
         "fp32": tl.float32, "fp64": tl.float64, "i8": tl.int8, "i32": tl.int32, "u32": tl.uint32, "i1": tl.int1}


FP8_PAIRS = [(a, b) for a in sorted(TYPES) for b in sorted(TYPES) if "fp8" in a + b]


@pytest.mark.parametrize("a, b", FP8_PAIRS)
@pytest.mark.parametrize("scalar", [None, "a", "b"])
def test_computation_types_are_tritons(a, b, scalar):
    """The type a binary operation computes in, for every pair with an fp8 operand, as Triton's semantics
    gives it (an error where Triton raises one)."""
    args = (T.dtype_from_name(a), scalar == "a", T.dtype_from_name(b), scalar == "b", False)
    try:
        want = TritonSemantic(None).computation_type_impl(TYPES[a], scalar == "a", TYPES[b], scalar == "b", False)
    except TypeError:
        with pytest.raises(TypeError):
            S.computation_type(*args)
        return
    assert S.computation_type(*args).name == T.dtype_from_name(want.name).name


def test_torch_fp8_tensors_map_to_tritons_types():
    assert from_torch(E4) == T.fp8e4nv and from_torch(E5) == T.fp8e5
    assert T.dtype_from_torch_name(str(E4)) == T.fp8e4nv and T.dtype_from_name("fp8e5") == T.fp8e5


@tle.jit
def mixed_kinds(x_ptr, y_ptr, h_ptr, f_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)                  # fp8e4nv
    y = tl.load(y_ptr + offs)                  # fp8e5
    tl.store(h_ptr + offs, x + y)              # two fp8 kinds meet in fp16
    tl.store(f_ptr + offs, (x.to(tl.float64) + y.to(tl.float32)).to(tl.float32))


def test_two_kinds_meet_in_fp16_and_fp8_converts_to_fp64_through_fp32():
    ir = mixed_kinds.lower(meta(64, E4), meta(64, E5), meta(64, torch.float16), meta(64, torch.float32),
                           grid=(1,), BLOCK=64, backend="triton").ir
    assert re.search(r"binary\.add %\d+, %\d+ : tile<64xfp16>", ir)
    # fp8 -> fp64 is fp8 -> fp32 -> fp64 (exact), a conversion Triton's GPU code has
    assert re.search(r"cast %x \{dtype=fp32\} : tile<64xfp32>.*\n.*cast %\d+ \{dtype=fp64\}", ir)


# -- what the frontend refuses, at the construct -----------------------------------------------------------
@tle.jit
def fp8_misuse(x_ptr, y_ptr, i_ptr, d_ptr, out_ptr, WHAT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)                  # fp8e4nv
    y = tl.load(y_ptr + offs)                  # fp8e4nv
    r = x.to(tl.float32)
    if WHAT == 0:
        r = (x + y).to(tl.float32)  # ERR-fp8-add
    elif WHAT == 1:
        r = (x * 2.0).to(tl.float32)
    elif WHAT == 2:
        r = (x > y).to(tl.float32)
    elif WHAT == 3:
        r = (-x).to(tl.float32)
    elif WHAT == 4:
        r += tl.sum(x, 0).to(tl.float32)
    elif WHAT == 5:
        r = tl.maximum(x, y).to(tl.float32)
    elif WHAT == 6:
        r = (x / y).to(tl.float32)
    elif WHAT == 7:
        r = tl.sigmoid(x).to(tl.float32)
    elif WHAT == 8:
        r = tl.cumsum(x, 0).to(tl.float32)
    elif WHAT == 9:
        r = (x + tl.load(i_ptr + offs)).to(tl.float32)
    elif WHAT == 10:
        r = x.to(tl.int32).to(tl.float32)
    elif WHAT == 11:
        r = tl.load(i_ptr + offs).to(tl.float8e5).to(tl.float32)
    elif WHAT == 12:
        r = tl.load(d_ptr + offs).to(tl.float8e4nv).to(tl.float32)
    elif WHAT == 13:
        r = tl.load(d_ptr + offs).to(tl.float32).to(tl.float8e4nv, fp_downcast_rounding="rtz").to(tl.float32)
    elif WHAT == 14:
        tl.atomic_add(x_ptr + offs, r)
    elif WHAT == 15:
        r = x.to(tl.float8e4b15).to(tl.float32)
    tl.store(out_ptr + offs, r)


MISUSES = {
    0: "arithmetic 'add' on fp8e4nv values: Triton computes it in fp8",
    1: "arithmetic 'mul' on fp8e4nv values",
    2: "comparison 'gt' on fp8e4nv values",
    3: "negation on fp8e4nv values",
    4: "tl.sum on fp8e4nv values",
    5: "tl.maximum on fp8e4nv values",
    6: "division '/' on fp8e4nv values",
    7: "tl.sigmoid on fp8e4nv values",
    8: "tl.cumsum on fp8e4nv values",
    9: "cannot combine fp8e4nv and i32: Triton combines fp8 values only with other floats",
    10: "cannot convert fp8e4nv to i32: Triton converts fp8 only to and from floats",
    11: "cannot convert i32 to fp8e5",
    12: "cannot convert fp64 to fp8e4nv: Triton cannot compile it",
    13: "fp_downcast_rounding='rtz' is not supported",
    14: "tl.atomic_add on fp8e4nv memory",
    15: "dtype fp8e4b15 is not supported by tle",
}


@pytest.mark.parametrize("what", sorted(MISUSES))
def test_fp8_misuse_is_a_lowering_error_naming_it(what):
    with pytest.raises(tle.LoweringError, match=re.escape(MISUSES[what])) as e:
        fp8_misuse.lower(meta(64, E4), meta(64, E4), meta(64, torch.int32), meta(64, torch.float64),
                         meta(64, torch.float32), grid=(1,), WHAT=what, BLOCK=64, backend="triton")
    if what == 0:
        assert f"{HERE}:{line_of('ERR-fp8-add')}" in str(e.value)


@tle.jit
def fp8_selects(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    m = tl.max(x, 0)                                                      # in fp32, as Triton promotes
    y = tl.where(offs % 3 == 0, tl.abs(x), tl.full((BLOCK,), 0.3, tl.float8e4nv))
    tl.store(out_ptr + offs, y.to(tl.float32) + m, mask=offs < n)


@pytest.mark.parametrize("backend", BACKENDS)
def test_select_abs_max_and_constants(backend):
    x = saturated(torch.randn(100) * 4, E4)
    out = torch.full((100,), float("nan"))
    run_on(backend, fp8_selects, (1,), x, out, 100, BLOCK=128)
    xf = x.float()
    y = torch.where(torch.arange(100) % 3 == 0, xf.abs(), saturated(torch.tensor(0.3), E4).float())
    torch.testing.assert_close(out, y + xf.max(), atol=0, rtol=0)


# -- conversions in the interpreters: as the GPU rounds (nearest even, saturating) --------------------------
def conversion_inputs() -> torch.Tensor:
    """Values of every kind for a conversion to fp8: random over the whole range, every fp8 value and every
    midpoint between neighbours (ties), past the largest finite values, infinities, subnormals."""
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(2048, generator=g) * torch.exp2(torch.randint(-20, 20, (2048,), generator=g).float())
    parts = [wide, torch.tensor([float("inf"), -float("inf"), 1e30, -1e30, 0.0, -0.0])]
    for dtype in (E4, E5):
        values = torch.arange(256, dtype=torch.uint8).view(dtype).float()
        values = values[values.isfinite()].unique()
        parts += [values, (values[1:] + values[:-1]) / 2]
    x = torch.cat(parts)
    return torch.cat([x, torch.zeros(-len(x) % 1024)])


@tle.jit
def convert(x_ptr, e4_ptr, e5_ptr, back4_ptr, back5_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    e4 = x.to(tl.float8e4nv)
    e5 = x.to(tl.float8e5)
    tl.store(e4_ptr + offs, e4)
    tl.store(e5_ptr + offs, e5)
    tl.store(back4_ptr + offs, e4.to(tl.float32))
    tl.store(back5_ptr + offs, e5.to(tl.float16))


@pytest.mark.parametrize("backend", BACKENDS)
def test_conversions_round_to_nearest_even_and_saturate(backend):
    x = conversion_inputs()
    e4, e5 = torch.empty(len(x), dtype=E4), torch.empty(len(x), dtype=E5)
    back4, back5 = torch.empty(len(x)), torch.empty(len(x), dtype=torch.float16)
    run_on(backend, convert, (len(x) // 1024,), x, e4, e5, back4, back5, BLOCK=1024)
    r4, r5 = saturated(x, E4), saturated(x, E5)
    assert torch.equal(e4.view(torch.uint8), r4.view(torch.uint8))
    assert torch.equal(e5.view(torch.uint8), r5.view(torch.uint8))
    assert torch.equal(back4, r4.float()) and torch.equal(back5, r5.half())


def test_interpreter_dtypes_hold_fp8_rounded_in_fp32():
    d = interpreter_dtypes
    assert d.bits("float8_e4m3fn") == 8 and d.storage("float8_e5m2") == torch.float32
    assert d.const(460.0, "float8_e4m3fn").item() == 448.0               # saturates: e4m3 has no infinity
    assert d.cast(torch.tensor([float("inf"), 0.5625]), "float8_e5m2").tolist() == [57344.0, 0.5]
    bits = d.reinterpret(torch.tensor([-1.5]), "float8_e4m3fn", "uint8")
    assert bits.dtype == torch.uint8 and bits.item() == 0xBC
    assert d.reinterpret(bits, "uint8", "float8_e4m3fn").item() == -1.5


# -- tl.dot with fp8 operands ----------------------------------------------------------------------------------
@tle.jit
def fp8_dot_variants(a_ptr, b_ptr, c_ptr, B: tl.constexpr, OUT: tl.constexpr, IMPRECISE: tl.constexpr):
    r = tl.arange(0, B)
    a = tl.load(a_ptr + r[:, None] * B + r[None, :])
    b = tl.load(b_ptr + r[:, None] * B + r[None, :])
    if IMPRECISE == 0:
        c = tl.dot(a, b, out_dtype=OUT)  # ERR-fp8-dot
    else:
        c = tl.dot(a, b, out_dtype=OUT, max_num_imprecise_acc=IMPRECISE)
    tl.store(c_ptr + r[:, None] * B + r[None, :], c)


def halves(*shape, dtype, seed=0):
    """Multiples of 1/2 in [-2, 2]: exact in every fp8 kind and in fp16 sums of a few dozen products."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-4, 5, shape, generator=g).float() / 2).to(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("out", [tl.float32, tl.float16])
def test_fp8_dot_accumulating_in_fp32_or_fp16(backend, out):
    a, b = halves(64, 64, dtype=E4), halves(64, 64, dtype=E4, seed=1)
    c = torch.full((64, 64), float("nan"), dtype=torch.float32 if out == tl.float32 else torch.float16)
    run_on(backend, fp8_dot_variants, (1,), a, b, c, B=64, OUT=out, IMPRECISE=0)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0, rtol=0)


def test_two_fp8_kinds_multiply_on_triton_and_are_refused_on_tilelang():
    a, b = halves(64, 64, dtype=E4), halves(64, 64, dtype=E5, seed=1)
    c = torch.full((64, 64), float("nan"))
    run_on("triton", fp8_dot_variants, (1,), a, b, c, B=64, OUT=tl.float32, IMPRECISE=0)
    torch.testing.assert_close(c, a.float() @ b.float(), atol=0, rtol=0)
    with pytest.raises(tle.LoweringError, match=r"\[tilelang\] backend 'tilelang' cannot express tl.dot of fp8e4nv "
                                                r"by fp8e5: .*Blackwell") as e:
        fp8_dot_variants.lower(a, b, c, grid=(1,), B=64, OUT=tl.float32, IMPRECISE=0, backend="tilelang")
    assert f"{HERE}:{line_of('ERR-fp8-dot')}" in str(e.value)


def test_max_num_imprecise_acc_honored_on_triton_refused_on_tilelang():
    args = (meta((64, 64), E4), meta((64, 64), E4), meta((64, 64), torch.float32))
    src = fp8_dot_variants.lower(*args, grid=(1,), B=64, OUT=tl.float32, IMPRECISE=32, backend="triton").source
    assert "max_num_imprecise_acc=32" in src
    with pytest.raises(tle.LoweringError, match=r"tl.dot\(max_num_imprecise_acc=32\): T.gemm cannot be told"):
        fp8_dot_variants.lower(*args, grid=(1,), B=64, OUT=tl.float32, IMPRECISE=32, backend="tilelang")
    with pytest.raises(tle.LoweringError, match=r"max_num_imprecise_acc \(128\) must be <= K \(64\)"):
        fp8_dot_variants.lower(*args, grid=(1,), B=64, OUT=tl.float32, IMPRECISE=128, backend="triton")


@needs_tilelang
def test_max_num_imprecise_acc_of_other_dtypes_is_ignored_as_triton_ignores_it():
    args = (meta((64, 64), torch.float16), meta((64, 64), torch.float16), meta((64, 64), torch.float32))
    lowered = fp8_dot_variants.lower(*args, grid=(1,), B=64, OUT=tl.float32, IMPRECISE=32, backend="tilelang")
    assert "T.gemm(a, b, c)" in lowered.source


@pytest.mark.parametrize("shape, out, match", [
    ((16, 16), tl.float32, r"tl.dot of fp8e4nv operands needs K >= 32"),
    ((32, 32), tl.bfloat16, r"tl.dot of fp8 operands accumulates in fp32 or fp16, got bf16"),
])
def test_fp8_dot_limits(shape, out, match):
    args = (meta(shape, E4), meta(shape, E4), meta(shape, torch.float32))
    with pytest.raises(tle.LoweringError, match=match):
        fp8_dot_variants.lower(*args, grid=(1,), B=shape[0], OUT=out, IMPRECISE=0, backend="triton")


@needs_tilelang
def test_tilelang_notes_an_fp8_product_off_wgmma():
    kernel, make = CASES["fp8_dot"]
    launch = make("meta")
    notes = kernel.lower(*launch.args, grid=launch.grid, backend="tilelang", **launch.kwargs).notes
    assert len(notes) == 1 and "tl.dot of fp8e4nv" in notes[0] and "runs on mma.sync" in notes[0]


# -- the GPU code: both lowerings compile for sm_90a with the conversions the interpreters model -----------------
@pytest.mark.slow
@pytest.mark.parametrize("name", ["fp8_round_trips", "fp8_dot"])
def test_triton_lowering_compiles_for_sm90(name):
    kernel, make = CASES[name]
    launch = make("cpu")
    ptx = kernel.lower(*launch.args, grid=launch.grid, backend="triton", **launch.kwargs).stage("ptx")
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
    if name == "fp8_dot":
        assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3" in ptx


@needs_tilelang
@pytest.mark.slow
def test_tilelang_lowering_converts_and_multiplies_as_triton_does():
    kernel, make = CASES["fp8_dot"]
    launch = make("cpu")
    ptx = kernel.lower(*launch.args, grid=launch.grid, backend="tilelang", **launch.kwargs).stage("ptx")
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e5m2.e5m2" in ptx      # the K-major product
    assert "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" in ptx      # the other (see the note)

