"""`@tle.jit`: a kernel written once in Triton syntax, lowered to the backend chosen at launch.

    @tle.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr): ...

    add[grid](x, y, out, n, BLOCK=1024, backend="tilelang", num_warps=4)
    add.lower(x, y, out, n, BLOCK=1024, grid=grid, backend="tilelang").source
"""
from __future__ import annotations

import inspect
import numbers
import os
from dataclasses import dataclass

import torch

from tle import select
from tle.cache import cache_dir
from tle.dtypes import from_torch
from tle.errors import LaunchError
from tle.lowering.backend import Compiled
from tle.lowering.frontend import constexpr_params, make_tracer
from tle.lowering.ir import types as T
from tle.lowering.ir.core import KernelIR
from tle.lowering.spec import ArgSpec, Spec

_LAUNCH_KEYS = ("backend", "num_warps", "num_stages")
_REQUIRED = object()


def _scalar_type(name, x) -> T.Type:
    if isinstance(x, bool):
        return T.scalar(T.i1)
    if isinstance(x, numbers.Integral):
        x = int(x)
        if -2**31 <= x < 2**31:
            return T.scalar(T.i32)
        if -2**63 <= x < 2**63:
            return T.scalar(T.i64)
        raise LaunchError(f"argument '{name}': integer {x} does not fit in 64 bits")
    if isinstance(x, numbers.Real):
        return T.scalar(T.fp32)
    raise LaunchError(f"argument '{name}': expected a torch.Tensor, int, float or bool, got {type(x).__name__}")


def check_grid(grid) -> tuple[int, ...]:
    if type(grid) is tuple and 0 < len(grid) <= 3 and all(type(g) is int and g > 0 for g in grid):
        return grid                      # the common case, checked cheaply
    if isinstance(grid, numbers.Integral) and not isinstance(grid, bool):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
        raise LaunchError(f"grid must be one to three positive ints, got {grid!r}")
    out = []
    for g in grid:
        if isinstance(g, bool) or not isinstance(g, numbers.Integral) or int(g) <= 0:
            raise LaunchError(f"grid must be one to three positive ints, got {tuple(grid)!r}")
        out.append(int(g))
    return tuple(out)


@dataclass
class Lowered:
    """What one lowering produced: the IR text, the generated source, and the backend's stages."""
    backend: str
    kernel: KernelIR
    compiled: Compiled
    ir_text: str

    @property
    def ir(self) -> str:
        return self.ir_text

    @property
    def source(self) -> str:
        return self.compiled.source

    @property
    def notes(self) -> list[str]:
        return self.compiled.notes

    @property
    def stages(self) -> tuple[str, ...]:
        return self.compiled.stages

    def stage(self, name: str) -> str:
        return self.compiled.stage(name)


class Kernel:
    example = None        # set by @tle.example: fn(device, size) -> tle.Launch

    def __init__(self, fn, backend: str | None = None, do_not_specialize: tuple[str, ...] = ()):
        self.fn = fn
        self.__tle_fn__ = fn          # lets the frontend inline this kernel when it is called from another
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.backend = backend
        self.do_not_specialize = tuple(do_not_specialize)
        self.signature = inspect.signature(fn)
        self.param_names = list(self.signature.parameters)
        self.constexpr_names = set(constexpr_params(fn))
        self._defaults_or_required = {
            n: (p.default if p.default is not inspect.Parameter.empty else _REQUIRED)
            for n, p in self.signature.parameters.items()}
        for n in self.do_not_specialize:
            if n not in self.param_names:
                raise ValueError(f"do_not_specialize names '{n}', which is not a parameter of {fn.__name__}")
        self._cache: dict = {}

    def __repr__(self):
        return f"<tle kernel {self.__name__}>"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"launch a tle kernel with a grid: {self.__name__}[grid](...)")

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(grid, args, kwargs)

    # -- binding ------------------------------------------------------------------------------------
    def _bind(self, args, kwargs):
        """(constexpr values in parameter order, [(name, runtime value)], launch options)."""
        names = self.param_names
        if len(args) > len(names):
            raise LaunchError(f"{self.__name__}: takes {len(names)} arguments, got {len(args)}")
        values = dict(zip(names, args))
        launch = {}
        for k, v in kwargs.items():
            if k in _LAUNCH_KEYS:
                launch[k] = v
            elif k not in self._defaults_or_required:
                raise LaunchError(f"{self.__name__}: unexpected argument '{k}'")
            elif k in values:
                raise LaunchError(f"{self.__name__}: argument '{k}' given twice")
            else:
                values[k] = v
        if len(values) < len(names):
            for n in names:
                if n not in values:
                    d = self._defaults_or_required[n]
                    if d is _REQUIRED:
                        kind = "constexpr" if n in self.constexpr_names else "argument"
                        raise LaunchError(f"{self.__name__}: missing {kind} '{n}'")
                    values[n] = d
        constexprs, runtime = {}, []
        for n in names:
            v = values[n]
            if n in self.constexpr_names or v is None:
                constexprs[n] = v
            else:
                runtime.append((n, v))
        return constexprs, runtime, launch

    def _key(self, runtime, backend, grid):
        """The specialization key of a launch, and the device of its tensors (the fast path: no Spec)."""
        key, device = [], None
        shapes, ints = backend.specializes_shapes, backend.specializes_ints
        for name, v in runtime:
            if isinstance(v, torch.Tensor):
                if device is None:
                    device = v.device
                elif v.device != device:
                    raise LaunchError(f"argument '{name}' is on {v.device}, other tensors are on {device}")
                aligned = v.device.type == "meta" or v.data_ptr() % 16 == 0
                key.append((v.dtype, aligned, tuple(v.shape), v.stride()) if shapes else (v.dtype, aligned))
            elif ints and type(v) is int and name not in self.do_not_specialize:
                _scalar_type(name, v)            # rejects ints that do not fit in 64 bits
                key.append(v)                    # compiled in as a constant
            else:
                key.append(_scalar_type(name, v).elem.name)
        if backend.specializes_grid:
            if grid is None:
                raise LaunchError(f"{self.__name__}: backend '{backend.name}' compiles for a grid; pass grid=")
            key.append(("grid", grid))
        return tuple(key), device

    def _spec(self, runtime, backend, num_warps, num_stages, grid=None) -> Spec:
        arg_specs, specialized = [], []
        for name, v in runtime:
            if isinstance(v, torch.Tensor):
                try:
                    dt = from_torch(v.dtype)
                except TypeError as e:
                    raise LaunchError(f"argument '{name}': {e}") from None
                aligned = (v.data_ptr() % 16 == 0) if v.device.type != "meta" else True
                a = ArgSpec(name, T.scalar(T.PointerType(dt)), tuple(v.shape), tuple(v.stride()), aligned16=aligned)
            else:
                t = _scalar_type(name, v)
                spec_it = backend.specializes_ints and t.elem.is_int and not t.elem.is_bool \
                    and name not in self.do_not_specialize
                a = ArgSpec(name, t, value=int(v) if spec_it else None)
                if spec_it:
                    specialized.append(name)
            arg_specs.append(a)
        return Spec(tuple(arg_specs), num_warps, num_stages, tuple(specialized),
                    grid if backend.specializes_grid else None)

    # -- lowering -----------------------------------------------------------------------------------
    def _lower(self, backend, constexprs, spec: Spec) -> Lowered:
        runtime_types = {a.name: a.type for a in spec.args if a.name not in spec.specialized}
        known = {a.name: (a.type, a.value) for a in spec.args if a.name in spec.specialized}
        tracer = make_tracer()
        ir = tracer.trace_kernel(self.fn, runtime_types, dict(constexprs), spec.num_warps, spec.num_stages, known)
        ir.specialized = {n: v for n, (_, v) in known.items()}
        runtime_spec = Spec(tuple(a for a in spec.args if a.name not in spec.specialized), spec.num_warps,
                            spec.num_stages, spec.specialized, spec.grid)
        ir_text = str(ir)      # the frontend's IR, before any backend rewrites it
        compiled = backend.lower(ir, runtime_spec, cache_dir())
        return Lowered(backend.name, ir, compiled, ir_text)

    def _get(self, backend, constexprs, runtime, key, num_warps, num_stages, grid) -> Lowered:
        # the interpreter flag decides what Triton's jit builds, so lowerings differ with it
        full_key = (backend.name, key, _freeze(constexprs), num_warps, num_stages,
                    os.environ.get("TRITON_INTERPRET"))
        hit = self._cache.get(full_key)
        if hit is None:
            hit = self._lower(backend, constexprs, self._spec(runtime, backend, num_warps, num_stages, grid))
            self._cache[full_key] = hit
        return hit

    def lower(self, *args, grid=None, backend: str | None = None, num_warps: int = 4, num_stages: int = 3,
              **kwargs) -> Lowered:
        """Lower for these arguments (tensors may be on the 'meta' device) without launching."""
        constexprs, runtime, _ = self._bind(args, kwargs)
        if grid is not None:
            grid = check_grid(grid(dict(constexprs, **dict(runtime))) if callable(grid) else grid)
        b = select.resolve(select.choose(backend, self.backend))
        key, _ = self._key(runtime, b, grid)
        return self._get(b, constexprs, runtime, key, int(num_warps), int(num_stages), grid)

    def interpret_tilelang(self, grid, *args, strict_reads: bool = False, num_warps: int = 4, num_stages: int = 3,
                           **kwargs):
        """Run the TileLang lowering for these arguments on CPU tensors through the interpreter of
        TileLang programs: what the generated program computes, checked without a GPU. It is a test
        oracle, never a backend (no launch goes through it). Outputs are written in place; returns the
        interpreter's Report. Errors (tle.lowering.tilelang.interpreter.InterpreterError) name the
        statement of the generated program that has no defined result."""
        constexprs, runtime, launch = self._bind(args, dict(kwargs))
        if launch:
            raise LaunchError(f"{self.__name__}: interpret_tilelang takes num_warps and num_stages, not "
                              f"{', '.join(launch)}")
        if callable(grid):
            grid = grid(dict(constexprs, **dict(runtime)))
        grid = check_grid(grid)
        b = select.resolve("tilelang")
        key, _ = self._key(runtime, b, grid)
        lowered = self._get(b, constexprs, runtime, key, int(num_warps), int(num_stages), grid)
        specialized = lowered.kernel.specialized
        values = [v for (n, v) in runtime if n not in specialized]
        return lowered.compiled.interpret(values, strict_reads=strict_reads)

    # -- launch -------------------------------------------------------------------------------------
    def run(self, grid, args, kwargs):
        constexprs, runtime, launch = self._bind(args, dict(kwargs))
        b = select.resolve(select.choose(launch.get("backend"), self.backend))
        num_warps, num_stages = int(launch.get("num_warps", 4)), int(launch.get("num_stages", 3))
        if num_warps <= 0 or num_warps & (num_warps - 1):
            raise LaunchError(f"num_warps must be a power of two, got {num_warps}")
        if callable(grid):
            grid = grid(dict(constexprs, **dict(runtime)))
        grid = check_grid(grid)
        key, device = self._key(runtime, b, grid)
        if device is None:
            raise LaunchError(f"{self.__name__}: a launch needs at least one tensor argument")
        why = select.launch_unavailable_reason(b, device)
        if why is not None:
            tensors = [n for n, v in runtime if isinstance(v, torch.Tensor)]
            raise LaunchError(f"{self.__name__}: cannot launch on backend '{b.name}' with tensors "
                              f"{', '.join(tensors)} on {device}: {why}")
        lowered = self._get(b, constexprs, runtime, key, num_warps, num_stages, grid)
        specialized = lowered.kernel.specialized
        values = [v for (n, v) in runtime if n not in specialized] if specialized else [v for _, v in runtime]
        lowered.compiled.launch(grid, values)
        return lowered


def _freeze(d: dict):
    return tuple((k, _hashable(v)) for k, v in d.items())


def _hashable(v):
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


def jit(fn=None, *, backend: str | None = None, do_not_specialize: tuple[str, ...] = ()):
    """Decorate a Triton-syntax kernel. `backend` sets this kernel's default backend."""
    if fn is None:
        return lambda f: Kernel(f, backend=backend, do_not_specialize=do_not_specialize)
    return Kernel(fn, backend=backend, do_not_specialize=do_not_specialize)
