"""Which MLIR Python bindings raw functions are built and read with.

The upstream `mlir` package is used when it is importable; otherwise jaxlib's copy (`jaxlib.mlir`), which
ships every dialect a raw function needs. Both are imported lazily, so `import tle` works without either.
A jaxlib context knows no dialects until they are registered into it, so contexts come from `new_context`.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

INSTALL_HINT = "raw MLIR functions need MLIR Python bindings: pip install 'tle[raw]' (jaxlib) or the mlir package"


@functools.lru_cache(maxsize=None)
def load() -> SimpleNamespace:
    """The chosen bindings: ir, the dialect modules, `name` ("mlir" or "jaxlib") and `tensor` (upstream's
    tensor dialect module, or None where the bindings have none)."""
    try:
        from mlir import ir
        from mlir.dialects import arith, cf, func, gpu, llvm, math, memref, nvvm, scf
        try:
            from mlir.dialects import tensor
        except ImportError:
            tensor = None
        return SimpleNamespace(name="mlir", ir=ir, arith=arith, func=func, math=math, nvvm=nvvm, scf=scf,
                               llvm=llvm, memref=memref, gpu=gpu, cf=cf, tensor=tensor, register=None)
    except ImportError:
        pass
    try:
        from jaxlib.mlir import ir
        from jaxlib.mlir._mlir_libs import _jax_mlir_ext
        from jaxlib.mlir.dialects import arith, cf, func, gpu, llvm, math, memref, nvvm, scf
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    return SimpleNamespace(name="jaxlib", ir=ir, arith=arith, func=func, math=math, nvvm=nvvm, scf=scf, llvm=llvm,
                           memref=memref, gpu=gpu, cf=cf, tensor=None, register=_jax_mlir_ext.register_dialects)


def new_context():
    """A context with the arith, math, scf, func, tensor, memref, llvm, gpu, cf and nvvm dialects loaded."""
    b = load()
    ctx = b.ir.Context()
    if b.register is not None:
        registry = b.ir.DialectRegistry()
        b.register(registry)
        ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    return ctx


def isa(obj, cls) -> bool:
    """isinstance for MLIR attributes and types; older bindings spell it `cls.isinstance(obj)`."""
    if isinstance(obj, cls):
        return True
    check = getattr(cls, "isinstance", None)
    return bool(check(obj)) if callable(check) else False
