"""The measuring loop: for each shape and mode of an operator, every implementation checked, then timed.

Implementations, in this order, all in the same process on the same inputs (allocated outside the timed
region): "torch", the operator's eager torch code (BenchSpec.eager, the anchor of the ratios);
"torch.compile" of it; the peers of BenchSpec.peers (skipped, with a note, where the peer's package is
missing or the peer lacks the case); the tle backends asked for ("triton", "tilelang"; the torch backend of
the tle op as "tle torch"); and "copy", a device-to-device copy of the same bytes, the bandwidth ceiling
(none for an operator measured in TFLOP/s: BenchSpec.flops given, no bandwidth ceiling to show).

Modes: "fwd" times the forward; "bwd" runs the forward once with the Operator's grad inputs requiring grad
and times torch.autograd.grad(outputs, inputs, upstream, retain_graph=True); "full" times both together."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

import torch

from tle.benchmark import check as checks
from tle.benchmark.provenance import SHORT_DTYPES
from tle.benchmark.timing import copy_ms, tb_per_s, tflop_per_s
from tle.errors import BackendUnavailable
from tle.oplib.backend import KERNEL_BACKENDS
from tle.oplib.operator import Operator, Sample

MODES = ("fwd", "bwd", "full")
ANCHOR, COMPILED, COPY = "torch", "torch.compile", "copy"
TLE_TORCH = "tle torch"
TBS, TFLOPS = "TB/s", "TFLOP/s"


@dataclass
class Row:
    """One implementation at one case. status: "ok" (timed), "fail" (wrong result, not timed), "error" (it
    raised), "skip" (not run here: a peer's package missing, or a case the peer lacks), "unavailable" (a tle
    backend that cannot run on this device: TileLang on the CPU, say; tle.errors.BackendUnavailable)."""
    impl: str
    kind: str                   # "anchor", "compile", "peer", "tle", "copy"
    status: str = "ok"
    ms: float | None = None
    tbs: float | None = None
    tflops: float | None = None
    error: float | None = None  # the largest error its check measured
    note: str = ""
    peak_gb: float | None = None    # full mode on a GPU: the most memory one step held beyond what was there before


@dataclass
class Case:
    op: str
    shape: str                  # "32768x8192 bf16"
    mode: str
    nbytes: int = 0
    rows: list[Row] = field(default_factory=list)
    note: str = ""              # why the case did not run, if it did not
    failed: bool = False        # it should have run and could not (inputs not made, the anchor raised)
    flops: int = 0              # where the operator counts its flops (BenchSpec.flops), not its bytes


def backend_row_name(backend: str) -> str:
    return TLE_TORCH if backend == "torch" else backend


def shape_label(shape: tuple, dtype: torch.dtype) -> str:
    return "x".join(str(d) for d in shape) + " " + SHORT_DTYPES.get(dtype, str(dtype).replace("torch.", ""))


def metric_of(spec) -> str:
    """The throughput an operator is measured in: TFLOP/s where its BenchSpec counts flops, else TB/s."""
    return TFLOPS if spec.flops is not None else TBS


def case_count(count: Callable, sample: Sample, mode: str) -> int:
    """`count` (BenchSpec.bytes or BenchSpec.flops) of `sample` in `mode`; full: forward plus backward."""
    if mode == "full":
        return int(count(sample, "fwd")) + int(count(sample, "bwd"))
    return int(count(sample, mode))


# -- samples -------------------------------------------------------------------------------------------------
def grad_names(op: Operator, keys: list) -> list[str]:
    """Names for the grad inputs (the parameter names of op.fn where it has them)."""
    try:
        params = list(inspect.signature(op.fn).parameters)
    except (TypeError, ValueError):
        params = []
    return [k if isinstance(k, str) else (params[k] if k < len(params) else f"argument {k}") for k in keys]


def cloned(sample: Sample) -> Sample:
    """`sample` with every tensor copied."""
    copy = lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v  # noqa: E731
    return Sample(tuple(copy(a) for a in sample.args), {k: copy(v) for k, v in sample.kwargs.items()}, sample.label)


def prepared(sample: Sample, keys: list, cast: torch.dtype | None = None) -> tuple[Sample, list]:
    """`sample` with its grad inputs (`keys`) as fresh leaves requiring grad, and every floating tensor cast
    to `cast` if given; and those leaves. The tensors share storage with `sample` where nothing is cast."""
    def fix(key, v):
        if not isinstance(v, torch.Tensor):
            return v
        if v.is_floating_point() and (key in keys or cast is not None):
            v = v.detach()
            if cast is not None:
                v = v.to(cast)
            return v.requires_grad_(key in keys)
        return v
    args = tuple(fix(i, a) for i, a in enumerate(sample.args))
    kwargs = {k: fix(k, v) for k, v in sample.kwargs.items()}
    out = Sample(args, kwargs, sample.label)
    return out, [out.get(k) for k in keys]


def as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def make_upstream(outputs: tuple, seed: int = 1234) -> list:
    """One standard-normal upstream gradient per differentiable output (None for the others), rounded to the
    output's dtype, the same in every run."""
    ups = []
    for i, o in enumerate(outputs):
        if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad:
            g = torch.Generator(device=o.device).manual_seed(seed + i)
            ups.append(torch.randn(o.shape, generator=g, device=o.device, dtype=torch.float32).to(o.dtype))
        else:
            ups.append(None)
    return ups


def _pairs(outputs, upstream):
    outs, ups = [], []
    for o, u in zip(outputs, upstream):
        if u is not None and isinstance(o, torch.Tensor) and o.requires_grad:
            outs.append(o)
            ups.append(u.to(o.dtype) if u.dtype != o.dtype else u)
    if not outs:
        raise checks.CheckFailed("no output depends on the grad inputs")
    return outs, ups


def input_grads(outputs, leaves, upstream, retain: bool = False) -> tuple:
    outs, ups = _pairs(outputs, upstream)
    return tuple(torch.autograd.grad(outs, leaves, ups, retain_graph=retain, allow_unused=True))


def _why(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}"[:200]


def _unavailable_why(e: BackendUnavailable) -> str:
    """Why a backend cannot run here, without the list of what can (the run's other rows say that)."""
    return (str(e).strip().splitlines() or [""])[0].split("; usable:")[0][:200]


# -- one case --------------------------------------------------------------------------------------------------
@dataclass
class Options:
    backends: tuple = KERNEL_BACKENDS
    peers: bool = True
    compile: bool = True


def implementations(op: Operator, s: Sample, options: Options, cache: dict | None = None
                    ) -> list[tuple[str, str, Callable]]:
    """(row name, kind, factory) in table order; a factory returns the callable to time, or None. `cache`
    keeps the torch.compile of `s` (the bwd and full modes of a shape share their inputs, so one compile)."""
    spec = op.bench
    cache = {} if cache is None else cache
    impls = [(ANCHOR, "anchor", lambda: spec.eager(s))]
    if options.compile:
        def compiled():
            key = ("torch.compile", id(s))
            if key not in cache:
                torch._dynamo.reset()         # a fresh compile per shape: no recompile limit, no dynamic shapes
                cache[key] = torch.compile(spec.eager(s), dynamic=False)
            return cache[key]
        impls.append((COMPILED, "compile", compiled))
    if options.peers:
        impls += [(name, "peer", (lambda f=f: f(s))) for name, f in spec.peers.items()]
    for b in options.backends:
        impls.append((backend_row_name(b), "tle",
                      lambda b=b: (lambda: op.fn(*s.args, backend=b, **s.kwargs))))
    return impls


def run_case(op: Operator, sample: Sample, label: str, mode: str, dtype: torch.dtype, options: Options,
             timer: Callable[[Callable], float], device: torch.device, progress=None, cache: dict | None = None
             ) -> Case:
    """One shape (`label`) in one mode: every implementation checked, then timed; then, in TB/s, the copy ceiling.
    `cache`: what the modes of one shape share (the inputs with their grad leaves, torch.compile's result)."""
    spec = op.bench
    cache = {} if cache is None else cache
    case = Case(op.name, label, mode)
    in_flops = metric_of(spec) == TFLOPS
    if in_flops:
        case.flops = case_count(spec.flops, sample, mode)
    else:
        case.nbytes = case_count(spec.bytes, sample, mode)
    keys = op.grad_keys(sample) if mode != "fwd" else []
    if mode != "fwd" and not keys:
        case.note = "no differentiable inputs in this case"
        return case
    names = grad_names(op, keys)
    if ("inputs", bool(keys)) not in cache:
        cache[("inputs", bool(keys))] = prepared(sample, keys)
    s, leaves = cache[("inputs", bool(keys))]

    anchor_outs = as_tuple(spec.eager(s)())
    n_out = len(anchor_outs)
    upstream = make_upstream(anchor_outs) if keys else []
    del anchor_outs
    ref_outs, ref_grads = (), ()
    if spec.check is None:       # the eager code on the inputs cast to fp32
        s32, leaves32 = prepared(sample, keys, cast=torch.float32)
        outs32 = as_tuple(spec.eager(s32)())
        if keys:
            ref_grads = input_grads(outs32, leaves32, [u.float() if u is not None else None for u in upstream])
        ref_outs = tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in outs32)
        del s32, leaves32, outs32

    for name, kind, factory in implementations(op, s, options, cache):
        if progress is not None:
            progress.show(f"{op.name} {mode} {case.shape}: {name}")
        s_row, leaves_row = s, leaves
        if kind == "peer":      # a peer may write into its inputs (Liger's SwiGLU backward stores its gradients
            s_row, leaves_row = prepared(cloned(sample), keys)      # there): it gets copies of its own
            factory = (lambda f=spec.peers[name], s_row=s_row: f(s_row))
        case.rows.append(_measure(name, kind, factory, spec, s_row, leaves_row, names, mode, dtype, n_out, upstream,
                                  ref_outs, ref_grads, timer, op.tolerances.get(dtype)))
        del s_row, leaves_row
    if in_flops:                       # no bandwidth ceiling to show
        return case
    try:
        case.rows.append(Row(COPY, "copy", ms=copy_ms(case.nbytes, device, timer)))
    except Exception as e:  # noqa: BLE001 - a row, not a crash
        case.rows.append(Row(COPY, "copy", status="error", note=_why(e)))
    return case


def _measure(name, kind, factory, spec, s, leaves, names, mode, dtype, n_out, upstream, ref_outs, ref_grads,
             timer, own_tolerance=None) -> Row:
    row = Row(name, kind)
    # each implementation gets its own copy of the upstream gradients: a peer may write its input gradient
    # into them (Liger's RMSNorm does, by default), which would feed the next implementation garbage
    upstream = [u.clone() if isinstance(u, torch.Tensor) else u for u in upstream]
    try:
        fn = factory()
    except ImportError as e:
        return Row(name, kind, "skip", note=f"not installed ({_why(e)})")
    except BackendUnavailable as e:
        return Row(name, kind, "unavailable", note=_unavailable_why(e))
    except Exception as e:  # noqa: BLE001
        return Row(name, kind, "error", note=_why(e))
    if fn is None:
        return Row(name, kind, "skip", note="lacks this case")
    outs = grads = None
    try:
        outs = as_tuple(fn())[:n_out]
        if spec.check is None:
            row.error = checks.compare(outs, (), ref_outs, (), dtype, own=own_tolerance)
        grads = ()
        if leaves:
            grads = input_grads(outs, leaves, upstream[:len(outs)], retain=(mode == "bwd"))
            if spec.check is None:
                row.error = max(row.error or 0.0, checks.compare((), grads, (), ref_grads, dtype, names, own_tolerance))
        if spec.check is not None:
            err = spec.check(s, outs, grads, list(upstream[:len(outs)]))
            row.error = float(err) if err is not None else None
    except ImportError as e:
        return Row(name, kind, "skip", note=f"not installed ({_why(e)})")
    except BackendUnavailable as e:
        return Row(name, kind, "unavailable", note=_unavailable_why(e))
    except AssertionError as e:
        if kind != "anchor":
            return Row(name, kind, "fail", note=str(e).strip().splitlines()[0] if str(e).strip() else "wrong result")
        row.note = f"the anchor itself fails the check (timed all the same): {str(e).strip().splitlines()[0]}"
        row.error = None            # what was measured before the failing comparison is not its error
    except Exception as e:  # noqa: BLE001
        return Row(name, kind, "error", note=_why(e))
    del grads
    try:
        if mode == "fwd":
            outs = None
            target = fn
        elif mode == "bwd":
            douts, dups = _pairs(outs, upstream)

            def target():
                return torch.autograd.grad(douts, leaves, dups, retain_graph=True, allow_unused=True)
        else:
            outs = None

            def target():
                o, u = _pairs(as_tuple(fn())[:n_out], upstream)
                return torch.autograd.grad(o, leaves, u, allow_unused=True)
        row.ms = timer(target)
        if mode == "full" and leaves and leaves[0].is_cuda:
            row.peak_gb = step_peak_gb(target)
    except Exception as e:  # noqa: BLE001
        return Row(name, kind, "error", note=f"while timing: {_why(e)}", error=row.error)
    return row


def step_peak_gb(step: Callable) -> float:
    """The most CUDA memory (GB, 1e9 bytes) one call of `step` holds at once beyond what was allocated before it:
    its temporaries and what it returns (a training step's gradients), as torch's caching allocator counts."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    return peak / 1e9


# -- an operator -------------------------------------------------------------------------------------------------
def bench_operator(op: Operator, shapes: list, dtype: torch.dtype, modes: list, options: Options,
                   timer: Callable[[Callable], float], device: torch.device, progress=None) -> list[Case]:
    """Every case of `op`: shapes x modes, in that order (inputs made once per shape)."""
    spec = op.bench
    cases = []
    for shape in shapes:
        label = shape_label(shape, dtype)
        torch.manual_seed(0)
        try:
            sample = spec.make(tuple(shape), dtype, device)
        except Exception as e:  # noqa: BLE001
            for mode in modes:
                cases.append(Case(op.name, label, mode, note=f"inputs not made: {_why(e)}", failed=True))
                if progress is not None:
                    progress.advance()
            continue
        cache: dict = {}
        for mode in modes:
            if progress is not None:
                progress.step(f"{op.name} {mode} {label}")
            if mode != "fwd" and op.forward_only:
                case = Case(op.name, label, mode, note=f"forward only: {op.forward_only}")
            else:
                try:
                    case = run_case(op, sample, label, mode, dtype, options, timer, device, progress, cache)
                except Exception as e:  # noqa: BLE001 - the eager anchor or its reference raised
                    case = Case(op.name, label, mode, note=f"not measured: {_why(e)}", failed=True)
            for r in case.rows:
                if r.ms is not None:
                    r.tbs = tb_per_s(case.nbytes, r.ms) if case.nbytes else None
                    r.tflops = tflop_per_s(case.flops, r.ms) if case.flops else None
            cases.append(case)
            if progress is not None:
                progress.advance()
                if case.failed:
                    progress.note(f"{op.name} {mode} {label}: {case.note}")
                for r in case.rows:
                    if r.status in ("fail", "error"):
                        progress.note(f"{op.name} {mode} {label}: {r.impl}: {r.status.upper()} {r.note}")
        del sample, cache
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return cases
