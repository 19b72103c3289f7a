"""Raw MLIR functions and helpers that the CPU and GPU tests of tle.call share (import after
`pytest.importorskip("jaxlib.mlir")`)."""
from typing import Annotated

import tle
from tle.raw.mlir import arith, ir, nvvm, tensor

F4x32 = Annotated[ir.RankedTensorType, "tensor<4x32xf32>"]


def thread_index(op):
    """The index value of an nvvm special register (ThreadIdXOp, ThreadIdYOp, BlockIdXOp, ...)."""
    return arith.index_cast(ir.IndexType.get(), op(ir.IntegerType.get_signless(32)).res)


@tle.raw.language(name="mlir")
@tle.hardware_constraint(threads_dim=2, sync_scope="none")
def triple_2d(x: F4x32, out: F4x32):
    """out[ty, tx] = 3 * x[ty, tx] on a 4x32 tile, threads (32, 4)."""
    tx, ty = thread_index(nvvm.ThreadIdXOp), thread_index(nvvm.ThreadIdYOp)
    v = tensor.extract(x, [ty, tx])
    tensor.insert(arith.mulf(v, arith.constant(ir.F32Type.get(), 3.0)), out, [ty, tx])
