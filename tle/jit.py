"""`@tle.jit`: a kernel written once in Triton syntax, lowered to the backend chosen at launch.

    @tle.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr): ...

    add[grid](x, y, out, n, BLOCK=1024, backend="tilelang", num_warps=4)
    add.lower(x, y, out, n, BLOCK=1024, grid=grid, backend="tilelang").source
"""
from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass

import torch

from tle import arguments, descriptor_args, select
from tle.cache import cache_dir
from tle.dtypes import from_torch
from tle.errors import LaunchError
from tle.lowering.backend import Compiled, triton_debug
from tle.lowering.frontend import constexpr_params
from tle.lowering.ir.printer import print_kernel
from tle.lowering.launch_options import settle_launch_options
from tle.lowering.ir import types as ir_types
from tle.lowering.ir.core import KernelIR
from tle.lowering.spec import ArgSpec, Spec

# launch options a call may pass beside the kernel's arguments (Triton's, through triton.Config too)
_LAUNCH_KEYS = ("backend", "num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override")
# Triton's options whose defaults are the only value a tle launch takes, and why
_FIXED_OPTIONS = {"num_ctas": (1, "tle launches one CTA per program (no thread-block clusters)"),
                  "maxnreg": (None, "tle lets each backend choose the register count"),
                  "ir_override": (None, "tle generates the kernel's IR itself")}
_TLE_OPTIONS = frozenset(("backend", "num_warps", "num_stages"))
_REQUIRED = object()


def _scalar_kind(kernel: str, name: str, x) -> str:
    """The IR type name of a scalar argument: i1, i32, i64 or fp32 (the common cases tested first)."""
    t = type(x)
    if t is int:
        if -2**31 <= x < 2**31:
            return "i32"
    elif t is float:
        return "fp32"
    if isinstance(x, bool):
        return "i1"
    if isinstance(x, numbers.Integral):
        x = int(x)
        if -2**31 <= x < 2**31:
            return "i32"
        if -2**63 <= x < 2**63:
            return "i64"
        raise LaunchError(f"{kernel}: argument '{name}': integer {x} does not fit in 64 bits")
    if isinstance(x, numbers.Real):
        return "fp32"
    raise LaunchError(f"{kernel}: argument '{name}' is {arguments.describe(x)}; expected a torch.Tensor, an int, "
                      f"a float, a bool or None")


def _scalar_type(kernel: str, name: str, x) -> ir_types.Type:
    return ir_types.scalar(getattr(ir_types, _scalar_kind(kernel, name, x)))


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

    @property
    def num_warps(self) -> int:
        """What the kernel runs with: the launch's num_warps, else its tle.call sites' threads / 32, else 4."""
        return self.kernel.num_warps

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
        self.arg_names = self.param_names      # as Triton's JITFunction names them (triton.autotune reads it)
        self.constexpr_names = set(constexpr_params(fn))
        for n in self.do_not_specialize:
            if n not in self.param_names:
                raise ValueError(f"do_not_specialize names '{n}', which is not a parameter of {fn.__name__}")
        # per parameter, in order: (name, constexpr?, excluded from int specialization?), for the launch loop
        self._params = tuple((n, n in self.constexpr_names, n in self.do_not_specialize) for n in self.param_names)
        self._index = {n: i for i, n in enumerate(self.param_names)}
        self._defaults = tuple(p.default if p.default is not inspect.Parameter.empty else _REQUIRED
                               for p in self.signature.parameters.values())
        # full key -> (Lowered, positions of the values its compiled kernel takes)
        self._cache: dict = {}

    def __repr__(self):
        return f"<tle kernel {self.__name__}>"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"launch a tle kernel with a grid: {self.__name__}[grid](...)")

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self._launch(grid, args, kwargs)

    def run(self, *args, grid, warmup: bool = False, **kwargs):
        """Triton's JITFunction.run, which `triton.autotune` and `triton.heuristics` call: launch on `grid`
        (a tuple, or a function of the arguments by name), or with warmup=True only lower and compile."""
        return self._launch(grid, args, kwargs, warmup=warmup)

    # -- binding ------------------------------------------------------------------------------------
    # A warm launch binds, keys and looks up in one pass over the parameters: its host cost is paid on
    # every call of every operator, so these loops stay flat (no per-argument objects).
    def _bind(self, args, kwargs):
        """(argument values in parameter order, launch options)."""
        n = len(self._params)
        if len(args) > n:
            raise LaunchError(f"{self.__name__}: takes {n} arguments, got {len(args)}")
        values = list(args)
        if not kwargs and len(args) == n:
            return values, {}
        values.extend([_REQUIRED] * (n - len(args)))
        launch = {}
        for k, v in kwargs.items():
            if k in _LAUNCH_KEYS:
                launch[k] = v
                if k not in self._index:
                    continue
                # a parameter named like a launch option (`num_stages: tl.constexpr`) takes the value
                # too, as in Triton
            i = self._index.get(k)
            if i is None:
                raise LaunchError(f"{self.__name__}: unexpected argument '{k}'")
            if i < len(args):
                raise LaunchError(f"{self.__name__}: argument '{k}' given twice")
            values[i] = v
        for i in range(len(args), n):
            if values[i] is _REQUIRED:
                d = self._defaults[i]
                if d is _REQUIRED:
                    name, is_constexpr, _ = self._params[i]
                    raise LaunchError(f"{self.__name__}: missing {'constexpr' if is_constexpr else 'argument'} "
                                      f"'{name}'")
                values[i] = d
        return values, launch

    def _split(self, values):
        """(constexpr values by name, [(name, runtime value)], {name: DescriptorParam}): None arguments count
        as constexprs; a host tensor descriptor gives its parts (tle/descriptor_args.py)."""
        constexprs, runtime, descriptors = {}, [], {}
        for (name, is_constexpr, _), v in zip(self._params, values):
            if is_constexpr or v is None:
                constexprs[name] = v
            elif descriptor_args.is_descriptor(v):
                d = descriptors[name] = descriptor_args.param(name, v)
                runtime.extend(zip(d.part_names(), descriptor_args.parts(v)))
            else:
                runtime.append((name, v))
        return constexprs, runtime, descriptors

    def _key(self, values, backend, grid):
        """The specialization key of a launch (without backend and launch options), and its tensors' device."""
        key, device, first_tensor, meta = [], None, None, False
        shapes, ints = backend.specializes_shapes, backend.specializes_ints
        for (name, is_constexpr, unspecialized), v in zip(self._params, values):
            t = type(v)
            if is_constexpr or v is None:
                key.append(v if t in _PLAIN else self._constexpr_key(name, v))
            elif t is int and -2**31 <= v < 2**31:
                key.append(v if ints and not unspecialized else "i32")
            elif t is float:
                key.append("fp32")
            elif t is torch.Tensor or isinstance(v, torch.Tensor):
                if device is None:
                    device, first_tensor = v.device, name
                    meta = device.type == "meta"      # asked once: a device's type costs as much as the rest
                elif v.device != device:
                    raise _other_device(self.__name__, name, v.device, first_tensor, device)
                aligned = meta or v.data_ptr() % 16 == 0
                key.append((v.dtype, aligned, v.shape, v.stride()) if shapes else (v.dtype, aligned))
            elif descriptor_args.is_descriptor(v):
                descriptor_args.checked(self.__name__, name, v)
                if device is None:
                    device, first_tensor, meta = v.base.device, name, v.base.device.type == "meta"
                elif v.base.device != device:
                    raise _other_device(self.__name__, name, v.base.device, first_tensor, device)
                key.append(descriptor_args.key(v, shapes, ints and not unspecialized))
            elif ints and type(v) is int and not unspecialized:
                _scalar_kind(self.__name__, name, v)     # rejects ints that do not fit in 64 bits
                key.append(v)                            # compiled in as a constant
            else:
                key.append(_scalar_kind(self.__name__, name, v))
        if backend.specializes_grid:
            if grid is None:
                raise LaunchError(f"{self.__name__}: backend '{backend.name}' compiles for a grid; pass grid=")
            key.append(grid)
        return tuple(key), device

    def _constexpr_key(self, name, v):
        """The key of a constexpr that is no plain Python value (a dtype, a tuple, a function, ...)."""
        if isinstance(v, torch.Tensor):
            raise LaunchError(f"{self.__name__}: constexpr '{name}' is {arguments.describe(v)}; a constexpr takes "
                              f"a Python value (an int, a float, a bool, a str, a dtype, ...): pass t.item() for a "
                              f"number")
        return _hashable(v)

    def _spec(self, runtime, backend, grid=None) -> Spec:
        arg_specs, specialized = [], []
        for name, v in runtime:
            if isinstance(v, torch.Tensor):
                try:
                    dt = from_torch(v.dtype)
                except TypeError as e:
                    raise LaunchError(f"{self.__name__}: argument '{name}': {e}") from None
                aligned = (v.data_ptr() % 16 == 0) if v.device.type != "meta" else True
                a = ArgSpec(name, ir_types.scalar(ir_types.PointerType(dt)), tuple(v.shape), tuple(v.stride()),
                            aligned16=aligned)
            else:
                t = _scalar_type(self.__name__, name, v)
                spec_it = backend.specializes_ints and t.elem.is_int and not t.elem.is_bool \
                    and name not in self.do_not_specialize
                a = ArgSpec(name, t, value=int(v) if spec_it else None)
                if spec_it:
                    specialized.append(name)
            arg_specs.append(a)
        return Spec(tuple(arg_specs), tuple(specialized), grid if backend.specializes_grid else None)

    # -- lowering -----------------------------------------------------------------------------------
    def _lower(self, backend, constexprs, spec: Spec, num_warps, num_stages, launch_values: dict,
               descriptors: dict) -> Lowered:
        """Lower for `spec` and the launch's options (num_warps None: the launch left it to the kernel)."""
        runtime_types = {a.name: a.type for a in spec.args if a.name not in spec.specialized}
        runtime_types.update(descriptors)
        known = {a.name: (a.type, a.value) for a in spec.args if a.name in spec.specialized}
        attempt = arguments.Trace(self.fn, runtime_types, dict(constexprs), known)
        ir = arguments.trace(self.__name__, attempt, launch_values, self.constexpr_names)
        settle_launch_options(ir, backend, num_warps, num_stages)
        ir.specialized = {n: v for n, (_, v) in known.items()}
        ir.unspecialized = self.do_not_specialize
        runtime_spec = Spec(tuple(a for a in spec.args if a.name not in spec.specialized), spec.specialized, spec.grid)
        ir_text = print_kernel(ir)     # the frontend's IR, before any backend rewrites it
        compiled = backend.lower(ir, runtime_spec, cache_dir())
        return Lowered(backend.name, ir, compiled, ir_text)

    def _get(self, backend, values, key, num_warps, num_stages, grid, interpret: str):
        """(Lowered, positions in `values` of what its kernel takes), lowered on the first launch of a key;
        num_warps None: the launch did not fix it."""
        # the interpreter setting decides what Triton's jit builds, so lowerings differ with it; so does Triton's
        # debug mode (whether tl.device_assert is checked)
        full_key = (backend.name, key, num_warps, num_stages, interpret, triton_debug())
        hit = self._cache.get(full_key)
        if hit is None:
            constexprs, runtime, descriptors = self._split(values)
            lowered = self._lower(backend, constexprs, self._spec(runtime, backend, grid), num_warps, num_stages,
                                  self._named(values), descriptors)
            specialized = lowered.kernel.specialized
            # (argument, part) of each parameter the kernel takes: a descriptor's parts in its place
            sources = tuple((i, k if name in descriptors else None)
                            for i, ((name, is_constexpr, _), v) in enumerate(zip(self._params, values))
                            if not is_constexpr and v is not None
                            for k, part in enumerate(descriptors[name].part_names() if name in descriptors
                                                     else [name])
                            if part not in specialized)
            positions = descriptor_args.Expansion(sources) if descriptors else tuple(i for i, _ in sources)
            hit = self._cache[full_key] = (lowered, positions)
        return hit

    @staticmethod
    def _kernel_values(positions, values) -> list:
        """What the compiled kernel takes, from the launch's values."""
        if type(positions) is tuple:
            return [values[i] for i in positions]
        return positions.values(values)

    def lower(self, *args, grid=None, backend: str | None = None, num_warps: int | None = None,
              num_stages: int | None = None, **kwargs) -> Lowered:
        """Lower for these arguments (tensors may be on the 'meta' device) without launching."""
        num_warps, num_stages = self._options_as_params(args, kwargs, num_warps, num_stages)
        values, _ = self._bind(args, kwargs)
        if grid is not None:
            grid = check_grid(grid(self._named(values)) if callable(grid) else grid)
        b = select.resolve(select.choose(backend, self.backend))
        key, _ = self._key(values, b, grid)
        return self._get(b, values, key, num_warps, num_stages, grid, select.interpret_setting())[0]

    def _options_as_params(self, args, kwargs, num_warps, num_stages) -> tuple[int | None, int | None]:
        """A parameter named like a launch option (`num_stages: tl.constexpr`) takes the option's value, as in
        a launch (Triton's too), unless the call gives the parameter itself; (num_warps, num_stages) checked,
        None where not given (lowering/launch_options.py decides them)."""
        for name, v in (("num_warps", num_warps), ("num_stages", num_stages)):
            i = self._index.get(name)
            if v is not None and i is not None and i >= len(args) and name not in kwargs:
                kwargs[name] = v
        return _checked_options(self.__name__, num_warps, num_stages)

    def _named(self, values) -> dict:
        """What a callable grid receives: every argument by name."""
        return dict(zip(self.param_names, values))

    def interpret_tilelang(self, grid, *args, strict_reads: bool = False, num_warps: int | None = None,
                           num_stages: int | None = None, **kwargs):
        """Run the TileLang lowering for these arguments on CPU tensors through the interpreter of
        TileLang programs: what the generated program computes, checked without a GPU. It is a test
        oracle, never a backend (no launch goes through it). Outputs are written in place; returns the
        interpreter's Report. Errors (tle.lowering.tilelang.interpreter.InterpreterError) name the
        statement of the generated program that has no defined result."""
        kwargs = dict(kwargs)
        num_warps, num_stages = self._options_as_params(args, kwargs, num_warps, num_stages)
        values, launch = self._bind(args, kwargs)
        launch = [k for k in launch if k not in self._index]      # a parameter of that name took the value
        if launch:
            raise LaunchError(f"{self.__name__}: interpret_tilelang takes num_warps and num_stages, not "
                              f"{', '.join(launch)}")
        if callable(grid):
            grid = grid(self._named(values))
        grid = check_grid(grid)
        b = select.resolve("tilelang")
        key, _ = self._key(values, b, grid)
        lowered, positions = self._get(b, values, key, num_warps, num_stages, grid,
                                       select.interpret_setting())
        return lowered.compiled.interpret(self._kernel_values(positions, values), strict_reads=strict_reads)

    # -- launch -------------------------------------------------------------------------------------
    def _launch(self, grid, args, kwargs, warmup: bool = False):
        values, launch = self._bind(args, kwargs)
        if not launch.keys() <= _TLE_OPTIONS:
            _check_fixed_options(self.__name__, launch)
        b = select.resolve(select.choose(launch.get("backend"), self.backend))
        num_warps, num_stages = _checked_options(self.__name__, launch.get("num_warps"), launch.get("num_stages"))
        if callable(grid):
            grid = grid(self._named(values))
        grid = check_grid(grid)
        key, device = self._key(values, b, grid)
        interpret = select.interpret_setting()
        if device is None:      # no tensor argument: the current device, as Triton's launches take it
            device = torch.device("cuda", torch.cuda.current_device()) \
                if torch.cuda.is_available() and not interpret else torch.device("cpu")
        # lowered first: an argument the kernel cannot use is reported the same way on every backend and
        # device, before whether this backend runs here
        lowered, positions = self._get(b, values, key, num_warps, num_stages, grid, interpret)
        why = select.launch_unavailable_reason(b, device, interpret)
        if why is not None:
            tensors = [n for (n, _, _), v in zip(self._params, values)
                       if isinstance(v, torch.Tensor) or descriptor_args.is_descriptor(v)]
            raise LaunchError(f"{self.__name__}: cannot launch on backend '{b.name}' with tensors "
                              f"{', '.join(tensors)} on {device}: {why}")
        if not warmup:
            lowered.compiled.launch(grid, self._kernel_values(positions, values))
        return lowered


def _other_device(kernel: str, name: str, on, first: str, device) -> LaunchError:
    return LaunchError(f"{kernel}: argument '{name}' is on {on}, but '{first}' is on {device}; a launch takes all "
                       f"its tensors on one device")


def _checked_options(kernel: str, num_warps, num_stages) -> tuple[int | None, int | None]:
    """The launch's num_warps and num_stages as ints, None where not given; LaunchError for values no backend
    launches."""
    if num_warps is not None:
        num_warps = int(num_warps)
        if num_warps <= 0 or (num_warps & (num_warps - 1) and num_warps % 4) or num_warps > 32:
            raise LaunchError(f"{kernel}: num_warps must be a power of two, or a multiple of 4 (warp groups), at "
                              f"most 32; got {num_warps}")
    if num_stages is not None:
        num_stages = int(num_stages)
        if num_stages < 0:
            raise LaunchError(f"{kernel}: num_stages must be >= 0; got {num_stages}")
    return num_warps, num_stages


def _check_fixed_options(kernel: str, launch: dict):
    for name, (default, why) in _FIXED_OPTIONS.items():
        if name in launch and launch[name] != default:
            raise LaunchError(f"{kernel}: {name}={launch[name]!r} is not supported ({why}); leave it at "
                              f"{default!r}")


_PLAIN = frozenset((int, float, bool, str, type(None)))


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
