"""A test runner for `tests/mutation.py` that pays the imports once: it imports torch, Triton, TileLang,
pytest and every module of tle, then runs each mutant in a forked child that patches the mutated
functions in memory and runs the chosen tests with pytest.

Started by a worker in its copy of the tree (cwd), with the copy first on PYTHONPATH and tests/ after it.
It talks JSON lines: on stdin, one request per mutant

    {"file": relpath, "pristine": text, "mutant": text, "paths": [test files], "tests": [nodeids],
     "args": [pytest arguments], "timeout": seconds, "log": path}

and on stdout one reply per request: {"rc": exit code, or null on a timeout, "seconds": s}; the child's
output goes to `log`. The first line it writes is {"ready": true, "modules": n, "import_lines": {relpath:
[line, ...]}}: the lines of the targets (TLE_MUTATION_TARGETS) that ran while it imported, whose mutants it
cannot patch.

Patching is sound only for a change inside a function body that has not run yet: the child swaps the
function's code object (`f.__code__`), and every reference to the function, in rule tables and
decorators included, sees the mutant. Anything else (a module-level statement, a class body, a default
value, a function that ran while the modules were imported) the child refuses with exit code
NEEDS_FRESH_INTERPRETER, and the campaign runs that mutant in a new interpreter instead. The mutant is
also on disk (the worker writes it), so a subprocess a test starts imports it as well.
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys
import time
import types
import warnings

NEEDS_FRESH_INTERPRETER = 97
CO_OPTIMIZED = 0x1          # set on function code, not on module or class bodies


# the folders of the source tree and the packages they are (setup.py maps lowering/ and kernels/ into tle)
PACKAGE_FOLDERS = {"tle": ["tle"], "lowering": ["tle", "lowering"], "kernels": ["tle", "kernels"]}


def module_name(relpath: str) -> str | None:
    """The module a file of the source tree is imported as (None outside the packages)."""
    parts = os.path.normpath(relpath)[:-3].split(os.sep)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    top = PACKAGE_FOLDERS.get(parts[0])
    return ".".join(top + parts[1:]) if top else None


def import_everything() -> int:
    """The third-party packages and every module of tle, in the parent (the children share them)."""
    import numpy  # noqa: F401
    import pytest  # noqa: F401
    import torch  # noqa: F401
    import triton  # noqa: F401
    try:
        import tilelang  # noqa: F401
    except ImportError:
        pass
    count = 0
    for folder in PACKAGE_FOLDERS:
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for f in sorted(filenames):
                name = module_name(os.path.join(dirpath, f)) if f.endswith(".py") else None
                if name is None or name.rsplit(".", 1)[-1] == "__main__":   # importing a command's entry runs it
                    continue
                try:
                    importlib.import_module(name)
                    count += 1
                except (Exception, SystemExit):   # an optional module (a missing extra): tests that need it import it
                    pass
    return count


def _consts(code: types.CodeType) -> tuple:
    # typed, so that 1, 1.0 and True differ
    return tuple((type(c).__name__, c) for c in code.co_consts if not isinstance(c, types.CodeType))


def _shell_differs(a: types.CodeType, b: types.CodeType) -> bool:
    """Do two code objects differ other than in the code objects they hold (and in columns)?"""
    return (a.co_code != b.co_code or a.co_names != b.co_names or _consts(a) != _consts(b)
            or a.co_varnames != b.co_varnames or a.co_freevars != b.co_freevars
            or a.co_cellvars != b.co_cellvars or a.co_exceptiontable != b.co_exceptiontable
            or a.co_argcount != b.co_argcount or a.co_kwonlyargcount != b.co_kwonlyargcount
            or a.co_flags != b.co_flags)


def _differs(a: types.CodeType, b: types.CodeType) -> bool:
    if _shell_differs(a, b):
        return True
    ca = [c for c in a.co_consts if isinstance(c, types.CodeType)]
    cb = [c for c in b.co_consts if isinstance(c, types.CodeType)]
    return len(ca) != len(cb) or any(_differs(x, y) for x, y in zip(ca, cb))


def changed_functions(a: types.CodeType, b: types.CodeType) -> list[tuple[types.CodeType, types.CodeType]] | None:
    """The outermost function code objects that differ between module codes `a` and `b`, as (old, new)
    pairs; None when the module's or a class body's own code differs (not patchable)."""
    if _shell_differs(a, b):
        return None
    ca = [c for c in a.co_consts if isinstance(c, types.CodeType)]
    cb = [c for c in b.co_consts if isinstance(c, types.CodeType)]
    if len(ca) != len(cb):
        return None
    out = []
    for x, y in zip(ca, cb):
        if not _differs(x, y):
            continue
        if x.co_flags & CO_OPTIMIZED:
            out.append((x, y))
        else:                       # a class body: its methods
            inner = changed_functions(x, y)
            if inner is None:
                return None
            out += inner
    return out


def _key(code: types.CodeType) -> tuple:
    return getattr(code, "co_qualname", code.co_name), code.co_firstlineno


def patch(filename: str, pristine: str, mutant: str) -> bool:
    """Give every live function of `filename` that the mutant changes the mutant's code."""
    module = next((m for m in list(sys.modules.values())
                   if os.path.realpath(getattr(m, "__file__", None) or "") == filename), None)
    if module is None:
        return True                 # not imported yet: the tests import the mutant from disk
    pairs = changed_functions(compile(pristine, filename, "exec", dont_inherit=True),
                              compile(mutant, filename, "exec", dont_inherit=True))
    if pairs is None:
        return False
    live: dict[tuple, list] = {}
    with warnings.catch_warnings():     # isinstance on some lazily deprecated objects warns
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            if isinstance(obj, types.FunctionType) and obj.__code__.co_filename == filename:
                live.setdefault(_key(obj.__code__), []).append(obj)
    for old, new in pairs:
        functions = live.get(_key(old))
        if not functions:           # e.g. a comprehension run at import: no function object to patch
            return False
        for f in functions:
            f.__code__ = new
    return True


def run_child(req: dict) -> int:
    import pytest
    from mutation_coverage import Selection
    filename = os.path.realpath(req["file"])
    if not patch(filename, req["pristine"], req["mutant"]):
        return NEEDS_FRESH_INTERPRETER
    return int(pytest.main(req["args"] + req["paths"], plugins=[Selection(req["tests"], req.get("limits"))]))


RUNNING: set[int] = set()         # the child running now, killed with the server


def _stop(signum, frame):
    for pid in list(RUNNING):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os._exit(1)


def serve_one(req: dict) -> dict:
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:                    # the child: its own session (killed as a group on a timeout)
        os.setsid()
        fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = sys.stderr = open(1, "w", closefd=False)    # whatever held sys.stdout before, too
        sys.stdin.close()
        rc = 3
        try:
            rc = run_child(req)
        except BaseException as e:  # noqa: BLE001 - whatever happens, the child reports and exits
            print(f"mutation server: the child raised {type(e).__name__}: {e}", flush=True)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    RUNNING.add(pid)
    try:
        return _wait(pid, t0, t0 + req["timeout"])
    finally:
        RUNNING.discard(pid)


def _wait(pid: int, t0: float, deadline: float) -> dict:
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            return {"rc": rc if rc >= 0 else 1, "seconds": round(time.monotonic() - t0, 2)}
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return {"rc": None, "seconds": round(time.monotonic() - t0, 2)}
        time.sleep(0.05)


def main() -> int:
    out = sys.stdout
    sys.stdout = sys.stderr         # whatever an import prints stays off the reply channel
    signal.signal(signal.SIGTERM, _stop)
    from mutation_coverage import LineRecorder
    targets = [t for t in os.environ.get("TLE_MUTATION_TARGETS", "").split(os.pathsep) if t]
    recorder = LineRecorder(targets, os.getcwd())
    recorder.start()
    try:
        count = import_everything()
    finally:
        ran = recorder.stop()
    gc.collect()
    print(json.dumps({"ready": True, "modules": count, "import_lines": {f: sorted(ls) for f, ls in ran.items()}}),
          file=out, flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(serve_one(json.loads(line))), file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
