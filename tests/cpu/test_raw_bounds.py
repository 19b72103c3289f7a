"""Tile accesses of a tle.raw.dialect function that certainly fall outside the tile are lowering errors on
both backends, at the access's line; accesses that depend on data, or sit in loops that may not run, are not
judged at lowering (the interpreter of TileLang programs reports them when it runs one)."""
import pytest
import torch
import triton.language as tl

pytest.importorskip("jaxlib.mlir")

import tle  # noqa: E402
from tle.lowering.errors import LoweringError  # noqa: E402
from tle.raw import InOut, Input, dialect  # noqa: E402
from tle.raw.mlir import arith, ir, memref, nvvm, scf  # noqa: E402

BACKENDS = ["triton", "tilelang"]


def i32():
    return ir.IntegerType.get_signless(32)


def index(v):
    return arith.index_cast(ir.IndexType.get(), v)


def below(a, c):
    return arith.cmpi(arith.CmpIPredicate.slt, a, arith.constant(i32(), c))


def next_bin(limit):
    """out[t] = hist[t + 1] for the threads t < limit (FlagTree's top-k reads its histogram so)."""
    @dialect(name="mlir")
    def read_next(out: InOut["memref<?xi32, 3>"], hist: Input["memref<?xi32, 3>"]):  # noqa: F722
        tid = nvvm.read_ptx_sreg_tid_x(i32())
        branch = scf.IfOp(below(tid, limit))
        with ir.InsertionPoint(branch.then_block):
            t = index(tid)
            nxt = index(arith.addi(tid, arith.constant(i32(), 1)))
            memref.store(memref.load(hist, [nxt]), out, [t])        # the access of the error
            scf.YieldOp([])
    return read_next


@dialect(name="mlir")
def data_indexed(out: InOut["memref<?xi32, 3>"], hist: Input["memref<?xi32, 3>"]):  # noqa: F722
    """out[t] = hist[hist[t]]: an index from data, not judged at lowering."""
    t = index(nvvm.read_ptx_sreg_tid_x(i32()))
    memref.store(memref.load(hist, [index(memref.load(hist, [t]))]), out, [t])


@tle.jit
def next_kernel(h_ptr, o_ptr, FN: tl.constexpr, B: tl.constexpr):
    h = tl.load(h_ptr + tl.arange(0, B))
    tl.store(o_ptr + tl.arange(0, B), tle.raw.call(FN, [tl.zeros_like(h)], [h]))


def _lower(fn, backend, b=256, num_warps=8):
    return next_kernel.lower(torch.zeros(b, dtype=torch.int32), torch.zeros(b, dtype=torch.int32), FN=fn, B=b,
                             grid=(1,), backend=backend, num_warps=num_warps)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_past_the_tile_for_some_threads_is_an_error(backend):
    with pytest.raises(LoweringError, match=r"raw function 'read_next': memref.load of tile 'hist' at indices "
                                            r"1\.\.256 .* outside its 256 elements") as e:
        _lower(next_bin(256), backend)
    assert e.value.loc.file == __file__


@pytest.mark.parametrize("backend", BACKENDS)
def test_guarded_reads_and_data_indices_lower(backend):
    _lower(next_bin(255), backend)
    _lower(data_indexed, backend)


def test_the_range_follows_the_thread_count():
    # 256 threads: t < 300 is every thread, so t + 1 reaches 256; 4 warps (128 threads) stay inside
    with pytest.raises(LoweringError, match="1..256"):
        _lower(next_bin(300), "triton", num_warps=8)
    _lower(next_bin(300), "triton", num_warps=4)
