"""The `tle` command: read what each backend made of a kernel, compile, run, check and time each lowering.

    tle                                             the commands, one line each
    tle show    kernels/examples/matmul.py::matmul_kernel --backend triton --stage ttgir
    tle compare kernels/softmax.py::softmax_kernel [more PATH::KERNEL ...] [--verbose | --side-by-side] [--html F]
    tle explore kernels/softmax.py::softmax_kernel [--size small|large] [--port N]

Every kernel here is driven by its example launch (`@tle.example`), so no shape flags are needed. `compare`
prints each kernel's notes and failures (with --verbose its IR, sources and access classes too) and ends with
a summary table: per kernel and backend, lowered, compiled (stage and target), checked (max abs error) and
time. What differs between backends (the stage a lowering is compiled to, how it runs without a GPU) is
declared by the backends themselves (see "tle compare" below), not here.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from tle.runs import (Run, check, example_meta, first_line, lower_each, max_errors, meta_copy,  # noqa: F401
                      poison, rate, run_lowering)

STAGES_ALWAYS = ("ir", "source")


class UsageError(Exception):
    """Bad input from the command line: one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):          # argparse would print the usage block too; we keep it to one line
        raise UsageError(message)


# -- finding a kernel ---------------------------------------------------------------------------------------
def split_target(target: str) -> tuple[str, str]:
    """'PATH::KERNEL' -> (PATH, KERNEL), PATH an existing file."""
    path, sep, name = target.partition("::")
    if not sep or not path or not name:
        raise UsageError(f"expected PATH::KERNEL (e.g. kernels/softmax.py::softmax_kernel), got '{target}'")
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}")
    return path, name


def load_kernel(target: str):
    """'PATH::KERNEL' -> the tle.Kernel named KERNEL in the Python file PATH."""
    import tle
    path, name = split_target(target)
    full = os.path.abspath(path)
    # a module name unique to the path, so two files with the same name do not collide
    stem = "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(full))[0])
    mod_name = f"tle_cli_{stem}_{hashlib.sha1(full.encode()).hexdigest()[:8]}"
    mod = sys.modules.get(mod_name)
    if mod is None:
        folder = os.path.dirname(full)
        if folder not in sys.path:
            sys.path.append(folder)     # lets the file import its neighbours
        spec = importlib.util.spec_from_file_location(mod_name, full)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as e:
            del sys.modules[mod_name]
            raise UsageError(f"cannot import {path}: {type(e).__name__}: {e}") from None
    kernel = getattr(mod, name, None)
    if not isinstance(kernel, tle.Kernel):
        found = sorted(n for n, v in vars(mod).items() if isinstance(v, tle.Kernel))
        raise UsageError(f"{path} has no @tle.jit kernel named '{name}'"
                         f" (kernels there: {', '.join(found) or 'none'})")
    if getattr(kernel, "example", None) is None:
        raise UsageError(f"kernel '{name}' in {path} has no example launch; register one with "
                         f"@tle.example({name})")
    return kernel


def check_backend(name: str | None) -> None:
    from tle.lowering.backend import backend_names
    if name is not None and name not in backend_names():
        raise UsageError(f"unknown backend '{name}' (backends: {', '.join(backend_names())})")


# -- tle show -----------------------------------------------------------------------------------------------
def cmd_show(args) -> int:
    from tle.errors import BackendUnavailable, LaunchError, LoweringError
    check_backend(args.backend)
    kernel = load_kernel(args.target)
    launch = example_meta(kernel, args.size)
    try:
        lowered = kernel.lower(*launch.args, grid=launch.grid, backend=args.backend, **launch.kwargs)
    except (LoweringError, BackendUnavailable, LaunchError) as e:
        print(f"tle: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    stage = args.stage or "source"
    if stage not in STAGES_ALWAYS + tuple(lowered.stages):
        raise UsageError(f"unknown stage '{stage}' for backend '{lowered.backend}' "
                         f"(stages: {', '.join(STAGES_ALWAYS + tuple(lowered.stages))})")
    if stage == "ir":
        print(lowered.ir)
    elif stage == "source":
        print(lowered.source, end="" if lowered.source.endswith("\n") else "\n")
    else:
        try:
            text = lowered.stage(stage)
        except Exception as e:           # a compiler failure: say which, without a traceback
            print(f"tle: {lowered.backend} could not produce stage '{stage}': {type(e).__name__}: {e}",
                  file=sys.stderr)
            return 1
        print(text, end="" if text.endswith("\n") else "\n")
    return 0


# -- tle compare ----------------------------------------------------------------------------------------------
# What differs between backends is declared by each (lowering/backend.py: build_stage, target(), cpu_run,
# compile_unavailable_reason()); nothing here names a backend.
def _build_stage(backend, lowered) -> str | None:
    stage = backend.build_stage
    if stage is None and lowered.stages:
        stage = lowered.stages[-1]
    return stage


def _target(backend) -> str:
    try:
        return backend.target()
    except Exception:                    # the target only labels the summary
        return ""


def _build(backend, lowered) -> str:
    """Compile `lowered` to its backend's build stage; returns what the summary says of it ('ptx sm_90a')."""
    stage = _build_stage(backend, lowered)
    if stage is None:
        return "-"
    lowered.stage(stage)
    return f"{stage} {_target(backend)}".strip()


def _not_compiled(backend) -> str | None:
    """What the summary says where the backend cannot compile here ("not compiled: no nvcc"), else None."""
    why = backend.compile_unavailable_reason()
    return None if why is None else f"not compiled: {why.split(':')[0]}"


def _heading(text: str, char: str = "=") -> None:
    print(f"\n{char * 3} {text} {char * max(3, 96 - len(text))}")


def _columns(blocks: list[tuple[str, str]], width: int) -> list[str]:
    """Texts side by side in columns of `width`; long lines wrap inside their column."""
    cols = []
    for title, text in blocks:
        lines = [title, "-" * min(width, len(title))]
        for ln in text.rstrip("\n").splitlines() or [""]:
            ln = ln.expandtabs(4)
            while len(ln) > width:
                lines.append(ln[:width])
                ln = "  " + ln[width:]
            lines.append(ln)
        cols.append(lines)
    rows = max(len(c) for c in cols)
    return [" | ".join(c[i].ljust(width) if i < len(c) else " " * width for c in cols).rstrip()
            for i in range(rows)]


def _print_sources(lowered: dict, side_by_side: bool) -> None:
    blocks = [(f"{b} lowering", lw.source) for b, lw in lowered.items()]
    term = shutil.get_terminal_size((80, 24)).columns
    width = (term - 3 * (len(blocks) - 1)) // max(1, len(blocks))
    if side_by_side and len(blocks) > 1 and width >= 60:
        _heading("generated sources, side by side")
        print("\n".join(_columns(blocks, width)))
        return
    if side_by_side and len(blocks) > 1:
        print(f"(terminal is {term} columns wide, too narrow for {len(blocks)} columns: one after the other)")
    for title, text in blocks:
        _heading(title, "-")
        print(text.rstrip("\n"))


def _print_accesses(lowered: dict) -> None:
    """One table of the kernel's loads, stores and atomics: their class in the IR and what each backend
    made of them (`Compiled.access_report`)."""
    _heading("memory accesses and extension sites", "-")
    backends = list(lowered)
    by_site: dict = {}
    for b, lw in lowered.items():
        for line, op, kind, how in lw.compiled.access_report:
            site = by_site.setdefault((line, op), {"kind": {}, "how": {}})
            if b in site["how"]:            # several of this op on one line
                if how not in site["how"][b].split("; "):
                    site["how"][b] += f"; {how}"
                if kind not in site["kind"][b].split("/"):
                    site["kind"][b] += f"/{kind}"
                continue
            site["kind"][b] = kind
            site["how"][b] = how
    table = [("line", "op") + tuple(f"{b}" for b in backends)]
    for (line, op), site in sorted(by_site.items()):
        cells = []
        for b in backends:
            cells.append(f"{site['kind'].get(b, '-')}: {site['how'].get(b, '-')}")
        table.append((str(line), op) + tuple(cells))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
    for r in table:
        print(("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1]).rstrip())


def _lower_all(kernel, launch, backends) -> tuple[dict, dict]:
    lowered, failures = lower_each(kernel, launch, backends)
    errors = {b: (f"internal error in the {b} lowering: " if bug else "") + f"{type(e).__name__}: {e}"
              for b, (e, bug) in failures.items()}
    return lowered, errors


def _clip(text: str, lines: int = 25) -> str:
    """The last `lines` lines of a compiler's message (its error comes last)."""
    all_lines = text.rstrip("\n").splitlines()
    if len(all_lines) <= lines:
        return "\n".join(all_lines)
    return "\n".join([f"... ({len(all_lines) - lines} lines above; --verbose shows them)"] + all_lines[-lines:])


@dataclass
class Row:
    """One line of the summary: a kernel on a backend."""
    target: str
    backend: str
    lowered: str = "-"
    compiled: str = "-"
    checked: str = "not run"
    time: str = "-"
    ok: bool = True


@dataclass
class _Job:
    target: str
    kernel: object
    size: str
    launch: object = None
    lowered: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    builds: dict = field(default_factory=dict)        # backend -> Future of _build


def _prepare(target: str, args, on_gpu: bool, backends: list[str]) -> _Job:
    """Build the kernel's example launch and lower it to every backend (compiling comes later)."""
    job = _Job(target, load_kernel(target), args.size or ("large" if on_gpu else "small"))
    try:
        job.launch = (example_meta(job.kernel, job.size) if args.no_run
                      else job.kernel.example("cuda" if on_gpu else "cpu", job.size))
    except Exception as e:
        job.errors = {b: f"the example launch failed: {type(e).__name__}: {e}" for b in backends}
        return job
    job.lowered, job.errors = _lower_all(job.kernel, job.launch, backends)
    return job


def _failure(title: str, text: str) -> None:
    _heading(f"{title} FAILED", "-")
    print(text)


def compare_one(job: _Job, args, on_gpu: bool, verbose: bool) -> list[Row]:
    """Print one kernel's notes and failures (with --verbose also its IR, lowerings, accesses and run lines);
    wait for its compiles, run and check each backend; return its rows of the summary."""
    from tle.lowering.backend import backend_names, get_backend
    label = job.launch.label if job.launch is not None else ""
    _heading(f"{job.target}  [{label or job.size}]", "#")
    lowered, backends = job.lowered, backend_names()
    if verbose and lowered:
        _heading("tile IR")
        print(next(iter(lowered.values())).ir)
        for b, lw in lowered.items():
            spec = getattr(lw.kernel, "specialized", None)
            if spec:
                print(f"({b} compiles these int arguments in as constants: "
                      f"{', '.join(f'{k}={v}' for k, v in spec.items())})")
        _print_sources(lowered, args.side_by_side)
    for b, e in job.errors.items():
        _failure(f"{b} lowering", e)
    if lowered:
        _heading("notes", "-")
    for b, lw in lowered.items():
        print(f"{b}:" + (" none" if not lw.notes else ""))
        for n in lw.notes:
            print(f"  - {n}")
    if verbose and lowered:
        _print_accesses(lowered)

    rows = []
    runs = []                            # (backend, line) for --verbose
    for b in backends:
        row = Row(job.target, b)
        rows.append(row)
        if b not in lowered:
            row.lowered, row.ok = "error", False
            runs.append((b, "not run: lowering failed"))
            continue
        row.lowered = "yes"
        if args.no_run:
            continue
        backend, lw = get_backend(b), lowered[b]
        skipped = _not_compiled(backend)
        if skipped is not None:
            row.compiled = skipped
            print(f"{b}: not compiled here ({backend.compile_unavailable_reason()})")
        else:
            try:
                row.compiled = job.builds[b].result()
            except Exception as e:
                row.compiled, row.ok = "error", False
                stage = _build_stage(backend, lw)
                text = f"{type(e).__name__}: {e}"
                _failure(f"{b} compile to {stage} {_target(backend)}".rstrip(), text if verbose else _clip(text))
                runs.append((b, "not run: compile failed"))
                continue
        if on_gpu and skipped is not None:
            runs.append((b, f"not run: {skipped}"))
            continue
        result, where = run_lowering(job.kernel, job.launch, b, lw, on_gpu)
        if isinstance(result, str):
            if job.launch.no_interpreter and result == job.launch.no_interpreter:
                print(f"{b}: not run: {result}")
            runs.append((b, f"not run: {result}"))
            continue
        row.ok = result.ok
        if result.ok:
            row.checked = f"{result.error:.3g}"
        else:
            row.checked = "FAIL" + (f" (max err {result.error:.3g})" if result.error is not None else "")
            _failure(f"{b} run ({where})", result.detail)
        line = f"{'PASS' if result.ok else 'FAIL'}  {result.detail}"
        if result.ms is not None:
            speed = rate(job.launch, result.ms)
            row.time = f"{result.ms:.4f} ms" + (f" ({speed})" if speed else "")
            line += f"  {result.ms:.4f} ms  {speed}"
        runs.append((b, f"{row.compiled}, {line}" + (f"; {result.extra}" if result.extra else "")
                     + f"  ({where}" + ("" if on_gpu else ", CPU") + ")"))
    if verbose and not args.no_run:
        _heading(f"run: {'GPU' if on_gpu else 'CPU (no CUDA device)'}, size {job.size}", "-")
        for b, line in runs:
            print(f"{b:10s} {line}")
    return rows


def _print_summary(rows: list[Row], on_gpu: bool, args) -> None:
    from tle.lowering.backend import backend_names, get_backend
    _heading("summary")
    table = [("kernel", "backend", "lowered", "compiled", "checked", "time")]
    last = None
    for r in rows:
        table.append((r.target if r.target != last else "", r.backend, r.lowered, r.compiled, r.checked, r.time))
        last = r.target
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    for t in table:
        print("  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip())
    if args.no_run:
        print("(--no-run: lowered only; nothing compiled or run)")
        return
    print("checked: max abs error against the torch reference, over the kernel's outputs")
    if on_gpu:
        print("time: median of triton.testing.do_bench on this GPU")
    else:
        ran = []
        for b in backend_names():
            try:
                how, where = get_backend(b).cpu_run or (None, "")
            except Exception:            # a backend that cannot even be imported: its rows say so
                how = None
            ran.append(f"{b} in the {where}" if how else f"{b} not run")
        print(f"no GPU here: ran {', '.join(ran)}")


def _interpreted_triton() -> bool:
    """Whether Triton was imported in interpreter mode: it decides at import time, for its own @jit
    helpers (tl.sum, tl.max, ...) too, so setting TRITON_INTERPRET later is not enough."""
    if "triton" not in sys.modules:
        return True                      # not imported yet: the environment variable will do
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    return isinstance(tl.sum, InterpretedFunction)


def _use_triton_interpreter(args, restart: bool = True) -> None:
    """Without a GPU, Triton runs the kernels on CPU tensors in its interpreter: set before any kernel is lowered.
    Where `import tle` has already imported Triton in compiled mode, start again with the variable set (unless
    nothing will run: `restart=False`)."""
    os.environ["TRITON_INTERPRET"] = "1"
    if restart and not _interpreted_triton():
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-m", "tle.cli"] + args.argv)


def cmd_compare(args) -> int:
    import torch
    from tle.lowering.backend import backend_names, get_backend
    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        _use_triton_interpreter(args, restart=not args.no_run)
    for t in args.targets:                        # bad targets are usage errors before any work starts
        load_kernel(t)
    verbose = args.verbose or args.side_by_side
    backends = backend_names()
    # The compiles run in worker threads while this one runs the kernels, and a kernel runs once its own are
    # done. Without a GPU they run side by side (a compiler in a process of its own spends most of its time
    # starting); on a GPU one at a time, all done before the first timed run, so that none competes with it
    workers = 1 if on_gpu else max(1, min(4, os.cpu_count() or 1))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tle-compile")
    rows: list[Row] = []
    jobs: list[_Job] = []
    try:
        for t in args.targets:
            jobs.append(_prepare(t, args, on_gpu, backends))
            if not args.no_run:
                for b, lw in jobs[-1].lowered.items():
                    if _not_compiled(get_backend(b)) is None:
                        jobs[-1].builds[b] = pool.submit(_build, get_backend(b), lw)
        if on_gpu:
            wait([f for job in jobs for f in job.builds.values()])
        pages = {} if args.html else None        # target -> its summary rows, for the --html pages
        for job in jobs:
            job_rows = compare_one(job, args, on_gpu, verbose)
            rows += job_rows
            job.launch = None                     # its tensors are no longer needed
            if pages is not None:
                pages[job.target] = job_rows
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    _print_summary(rows, on_gpu, args)
    if pages is not None:
        _write_pages(args.html, jobs, pages)
    ok = all(r.ok for r in rows)
    print()
    if args.no_run:
        print("all lowerings passed" if ok else "some lowerings FAILED (see above)")
    elif not ok:
        print("some lowerings, compiles or checks FAILED (see above)")
    elif any(r.compiled.startswith("not compiled") for r in rows):
        print("all lowerings and checks passed; some lowerings were not compiled (see the summary)")
    else:
        print("all lowerings, compiles and checks passed")
    return 0 if ok else 1


def _write_pages(path: str, jobs, rows_of: dict) -> None:
    from tle.explore.report import kernel_page, page_paths
    for job, where in zip(jobs, page_paths(path, jobs)):
        rows = rows_of.get(job.target, [])
        built = {r.backend for r in rows if r.ok and r.compiled != "-" and not r.compiled.startswith("not compiled")}
        with open(where, "w") as f:
            f.write(kernel_page(job, rows, built))
        print(f"page of {job.kernel.__name__}: {where}")


# -- tle explore ----------------------------------------------------------------------------------------------
def cmd_explore(args) -> int:
    import torch
    from tle.explore.server import ExploreServer
    from tle.explore.session import EditError, Session
    path, name = split_target(args.target)
    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        _use_triton_interpreter(args)      # "run" launches Triton's lowering in its interpreter
    session = Session(path, name, args.size, on_gpu)
    try:
        session.load(session.text)
    except EditError as e:
        session.close()
        where = f"{path}:{e.error.line}: " if e.error.line else ""
        raise UsageError(f"{where}{e.error.message}") from None
    try:
        server = ExploreServer(session, args.port, quiet=not args.verbose)
    except OSError as e:
        session.close()
        raise UsageError(f"cannot listen on 127.0.0.1:{args.port}: {e.strerror or e}") from None
    runs = "runs on this GPU" if on_gpu else "no GPU: runs in the CPU interpreters"
    print(f"tle explore: {session.path} :: {name} ({args.size} example; {runs})")
    print(f"open {server.url}")
    print("(only this machine can connect, with the token in that URL; Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\ntle explore: stopped")
    finally:
        server.server_close()
        session.close()
    return 0


# -- entry point --------------------------------------------------------------------------------------------
COMMANDS = {
    "show": "print one lowering stage of a kernel (ir, source, or a compiler stage) at its example launch",
    "compare": "lower a kernel to every backend, compile, run and check each; end with a summary table",
    "explore": "serve a page of a kernel and what each backend made of it, lines linked; edit it and lower again",
}


def overview() -> str:
    """What `tle` and `tle --help` print: the commands, one line each."""
    width = max(map(len, COMMANDS))
    lines = ["usage: tle COMMAND [options]", "",
             "Inspect, run and compare tle kernels on their backends, at the example launch each kernel",
             "declares with @tle.example.", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {text}" for name, text in COMMANDS.items()]
    lines += ["", "`tle COMMAND --help` lists a command's options."]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tle", description="Inspect, run and compare tle kernels on their backends.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("show", help=COMMANDS["show"], description=COMMANDS["show"])
    s.add_argument("target", metavar="PATH::KERNEL")
    s.add_argument("--backend", default=None, help="triton or tilelang (default: TLE_BACKEND, else triton)")
    s.add_argument("--stage", default=None,
                   help="ir, source (default), or a backend stage: triton ttir/ttgir/llir/ptx, tilelang cuda/ptx")
    s.add_argument("--size", default="small", choices=("small", "large"))
    s.set_defaults(func=cmd_show)
    c = sub.add_parser("compare", help=COMMANDS["compare"], description=COMMANDS["compare"])
    c.add_argument("targets", nargs="+", metavar="PATH::KERNEL")
    c.add_argument("--size", default=None, choices=("small", "large"),
                   help="example size (default: small on CPU, large on a GPU)")
    c.add_argument("-v", "--verbose", action="store_true",
                   help="also print the tile IR, every generated source, the memory accesses and the run lines")
    c.add_argument("--side-by-side", action="store_true",
                   help="as --verbose, with the generated sources in columns when the terminal is wide")
    c.add_argument("--no-run", action="store_true", help="lower and show only; compile and run nothing")
    c.add_argument("--html", metavar="FILE", default=None,
                   help="also write a page per kernel: its source beside the IR, each backend's source and the "
                        "stages compiled here, lines linked (one kernel: FILE; several: FILE's stem.KERNEL.html)")
    c.set_defaults(func=cmd_compare)
    e = sub.add_parser("explore", help=COMMANDS["explore"], description=COMMANDS["explore"])
    e.add_argument("target", metavar="PATH::KERNEL")
    e.add_argument("--size", default="small", choices=("small", "large"),
                   help="the example launch the page lowers, checks and times (default: small)")
    e.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)")
    e.add_argument("-v", "--verbose", action="store_true", help="print each request and every refusal")
    e.set_defaults(func=cmd_explore)
    return p


def main(argv=None) -> int:
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        if not argv or argv[0] in ("-h", "--help"):
            print(overview())
            return 0
        args = _parser().parse_args(argv)
        args.argv = argv
        return args.func(args)
    except UsageError as e:
        print(f"tle: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:              # `tle ... | head`: the reader has gone, so stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
