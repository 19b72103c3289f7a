"""Runs a suite's files on each backend, each file in a process of its own, and tables the checks."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from tle.conformance.rewrite import rewrite

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class FileResult:
    path: str                       # relative to the suite's root
    kind: str                       # "pytest" or "script"
    checks: dict = field(default_factory=dict)     # backend -> [{"check", "outcome", "detail"}]


def run_file(root: str, rel: str, kind: str, backends, device: str, modules: dict, decorators: dict, timeout: float,
             workdir: str) -> FileResult:
    result = FileResult(rel, kind)
    src_path = os.path.join(root, rel)
    with open(src_path) as f:
        text = f.read()
    try:
        rewritten = rewrite(text, modules, decorators)
    except (SyntaxError, ValueError) as e:
        for b in backends:
            result.checks[b] = [{"check": "(rewrite)", "outcome": "fail", "detail": str(e)}]
        return result
    # the rewritten file replaces its copy in the temporary tree (see run_suite), outside the project
    dest = os.path.join(workdir, rel)
    with open(dest, "w") as f:
        f.write(rewritten)
    for b in backends:
        result.checks[b] = _run_child(dest, kind, b, device, timeout, workdir)
    return result


def _run_child(path: str, kind: str, backend: str, device: str, timeout: float, workdir: str) -> list[dict]:
    out = os.path.join(workdir, f"result-{os.getpid()}.json")
    env = dict(os.environ)
    env["PYTHONPATH"] = PROJECT_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, "-m", "tle.conformance.child", "--kind", kind, "--backend", backend, "--device", device,
           "--out", out, path]
    try:
        proc = subprocess.run(cmd, env=env, cwd=os.path.dirname(path), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return [{"check": f"({kind})", "outcome": "fail", "detail": f"timed out after {timeout:.0f} s"}]
    if not os.path.exists(out):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return [{"check": f"({kind})", "outcome": "fail",
                 "detail": f"the process ended with code {proc.returncode}: {tail[0][:300]}"}]
    with open(out) as f:
        checks = json.load(f)
    os.remove(out)
    for c in checks:        # paths as the suite has them, not the temporary copy's
        c["detail"] = c["detail"].replace(workdir + os.sep, "")
    return checks


def run_suite(root: str, files, backends, device: str, modules: dict, decorators: dict, timeout: float,
              progress=None) -> list[FileResult]:
    results = []
    with tempfile.TemporaryDirectory(prefix="tle-conformance-") as workdir:
        # the suite's folders copied whole, so that a file finds its conftest, helpers and packages beside it
        for folder in sorted({os.path.dirname(rel) for rel, _ in files}):
            shutil.copytree(os.path.join(root, folder), os.path.join(workdir, folder), dirs_exist_ok=True)
        for rel, kind in files:
            if progress:
                progress(rel)
            results.append(run_file(root, rel, kind, backends, device, modules, decorators, timeout, workdir))
    return results


MARK = {"pass": "pass", "fail": "FAIL", "skip": "skip"}


def table(results: list[FileResult], backends) -> list[str]:
    """A table per file: a row per check, a column per backend, the first failure's reason beside it."""
    lines = []
    for r in results:
        lines += ["", f"## {r.path} ({r.kind})", "", "| check | " + " | ".join(backends) + " | first failure |",
                  "|---|" + "---|" * len(backends) + "---|"]
        names = list(dict.fromkeys(c["check"] for b in backends for c in r.checks.get(b, [])))
        for name in names:
            cells, why = [], ""
            for b in backends:
                c = next((c for c in r.checks.get(b, []) if c["check"] == name), None)
                cells.append(MARK[c["outcome"]] if c else "")
                if c and c["outcome"] == "fail" and not why:
                    why = f"{b}: {c['detail']}"
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {why.replace('|', '/')} |")
    return lines


def summary(results: list[FileResult], backends) -> str:
    parts = []
    for b in backends:
        checks = [c for r in results for c in r.checks.get(b, [])]
        passed = sum(c["outcome"] == "pass" for c in checks)
        skipped = sum(c["outcome"] == "skip" for c in checks)
        parts.append(f"{b}: {passed} of {len(checks)} checks pass" + (f" ({skipped} skipped)" if skipped else ""))
    return f"{len(results)} files; " + "; ".join(parts)
