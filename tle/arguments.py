"""Launch arguments a kernel cannot use: tracing the kernel, and naming the argument when tracing fails.

A kernel's parameters carry no types: how the kernel uses an argument says what it needed. When tracing
fails and an argument holds a value that is often a mistake (None, a float, a tensor, a constexpr that is no
number), the kernel is traced again with that argument replaced by a well-typed stand-in for each thing it
could have needed (a tensor, an int, a float). If one of those traces succeeds, that argument is what the
kernel could not use, and the error names it, what it got and what the kernel needed. Failing that, a None
argument named on the line that failed is named. All of this runs only after a failure: a launch that
lowers pays nothing for it.
"""
from __future__ import annotations

import ast
import numbers
from dataclasses import dataclass

import torch

from tle.errors import LaunchError
from tle.lowering.errors import LoweringError
from tle.lowering.frontend import function_source, make_tracer
from tle.lowering.ir import types as ir_types


@dataclass(frozen=True)
class Trace:
    """What one trace of a kernel takes: runtime parameters (name -> IR type), constexprs (name -> Python
    value) and runtime ints compiled in as constants (name -> (IR type, value))."""
    fn: object
    runtime: dict
    constexprs: dict
    known: dict

    def run(self):
        """(KernelIR, None), or (None, (the exception, the kernel location where it was raised))."""
        tracer = make_tracer()
        try:
            return tracer.trace_kernel(self.fn, self.runtime, dict(self.constexprs), self.known), None
        except Exception as e:  # noqa: BLE001 - any failure may come from an argument the kernel cannot use
            loc = e.loc if isinstance(e, LoweringError) and e.loc is not None else tracer.b.loc
            return None, (e, loc)

    def replacing(self, name: str, stand_in: StandIn) -> Trace:
        """This trace with argument `name` given `stand_in` instead."""
        runtime = {k: v for k, v in self.runtime.items() if k != name}
        constexprs = {k: v for k, v in self.constexprs.items() if k != name}
        if stand_in.runtime is not None:
            runtime[name] = stand_in.runtime
        else:
            constexprs[name] = stand_in.constexpr
        return Trace(self.fn, runtime, constexprs, self.known)


@dataclass(frozen=True)
class StandIn:
    """A well-typed value tried in place of an argument, of one kind ("tensor", "int" or "float"): a runtime
    parameter of IR type `runtime`, or the constexpr `constexpr`."""
    kind: str
    runtime: ir_types.Type | None = None
    constexpr: object = None


_POINTER = StandIn("tensor", runtime=ir_types.scalar(ir_types.PointerType(ir_types.fp32)))
# for indices loaded through it
_INT_POINTER = StandIn("tensor", runtime=ir_types.scalar(ir_types.PointerType(ir_types.i32)))
_INT = StandIn("int", runtime=ir_types.scalar(ir_types.i32))
_FLOAT = StandIn("float", runtime=ir_types.scalar(ir_types.fp32))
_INT_CONSTEXPR = StandIn("int", constexpr=16)      # a power of two: tl.arange and block shapes take it
_FLOAT_CONSTEXPR = StandIn("float", constexpr=1.0)


def trace(kernel: str, attempt: Trace, arguments: dict, constexpr_names) -> object:
    """The kernel's IR; where tracing fails because of an argument, a LaunchError naming it (chained to the
    failure), else the failure itself. `arguments`: each parameter's launch value by name."""
    ir, failure = attempt.run()
    if failure is None:
        return ir
    error, loc = failure
    blamed = _blame(kernel, attempt, arguments, constexpr_names, error, loc)
    if blamed is not None:
        raise blamed from error
    raise error


def _blame(kernel, attempt, arguments, constexpr_names, error, loc) -> LaunchError | None:
    on_the_line = _names_on_line(attempt.fn, loc)
    for name, value in arguments.items():
        if name in constexpr_names and isinstance(value, str) and name not in on_the_line:
            # a string constexpr usually selects code (FORM == "..."): a number in its place takes another
            # path that may trace, which says nothing about the failure unless the failing line uses it
            continue
        needs = _needs(attempt, name, _stand_ins(value, name in constexpr_names))
        if needs is not None:
            return _error(kernel, name, value, name in constexpr_names, needs, error, loc)
    # none alone explains it (several arguments may be wrong): a None given for a runtime parameter and named
    # on the failing line is used as a value there (a constexpr's None may be meant, e.g. as "no hardware")
    for name, value in arguments.items():
        if value is None and name in on_the_line and name not in constexpr_names:
            return _error(kernel, name, None, False, None, error, loc)
    return None


def _needs(attempt: Trace, name: str, stand_ins) -> str | None:
    """What the kernel needed in place of argument `name`, in words ("a tensor", "an int", "a float", "a
    number"): the kinds of stand-in that let it trace; None where none does. A tensor that works settles it;
    ints and floats are all tried, so that a use either takes is "a number"."""
    kinds = []
    for stand_in in stand_ins:
        if stand_in.kind in kinds or attempt.replacing(name, stand_in).run()[1] is not None:
            continue
        if stand_in.kind == "tensor":
            return "a tensor"
        kinds.append(stand_in.kind)
    if not kinds:
        return None
    return "a number" if len(kinds) > 1 else {"int": "an int", "float": "a float"}[kinds[0]]


def _stand_ins(value, is_constexpr: bool) -> tuple[StandIn, ...]:
    """The well-typed values to try in place of an argument whose launch value is `value` (none for the
    values a kernel rarely gets wrong: ints, bools)."""
    if is_constexpr:
        if value is None or not isinstance(value, numbers.Number):
            return _INT_CONSTEXPR, _FLOAT_CONSTEXPR
        if isinstance(value, float):
            return (StandIn("int", constexpr=int(value) if value.is_integer() else 16),)
        return ()
    if value is None:
        return _POINTER, _INT_POINTER, _INT, _FLOAT
    if isinstance(value, torch.Tensor):
        return _INT, _FLOAT
    if isinstance(value, float):
        return (_INT,)
    return ()


def _error(kernel, name, value, is_constexpr, needs, error, loc) -> LaunchError:
    role = "constexpr" if is_constexpr else "argument"
    got = describe(value)
    detail = error.message if isinstance(error, LoweringError) else f"{type(error).__name__}: {error}"
    where = f"{loc} ({detail})"
    if needs is None:
        return LaunchError(f"{kernel}: argument '{name}' is None, but the kernel uses it as a value at {where}; "
                           f"a None argument can only be tested (`{name} is None`)")
    advice = ""
    if isinstance(value, torch.Tensor):
        advice = "; a tensor is passed as a pointer to its data: pass a Python number (e.g. t.item())"
    elif value is None and not is_constexpr:
        advice = f"; a None argument can only be tested (`{name} is None`)"
    return LaunchError(f"{kernel}: {role} '{name}' is {got}, but the kernel needs {needs} there, at {where}{advice}")


def describe(value) -> str:
    """A launch value in words, short enough for an error message."""
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        return f"a torch.Tensor ({dtype}, shape {tuple(value.shape)}, on {value.device})"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    kind = type(value).__name__
    return f"a{'n' if kind[:1] in 'aeiou' else ''} {kind} ({text})"


def _names_on_line(fn, loc) -> set[str]:
    """The names the kernel's own source mentions on the line of `loc` (none where `loc` is elsewhere,
    e.g. in a helper the kernel calls)."""
    src = function_source(fn)
    if loc is None or loc.file != src.file:
        return set()
    return {node.id for node in ast.walk(src.tree)
            if isinstance(node, ast.Name) and getattr(node, "lineno", None) == loc.line}
