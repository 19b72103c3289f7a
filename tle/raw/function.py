"""RawFunction: a function in MLIR, from a Python body written with the bindings or from MLIR text.

What is kept is the verified textual module (`mlir_text`); every later step parses it again in a fresh
context, so no MLIR object outlives the call that made it. A Python body is built on first use, not when
it is decorated.
"""
from __future__ import annotations

import copy
import inspect
import sys
import typing

from tle.lowering.errors import LoweringError
from tle.lowering.ir.core import Loc
from tle.lowering.raw import bindings
from tle.lowering.raw.body import RawBody, check_constraints, find_func, param_type, read_body, tile_type
from tle.lowering.raw.callee import RawCallee

SYNC_SCOPES = ("block", "warp", "none")


def check_threads_dim(threads_dim):
    if isinstance(threads_dim, bool) or not isinstance(threads_dim, int):
        raise TypeError(f"threads_dim must be an int in 1..3, got {threads_dim!r}"
                        + (" (write @hardware_constraint(...) with parentheses)" if callable(threads_dim) else ""))
    if not 1 <= threads_dim <= 3:
        raise ValueError(f"threads_dim must be 1, 2 or 3 (the thread axes the function uses), got {threads_dim}")


def check_sync_scope(sync_scope):
    if not isinstance(sync_scope, str):
        raise TypeError(f"sync_scope must be one of {', '.join(map(repr, SYNC_SCOPES))}, got {sync_scope!r}")
    if sync_scope not in SYNC_SCOPES:
        raise ValueError(f"sync_scope must be one of {', '.join(map(repr, SYNC_SCOPES))}, got {sync_scope!r}")


class RawFunction(RawCallee):
    """A raw MLIR function: its name, where it was defined, its parameters (names and MLIR types), its
    hardware constraint, and (built on demand, cached) its verified MLIR text and body. `roles` is None for
    the project's form (tensor tiles, tle.raw.language) and, in FlagTree's form (tle.raw.dialect), each
    parameter's "input" or "inout": such a function runs on the program's own threads and block ids."""

    def __init__(self, name: str, file: str, line: int, params: tuple[str, ...], param_types: tuple[str, ...],
                 threads_dim: int = 1, sync_scope: str = "block", fn=None, text: str | None = None,
                 roles: tuple[str, ...] | None = None):
        check_threads_dim(threads_dim)
        check_sync_scope(sync_scope)
        self.name, self.file, self.line = name, file, line
        self.params, self.param_types = tuple(params), tuple(param_types)
        self.threads_dim, self.sync_scope = threads_dim, sync_scope
        self.fn = fn
        self.roles = roles
        self.__doc__ = getattr(fn, "__doc__", None)
        self._text = text
        self._body: RawBody | None = None
        self.constrained = False      # hardware_constraint was applied

    @property
    def loc(self) -> Loc:
        return Loc(self.file, self.line, self.name)

    @property
    def tiles(self):
        """(shape, tle dtype) of each parameter, from its MLIR type (a memref's dynamic extents are None)."""
        return tuple(param_type(t)[1:3] for t in self.param_types)

    @property
    def kinds(self) -> tuple[str, ...]:
        """"tile", "pointer" or "scalar" per parameter."""
        return tuple(param_type(t)[0] for t in self.param_types)

    @property
    def flagtree(self) -> bool:
        """FlagTree's form: called as call(fn, outputs, inputs), run on the program's threads."""
        return self.roles is not None

    def with_constraint(self, threads_dim: int, sync_scope: str) -> "RawFunction":
        if self.flagtree:
            raise TypeError(f"raw function '{self.name}' (tle.raw.dialect) runs on the program's threads; "
                            f"hardware_constraint applies to tle.raw.language functions")
        check_threads_dim(threads_dim)
        check_sync_scope(sync_scope)
        new = copy.copy(self)
        new.threads_dim, new.sync_scope, new.constrained, new._body = threads_dim, sync_scope, True, None
        return new

    # -- MLIR ------------------------------------------------------------------------------------------
    def build(self) -> str:
        """The function's module as verified MLIR text (built, verified, printed and parsed back once)."""
        if self._text is None:
            self._text = self._build()
        return self._text

    @property
    def mlir_text(self) -> str:
        return self.build()

    def module(self):
        """The module parsed from `mlir_text` in a new context (kept alive by the module)."""
        ir = bindings.load().ir
        with bindings.new_context():
            return ir.Module.parse(self.build())

    def body(self) -> RawBody:
        """The backend-neutral form the lowerings render (checked against the hardware constraint)."""
        if self._body is None:
            body = read_body(self.build(), self.name, self.params, self.loc)
            if not self.flagtree:       # FlagTree's functions read the program's thread and block registers
                check_constraints(body, self.threads_dim, self.sync_scope)
            self._body = body
        return self._body

    def _error(self, what: str, e: BaseException | None = None) -> LoweringError:
        detail = f": {e}" if e is not None else ""
        return LoweringError(f"raw function '{self.name}' {what}{detail}", self.loc)   # the loc prefixes file:line

    def _build(self) -> str:
        b = bindings.load()
        ir = b.ir
        with bindings.new_context(), ir.Location.file(self.file, self.line, 0):
            module = ir.Module.create()
            types = [ir.Type.parse(t) for t in self.param_types]
            with ir.InsertionPoint(module.body):
                f = b.func.FuncOp(self.name, ir.FunctionType.get(types, []))
                entry = f.add_entry_block()
            with ir.InsertionPoint(entry):
                try:
                    self.fn(*entry.arguments)
                except Exception as e:
                    raise self._error(f"failed while building its MLIR{self._user_line(e)}",
                                      f"{type(e).__name__}: {e}") from e
                ops = list(entry.operations)
                if not ops or ops[-1].operation.name != "func.return":
                    b.func.ReturnOp([])
            _verify(module, self._error)
            text = str(module)
        return _round_trip(text, self._error)

    def _user_line(self, e: BaseException) -> str:
        """' at file:line' of the statement in the function's body that raised, when there is one."""
        line, tb = None, e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is getattr(self.fn, "__code__", None):
                line = tb.tb_lineno
            tb = tb.tb_next
        return f" at {self.file}:{line}" if line else ""

    def __call__(self, *args, **kwargs):
        call = f"tle.raw.call({self.name}, outputs, inputs)" if self.flagtree else \
            f"tle.call({self.name}, args=[...], hardware=...)"
        raise TypeError(f"raw function '{self.name}' is not called directly; use {call} inside a @tle.jit kernel")

    def __repr__(self) -> str:
        if self.flagtree:
            sig = ", ".join(f"{p}: {'InOut' if r == 'inout' else 'Input'}[{t!r}]"
                            for p, t, r in zip(self.params, self.param_types, self.roles))
            return f"<raw function {self.name}({sig}) (tle.raw.dialect) at {self.file}:{self.line}>"
        sig = ", ".join(f"{p}: {t}" for p, t in zip(self.params, self.param_types))
        return (f"<raw function {self.name}({sig}) threads_dim={self.threads_dim} sync_scope={self.sync_scope!r} "
                f"at {self.file}:{self.line}>")


def _verify(module, error):
    try:
        ok = module.operation.verify()
    except Exception as e:  # MLIRError with the diagnostics (older bindings return False)
        raise error("is not valid MLIR", e) from None
    if ok is False:
        raise error("is not valid MLIR")


def _round_trip(text: str, error) -> str:
    """Parse the printed module back and verify it: the text is then what every later step reads."""
    ir = bindings.load().ir
    with bindings.new_context():
        try:
            module = ir.Module.parse(text)
        except Exception as e:
            raise error("does not parse back from its printed MLIR", e) from None
        _verify(module, error)
        return str(module)


# -- constructors ----------------------------------------------------------------------------------------
def from_python(fn, threads_dim: int = 1, sync_scope: str = "block") -> RawFunction:
    """A RawFunction from a Python function whose parameters are annotated
    `Annotated[ir.RankedTensorType, "tensor<...>"]`."""
    name = fn.__name__
    file = inspect.getsourcefile(fn) or fn.__code__.co_filename
    line = _def_line(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as e:
        raise TypeError(f"raw function '{name}' ({file}:{line}): its annotations do not evaluate: {e}") from None
    params, types = [], []
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise TypeError(f"raw function '{name}': parameter '{p.name}' must be a plain positional parameter")
        meta = getattr(hints.get(p.name), "__metadata__", ())
        text = next((m for m in meta if isinstance(m, str)), None)
        if text is None:
            raise TypeError(f"raw function '{name}' ({file}:{line}): parameter '{p.name}' needs a type, e.g. "
                            f"{p.name}: Annotated[ir.RankedTensorType, \"tensor<1024xf32>\"]")
        params.append(p.name)
        types.append(_tensor_type(text, f"raw function '{name}' ({file}:{line}): parameter '{p.name}'"))
    return RawFunction(name, file, line, tuple(params), tuple(types), threads_dim, sync_scope, fn=fn)


def _def_line(fn) -> int:
    """The line of the `def` itself (co_firstlineno is the first decorator's)."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return fn.__code__.co_firstlineno
    for i, text in enumerate(lines):
        if text.lstrip().startswith(("def ", "async def ")):
            return start + i
    return start


def _tensor_type(text: str, who: str) -> str:
    """The canonical spelling of a statically shaped tensor type; TypeError naming `who` otherwise."""
    canonical = canonical_type(text, who, allow=None)
    if tile_type(canonical)[0] is None:
        raise TypeError(f"{who}: {text!r} must be a statically shaped tensor of f16, bf16, f32, f64 or i1..i64")
    return canonical


_KIND_TEXT = {"tile": "a tile (memref<...x f16/bf16/f32/f64/i1..i64, 3>, in shared memory)",
              "pointer": "a global pointer (!llvm.ptr<1>)", "scalar": "a scalar (i1..i64, f16, bf16, f32, f64)"}


def canonical_type(text: str, who: str, allow=("tile",)) -> str:
    """MLIR's own spelling of the type `text`, which must be a parameter of a kind in `allow` (param_type's
    kinds; None: any type); TypeError naming `who` otherwise."""
    ir = bindings.load().ir
    with bindings.new_context():
        try:
            canonical = str(ir.Type.parse(text))
        except Exception as e:
            raise TypeError(f"{who}: {text!r} is not an MLIR type ({e})") from None
    if allow is not None and param_type(canonical)[0] not in allow:
        raise TypeError(f"{who}: {text!r} must be " + " or ".join(_KIND_TEXT[k] for k in allow))
    return canonical


def from_text(mlir_text: str, name: str | None = None, threads_dim: int = 1, sync_scope: str = "block") -> RawFunction:
    """A RawFunction from a textual module holding a `func.func` (the one named `name`, or the only one)
    whose arguments are the tiles."""
    if not isinstance(mlir_text, str):
        raise TypeError(f"from_text takes MLIR text (str), got {type(mlir_text).__name__}")
    check_threads_dim(threads_dim)
    check_sync_scope(sync_scope)
    caller = sys._getframe(1)          # errors name the line that made the function
    file, line = caller.f_code.co_filename, caller.f_lineno
    shown = name or "<text>"

    def error(what, e=None):
        return LoweringError(f"raw function '{shown}' {what}" + (f": {e}" if e is not None else ""),
                             Loc(file, line, shown))

    ir = bindings.load().ir
    with bindings.new_context():
        try:
            module = ir.Module.parse(mlir_text)
        except Exception as e:
            raise error("is not valid MLIR", e) from None
        f = find_func(module, name)
        if f is None:
            raise error(f"has no func.func {'@' + name if name else '(give name=... to pick one)'}")
        fname = str(f.operation.attributes["sym_name"]).strip('"')
        ftype = ir.FunctionType(ir.TypeAttr(f.operation.attributes["function_type"]).value)
        params = tuple(f"arg{i}" for i in range(len(ftype.inputs)))
        who = f"raw function '{fname}' ({file}:{line}): argument"
        types = tuple(_tensor_type(str(t), f"{who} {i}") for i, t in enumerate(ftype.inputs))
        _verify(module, error)
        text = str(module)
    return RawFunction(fname, file, line, params, types, threads_dim, sync_scope, text=text)
