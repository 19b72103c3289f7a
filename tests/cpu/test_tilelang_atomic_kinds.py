"""The atomics TileLang 0.1.15 has no operation for, and tl.device_print, on both backends.

- tl.atomic_and / atomic_xor / atomic_xchg / atomic_cas, and the value tl.atomic_or returns: device functions
  the TileLang kernel brings (`tle_atomic_<kind><cuda::memory_order_...>`, cuda::atomic_ref at device scope),
  called through T.call_extern on the element's address; a returned value goes through shared memory, 0
  where the mask is false.
- tl.device_print: printf per element of a shared copy of the tile, one thread each, in the format of the
  lines Triton prints (`pid (0, 0, 0) idx (  3) x: 1.500000`); a scalar from every thread, as on Triton.

Each kernel runs in Triton's interpreter and through the interpreter of TileLang programs on the same
inputs. The order in which lanes and blocks take their turns is the GPU's to choose, so what is compared
does not depend on it: final values, and the chain the previous values form (every lane's update turns the
value it found into the value another lane found, or into the final one). The `check_*` functions take the
launcher and the device: tests/gpu/test_tilelang_atomic_kinds_gpu.py runs the same ones on CUDA."""
import math
import re
import struct
from collections import Counter

import pytest
import torch
import triton.language as tl

import tle
from tle.lowering.errors import LoweringError
from tle.lowering.tilelang.interpreter.printf import c_format
from tilelang_oracle import run_on

pytestmark = pytest.mark.skipif(tle.available_backends().get("tilelang") is not None,
                                reason="TileLang backend unavailable")

BACKENDS = ("triton", "tilelang")


def _chain_holds(init, olds, values, final, update):
    """The previous values of the lanes updating one element chain from `init` to `final`, whatever the order:
    as multisets, {olds} + {final} == {update(old, value)} + {init}."""
    return Counter(olds + [final]) == Counter([update(o, v) for o, v in zip(olds, values)] + [init])


# -- and, xor, xchg and cas with their returned values, with their torch expectations ----------------------------
@tle.jit
def atomics_returning(c_ptr, old_ptr, lock_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.atomic_and(c_ptr + offs % 4, offs | 0x100)
    o = tl.atomic_xor(c_ptr + 4 + offs % 4, offs, sem="relaxed", scope="gpu")
    x = tl.atomic_xchg(c_ptr + 8 + offs, offs + 1)
    tl.store(old_ptr + offs, a + o + x)
    prev = tl.atomic_cas(lock_ptr, 0, 1)
    tl.atomic_add(lock_ptr + 1, prev + 5)


def check_atomics_returning(run, backend, device):
    c = torch.tensor([-1] * 4 + [0] * 4 + [7] * 16, dtype=torch.int32, device=device)
    old, lock = torch.zeros(16, dtype=torch.int32, device=device), torch.zeros(2, dtype=torch.int32, device=device)
    run(backend, atomics_returning, (1,), c, old, lock, BLOCK=16)
    c, old, lock = c.cpu(), old.cpu(), lock.cpu()
    offs = torch.arange(16, dtype=torch.int32)
    expect_and = torch.full((4,), -1, dtype=torch.int32)
    for v in offs.tolist():
        expect_and[v % 4] &= v | 0x100
    assert torch.equal(c[:4], expect_and)
    assert torch.equal(c[4:8], torch.zeros(4, dtype=torch.int32))           # j ^ (j+4) ^ (j+8) ^ (j+12) == 0
    assert torch.equal(c[8:], offs + 1)
    assert torch.equal(lock, torch.tensor([1, 5], dtype=torch.int32))       # the first compare-and-swap saw 0
    assert int(old.sum()) != 0                                              # the old values reached the store


@pytest.mark.parametrize("backend", BACKENDS)
def test_atomics_returning(backend):
    check_atomics_returning(run_on, backend, "cpu")


def test_atomics_returning_in_the_tilelang_source():
    c = torch.zeros(24, dtype=torch.int32)
    src = atomics_returning.lower(c, c, c, BLOCK=16, grid=(1,), backend="tilelang").source
    assert 'T.import_source("""\n#include <cuda/atomic>' in src and src.count("T.import_source(") == 1
    # a returned tile value: per element into shared memory
    assert re.search(r"for i0 in T\.Parallel\(16\):\n\s+a\[i0\] = T\.call_extern\('int32', "
                     r"'tle_atomic_and<cuda::memory_order_acq_rel>', "
                     r"T\.access_ptr\(c_ptr\[T\.truncmod\(i0, 4\)\], 'rw'\), "
                     r"\(i0 \| 256\)\)\n", src), src
    assert "a = T.alloc_shared((16,), 'int32')" in src
    assert "'tle_atomic_xor<cuda::memory_order_relaxed>'" in src           # sem="relaxed" as written
    assert "'tle_atomic_xchg<cuda::memory_order_acq_rel>', T.access_ptr(c_ptr[(8 + i0)], 'rw'), (i0 + 1))" in src
    # a scalar cas: one thread, its value shared with every thread
    assert re.search(r"if T\.get_thread_binding\(\) == 0:\n\s+prev_shared\[0\] = T\.call_extern\('int32', "
                     r"'tle_atomic_cas<cuda::memory_order_acq_rel>', T\.access_ptr\(lock_ptr\[0\], 'rw'\), 0, 1\)\n"
                     r"\s+prev = prev_shared\[0\]\n", src), src


# -- contended bitwise atomics and exchanges: several blocks, several lanes per element ---------------------------
@tle.jit
def contended_bitwise(c_ptr, v_ptr, and_ptr, or_ptr, xor_ptr, xchg_ptr, BLOCK: tl.constexpr, SLOTS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(v_ptr + offs)
    slot = offs % SLOTS
    tl.store(and_ptr + offs, tl.atomic_and(c_ptr + slot, v))
    tl.store(or_ptr + offs, tl.atomic_or(c_ptr + SLOTS + slot, v))
    tl.store(xor_ptr + offs, tl.atomic_xor(c_ptr + 2 * SLOTS + slot, v))
    tl.store(xchg_ptr + offs, tl.atomic_xchg(c_ptr + 3 * SLOTS + slot, v))


def check_contended_bitwise(run, backend, device, dtype, grid=3, block=32, slots=4):
    g = torch.Generator().manual_seed(7)
    n = grid * block
    big = 1 << (40 if dtype == torch.int64 else 20)
    v = torch.randint(-big, big, (n,), generator=g, dtype=dtype)
    init = torch.tensor([-1] * slots + [0] * slots + [5] * slots + [-9] * slots, dtype=dtype)
    c = init.clone().to(device)
    outs = [torch.zeros(n, dtype=dtype, device=device) for _ in range(4)]
    run(backend, contended_bitwise, (grid,), c, v.to(device), *outs, BLOCK=block, SLOTS=slots)
    c, outs = c.cpu(), [o.cpu() for o in outs]
    updates = (lambda o, x: o & x, lambda o, x: o | x, lambda o, x: o ^ x, lambda o, x: x)
    for k, (out, update) in enumerate(zip(outs, updates)):
        for s in range(slots):
            lanes = list(range(s, n, slots))
            final, start = int(c[k * slots + s]), int(init[k * slots + s])
            mine = [int(v[i]) for i in lanes]
            expect = start
            for x in mine:
                expect = update(expect, x)
            if k < 3:                                          # and, or, xor: the order does not change the end
                assert final == expect, (k, s)
            else:                                              # xchg: some lane's value is left
                assert final in mine
            assert _chain_holds(start, [int(out[i]) for i in lanes], mine, final, update), (k, s)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_contended_bitwise_atomics(backend, dtype):
    check_contended_bitwise(run_on, backend, "cpu", dtype)


# -- masks: lanes past n leave memory alone and (TileLang) get 0 back ---------------------------------------------
@tle.jit
def masked_kinds(c_ptr, v_ptr, old_ptr, every_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(v_ptr + offs)
    old = tl.atomic_xchg(c_ptr + offs, v, mask=m)
    tl.store(old_ptr + offs, old, mask=m)
    tl.store(every_ptr + offs, old)                  # the inactive lanes' values too (unspecified on Triton)
    tl.atomic_and(c_ptr + BLOCK * 2 + offs, v, mask=m)              # its value unused
    x = tl.atomic_xor(c_ptr + BLOCK * 4 + offs, v, mask=m, sem="release")
    tl.store(old_ptr + BLOCK * 2 + offs, x, mask=m)


def check_masked_kinds(run, backend, device, n=45, block=32, grid=2):
    size = block * grid
    g = torch.Generator().manual_seed(3)
    v = torch.randint(-1000, 1000, (size,), generator=g, dtype=torch.int32)
    init = torch.randint(-1000, 1000, (3 * size,), generator=g, dtype=torch.int32)
    c = init.clone().to(device)
    old = torch.full((2 * size,), -77, dtype=torch.int32, device=device)
    every = torch.full((size,), -77, dtype=torch.int32, device=device)
    run(backend, masked_kinds, (grid,), c, v.to(device), old, every, n, BLOCK=block)
    c, old, every = c.cpu(), old.cpu(), every.cpu()
    on = torch.arange(size) < n
    xchg, band, bxor = init[:size], init[size:2 * size], init[2 * size:]
    assert torch.equal(c[:size], torch.where(on, v, xchg))
    assert torch.equal(c[size:2 * size], torch.where(on, band & v, band))
    assert torch.equal(c[2 * size:], torch.where(on, bxor ^ v, bxor))
    # distinct elements: every active lane found the element's first value
    assert torch.equal(old[:size][on], xchg[on]) and torch.equal(old[size:][on], bxor[on])
    assert (old[:size][~on] == -77).all() and (old[size:][~on] == -77).all()
    if backend == "tilelang":                        # TileLang's inactive lanes hold 0, as compiled Triton's do
        assert (every[~on] == 0).all() and torch.equal(every[on], xchg[on])


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_atomic_kinds(backend):
    check_masked_kinds(run_on, backend, "cpu")


@tle.jit
def masked_scalars(c_ptr, got_ptr):
    pid = tl.program_id(0)
    odd = pid % 2 == 1
    old = tl.atomic_xchg(c_ptr, pid + 1, mask=odd)
    tl.store(got_ptr + pid, old, mask=odd)
    tl.atomic_xor(c_ptr + 1, 1 << pid, mask=pid != 2)


def check_masked_scalars(run, backend, device, grid=5):
    c = torch.tensor([-3, 0], dtype=torch.int32, device=device)
    got = torch.full((grid,), -77, dtype=torch.int32, device=device)
    run(backend, masked_scalars, (grid,), c, got)
    c, got = c.cpu(), got.cpu()
    odd = list(range(1, grid, 2))
    assert int(c[0]) in [p + 1 for p in odd]
    assert _chain_holds(-3, [int(got[p]) for p in odd], [p + 1 for p in odd], int(c[0]), lambda o, v: v)
    assert (got[::2] == -77).all()
    assert int(c[1]) == sum(1 << p for p in range(grid) if p != 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_scalar_atomic_kinds(backend):
    check_masked_scalars(run_on, backend, "cpu")


def test_masked_extern_atomics_in_the_tilelang_source():
    z = [torch.zeros(n, dtype=torch.int32) for n in (192, 64, 128, 64)]
    src = masked_kinds.lower(*z, 45, BLOCK=32, grid=(2,), backend="tilelang").source
    assert re.search(r"if \(\(\(bx \* 32\) \+ i0\) < 45\):\n\s+old\[i0\] = T\.call_extern\('int32', "
                     r"'tle_atomic_xchg<cuda::memory_order_acq_rel>', .*\)\n\s+else:\n\s+old\[i0\] = 0\n", src), src
    # an atomic whose value nothing reads: the call alone, masked
    assert re.search(r"if \(\(\(bx \* 32\) \+ i0\) < 45\):\n\s+T\.call_extern\('int32', "
                     r"'tle_atomic_and<cuda::memory_order_acq_rel>', T\.access_ptr\(c_ptr\[", src), src
    assert "'tle_atomic_xor<cuda::memory_order_release>'" in src


# -- compare-and-swap: claims (exactly one lane per flag wins), several dtypes ------------------------------------
@tle.jit
def claims(flag_ptr, mine_ptr, got_ptr, FLAGS: tl.constexpr, BLOCK: tl.constexpr):
    lane = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mine = tl.load(mine_ptr + lane)
    old = tl.atomic_cas(flag_ptr + lane % FLAGS, tl.zeros_like(mine), mine)
    tl.store(got_ptr + lane, old)


def check_claims(run, backend, device, dtype, grid=2, block=32, flags=8):
    n = grid * block
    flag = torch.zeros(flags, dtype=dtype, device=device)
    mine = torch.arange(1, n + 1).to(dtype).to(device)                  # lane + 1: exact in every dtype here
    got = torch.full((n,), -5, dtype=dtype, device=device)
    run(backend, claims, (grid,), flag, mine, got, FLAGS=flags, BLOCK=block)
    flag, got = flag.cpu().double(), got.cpu().double()
    for f in range(flags):
        lanes = list(range(f, n, flags))
        seen = got[lanes]
        winners = [i for i in lanes if got[i] == 0]
        assert len(winners) == 1, (f, seen.tolist())                 # one lane found the flag clear
        assert flag[f] == winners[0] + 1                              # and its value stayed
        assert (seen[seen != 0] == flag[f]).all()                     # every other lane found the winner's


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float16, torch.bfloat16,
                                   torch.int16, torch.float64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_compare_and_swap_claims(backend, dtype):
    check_claims(run_on, backend, "cpu", dtype)


# -- a ticket per program from scalar compare-and-swaps, no spinning: each takes the first free slot -------------
@tle.jit
def first_free_slot(slots_ptr, mine_ptr, NSLOTS: tl.constexpr):
    pid = tl.program_id(0)
    mine = -1
    for s in range(NSLOTS):
        if mine < 0:
            if tl.atomic_cas(slots_ptr + s, 0, pid + 1) == 0:
                mine = s
    tl.store(mine_ptr + pid, mine)


def check_first_free_slot(run, backend, device, grid=6, nslots=8):
    slots = torch.zeros(nslots, dtype=torch.int32, device=device)
    mine = torch.full((grid,), -7, dtype=torch.int32, device=device)
    run(backend, first_free_slot, (grid,), slots, mine, NSLOTS=nslots)
    slots, mine = slots.cpu(), mine.cpu()
    assert sorted(mine.tolist()) == list(range(grid))               # the first grid slots, one each
    assert [int(slots[int(s)]) for s in mine] == [p + 1 for p in range(grid)]
    assert (slots[grid:] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_slot_per_program_from_compare_and_swap(backend):
    check_first_free_slot(run_on, backend, "cpu")


# -- the value tl.atomic_or returns -------------------------------------------------------------------------------
@tle.jit
def or_value(bits_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_or(bits_ptr + offs % 2, offs)
    tl.store(out_ptr + offs, old)


def check_or_value(run, backend, device):
    bits, out = torch.zeros(2, dtype=torch.int32, device=device), torch.full((16,), -1, dtype=torch.int32,
                                                                              device=device)
    run(backend, or_value, (1,), bits, out, BLOCK=16)
    bits, out = bits.cpu(), out.cpu()
    assert bits.tolist() == [14, 15]
    for s in (0, 1):
        lanes = list(range(s, 16, 2))
        assert _chain_holds(0, [int(out[i]) for i in lanes], lanes, int(bits[s]), lambda o, v: o | v)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_value_atomic_or_returns(backend):
    check_or_value(run_on, backend, "cpu")


def test_an_or_whose_value_is_read_is_the_kernels_device_function():
    b = torch.zeros(16, dtype=torch.int32)
    src = or_value.lower(b, b, BLOCK=16, grid=(1,), backend="tilelang").source
    assert "old[i0] = T.call_extern('int32', 'tle_atomic_or<cuda::memory_order_acq_rel>'" in src
    assert "T.atomic_or(" not in src


# -- memory orders and scopes as written --------------------------------------------------------------------------
@tle.jit
def ordered(c_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_xchg(c_ptr + offs, offs, sem="release", scope="cta")
    tl.atomic_and(c_ptr + BLOCK + offs, offs)
    tl.atomic_cas(c_ptr + 2 * BLOCK + offs, offs, offs + 1, sem="acquire", scope="gpu")
    tl.atomic_xor(c_ptr + 3 * BLOCK, 1, sem="acq_rel")
    tl.atomic_or(c_ptr + 3 * BLOCK + 1, 2)


def test_orders_and_scopes_in_the_tilelang_source():
    c = torch.zeros(64, dtype=torch.int32)
    src = ordered.lower(c, BLOCK=16, grid=(1,), backend="tilelang").source
    assert "'tle_atomic_xchg<cuda::memory_order_release>'" in src              # scope cta: device scope, stronger
    # no value an atomic returns is read: TileLang's relaxed default where no sem is named
    assert "'tle_atomic_and<cuda::memory_order_relaxed>'" in src
    assert "'tle_atomic_cas<cuda::memory_order_acquire>', T.access_ptr(c_ptr[(32 + i0)], 'rw'), i0, (i0 + 1))" in src
    assert re.search(r"if T\.get_thread_binding\(\) == 0:\n\s+T\.call_extern\('int32', "
                     r"'tle_atomic_xor<cuda::memory_order_acq_rel>', T\.access_ptr\(c_ptr\[48\], 'rw'\), 1\)\n",
                     src), src
    # an or whose value nothing reads stays TileLang's own
    assert re.search(r"if T\.get_thread_binding\(\) == 0:\n\s+T\.atomic_or\(c_ptr\[\(48 \+ 1\)\], 2\)\n", src), src
    run_on("tilelang", ordered, (1,), c, BLOCK=16)
    offs = torch.arange(16, dtype=torch.int32)
    assert torch.equal(c[:16], offs) and (c[16:32] == 0).all()
    assert c[32] == 1 and (c[33:48] == 0).all()                   # cas wrote where 0 == offs: lane 0 only
    assert c[48] == 1 and c[49] == 2


@tle.jit
def system_scoped(c_ptr, KIND: tl.constexpr):
    if KIND == 0:
        tl.atomic_cas(c_ptr, 0, 1, scope="sys")
    else:
        tl.atomic_xchg(c_ptr, 1, scope="sys")


@pytest.mark.parametrize("kind, construct", [(0, "tl.atomic_cas"), (1, "tl.atomic_xchg")])
def test_system_scope_is_refused(kind, construct):
    with pytest.raises(LoweringError, match=rf"{construct}\(scope='sys'\): TileLang's atomics are device-scoped"):
        system_scoped.lower(torch.zeros(1, dtype=torch.int32), KIND=kind, grid=(1,), backend="tilelang")


@tle.jit
def typed(p_ptr, KIND: tl.constexpr):
    offs = tl.arange(0, 16)
    if KIND == 0:
        tl.atomic_xchg(p_ptr + offs, 1.0)
    elif KIND == 1:
        tl.atomic_and(p_ptr + offs, 1)
    else:
        tl.atomic_cas(p_ptr + offs, 0, 1)


@pytest.mark.parametrize("kind, dtype, construct", [(0, torch.float16, "tl.atomic_xchg on fp16"),
                                                    (1, torch.int16, "tl.atomic_and on i16"),
                                                    (2, torch.int8, "tl.atomic_cas on i8")])
def test_dtypes_triton_refuses_are_refused(kind, dtype, construct):
    with pytest.raises(LoweringError, match=rf"{construct} memory: Triton's atomic_\w+ takes"):
        typed.lower(torch.zeros(16, dtype=dtype), KIND=kind, grid=(1,), backend="tilelang")


# -- compiled for sm_90a without a GPU (nvcc): one atom instruction each, with the order --------------------------
def _atoms(ptx: str) -> Counter:
    """The atom instructions of a PTX text as {op, order, scope, type} sets: Triton writes
    atom.global.gpu.acq_rel.and.b32, cuda::atomic_ref atom.and.acq_rel.gpu.b32."""
    found = Counter()
    for m in re.finditer(r"\batom((?:\.\w+)+)", ptx):
        found[frozenset(t for t in m.group(1).split(".") if t and t != "global")] += 1
    return found


@pytest.mark.slow
@pytest.mark.parametrize("dtype, bits", [(torch.int32, 32), (torch.int64, 64)])
def test_bitwise_atomics_compile_to_ordered_atom_instructions(dtype, bits):
    args = [torch.zeros(64, dtype=dtype)] * 6
    tilelang = contended_bitwise.lower(*args, BLOCK=32, SLOTS=4, grid=(2,), backend="tilelang")
    cuda = tilelang.stage("cuda")
    assert "tle_atomic_and<cuda::memory_order_acq_rel>((&(c_ptr[" in cuda
    ptx = tilelang.stage("ptx")
    for op in ("and", "or", "xor", "exch"):
        assert f"atom.{op}.acq_rel.gpu.b{bits}" in ptx, op
    # the same instructions as Triton's own lowering of the kernel
    triton = contended_bitwise.lower(*args, BLOCK=32, SLOTS=4, grid=(2,), backend="triton").stage("ptx")
    assert set(_atoms(ptx)) == set(_atoms(triton)), (_atoms(ptx), _atoms(triton))


@pytest.mark.slow
@pytest.mark.parametrize("dtype, bits", [(torch.float16, 16), (torch.int32, 32), (torch.float64, 64)])
def test_compare_and_swap_compiles_to_atom_cas(dtype, bits):
    args = (torch.zeros(8, dtype=dtype), torch.zeros(64, dtype=dtype), torch.zeros(64, dtype=dtype))
    ptx = claims.lower(*args, FLAGS=8, BLOCK=32, grid=(2,), backend="tilelang").stage("ptx")
    assert f"atom.cas.acq_rel.gpu.b{bits}" in ptx
    triton = claims.lower(*args, FLAGS=8, BLOCK=32, grid=(2,), backend="triton").stage("ptx")
    assert set(_atoms(ptx)) == set(_atoms(triton))


@pytest.mark.slow
def test_orders_compile_as_written():
    ptx = ordered.lower(torch.zeros(64, dtype=torch.int32), BLOCK=16, grid=(1,), backend="tilelang").stage("ptx")
    for atom in ("atom.exch.release.gpu.b32", "atom.and.relaxed.gpu.b32", "atom.cas.acquire.gpu.b32",
                 "atom.xor.acq_rel.gpu.b32"):
        assert atom in ptx, atom


# -- tl.device_print ------------------------------------------------------------------------------------------------
@tle.jit
def printed_kinds(x_ptr, i_ptr, l_ptr, BLOCK: tl.constexpr, HEX_FLOATS: tl.constexpr = True):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    i = tl.load(i_ptr + offs)
    w = tl.load(l_ptr + offs)
    tl.device_print("x", x)
    tl.device_print("xi ", x, i)
    tl.device_print("", i.to(tl.uint32))
    tl.device_print("h", i, hex=True)
    tl.device_print("w", w)
    tl.device_print("hw", w, hex=True)
    if HEX_FLOATS:                                   # Triton's interpreter cannot print these
        tl.device_print("hf", x, hex=True)
    tl.device_print("2d", tl.reshape(x, (4, BLOCK // 4)))
    tl.device_print("b", x > 0)
    tl.device_print("f16", x.to(tl.float16))
    tl.device_print("i8", i.to(tl.int8), hex=True)
    tl.device_print("pid", tl.program_id(0))
    tl.device_print("done")


def _pad(k: int, extent: int) -> str:
    """An index as Triton's %<n>u prints it: n is the digits of the axis's extent, ceil(log10(extent))."""
    width = math.ceil(math.log10(extent))
    return f"{k:{width}d}" if width else str(k)


def _low_half_of_double(x: float) -> int:
    """What 0x%08x prints of a float: printf is given it widened to a double and reads 32 bits, the low ones."""
    return struct.unpack("<Q", struct.pack("<d", x))[0] & 0xFFFFFFFF


def print_inputs(block, grid):
    g = torch.Generator().manual_seed(11)
    n = block * grid
    x = (torch.randn(n, generator=g) * 8).float()
    x[::7] = 0.0
    i = torch.randint(-300, 300, (n,), generator=g, dtype=torch.int32)
    w = torch.randint(-(1 << 40), 1 << 40, (n,), generator=g, dtype=torch.int64)
    return x, i, w


def expected_print_lines(x, i, w, block, grid, threads) -> list[str]:
    """The lines Triton's compiled kernel prints (its printf formats), each element once, a scalar or the prefix
    alone once per thread; in the order the interpreter of TileLang programs prints them."""
    lines = []
    rows, cols = 4, block // 4
    for p in range(grid):
        head = f"pid ({p}, 0, 0)"
        xs, is_, ws = (t[p * block:(p + 1) * block].tolist() for t in (x, i, w))
        idx = [_pad(k, block) for k in range(block)]
        lines += [f"{head} idx ({k}) x: {v:f}" for k, v in zip(idx, xs)]
        lines += [f"{head} idx ({k}) xi: (operand 0) {v:f}" for k, v in zip(idx, xs)]
        lines += [f"{head} idx ({k}) xi: (operand 1) {v:d}" for k, v in zip(idx, is_)]
        lines += [f"{head} idx ({k}): {v & 0xFFFFFFFF:d}" for k, v in zip(idx, is_)]
        lines += [f"{head} idx ({k}) h: 0x{v & 0xFFFFFFFF:08x}" for k, v in zip(idx, is_)]
        lines += [f"{head} idx ({k}) w: {v:d}" for k, v in zip(idx, ws)]
        lines += [f"{head} idx ({k}) hw: 0x{v & 0xFFFFFFFFFFFFFFFF:016x}" for k, v in zip(idx, ws)]
        lines += [f"{head} idx ({k}) hf: 0x{_low_half_of_double(v):08x}" for k, v in zip(idx, xs)]
        lines += [f"{head} idx ({_pad(e // cols, rows)}, {_pad(e % cols, cols)}) 2d: {v:f}" for e, v in enumerate(xs)]
        lines += [f"{head} idx ({k}) b: {int(v > 0)}" for k, v in zip(idx, xs)]
        lines += [f"{head} idx ({k}) f16: {float(torch.tensor(v).half()):f}" for k, v in zip(idx, xs)]
        lines += [f"{head} idx ({k}) i8: 0x{((v + 128) % 256 - 128) & 0xFFFFFFFF:02x}" for k, v in zip(idx, is_)]
        lines += [f"{head} idx () pid: {p}"] * threads
        lines += [f"{head} done"] * threads
    return lines


def printed_lines(out: str, tags=("pid (",)) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith(tags)]


@pytest.mark.parametrize("block", [64, 128, 256])     # fewer elements than threads, as many, more
def test_device_print_lines_from_the_interpreter_of_tilelang_programs(capfd, block):
    grid, threads = 2, 128
    x, i, w = print_inputs(block, grid)
    capfd.readouterr()
    run_on("tilelang", printed_kinds, (grid,), x, i, w, BLOCK=block)
    got = printed_lines(capfd.readouterr().out)
    assert got == expected_print_lines(x, i, w, block, grid, threads)


def test_device_print_runs_in_tritons_interpreter(capfd):
    x, i, w = print_inputs(64, 1)
    capfd.readouterr()
    run_on("triton", printed_kinds, (1,), x, i, w, BLOCK=64, HEX_FLOATS=False)
    out = capfd.readouterr().out
    # Triton's interpreter prints a whole tile per line, in a format of its own (and nothing for a prefix alone)
    assert "(0, 0, 0)  x:  [" in out and "(0, 0, 0)  pid:  [0]" in out


def test_device_print_in_the_tilelang_source():
    x, i, w = print_inputs(256, 1)
    src = printed_kinds.lower(x, i, w, BLOCK=256, grid=(1,), backend="tilelang").source
    # a tile from a shared copy, one element per thread, two steps of 128 threads
    assert re.search(r"for (step\w*) in T\.serial\(2\):\n\s+T\.call_extern\('int32', 'printf', "
                     r"'pid \(%u, %u, %u\) idx \(%3u\) x: %f\\n', bx, 0, 0, "
                     r"\(\1 \* 128 \+ T\.get_thread_binding\(\)\), "
                     r"T\.cast\((\w+)\[\(\1 \* 128 \+ T\.get_thread_binding\(\)\)\], 'float64'\)\)", src), src
    assert re.search(r"(\w+) = T\.alloc_shared\(\(256,\), 'float32'\)", src)
    # a scalar: every thread, as on Triton; the prefix alone likewise
    assert re.search(r"\n        T\.call_extern\('int32', 'printf', 'pid \(%u, %u, %u\) idx \(\) pid: %i\\n', "
                     r"bx, 0, 0, bx\)\n", src), src
    assert "T.call_extern('int32', 'printf', 'pid (%u, %u, %u) done\\n', bx, 0, 0)" in src
    assert "idx (%1u, %2u) 2d: %f\\n'" in src and "i8: 0x%02x\\n'" in src and "hw: 0x%016llx\\n'" in src
    small = printed_kinds.lower(*print_inputs(64, 1), BLOCK=64, grid=(1,), backend="tilelang").source
    assert re.search(r"if T\.get_thread_binding\(\) < 64:\n\s+T\.call_extern\('int32', 'printf', "
                     r"'pid \(%u, %u, %u\) idx \(%2u\) x: %f\\n'", small), small


@tle.jit
def printed_fp64(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.device_print("d", x)
    tl.device_print("hd", x, hex=True)


FP64_PRINTED = [1.5, -0.0, 0.0, float("inf"), float("-inf"), float("nan"), 1 / 3, -2.0 ** -1074,
                2.0 ** 1023, -123.456, 1e-300, 2.0 ** 32 + 0.5, -1.0, 7e15, 0.1, -(2.0 ** -1022)]


def test_device_print_of_fp64_in_hex_is_its_64_bits(capfd):
    """Triton compiles `hex=True` of an fp64 to printf's 0x%016llx of the double: all 64 bits, zero-padded
    (test_device_print_of_fp64_formats_are_tritons; its interpreter cannot format a float in hex). The
    TileLang kernel prints those lines in the interpreter of TileLang programs."""
    x = torch.tensor(FP64_PRINTED, dtype=torch.float64)
    capfd.readouterr()
    run_on("tilelang", printed_fp64, (1,), x, BLOCK=16)
    got = printed_lines(capfd.readouterr().out)
    bits = [struct.unpack("<Q", struct.pack("<d", v))[0] for v in FP64_PRINTED]
    head = [f"pid (0, 0, 0) idx ({_pad(k, 16)})" for k in range(16)]
    assert got == [f"{h} d: {v:f}" for h, v in zip(head, FP64_PRINTED)] + \
                  [f"{h} hd: 0x{b:016x}" for h, b in zip(head, bits)]
    assert "hd: 0x3ff8000000000000" in got[16] and "hd: 0x8000000000000000" in got[17]     # 1.5, -0.0


@pytest.mark.slow
def test_device_print_of_fp64_formats_are_tritons():
    x = torch.tensor(FP64_PRINTED, dtype=torch.float64)
    src = printed_fp64.lower(x, BLOCK=16, grid=(1,), backend="tilelang").source
    ours = _format_strings(src, r"'printf', '((?:[^'\\]|\\.)*)'")
    llir = printed_fp64.lower(x, BLOCK=16, grid=(1,), backend="triton").stage("llir")
    theirs = {s.replace("\\0A", "\n").replace("\\00", "") for s in re.findall(r'@printfFormat_\d+ = .*c"(.*)"', llir)}
    assert ours == theirs == {"pid (%u, %u, %u) idx (%2u) d: %f\n", "pid (%u, %u, %u) idx (%2u) hd: 0x%016llx\n"}


@tle.jit
def percent_prefix(x_ptr):
    tl.device_print("100%", tl.load(x_ptr))


def test_a_percent_sign_in_the_prefix_is_refused():
    with pytest.raises(LoweringError, match=r"tl.device_print\(prefix='100%'\): Triton writes the prefix into "
                                            r"printf's format string"):
        percent_prefix.lower(torch.zeros(1), grid=(1,), backend="tilelang")


def _format_strings(text: str, literal: str) -> set[str]:
    return {bytes(m, "ascii").decode("unicode_escape") for m in re.findall(literal, text)}


@pytest.mark.slow
def test_device_print_formats_are_tritons():
    """The printf format strings of the TileLang kernel's CUDA are those Triton compiles the same kernel to."""
    args = print_inputs(128, 2)
    cuda = printed_kinds.lower(*args, BLOCK=128, grid=(2,), backend="tilelang").stage("cuda")
    ours = _format_strings(cuda, r'printf\("((?:[^"\\]|\\.)*)"')
    llir = printed_kinds.lower(*args, BLOCK=128, grid=(2,), backend="triton").stage("llir")
    theirs = {s.replace("\\0A", "\n").replace("\\00", "") for s in re.findall(r'@printfFormat_\d+ = .*c"(.*)"', llir)}
    assert len(ours) == 14 and ours == theirs, (ours ^ theirs)


@pytest.mark.slow
def test_device_print_compiles_to_vprintf():
    lowered = printed_kinds.lower(*print_inputs(64, 1), BLOCK=64, grid=(1,), backend="tilelang")
    assert "vprintf" in lowered.stage("ptx")


# -- the interpreter's printf ---------------------------------------------------------------------------------------
def test_c_conversions_of_the_interpreters_printf():
    assert c_format("pid (%u, %u, %u) idx (%3u) x: %f\n", [1, 0, 0, 7, 1.5]) == "pid (1, 0, 0) idx (  7) x: 1.500000\n"
    assert c_format("%u %i %x", [-1, 4294967295, -2]) == "4294967295 -1 fffffffe"
    assert c_format("%lli %llu 0x%016llx", [-5, -1, -1]) == f"-5 {2**64 - 1} 0x{'f' * 16}"
    assert c_format("0x%02x 0x%00x %0u %% %s", [-3, 1, 9, "a"]) == "0xfffffffd 0x1 9 % a"
    with pytest.raises(Exception, match="converts more arguments"):
        c_format("%i %i", [1])
