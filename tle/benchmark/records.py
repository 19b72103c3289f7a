"""The JSON records of docs/benchmark/<op>.json: a list, one record per (shape, implementation, metric).

    {"op": "rms_norm", "shape": "32768x8192 bf16", "mode": "fwd", "backend": "triton", "metric": "TB/s",
     "value": 4.08, "gpu": "NVIDIA H200", "commit": "ffbc8b7", "date": "2026-11-21", "versions": {...}}

A run replaces the records of each (op, shape, mode, backend) it measured, drops those of an implementation
that failed its check or raised in this run (an old figure must not stand for a broken implementation), and
keeps every other record (other shapes, modes, dtypes; a peer skipped here because its package is missing).
An operator counting its flops (BenchSpec.flops) has "TFLOP/s" records where the others have "TB/s". The full
mode on a GPU also records "peak GB": the most memory a step held beyond what was allocated before it."""
from __future__ import annotations

import json
import os

METRICS = ("TB/s", "TFLOP/s", "ms", "peak GB")


def _sig(v: float, digits: int = 4) -> float:
    return float(f"{v:.{digits}g}")


def key(r: dict) -> tuple:
    return (r.get("op"), r.get("shape"), r.get("mode"), r.get("backend"))


def from_cases(cases, observation: dict) -> list[dict]:
    """Records of the timed rows of `cases`: TB/s (where the case counts bytes) or TFLOP/s (where it counts
    flops), ms, and peak GB where it was measured."""
    out = []
    for c in cases:
        for r in c.rows:
            if r.ms is None:
                continue
            base = dict(op=c.op, shape=c.shape, mode=c.mode, backend=r.impl)
            if r.tbs is not None:
                out.append(dict(base, metric="TB/s", value=_sig(r.tbs), **observation))
            if r.tflops is not None:
                out.append(dict(base, metric="TFLOP/s", value=_sig(r.tflops), **observation))
            out.append(dict(base, metric="ms", value=_sig(r.ms), **observation))
            if r.peak_gb is not None:
                out.append(dict(base, metric="peak GB", value=_sig(r.peak_gb), **observation))
    return out


def failed_keys(cases) -> set:
    """(op, shape, mode, backend) of the implementations that failed or raised in `cases`."""
    return {(c.op, c.shape, c.mode, r.impl) for c in cases for r in c.rows if r.status in ("fail", "error")}


def merge(old: list[dict], new: list[dict], drop: set = frozenset()) -> list[dict]:
    """`old` less the records of every key in `new` or in `drop`, then `new`."""
    replaced = {key(r) for r in new} | set(drop)
    return [r for r in old if key(r) not in replaced] + list(new)


def load(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON ({e}); move it away or fix it") from None
    if not isinstance(data, list):
        raise ValueError(f"{path} holds no list of records")
    return data


def save(path: str, records: list[dict]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def update(path: str, cases, observation: dict) -> list[dict]:
    """Merge this run's records of `cases` into the file at `path`; the merged records."""
    merged = merge(load(path), from_cases(cases, observation), failed_keys(cases))
    save(path, merged)
    return merged
