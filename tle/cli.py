"""The `tle` command: read what each backend made of a kernel, run both, check them, time them.

    tle show    kernels/matmul.py::matmul_kernel --backend triton --stage ttgir
    tle compare kernels/softmax.py::softmax_kernel [more PATH::KERNEL ...] [--side-by-side]

Every kernel here is driven by its example launch (`@tle.example`), so no shape flags are needed.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import sys

STAGES_ALWAYS = ("ir", "source")


class UsageError(Exception):
    """Bad input from the command line: one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):          # argparse would print the usage block too; we keep it to one line
        raise UsageError(message)


# -- helpers shared with tle.bench and the tests ----------------------------------------------------------
def meta_copy(x):
    """A tensor's shape, strides and dtype on the 'meta' device (lowering needs nothing more)."""
    import torch
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return x


def poison(launch) -> None:
    """Fill the outputs with NaN (integers: their minimum) so that a kernel that writes nothing fails; those
    the kernel adds into (`launch.accumulates`) start at zero, and a kernel that adds nothing fails the check."""
    import torch
    for name, t in launch.outputs.items():
        if name in launch.accumulates:
            t.zero_()
        elif t.is_floating_point():
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.fill_(True)
        else:
            t.fill_(torch.iinfo(t.dtype).min)


def max_errors(launch) -> dict[str, float]:
    """Max abs error per output against the reference (NaN when the output holds NaN)."""
    ref = launch.reference()
    out = {}
    for name, t in launch.outputs.items():
        d = t.double() - ref[name].to(t.device).double()
        out[name] = d.abs().max().item() if d.numel() else 0.0
    return out


def check(launch) -> tuple[bool, str]:
    """(passed, a one-line summary: max error per output, or the first line of the mismatch)."""
    from tle.examples import compare_outputs
    errs = max_errors(launch)
    summary = ", ".join(f"{n} {e:.3g}" for n, e in errs.items())
    try:
        compare_outputs(launch)
    except AssertionError as e:
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "mismatch")
        return False, f"max error {summary} ({first})"
    return True, f"max error {summary}"


def rate(launch, ms: float) -> str:
    if launch.flops:
        return f"{launch.flops / (ms * 1e-3) / 1e12:.1f} TFLOP/s"
    if launch.bytes:
        return f"{launch.bytes / (ms * 1e-3) / 1e12:.2f} TB/s"
    return ""


# -- finding a kernel ---------------------------------------------------------------------------------------
def load_kernel(target: str):
    """'PATH::KERNEL' -> the tle.Kernel named KERNEL in the Python file PATH."""
    import tle
    path, sep, name = target.partition("::")
    if not sep or not path or not name:
        raise UsageError(f"expected PATH::KERNEL (e.g. kernels/softmax.py::softmax_kernel), got '{target}'")
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}")
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


def example_meta(kernel, size: str):
    """The example launch with its tensors on 'meta': a large size costs no memory and no time."""
    try:
        launch = kernel.example("meta", size)
    except Exception:                    # an example that needs real data: build it on the CPU, then copy
        launch = kernel.example("cpu", size)
    launch.args = tuple(meta_copy(a) for a in launch.args)
    return launch


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
    from tle.errors import BackendUnavailable, LaunchError, LoweringError
    lowered, errors = {}, {}
    for b in backends:
        try:
            lowered[b] = kernel.lower(*launch.args, grid=launch.grid, backend=b, **launch.kwargs)
        except (LoweringError, BackendUnavailable, LaunchError) as e:
            errors[b] = f"{type(e).__name__}: {e}"
        except Exception as e:           # a bug in a backend: report it and go on with the next one
            errors[b] = f"internal error in the {b} lowering: {type(e).__name__}: {e}"
    return lowered, errors


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def _run_one(kernel, launch, backend: str, time_it: bool) -> tuple[bool, str]:
    """Poison the outputs, launch, check against the reference, and (on a GPU) time with do_bench."""
    import torch
    run = lambda: kernel[launch.grid](*launch.args, backend=backend, **launch.kwargs)  # noqa: E731
    poison(launch)
    try:
        run()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Exception as e:
        return False, f"FAIL  launch failed: {_first_line(e)}"
    ok, summary = check(launch)
    line = f"{'PASS' if ok else 'FAIL'}  {summary}"
    if ok and time_it:
        from triton.testing import do_bench
        ms = do_bench(run, return_mode="median")
        line += f"  {ms:.4f} ms  {rate(launch, ms)}"
    return ok, line


def compare_one(target: str, args, on_gpu: bool) -> bool:
    """Print one kernel's IR, lowerings, notes and accesses; run and check each backend. True if all good."""
    from tle.lowering.backend import backend_names
    kernel = load_kernel(target)
    size = args.size or ("large" if on_gpu else "small")
    launch = example_meta(kernel, size) if args.no_run else kernel.example("cuda" if on_gpu else "cpu", size)
    _heading(f"{target}  [{launch.label or size}]", "#")
    backends = backend_names()
    lowered, errors = _lower_all(kernel, launch, backends)

    if lowered:
        _heading("tile IR")
        print(next(iter(lowered.values())).ir)
        for b, lw in lowered.items():
            spec = getattr(lw.kernel, "specialized", None)
            if spec:
                print(f"({b} compiles these int arguments in as constants: "
                      f"{', '.join(f'{k}={v}' for k, v in spec.items())})")
        _print_sources(lowered, args.side_by_side)
    for b, e in errors.items():
        _heading(f"{b} lowering FAILED", "-")
        print(e)
    _heading("notes", "-")
    for b, lw in lowered.items():
        print(f"{b}: " + ("none" if not lw.notes else ""))
        for n in lw.notes:
            print(f"  - {n}")
    if lowered:
        _print_accesses(lowered)

    ok = not errors
    if args.no_run:
        return ok
    _heading(f"run: {'GPU' if on_gpu else 'CPU (no CUDA device)'}, size {size}", "-")
    for b in backends:
        if b not in lowered:
            print(f"{b:10s} not run: lowering failed")
        elif not on_gpu and b == "triton" and launch.no_interpreter:
            print(f"{b:10s} not run: {launch.no_interpreter}")
            ok &= _compile_only(b, lowered[b])
        elif on_gpu or b == "triton":
            good, line = _run_one(kernel, launch, b, time_it=on_gpu)
            print(f"{b:10s} {line}" + ("" if on_gpu else "  (Triton interpreter, CPU)"))
            ok &= good
        else:
            ok &= _compile_only(b, lowered[b])
            if b == "tilelang":
                good, line = _interpret_one(kernel, launch)
                print(f"{b:10s} {line}  (interpreter of TileLang programs, CPU)")
                ok &= good
    return ok


def _interpret_one(kernel, launch) -> tuple[bool, str]:
    """Without a GPU: run the TileLang lowering through the CPU interpreter of TileLang programs (a test
    oracle: what the generated program computes) and check it against the reference."""
    poison(launch)
    try:
        report = kernel.interpret_tilelang(launch.grid, *launch.args, **launch.kwargs)
    except Exception as e:
        return False, f"FAIL  {_first_line(e)}"
    ok, summary = check(launch)
    zeroed = sum(report.predicated_reads.values())
    extra = f"; {zeroed} reads past a tensor read zero, as TileLang predicates them" if zeroed else ""
    return ok, f"{'PASS' if ok else 'FAIL'}  {summary}{extra}"


def _compile_only(b: str, lowered) -> bool:
    """Without a GPU: compile down to the last stage (ptx) to show it builds, and say it did not run."""
    last = lowered.stages[-1] if lowered.stages else None
    if last is not None:
        try:
            lowered.stage(last)
        except Exception as e:
            print(f"{b:10s} FAIL  compiling to {last}: {type(e).__name__}: {e}")
            return False
    print(f"{b:10s} compiled{f' to {last}' if last else ''}, not run on a GPU: none here")
    return True


def _interpreted_triton() -> bool:
    """Whether Triton was imported in interpreter mode: it decides at import time, for its own @jit
    helpers (tl.sum, tl.max, ...) too, so setting TRITON_INTERPRET later is not enough."""
    if "triton" not in sys.modules:
        return True                      # not imported yet: the environment variable will do
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    return isinstance(tl.sum, InterpretedFunction)


def cmd_compare(args) -> int:
    import torch
    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        # Triton runs the kernels on CPU tensors in its interpreter; set before any kernel is lowered.
        os.environ["TRITON_INTERPRET"] = "1"
        if not args.no_run and not _interpreted_triton():
            # `import tle` has already imported Triton in compiled mode: start again with the variable set
            sys.stdout.flush()
            os.execv(sys.executable, [sys.executable, "-m", "tle.cli"] + args.argv)
    for t in args.targets:                        # bad targets are usage errors before any work starts
        load_kernel(t)
    ok = True
    for t in args.targets:
        ok &= compare_one(t, args, on_gpu)
    print()
    print("all lowerings and checks passed" if ok else "some lowerings or checks FAILED (see above)")
    return 0 if ok else 1


# -- entry point --------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tle", description="Inspect, run and compare tle kernels on their backends.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("show", help="print one lowering stage of a kernel, at its example launch")
    s.add_argument("target", metavar="PATH::KERNEL")
    s.add_argument("--backend", default=None, help="triton or tilelang (default: TLE_BACKEND, else triton)")
    s.add_argument("--stage", default=None,
                   help="ir, source (default), or a backend stage: triton ttir/ttgir/llir/ptx, tilelang cuda/ptx")
    s.add_argument("--size", default="small", choices=("small", "large"))
    s.set_defaults(func=cmd_show)
    c = sub.add_parser("compare", help="lower to every backend, show both, run and check them")
    c.add_argument("targets", nargs="+", metavar="PATH::KERNEL")
    c.add_argument("--size", default=None, choices=("small", "large"),
                   help="example size (default: small on CPU, large on a GPU)")
    c.add_argument("--side-by-side", action="store_true", help="sources in columns when the terminal is wide")
    c.add_argument("--no-run", action="store_true", help="lower and show only; run nothing")
    c.set_defaults(func=cmd_compare)
    return p


def main(argv=None) -> int:
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        args = _parser().parse_args(argv)
        args.argv = argv
        return args.func(args)
    except UsageError as e:
        print(f"tle: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
