"""The backend interface and registry. A backend is a folder under lowering/ with a `backend.py`
defining a `Backend` subclass; adding one means adding the folder and its name to BACKEND_MODULES, the one
place backend names are listed (the runtime, the operator library and the benchmarks ask `backend_names()`)."""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod

from .ir.core import KernelIR
from .rules import Rules
from .spec import Spec

BACKEND_MODULES = {
    "triton": ".triton.backend",
    "tilelang": ".tilelang.backend",
}
# what a kernel lowers to where neither the call, the decorator nor TLE_BACKEND names a backend
DEFAULT_BACKEND = "triton"


class Compiled(ABC):
    """A lowered kernel: generated source, compiled on first need, launchable, with its stages."""

    source: str
    notes: list[str]
    # what the backend did with each load/store/atomic: (line, op, kind, how)
    access_report: list[tuple[int, str, str, str]] = []
    # each line of `source` (numbered from 1) that an op of the kernel emitted -> the kernel source line of that op
    line_map: dict[int, int] = {}

    @abstractmethod
    def launch(self, grid: tuple[int, ...], args: list) -> None: ...

    @abstractmethod
    def stage(self, name: str) -> str:
        """The text of a compiler stage (one of `stages`); compiling may raise CompilerUnavailable."""

    stages: tuple[str, ...] = ()

    def placements(self) -> list[tuple[int, str]]:
        """(kernel source line, what the lowering put in shared memory or pipelined there). Default: none."""
        return []

    def precompile(self) -> None:
        """Compile now what the first launch would, where that needs nothing from the launch's arguments; an
        autotuner calls it for its configs from worker threads at once. Default: nothing (compiled at launch)."""

    def interpret(self, args: list, strict_reads: bool = False):
        """Run the lowering on CPU tensors without launching it (a backend whose `cpu_run` is "interpret")."""
        raise NotImplementedError(f"{type(self).__name__} has no interpreter")


class Backend(ABC):
    name: str
    # the lowering rule of every IR op and the treatment of every attribute (lowering/rules.py)
    rules: Rules
    # int scalar arguments compiled in as constants (TileLang compiles per shape anyway)
    specializes_ints: bool = False
    # tensor shapes and strides are part of the specialization key
    specializes_shapes: bool = False
    # the launch grid is part of the specialization key (TileLang's grid is in the kernel)
    specializes_grid: bool = False
    # the stage a lowering is compiled to to check it, with or without a GPU (`tle compare`): reaching it runs
    # the target's compiler, so a kernel it rejects is a compile failure; None: the last of its stages
    build_stage: str | None = None
    # without a GPU, (how, what runs it): "launch" launches as usual on CPU tensors, "interpret" runs
    # Compiled.interpret(args); None: lowerings are compiled, not run, without a GPU
    cpu_run: tuple[str, str] | None = None

    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when the backend can lower here (generated source, IR, interpreter); otherwise why not."""

    def compile_unavailable_reason(self) -> str | None:
        """None when the backend can also compile here (its stages, a launch); otherwise why not, e.g. a
        missing toolchain."""
        return None

    def target(self) -> str:
        """The architecture lowerings are compiled for here, e.g. "sm_90a" ("" where it does not apply)."""
        return ""

    def launched_warps(self, num_warps: int) -> tuple[int, str]:
        """(the warps a kernel asking for `num_warps` is launched with here, why where they differ); read once
        per lowering by lowering/launch_options.py."""
        return num_warps, ""

    def launch_unavailable_reason(self, device) -> str | None:
        """None when kernels can run on `device` (a torch.device) here."""
        return None

    @abstractmethod
    def lower(self, ir: KernelIR, spec: Spec, cache_dir: str) -> Compiled: ...


_instances: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    if name not in BACKEND_MODULES:
        raise KeyError(name)
    if name not in _instances:
        mod = importlib.import_module(BACKEND_MODULES[name], __package__)
        _instances[name] = mod.Backend()
    return _instances[name]


def triton_debug() -> bool:
    """Whether Triton's debug mode is on (TRITON_DEBUG=1 when triton was imported, or
    `triton.knobs.runtime.debug` set since): Triton keeps tl.device_assert in a kernel it compiles for a launch
    only then (tle passes no `debug=` of its own), and the TileLang lowering follows it, so lowerings are keyed
    on it."""
    from triton import knobs
    return bool(knobs.runtime.debug)


def backend_names() -> list[str]:
    return list(BACKEND_MODULES)
