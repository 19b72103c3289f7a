"""tle-bench: the operators of tle.ops timed beside torch, torch.compile and their peers, on a GPU.

    tle-bench --operator rms_norm [--operator ...|--all] [--device cuda] [--backends triton,tilelang]
              [--shapes 32768x8192,...|--sweep] [--dtype bf16] [--mode fwd,bwd] [--out docs/benchmark]
              [--no-peers] [--warm N]
    tle-bench --list
    tle-bench --model llama-block [--layers 2] [--seq 4096] [--batch 2] ...   (tle/benchmark/model_step.py)
    tle-bench --host-cost --operator rms_norm [...|--all]                      (tle/benchmark/host_cost.py)

For each operator, shape and mode: every implementation is checked against the eager torch code evaluated
in fp32, then timed with triton.testing.do_bench. Prints a table per operator and mode (TB/s, or TFLOP/s
for an operator whose BenchSpec counts flops, and the ratio to torch); merges the JSON records into
<out>/<op>.json, plots <out>/<op>-<mode>.png and writes <out>/<op>.md (keeping its "## Notes" section).
--sweep measures the shapes of the operator's sweep (BenchSpec.sweep: one size taken over several values,
e.g. the sequence length T); the page gives them a table and a plot, <out>/<op>-<mode>-<axis>.png, of ms
and the throughput against that size.
Exits 1 when a tle backend failed its check or raised, 2 on a usage error or without CUDA, 3 when nothing
failed but a tle backend asked for cannot run on this device (its cells say "unavailable"). `--device cpu`
is a dry run of the loop with a wall-clock timer, for tests: never a measurement (it writes files only
with --out). It runs each operator's small dry-run shapes (BenchSpec.dry_shapes) unless --shapes says
otherwise, and Triton in its interpreter: started as a program without TRITON_INTERPRET, it starts again
with TRITON_INTERPRET=1 (Triton reads it at import). TileLang kernels run on CUDA only: the default backends
leave it out there (said on stderr); named in --backends, its cells say "unavailable" and the exit code is 3.
torch.compile compiles once per shape and input kind (forward; forward with gradients), the bulk of a run's
time: --no-compile skips it. Where the tree has no .git (a copy on a GPU machine), set
TLE_COMMIT."""
from __future__ import annotations

import argparse
import os
import re
import shlex
import sys

import torch

from tle.benchmark import page, plot, records, tables, warm
from tle.benchmark.dry_run import restart_in_triton_interpreter
from tle.benchmark.measure import MODES, TBS, Options, bench_operator, metric_of, shape_label
from tle.benchmark.progress import Progress
from tle.benchmark.provenance import observation
from tle.benchmark.timing import timer_for
from tle.oplib.backend import KERNEL_BACKENDS, OP_BACKENDS

DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "half": torch.float16, "fp32": torch.float32, "float32": torch.float32, "float": torch.float32}
DEFAULT_BACKENDS = ",".join(KERNEL_BACKENDS)
DEFAULT_MODES = "fwd,bwd"
DEFAULT_OUT = os.path.join("docs", "benchmark")
NO_CUDA = ("tle-bench: no CUDA device here; benchmarks run on a GPU machine "
           "(see README: source .device/setup.sh && tle-bench ...)")
EXIT_UNAVAILABLE = 3         # nothing failed, but a tle backend asked for cannot run on this device
_SIZE = re.compile(r"^(\d+|[A-Za-z_][A-Za-z0-9_]*)$")


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tle-bench", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    which = p.add_mutually_exclusive_group()
    which.add_argument("--operator", action="append", default=[], metavar="NAME",
                       help="an operator of tle.ops (repeat for more)")
    which.add_argument("--all", action="store_true", help="every operator with a benchmark spec")
    p.add_argument("--list", action="store_true", help="list the operators and their default shapes, and exit")
    p.add_argument("--device", default="cuda",
                   help="cuda (default), cuda:N; cpu is a wall-clock dry run for tests, not a measurement")
    p.add_argument("--backends", default=None,
                   help=f"tle backends, comma-separated, of {', '.join(OP_BACKENDS)} (default {DEFAULT_BACKENDS}, "
                        "with --device cpu those of them that run there); torch here is the tle op's torch "
                        "backend, shown as 'tle torch'; the eager torch anchor is always timed")
    p.add_argument("--shapes", default=None,
                   help="comma-separated shapes, sizes joined by x (e.g. 32768x8192,4096x4096); "
                        "default: the operator's own")
    p.add_argument("--sweep", action="store_true",
                   help="the shapes of the operator's sweep (BenchSpec.sweep), for the plot against its size")
    p.add_argument("--dtype", default="bf16", help="bf16 (default), fp16 or fp32")
    p.add_argument("--mode", default=DEFAULT_MODES,
                   help=f"comma-separated, of {', '.join(MODES)} (default {DEFAULT_MODES})")
    p.add_argument("--out", default=None,
                   help=f"where <op>.json, <op>.md and the plots go (default {DEFAULT_OUT}; with --device cpu, "
                        "nothing is written unless --out is given)")
    p.add_argument("--no-peers", action="store_true", help="skip the peers (liger, ...); torch.compile still runs")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (its compiles take the most time)")
    p.add_argument("--warm", type=int, default=0, metavar="N",
                   help="first compile the tle kernels the run times in N processes at once (TileLang kernels "
                        "take seconds to a minute each; the timed run reads them from the on-disk caches)")
    return p


def parse_shape(text: str) -> tuple:
    """"32768x8192" -> (32768, 8192); a part that is a word stays a string ("32768x8192xmean": a reduction). An
    x splits only beside a digit, so that a word may hold one ("1048576x256x65536x32xmax")."""
    parts = re.split(r"(?<=\d)x|x(?=\d)", text)
    if not all(_SIZE.match(d) for d in parts) or any(d.isdigit() and int(d) == 0 for d in parts) \
            or not parts[0].isdigit():
        raise ValueError(text)
    return tuple(int(d) if d.isdigit() else d for d in parts)


def parse_args(argv, operators: dict) -> argparse.Namespace:
    p = parser()
    a = p.parse_args(argv)
    if a.list:
        return a
    benched = sorted(n for n, op in operators.items() if op.bench is not None)
    if a.all:
        a.operators = benched
    elif a.operator:
        for name in a.operator:
            if name not in operators:
                p.error(f"unknown operator {name!r} (operators: {', '.join(benched) or 'none'})")
            if operators[name].bench is None:
                p.error(f"operator {name!r} has no benchmark spec (BenchSpec)")
        a.operators = list(dict.fromkeys(a.operator))
    else:
        p.error("name an operator (--operator NAME) or --all (--list shows them)")
    a.backends_given = a.backends is not None
    a.backend_list = _split(a.backends if a.backends_given else DEFAULT_BACKENDS)
    for b in a.backend_list:
        if b not in OP_BACKENDS:
            p.error(f"unknown backend {b!r} in --backends (backends: {', '.join(OP_BACKENDS)})")
    a.backend_list = list(dict.fromkeys(a.backend_list))
    if a.warm < 0:
        p.error(f"--warm {a.warm}: the number of processes that compile first (0: none)")
    if a.dtype not in DTYPES:
        p.error(f"unknown dtype {a.dtype!r} (dtypes: bf16, fp16, fp32)")
    a.torch_dtype = DTYPES[a.dtype]
    a.modes = _split(a.mode)
    for m in a.modes:
        if m not in MODES:
            p.error(f"unknown mode {m!r} in --mode (modes: {', '.join(MODES)})")
    if not a.modes:
        p.error("--mode names no mode (modes: fwd, bwd, full)")
    a.modes = [m for m in MODES if m in a.modes]
    a.shape_list = None
    a.skipped = []
    if a.sweep:
        if a.shapes is not None:
            p.error("--sweep measures the operator's own sweep: not with --shapes")
        for name in list(a.operators):
            if operators[name].bench.sweep is None:
                why = f"{name} has no sweep (BenchSpec.sweep)"
                if not a.all:
                    p.error(why)
                a.operators.remove(name)                # --all: the operators that have one
                a.skipped.append(why)
    if a.shapes is not None:
        a.shape_list = []
        for text in _split(a.shapes):
            try:
                a.shape_list.append(parse_shape(text))
            except ValueError:
                p.error(f"malformed shape {text!r} in --shapes: positive sizes joined by x, e.g. 32768x8192 "
                        f"(a part may be a word where the operator's shapes have one, e.g. 32768x8192xmean)")
        if not a.shape_list:
            p.error("--shapes names no shape")
        for name in list(a.operators):
            spec = operators[name].bench
            ranks = sorted({len(s) for s in spec.shapes})
            for s in a.shape_list:
                if ranks and len(s) not in ranks:
                    why = (f"shape {'x'.join(map(str, s))!r} has {len(s)} parts; {name} takes "
                           f"{' or '.join(map(str, ranks))}{f' ({spec.shape_help})' if spec.shape_help else ''}")
                    if not a.all:
                        p.error(why)
                    a.operators.remove(name)            # --all: the operators the shapes fit
                    a.skipped.append(why)
                    break
    try:
        a.torch_device = torch.device(a.device)
    except (RuntimeError, ValueError):
        p.error(f"unknown device {a.device!r} (cuda, cuda:N, or cpu for a dry run)")
    if a.torch_device.type not in ("cuda", "cpu"):
        p.error(f"unknown device {a.device!r} (cuda, cuda:N, or cpu for a dry run)")
    return a


def runnable_here(backends: list[str], device: torch.device) -> list[str]:
    """The default backends that can launch on `device` (a dry run on the CPU: Triton in its interpreter, not
    TileLang); each one left out is said, with why. Backends named with --backends are all run: one that cannot
    run is then an "unavailable" row and exit code 3."""
    from tle import select
    kept = []
    for name in backends:
        why = None if name == "torch" else select.launch_unavailable_reason(select.resolve(name), device,
                                                                              select.interpret_setting())
        if why is None:
            kept.append(name)
        else:
            print(f"tle-bench: --device {device.type}: backend {name} left out ({why}); name it in --backends to "
                  f"see its cells", file=sys.stderr)
    return kept


def list_operators(operators: dict, out=None) -> None:
    out = out or sys.stdout
    for name in sorted(operators):
        op = operators[name]
        spec = op.bench
        if spec is None:
            print(f"{name}  (no benchmark spec)", file=out)
            continue
        shapes = ", ".join("x".join(map(str, s)) for s in spec.shapes)
        what = "forward only" if op.forward_only else "forward and backward"
        peers = ", ".join(repr(n) if "," in n else n for n in ["torch", "torch.compile", *spec.peers])
        print(f"{name}  {spec.shape_help or 'shapes'}: {shapes}  [{what}; beside {peers}]", file=out)


def print_tables(name: str, cases: list, observation_: dict, order: list[str], out=None, metric: str = TBS) -> None:
    out = out or sys.stdout
    run_records = records.from_cases(cases, observation_)
    for mode in MODES:
        if not any(c.mode == mode for c in cases):
            continue
        lines, notes = tables.table(mode, run_records, cases, observation_, metric, order)
        print(f"\n## {name} {mode}: {metric} (ratio to torch)\n", file=out)
        if lines:
            print("\n".join(lines), file=out)
        for n in notes:
            print(f"- {n}", file=out)
    out.flush()


def write_sweep_plots(out_dir: str, op, records_: list[dict], dtype, metric: str) -> dict:
    """The plots against the operator's sweep size of the records in `dtype`, by mode ({} without a sweep)."""
    sweep = op.bench.sweep
    if sweep is None:
        return {}
    labels = [shape_label(s, dtype) for s in sweep.shapes()]
    names = {mode: page.sweep_plot_name(op.name, mode, sweep) for mode in MODES}
    return {mode: name for mode, name in names.items()
            if plot.write_sweep(os.path.join(out_dir, name), op.name, mode, records_, labels, sweep, metric)}


def main(argv=None, operators: dict | None = None) -> int:
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a == "--model" or a.startswith("--model=") for a in argv):       # a whole model's step: its own run
        from tle.benchmark import model_step
        return model_step.main(argv, from_command_line)
    if operators is None:
        from tle.ops import OPERATORS as operators
    if "--host-cost" in argv:                  # the host's cost of a call: its own run and page
        from tle.benchmark import host_cost
        return host_cost.main(argv, operators, from_command_line)
    args = parse_args(argv, operators)
    if args.list:
        list_operators(operators)
        return 0
    device = args.torch_device
    if device.type == "cpu" and from_command_line and "triton" in args.backend_list:
        restart_in_triton_interpreter(argv)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr)
        return 2
    if device.type == "cpu" and not args.backends_given:
        args.backend_list = runnable_here(args.backend_list, device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    timer = timer_for(device)
    options = Options(backends=tuple(args.backend_list), peers=not args.no_peers, compile=not args.no_compile)
    command = "tle-bench " + shlex.join(argv)
    obs = observation(device)
    plans = []
    for why in getattr(args, "skipped", []):
        print(f"tle-bench: skipped: {why}", file=sys.stderr)
    for name in args.operators:
        op = operators[name]
        if args.torch_dtype not in op.dtypes:
            print(f"tle-bench: {name} does not take {args.dtype}; skipped", file=sys.stderr)
            continue
        if args.sweep:
            shapes = op.bench.sweep.shapes()
        elif args.shape_list:
            shapes = args.shape_list
        elif device.type == "cpu" and op.bench.dry_shapes:
            shapes = [tuple(s) for s in op.bench.dry_shapes]
        else:
            shapes = [tuple(s) for s in op.bench.shapes]
        plans.append((op, shapes))
    out_dir = args.out if args.out is not None else (DEFAULT_OUT if device.type == "cuda" else None)
    for op, _ in plans if out_dir else ():
        try:                                   # a broken records file: say so before measuring, not after
            records.load(os.path.join(out_dir, op.name + ".json"))
        except ValueError as e:
            print(f"tle-bench: {e}", file=sys.stderr)
            return 2
    if out_dir and not plot.available():
        print("tle-bench: matplotlib is not installed: no plots (pip install matplotlib)", file=sys.stderr)
    if args.warm > 0:
        warm.warm(warm.tasks(plans, args.backend_list, args.torch_dtype, device, args.modes), args.warm)
    progress = Progress(sum(len(shapes) * len(args.modes) for _, shapes in plans))
    failed = False
    written = []
    unavailable = {}                           # tle backend -> why it cannot run here
    for op, shapes in plans:
        cases = bench_operator(op, shapes, args.torch_dtype, args.modes, options, timer, device, progress)
        failed |= any(c.failed for c in cases)
        failed |= any(r.kind == "tle" and r.status in ("fail", "error") for c in cases for r in c.rows)
        unavailable.update({r.impl: r.note for c in cases for r in c.rows
                            if r.kind == "tle" and r.status == "unavailable"})
        order = [shape_label(s, args.torch_dtype) for s in shapes] + \
                page.shape_labels(op, op.bench.shapes)
        progress.clear()
        metric = metric_of(op.bench)
        print_tables(op.name, cases, obs, order, metric=metric)
        if not out_dir:
            continue
        base = os.path.join(out_dir, op.name)
        merged = records.update(base + ".json", cases, obs)
        mine = [r for r in merged if r.get("op") == op.name]
        plots = {}
        for mode in MODES:
            if any(r.get("mode") == mode for r in mine) and \
                    plot.write(os.path.join(out_dir, page.plot_name(op.name, mode)), op.name, mode, mine, order,
                               metric):
                plots[mode] = page.plot_name(op.name, mode)
        sweep_plots = write_sweep_plots(out_dir, op, mine, args.torch_dtype, metric)
        page.write(base + ".md", op, command, obs, mine, cases, order, plots, sweep_plots)
        written.append(base + ".{json,md}")
    progress.close()
    if written:
        print(f"\nwrote {', '.join(written)}" + (" and plots" if plot.available() else ""))
    if device.type == "cpu":
        print("note: --device cpu is a dry run of the loop (wall-clock times), not a measurement"
              + ("" if out_dir else "; nothing written (--out DIR writes the records, page and plots)"),
              file=sys.stderr)
    for why in unavailable.values():
        print(f"tle-bench: unavailable: {why}", file=sys.stderr)
    if failed:
        return 1
    return EXIT_UNAVAILABLE if unavailable else 0


if __name__ == "__main__":
    sys.exit(main())
