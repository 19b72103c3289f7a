"""A PNG per operator and mode: TB/s (or TFLOP/s) against shape, one line per implementation, the copy
ceiling dashed (TB/s only: an operator in TFLOP/s has no copy). An operator with a sweep (BenchSpec.sweep) gets
one more per mode: ms and the throughput against the swept size.

matplotlib is imported here only, lazily, with the Agg backend; without it there is no plot (and a note)."""
from __future__ import annotations

import math

from tle.benchmark.measure import COPY, TBS
from tle.benchmark.tables import columns, ordered


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write(path: str, op: str, mode: str, records: list[dict], order: list[str] = (), metric: str = TBS) -> bool:
    """Plot the `metric` records (TB/s or TFLOP/s) of `op` in `mode` into `path`; False (and no file) without
    matplotlib or data."""
    recs = [r for r in records if r.get("op", op) == op and r.get("mode") == mode and r.get("metric") == metric]
    if not recs:
        return False
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    shapes = columns(mode, recs, [], order)
    impls = ordered([r["backend"] for r in recs])
    value = {(r["shape"], r["backend"]): r["value"] for r in recs}
    xs = list(range(len(shapes)))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(shapes) + 3), 4.2))
    for impl in impls:
        ys = [value.get((s, impl), math.nan) for s in shapes]
        if impl == COPY:
            ax.plot(xs, ys, linestyle="--", color="black", linewidth=1.2, label="copy (ceiling)")
        else:
            ax.plot(xs, ys, marker="o", linewidth=1.6, label=impl)
    ax.set_xticks(xs)
    ax.set_xlim(-0.5, len(xs) - 0.5)
    ax.set_xticklabels(shapes, rotation=20, ha="right")
    ax.set_ylabel(metric)
    ax.set_ylim(bottom=0)
    gpus = sorted({r.get("gpu") for r in recs if r.get("gpu")})
    ax.set_title(f"{op} {mode}: {metric} by shape, higher is better" + (f" ({', '.join(gpus)})" if gpus else ""))
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_sweep(path: str, op: str, mode: str, records: list[dict], labels: list[str], sweep,
                metric: str = TBS) -> bool:
    """Plot ms (log scale) and `metric` of `op` in `mode` against the size `sweep` takes, from the records of
    the shapes `labels` (the sweep's, in order); False (and no file) without matplotlib or data."""
    recs = [r for r in records if r.get("op", op) == op and r.get("mode") == mode and r.get("shape") in labels
            and r.get("backend") != COPY]
    if not any(r.get("metric") == "ms" for r in recs):
        return False
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    size_of = dict(zip(labels, sweep.sizes))
    impls = ordered([r["backend"] for r in recs])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    for ax, which, better in ((axes[0], "ms", "lower"), (axes[1], metric, "higher")):
        for impl in impls:
            points = sorted((size_of[r["shape"]], r["value"]) for r in recs
                            if r["backend"] == impl and r.get("metric") == which)
            if points:
                ax.plot([x for x, _ in points], [y for _, y in points], marker="o", linewidth=1.6, label=impl)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(sweep.sizes))
        ax.set_xticklabels([str(x) for x in sweep.sizes])
        ax.minorticks_off()
        if which == "ms":
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel(sweep.axis)
        ax.set_ylabel(which)
        ax.set_title(f"{which}, {better} is better")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8, loc="best")
    dtype = labels[0].rsplit(" ", 1)[-1] if " " in labels[0] else ""
    gpus = sorted({r.get("gpu") for r in recs if r.get("gpu")})
    fig.suptitle(f"{op} {mode} against {sweep.axis}: {sweep.held()} {dtype}"
                 + (f" ({', '.join(gpus)})" if gpus else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
