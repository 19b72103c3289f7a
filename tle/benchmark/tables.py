"""Markdown tables of one operator in one mode: a row per implementation, a column per shape, each cell the
TB/s or TFLOP/s (or ms) and the ratio to the torch anchor of the same run.

Cells come from this run's cases where it measured them (FAIL / error / skipped as such), else from the
records kept from earlier runs, marked * (their date and commit are in the JSON file)."""
from __future__ import annotations

from tle.benchmark.measure import ANCHOR, COMPILED, COPY, TLE_TORCH
from tle.oplib.backend import KERNEL_BACKENDS

ORDER_HEAD = (ANCHOR, COMPILED)
ORDER_TAIL = (TLE_TORCH, *KERNEL_BACKENDS)
STATUS_CELL = {"fail": "FAIL", "error": "error", "skip": "skipped", "unavailable": "unavailable"}


def observation_of(r: dict) -> tuple:
    return (r.get("commit"), r.get("date"), r.get("gpu"))


def fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def ordered(items: list) -> list:
    """Implementations in table order: the anchor and torch.compile, peers, the tle backends, copy last."""
    seen = list(dict.fromkeys(items))
    head = [i for i in ORDER_HEAD if i in seen]
    tail = [i for i in ORDER_TAIL if i in seen]
    middle = [i for i in seen if i not in head and i not in tail and i != COPY]
    return head + middle + tail + ([COPY] if COPY in seen else [])


def columns(mode: str, records: list[dict], cases: list, order: list[str] = ()) -> list[str]:
    """The shapes of `mode`, in `order` first, then this run's, then the records'."""
    found = [c.shape for c in cases if c.mode == mode] + [r["shape"] for r in records if r.get("mode") == mode]
    return [s for s in dict.fromkeys(list(order) + found) if s in found]


def table(mode: str, records: list[dict], cases: list, latest: dict | None, metric: str = "TB/s",
          order: list[str] = ()) -> tuple[list[str], list[str]]:
    """(markdown lines, notes) for `mode`; no lines where nothing was measured in that mode."""
    recs = [r for r in records if r.get("mode") == mode and r.get("metric") == metric]
    run = {(c.shape, r.impl): r for c in cases if c.mode == mode for r in c.rows}
    shapes = columns(mode, recs, [c for c in cases if c.rows], order)
    if not shapes:
        return [], [f"{c.shape}: {c.note}" for c in cases if c.mode == mode and c.note]
    impls = ordered([r.impl for c in cases if c.mode == mode for r in c.rows] + [r["backend"] for r in recs])
    by_key = {(r["shape"], r["backend"]): r for r in recs}
    latest_obs = observation_of(latest or {})
    starred = False
    ratio = metric not in ("ms", "peak GB")      # a throughput (higher is better): its ratio to the anchor's too

    def value_of(row):
        return {"TB/s": row.tbs, "TFLOP/s": row.tflops, "peak GB": row.peak_gb}.get(metric, row.ms)

    def cell(shape, impl):
        nonlocal starred
        row = run.get((shape, impl))
        if row is not None and row.status == "ok" and value_of(row) is not None:
            text = fmt(value_of(row))
            anchor = run.get((shape, ANCHOR))
            if ratio and anchor is not None and anchor.status == "ok" and value_of(anchor):
                text += f" ({value_of(row) / value_of(anchor):.2f}x)"
            return text
        rec = by_key.get((shape, impl))
        if row is not None and row.status not in ("skip", "unavailable") or rec is None:
            return STATUS_CELL.get(row.status, "") if row is not None else ""
        text = fmt(rec["value"])
        anchor = by_key.get((shape, ANCHOR))
        if ratio and anchor is not None and observation_of(anchor) == observation_of(rec) and anchor["value"]:
            text += f" ({rec['value'] / anchor['value']:.2f}x)"
        if observation_of(rec) != latest_obs:
            text += " *"
            starred = True
        return text

    lines = ["| implementation | " + " | ".join(shapes) + " |", "|---|" + "---:|" * len(shapes)]
    for impl in impls:
        name = f"{impl} (anchor)" if impl == ANCHOR else (f"{impl} (ceiling)" if impl == COPY else impl)
        lines.append(f"| {name} | " + " | ".join(cell(s, impl) for s in shapes) + " |")
    notes = [f"{c.shape}: {c.note}" for c in cases if c.mode == mode and c.note]
    grouped: dict = {}            # the same note of an implementation at several shapes: one line
    measured = [c for c in cases if c.mode == mode and c.rows]
    for c in measured:
        for r in c.rows:
            if r.status != "ok" or r.note:
                grouped.setdefault((r.impl, STATUS_CELL.get(r.status, "note"), r.note), []).append(c.shape)
    for (impl, status, note), where in grouped.items():
        at = "every shape" if len(where) == len(measured) > 1 else ", ".join(where)
        notes.append(f"{impl} ({at}): {status}" + (f": {note}" if note else ""))
    if starred:
        notes.append("* from an earlier run: its date and commit are in the JSON records")
    return lines, notes


def max_errors(mode: str, cases: list) -> list[str]:
    """Lines naming the largest error each checked implementation showed in this run, per shape."""
    out = []
    for c in cases:
        if c.mode != mode:
            continue
        errs = [f"{r.impl} {r.error:.3g}" for r in c.rows if r.error is not None]
        if errs:
            out.append(f"{c.shape}: " + ", ".join(errs))
    return out
