"""tle-bench --host-cost: what one call of an operator (its forward and its backward) costs the host, with the GPU
idle, beside the same call on the operator's peers (eager torch, torch.compile, Liger).

    tle-bench --host-cost [--operator NAME ...|--all] [--backends triton,tilelang] [--calls 200] [--rounds 5]
                          [--breakdown] [--out DIR]

At each operator's smallest shape (its BenchSpec.dry_shapes[0]: tens to thousands of elements, so that the GPU
finishes each kernel long before the host has launched the next), every implementation runs forward and backward
`--calls` times back to back after ten untimed calls, with one device synchronization after the last: the wall
time per call is what the host spends (Python, dispatch, autograd, launches). That is one round; `--rounds` rounds
time the implementations of an operator in turn, and the median is kept (a host's speed drifts by tens of
percent over a run: one round per implementation compares moments, not implementations). Beside it, the same
call's GPU time (triton.testing.do_bench): where the host's time is the larger, the GPU waited on the host and the
figure is the host's cost. Nothing is checked here (tle-bench's other modes check every implementation at these
operators). Writes <out>/host_cost.json and host_cost.md (keeping its "## Notes"); `--device cpu` is a dry run
(a CPU's wall time, no GPU column).

--breakdown adds, for tle's rows, how many kernels one call launches and the host time of the same call with the
backends' launches skipped (tle.jit still binds, keys and looks up each kernel; Triton's or TileLang's own launch is
not called): what the operator layer costs, and by difference what the launches cost. The outputs of such calls
are never written, which only the timing sees."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch

from tle.benchmark import page
from tle.benchmark.dry_run import restart_in_triton_interpreter
from tle.benchmark.measure import Options, as_tuple, implementations, input_grads, make_upstream, prepared, shape_label
from tle.benchmark.provenance import observation
from tle.benchmark.timing import gpu_ms, synchronize
from tle.lowering.backend import Compiled
from tle.oplib.backend import KERNEL_BACKENDS, OP_BACKENDS

NAME = "host_cost"
WARM_CALLS = 10


@dataclass
class Cell:
    op: str
    shape: str
    impl: str
    kind: str                       # as tle-bench's rows: "anchor", "compile", "peer", "tle"
    status: str = "ok"              # ok, skip (not installed, lacks the case), error
    host_us: float | None = None    # wall time per forward-and-backward call, calls back to back
    gpu_us: float | None = None     # the same call's time on the GPU (do_bench), where there is one
    launches: int | None = None     # --breakdown, tle's rows: kernels one call launches
    no_launch_us: float | None = None   # --breakdown: host_us with the backends' launches skipped
    rounds_us: list | None = None   # host_us of each round (host_us is their median)
    note: str = ""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tle-bench --host-cost", description=__doc__.splitlines()[0])
    p.add_argument("--host-cost", action="store_true", required=True)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--operator", action="append", default=[], metavar="NAME")
    which.add_argument("--all", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--backends", default=",".join(KERNEL_BACKENDS))
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    p.add_argument("--calls", type=int, default=200, help="timed calls per implementation and round (default 200)")
    p.add_argument("--rounds", type=int, default=5,
                   help="rounds timing every implementation in turn (default 5; the median is kept)")
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--breakdown", action="store_true",
                   help="tle's rows: launches a call, and the host time with the backends' launches skipped")
    p.add_argument("--out", default=None, help="default docs/benchmark on a GPU; on the CPU nothing unless given")
    return p


def parse_args(argv, operators: dict) -> argparse.Namespace:
    p = parser()
    a = p.parse_args(argv)
    benched = sorted(n for n, op in operators.items() if op.bench is not None and op.bench.dry_shapes)
    for name in a.operator:
        if name not in benched:
            p.error(f"unknown operator {name!r}, or one without a small shape (operators: {', '.join(benched)})")
    a.operators = benched if a.all else list(dict.fromkeys(a.operator))
    a.backend_list = [b.strip() for b in a.backends.split(",") if b.strip()]
    for b in a.backend_list:
        if b not in OP_BACKENDS:
            p.error(f"unknown backend {b!r} in --backends (backends: {', '.join(OP_BACKENDS)})")
    if a.calls < 1:
        p.error(f"--calls {a.calls}: at least one timed call")
    if a.rounds < 1:
        p.error(f"--rounds {a.rounds}: at least one round")
    a.torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    a.torch_device = torch.device(a.device)
    return a


def host_us(call, calls: int, device) -> float:
    for _ in range(WARM_CALLS):
        call()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    synchronize(device)
    return (time.perf_counter() - start) / calls * 1e6


def _compiled_kinds(cls=Compiled):
    for sub in cls.__subclasses__():
        yield sub
        yield from _compiled_kinds(sub)


@contextmanager
def launches_counted(skip: bool = False):
    """Counts the launches of every backend's compiled kernels (the list holds the count); skip: make none. The
    backends loaded when it is entered are the ones counted."""
    count = [0]
    saved = {k: k.__dict__["launch"] for k in _compiled_kinds() if "launch" in k.__dict__}

    def wrap(launch):
        def counted(self, grid, args):
            count[0] += 1
            if not skip:
                launch(self, grid, args)
        return counted
    try:
        for k, launch in saved.items():
            k.launch = wrap(launch)
        yield count
    finally:
        for k, launch in saved.items():
            k.launch = launch


def operator_cells(op, args) -> list[Cell]:
    """Each implementation's cell at the operator's smallest shape: every implementation timed once per round, in
    turn, so that a drift of the host's speed (noisy neighbours, clocks) touches all alike; the median of the
    rounds is kept."""
    device, dtype = args.torch_device, args.torch_dtype
    shape = tuple(op.bench.dry_shapes[0])
    label = shape_label(shape, dtype)
    sample = op.bench.make(shape, dtype, device)
    keys = op.grad_keys(sample)
    s, leaves = prepared(sample, keys)
    options = Options(backends=tuple(args.backend_list), peers=not args.no_peers, compile=not args.no_compile)
    cells, timed = [], []
    for name, kind, factory in implementations(op, s, options):
        cell = Cell(op.name, label, name, kind)
        cells.append(cell)
        with _cell_errors(cell):
            fn = factory()
            if fn is None:
                cell.status, cell.note = "skip", "lacks this case"
                continue
            upstream = make_upstream(as_tuple(fn()))

            def call(fn=fn, upstream=upstream):
                outs = as_tuple(fn())
                if leaves:
                    input_grads(outs, leaves, upstream)
            timed.append((cell, call, [], []))      # with the host times of its rounds, and without launches
    for _ in range(args.rounds):
        for cell, call, host, no_launch in timed:
            if cell.status != "ok":
                continue
            with _cell_errors(cell):
                host.append(host_us(call, args.calls, device))
                if args.breakdown and cell.kind == "tle":
                    with launches_counted(skip=True):
                        no_launch.append(host_us(call, args.calls, device))
    for cell, call, host, no_launch in timed:
        if cell.status != "ok":
            continue
        with _cell_errors(cell):
            cell.rounds_us = [round(t, 1) for t in host]
            cell.host_us = statistics.median(host)
            if device.type == "cuda":
                cell.gpu_us = gpu_ms(call) * 1e3
            if no_launch:
                synchronize(device)
                with launches_counted() as count:
                    call()
                synchronize(device)
                cell.launches = count[0]
                cell.no_launch_us = statistics.median(no_launch)
    return cells


@contextmanager
def _cell_errors(cell: Cell):
    """A failing implementation marks its cell (skip where its package is missing), not the end of the run."""
    try:
        yield
    except ImportError as e:
        cell.status, cell.note = "skip", f"not installed ({str(e).splitlines()[0][:120]})"
    except Exception as e:  # noqa: BLE001 - a cell, not the end of the run
        cell.status, cell.note = "error", f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"


def table(cells: list[Cell]) -> list[str]:
    impls = list(dict.fromkeys(c.impl for c in cells))
    ops = list(dict.fromkeys((c.op, c.shape) for c in cells))
    at = {(c.op, c.impl): c for c in cells}
    lines = ["| operator (shape) | " + " | ".join(impls) + " |", "|---|" + "---:|" * len(impls)]
    for op, shape in ops:
        row = []
        for impl in impls:
            c = at.get((op, impl))
            if c is None or c.status != "ok":
                row.append("" if c is None else c.status)
            else:
                gpu = f" ({c.gpu_us:.0f})" if c.gpu_us is not None else ""
                row.append(f"{c.host_us:.0f}{gpu}")
        lines.append(f"| {op} ({shape}) | " + " | ".join(row) + " |")
    return lines


def breakdown_table(cells: list[Cell]) -> list[str]:
    """tle's rows with --breakdown: host us a call, without the launches, the launches and their cost each."""
    rows = [c for c in cells if c.status == "ok" and c.no_launch_us is not None]
    if not rows:
        return []
    lines = ["| operator (shape) | implementation | host us | without the launches | launches | us a launch |",
             "|---|---|---:|---:|---:|---:|"]
    for c in rows:
        each = f"{(c.host_us - c.no_launch_us) / c.launches:.1f}" if c.launches else ""
        lines.append(f"| {c.op} ({c.shape}) | {c.impl} | {c.host_us:.0f} | {c.no_launch_us:.0f} | {c.launches} | "
                     f"{each} |")
    return lines


def ratio_table(cells: list[Cell], peer: str = "liger") -> list[str]:
    """tle's rows over `peer`'s host cost, where both ran: the Part of the page a target reads."""
    at = {(c.op, c.impl): c for c in cells if c.status == "ok"}
    rows = [(c, at[(c.op, peer)]) for c in cells if c.kind == "tle" and c.status == "ok" and (c.op, peer) in at]
    if not rows:
        return []
    lines = [f"| operator (shape) | implementation | host us | {peer} host us | ratio |", "|---|---|---:|---:|---:|"]
    for c, p in rows:
        lines.append(f"| {c.op} ({c.shape}) | {c.impl} | {c.host_us:.0f} | {p.host_us:.0f} | "
                     f"{c.host_us / p.host_us:.2f}x |")
    return lines


def render(cells: list[Cell], command: str, obs: dict, calls: int, rounds: int, notes: str | None) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in obs["versions"].items())
    skipped = [f"- {c.op} {c.impl}: {c.status}: {c.note}" for c in cells if c.status != "ok"]
    out = [f"# {NAME}: the host's cost of one forward-and-backward call", "",
           f"Written by `{command}`. A rerun rewrites this page and keeps the section \"Notes\".", "",
           f"Microseconds per call of the forward and the backward, {calls} calls back to back after "
           f"{WARM_CALLS} untimed, one synchronization after the last, at each operator's smallest shape: the "
           f"median of {rounds} round{'s' if rounds != 1 else ''} timing an operator's implementations in turn. In "
           "parentheses the same call's GPU time (do_bench median): where it is the smaller, the GPU waited on "
           "the host and the first figure is the host's cost.", "",
           "## Latest observation", "", f"- date {obs['date']}, commit {obs['commit']}, GPU {obs['gpu']}",
           f"- versions: {versions}", ""] + table(cells) + [""] + skipped
    ratios = ratio_table(cells)
    if ratios:
        out += ["", "### tle over Liger", "", "tle's host cost a call over Liger's, where Liger has the operator "
                "(the medians above; below 1.00x tle costs the host less).", ""] + ratios
    parts = breakdown_table(cells)
    if parts:
        out += ["", "### tle's calls without the backends' launches (--breakdown)", "",
                "The same calls with Triton's or TileLang's launch skipped (tle.jit still binds and looks up each "
                "kernel): the operator layer's host cost; the difference over the launches is each launch's.", ""]
        out += parts
    out += ["", notes.rstrip() if notes else page.NOTES_HEADING + "\n\n<!-- Written by people: analysis of the "
            "figures above. tle-bench keeps this section when it rewrites the page. -->"]
    return "\n".join(out) + "\n"


def main(argv, operators: dict | None = None, from_command_line: bool = False) -> int:
    if operators is None:
        from tle.ops import OPERATORS as operators
    args = parse_args(argv, operators)
    device = args.torch_device
    if device.type == "cpu" and from_command_line and "triton" in args.backend_list:
        restart_in_triton_interpreter(argv)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("tle-bench: no CUDA device here (--device cpu is a dry run)", file=sys.stderr)
        return 2
    cells = []
    for name in args.operators:
        print(f"tle-bench --host-cost: {name} ...", file=sys.stderr, flush=True)
        cells += operator_cells(operators[name], args)
    command = "tle-bench " + shlex.join(argv)
    obs = observation(device)
    print("\n".join(table(cells)))
    print("\n".join([""] + ratio_table(cells)))
    if args.breakdown:
        print("\n".join([""] + breakdown_table(cells)))
    out_dir = args.out if args.out is not None else (os.path.join("docs", "benchmark") if device.type == "cuda"
                                                     else None)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        md = os.path.join(out_dir, NAME + ".md")
        notes = page.kept_notes(open(md).read()) if os.path.exists(md) else None
        with open(os.path.join(out_dir, NAME + ".json"), "w") as f:
            json.dump({**obs, "calls": args.calls, "rounds": args.rounds, "cells": [asdict(c) for c in cells]}, f,
                      indent=1)
        with open(md, "w") as f:
            f.write(render(cells, command, obs, args.calls, args.rounds, notes))
        print(f"\nwrote {out_dir}/{NAME}.{{json,md}}")
    return 1 if any(c.kind == "tle" and c.status == "error" for c in cells) else 0
