"""Raw functions in FlagTree's form (tle.raw.dialect) and kernels calling them, shared by the CPU and GPU
tests."""
import pytest
import triton.language as tl

pytest.importorskip("jaxlib.mlir")

import tle  # noqa: E402
from tle.raw import InOut, Input, dialect  # noqa: E402
from tle.raw.mlir import arith, ir, llvm, memref, nvvm, scf, vassert, vprintf  # noqa: E402

DYNAMIC = -2147483648          # llvm.getelementptr's marker of a dynamic index


def i32():
    return ir.IntegerType.get_signless(32)


def index(v=None):
    return ir.IndexType.get() if v is None else arith.index_cast(ir.IndexType.get(), v)


def element(base, i, elem):
    """The address of element i (an i32) of the elem-typed array at `base`."""
    return llvm.getelementptr(ir.Type.parse("!llvm.ptr<1>"), base, [i], [DYNAMIC], elem, 0)


@dialect(name="mlir")
def grid_stride_add(out: Input["!llvm.ptr<1>"], x: Input["!llvm.ptr<1>"], y: Input["!llvm.ptr<1>"],  # noqa: F722
                    n: Input["i32"]):  # noqa: F821
    """out[i] = x[i] + y[i] over a grid-stride loop: every thread of every program."""
    tid, ntid = index(nvvm.read_ptx_sreg_tid_x(i32())), index(nvvm.read_ptx_sreg_ntid_x(i32()))
    bid, nbid = index(nvvm.read_ptx_sreg_ctaid_x(i32())), index(nvvm.read_ptx_sreg_nctaid_x(i32()))
    f32 = ir.F32Type.get()
    for i in scf.for_(arith.addi(arith.muli(bid, ntid), tid), index(n), arith.muli(ntid, nbid)):
        j = arith.index_cast(i32(), i)
        total = arith.addf(llvm.load(f32, element(x, j, f32)), llvm.load(f32, element(y, j, f32)))
        llvm.store(total, element(out, j, f32))
        scf.yield_([])


@dialect(name="mlir")
def tree_sum(acc: InOut["memref<?xf32, 3>"], x: Input["memref<?xf32, 3>"]):  # noqa: F722
    """acc[0] = sum(x): x copied into acc, then halved until one element is left (a barrier per step)."""
    tid, ntid = index(nvvm.read_ptx_sreg_tid_x(i32())), index(nvvm.read_ptx_sreg_ntid_x(i32()))
    n = memref.dim(acc, arith.constant(index(), 0))
    for i in scf.for_(tid, n, ntid):
        memref.store(memref.load(x, [i]), acc, [i])
        scf.yield_([])
    nvvm.barrier0()
    loop = scf.while_([index()], [n])
    before = loop.owner.opview.before.blocks.append(index())
    after = loop.owner.opview.after.blocks.append(index())
    with ir.InsertionPoint(before):
        [length] = before.arguments
        scf.condition(arith.cmpi(arith.CmpIPredicate.sgt, length, arith.constant(index(), 1)), [length])
    with ir.InsertionPoint(after):
        [length] = after.arguments
        half = arith.ceildivsi(length, arith.constant(index(), 2))
        for i in scf.for_(tid, arith.subi(length, half), ntid):
            upper = memref.load(acc, [arith.addi(i, half)])
            memref.store(arith.addf(memref.load(acc, [i]), upper), acc, [i])
            scf.yield_([])
        nvvm.barrier0()
        scf.yield_([half])


@dialect(name="mlir")
def histogram(counts: InOut["memref<?xi32, 3>"], bins: Input["memref<?xi32, 3>"],  # noqa: F722
              seen: Input["memref<?xi32, 3>"]):  # noqa: F722
    """counts[b] += 1 for every b of bins (atomics on the shared copy); `seen` counts too, as scratch."""
    tid, ntid = index(nvvm.read_ptx_sreg_tid_x(i32())), index(nvvm.read_ptx_sreg_ntid_x(i32()))
    one = arith.constant(i32(), 1)
    for i in scf.for_(tid, memref.dim(bins, arith.constant(index(), 0)), ntid):
        b = index(memref.load(bins, [i]))
        memref.atomic_rmw(arith.AtomicRMWKind.addi, one, counts, [b])
        memref.atomic_rmw(arith.AtomicRMWKind.addi, one, seen, [b])
        scf.yield_([])


@dialect(name="mlir")
def accumulate_product(c: InOut["memref<?x?xf32, strided<[?, 1], offset: ?>, 3>"],  # noqa: F722
                       a: Input["memref<?x?xf32, 3>"], b: Input["memref<?x?xf32, 3>"]):  # noqa: F722
    """c += a @ b, one element of c per thread and step, the product over k carried by the loop."""
    tid, ntid = index(nvvm.read_ptx_sreg_tid_x(i32())), index(nvvm.read_ptx_sreg_ntid_x(i32()))
    zero, one = arith.constant(index(), 0), arith.constant(index(), 1)
    m, n, k = memref.dim(c, zero), memref.dim(c, one), memref.dim(a, one)
    for e in scf.for_(tid, arith.muli(m, n), ntid):
        row, col = arith.divsi(e, n), arith.remsi(e, n)
        for j, acc, total in scf.for_(zero, k, one, [arith.constant(ir.F32Type.get(), 0.0)]):
            scf.yield_([arith.addf(acc, arith.mulf(memref.load(a, [row, j]), memref.load(b, [j, col])))])
        memref.store(arith.addf(memref.load(c, [row, col]), total), c, [row, col])
        scf.yield_([])


@dialect(name="mlir")
def hello():
    """Every thread prints its program and thread ids."""
    vprintf("program %d thread %d\n", nvvm.read_ptx_sreg_ctaid_x(i32()), nvvm.read_ptx_sreg_tid_x(i32()))


@dialect(name="mlir")
def threads_below(limit: Input["i32"]):  # noqa: F821
    """Asserts that the thread index is below `limit`."""
    tid = nvvm.read_ptx_sreg_tid_x(i32())
    vassert(arith.cmpi(arith.CmpIPredicate.slt, tid, limit), "thread %d is not below the limit\n", tid)


# -- kernels -----------------------------------------------------------------------------------------------
@tle.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n):
    tle.raw.call(grid_stride_add, [], [out_ptr, x_ptr, y_ptr, n])


@tle.jit
def sum_kernel(x_ptr, out_ptr, N: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * N + tl.arange(0, N))
    acc = tle.raw.call(tree_sum, [tl.zeros_like(x)], [x])
    tl.store(out_ptr + row * N + tl.arange(0, N), acc)


@tle.jit
def histogram_kernel(bins_ptr, counts_ptr, seen_ptr, N: tl.constexpr, B: tl.constexpr):
    bins = tl.load(bins_ptr + tl.arange(0, N))
    seen = tl.zeros([B], dtype=tl.int32)
    counts = tle.raw.call(histogram, [tl.zeros([B], dtype=tl.int32)], [bins, seen])
    tl.store(counts_ptr + tl.arange(0, B), counts)
    tl.store(seen_ptr + tl.arange(0, B), seen)          # the kernel's own tile: the call wrote a copy


@tle.jit
def product_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = tl.full([M, N], 1.0, tl.float32)
    for _ in range(2):
        c = tle.raw.call(accumulate_product, [c], [a, b])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


@tle.jit
def hello_kernel():
    tle.raw.call(hello, [], [])


@tle.jit
def assert_kernel(x_ptr, limit):
    tle.raw.call(threads_below, [], [limit])
