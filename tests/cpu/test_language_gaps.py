"""Triton-language forms FlagTree's kernels use: Python's min/max on runtime values, tl.cat, tl.gather and the
tensor method .gather, tl.assume. Results on both backends (Triton's interpreter; the interpreter of TileLang
programs), the code each backend writes, the errors of bad uses, and TileLang's CUDA for sm_90a (nvcc)."""
import pytest
import torch
import triton.language as tl

import tle
from tle.lowering.tilelang.interpreter.errors import FalseAssumption
from flagtree_form_kernels import extremes_and_cat, gathers, gather_in_loop, assumed
from lowering_errors import assert_lowering_error
from tilelang_oracle import run_on

BACKENDS = ["triton", "tilelang"]



@pytest.mark.parametrize("backend", BACKENDS)
def test_min_max_and_cat(backend):
    x, y = torch.randn(16), torch.randn(16)
    out = torch.full((64,), float("nan"))
    run_on(backend, extremes_and_cat, (1,), x, y, out, 5, B=16)
    keep = torch.arange(16) < 5
    ref = torch.cat([x, y, torch.clamp(torch.maximum(x, y), min=0.5), torch.where(keep, torch.minimum(x, y), 0.0)])
    torch.testing.assert_close(out, ref, rtol=0, atol=0)




@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_along_each_axis(backend):
    x = torch.randn(8, 16)
    idx = torch.randint(0, 8, (8, 16), dtype=torch.int32)
    out = torch.full((8, 16), float("nan"))
    run_on(backend, gathers, (1,), x, idx, out, R=8, C=16)
    ref = torch.gather(x, 0, idx.long()) + torch.gather(x, 1, (idx % 16).long()) * 1000
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_in_a_loop(backend):
    x = torch.randn(3, 32)
    idx = torch.randint(0, 32, (3, 32), dtype=torch.int32)
    out = torch.full((32,), float("nan"))
    run_on(backend, gather_in_loop, (1,), x, idx, out, N=32)
    torch.testing.assert_close(out, torch.gather(x, 1, idx.long()).sum(0))



@pytest.mark.parametrize("backend", BACKENDS)
def test_assume_holds(backend):
    x, out = torch.randn(64), torch.zeros(32)
    run_on(backend, assumed, (2,), x, out, 32, 2, B=16)
    torch.testing.assert_close(out, x[::2] * 2)


def test_a_false_assumption_is_caught_by_the_tilelang_interpreter():
    x, out = torch.randn(64), torch.zeros(32)
    with pytest.raises(FalseAssumption, match="tl.assume"):
        run_on("tilelang", assumed, (2,), x, out, 32, -1, B=16)


def _lower(kernel, backend, shapes, *scalars, **meta):
    args = [torch.empty(s, device="meta", dtype=d) for s, d in shapes]
    return kernel.lower(*args, *scalars, grid=(1,), backend=backend, **meta)


def test_each_backend_writes_the_forms():
    f32, i32 = torch.float32, torch.int32
    tri = _lower(gathers, "triton", [((8, 16), f32), ((8, 16), i32), ((8, 16), f32)], R=8, C=16).source
    assert "tl.gather(x, idx, 0)" in tri and ", 1)" in tri
    src = _lower(gathers, "tilelang", [((8, 16), f32), ((8, 16), i32), ((8, 16), f32)], R=8, C=16).source
    assert "T.alloc_shared((8, 16), 'float32')" in src and "T.sync_threads()" in src
    assert "[idx[i0, i1], i1]" in src
    tri = _lower(assumed, "triton", [(64, f32), (32, f32)], 32, 2, B=16).source
    assert "tl.assume(pid >= 0)" in tri
    assert "T.assume((pid >= 0))" in _lower(assumed, "tilelang", [(64, f32), (32, f32)], 32, 2, B=16).source
    tri = _lower(extremes_and_cat, "triton", [(16, f32), (16, f32), (64, f32)], 5, B=16).source
    assert "tl.join(x, y)" in tri and "tl.minimum(x, y)" in tri


@tle.jit
def _cat_may_not_reorder(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16))
    tl.cat(x, x)


@tle.jit
def _cat_of_2d(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16))[:, None]
    tl.cat(x, x, True)


@tle.jit
def _gather_float_index(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16))
    tl.gather(x, x, 0)


@tle.jit
def _gather_shape(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16)[:, None] + tl.arange(0, 4)[None, :])
    tl.gather(x, tl.zeros([16, 2], dtype=tl.int32), 0)


@tle.jit
def _assume_tile(x_ptr):
    tl.assume(tl.arange(0, 16) >= 0)


@tle.jit
def _assume_false(x_ptr):
    tl.assume(1 > 2)


@tle.jit
def _min_keyword(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16))
    min(x, 1.0, propagate_nan=True)


@pytest.mark.parametrize("kernel, words", [
    (_cat_may_not_reorder, ["can_reorder=True only", "input's elements, then other's"]),
    (_cat_of_2d, ["two 1-D tiles"]),
    (_gather_float_index, ["integer index tile"]),
    (_gather_shape, ["extents off axis 0"]),
    (_assume_tile, ["scalar condition"]),
    (_assume_false, ["constant false"]),
    (_min_keyword, ["min() of runtime values", "no keywords"]),
])
def test_bad_uses_are_errors_at_the_line(kernel, words):
    assert_lowering_error(kernel, [torch.empty(64, device="meta")], words)


@pytest.mark.slow
def test_gather_and_assume_compile_for_sm_90a():
    if tle.available_backends().get("tilelang") is not None:
        pytest.skip("TileLang backend unavailable")
    x, i = torch.zeros(3, 32), torch.zeros(3, 32, dtype=torch.int32)
    lowered = gather_in_loop.lower(x, i, torch.zeros(32), N=32, grid=(1,), backend="tilelang")
    assert "__syncthreads();" in lowered.stage("cuda") and ".entry gather_in_loop" in lowered.stage("ptx")
    lowered = assumed.lower(torch.zeros(64), torch.zeros(32), 32, 2, B=16, grid=(2,), backend="tilelang")
    assert ".entry assumed" in lowered.stage("ptx")


@tle.jit
def member_functions(x_ptr, out_ptr, B: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, B))
    bits = x.cast(tl.int32) % 4                     # Triton's member functions: x.cast, x.cumsum, x.histogram
    tl.store(out_ptr + tl.arange(0, B), bits.cumsum(0))
    tl.store(out_ptr + B + tl.arange(0, 4), bits.histogram(4))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_member_functions(backend):
    x = torch.arange(16, dtype=torch.float32) * 1.5
    out = torch.zeros(20, dtype=torch.int32)
    run_on(backend, member_functions, (1,), x, out, B=16)
    bits = x.to(torch.int32) % 4
    assert out[:16].tolist() == bits.cumsum(0).tolist()
    assert out[16:].tolist() == torch.bincount(bits, minlength=4).tolist()


@tle.jit
def while_over_a_for(out_ptr, n):
    s = 7                     # the for loop's target below: local to the while loop's body, not carried
    total = 0
    rounds = 0
    while rounds < n:
        for s in range(3):
            total += s
        rounds += 1
    tl.store(out_ptr, total)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_for_target_inside_a_while_loop(backend):
    out = torch.zeros(1, dtype=torch.int32)
    run_on(backend, while_over_a_for, (1,), out, 4)
    assert out.item() == 12


@tle.jit
def store_through_cat(x_ptr, a_ptr, b_ptr, B: tl.constexpr):
    offs = tl.arange(0, B)
    x = tl.load(x_ptr + offs)
    pointers = tl.cat(a_ptr + offs, b_ptr + (B - 1 - offs), True)     # into two arguments
    tl.store(pointers, tl.cat(x, -x, True), mask=tl.cat(offs % 2 == 0, offs < 5, True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_store_through_cat_of_pointers_into_two_arguments(backend):
    x = torch.randn(16)
    a, b = torch.zeros(16), torch.zeros(16)
    run_on(backend, store_through_cat, (1,), x, a, b, B=16)
    keep = torch.arange(16) % 2 == 0
    torch.testing.assert_close(a, torch.where(keep, x, 0.0))
    ref_b = torch.zeros(16)
    ref_b[15 - torch.arange(5)] = -x[:5]
    torch.testing.assert_close(b, ref_b)
