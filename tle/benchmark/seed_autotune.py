"""The sparse-MLA seed text through `tle.autotune`, against the same text under `@triton.jit`.

    python -m tle.benchmark.seed_autotune [--out docs/benchmark]

The kernel is kernels/examples/sparse_mla.py's text (the seed's, `tle.load(..., is_async=True)` on the KV gather). One
tle.autotune config space over the tile shape (BH heads, BK indices per step) and warps, the same on both
backends; each backend picks its own config. Plain Triton runs the text (`tl.load` for `tle.load`) at the
seed's own configuration (BH=32, BK=32, 8 warps, 4 stages) and at the best of the same space. Shape: the
seed's benchmark (B1 S4096 SKV8192 H128 D512+64 topk2048, bf16, causal). Times are do_bench medians
(warm-up 25 ms, repetitions 100 ms); every result is checked against the plain kernel's output first.
Writes <out>/seed_autotune.json and the table of <out>/seed_autotune.md when --out is given.
"""
from __future__ import annotations

import argparse
import json
import os

import torch
import triton
from triton.testing import do_bench

import tle
from tle.benchmark.provenance import commit, device_name, today, versions
from tle.kernels.examples import sparse_mla as m
from tle.oplib.backend import KERNEL_BACKENDS

SHAPE = dict(B=1, S=4096, SKV=8192, H=128, D=512, TD=64, topk=2048)
SPACE = [(64, 64, 8), (64, 32, 8), (32, 64, 8), (64, 64, 4), (32, 32, 8)]     # (BH, BK, num_warps)
SEED_CONFIG = (32, 32, 8)


def _inputs(device):
    s = SHAPE
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(s["B"], s["S"], s["H"], s["D"] + s["TD"], generator=gen).to(device, torch.bfloat16)
    kv = torch.randn(s["B"], s["SKV"], 1, s["D"] + s["TD"], generator=gen).to(device, torch.bfloat16)
    t = torch.arange(s["S"]).view(1, s["S"], 1, 1)
    r = torch.randint(0, 1 << 30, (s["B"], s["S"], 1, s["topk"]), generator=gen)
    idx = torch.where(torch.arange(s["topk"]).view(1, 1, 1, -1) < t.clamp(min=1), r % t.clamp(min=1), s["SKV"])
    out = torch.empty(s["B"], s["S"], s["H"], s["D"], device=device, dtype=torch.bfloat16)
    lse = torch.empty(s["B"], s["S"], s["H"], device=device, dtype=torch.bfloat16)
    return q, kv, idx.to(torch.int32).to(device), out, lse


def _flops() -> float:
    s = SHAPE
    return 2 * s["B"] * s["S"] * s["H"] * s["topk"] * (s["D"] + s["TD"] + s["D"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tle.benchmark.seed_autotune")
    ap.add_argument("--out", default=None)
    opts = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA device")
        return 2
    q, kv, idx, out, lse = _inputs("cuda")
    sm_scale = (SHAPE["D"] + SHAPE["TD"]) ** -0.5
    rows = []

    def record(label, config, fn, ref=None):
        fn()
        torch.cuda.synchronize()
        err = 0.0 if ref is None else (out.float() - ref.float()).abs().max().item()
        ms = do_bench(fn, warmup=25, rep=100)
        rows.append(dict(implementation=label, config=config, ms=ms, tflops=_flops() / ms / 1e9, max_error=err))
        print(f"{label:40s} {config:28s} {ms:8.3f} ms {rows[-1]['tflops']:7.1f} TFLOP/s  max|diff| {err:.4f}",
              flush=True)

    plain = m.plain_triton_kernel()
    ref = None
    for bh, bk, warps in [SEED_CONFIG] + [c for c in SPACE if c != SEED_CONFIG]:
        grid, args = m.kernel_args(q, kv, idx, out, lse, sm_scale, SHAPE["D"], bk, bh)
        record("plain Triton (@triton.jit)", f"BH={bh} BK={bk} {warps} warps",
               lambda: plain[grid](*args, num_warps=warps, num_stages=4), ref)
        if ref is None:
            ref = out.clone()
    tuned = tle.autotune(configs=[tle.Config({"BH": bh, "BK": bk}, num_warps=w, num_stages=4) for bh, bk, w in SPACE],
                         key=["K", "is_causal"], cache=False)(m.sparse_mla_fwd_kernel)
    grid, args = m.kernel_args(q, kv, idx, out, lse, sm_scale, SHAPE["D"], 1, 1)
    args = args[:-3]                                         # BK, BH (the configs set them), is_causal

    def grid_of(meta):
        return (SHAPE["B"], SHAPE["S"], triton.cdiv(SHAPE["H"], meta["BH"]))
    for backend in KERNEL_BACKENDS:
        tuned[grid_of](*args, is_causal=True, backend=backend)
        cfg = tuned.best_config
        chosen = f"BH={cfg.kwargs['BH']} BK={cfg.kwargs['BK']} {cfg.num_warps} warps"
        for c, ms in sorted(tuned.timings.items(), key=lambda kv: kv[1]):
            print(f"  tuned {backend}: {c}: {ms:.3f} ms ({_flops() / ms / 1e9:.1f} TFLOP/s)")
        record(f"tle.autotune, {backend}", chosen, lambda: tuned[grid_of](*args, is_causal=True, backend=backend), ref)
        rows[-1]["timings"] = {str(c): ms for c, ms in tuned.timings.items()}
        rows[-1]["failures"] = {str(c): str(e)[:200] for c, e in tuned.failures.items()}
    if opts.out:
        _write(opts.out, rows)
    return 0


def _write(out_dir, rows):
    obs = dict(date=today(), commit=commit(), gpu=device_name(torch.device("cuda")), versions=versions(),
               shape=SHAPE, rows=rows)
    with open(os.path.join(out_dir, "seed_autotune.json"), "w") as f:
        json.dump(obs, f, indent=1)
    seed = rows[0]["tflops"]
    best_plain = max(r["tflops"] for r in rows if r["implementation"].startswith("plain"))
    lines = ["| implementation | config | ms | TFLOP/s | vs plain at the seed config | vs best plain | max error |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['implementation']} | {r['config']} | {r['ms']:.3f} | {r['tflops']:.1f} | "
                     f"{r['tflops'] / seed:.2f}x | {r['tflops'] / best_plain:.2f}x | {r['max_error']:.4f} |")
    v = ", ".join(f"{k} {x}" for k, x in obs["versions"].items())
    head = [f"- date: {obs['date']}, commit: {obs['commit']}", f"- GPU: {obs['gpu']}", f"- versions: {v}", ""]
    with open(os.path.join(out_dir, "seed_autotune.table.md"), "w") as f:
        f.write("\n".join(head + lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
