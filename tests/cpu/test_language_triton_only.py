"""Constructs TileLang 0.1.15 has no operation of its own for: the Triton lowering runs them (in Triton's
interpreter here; compiled for sm_90a where it says so); the TileLang lowering writes most of them out
(scans, sorts, histograms, atomics, prints: run here through the interpreter of TileLang programs) and refuses
the rest with a lowering error naming the construct as written, the backend and the kernel's file:line."""
import re

import pytest
import torch
import triton
import triton.language as tl

import tle
from tle.lowering.errors import LoweringError


@tle.jit
def scans_and_sorts(x_ptr, c_ptr, p_ptr, s_ptr, t_ptr, h_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(c_ptr + offs, tl.cumsum(x, 0, reverse=True))
    tl.store(p_ptr + offs, tl.cumprod(1.0 + x * 0.01, 0))
    tl.store(s_ptr + offs, tl.sort(x, descending=True))
    tl.store(t_ptr + tl.arange(0, 8), tl.topk(x, 8))
    tl.store(h_ptr + tl.arange(0, 32), tl.histogram(tl.abs(x * 4.0).to(tl.int32) % 32, 32))


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_scans_sorts_and_histogram(backend):
    from tilelang_oracle import run_on
    x = torch.randn(64)
    c, p, s = torch.full((64,), float("nan")), torch.full((64,), float("nan")), torch.full((64,), float("nan"))
    t, h = torch.full((8,), float("nan")), torch.zeros(32, dtype=torch.int32)
    run_on(backend, scans_and_sorts, (1,), x, c, p, s, t, h, BLOCK=64)
    torch.testing.assert_close(c, x.flip(0).cumsum(0).flip(0))
    torch.testing.assert_close(p, (1.0 + x * 0.01).cumprod(0))
    assert torch.equal(s, x.sort(descending=True).values)
    assert torch.equal(t, x.topk(8).values)
    assert torch.equal(h, torch.bincount((x * 4.0).abs().to(torch.int32) % 32, minlength=32).to(torch.int32))


@tle.jit
def checked(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.device_assert(x == x, "x has a NaN")
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.device_print("y", y)
    tl.store(y_ptr + offs, y)


def test_assert_print_and_inline_asm_are_written_for_triton():
    x = torch.randn(32)
    src = checked.lower(x, x, BLOCK=32, grid=(1,), backend="triton").source
    assert "tl.device_assert(x == x, 'x has a NaN')" in src
    assert "tl.inline_asm_elementwise('mov.b32 $0, $1;', '=r,r', [x], dtype=tl.float32, is_pure=True, pack=1)" in src
    assert "tl.device_print('y', y)" in src


def _line_of(kernel, text):
    import inspect
    lines, start = inspect.getsourcelines(kernel.fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_tilelang_writes_inline_asm_into_a_device_function():
    # tl.device_assert lowers to TileLang (tests/cpu/test_tilelang_atomics_assert.py), and so do tl.device_print
    # and the atomics TileLang has no operation for (tests/cpu/test_tilelang_atomic_kinds.py, both backends);
    # the inline PTX goes into the kernel's CUDA (tests/cpu/test_inline_asm.py)
    src = checked.lower(torch.empty(32), torch.empty(32), BLOCK=32, grid=(1,), backend="tilelang").source
    assert 'asm("mov.b32 %0, %1;" : "=r"(y) : "r"(x0));' in src, src
    assert "T.call_extern('float32', 'tle_asm', x[i0])" in src


@tle.jit
def nan_max(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs), 0.0, propagate_nan=tl.PropagateNan.ALL))


@tle.jit
def tile_with_boundary_check(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, boundary_check=(0,)))


@tle.jit
def replaced_block_ptr(x_ptr, n, BLOCK: tl.constexpr):
    p = tl.make_block_ptr(x_ptr, (n,), (1,), (0,), (BLOCK,), (0,))
    for i in range(3):
        p = tl.make_block_ptr(x_ptr, (n,), (1,), (i * BLOCK,), (BLOCK,), (0,))
    tl.store(p, tl.zeros((BLOCK,), tl.float32), boundary_check=(0,))


@pytest.mark.parametrize("kernel, extra, match", [
    (nan_max, (), r"propagate_nan=.*not supported"),
    (tile_with_boundary_check, None, r"boundary_check / padding_option apply to block pointers"),
    (replaced_block_ptr, (64,), r"block pointer 'p' is replaced in the loop body"),
])
@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_frontend_errors_name_the_construct(kernel, extra, match, backend):
    x = torch.empty(64)
    args = (x, x) if extra == () else (x,) if extra is None else (x, *extra)
    with pytest.raises(LoweringError, match=match):
        kernel.lower(*args, BLOCK=16, grid=(1,), backend=backend)


@tle.jit
def aligned_pointer(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(tl.multiple_of(x_ptr, 16) + offs))


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_an_alignment_hint_on_a_pointer_lowers(backend):
    x = torch.empty(32)
    src = aligned_pointer.lower(x, x, BLOCK=32, grid=(1,), backend=backend).source
    assert ("tl.multiple_of(x_ptr, 16)" in src) == (backend == "triton")


# -- tl.associative_scan / tl.reduce with the kernel's own combine function ---------------------------------
@triton.jit
def _running_max(a, ia, b, ib):
    """(the larger value, its index): the first index holding the maximum, scanned or reduced."""
    take = b > a
    return tl.where(take, b, a), tl.where(take, ib, ia)


@tle.jit
def _recurrence(a1, b1, a2, b2):
    """Composes the steps h -> a1 * h + b1, then h -> a2 * h + b2: a scan of it solves h = a * h_prev + b."""
    return a1 * a2, b1 * a2 + b2


@triton.jit
def _product(a, b):
    return a * b


@tle.jit
def user_combines(x_ptr, a_ptr, m_ptr, i_ptr, h_ptr, g_ptr, rm_ptr, ri_ptr, p_ptr, BLOCK: tl.constexpr,
                  ROWS: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    m, i = tl.associative_scan((x, offs), 0, _running_max)
    tl.store(m_ptr + offs, m)
    tl.store(i_ptr + offs, i)
    _, h = tl.associative_scan((tl.load(a_ptr + offs), x), 0, _recurrence, reverse=True)
    tl.store(h_ptr + offs, h)
    COLS: tl.constexpr = BLOCK // ROWS
    cols = tl.broadcast_to(tl.arange(0, COLS)[None, :], (ROWS, COLS))
    tile = tl.arange(0, ROWS)[:, None] * COLS + cols
    x2, a2 = tl.load(x_ptr + tile), tl.load(a_ptr + tile)
    _, g = tl.associative_scan((a2, x2), 0, _recurrence)
    tl.store(g_ptr + tile, g)
    row_max, row_arg = tl.reduce((x2, cols), 1, _running_max)
    tl.store(rm_ptr + tl.arange(0, ROWS), row_max)
    tl.store(ri_ptr + tl.arange(0, ROWS), row_arg)
    p = (1.0 + x2 * 0.01).reduce(None, _product, keep_dims=True)
    tl.store(p_ptr + tl.zeros((1, 1), tl.int32), p)


def _user_combine_args(block=64, rows=8):
    x, a = torch.randn(block), torch.rand(block) * 0.5 + 0.5
    outs = dict(m=torch.empty(block), i=torch.zeros(block, dtype=torch.int32), h=torch.empty(block),
                g=torch.empty(block), rm=torch.empty(rows), ri=torch.zeros(rows, dtype=torch.int32), p=torch.empty(1))
    return x, a, outs


def _recurrence_reference(a, b, dim, reverse):
    """h = a * h_prev + b along `dim` of 2-D tensors, from the end of the axis when `reverse`."""
    h, prev = torch.empty_like(b), torch.zeros_like(b.select(dim, 0))
    steps = range(b.shape[dim] - 1, -1, -1) if reverse else range(b.shape[dim])
    for j in steps:
        prev = a.select(dim, j) * prev + b.select(dim, j)
        h.select(dim, j).copy_(prev)
    return h


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_associative_scan_and_reduce_with_a_combine_function(backend):
    """TileLang has no scan or reduction taking a combine function: its lowering writes them out over shared
    memory (tests/cpu/test_tilelang_combines.py has more cases), run here through the interpreter of TileLang
    programs against the same references as Triton's."""
    from tilelang_oracle import run_on
    x, a, o = _user_combine_args()
    run_on(backend, user_combines, (1,), x, a, *o.values(), BLOCK=64, ROWS=8)
    expect_max = x.cummax(0)
    torch.testing.assert_close(o["m"], expect_max.values)
    assert torch.equal(o["i"].long(), expect_max.indices)
    torch.testing.assert_close(o["h"], _recurrence_reference(a[None], x[None], 1, reverse=True)[0])
    torch.testing.assert_close(o["g"].view(8, 8), _recurrence_reference(a.view(8, 8), x.view(8, 8), 0, reverse=False))
    torch.testing.assert_close(o["rm"], x.view(8, 8).amax(1))
    assert torch.equal(o["ri"].long(), x.view(8, 8).argmax(1))
    torch.testing.assert_close(o["p"], (1.0 + x * 0.01).prod().reshape(1))
    y = torch.full((1,), float("nan"))
    run_on(backend, product_reduce, (1,), x, y, BLOCK=64)
    torch.testing.assert_close(y, x.prod().reshape(1))


def test_a_combine_function_is_one_module_level_helper_compiled_for_sm_90a():
    x, a, o = _user_combine_args()
    lowered = user_combines.lower(x, a, *o.values(), BLOCK=64, ROWS=8, grid=(1,), backend="triton")
    src = lowered.source
    # used by a scan and a reduction of the same dtypes: one helper
    assert src.count("def _combine_running_max(a, ia, b, ib):") == 1
    assert "m, i = tl.associative_scan((x, offs), 0, _combine_running_max)" in src
    assert "_, h = tl.associative_scan((t, x), 0, _combine_recurrence, reverse=True)" in src
    assert "row_max, row_arg = tl.reduce((x2, cols), 1, _combine_running_max)" in src
    # over every axis: the tile flattened in row-major order, as Triton's own tl.reduce does
    assert "tl.reduce(tl.reshape(1.0 + x2 * 0.01, [64]), 0, _combine_product)" in src
    ttir = lowered.stage("ttir")
    assert ttir.count("tt.scan") >= 3 and "tt.reduce" in ttir
    assert ".entry user_combines" in lowered.stage("ptx")


@tle.jit
def product_reduce(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr, tl.reduce(tl.load(x_ptr + offs), 0, _product))


@triton.jit
def _noisy_add(a, b):
    tl.device_print("a", a)
    return a + b


@triton.jit
def _narrowing_add(a, b):
    return (a + b).to(tl.float16)


@triton.jit
def _add_with_index(a, b):
    return a + b, 0


@tle.jit
def scan_with(x_ptr, y_ptr, COMBINE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.associative_scan(tl.load(x_ptr + offs), 0, COMBINE))


@pytest.mark.parametrize("combine, where, match", [
    # the error is at the impure line of the combine function, and names the call too
    (_noisy_add, 'tl.device_print("a", a)', r"tl.associative_scan \(at .*test_language_triton_only.py:\d+\): its "
                                           r"combine function '_noisy_add' must be pure scalar code, and "
                                           r"tl.device_print has an effect"),
    (_narrowing_add, "tl.associative_scan(tl.load", r"the combine function '_narrowing_add' returns fp16 as its value "
                                                     r"0; it must return a scalar of its input's dtype \(fp32\)"),
    (_add_with_index, "tl.associative_scan(tl.load", r"'_add_with_index' returns 2 value\(s\) for 1 input tile"),
])
@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_a_bad_combine_function_is_a_lowering_error_at_its_line(combine, where, match, backend):
    x = torch.empty(16)
    with pytest.raises(LoweringError, match=match) as e:
        scan_with.lower(x, x, COMBINE=combine, BLOCK=16, grid=(1,), backend=backend)
    line = _line_of(combine if where.startswith("tl.device_print") else scan_with, where)
    assert f"test_language_triton_only.py:{line}: " in str(e.value)
