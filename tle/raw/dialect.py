"""FlagTree's spelling of a raw function: `@dialect(name="mlir")` over a function whose parameters are
annotated `Input["<MLIR type>"]` or `InOut["<MLIR type>"]`, called in a kernel as
`results = tle.raw.call(fn, outputs, inputs)`.

    @tle.raw.dialect(name="mlir")
    def scale(y: InOut["memref<?xf32, 3>"], x: Input["memref<?xf32, 3>"], n: Input["i32"]): ...

    y = tle.raw.call(scale, [y], [x, n])      # in a @tle.jit kernel

Parameters are tiles (`memref<...x?x..., 3>`: a shared-memory copy of a tile, dynamic extents being the
tile's; `memref.dim` reads them), global pointers (`!llvm.ptr<1>`: a pointer the kernel holds, offset with
llvm.getelementptr and read / written with llvm.load / llvm.store) and scalars (`i32`, `f32`, ...). The
function's parameters are the call's `outputs` followed by its `inputs`, in order. The function runs on every
thread of the program: `nvvm.read_ptx_sreg_tid_x` is the thread's index in the program (0 .. 32*num_warps-1),
`ntid_x` the program's thread count, `ctaid_{x,y,z}` its program ids and `nctaid_{x,y,z}` the grid. Each tile
argument is a fresh shared-memory copy of the kernel's tile; the call returns the final contents of the
`InOut` tiles (one tile alone, several as a tuple, none as None), and the kernel's own tiles keep their values.
`Input` tiles may be written too, as scratch: what is written there is not returned.
"""
from __future__ import annotations

import inspect
import typing
import warnings
from typing import Annotated

from .function import RawFunction, _def_line, canonical_type

ROLES = ("input", "inout")


class _Param:
    """The annotation's payload: the parameter's role and its MLIR type as written."""

    def __init__(self, role: str, text: str):
        if not isinstance(text, str):
            raise TypeError(f"{'InOut' if role == 'inout' else 'Input'}[...] takes the MLIR type as a str, e.g. "
                            f"Input[\"memref<?xf32, 3>\"], got {text!r}")
        self.role, self.text = role, text

    def __repr__(self):
        return f"{'InOut' if self.role == 'inout' else 'Input'}[{self.text!r}]"


class Input:
    """`x: Input["<MLIR type>"]`: a parameter the call passes in (listed in `inputs`)."""

    def __class_getitem__(cls, text):
        return Annotated[Input, _Param("input", text)]


class InOut:
    """`y: InOut["<MLIR type>"]`: a tile the call passes in and returns (listed in `outputs`)."""

    def __class_getitem__(cls, text):
        return Annotated[InOut, _Param("inout", text)]


def dialect(*, name: str = "mlir", pipeline=None):
    """Decorator: the function below is a raw function in `name` (only "mlir"), in FlagTree's form (see the
    module docstring). `pipeline` names the MLIR passes FlagTree lowers the function with; the lowerings here
    read the function as written, so a pipeline given is not used (a warning says so)."""
    if name != "mlir":
        raise ValueError(f"tle.raw.dialect: name must be 'mlir', got {name!r}")

    def wrap(fn) -> RawFunction:
        if isinstance(fn, RawFunction):
            raise TypeError(f"'{fn.name}' is already a raw function")
        if not callable(fn):
            raise TypeError(f"tle.raw.dialect applies to a function, got {type(fn).__name__}")
        if pipeline is not None:
            warnings.warn(f"raw function '{fn.__name__}': dialect(pipeline=...) is not used; the lowerings read "
                          f"the function's MLIR as written", stacklevel=2)
        return from_annotated(fn)

    return wrap


def from_annotated(fn) -> RawFunction:
    """A RawFunction in FlagTree's form from a Python function with Input / InOut annotations."""
    name = fn.__name__
    file = inspect.getsourcefile(fn) or fn.__code__.co_filename
    line = _def_line(fn)
    where = f"raw function '{name}' ({file}:{line})"
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as e:
        raise TypeError(f"{where}: its annotations do not evaluate: {e}") from None
    params, types, roles = [], [], []
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise TypeError(f"{where}: parameter '{p.name}' must be a plain positional parameter")
        spec = next((m for m in getattr(hints.get(p.name), "__metadata__", ()) if isinstance(m, _Param)), None)
        if spec is None:
            raise TypeError(f"{where}: parameter '{p.name}' needs Input[\"<MLIR type>\"] or InOut[\"<MLIR type>\"], "
                            f"e.g. {p.name}: Input[\"memref<?xf32, 3>\"]")
        text = canonical_type(spec.text, f"{where}: parameter '{p.name}'", allow=("tile", "pointer", "scalar"))
        if spec.role == "inout" and not text.startswith("memref<"):
            raise TypeError(f"{where}: parameter '{p.name}' is InOut but of type {text}; InOut parameters are "
                            f"tiles (memref<..., 3>)")
        params.append(p.name)
        types.append(text)
        roles.append(spec.role)
    return RawFunction(name, file, line, tuple(params), tuple(types), fn=fn, roles=tuple(roles))
