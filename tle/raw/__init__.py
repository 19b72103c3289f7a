"""TLE-Raw: an escape hatch to thread-level code written in MLIR, called on tiles from a tle kernel.

    from typing import Annotated
    import tle
    from tle.raw.mlir import ir, arith, nvvm, tensor

    @tle.raw.language(name="mlir")
    @tle.hardware_constraint(threads_dim=1, sync_scope="block")
    def add(x: Annotated[ir.RankedTensorType, "tensor<1024xf32>"],
            y: Annotated[ir.RankedTensorType, "tensor<1024xf32>"],
            out: Annotated[ir.RankedTensorType, "tensor<1024xf32>"]):
        i = arith.index_cast(ir.IndexType.get(), nvvm.ThreadIdXOp(ir.IntegerType.get_signless(32)).res)
        tensor.insert(arith.addf(tensor.extract(x, [i]), tensor.extract(y, [i])), out, [i])

    # in a @tle.jit kernel:  tle.call(add, args=[x, y, out], hardware={"threads": (1024,)})

Semantics of a call `tle.call(fn, args, hardware={"threads": (n0, ...)}, layout=...)`:
- The function runs at thread level over one tile: its launch domain is the tile, one block of
  `hardware["threads"]` threads. Inside it nvvm BlockId{X,Y,Z} are 0, GridDim is 1, BlockDim is the thread
  count along that axis and ThreadId the thread's index along it (0 and 1 past the given axes).
- Each parameter is one tile of `args`, in order. `tensor.extract(t, [i, ...])` reads an element of it;
  `tensor.insert(v, t, [i, ...])` writes element i of that argument's buffer (destination passing: the
  op's SSA result names the same buffer, so inserting into it writes that argument too). All SSA versions
  of an argument are that one buffer: a read sees the writes made before it (by other threads only after a
  barrier). Positions never written keep the value the argument had before the call. The call's results
  are the final contents of the arguments that are written ("outputs"), in argument order.
- Supported ops: arith (constant, integer and float arithmetic, min/max, bitwise, shifts, cmpi/cmpf with
  every predicate, select, index_cast and the casts), math (exp, exp2, log, log2, sqrt, rsqrt, tanh,
  absf, absi, erf, sin, cos, floor, ceil, fma, powf), the nvvm thread/block id and dim registers,
  tensor.extract / tensor.insert, scf.for (with iter_args), scf.if (with results), scf.yield,
  func.return, and a whole-block barrier (nvvm.barrier0, or nvvm.barrier without operands). Any other op
  raises tle.lowering.errors.UnsupportedConstruct naming the op and the backend, at lowering time.
  `index` values are 32-bit integers.
- In a kernel the call returns nothing: afterwards each written tile of `args` (the object the kernel
  holds, under whatever names) denotes its new contents, in loops and branches too. Each argument must be
  a tile of exactly its parameter's shape and dtype. `layout={tile: {"space": "shared", "order": [...]}}`
  (optional, keyed by tiles of `args`) places a tile: "shared" is the only space; `order` lists the
  tile's axes fastest-varying first, as Triton's layouts do, and is a hint.
- The function's threads are the kernel's own: the product of `hardware["threads"]` is the kernel's thread
  count, 32 * num_warps, on every backend (thread axis x varies fastest). A launch without num_warps takes
  it from the calls (threads / 32); one with another num_warps, or calls asking for different counts, are
  lowering errors naming both numbers.
- Backends: TileLang runs the function as written, thread by thread, on shared-memory copies of the
  tiles. Triton has no threads, so it lowers
  a function only when it is element-wise over the tile (every access at one index vector computed from
  the thread/block ids that reaches each tile element exactly once); otherwise UnsupportedConstruct.

hardware_constraint(threads_dim, sync_scope) declares what the function needs from its launch domain:
- threads_dim (1..3): the thread axes it uses; reading a thread/block id or dim along a later axis is a
  LoweringError. `hardware["threads"]` gives one count per axis.
- sync_scope: "block" (default): threads may exchange data through the tiles, separated by block
  barriers; "warp": threads exchange data only within their warp, without a block barrier; "none": every
  thread touches only its own elements. A block barrier in a function that is not "block" is a
  LoweringError.
Without the decorator a function has threads_dim=1, sync_scope="block". The two decorators may be given
in either order.
"""
from __future__ import annotations

from .dialect import InOut, Input, dialect
from .function import SYNC_SCOPES, RawFunction, check_sync_scope, check_threads_dim, from_python, from_text

__all__ = ["language", "hardware_constraint", "from_text", "call", "dialect", "Input", "InOut", "RawFunction",
           "SYNC_SCOPES", "LANGUAGES"]

LANGUAGES = ("mlir",)
_CONSTRAINT = "__tle_hardware_constraint__"


def language(name: str = "mlir"):
    """Decorator: the function below is a raw function in `name` (only "mlir")."""
    if callable(name):
        raise TypeError("write @tle.raw.language(name='mlir'), with the language named")
    if name not in LANGUAGES:
        raise ValueError(f"tle.raw.language: name must be one of {', '.join(map(repr, LANGUAGES))}, got {name!r}")

    def wrap(fn) -> RawFunction:
        if isinstance(fn, RawFunction):
            raise TypeError(f"'{fn.name}' is already a raw function")
        if not callable(fn):
            raise TypeError(f"tle.raw.language applies to a function, got {type(fn).__name__}")
        threads_dim, sync_scope = getattr(fn, _CONSTRAINT, (1, "block"))
        raw = from_python(fn, threads_dim, sync_scope)
        raw.constrained = hasattr(fn, _CONSTRAINT)
        return raw

    return wrap


def hardware_constraint(threads_dim: int = 1, sync_scope: str = "block"):
    """Decorator: the launch domain a raw function needs (see the module docstring); either order with
    @language."""
    check_threads_dim(threads_dim)
    check_sync_scope(sync_scope)

    def wrap(target):
        if isinstance(target, RawFunction):
            if target.constrained:
                raise ValueError(f"raw function '{target.name}' already has a hardware constraint")
            return target.with_constraint(threads_dim, sync_scope)
        if not callable(target):
            raise TypeError(f"hardware_constraint applies to a function, got {type(target).__name__}")
        if hasattr(target, _CONSTRAINT):
            raise ValueError(f"'{target.__name__}' already has a hardware constraint")
        setattr(target, _CONSTRAINT, (threads_dim, sync_scope))
        return target

    return wrap


def call(fn, args, hardware=None, layout=None):
    """Call raw function `fn` on the tiles `args` (see the module docstring). Only inside a @tle.jit kernel,
    where it returns nothing: afterwards each written tile of `args` names its new contents.
    A function in FlagTree's form (tle.raw.dialect) is called `call(fn, outputs, inputs)` and returns the
    new contents of `outputs` (see tle/raw/dialect.py).
    `hardware={"threads": (n0, ...)}`: one thread count per axis of the function's threads_dim.
    `layout={tile: {"space": "shared", "order": [...]}}` (optional): where each tile is placed ("shared"
    is the only space) and the order of its axes in memory, fastest-varying first as in Triton's layouts
    ([1, 0] is row-major for a 2-D tile); the order is a hint a backend may not need."""
    raise RuntimeError("tle.call can only be used inside a @tle.jit kernel")


def _register():
    from tle.lowering.frontend import register_tle_builtin
    from tle.lowering.frontend.raw_call import raw_call

    register_tle_builtin(call, raw_call)


_register()

