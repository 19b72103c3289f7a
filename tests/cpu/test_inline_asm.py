"""tl.inline_asm_elementwise on TileLang (lowering/tilelang/inline_asm.py): the PTX in asm() of a device function
of the kernel's CUDA, called for each element; the text Triton's `$N` and PTX's `%` become, the registers each
constraint names, the PTX nvcc builds for sm_90a, and what is refused. Neither interpreter runs PTX: the numbers
are checked on the GPU (tests/gpu/test_flagtree_forms_gpu.py)."""
import pytest
import torch
import triton.language as tl

import tle
from flagtree_form_kernels import asm_fma_and_bits
from lowering_errors import assert_lowering_error
from tle.lowering.tilelang.inline_asm import cuda_asm_text, device_function


def test_operand_references_and_percent_signs():
    assert cuda_asm_text("{ .reg .pred %p; setp.eq.s32 %p, $1, 0; selp.b32 $0, 1, 0, %p; }") == \
        "{ .reg .pred %%p; setp.eq.s32 %%p, %1, 0; selp.b32 %0, 1, 0, %%p; }"
    text = device_function("f", "mov.b32 $0, $1;", ["=r", "r"], "float", ["float"], volatile=True)
    assert 'asm volatile("mov.b32 %0, %1;" : "=r"(y) : "r"(x0));' in text
    assert "unsigned int x0; memcpy(&x0, &a0, sizeof(x0));" in text and "float r; memcpy(&r, &y" in text


def _lowered():
    x = torch.zeros(32)
    return asm_fma_and_bits.lower(x, x, x, torch.zeros(32, dtype=torch.int32), BLOCK=32, grid=(1,),
                                  backend="tilelang")


def test_each_asm_is_a_device_function_called_per_element():
    src = _lowered().source
    assert src.count("T.import_source(") == 1 and src.count("__device__ __forceinline__") == 2
    assert "T.call_extern('float32', 'tle_asm', x[i0], y[i0])" in src
    assert "T.call_extern('int32', 'tle_asm_1', x[i0])" in src
    assert 'asm volatile("mov.b32 %0, %1;"' in src and 'asm("{ .reg .f32 %%t;' in src


@pytest.mark.slow
def test_the_ptx_carries_the_asm():
    if tle.available_backends().get("tilelang") is not None:
        pytest.skip("TileLang backend unavailable")
    ptx = _lowered().stage("ptx")
    assert "mul.f32 %t," in ptx and "mov.b32" in ptx


@tle.jit
def _packed(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16))
    tl.inline_asm_elementwise("cvt.rn.f16x2.f32 $0, $1, $2;", "=r,r,r", [x, x], dtype=tl.int32, is_pure=True, pack=2)


@tle.jit
def _half_operand(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16)).to(tl.float16)
    tl.inline_asm_elementwise("mov.b16 $0, $1;", "=h,h", [x], dtype=tl.float16, is_pure=True, pack=1)


@tle.jit
def _wide_value_narrow_register(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16)).to(tl.float64)
    tl.inline_asm_elementwise("mov.b64 $0, $1;", "=r,r", [x], dtype=tl.float64, is_pure=True, pack=1)


@tle.jit
def _missing_input(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16))
    tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r", [x], dtype=tl.float32, is_pure=True, pack=1)


@pytest.mark.parametrize("kernel, words", [
    (_packed, ["pack=2", "several narrow elements"]),
    (_half_operand, ["fp16 result", "32- or 64-bit registers"]),
    (_wide_value_narrow_register, ["a fp64 result in a '=r' register", "4 bytes, the value 8"]),
    (_missing_input, ["one output ('=...') then one input per argument (1)"]),
])
def test_what_tilelang_cannot_pass_is_refused_at_the_line(kernel, words):
    assert_lowering_error(kernel, [torch.empty(16, device="meta")], words, "tilelang")
