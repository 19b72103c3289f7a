"""Constructs Triton has and TileLang 0.1.15 has no counterpart for: the Triton lowering runs them (in
Triton's interpreter here) and the TileLang lowering refuses each with a lowering error naming the
construct as written, the backend and the kernel's file:line."""
import re

import pytest
import torch
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


def test_scans_sorts_and_histogram_on_triton():
    x = torch.randn(64)
    c, p, s = torch.empty(64), torch.empty(64), torch.empty(64)
    t, h = torch.empty(8), torch.zeros(32, dtype=torch.int32)
    scans_and_sorts[(1,)](x, c, p, s, t, h, BLOCK=64, backend="triton")
    torch.testing.assert_close(c, x.flip(0).cumsum(0).flip(0))
    torch.testing.assert_close(p, (1.0 + x * 0.01).cumprod(0))
    assert torch.equal(s, x.sort(descending=True).values)
    assert torch.equal(t, x.topk(8).values)
    assert torch.equal(h, torch.bincount((x * 4.0).abs().to(torch.int32) % 32, minlength=32).to(torch.int32))


@tle.jit
def atomics_returning(c_ptr, old_ptr, lock_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.atomic_and(c_ptr + offs % 4, offs | 0x100)
    o = tl.atomic_xor(c_ptr + 4 + offs % 4, offs, sem="relaxed", scope="gpu")
    x = tl.atomic_xchg(c_ptr + 8 + offs, offs + 1)
    tl.store(old_ptr + offs, a + o + x)
    prev = tl.atomic_cas(lock_ptr, 0, 1)
    tl.atomic_add(lock_ptr + 1, prev + 5)


def test_atomic_kinds_and_their_returned_values_on_triton():
    c = torch.tensor([-1] * 4 + [0] * 4 + [7] * 16, dtype=torch.int32)
    old, lock = torch.zeros(16, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
    atomics_returning[(1,)](c, old, lock, BLOCK=16, backend="triton")
    offs = torch.arange(16, dtype=torch.int32)
    expect_and = torch.full((4,), -1, dtype=torch.int32)
    for v in offs.tolist():
        expect_and[v % 4] &= v | 0x100
    assert torch.equal(c[:4], expect_and)
    assert torch.equal(c[4:8], torch.zeros(4, dtype=torch.int32))           # j ^ (j+4) ^ (j+8) ^ (j+12) == 0
    assert torch.equal(c[8:], offs + 1)
    assert torch.equal(lock, torch.tensor([1, 5], dtype=torch.int32))       # the first compare-and-swap saw 0
    assert int(old.sum()) != 0                                              # the old values reached the store


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


@pytest.mark.parametrize("kernel, args, construct, line_text", [
    (scans_and_sorts, lambda: [torch.empty(64)] * 4 + [torch.empty(8), torch.zeros(32, dtype=torch.int32)],
     "tl.cumsum", "tl.cumsum"),
    (atomics_returning, lambda: [torch.zeros(24, dtype=torch.int32)] * 3, "tl.atomic_and", "tl.atomic_and"),
    (checked, lambda: [torch.empty(32)] * 2, "tl.device_assert", "tl.device_assert"),
])
def test_tilelang_refuses_what_it_cannot_express(kernel, args, construct, line_text):
    block = {"scans_and_sorts": 64, "atomics_returning": 16, "checked": 32}[kernel.__name__]
    with pytest.raises(LoweringError) as e:
        kernel.lower(*args(), BLOCK=block, grid=(1,), backend="tilelang")
    msg = str(e.value)
    assert re.search(rf"test_language_triton_only.py:{_line_of(kernel, line_text)}: \[tilelang\]", msg), msg
    assert construct in msg


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
