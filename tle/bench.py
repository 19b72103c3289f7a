"""Kernel-level benchmarks on a GPU: each kernel's large example on both tle backends, beside torch, in one process.

    python -m tle.bench vector_add matmul sparse_mla [--out docs/benchmark]

The operators of tle.ops (forward and backward, over several shapes, beside their peers) are measured by
`tle-bench` (tle/benchmark/); this command keeps the kernel examples that are not operators.

For each kernel: check every tle backend against the torch reference, then time every
implementation with triton.testing.do_bench (median), print a table with TB/s or TFLOP/s and the
ratio to the torch anchor, and write docs/benchmark/<op>.json and <op>.md (sparse_mla: sparse_mla_seed.json
and .md, beside tle-bench's operator page sparse_mla.md). Where the tree has no .git
(a copy on a GPU machine), set TLE_COMMIT to the commit being measured.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

import torch

from tle.benchmark.provenance import commit, short_dtypes, today, versions
from tle.cli import check, poison
from tle.oplib.backend import KERNEL_BACKENDS

KERNELS = {"vector_add": "add_kernel", "matmul": "matmul_kernel", "sparse_mla": "sparse_mla_fwd_kernel"}
# extra tle rows: (row name, backend, extra kwargs[, "module.kernel" when not the op's kernel]): the effect
# of one hint alone, or the same operator written with tle.gpu staging (same launch)
VARIANTS = {"sparse_mla": [("triton, is_async=False", "triton", {"ASYNC": False}),
                           ("tilelang, is_async=False", "tilelang", {"ASYNC": False}),
                           ("tle.gpu kernel, triton", "triton", {}, "sparse_mla_smem.sparse_mla_fwd_smem_kernel"),
                           ("tle.gpu kernel, tilelang", "tilelang", {}, "sparse_mla_smem.sparse_mla_fwd_smem_kernel")],
            "matmul": [("tle.gpu kernel, triton", "triton", {}, "matmul_smem.matmul_smem_kernel"),
                       ("tle.gpu kernel, tilelang", "tilelang", {}, "matmul_smem.matmul_smem_kernel")]}
MEMORY_BOUND = {"vector_add"}
# page names where a kernel's differs from its own: tle-bench's page sparse_mla.md is the operator tle.ops.sparse_mla
PAGES = {"sparse_mla": "sparse_mla_seed"}
TLE_BACKENDS = KERNEL_BACKENDS


def torch_impls(op: str, launch) -> list[tuple[str, object]]:
    """(name, fn) for the torch implementations of `op`; the first is the anchor of the ratios."""
    a = launch.args
    if op == "vector_add":
        x, y = a[0], a[1]
        impls = [("torch", lambda: x + y)]
    elif op == "matmul":
        impls = [("torch.matmul", lambda: torch.matmul(a[0], a[1]))]
    elif op == "sparse_mla":
        # the anchor: the same kernel text compiled by triton.jit directly, with tl.load for tle.load
        from tle.kernels.examples.sparse_mla import plain_triton_kernel
        plain = plain_triton_kernel()
        impls = [("plain Triton kernel", lambda: plain[launch.grid](*a, **launch.kwargs))]
    else:
        raise ValueError(op)
    if op in MEMORY_BOUND:
        # the bandwidth ceiling: a device-to-device copy moving the same bytes (half read, half written)
        src = torch.empty(launch.bytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        impls.append(("copy", lambda: dst.copy_(src)))
    return impls


def bench_op(op: str) -> tuple[list[dict], list[str], bool]:
    """Records, table lines, and whether every tle backend passed its check."""
    from triton.testing import do_bench
    mod = importlib.import_module(f"tle.kernels.examples.{op}")
    kernel = getattr(mod, KERNELS[op])
    launch = kernel.example("cuda", "large")
    metric = "TFLOP/s" if launch.flops else "TB/s"
    work = launch.flops if launch.flops else launch.bytes

    tle_rows, ok = [], True        # (name, ms or None, note)
    for name, b, extra, *other in [(b, b, {}) for b in TLE_BACKENDS] + VARIANTS.get(op, []):
        k, lau = kernel, launch
        if other:       # another kernel of the same operator, at its own example launch
            mod_name, k_name = other[0].split(".")
            k = getattr(importlib.import_module(f"tle.kernels.examples.{mod_name}"), k_name)
            lau = k.example("cuda", "large")
        run = lambda b=b, extra=extra, k=k, lau=lau: k[lau.grid](*lau.args, backend=b, **lau.kwargs, **extra)  # noqa: E731
        poison(lau)
        try:
            run()
            torch.cuda.synchronize()
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            tle_rows.append((name, None, f"failed: {type(e).__name__}: {first}"))
            ok = False
            continue
        passed, summary = check(lau)    # a wrong kernel is not timed
        tle_rows.append((name, do_bench(run, warmup=25, rep=100, return_mode="median") if passed else None,
                         summary if passed else f"FAIL {summary}"))
        ok &= passed
    torch_rows = [(name, do_bench(fn, warmup=25, rep=100, return_mode="median"), "")
                  for name, fn in torch_impls(op, launch)]
    # torch first (the anchor leads), then the tle backends, then the copy ceiling
    rows = [r for r in torch_rows if r[0] != "copy"] + tle_rows + [r for r in torch_rows if r[0] == "copy"]

    value = {name: work / (ms * 1e-3) / 1e12 for name, ms, _ in rows if ms is not None}
    anchor = torch_rows[0][0]
    lines = [f"| implementation | ms | {metric} | vs {anchor} | check |", "|---|---:|---:|---:|---|"]
    for name, ms, note in rows:
        if ms is None:
            lines.append(f"| {name} | | | | {note} |")
        else:
            lines.append(f"| {name} | {ms:.4f} | {value[name]:.2f} | {value[name] / value[anchor]:.2f}x | {note} |")

    meta = {"gpu": torch.cuda.get_device_name(), "commit": commit(), "date": today(), "versions": versions()}
    shape = short_dtypes(launch.label)      # e.g. "32768x8192 bf16"
    records = [dict(op=op, shape=shape, mode="fwd", backend=name, metric=metric, value=round(value[name], 4), **meta)
               for name, ms, _ in rows if ms is not None]
    return records, lines, ok


def write_page(out_dir: str, op: str, records: list[dict], lines: list[str], command: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    page_name = PAGES.get(op, op)
    with open(os.path.join(out_dir, f"{page_name}.json"), "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    r = records[0] if records else {}
    v = r.get("versions", {})
    page = [f"# {op} benchmark", "",
            f"`{command}`", "",
            f"- date: {r.get('date')}, commit: {r.get('commit')}",
            f"- GPU: {r.get('gpu')}",
            f"- versions: torch {v.get('torch')}, triton {v.get('triton')}, tilelang {v.get('tilelang')}",
            f"- shape: {r.get('shape')}, forward; times are do_bench medians (warmup 25 ms, rep 100 ms)", "",
            *lines, ""]
    with open(os.path.join(out_dir, f"{page_name}.md"), "w") as f:
        f.write("\n".join(page))


def launch_overhead(n: int = 2000) -> list[str]:
    """Warm launch cost of a small kernel through tle, against launching what it generated directly."""
    import time

    from tle.kernels.examples.vector_add import add_kernel
    x = torch.randn(4096, device="cuda")
    y, out = torch.randn_like(x), torch.empty_like(x)

    def per_launch(fn):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / n * 1e6

    lines = ["| backend | tle launch (us) | direct launch (us) | overhead (us) |", "|---|---:|---:|---:|"]
    for be in TLE_BACKENDS:
        lw = add_kernel.lower(x, y, out, 4096, BLOCK_SIZE=1024, grid=(4,), backend=be, num_warps=4)
        ours = per_launch(lambda: add_kernel[(4,)](x, y, out, 4096, BLOCK_SIZE=1024, backend=be, num_warps=4))
        if be == "triton":
            fn = lw.compiled.fn
            direct = per_launch(lambda: fn[(4,)](x, y, out, 4096, num_warps=4, num_stages=3))
        else:
            k = lw.compiled.kernel
            direct = per_launch(lambda: k(x, y, out))
        lines.append(f"| {be} | {ours:.1f} | {direct:.1f} | {ours - direct:.1f} |")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tle.bench", description=__doc__.splitlines()[0])
    p.add_argument("ops", nargs="*", metavar="OP", help=f"any of {', '.join(sorted(KERNELS))}")
    p.add_argument("--launch-overhead", action="store_true", help="also time warm launches of a small kernel")
    p.add_argument("--out", default=os.path.join("docs", "benchmark"))
    args = p.parse_args(argv)
    unknown = [op for op in args.ops if op not in KERNELS]
    if unknown or not (args.ops or args.launch_overhead):
        p.error(f"unknown operator {unknown[0]!r}" if unknown else "name an operator or --launch-overhead")
    if not torch.cuda.is_available():
        print("tle.bench: no CUDA device here; benchmarks run on a GPU machine "
              "(see README: source .device/setup.sh && python3 -m tle.bench ...)", file=sys.stderr)
        return 2
    command = "python -m tle.bench " + " ".join(args.ops)
    all_ok = True
    for op in args.ops:
        records, lines, ok = bench_op(op)
        all_ok &= ok
        print(f"\n## {op} ({records[0]['shape'] if records else ''})\n")
        print("\n".join(lines))
        write_page(args.out, op, records, lines, command)
    print(f"\nwrote {', '.join(os.path.join(args.out, PAGES.get(op, op) + '.{json,md}') for op in args.ops)}")
    if args.launch_overhead:
        print("\n## launch overhead (4096-element vector add, warm)\n")
        print("\n".join(launch_overhead()))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
