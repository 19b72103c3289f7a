"""tle.raw.dialect functions and the kernels calling them, shared by the CPU and GPU tests of their Triton
lowering (import after `pytest.importorskip("jaxlib.mlir")`)."""
import tle
import triton.language as tl
from tle.raw import InOut, Input, dialect
from tle.raw.mlir import arith, ir, llvm, math as mmath, memref, nvvm, scf, vassert, vprintf

GEP_DYNAMIC = -2147483648


def i32():
    return ir.IntegerType.get_signless(32)


def index():
    return ir.IndexType.get()


def as_index(v):
    return arith.index_cast(index(), v)


def const(v):
    return arith.constant(index(), v)


def ntid_i32():
    return nvvm.read_ptx_sreg_ntid_x(i32())


# -- pointers: out[i] = x[i] + y[i], a grid-stride loop over every thread of the grid ---------------------------
@dialect(name="mlir")
def vector_add(output: Input["!llvm.ptr<1>"], x: Input["!llvm.ptr<1>"], y: Input["!llvm.ptr<1>"],  # noqa: F722
               n: Input["i32"]):  # noqa: F821
    tid, ntid = as_index(nvvm.read_ptx_sreg_tid_x(i32())), as_index(nvvm.read_ptx_sreg_ntid_x(i32()))
    block, grid = as_index(nvvm.read_ptx_sreg_ctaid_x(i32())), as_index(nvvm.read_ptx_sreg_nctaid_x(i32()))
    start = arith.addi(arith.muli(block, ntid), tid)
    for i in scf.for_(start, as_index(n), arith.muli(ntid, grid)):
        j = arith.index_cast(i32(), i)
        p, f32 = ir.Type.parse("!llvm.ptr<1>"), ir.F32Type.get()
        a = llvm.load(f32, llvm.getelementptr(p, x, [j], [GEP_DYNAMIC], f32, 0))
        b = llvm.load(f32, llvm.getelementptr(p, y, [j], [GEP_DYNAMIC], f32, 0))
        llvm.store(arith.addf(a, b), llvm.getelementptr(p, output, [j], [GEP_DYNAMIC], f32, 0))
        scf.yield_([])


@tle.jit
def vector_add_kernel(x_ptr, y_ptr, out_ptr, n):
    tle.raw.call(vector_add, [], [out_ptr, x_ptr, y_ptr, n])


# -- a shared tile: y[0] becomes the sum of y, halving the live length in a while loop ---------------------------
@dialect(name="mlir")
def tree_sum(y: InOut["memref<?xf32, 3>"]):  # noqa: F722
    tid, ntid = as_index(nvvm.read_ptx_sreg_tid_x(i32())), as_index(nvvm.read_ptx_sreg_ntid_x(i32()))
    length = memref.dim(y, const(0))
    loop = scf.WhileOp([index()], [length])
    before = loop.before.blocks.append(index())
    after = loop.after.blocks.append(index())
    with ir.InsertionPoint(before):
        live = before.arguments[0]
        scf.ConditionOp(arith.cmpi(arith.CmpIPredicate.sgt, live, const(1)), [live])
    with ir.InsertionPoint(after):
        live = after.arguments[0]
        half = arith.ceildivsi(live, const(2))
        for i in scf.for_(tid, arith.subi(live, half), ntid):
            far = arith.addi(i, half)
            memref.store(arith.addf(memref.load(y, [i]), memref.load(y, [far])), y, [i])
            scf.yield_([])
        nvvm.barrier0()
        scf.YieldOp([half])


@tle.jit
def tree_sum_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    y = tle.raw.call(tree_sum, [tl.load(x_ptr + offs)], [])
    tl.store(out_ptr + offs, y)


# -- shared atomics into a written Input tile (scratch), then copied to the InOut one ------------------------------
@dialect(name="mlir")
def histogram(counts: InOut["memref<?xi32, 3>"], data: Input["memref<?xi32, 3>"],  # noqa: F722
              bins: Input["memref<?xi32, 3>"]):  # noqa: F722
    tid, ntid = as_index(nvvm.read_ptx_sreg_tid_x(i32())), as_index(nvvm.read_ptx_sreg_ntid_x(i32()))
    nbins = memref.dim(bins, const(0))
    for i in scf.for_(tid, nbins, ntid):
        memref.store(arith.constant(i32(), 0), bins, [i])
        scf.yield_([])
    nvvm.barrier0()
    for i in scf.for_(tid, memref.dim(data, const(0)), ntid):
        b = as_index(memref.load(data, [i]))
        memref.atomic_rmw(arith.AtomicRMWKind.addi, arith.constant(i32(), 1), bins, [b])
        scf.yield_([])
    nvvm.barrier0()
    for i in scf.for_(tid, nbins, ntid):
        memref.store(memref.load(bins, [i]), counts, [i])
        scf.yield_([])


@tle.jit
def histogram_kernel(data_ptr, out_ptr, N: tl.constexpr, BINS: tl.constexpr):
    data = tl.load(data_ptr + tl.arange(0, N))
    zeros = tl.zeros([BINS], tl.int32)
    counts = tle.raw.call(histogram, [zeros], [data, zeros])
    tl.store(out_ptr + tl.arange(0, BINS), counts)


# -- a 2-D tile, math through libdevice, a named barrier, printing and an assertion ---------------------------------
@dialect(name="mlir")
def exp_rows(y: InOut["memref<?x?xf32, 3>"], x: Input["memref<?x?xf32, 3>"], scale: Input["f32"]):  # noqa: F722
    tid, ntid = as_index(nvvm.read_ptx_sreg_tid_x(i32())), as_index(nvvm.read_ptx_sreg_ntid_x(i32()))
    rows, cols = memref.dim(y, const(0)), memref.dim(y, const(1))
    for i in scf.for_(tid, arith.muli(rows, cols), ntid):
        r, c = arith.divsi(i, cols), arith.remsi(i, cols)
        memref.store(mmath.exp(arith.mulf(memref.load(x, [r, c]), scale)), y, [r, c])
        scf.yield_([])
    nvvm.BarrierOp(barrierId=arith.constant(i32(), 1), numberOfThreads=ntid_i32())
    positive = arith.cmpf(arith.CmpFPredicate.OGT, memref.load(y, [const(0), const(0)]), arith.constant(
        ir.F32Type.get(), 0.0))
    vassert(positive, "exp must be positive\n")
    first = arith.cmpi(arith.CmpIPredicate.eq, tid, const(0))
    branch = scf.IfOp(first)
    with ir.InsertionPoint(branch.then_block):
        vprintf("exp_rows: y[0][0]=%f rows=%d\n", memref.load(y, [const(0), const(0)]),
                arith.index_cast(i32(), rows))
        scf.YieldOp([])


@tle.jit
def exp_rows_kernel(x_ptr, out_ptr, scale, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + offs)
    y = tle.raw.call(exp_rows, [x], [x, scale])
    tl.store(out_ptr + offs, y)
