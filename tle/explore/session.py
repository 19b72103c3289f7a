"""What `tle explore` does for its page: one kernel of one file, and the user's edits of that file's text. Each
edit is imported from a private copy (never the user's file, which is written only by `save`), lowered at the
kernel's example launch to every backend, and turned into the page's panes; errors come back with the line of
the file they are at. Nothing here knows HTTP (server.py) or HTML beyond calling page.py."""
from __future__ import annotations

import ast
import difflib
import importlib.util
import itertools
import os
import shutil
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass, field

from tle.explore.page import Pane, main_html, notes_of, panes_of
from tle.explore.report import merged, stage_panes
from tle.explore.stages import stage_notes

_MODULES = itertools.count()


@dataclass
class SourceError:
    """An error of the edited text: where it is (`line` of the file, 0: no line), who reported it, and what."""
    who: str
    line: int
    message: str

    def as_dict(self) -> dict:
        return {"who": self.who, "line": self.line, "message": self.message}


class EditError(Exception):
    """The edited text cannot give the kernel (it does not import, or the kernel is not in it)."""

    def __init__(self, error: SourceError):
        super().__init__(error.message)
        self.error = error


@dataclass
class Loaded:
    """One version of the file's text, imported: the copy's path and module name, the kernel, and its autotuner
    (if it is autotuned)."""
    text: str
    path: str
    module: str
    kernel: object
    autotuner: object = None


@dataclass
class View:
    """The page's content for one lowering: the panes' HTML, the lines above them, and the errors."""
    main: str
    header: list[str] = field(default_factory=list)
    errors: list[SourceError] = field(default_factory=list)
    configs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"main": self.main, "header": self.header, "errors": [e.as_dict() for e in self.errors],
                "configs": self.configs}


def parse_overrides(text: str) -> dict:
    """'BLOCK=64, num_warps=4' -> {'BLOCK': 64, 'num_warps': 4}: keyword arguments of Python literals."""
    text = (text or "").strip()
    if not text:
        return {}
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except SyntaxError:
        raise ValueError(f"cannot read '{text}': expected NAME=VALUE, ... (Python literals)") from None
    if call.args or any(k.arg is None for k in call.keywords):
        raise ValueError(f"cannot read '{text}': expected NAME=VALUE, ... (Python literals)")
    out = {}
    for k in call.keywords:
        try:
            out[k.arg] = ast.literal_eval(k.value)
        except ValueError:
            raise ValueError(f"{k.arg}={ast.unparse(k.value)}: not a Python literal") from None
    return out


def _line_in(tb, path: str) -> int:
    """The last line of `path` in a traceback (the innermost frame of the edited file), else 0."""
    line = 0
    for frame in traceback.extract_tb(tb):
        if os.path.abspath(frame.filename) == path:
            line = frame.lineno or 0
    return line


def error_of(e: BaseException, who: str, path: str) -> SourceError:
    """An exception as a SourceError at its line of the file at `path` (the copy being lowered)."""
    loc = getattr(e, "loc", None)
    line = 0
    if isinstance(e, SyntaxError) and e.filename and os.path.abspath(e.filename) == path:
        line = e.lineno or 0
    elif loc is not None and getattr(loc, "line", 0) and os.path.abspath(getattr(loc, "file", "")) == path:
        line = loc.line
    else:
        line = _line_in(e.__traceback__, path)
    message = getattr(e, "message", None) or str(e)
    message = message.replace(path, os.path.basename(path))
    return SourceError(who, line, f"{type(e).__name__}: {message}")


class Session:
    """The kernel `name` of the file at `path`, at its example launch of `size`; `text` is the current edit."""

    def __init__(self, path: str, name: str, size: str = "small", on_gpu: bool = False):
        self.path = os.path.abspath(path)
        self.name = name
        self.size = size
        self.on_gpu = on_gpu
        with open(self.path) as f:
            self.text = f.read()
        self.workdir = tempfile.mkdtemp(prefix="tle-explore-")
        self.lock = threading.Lock()         # one lowering or run at a time: the compilers share caches
        self._loaded: Loaded | None = None

    @property
    def file_name(self) -> str:
        return os.path.basename(self.path)

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- one version of the text ---------------------------------------------------------------------------
    def load(self, text: str) -> Loaded:
        """Import `text` from a copy named as the file (so that line numbers and messages read the same)."""
        import tle
        from tle.autotune import Autotuner
        if self._loaded is not None and self._loaded.text == text:
            return self._loaded
        n = next(_MODULES)
        folder = os.path.join(self.workdir, str(n))
        os.makedirs(folder)
        copy = os.path.join(folder, self.file_name)
        with open(copy, "w") as f:
            f.write(text)
        neighbours = os.path.dirname(self.path)
        if neighbours not in sys.path:
            sys.path.append(neighbours)         # the file may import its neighbours, as when it is run
        mod_name = f"tle_explore_{n}"
        spec = importlib.util.spec_from_file_location(mod_name, copy)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as e:     # noqa: BLE001 - whatever the edit raises is shown at its line
            del sys.modules[mod_name]
            raise EditError(error_of(e, "import", copy)) from None
        obj = getattr(module, self.name, None)
        autotuner = obj if isinstance(obj, Autotuner) else None
        kernel = autotuner.kernel if autotuner is not None else obj
        if not isinstance(kernel, tle.Kernel):
            found = sorted(k for k, v in vars(module).items() if isinstance(v, (tle.Kernel, Autotuner)))
            raise EditError(SourceError("import", 0, f"the file has no @tle.jit kernel named '{self.name}' "
                                                     f"(kernels there: {', '.join(found) or 'none'})"))
        if getattr(kernel, "example", None) is None:
            raise EditError(SourceError("import", 0, f"kernel '{self.name}' has no example launch; register "
                                                     f"one with @tle.example({self.name})"))
        if self._loaded is not None:
            sys.modules.pop(self._loaded.module, None)
        self._loaded = Loaded(text, copy, mod_name, kernel, autotuner)
        return self._loaded

    def configs(self, loaded: Loaded) -> list[str]:
        """The autotuner's configs as override texts (the diff view offers them), else none."""
        if loaded.autotuner is None:
            return []
        return [", ".join(f"{k}={v!r}" for k, v in c.launch_kwargs().items()) for c in loaded.autotuner.configs]

    def lowerings(self, loaded: Loaded, overrides: dict | None = None) -> tuple[dict, dict]:
        """Lower the kernel at its example launch (tensors on 'meta'), `overrides` replacing launch keywords;
        backend -> Lowered, and backend -> SourceError for those that failed."""
        from tle.lowering.backend import backend_names
        from tle.runs import example_meta, lower_each
        launch = example_meta(loaded.kernel, self.size)

        def kwargs_of(backend: str) -> dict:
            kwargs = dict(launch.kwargs)
            if loaded.autotuner is not None and loaded.autotuner.configs:    # as the first config launches
                kwargs.update(loaded.autotuner.configs[0].for_backend(backend).launch_kwargs())
            return {**kwargs, **(overrides or {})}

        lowered, failures = lower_each(loaded.kernel, launch, backend_names(), kwargs_of)
        errors = {}
        for b, (e, bug) in failures.items():
            errors[b] = error_of(e, b, loaded.path)
            if bug:                          # a bug in a backend: shown, and the others go on
                errors[b].message = f"internal error in the {b} lowering: {errors[b].message}"
        return lowered, errors

    # -- what the page asks for ----------------------------------------------------------------------------
    def lower(self, text: str, stages: bool = True, overrides: str = "") -> View:
        """The page's panes for `text` (the current edit from now on)."""
        with self.lock:
            self.text = text
            try:
                loaded = self.load(text)
                lowered, errors = self.lowerings(loaded, parse_overrides(overrides))
            except EditError as e:
                return self._error_view(text, [e.error])
            except ValueError as e:           # the overrides
                return self._error_view(text, [SourceError("overrides", 0, str(e))])
            panes, notes = panes_of(lowered), notes_of(lowered)
            if stages:
                more_panes, more_notes = self.compiled_stages(lowered)
                panes, notes = panes + more_panes, merged(notes, more_notes)
            kernel_lines = _kernel_lines(loaded.kernel)
            errs = list(errors.values())
            header = [f"{b}: {len(lw.notes)} note{'s' if len(lw.notes) != 1 else ''}" for b, lw in lowered.items()]
            header += [f"{b} note: {n}" for b, lw in lowered.items() for n in lw.notes]
            main = main_html(self.file_name, text, panes, notes, kernel_lines, _by_line(errs))
            return View(main, header, errs, self.configs(loaded))

    def compiled_stages(self, lowered: dict) -> tuple[list[Pane], dict[int, list[str]]]:
        """The panes of the compiler stages built here, and their notes."""
        from tle.lowering.backend import get_backend
        built = {b for b in lowered if get_backend(b).compile_unavailable_reason() is None}
        return stage_panes(lowered, built), stage_notes(lowered, built)

    def _error_view(self, text: str, errors: list[SourceError]) -> View:
        main = main_html(self.file_name, text, [], {}, None, _by_line(errors))
        return View(main, [], errors)

    def diff(self, text: str, backend: str, a: str, b: str) -> dict:
        """`backend`'s generated source at launch keywords `a` and at `b` (override texts), as a unified diff."""
        from tle.lowering.backend import backend_names
        if backend not in backend_names():
            raise ValueError(f"unknown backend '{backend}' (backends: {', '.join(backend_names())})")
        with self.lock:
            try:
                loaded = self.load(text)
            except EditError as e:
                return {"error": e.error.as_dict()}
            sides = []
            for label, over in (("A", a), ("B", b)):
                lowered, errors = self.lowerings(loaded, parse_overrides(over))
                if backend in errors:
                    return {"error": {**errors[backend].as_dict(), "message": f"{label} ({over or 'the example'}): "
                                                                              f"{errors[backend].message}"}}
                if backend not in lowered:
                    return {"error": {"who": backend, "line": 0, "message": f"{backend} did not lower"}}
                sides.append(lowered[backend].source)
        lines = list(difflib.unified_diff(sides[0].splitlines(), sides[1].splitlines(),
                                          f"{backend} source, A: {a or 'the example launch'}",
                                          f"{backend} source, B: {b or 'the example launch'}", lineterm="", n=3))
        return {"diff": lines, "same": not lines}

    def run(self, text: str) -> dict:
        """Check each backend against the reference: on a GPU also time it (and tune it, when the kernel is
        autotuned); without one, in the CPU interpreters. backend -> a row of the page's results."""
        from tle.runs import run_lowering
        from tle.lowering.backend import backend_names
        with self.lock:
            try:
                loaded = self.load(text)
            except EditError as e:
                return {"error": e.error.as_dict()}
            try:
                launch = loaded.kernel.example("cuda" if self.on_gpu else "cpu", self.size)
            except Exception as e:           # noqa: BLE001 - the example is the user's code
                return {"error": error_of(e, "example launch", loaded.path).as_dict()}
            tuner = loaded.autotuner
            if tuner is not None:
                tuner.disk_cache = False        # tune here and now, so that every config's time is shown
            rows = {}
            lowered, errors = self.lowerings(loaded)
            for b in backend_names():
                if b in errors:
                    rows[b] = {"ok": False, "detail": f"not run: {errors[b].message}"}
                    continue
                # an autotuned kernel: tuned and launched by its autotuner on a GPU, at its first config without
                launcher, args = loaded.kernel, launch
                if tuner is not None:
                    launcher, args = _tuned_launch(tuner, launch, b, self.on_gpu)
                result, where = run_lowering(launcher, args, b, lowered[b], self.on_gpu)
                if isinstance(result, str):
                    rows[b] = {"ok": None, "detail": f"not run: {result}"}
                    continue
                rows[b] = {"ok": result.ok, "detail": result.detail, "where": where,
                           "ms": result.ms, "extra": result.extra}
                if tuner is not None and self.on_gpu:
                    rows[b]["autotune"] = _tuning(tuner, b)
            return {"rows": rows, "where": "GPU" if self.on_gpu else "CPU", "label": launch.label}

    def save(self, text: str) -> str:
        """Write `text` to the kernel's file (the page's 'save' asks for it): the only write to the user's files."""
        with self.lock:
            with open(self.path, "w") as f:
                f.write(text)
            self.text = text
        return self.path


def _tuned_launch(tuner, launch, backend: str, on_gpu: bool):
    """(what to launch, the launch) for an autotuned kernel: on a GPU the autotuner, with the example's keywords
    less those its configs set; without one (no timing) the kernel at the first config, as its panes show it."""
    import copy
    launch = copy.copy(launch)
    if on_gpu:
        chosen = tuner._space(backend)[1]
        launch.kwargs = {k: v for k, v in launch.kwargs.items() if k not in chosen}
        return tuner, launch
    launch.kwargs = {**launch.kwargs, **tuner.configs[0].for_backend(backend).launch_kwargs()}
    return tuner.kernel, launch


def _tuning(tuner, backend: str) -> dict:
    """What the autotuner found on `backend` at the launch just made: each config's time (or why it failed) and
    the one chosen."""
    timings = getattr(tuner, "timings", {}) or {}
    failures = getattr(tuner, "failures", {}) or {}
    return {"chosen": str(tuner.best_config),
            "configs": [{"config": str(c), "ms": timings.get(c), "failed": failures.get(c)}
                        for c in tuner._space(backend)[0]]}


def _kernel_lines(kernel) -> tuple[int, int]:
    import inspect
    lines, first = inspect.getsourcelines(kernel.fn)
    return first, first + len(lines) - 1


def _by_line(errors: list[SourceError]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for e in errors:
        out.setdefault(e.line, []).append(f"{e.who}: {e.message}")
    return out
