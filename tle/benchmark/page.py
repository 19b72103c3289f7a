"""The markdown page of an operator, docs/benchmark/<op>.md: the command that wrote it, what the operator
supports, the error criteria of the checks, the latest observation (date, commit, GPU, versions), a table
per mode and the plots. A section under the heading "## Notes" is written by people: a rerun keeps it."""
from __future__ import annotations

import os

import torch

from tle.benchmark import check as checks
from tle.benchmark import tables
from tle.benchmark.measure import MODES, TBS, TFLOPS, grad_names, metric_of, shape_label
from tle.benchmark.provenance import SHORT_DTYPES
from tle.benchmark.timing import DESCRIPTION
from tle.oplib.backend import OP_BACKENDS

NOTES_HEADING = "## Notes"
NOTES_PLACEHOLDER = ("<!-- Written by people: analysis of the figures above. tle-bench keeps this section "
                     "when it rewrites the page. -->")
LONG_DTYPES = {v: k for k, v in SHORT_DTYPES.items()}
COUNTS = {TBS: "TB/s counts each tensor read or written once (the operator's BenchSpec.bytes; full: forward plus "
               "backward bytes); the ratio is to the torch anchor measured in the same run; the copy is a "
               "device-to-device copy of the same bytes (half read, half written), the bandwidth ceiling",
          TFLOPS: "TFLOP/s counts the operator's BenchSpec.flops (full: forward plus backward); the ratio is to the "
                  "torch anchor measured in the same run"}


def kept_notes(text: str) -> str | None:
    """The "## Notes" section of an existing page (heading included), up to the next heading of level 1 or 2."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip() == NOTES_HEADING:
            end = next((j for j in range(i + 1, len(lines))
                        if lines[j].startswith("# ") or lines[j].startswith("## ")), len(lines))
            return "\n".join(lines[i:end]).rstrip() + "\n"
    return None


def plot_name(op: str, mode: str) -> str:
    return f"{op}-{mode}.png"


def sweep_plot_name(op: str, mode: str, sweep) -> str:
    return f"{op}-{mode}-{sweep.axis}.png"


def shape_labels(op, shapes) -> list[str]:
    """The labels of `shapes` in every dtype the operator takes, as its records name them."""
    return [shape_label(tuple(s), d) for d in op.dtypes for s in shapes]


def sweep_labels(op) -> list[str]:
    """The shape labels of the operator's sweep, in every dtype it takes ([] without one)."""
    spec = op.bench
    if spec is None or spec.sweep is None:
        return []
    return shape_labels(op, spec.sweep.shapes())


def _sweep_section(op, labels: list[str], observation: dict, records: list[dict], cases: list, metric: str,
                   plots: dict | None) -> list[str]:
    """The tables and plots of the sweep, whose shapes' labels are `labels`, by mode ([] where fewer than two of
    its shapes were measured)."""
    sweep = op.bench.sweep
    records = [r for r in records if r.get("shape") in labels]
    cases = [c for c in cases if c.shape in labels]
    if len({r["shape"] for r in records} | {c.shape for c in cases}) < 2:
        return []
    held = sweep.held()
    lines = ["", f"## Against {sweep.axis}", "",
             f"Shapes {held}, {sweep.axis} from {sweep.sizes[0]} to {sweep.sizes[-1]} (`tle-bench --sweep`)."]
    for mode in MODES:
        ms, _ = tables.table(mode, records, cases, observation, "ms", labels)
        if not ms:
            continue
        rate, _ = tables.table(mode, records, cases, observation, metric, labels)
        lines += ["", f"### {mode}", "", "ms:", "", *ms]
        if rate:
            lines += ["", f"{metric} (ratio to torch):", "", *rate]
        if plots and plots.get(mode):
            lines += ["", f"![{op.name} {mode} against {sweep.axis}]({plots[mode]})"]
    return lines


def _dtype_name(d: torch.dtype) -> str:
    return SHORT_DTYPES.get(d, str(d).replace("torch.", ""))


def support_lines(op) -> list[str]:
    spec = op.bench
    out = [f"- backends: {', '.join(b + (' (the reference)' if b == 'torch' else '') for b in OP_BACKENDS)}",
           f"- dtypes: {', '.join(_dtype_name(d) for d in op.dtypes)}"]
    if op.forward_only:
        out.append(f"- forward only: {op.forward_only}")
    else:
        names = list(dict.fromkeys(grad_names(op, list(op.grad_inputs))))   # a position and its keyword: one name
        out.append(f"- forward and backward (gradients of {', '.join(names) or 'nothing'})")
    if spec is not None:
        shapes = ", ".join("x".join(map(str, s)) for s in spec.shapes)
        out.append(f"- default shapes{f' ({spec.shape_help})' if spec.shape_help else ''}: {shapes}")
        if spec.sweep is not None:
            sw = spec.sweep
            out.append(f"- sweep (`--sweep`): {sw.held()}, {sw.axis} = {', '.join(map(str, sw.sizes))}")
        peers = ["torch (eager, the anchor)", "torch.compile"] + list(spec.peers)
        out.append(f"- compared with: {', '.join(peers)}")
    return out


def render(op, command: str, observation: dict, records: list[dict], cases: list, order: list[str] = (),
           plots: dict | None = None, notes: str | None = None, sweep_plots: dict | None = None) -> str:
    spec = op.bench
    # a sweep's shapes beyond the default ones have their own section
    swept_labels = sweep_labels(op)
    swept = set(swept_labels) - set(shape_labels(op, spec.shapes if spec is not None else ()))
    all_records, all_cases = records, cases
    records = [r for r in records if r.get("shape") not in swept]
    cases = [c for c in cases if c.shape not in swept]
    order = [s for s in order if s not in swept]
    versions = observation.get("versions", {})
    dry = observation.get("gpu") == "cpu"
    metric = metric_of(spec) if spec is not None else TBS
    lines = [f"# {op.name}: operator benchmark", "",
             f"Written by `{command}`. A rerun rewrites this page from the records in {op.name}.json beside it "
             f"and keeps the section \"Notes\".", "",
             "## Support", "", *support_lines(op), "",
             "## Error criteria", "",
             f"Every implementation{' but the copy' if metric == TBS else ''} is checked before it is timed; a wrong "
             "one is not timed, and its cell says FAIL (the notes under the table give its error).", ""]
    shapes = [c.shape for c in cases] + [r.get("shape", "") for r in records]
    dtypes = list(dict.fromkeys(s.rsplit(" ", 1)[-1] for s in shapes if " " in s))
    for d in dtypes:
        if d in LONG_DTYPES:
            dtype = LONG_DTYPES[d]
            lines.append(f"- {d}: {checks.criteria(dtype, spec.check if spec else None, op.tolerances.get(dtype))}")
    lines += ["", "## Latest observation", "",
              f"- date {observation.get('date')}, commit {observation.get('commit')}, "
              f"{'device' if dry else 'GPU'} {observation.get('gpu')}",
              "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
              f"- times: {DESCRIPTION['cpu' if dry else 'cuda']}",
              f"- {COUNTS[metric]}"]
    modes = [m for m in MODES if any(c.mode == m for c in cases) or any(r.get("mode") == m for r in records)]
    for mode in modes:
        rate, notes_rate = tables.table(mode, records, cases, observation, metric, order)
        ms, _ = tables.table(mode, records, cases, observation, "ms", order)
        peak = tables.table(mode, records, cases, observation, "peak GB", order)[0] \
            if _has_peaks(mode, records, cases) else []
        lines += ["", f"## {mode}", ""]
        if rate:
            lines += [f"{metric} (ratio to torch):", "", *rate, "", "ms:", "", *ms]
        if peak:
            lines += ["", "peak memory of a step beyond what was allocated before it (GB, "
                      "torch.cuda.max_memory_allocated):", "", *peak]
        errs = tables.max_errors(mode, cases)
        if notes_rate or errs:
            if lines[-1]:
                lines.append("")
            lines += [f"- {n}" for n in notes_rate]
            if errs:
                lines.append("- largest errors the checks measured: " + "; ".join(errs))
        if plots and plots.get(mode):
            lines += ["", f"![{op.name} {mode}]({plots[mode]})"]
    if swept_labels:
        lines += _sweep_section(op, swept_labels, observation, all_records, all_cases, metric, sweep_plots)
    lines += ["", (notes or f"{NOTES_HEADING}\n\n{NOTES_PLACEHOLDER}\n").rstrip(), ""]
    return "\n".join(lines)


def _has_peaks(mode: str, records: list[dict], cases: list) -> bool:
    return any(r.peak_gb is not None for c in cases if c.mode == mode for r in c.rows) or \
        any(r.get("mode") == mode and r.get("metric") == "peak GB" for r in records)


def write(path: str, op, command: str, observation: dict, records: list[dict], cases: list,
          order: list[str] = (), plots: dict | None = None, sweep_plots: dict | None = None) -> None:
    """Write the page, keeping the "## Notes" section of the page already there."""
    notes = None
    if os.path.exists(path):
        with open(path) as f:
            notes = kept_notes(f.read())
    text = render(op, command, observation, records, cases, order, plots, notes, sweep_plots)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
