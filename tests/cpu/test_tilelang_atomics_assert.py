"""Two constructs the TileLang lowering expresses with TileLang's own operations, checked without a GPU:

- the value an atomic returns (`old = tl.atomic_add(ptr, val, mask=m)`, atomic_max, atomic_min): TileLang's
  `T.atomic_*(..., return_prev=True)`, into shared memory per element (a scalar atomic: from its one thread
  into a one-element shared buffer every thread reads). Where the mask is false Triton's value is not
  specified (its interpreter returns uninitialized memory; the code it compiles for a tile atomic returns 0,
  checked below): TileLang's is 0, and the comparisons with Triton's interpreter read only active lanes.
- `tl.device_assert(cond, msg)`: TileLang's `tl.device_assert_with_msg` on every element, written where
  Triton keeps the assertion, with its debug mode on (TRITON_DEBUG, `triton.knobs.runtime.debug`).

Both run through the interpreter of TileLang programs and Triton's interpreter on the same inputs; the
order in which lanes and blocks take their turns is the GPU's to choose, so what is compared does not
depend on it (sets of tickets, final values, the previous values of distinct elements)."""
import re

import pytest
import torch
import triton.language as tl
from triton import knobs

import tle
from tle.lowering.tilelang.interpreter import DeviceAssertionFailed
from tilelang_oracle import run_on

pytestmark = pytest.mark.skipif(tle.available_backends().get("tilelang") is not None,
                                reason="TileLang backend unavailable")

BACKENDS = ("triton", "tilelang")


@pytest.fixture
def debug_mode(monkeypatch):
    """Triton's debug mode on (as TRITON_DEBUG=1 does) for one test."""
    monkeypatch.setattr(knobs.runtime, "debug", True)


# -- a tile atomic whose previous values are stored: a ticket per lane ------------------------------------
@tle.jit
def tile_tickets(cnt_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    old = tl.atomic_add(cnt_ptr + tl.zeros((BLOCK,), tl.int32), 1)
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), old)


def test_tile_atomic_add_with_its_value_in_the_tilelang_source():
    cnt, out = torch.zeros(1, dtype=torch.int32), torch.zeros(96, dtype=torch.int32)
    src = tile_tickets.lower(cnt, out, BLOCK=32, grid=(3,), backend="tilelang").source
    assert "old = T.alloc_shared((32,), 'int32')" in src
    assert "old[i0] = T.atomic_add(cnt_ptr[0], 1, memory_order='acq_rel', return_prev=True)" in src
    assert re.search(r"for i0 in T\.Parallel\(32\):\n\s+old\[i0\] = T\.atomic_add", src), src


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_lane_gets_its_own_ticket(backend):
    cnt, out = torch.zeros(1, dtype=torch.int32), torch.full((96,), -1, dtype=torch.int32)
    run_on(backend, tile_tickets, (3,), cnt, out, BLOCK=32)
    assert int(cnt) == 96
    assert sorted(out.tolist()) == list(range(96))


# -- masked: two counters, lanes past n inactive -----------------------------------------------------------
@tle.jit
def masked_tickets(cnt_ptr, out_ptr, all_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    old = tl.atomic_add(cnt_ptr + offs % 2, 1, mask=m)
    tl.store(out_ptr + offs, old, mask=m)
    tl.store(all_ptr + offs, old)           # the inactive lanes' values too (unspecified on Triton)


def _masked_args(dtype, n=45, block=16, grid=3):
    size = block * grid
    return (torch.zeros(2, dtype=dtype), torch.full((size,), -1, dtype=dtype), torch.full((size,), -1, dtype=dtype),
            n)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_tickets(backend, dtype):
    cnt, out, every, n = _masked_args(dtype)
    run_on(backend, masked_tickets, (3,), cnt, out, every, n, BLOCK=16)
    evens, odds = (n + 1) // 2, n // 2
    assert cnt.tolist() == [evens, odds]
    assert sorted(out[:n:2].tolist()) == list(range(evens))
    assert sorted(out[1:n:2].tolist()) == list(range(odds))
    assert (out[n:] == -1).all()                 # no store where the mask is false
    if backend == "tilelang":                    # TileLang's inactive lanes hold 0, as compiled Triton's do
        assert (every[n:] == 0).all() and torch.equal(every[:n], out[:n])


def test_masked_tile_atomic_writes_zero_where_the_mask_is_false():
    cnt, out, every, n = _masked_args(torch.int32)
    src = masked_tickets.lower(cnt, out, every, n, BLOCK=16, grid=(3,), backend="tilelang").source
    assert re.search(r"if \(\(\(bx \* 16\) \+ i0\) < 45\):\n\s+old\[i0\] = T\.atomic_add\(cnt_ptr\[.*\], 1, "
                     r"memory_order='acq_rel', return_prev=True\)\n\s+else:\n\s+old\[i0\] = 0\n", src), src


@pytest.mark.slow
def test_compiled_triton_returns_zero_in_masked_off_lanes():
    """What TileLang's 0 matches: Triton compiles a masked tile atomic to a predicated `atom` whose result
    register is set to 0 first."""
    cnt, out, every, n = _masked_args(torch.int32)
    ptx = masked_tickets.lower(cnt, out, every, n, BLOCK=16, grid=(3,), backend="triton").stage("ptx")
    assert re.search(r"mov\.u32 (%r\d+), 0x0;\s*\n\s*@%p\d+ atom\.global\.gpu\.acq_rel\.add\.u32 \1,", ptx), ptx


# -- atomic_max / atomic_min: the previous values ------------------------------------------------------------
@tle.jit
def tile_extremes(mx_ptr, mn_ptr, v_ptr, old_mx_ptr, old_mn_ptr, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    v = tl.load(v_ptr + offs)
    tl.store(old_mx_ptr + offs, tl.atomic_max(mx_ptr + offs, v))
    tl.store(old_mn_ptr + offs, tl.atomic_min(mn_ptr + offs, v, mask=v != 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
@pytest.mark.parametrize("backend", BACKENDS)
def test_atomic_max_and_min_return_what_each_element_held(backend, dtype):
    g = torch.Generator().manual_seed(0)
    make = (lambda: torch.randn(32, generator=g) * 4) if dtype == torch.float32 else \
        (lambda: torch.randint(-9, 10, (32,), generator=g, dtype=torch.int32))
    mx0, mn0, v = make(), make(), make()
    v[3] = 0                                     # one lane masked off in the atomic_min
    mx, mn = mx0.clone(), mn0.clone()
    old_mx, old_mn = torch.full_like(v, -77), torch.full_like(v, -77)
    run_on(backend, tile_extremes, (1,), mx, mn, v, old_mx, old_mn, R=4, C=8)
    assert torch.equal(old_mx, mx0)              # distinct elements: each lane saw the initial value
    assert torch.equal(mx, torch.maximum(mx0, v))
    on = v != 0
    assert torch.equal(old_mn[on], mn0[on])
    assert torch.equal(mn, torch.where(on, torch.minimum(mn0, v), mn0))
    if backend == "tilelang":
        assert old_mn[3] == 0


@tle.jit
def contended_max(mx_ptr, v_ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(old_ptr + offs, tl.atomic_max(mx_ptr + tl.zeros((BLOCK,), tl.int32), tl.load(v_ptr + offs)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_contended_atomic_max_returns_values_it_could_have_seen(backend):
    v = torch.randperm(64, generator=torch.Generator().manual_seed(1)).to(torch.int32)
    mx, old = torch.tensor([-1], dtype=torch.int32), torch.zeros(64, dtype=torch.int32)
    run_on(backend, contended_max, (2,), mx, v, old, BLOCK=32)
    assert int(mx) == 63
    seen = set(v.tolist()) | {-1}
    for i, r in enumerate(old.tolist()):
        assert r in seen and r != v[i]           # a value that was there before, never the lane's own
    assert (old == -1).sum() == 1                # exactly one lane came first


# -- a scalar atomic: one thread does it, every thread reads its value ------------------------------------
@tle.jit
def scalar_tickets(cnt_ptr, out_ptr, even_ptr, last_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    t = tl.atomic_add(cnt_ptr, 1)
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + pid * BLOCK + offs, t + offs * 0)      # each thread's copy of the ticket
    e = tl.atomic_add(cnt_ptr + 1, 10, mask=pid % 2 == 0)
    tl.store(even_ptr + pid, e, mask=pid % 2 == 0)
    tl.atomic_max(cnt_ptr + 2, pid)                           # returns nothing the kernel reads
    tl.atomic_add(cnt_ptr + 3, 2)
    if t == tl.num_programs(0) - 1:                           # the block that came last
        tl.store(last_ptr, pid)


def _scalar_args(grid=5, block=128):
    return (torch.zeros(4, dtype=torch.int32), torch.full((grid * block,), -1, dtype=torch.int32),
            torch.full((grid,), -1, dtype=torch.int32), torch.full((1,), -1, dtype=torch.int32))


def test_scalar_atomic_value_reaches_every_thread_in_the_tilelang_source():
    src = scalar_tickets.lower(*_scalar_args(), BLOCK=128, grid=(5,), backend="tilelang").source
    assert re.search(r"if T\.get_thread_binding\(\) == 0:\n\s+t_shared\[0\] = T\.atomic_add\(cnt_ptr\[0\], 1, "
                     r"memory_order='acq_rel', return_prev=True\)\n\s+t = t_shared\[0\]\n", src), src
    assert "t_shared = T.alloc_shared((1,), 'int32')" in src
    # masked: the one thread writes 0 where the mask is false
    assert re.search(r"if T\.get_thread_binding\(\) == 0:\n\s+if .*:\n\s+e_shared\[0\] = T\.atomic_add\(cnt_ptr\[1\], "
                     r"10, memory_order='acq_rel', return_prev=True\)\n\s+else:\n\s+e_shared\[0\] = 0\n", src), src
    # in a kernel that reads an atomic's value every atomic has Triton's acq_rel; an add keeps it with return_prev
    assert "T.atomic_max(cnt_ptr[2], pid, memory_order='acq_rel')" in src
    assert "T.atomic_add(cnt_ptr[3], 2, memory_order='acq_rel', return_prev=True)" in src


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalar_tickets(backend):
    cnt, out, even, last = _scalar_args()
    run_on(backend, scalar_tickets, (5,), cnt, out, even, last, BLOCK=128)
    rows = out.view(5, 128)
    assert (rows == rows[:, :1]).all()                        # every thread stored the same ticket
    assert sorted(rows[:, 0].tolist()) == list(range(5))
    assert sorted(even[::2].tolist()) == [0, 10, 20] and (even[1::2] == -1).all()
    assert cnt.tolist() == [5, 30, 4, 10]
    assert int(rows[int(last), 0]) == 4                       # the last block knew it was last


# -- what stays as it was -------------------------------------------------------------------------------------
@tle.jit
def plain_atomics(c_ptr, v_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(c_ptr + offs % 4, tl.load(v_ptr + offs))
    tl.atomic_add(c_ptr + 4, 1, sem="release")


def test_atomics_whose_values_nothing_reads():
    c, v = torch.zeros(8, dtype=torch.int32), torch.ones(16, dtype=torch.int32)
    src = plain_atomics.lower(c, v, BLOCK=16, grid=(1,), backend="tilelang").source
    # no atomic value read: TileLang's default order, which no block of the kernel can tell from acq_rel
    assert re.search(r"T\.atomic_add\(c_ptr\[T\.truncmod\(i0, 4\)\], \w+\[i0\]\)\n", src), src
    # an order named: the form whose AtomicAddRet keeps it
    assert "T.atomic_add(c_ptr[4], 1, memory_order='release', return_prev=True)" in src
    run_on("tilelang", plain_atomics, (1,), c, v, BLOCK=16)
    assert c.tolist() == [4, 4, 4, 4, 1, 0, 0, 0]


# -- tl.device_assert ------------------------------------------------------------------------------------------
@tle.jit
def checked_scale(x_ptr, y_ptr, s, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.device_assert(x >= 0.0, "x must be non-negative", mask=m)
    tl.device_assert(s > 0.0, "s must be positive")
    tl.store(y_ptr + offs, x * s, mask=m)


def _lower_checked(backend="tilelang"):
    x = torch.zeros(64)
    return checked_scale.lower(x, x, 2.0, 50, BLOCK=64, grid=(1,), backend=backend)


def test_without_debug_mode_no_assertion_is_written():
    src = _lower_checked().source
    assert "device_assert" not in src and "import tvm" not in src
    # Triton is given the assertion and keeps it only in debug mode
    assert "tl.device_assert(" in _lower_checked("triton").source


def test_with_debug_mode_every_element_is_asserted(debug_mode):
    src = _lower_checked().source
    assert "import tvm\n" in src
    assert re.search(r"for i0 in T\.Parallel\(64\):\n\s+T\.call_intrin\(\"void\", "
                     r"tvm\.ir\.Op\.get\(\"tl\.device_assert_with_msg\"\), .*'x must be non-negative \(at "
                     r"test_tilelang_atomics_assert\.py:\d+ in checked_scale\)'\)", src), src
    assert re.search(r"\n        T\.call_intrin\(\"void\", tvm\.ir\.Op\.get\(\"tl\.device_assert_with_msg\"\), "
                     r"\(s > 0\.0\), 's must be positive", src), src


def test_lowerings_follow_the_debug_mode(monkeypatch):
    assert "device_assert" not in _lower_checked().source
    monkeypatch.setattr(knobs.runtime, "debug", True)
    assert "device_assert" in _lower_checked().source        # not the lowering cached without it
    monkeypatch.setattr(knobs.runtime, "debug", False)
    assert "device_assert" not in _lower_checked().source


def _checked_args(x, s=2.0):
    return x, torch.full((64,), -1.0), s, 50


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_assertions_that_hold(backend, debug, monkeypatch):
    monkeypatch.setattr(knobs.runtime, "debug", debug)
    x = torch.rand(64)
    x[50:] = -1.0                                # past n: the mask exempts them
    args = _checked_args(x)
    run_on(backend, checked_scale, (1,), *args, BLOCK=64)
    torch.testing.assert_close(args[1][:50], x[:50] * 2.0)
    assert (args[1][50:] == -1.0).all()


@pytest.mark.parametrize("x_bad, s, message", [(True, 2.0, "x must be non-negative"),
                                               (False, -1.0, "s must be positive")])
def test_a_failed_assertion_in_debug_mode(monkeypatch, x_bad, s, message):
    x = torch.rand(64)
    if x_bad:
        x[17] = -3.0
    monkeypatch.setattr(knobs.runtime, "debug", True)
    with pytest.raises(DeviceAssertionFailed, match=message):
        checked_scale.interpret_tilelang((1,), *_checked_args(x, s), BLOCK=64)
    # without debug mode it is not checked, as on Triton (whose interpreter never checks one)
    monkeypatch.setattr(knobs.runtime, "debug", False)
    args = _checked_args(x, s)
    checked_scale.interpret_tilelang((1,), *args, BLOCK=64)
    torch.testing.assert_close(args[1][:50], x[:50] * s)


# -- compiled for sm_90a without a GPU (nvcc) --------------------------------------------------------------------
@tle.jit
def tickets_checked(cnt_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    old = tl.atomic_add(cnt_ptr + offs % 2, 1, mask=m)
    tl.device_assert(old >= 0, "negative ticket")
    mx = tl.atomic_max(cnt_ptr + 2 + offs % 4, offs, mask=m)
    t = tl.atomic_add(cnt_ptr + 6, 1)
    tl.store(out_ptr + offs, old + mx + t, mask=m)


@pytest.mark.slow
def test_returned_values_and_assertions_compile_for_sm_90a(debug_mode):
    cnt, out = torch.zeros(8, dtype=torch.int32), torch.zeros(96, dtype=torch.int32)
    lowered = tickets_checked.lower(cnt, out, 90, BLOCK=32, grid=(3,), backend="tilelang")
    cuda = lowered.stage("cuda")
    assert re.search(r"\[\(\(int\)threadIdx\.x\)\] = AtomicAddRet\(.*, 1, 4\);", cuda), cuda     # 4: acq_rel
    assert "AtomicMaxRet(" in cuda
    assert re.search(r"if \(\(\(int\)threadIdx\.x\) == 0\) \{\n\s+\(\(int\*\)t_shared\)\[0\] = AtomicAddRet\(",
                     cuda), cuda
    assert "__syncthreads();" in cuda
    assert 'device_assert_with_msg(' in cuda and "negative ticket" in cuda
    ptx = lowered.stage("ptx")
    assert ".entry tickets_checked" in ptx and "atom.add.acq_rel.gpu" in ptx and "atom.max.acq_rel.gpu" in ptx
