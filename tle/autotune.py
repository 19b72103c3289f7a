"""`tle.autotune`: launch a `@tle.jit` kernel with the fastest of a set of configs, chosen per backend.

    @tle.autotune(configs=[tle.Config({"BLOCK": 256}, num_warps=4, overrides={"tilelang": {"BLOCK": 512}}),
                           tle.Config({"BLOCK": 1024}, num_warps=8)],
                  key=["n"])
    @tle.jit
    def scale(x, y, n, alpha, BLOCK: tl.constexpr): ...

    scale[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, y, n, 2.0, backend="tilelang")

A launch tunes once per (backend, key values, dtypes of the tensor arguments): each config is lowered and
compiled (one that cannot is skipped), then timed; the fastest is kept in memory (`.cache`) and on disk
(tle/autotune_cache.py) and launched. The config space is tle/autotune_config.py's `Config`."""
from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from tle import autotune_cache, select
from tle.autotune_config import OPTIONS, Config
from tle.errors import AutotuneError, LaunchError
from tle.jit import Kernel
from tle.lowering.backend import backend_names


def autotune(configs, key, *, backend_configs: dict | None = None, reset_to_zero=(), restore_value=(),
             warmup: float = 25, rep: float = 100, do_bench=None, cache: bool = True, verbose: bool = True):
    """Decorate a @tle.jit kernel. `configs`: tle.Config or triton.Config objects, one space for every
    backend; `backend_configs={"tilelang": [...]}` replaces it on one backend. `key`: parameter names whose
    values (a tensor's: its shape) start a new tuning. `reset_to_zero`/`restore_value`: tensors zeroed
    before / restored after every timed run. `do_bench(fn, warmup=ms, rep=ms)` returns ms (or a sequence
    whose first item is); default triton.testing.do_bench's median. `cache=False`: no disk cache.
    `verbose=False` (or env TLE_AUTOTUNE_QUIET=1): no progress line."""
    return lambda kernel: Autotuner(kernel, configs, key, backend_configs=backend_configs,
                                    reset_to_zero=reset_to_zero, restore_value=restore_value, warmup=warmup,
                                    rep=rep, do_bench=do_bench, cache=cache, verbose=verbose)


def _do_bench(fn, warmup, rep):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


class Autotuner:
    def __init__(self, fn, configs, key, backend_configs=None, reset_to_zero=(), restore_value=(), warmup=25,
                 rep=100, do_bench=None, cache=True, verbose=True):
        kernel = fn
        while not isinstance(kernel, Kernel):         # also over a wrapper such as triton.heuristics
            kernel = getattr(kernel, "fn", None)
            if kernel is None:
                raise TypeError(f"tle.autotune decorates a @tle.jit kernel, got {fn!r}")
        self.fn, self.kernel, self.__name__ = fn, kernel, kernel.__name__
        self.arg_names = kernel.param_names          # what triton.heuristics reads, when stacked over this
        self.configs = self._checked_space(configs, "configs")
        self.backend_configs = {}
        for backend, space in (backend_configs or {}).items():
            if backend not in backend_names():
                raise ValueError(f"tle.autotune: backend_configs names backend '{backend}', which is not one "
                                 f"of {', '.join(backend_names())}")
            self.backend_configs[backend] = self._checked_space(space, f"backend_configs['{backend}']")
        self.key = self._checked_params(key, "key")
        self.reset_to_zero = self._checked_params(reset_to_zero, "reset_to_zero")
        self.restore_value = self._checked_params(restore_value, "restore_value")
        self.warmup, self.rep, self.do_bench = warmup, rep, do_bench or _do_bench
        self.disk_cache, self.verbose = cache, verbose
        self.cache: dict[tuple, Config] = {}      # (backend, key values, dtypes) -> config, as launched there
        self.best_config: Config | None = None    # the config of the last launch
        self.timings: dict[Config, float] = {}    # ms per config of the last tuning that ran
        self.failures: dict[Config, str] = {}     # why each config of the last tuning could not run
        self._spaces: dict[str, tuple[list[Config], set[str]]] = {}

    def __repr__(self):
        return f"<tle.autotune of {self.kernel!r}, {len(self.configs)} configs>"

    # -- checks at decoration: each error names the argument -------------------------------------------
    def _checked_params(self, names, what: str) -> list[str]:
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise ValueError(f"tle.autotune: {what} must be a list of parameter names, got {names!r}")
        for n in names:
            if n not in self.kernel.param_names:
                raise ValueError(f"tle.autotune: {what} names '{n}', which is not a parameter of {self.__name__} "
                                 f"({', '.join(self.kernel.param_names)})")
        return list(names)

    def _checked_space(self, configs, what: str) -> list[Config]:
        if not configs:
            raise ValueError(f"tle.autotune: {what} is empty; give at least one tle.Config")
        out = []
        for i, c in enumerate(configs):
            try:
                c = Config.of(c)
            except ValueError as e:
                raise ValueError(f"tle.autotune: {what}[{i}]: {e}") from None
            for where, names in [("", c.kwargs)] + [(f".overrides['{b}']", o) for b, o in c.overrides.items()]:
                for n in names:
                    if n not in self.kernel.param_names and n not in OPTIONS:
                        raise ValueError(f"tle.autotune: {what}[{i}]{where} sets '{n}', which is neither a "
                                         f"parameter of {self.__name__} nor a launch option ({', '.join(OPTIONS)})")
            out.append(c)
        return out

    # -- launch ------------------------------------------------------------------------------------------
    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def run(self, *args, grid, warmup: bool = False, **kwargs):
        """Tune if this (backend, key, dtypes) is new, then launch with the chosen config. With warmup=True,
        only lower and compile every config of the space (a list of what each lowering produced)."""
        backend = select.choose(kwargs.pop("backend", None), self.kernel.backend)
        select.resolve(backend)       # an unknown or unusable backend fails here, not once per config
        space, tuned = self._space(backend)
        clash = sorted(kwargs.keys() & tuned)
        if clash:
            raise LaunchError(f"{self.__name__}: '{clash[0]}' is chosen by tle.autotune (its configs set it); "
                              f"do not pass it")
        named = self._named(args, kwargs)
        if warmup:
            lowerings = {c: self._launcher(c, args, kwargs, named, grid, backend)(True) for c in space}
            for error in _precompiled(lowerings).values():
                raise error           # as a launch compiling that config would
            return list(lowerings.values())
        key = self._key(backend, named)
        config = self.cache.get(key)
        if config is None:
            config = space[0] if len(space) == 1 else self._tune(key, space, args, kwargs, named, grid)
            self.cache[key] = config
        self.best_config = config
        return self._launcher(config, args, kwargs, named, grid, backend)()

    def _space(self, backend: str):
        """The configs as launched on `backend`, and the names they set (a call must not set them)."""
        if backend not in self._spaces:
            space = [c.for_backend(backend) for c in self.backend_configs.get(backend, self.configs)]
            self._spaces[backend] = space, set(OPTIONS).union(*(c.kwargs for c in space))
        return self._spaces[backend]

    def _named(self, args, kwargs) -> dict:
        """Every argument given or defaulted, by parameter name."""
        named = dict(zip(self.kernel.param_names, args))
        for name, p in self.kernel.signature.parameters.items():
            if name in kwargs:
                named[name] = kwargs[name]
            elif name not in named and p.default is not p.empty:
                named[name] = p.default
        return named

    def _key(self, backend: str, named: dict) -> tuple:
        values = []
        for k in self.key:
            if k not in named:
                raise LaunchError(f"{self.__name__}: missing argument '{k}' (an autotuning key)")
            v = named[k]
            values.append(tuple(v.shape) if isinstance(v, torch.Tensor) else v)
        dtypes = tuple(str(v.dtype) for v in named.values() if isinstance(v, torch.Tensor))
        return backend, tuple(values), dtypes

    def _launcher(self, config: Config, args, kwargs, named, grid, backend):
        """A function launching (or with True, only compiling) with `config`. The grid and the config's
        pre_hook see meta: the arguments by name, the call's options and the config's settings."""
        meta = {**named, **kwargs, **config.launch_kwargs()}
        g = grid(meta) if callable(grid) else grid
        options = {**kwargs, **config.launch_kwargs(), "backend": backend}

        def launch(warmup=False):
            if config.pre_hook is not None:
                config.pre_hook(meta)
            return self.fn.run(*args, grid=g, warmup=warmup, **options)
        return launch

    # -- tuning ------------------------------------------------------------------------------------------
    def _tune(self, key, space, args, kwargs, named, grid) -> Config:
        backend, values, dtypes = key
        path = ident = None
        if self.disk_cache:
            device = next((v.device for v in named.values() if isinstance(v, torch.Tensor)), None)
            ident = autotune_cache.identity(self.kernel.fn, backend, device, values, dtypes, space)
            path = autotune_cache.path_of(ident)
            hit = autotune_cache.read(path, space)
            if hit is not None:
                return hit
        for n in self.reset_to_zero + self.restore_value:
            if not isinstance(named.get(n), torch.Tensor):
                raise LaunchError(f"{self.__name__}: '{n}' (reset_to_zero / restore_value) is not a tensor here")
        saved = {n: named[n].clone() for n in self.restore_value}
        progress = _Progress(self.__name__, backend, values, len(space), self.verbose)
        timings, failures, runs, lowerings = {}, {}, {}, {}
        for config in space:         # lower first, one by one: a config that cannot is skipped
            try:
                run = self._guarded(self._launcher(config, args, kwargs, named, grid, backend), named, saved)
                lowerings[config], runs[config] = run(True), run
            except Exception as e:     # noqa: BLE001 - any failure of one config only rules that config out
                failures[config] = _why(e)
        failures.update({c: _why(e) for c, e in _precompiled(lowerings).items()})
        progress.update(timings, failures)
        for config, run in runs.items():
            if config in failures:
                continue
            try:
                ms = self.do_bench(run, warmup=self.warmup, rep=self.rep)
                timings[config] = float(ms[0] if isinstance(ms, (list, tuple)) else ms)
            except Exception as e:     # noqa: BLE001
                failures[config] = _why(e)
            progress.update(timings, failures)
        failures = {c: failures[c] for c in space if c in failures}
        for n in self.reset_to_zero:
            named[n].zero_()           # the real launch starts from zeros too, as in Triton
        self.timings, self.failures = timings, failures
        progress.finish(timings, failures)
        if not timings:
            lines = "\n".join(f"  {{{c}}}: " + why.replace("\n", "\n    ") for c, why in failures.items())
            raise AutotuneError(f"tle.autotune: no config of {self.__name__} ran on backend '{backend}' for "
                                f"key={_fmt(values)}:\n{lines}")
        best = min(timings, key=timings.get)
        if path is not None:
            autotune_cache.write(path, ident, best, timings, failures)
        return best

    def _guarded(self, launch, named, saved):
        """`launch` with reset_to_zero tensors zeroed before and restore_value tensors restored after."""
        def run(warmup=False):
            for n in self.reset_to_zero:
                named[n].zero_()
            try:
                return launch(warmup)
            finally:
                for n, t in saved.items():
                    named[n].copy_(t)
        return run


def _precompiled(lowerings: dict) -> dict:
    """Compile what each config's lowering can compile before its launch (Compiled.precompile), in threads at
    once: a TileLang config takes seconds to a minute of TileLang's passes and nvcc, which a tuning of many
    configs would otherwise wait for one after another. Returns the error of each config that failed to."""
    builds = {c: lo.compiled.precompile for c, lo in lowerings.items() if hasattr(lo, "compiled")}
    if len(builds) < 2:              # nothing to overlap: the launch compiles, as it would untuned
        return {}
    with ThreadPoolExecutor(min(len(builds), os.cpu_count() or 1), "tle-autotune") as pool:
        done = {c: pool.submit(build) for c, build in builds.items()}
        return {c: future.exception() for c, future in done.items() if future.exception() is not None}


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _fmt(values) -> str:
    return "(" + ", ".join(map(repr, values)) + ")"


class _Progress:
    """`tle.autotune k[tilelang] key=(4096, 4096): 3/8 configs, best 0.412 ms {BLOCK_M: 128, ...}` on
    stderr: rewritten in place on a terminal, else one line when the tuning ends."""

    def __init__(self, name, backend, values, total, verbose):
        self.head, self.total = f"tle.autotune {name}[{backend}] key={_fmt(values)}", total
        self.on = verbose and os.environ.get("TLE_AUTOTUNE_QUIET", "") in ("", "0")
        self.stream = sys.stderr
        self.tty = self.on and getattr(self.stream, "isatty", lambda: False)()
        self.start = time.perf_counter()
        self.update({}, {})

    def line(self, timings, failures) -> str:
        s = f"{self.head}: {len(timings) + len(failures)}/{self.total} configs"
        if timings:
            best = min(timings, key=timings.get)
            s += f", best {timings[best]:.3f} ms {{{best}}}"
        return s + (f", {len(failures)} failed" if failures else "")

    def update(self, timings, failures):
        if self.tty:
            self.stream.write("\r" + self.line(timings, failures) + "\x1b[K")
            self.stream.flush()

    def finish(self, timings, failures):
        if self.on:
            took = f" ({time.perf_counter() - self.start:.1f} s)"
            self.stream.write(("\r" if self.tty else "") + self.line(timings, failures) + took
                              + ("\x1b[K" if self.tty else "") + "\n")
            self.stream.flush()
