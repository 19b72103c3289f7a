"""Which test runs which line of the mutation targets: the map that lets `tests/mutation.py` run, for a
mutant, only the tests that execute its line.

A test that never executes a line cannot see a change to it (its run is the same, step for step), so
leaving it out changes no mutant's status, with three exceptions the map records and the campaign honours:

- lines run while the test modules are collected (a parametrization computed by lowering a kernel):
  `collection`; a mutant there runs every test;
- lines run when the targets are imported (module level: tables, decorators): `import`; a mutant there
  runs every test, in a fresh interpreter;
- code run in a subprocess (the CLI tests) is not traced: a test that reaches a line only that way is
  not selected for it, which can only let a mutant survive that the whole suite would kill (the kill
  rate errs low, never high).

A kernel keeps its lowerings in memory, so a test that launches a kernel an earlier test lowered with the
same arguments would run none of the lowering's lines, and a mutant there would not run it. Before each
test the map forgets the lowerings of every kernel the project's modules hold (`forget_lowerings`): each
test's lines are those it runs on its own, as in a mutant's run, which runs only some of the tests.

Used as a pytest plugin (`-p mutation_coverage`, with tests/ on sys.path) under the environment variables
TLE_MUTATION_TARGETS (absolute file paths, os.pathsep-separated) and TLE_MUTATION_MAP (the JSON to write):

    {"tests": [[nodeid, seconds], ...], "lines": {relpath: {line: [test index, ...]}},
     "collection": {relpath: [line, ...]}}

`Selection` is the other half: a plugin that keeps the chosen tests and runs them in the given order.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import threading
import time

import pytest


class LineRecorder:
    """Records the lines of the target files each test executes (setup, call and teardown)."""

    def __init__(self, targets: list[str], root: str):
        self.targets = {os.path.realpath(t): os.path.relpath(os.path.realpath(t), root) for t in targets}
        self.lines: set[tuple[str, int]] = set()

    def _call(self, frame, event, arg):
        # a new frame: trace its lines only if its code belongs to a target (everything else runs untraced)
        return self._line if frame.f_code.co_filename in self.targets else None

    def _line(self, frame, event, arg):
        if event == "line":
            self.lines.add((frame.f_code.co_filename, frame.f_lineno))
        return self._line

    def start(self):
        self.lines = set()
        threading.settrace(self._call)
        sys.settrace(self._call)

    def stop(self) -> dict[str, set[int]]:
        sys.settrace(None)
        threading.settrace(None)
        out: dict[str, set[int]] = {}
        for filename, line in self.lines:
            out.setdefault(self.targets[filename], set()).add(line)
        return out


def forget_lowerings(roots: tuple[str, ...]) -> int:
    """Empty the in-memory lowering cache of every tle.jit kernel held by a module under `roots` (as a global,
    or as an attribute of a global: an autotuner's kernel); returns how many were emptied."""
    jit = sys.modules.get("tle.jit")
    if jit is None:
        return 0
    emptied = 0
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None) or ""
        if not path.startswith(roots):
            continue
        for value in list(vars(module).values()):
            for candidate in (value, *getattr(value, "__dict__", {}).values()):
                if isinstance(candidate, jit.Kernel) and candidate._cache:
                    candidate._cache.clear()
                    emptied += 1
    return emptied


class CoverageMap:
    """pytest plugin: per test, the target lines it ran; the lines run during collection; each test's time."""

    def __init__(self, targets: list[str], root: str, out: str):
        self.recorder = LineRecorder(targets, root)
        self.roots = tuple({os.path.join(root, ""), os.path.join(os.path.realpath(root), "")})
        self.out = out
        self.tests: list[tuple[str, float]] = []
        self.failed: set[str] = set()
        self.lines: dict[str, dict[int, list[int]]] = {}
        self.collection: dict[str, set[int]] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_collection(self, session):
        self.recorder.start()
        try:
            yield
        finally:
            self.collection = self.recorder.stop()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        forget_lowerings(self.roots)
        t0 = time.perf_counter()
        self.recorder.start()
        try:
            yield
        finally:
            ran = self.recorder.stop()
            index = len(self.tests)
            self.tests.append((item.nodeid, round(time.perf_counter() - t0, 4)))
            for relpath, lines in ran.items():
                per_file = self.lines.setdefault(relpath, {})
                for line in lines:
                    per_file.setdefault(line, []).append(index)

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.add(report.nodeid)

    def pytest_sessionfinish(self, session, exitstatus):
        data = {"tests": self.tests, "failed": sorted(self.failed),
                "lines": {f: {str(k): v for k, v in sorted(ls.items())} for f, ls in sorted(self.lines.items())},
                "collection": {f: sorted(ls) for f, ls in sorted(self.collection.items())},
                "exit_status": int(exitstatus)}
        with open(self.out, "w") as f:
            json.dump(data, f)


class MutantTimeout(Exception):
    """A chosen test ran past its limit: the mutant made it loop (or crawl)."""


class Selection:
    """pytest plugin: keep only `nodeids` and run them in that order (the others are deselected); a test
    with a limit in `limits` (seconds) fails with MutantTimeout when it runs longer."""

    def __init__(self, nodeids: list[str], limits: dict[str, float] | None = None):
        self.rank = {n: i for i, n in enumerate(nodeids)}
        self.limits = limits or {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        limit = self.limits.get(item.nodeid)
        if not limit:
            yield
            return

        def expire(signum, frame):
            raise MutantTimeout(f"{item.nodeid} ran past {limit:.0f}s")
        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        kept = sorted((it for it in items if it.nodeid in self.rank), key=lambda it: self.rank[it.nodeid])
        dropped = [it for it in items if it.nodeid not in self.rank]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_configure(config):
    """As `-p mutation_coverage`: record the map when TLE_MUTATION_MAP names where it goes; keep only the
    tests listed (one node id a line) in the file TLE_MUTATION_SELECT names."""
    out = os.environ.get("TLE_MUTATION_MAP")
    if out:
        targets = [t for t in os.environ.get("TLE_MUTATION_TARGETS", "").split(os.pathsep) if t]
        config.pluginmanager.register(CoverageMap(targets, str(config.rootpath), out), "tle-mutation-map")
    chosen = os.environ.get("TLE_MUTATION_SELECT")
    if chosen:      # a node id a line, with its limit in seconds after a tab where it has one
        with open(chosen) as f:
            rows = [line.split("\t") for line in f.read().splitlines() if line]
        config.pluginmanager.register(Selection([r[0] for r in rows], {r[0]: float(r[1]) for r in rows if len(r) > 1}),
                                      "tle-mutation-select")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def merge(parts: list[dict], texts: dict[str, str]) -> dict:
    """One map from the maps of shards of the test files; `texts`: the targets it was made from."""
    out = {"tests": [], "lines": {}, "collection": {}, "digests": {f: digest(t) for f, t in sorted(texts.items())},
           "failed": sorted({n for part in parts for n in part.get("failed", ())})}
    for part in parts:
        offset = len(out["tests"])
        out["tests"] += part["tests"]
        for f, per_line in part["lines"].items():
            mine = out["lines"].setdefault(f, {})
            for line, indices in per_line.items():
                mine.setdefault(line, []).extend(i + offset for i in indices)
        for f, lines in part["collection"].items():
            out["collection"][f] = sorted(set(out["collection"].get(f, [])) | set(lines))
    return out


class TestMap:
    """The map read back: which tests run a span of lines, and whether any of them ran at collection."""

    __test__ = False        # not a test class, whatever its name

    def __init__(self, data: dict):
        self.tests = [n for n, _ in data["tests"]]
        self.seconds = [s for _, s in data["tests"]]
        self.index = {n: i for i, n in enumerate(self.tests)}
        self.lines = {f: {int(line): indices for line, indices in per_line.items()}
                      for f, per_line in data["lines"].items()}
        self.collection = {f: set(lines) for f, lines in data["collection"].items()}
        self.digests = data.get("digests", {})
        # a test that fails on the pristine tree tells nothing about a mutant: never chosen
        self.failed = set(data.get("failed", ()))
        self.passing = [n not in self.failed for n in self.tests]

    @classmethod
    def load(cls, path: str) -> "TestMap":
        with open(path) as f:
            return cls(json.load(f))

    def stale(self, texts: dict[str, str]) -> list[str]:
        """The targets whose text differs from the one the map was made from."""
        return [f for f, t in sorted(texts.items()) if self.digests.get(f) != digest(t)]

    def tests_for(self, relpath: str, lines) -> set[int]:
        per_line = self.lines.get(relpath, {})
        return {i for line in lines for i in per_line.get(line, ()) if self.passing[i]}

    def ran_at_collection(self, relpath: str, lines) -> bool:
        return bool(self.collection.get(relpath, set()) & set(lines))
