"""tle-bench --model llama-block: one training step (forward, loss, backward) of a Llama-style decoder stack
(tle/benchmark/llama_block.py) built from tle.ops on each kernel backend, beside the same stack in eager torch,
under torch.compile and on Liger's kernels, in one process.

    tle-bench --model llama-block [--layers 2] [--seq 4096] [--batch 2] [--backends triton,tilelang]
              [--device cuda] [--no-peers] [--no-compile] [--reps 5] [--warm N] [--out docs/benchmark]

Every variant runs on the same bf16 weights and inputs. Its first step is checked: the loss and every weight's
gradient against the eager stack evaluated in fp32 (the weights cast up), as relative errors ||got - ref|| /
||ref||; a variant beyond LOSS_TOLERANCE or GRAD_TOLERANCE fails (its time is still shown, marked). Then: the
median of --reps timed steps (CUDA events around each, gradients reset to None before it, so that the step
allocates them), and the most memory one step held beyond what was allocated before it
(torch.cuda.max_memory_allocated). Writes <out>/llama_block.json, llama_block.png (step time and peak memory per
variant) and llama_block.md (keeping its "## Notes"). --warm N first compiles each tle backend's kernels in N
processes, a part of the stack each (a TileLang kernel takes seconds to a minute to compile). `--device cpu` is a
dry run on a tiny stack (llama_block.DRY_CONFIG; Triton in its interpreter), for tests: nothing is written unless
--out is given, and no figure means anything. Exit codes as tle-bench's: 1 when a tle variant failed its check or
raised, 2 on usage errors or without CUDA, 3 when a tle backend asked for cannot run here."""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import partial

import torch

from tle.benchmark import page
from tle.benchmark.dry_run import restart_in_triton_interpreter
from tle.benchmark.llama_block import (DRY_CONFIG, TORCH_OPS, LlamaConfig, config_with, flops_per_step, liger_ops,
                                       loss_of, make_inputs, make_params, relative_error, rope_tables, tle_ops)
from tle.benchmark.measure import step_peak_gb
from tle.benchmark.provenance import observation
from tle.benchmark.timing import synchronize
from tle.oplib.backend import KERNEL_BACKENDS, OP_BACKENDS

MODELS = ("llama-block",)
NAME = "llama_block"
# relative errors against the fp32 stack that a bf16 step may show: bf16 rounds to 2^-8, once per op, and a
# weight's gradient in the first layer has gone through every op of the stack twice (at the dry run's sizes the
# eager bf16 stack's worst gradient is 1.3e-2 off, tle's 5.3e-2; the loss 1.7e-4 and 1.5e-3, tle's returned in bf16)
LOSS_TOLERANCE = 1e-2
GRAD_TOLERANCE = 6e-2
EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 1, 2, 3


@dataclass
class Row:
    variant: str
    kind: str                       # "tle" or "peer" (torch, torch.compile, liger)
    status: str = "ok"              # ok, fail (beyond the tolerances), error, skipped, unavailable
    ms: float | None = None
    peak_gb: float | None = None
    loss: float | None = None
    loss_error: float | None = None
    grad_error: float | None = None
    worst: str = ""                 # the weight whose gradient is furthest from fp32
    note: str = ""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tle-bench --model", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, choices=MODELS)
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N; cpu is a dry run on a tiny stack")
    p.add_argument("--backends", default=None,
                   help=f"tle backends, comma-separated, of {', '.join(OP_BACKENDS)} (default "
                        f"{','.join(KERNEL_BACKENDS)}; with --device cpu, triton)")
    for size, default in (("layers", 2), ("seq", 4096), ("batch", 2), ("hidden", 4096), ("heads", 32),
                          ("kv-heads", 8), ("intermediate", 14336), ("vocab", 128256)):
        p.add_argument(f"--{size}", type=int, default=None,
                       help=f"default {default} (--device cpu: llama_block.DRY_CONFIG's)")
    p.add_argument("--reps", type=int, default=5, help="timed steps; the median is reported (default 5)")
    p.add_argument("--no-peers", action="store_true", help="skip Liger")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--warm", type=int, default=0, metavar="N",
                   help="first compile each tle backend's kernels in N processes at once, one part of the stack "
                        "(norm, rope, attention, ...) a process, on a one-layer stack of the same sizes")
    p.add_argument("--out", default=None, help="where llama_block.{json,md,png} go (default docs/benchmark on a "
                                               "GPU; with --device cpu, nothing unless given)")
    return p


def parse_args(argv) -> argparse.Namespace:
    p = parser()
    a = p.parse_args(argv)
    a.torch_device = torch.device(a.device)
    a.backend_list = [b.strip() for b in (a.backends or ("triton" if a.torch_device.type == "cpu" else
                                                         ",".join(KERNEL_BACKENDS))).split(",") if b.strip()]
    for b in a.backend_list:
        if b not in OP_BACKENDS:
            p.error(f"unknown backend {b!r} in --backends (backends: {', '.join(OP_BACKENDS)})")
    sizes = dict(layers=a.layers, seq=a.seq, batch=a.batch, hidden=a.hidden, heads=a.heads, kv_heads=a.kv_heads,
                 intermediate=a.intermediate, vocab=a.vocab)
    for k, v in sizes.items():
        if v is not None and v < 1:
            p.error(f"--{k.replace('_', '-')} {v}: a positive size")
    a.config = config_with(DRY_CONFIG if a.torch_device.type == "cpu" else LlamaConfig(), **sizes)
    if a.config.hidden % a.config.heads or a.config.heads % a.config.kv_heads:
        p.error(f"--hidden {a.config.hidden}, --heads {a.config.heads}, --kv-heads {a.config.kv_heads}: the heads "
                f"must divide the hidden size and the KV heads the heads")
    if a.reps < 1:
        p.error(f"--reps {a.reps}: at least one timed step")
    if a.warm < 0:
        p.error(f"--warm {a.warm}: the number of processes that compile first (0: none)")
    return a


# -- one variant's step, check, time and memory ------------------------------------------------------------------
def _step(loss_fn, params: dict) -> torch.Tensor:
    for p in params.values():
        p.grad = None
    loss = loss_fn()
    loss.backward()
    return loss


def _median_ms(loss_fn, params, device, reps: int) -> float:
    times = []
    for _ in range(reps):
        synchronize(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            _step(loss_fn, params)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            _step(loss_fn, params)
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def _peak_gb(loss_fn, params, device) -> float | None:
    if device.type != "cuda":
        return None
    for p in params.values():
        p.grad = None
    return step_peak_gb(lambda: _step(loss_fn, params))


def reference(cfg: LlamaConfig, params: dict, x, targets) -> tuple[float, dict]:
    """The eager stack in fp32 on the weights cast up: (loss, {weight: gradient})."""
    p32 = {k: v.detach().float().requires_grad_() for k, v in params.items()}
    cos, sin = rope_tables(cfg, x.device, torch.float32)
    loss = loss_of(cfg, TORCH_OPS, p32, x.float(), targets, cos, sin)
    loss.backward()
    return loss.item(), {k: v.grad for k, v in p32.items()}


def measure(row: Row, loss_fn, params: dict, ref: tuple[float, dict], device, reps: int) -> Row:
    try:
        loss = _step(loss_fn, params).item()
        row.loss = loss
        row.loss_error = abs(loss - ref[0]) / abs(ref[0])
        errors = {k: relative_error(p.grad, ref[1][k]) if p.grad is not None else float("inf")
                  for k, p in params.items()}
        row.worst = max(errors, key=errors.get)
        row.grad_error = errors[row.worst]
        if row.loss_error > LOSS_TOLERANCE or row.grad_error > GRAD_TOLERANCE:
            row.status = "fail"
            row.note = (f"beyond the tolerances (loss {LOSS_TOLERANCE:g}, gradients {GRAD_TOLERANCE:g}; timed all "
                        f"the same)")
        row.ms = _median_ms(loss_fn, params, device, reps)
        row.peak_gb = _peak_gb(loss_fn, params, device)
    except Exception as e:                           # a variant that raises is a row, not the end of the run
        row.status, row.note = "error", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    finally:
        for p in params.values():
            p.grad = None
    return row


def variants(args, cfg: LlamaConfig) -> list[tuple[Row, object]]:
    """(row, loss_fn factory or None) in the table's order: the peers, then tle's backends."""
    out = [(Row("torch", "peer"), lambda: TORCH_OPS)]
    if not args.no_compile:
        out.append((Row("torch.compile", "peer"), "compile"))
    if not args.no_peers:
        out.append((Row("liger", "peer"), liger_ops))
    out += [(Row(f"tle {b}", "tle"), partial(tle_ops, b)) for b in args.backend_list]
    return out


def run(args) -> list[Row]:
    cfg, device, dtype = args.config, args.torch_device, torch.bfloat16
    params = make_params(cfg, device, dtype)
    x, targets = make_inputs(cfg, device, dtype)
    cos, sin = rope_tables(cfg, device, dtype)
    ref = reference(cfg, params, x, targets)
    synchronize(device)
    rows = []
    for row, make in variants(args, cfg):
        reason = _unavailable(row, device)
        if reason:
            row.status, row.note = "unavailable", reason
            rows.append(row)
            continue
        try:
            if make == "compile":
                compiled = torch.compile(partial(loss_of, cfg, TORCH_OPS))
                loss_fn = partial(compiled, params, x, targets, cos, sin)
            else:
                loss_fn = partial(loss_of, cfg, make(), params, x, targets, cos, sin)
        except ImportError as e:
            row.status, row.note = "skipped", f"not installed ({e})"
            rows.append(row)
            continue
        print(f"tle-bench --model: {row.variant} ...", file=sys.stderr, flush=True)
        rows.append(measure(row, loss_fn, params, ref, device, args.reps))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _unavailable(row: Row, device) -> str:
    if row.kind != "tle" or row.variant == "tle torch":
        return ""
    from tle import select
    return select.launch_unavailable_reason(select.resolve(row.variant[4:]), device, select.interpret_setting()) or ""


# -- --warm: each part's kernels compiled in a process of its own -------------------------------------------------
PARTS = ("rms_norm", "rope", "attention", "linear", "swiglu_mlp", "head_loss")


@dataclass(frozen=True)
class WarmTask:
    config: LlamaConfig
    device: str
    backend: str
    part: str


def warm_part(task: WarmTask) -> str:
    """One step of a one-layer stack in which only `task.part` runs on tle (the rest on torch): its kernels land in
    the on-disk caches (TileLang's, Triton's) that the timed run reads. Returns what happened, in a line."""
    start = time.perf_counter()
    try:
        cfg, device = task.config, torch.device(task.device)
        params = make_params(cfg, device, torch.bfloat16)
        x, targets = make_inputs(cfg, device, torch.bfloat16)
        cos, sin = rope_tables(cfg, device, torch.bfloat16)
        ops = dataclasses.replace(TORCH_OPS, **{task.part: getattr(tle_ops(task.backend), task.part)})
        _step(partial(loss_of, cfg, ops, params, x, targets, cos, sin), params)
        synchronize(device)
        return f"{task.backend} {task.part}: compiled ({time.perf_counter() - start:.0f} s)"
    except Exception as e:  # noqa: BLE001 - the timed run reports it in its table
        return f"{task.backend} {task.part}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def warm(args) -> None:
    tasks = [WarmTask(dataclasses.replace(args.config, layers=1), str(args.torch_device), b, part)
             for b in args.backend_list if b != "torch" and not _unavailable(Row(f"tle {b}", "tle"), args.torch_device)
             for part in PARTS]
    if not tasks:
        return
    print(f"tle-bench --model: compiling {len(tasks)} parts in {min(args.warm, len(tasks))} processes first",
          file=sys.stderr, flush=True)
    with mp.get_context("spawn").Pool(min(args.warm, len(tasks))) as pool:
        for line in pool.imap_unordered(warm_part, tasks):
            print(f"  {line}", file=sys.stderr, flush=True)


# -- the table, the page, the plot --------------------------------------------------------------------------------
def _fmt(v, digits=3) -> str:
    return "" if v is None else f"{v:.{digits}g}"


def table(rows: list[Row], cfg: LlamaConfig) -> list[str]:
    anchor = next((r.ms for r in rows if r.variant == "torch" and r.ms), None)
    flops = flops_per_step(cfg)
    lines = ["| variant | step ms | ratio to torch | TFLOP/s | peak GB | loss | loss error | worst gradient error "
             "| status |", "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        ratio = f"{anchor / r.ms:.2f}x" if anchor and r.ms else ""
        tflops = _fmt(flops / (r.ms * 1e-3) / 1e12) if r.ms else ""
        worst = f"{_fmt(r.grad_error)} ({r.worst})" if r.grad_error is not None else ""
        status = r.status + (f": {r.note}" if r.note else "")
        lines.append(f"| {r.variant} | {_fmt(r.ms, 4)} | {ratio} | {tflops} | {_fmt(r.peak_gb)} | {_fmt(r.loss, 6)} | "
                     f"{_fmt(r.loss_error)} | {worst} | {status} |")
    return lines


def render(rows: list[Row], cfg: LlamaConfig, command: str, obs: dict, plotted: bool, notes: str | None) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in obs["versions"].items())
    out = [f"# {NAME}: one training step of a Llama-style stack", "",
           f"Written by `{command}`. A rerun rewrites this page and keeps the section \"Notes\".", "",
           f"- the stack: {cfg.label()}; bf16 weights and activations; attention causal with grouped heads; a fused "
           f"linear cross entropy head where the variant has one (tle, Liger), else the whole logits",
           "- variants: eager torch (the anchor), torch.compile of the same code, Liger's kernels (RMSNorm, RoPE, "
           "SwiGLU, fused linear cross entropy; attention by SDPA), and tle.ops on each backend (rms_norm, "
           "apply_rotary_pos_emb, flash_attention, linear_act, linear_swiglu, fused_linear_cross_entropy)",
           f"- check: the first step's loss and each weight's gradient against the eager stack in fp32, relative "
           f"error ||got - ref|| / ||ref||, tolerances {LOSS_TOLERANCE:g} (loss) and {GRAD_TOLERANCE:g} (each "
           f"gradient)",
           "- step: gradients reset to None, forward, loss, backward; the median of the timed steps (CUDA events); "
           "peak: torch.cuda.max_memory_allocated over one step beyond what was allocated before it",
           f"- TFLOP/s counts the products of a step (llama_block.flops_per_step: {flops_per_step(cfg) / 1e12:.1f} "
           f"TFLOP)", "",
           "## Latest observation", "",
           f"- date {obs['date']}, commit {obs['commit']}, GPU {obs['gpu']}", f"- versions: {versions}", ""]
    out += table(rows, cfg)
    if plotted:
        out += ["", f"![{NAME}]({NAME}.png)"]
    out += ["", notes.rstrip() if notes else page.NOTES_HEADING + "\n\n<!-- Written by people: analysis of the "
            "figures above. tle-bench keeps this section when it rewrites the page. -->"]
    return "\n".join(out) + "\n"


def write_plot(path: str, rows: list[Row]) -> bool:
    timed = [r for r in rows if r.ms is not None]
    if not timed:
        return False
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = [r.variant for r in timed]
    axes[0].bar(names, [r.ms for r in timed], color="tab:blue")
    axes[0].set_ylabel("step ms (lower is better)")
    axes[1].bar(names, [r.peak_gb or 0.0 for r in timed], color="tab:orange")
    axes[1].set_ylabel("peak GB of a step (lower is better)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle("one training step of a Llama-style stack")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(out_dir: str, rows: list[Row], cfg: LlamaConfig, command: str, obs: dict) -> None:
    os.makedirs(out_dir, exist_ok=True)
    md = os.path.join(out_dir, NAME + ".md")
    notes = page.kept_notes(open(md).read()) if os.path.exists(md) else None
    with open(os.path.join(out_dir, NAME + ".json"), "w") as f:
        json.dump({**obs, "config": asdict(cfg), "tolerances": {"loss": LOSS_TOLERANCE, "gradients": GRAD_TOLERANCE},
                   "rows": [asdict(r) for r in rows]}, f, indent=1)
    plotted = write_plot(os.path.join(out_dir, NAME + ".png"), rows)
    with open(md, "w") as f:
        f.write(render(rows, cfg, command, obs, plotted, notes))


def main(argv, from_command_line: bool = False) -> int:
    args = parse_args(argv)
    device = args.torch_device
    if device.type == "cpu" and from_command_line and "triton" in args.backend_list:
        restart_in_triton_interpreter(argv)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("tle-bench: no CUDA device here (--device cpu is a dry run)", file=sys.stderr)
        return EXIT_USAGE
    if args.warm > 0:
        warm(args)
    rows = run(args)
    command = "tle-bench " + shlex.join(argv)
    obs = observation(device)
    print(f"\n## {NAME}: {args.config.label()}\n")
    print("\n".join(table(rows, args.config)))
    out_dir = args.out if args.out is not None else (os.path.join("docs", "benchmark") if device.type == "cuda"
                                                     else None)
    if out_dir:
        write(out_dir, rows, args.config, command, obs)
        print(f"\nwrote {out_dir}/{NAME}.{{json,md,png}}")
    if any(r.kind == "tle" and r.status in ("fail", "error") for r in rows):
        return EXIT_FAILED
    if any(r.kind == "tle" and r.status == "unavailable" for r in rows):
        return EXIT_UNAVAILABLE
    return 0
