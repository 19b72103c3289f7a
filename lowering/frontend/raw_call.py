"""`tle.call(fn, args, hardware=..., layout=...)` inside a kernel: the `raw_call` op.

The call is checked here, where the kernel's file:line is known: `fn` is a raw function, each argument
a tile of exactly its parameter's shape and dtype, `hardware["threads"]` one constexpr count per thread
axis the function declares, and `layout` describes tiles of `args`. The op takes the argument tiles and
yields the new contents of the ones the function writes (its outputs); the tiles the kernel holds are
then rebound to those results, so after the call `output` names the written tile (tle.call returns
nothing). The semantics of the call are in tle/raw/__init__.py.
"""
from __future__ import annotations

import math

from ..errors import LoweringError
from ..ir import ops
from ..ir import types as ir_types
from ..ir.core import DEFAULT_NUM_WARPS
from ..raw.body import DTYPES, check_constraints
from ..raw.callee import RawCallee
from .semantics import TV, const, constexpr_value

LAYOUT_SPACES = ("shared",)          # where a backend can place a raw function's argument tiles
LAYOUT_KEYS = ("space", "order")
HARDWARE_KEYS = ("threads",)
_MLIR_ELEM = {v: k for k, v in DTYPES.items() if k != "index"}


def _tensor_text(shape, dtype_name: str) -> str:
    elem = _MLIR_ELEM.get(dtype_name, dtype_name)
    return "tensor<" + "".join(f"{d}x" for d in shape) + f"{elem}>"


_plain = constexpr_value


def raw_call(tr, fn=None, args=None, hardware=None, layout=None, *, outputs=None, inputs=None):
    loc = tr.b.loc

    def error(msg, construct=None):
        return LoweringError(msg, loc, construct=construct)

    if getattr(fn, "flagtree", False):              # call(fn, outputs, inputs): FlagTree's form
        if layout is not None:
            raise error(f"tle.raw.call({fn.name}): a tle.raw.dialect function is called as call(fn, outputs, "
                        f"inputs), without more arguments", "tle.call")
        return flagtree_call(tr, fn, args if outputs is None else outputs, hardware if inputs is None else inputs,
                             error)
    if outputs is not None or inputs is not None:
        raise error("tle.call: outputs= and inputs= are for tle.raw.dialect functions; a tle.raw.language function "
                    "takes args= and hardware=", "tle.call")
    if not isinstance(fn, RawCallee):
        what = "a @tle.jit function" if hasattr(fn, "__tle_fn__") else type(fn).__name__
        raise error(f"tle.call: the function must be a raw function (decorated with @tle.raw.language(name='mlir') "
                    f"or made by tle.raw.from_text), got {what}", "tle.call")
    call = f"tle.call({fn.name})"
    args = _plain(args)
    if not isinstance(args, (list, tuple)):
        raise error(f"{call}: args must be a list of tiles, got {type(args).__name__}", "tle.call")
    args = [_plain(a) for a in args]
    if len(args) != len(fn.params):
        raise error(f"{call}: the raw function takes {len(fn.params)} tiles "
                    f"({', '.join(fn.params)}), got {len(args)} in args", "tle.call")
    for i, (a, p, ptype, (shape, dtype)) in enumerate(zip(args, fn.params, fn.param_types, fn.tiles)):
        who = f"argument {i} ('{p}')"
        if not isinstance(a, TV):
            raise error(f"{call}: {who} must be a tile of type {ptype}, got the Python value {a!r}", "tle.call")
        if a.type.is_pointer:
            raise error(f"{call}: {who} is a pointer ({a.type}); raw functions take tiles of values "
                        f"(load them first), expected {ptype}", "tle.call")
        if tuple(a.type.shape) != tuple(shape) or a.dtype.name != dtype:
            got = f"a scalar of type {_MLIR_ELEM.get(a.dtype.name, a.dtype.name)}" if a.type.is_scalar else \
                f"a tile of type {_tensor_text(a.type.shape, a.dtype.name)}"
            raise error(f"{call}: {who} is {got} but the raw function's parameter '{p}' is {ptype}", "tle.call")

    threads = _threads(fn, _plain(hardware), call, error)
    body = fn.body()                                  # built, read, and checked against its constraint
    check_constraints(body, fn.threads_dim, fn.sync_scope)
    outputs = body.outputs
    for k in outputs:                                 # one tile must not stand for two written arguments
        for i in outputs:
            if i < k and args[i] is args[k]:
                raise error(f"{call}: the same tile is passed as argument {i} ('{fn.params[i]}') and as "
                            f"argument {k} ('{fn.params[k]}'), and the function writes both; pass a separate "
                            f"tile for each written argument", "tle.call")
    layouts = _layouts(fn, args, _plain(layout), call, error)

    op = tr.b.raw_call(fn, [a.v for a in args], outputs, threads, layouts)
    for k, r in zip(outputs, op.results):
        r.name = args[k].v.name or fn.params[k]
        tr.rebind(args[k], r)
    return None


def flagtree_call(tr, fn, outputs, inputs, error):
    """`call(fn, outputs, inputs)` of a tle.raw.dialect function (tle/raw/dialect.py): the function's parameters
    are `outputs` then `inputs`; the InOut tiles' new contents are returned (one alone, several as a tuple)
    and nothing the kernel holds is rebound. The call runs on the program's threads (threads=())."""
    call = f"tle.raw.call({fn.name})"
    outputs, inputs = _plain(outputs), _plain(inputs)
    for what, xs in (("outputs", outputs), ("inputs", inputs)):
        if not isinstance(xs, (list, tuple)):
            raise error(f"{call}: {what} must be a list, got {type(xs).__name__}", "tle.call")
    outputs, inputs = [_plain(a) for a in outputs], [_plain(a) for a in inputs]
    n_out = sum(r == "inout" for r in fn.roles)
    if fn.roles[:n_out] != ("inout",) * n_out:
        p = fn.params[fn.roles.index("input")]
        raise error(f"{call}: parameter '{p}' is Input but InOut parameters follow it; the parameters are the "
                    f"call's outputs (InOut) and then its inputs, in that order", "tle.call")
    if len(outputs) != n_out or len(outputs) + len(inputs) != len(fn.params):
        outs = ", ".join(fn.params[:n_out]) or "none"
        ins = ", ".join(fn.params[n_out:]) or "none"
        raise error(f"{call}: the function takes {n_out} outputs ({outs}) and {len(fn.params) - n_out} inputs "
                    f"({ins}), got {len(outputs)} and {len(inputs)}", "tle.call")
    values = []
    for i, (a, p, ptype, kind, (shape, dtype)) in enumerate(zip(outputs + inputs, fn.params, fn.param_types,
                                                                fn.kinds, fn.tiles)):
        values.append(_flagtree_arg(tr, a, i, p, ptype, kind, shape, dtype, call, error))
    body = fn.body()
    body.check_strides(lambda i, msg: error(f"{call}: argument {i} ('{fn.params[i]}') {msg}", "tle.call"),
                       [v.type.shape for v in values])
    op = tr.b.raw_call(fn, values, range(n_out), (), (None,) * len(values))
    results = [TV(r, tr.b) for r in op.results]
    for r, k in zip(op.results, range(n_out)):
        r.name = fn.params[k]
    if not results:
        return None
    return results[0] if len(results) == 1 else tuple(results)


def _flagtree_arg(tr, a, i, p, ptype, kind, shape, dtype, call, error):
    """The IR value argument `a` passes for parameter `p` (kind "tile", "pointer" or "scalar")."""
    who = f"argument {i} ('{p}', {ptype})"
    if kind == "scalar" and isinstance(a, (bool, int, float)) and not isinstance(a, TV):
        return const(tr.b, a, ir_types.DTYPES[dtype]).v
    if not isinstance(a, TV):
        raise error(f"{call}: {who} must be a traced value, got the Python value {a!r}", "tle.call")
    t = a.type
    if kind == "pointer":
        if not (t.is_pointer and t.is_scalar):
            raise error(f"{call}: {who} must be a pointer (a kernel argument, or one plus an offset), got {t}",
                        "tle.call")
        return a.v
    if t.is_pointer:
        raise error(f"{call}: {who} is a pointer ({t}); load the tile first", "tle.call")
    if kind == "scalar":
        if not t.is_scalar or a.dtype.name != dtype:
            raise error(f"{call}: {who} must be a scalar of type {_MLIR_ELEM.get(dtype, dtype)}, got {t}", "tle.call")
        return a.v
    if t.is_scalar or len(t.shape) != len(shape) or a.dtype.name != dtype or \
            any(d is not None and d != e for d, e in zip(shape, t.shape)):
        raise error(f"{call}: {who} must be a tile matching {ptype}, got a {'scalar' if t.is_scalar else 'tile'} of "
                    f"type {_tensor_text(t.shape, a.dtype.name)}", "tle.call")
    return a.v


def _threads(fn, hardware, call, error) -> tuple[int, ...]:
    example = "(" + ", ".join(["128"] * fn.threads_dim) + ("," if fn.threads_dim == 1 else "") + ")"
    need = f"hardware={{'threads': {example}}}: one thread count per thread axis (threads_dim={fn.threads_dim})"
    if hardware is None:
        raise error(f"{call}: give the launch domain as {need}", "hardware")
    if not isinstance(hardware, dict):
        raise error(f"{call}: hardware must be a dict like {need}, got {type(hardware).__name__}", "hardware")
    unknown = [k for k in hardware if k not in HARDWARE_KEYS]
    if unknown:
        raise error(f"{call}: hardware has unknown key(s) {', '.join(map(repr, unknown))}; "
                    f"it takes {', '.join(map(repr, HARDWARE_KEYS))}", "hardware")
    if "threads" not in hardware:
        raise error(f"{call}: hardware needs 'threads', as in {need}", "hardware")
    threads = _plain(hardware["threads"])
    if not isinstance(threads, (tuple, list)):
        raise error(f"{call}: hardware['threads'] must be a tuple, got {threads!r}; write {need}", "hardware")
    threads = [_plain(t) for t in threads]
    if any(isinstance(t, TV) for t in threads):
        raise error(f"{call}: hardware['threads'] must be constexprs, got a runtime value", "hardware")
    if len(threads) != fn.threads_dim or any(isinstance(t, bool) or not isinstance(t, int) or t <= 0
                                             for t in threads):
        raise error(f"{call}: hardware['threads'] is {tuple(threads)!r}; it must be {fn.threads_dim} positive "
                    f"int(s), as in {need}", "hardware")
    return tuple(threads)


def _layouts(fn, args, layout, call, error) -> tuple:
    """Per argument position: {"space": ..., "order": tuple | None}, or None where layout says nothing."""
    if layout is None:
        return (None,) * len(args)
    if not isinstance(layout, dict):
        raise error(f"{call}: layout must be a dict keyed by tiles of args, got {type(layout).__name__}", "layout")
    per_arg: list = [None] * len(args)
    for key, spec in layout.items():
        where = [i for i, a in enumerate(args) if a is key]
        if not isinstance(key, TV):
            raise error(f"{call}: layout keys must be tiles passed in args, got {key!r}", "layout")
        if not where:
            raise error(f"{call}: layout has an entry for a tile of type {key.type} that is not one of args", "layout")
        who = f"the layout of argument {where[0]} ('{fn.params[where[0]]}')"
        if not isinstance(spec, dict):
            raise error(f"{call}: {who} must be a dict like {{'space': 'shared', 'order': [0]}}, got {spec!r}",
                        "layout")
        unknown = [k for k in spec if k not in LAYOUT_KEYS]
        if unknown:
            raise error(f"{call}: {who} has unknown key(s) {', '.join(map(repr, unknown))}; it takes "
                        f"{', '.join(map(repr, LAYOUT_KEYS))}", "layout")
        space = _plain(spec.get("space", "shared"))
        if space not in LAYOUT_SPACES:
            raise error(f"{call}: {who} asks for space {space!r}: no backend supports it (backends that do: "
                        f"none; triton and tilelang take {', '.join(map(repr, LAYOUT_SPACES))} only)",
                        f"layout space {space!r}")
        order = _plain(spec.get("order"))
        if order is not None:
            rank = key.type.rank
            if not isinstance(order, (tuple, list)) or \
                    sorted(_plain(o) if isinstance(_plain(o), int) else -1 for o in order) != list(range(rank)):
                raise error(f"{call}: {who} has order {order!r}, which is not a permutation of the tile's axes "
                            f"{list(range(rank))}", "layout")
            order = tuple(int(_plain(o)) for o in order)
        for i in where:
            per_arg[i] = {"space": space, "order": order}
    return tuple(per_arg)


# -- the kernel's thread count ---------------------------------------------------------------------------------
# A tle.call runs its raw function on one block of `hardware["threads"]` threads, and a kernel's block is
# 32 * num_warps threads. The same rule holds on every backend, so that a program means the same thing
# everywhere: TileLang runs the function on the kernel's own threads, and Triton, whose element-wise inlining
# would work with any count, launches the thread count the call asked for too.
WARP_SIZE = 32
MAX_THREADS = 1024           # a CUDA block's limit (num_warps=32)


def warps_for_calls(kernel, launch_num_warps: int | None) -> int:
    """The num_warps `kernel` (a KernelIR) runs with: the launch's where it gave one, else the one its tle.call
    sites ask for (their threads / 32), else the default. Calls that disagree, a call whose thread count the
    launch's num_warps does not give, or one that no num_warps gives, are LoweringErrors at the call naming
    both counts (lowering/launch_options.py settles the kernel's options with it)."""
    call = _agreed_call(kernel)
    if call is None:
        num_warps = launch_num_warps or DEFAULT_NUM_WARPS
    elif launch_num_warps is not None:
        if _thread_count(call) != WARP_SIZE * launch_num_warps:
            raise LoweringError(f"{_call_text(call)} asks for {_thread_count(call)} threads, but the launch's "
                                f"num_warps={launch_num_warps} gives the kernel {WARP_SIZE * launch_num_warps}; "
                                f"{_fix(_thread_count(call))}", call.loc, construct="hardware")
        num_warps = launch_num_warps
    else:
        num_warps = _warps_for(_thread_count(call))
        if num_warps is None:
            raise LoweringError(f"{_call_text(call)} asks for {_thread_count(call)} threads, but a kernel runs "
                                f"32 * num_warps threads; {_fix(_thread_count(call))}", call.loc,
                                construct="hardware")
    return num_warps


def _agreed_call(kernel):
    """The kernel's first raw_call op (None without one), once every other asks for as many threads. Calls of
    tle.raw.dialect functions (threads=()) run on whatever threads the program has and take no part."""
    calls = [op for op in kernel.walk() if op.defn is ops.RAW_CALL and op.attrs["threads"]]
    for op in calls[1:]:
        if _thread_count(op) != _thread_count(calls[0]):
            first = calls[0]
            raise LoweringError(f"{_call_text(first)} at {first.loc} asks for {_thread_count(first)} threads and "
                                f"{_call_text(op)} at {op.loc} for {_thread_count(op)}: a kernel runs one block of "
                                f"32 * num_warps threads, so its tle.call sites must ask for the same count",
                                op.loc, construct="hardware")
    return calls[0] if calls else None


def _thread_count(op) -> int:
    """The number of threads a raw_call op asks for (the product over its thread axes)."""
    return math.prod(int(t) for t in op.attrs["threads"])


def _call_text(op) -> str:
    return f"tle.call({op.attrs['fn'].name}) with hardware threads {tuple(op.attrs['threads'])}"


def _warps_for(count: int) -> int | None:
    """The num_warps whose block has `count` threads (a power of two, at most 32), or None where none has."""
    warps = count // WARP_SIZE
    if count % WARP_SIZE or warps & (warps - 1) or not 1 <= warps <= MAX_THREADS // WARP_SIZE:
        return None
    return warps


def _fix(count: int) -> str:
    """How to make a call of `count` threads and its launch agree."""
    warps = _warps_for(count)
    if warps is None:
        return (f"no num_warps (a power of two, at most {MAX_THREADS // WARP_SIZE}) gives {count}: give the call "
                f"32 * 2**k threads, at most {MAX_THREADS}")
    return f"launch with num_warps={warps}, or leave num_warps out (the kernel then runs the call's {count} threads)"
