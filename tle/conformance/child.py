"""One conformance run: one rewritten file on one backend, in a process of its own (a crash, a CUDA error or an
import's side effects stay there). Writes its checks as JSON: [{"check", "outcome", "detail"}].

    python -m tle.conformance.child --kind pytest|script --backend triton --device cpu --out r.json FILE

--device cpu runs what a GPU would on the CPU: Triton kernels in Triton's interpreter (the parent sets
TRITON_INTERPRET=1), TileLang kernels through the project's interpreter of the TileLang programs that the
lowering generates (tle.jit's interpret_tilelang), tensors asked for on "cuda" made on the CPU, and Triton's
active driver answering "cpu" for the device."""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import traceback


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")[:300]


def _error_line(exc: BaseException) -> str:
    """The exception and the innermost frame of the checked file (where the user would look)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == _FILE[0]]
    where = f" (line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {_first_line(exc)}{where}"


_FILE = [""]


def install_cpu_mode() -> None:
    """Run a GPU program on the CPU (see the module doc)."""
    import torch
    from torch.overrides import TorchFunctionMode
    import triton

    def on_cpu(d):
        if isinstance(d, torch.device) and d.type == "cuda" or isinstance(d, str) and d.startswith("cuda"):
            return torch.device("cpu")
        return d

    class CudaOnCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if "device" in kwargs:
                kwargs["device"] = on_cpu(kwargs["device"])
            name = getattr(func, "__name__", "")
            if name == "cuda":
                return args[0]
            if name == "to":
                args = tuple(on_cpu(a) if isinstance(a, (str, torch.device)) else a for a in args)
            return func(*args, **kwargs)

    CudaOnCpu().__enter__()          # for the rest of the process

    class CpuDriver:
        def get_active_torch_device(self):
            return torch.device("cpu")

        def get_current_device(self):
            return 0

        def get_current_target(self):
            from triton.backends.compiler import GPUTarget
            return GPUTarget("cuda", 90, 32)

    triton.runtime.driver.set_active(CpuDriver())

    # torch.cuda answers as for one H200-like device, so that tests which skip without CUDA run; only what tests
    # ask of it (the kernels run on the CPU, and a synchronization has nothing to wait for)
    torch.cuda.is_available = lambda: True
    torch.cuda.init = lambda: None
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.get_device_capability = lambda device=None: (9, 0)

    from tle.jit import _FIXED_OPTIONS, Kernel, _check_fixed_options
    launch = Kernel._launch

    def launch_or_interpret(self, grid, args, kwargs, warmup=False):
        from tle import select
        backend = select.choose(kwargs.get("backend"), self.backend)
        from tle.descriptor_args import is_descriptor
        values = [a.base if is_descriptor(a) else a for a in list(args) + list(kwargs.values())]
        tensors = [a for a in values if isinstance(a, torch.Tensor)]
        # a launch without tensors (a raw function printing, say) runs where the others do: here, on the CPU
        if backend == "tilelang" and (not tensors or tensors[0].device.type == "cpu"):
            kw = {k: v for k, v in kwargs.items() if k != "backend"}
            fixed = {k: kw.pop(k) for k in list(kw) if k in _FIXED_OPTIONS and k not in self._index}
            _check_fixed_options(self.__name__, fixed)      # Triton's options at their defaults, as a launch takes
            if warmup:          # an autotuner's: lowered, as a launch would be (nothing is compiled here)
                return self.lower(*args, grid=grid, backend="tilelang", **kw)
            self.interpret_tilelang(grid, *args, **kw)
            return None
        return launch(self, grid, args, kwargs, warmup)

    Kernel._launch = launch_or_interpret
    from tle.lowering.tilelang.backend import TileLangCompiled
    TileLangCompiled.precompile = lambda self: None    # launches here interpret the program: nothing to build

    # an interpreter's time says nothing of a GPU's: the autotuner runs every config once (each is checked)
    # and, all taking the same time, keeps the first
    import importlib
    autotuning = importlib.import_module("tle.autotune")     # the module: `tle.autotune` is the decorator

    def run_once(fn, warmup, rep):
        fn()
        return 1.0

    autotuning._do_bench = run_once


def run_pytest(path: str) -> list[dict]:
    import pytest
    checks = []

    class Collect:
        def pytest_runtest_logreport(self, report):
            # a test's call, or the setup that skipped or failed it, or a teardown that failed
            if not (report.when == "call" or (report.when == "setup" and not report.passed)
                    or (report.when == "teardown" and report.failed)):
                return
            outcome = "pass" if report.passed else "skip" if report.skipped else "fail"
            detail = ""
            if report.failed:
                crash = getattr(report.longrepr, "reprcrash", None)
                message = crash.message if crash is not None else report.longreprtext
                # pytest's assertion rewriting says what was false on the line after "assert False"
                detail = " ".join(ln.strip() for ln in message.splitlines()[:2] if ln.strip())[:300]
            elif report.skipped and isinstance(report.longrepr, tuple):
                detail = _first_line(report.longrepr[2])
            checks.append({"check": report.nodeid.split("::", 1)[-1], "outcome": outcome, "detail": detail})

        def pytest_collectreport(self, report):
            if report.failed:
                checks.append({"check": "(collection)", "outcome": "fail",
                               "detail": _first_line(report.longreprtext.strip().splitlines()[-1])})

    code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", path], plugins=[Collect()])
    if not checks:
        checks.append({"check": "(collection)", "outcome": "fail" if code not in (0, 5) else "skip",
                       "detail": f"pytest exited with {int(code)} and ran nothing"})
    return checks


def run_script(path: str) -> list[dict]:
    sys.argv = [path]
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            return [{"check": "(script)", "outcome": "fail", "detail": f"exit code {e.code}"}]
    except BaseException as e:  # noqa: BLE001 - the check's failure, reported
        return [{"check": "(script)", "outcome": "fail", "detail": _error_line(e)}]
    return [{"check": "(script)", "outcome": "pass", "detail": ""}]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tle.conformance.child")
    p.add_argument("--kind", choices=("pytest", "script"), required=True)
    p.add_argument("--backend", required=True)
    p.add_argument("--device", choices=("cpu", "cuda"), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("file")
    a = p.parse_args(argv)
    _FILE[0] = os.path.abspath(a.file)
    os.environ["TLE_BACKEND"] = a.backend
    sys.path.insert(0, os.path.dirname(_FILE[0]))
    try:
        if a.device == "cpu":
            install_cpu_mode()
        checks = run_pytest(_FILE[0]) if a.kind == "pytest" else run_script(_FILE[0])
    except BaseException as e:  # noqa: BLE001 - the run's failure, reported
        checks = [{"check": "(setup)", "outcome": "fail", "detail": _error_line(e)}]
    with open(a.out, "w") as f:
        json.dump(checks, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
