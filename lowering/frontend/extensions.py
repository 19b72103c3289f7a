"""The TLE extensions the tracer knows by registration (tle/gpu.py, tle/language.py, tle/raw): builtins,
the iterables of a for loop and the context managers of a with statement."""
from __future__ import annotations

TLE_BUILTINS = {}
TLE_RANGES = {}     # iterables of a for loop (tle.gpu.pipeline) -> (tracer, args, kwargs) -> (args, attrs)
# context managers of a with statement (tle.gpu.warp_group, tle.gpu.turn) -> (tracer, args, kwargs) ->
# (op attrs, group or None, registers)
TLE_CONTEXTS = {}


def register_tle_builtin(fn, impl):
    TLE_BUILTINS[fn] = impl


def register_tle_range(fn, attrs):
    TLE_RANGES[fn] = attrs


def register_tle_context(fn, scope):
    TLE_CONTEXTS[fn] = scope
