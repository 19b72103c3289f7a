"""The MLIR Python bindings raw functions are written with:

    from tle.raw.mlir import ir, arith, math, scf, func, nvvm, tensor, memref, llvm, vprintf, vassert

These are the upstream `mlir` package's modules when it is installed, else jaxlib's copy (`jaxlib.mlir`,
the `raw` extra). `tensor` and `nvvm` are thin wrappers that behave the same on both (see _tensor.py,
_nvvm.py); `vprintf` and `vassert` are FlagTree's printing and assertion helpers (_print.py). Use these
modules rather than importing a binding directly: the function is built in a context of the chosen
bindings, and values of one bindings cannot be used with the other's builders. FlagTree's
`from mlir.dialects import arith, memref, ...` reads the same here as `from tle.raw.mlir import ...`.
"""
from tle.lowering.raw import bindings as _bindings

_b = _bindings.load()
ir, arith, math, scf, func = _b.ir, _b.arith, _b.math, _b.scf, _b.func
llvm, memref, gpu, cf = _b.llvm, _b.memref, _b.gpu, _b.cf
BINDINGS = _b.name
new_context = _bindings.new_context

from tle.raw import _nvvm as nvvm  # noqa: E402
from tle.raw import _tensor as tensor  # noqa: E402
from tle.raw._print import vassert, vprintf  # noqa: E402

__all__ = ["ir", "arith", "math", "scf", "func", "nvvm", "tensor", "memref", "llvm", "gpu", "cf", "vprintf",
           "vassert", "BINDINGS", "new_context"]
