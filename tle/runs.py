"""Running a kernel's example launch (`@tle.example`) and checking it against its torch reference: the outputs
poisoned first, the max error per output, launched (and timed on a GPU) or run in a backend's CPU interpreter.
`tle compare`, `tle explore`, tle.bench and the tests run kernels through these."""
from __future__ import annotations

from dataclasses import dataclass


def meta_copy(x):
    """A tensor's shape, strides and dtype on the 'meta' device (lowering needs nothing more)."""
    import torch
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return x


def poison(launch) -> None:
    """Fill the outputs with NaN (integers: their minimum) so that a kernel that writes nothing fails; those
    the kernel adds into (`launch.accumulates`) start at zero, and a kernel that adds nothing fails the check."""
    import torch
    for name, t in launch.outputs.items():
        if name in launch.accumulates:
            t.zero_()
        elif t.is_floating_point():
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.fill_(True)
        else:
            t.fill_(torch.iinfo(t.dtype).min)


def max_errors(launch) -> dict[str, float]:
    """Max abs error per output against the reference (NaN when the output holds NaN)."""
    ref = launch.reference()
    out = {}
    for name, t in launch.outputs.items():
        d = t.double() - ref[name].to(t.device).double()
        out[name] = d.abs().max().item() if d.numel() else 0.0
    return out


def check(launch) -> tuple[bool, str]:
    """(passed, a one-line summary: max error per output, or the first line of the mismatch)."""
    from tle.examples import compare_outputs
    errs = max_errors(launch)
    summary = ", ".join(f"{n} {e:.3g}" for n, e in errs.items())
    try:
        compare_outputs(launch)
    except AssertionError as e:
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "mismatch")
        return False, f"max error {summary} ({first})"
    return True, f"max error {summary}"


def rate(launch, ms: float) -> str:
    if launch.flops:
        return f"{launch.flops / (ms * 1e-3) / 1e12:.1f} TFLOP/s"
    if launch.bytes:
        return f"{launch.bytes / (ms * 1e-3) / 1e12:.2f} TB/s"
    return ""


def example_meta(kernel, size: str):
    """The example launch with its tensors on 'meta': a large size costs no memory and no time."""
    try:
        launch = kernel.example("meta", size)
    except Exception:                    # an example that needs real data: build it on the CPU, then copy
        launch = kernel.example("cpu", size)
    launch.args = tuple(meta_copy(a) for a in launch.args)
    return launch


def lower_each(kernel, launch, backends, kwargs_of=None) -> tuple[dict, dict]:
    """Lower `kernel` at `launch` to each backend (`kwargs_of(backend)`: its launch keywords, default the
    launch's); backend -> Lowered, and backend -> (the exception, whether it is a bug in the backend rather
    than an error of the kernel or its launch). One backend failing does not stop the others."""
    from tle.errors import BackendUnavailable, LaunchError, LoweringError
    lowered, errors = {}, {}
    for b in backends:
        kwargs = kwargs_of(b) if kwargs_of is not None else launch.kwargs
        try:
            lowered[b] = kernel.lower(*launch.args, grid=launch.grid, backend=b, **kwargs)
        except (LoweringError, BackendUnavailable, LaunchError) as e:
            errors[b] = (e, False)
        except Exception as e:           # noqa: BLE001 - a bug in a backend: reported, and the next one goes on
            errors[b] = (e, True)
    return lowered, errors


def first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


@dataclass
class Run:
    """One lowering run against the reference: passed, the max abs error over its outputs (None: it did not
    finish), a one-line detail, the median time on a GPU, and what the run reported beside."""
    ok: bool
    error: float | None
    detail: str
    ms: float | None = None
    extra: str = ""


def _checked(launch, extra: str = "") -> Run:
    """The outputs against the reference: check() as a Run, with the largest error over the outputs."""
    from tle.examples import compare_outputs
    try:
        errs = max_errors(launch)
    except Exception as e:               # a reference that fails, or outputs it does not match in shape
        return Run(False, None, f"checking failed: {first_line(e)}", extra=extra)
    summary = "max error " + ", ".join(f"{n} {e:.3g}" for n, e in errs.items())
    # NaN (an output the kernel did not write) wins, whatever its place among the outputs
    worst = float("nan") if any(e != e for e in errs.values()) else max(errs.values(), default=0.0)
    try:
        compare_outputs(launch)
    except AssertionError as e:
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "mismatch")
        return Run(False, worst, f"{summary} ({first})", extra=extra)
    return Run(True, worst, summary, extra=extra)


def _run_launch(kernel, launch, backend: str, time_it: bool) -> Run:
    """Poison the outputs, launch as usual, check against the reference, and (on a GPU) time with do_bench."""
    import torch
    run = lambda: kernel[launch.grid](*launch.args, backend=backend, **launch.kwargs)  # noqa: E731
    poison(launch)
    try:
        run()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Exception as e:
        return Run(False, None, f"launch failed: {first_line(e)}")
    result = _checked(launch)
    if result.ok and time_it:
        from triton.testing import do_bench
        result.ms = do_bench(run, return_mode="median")
    return result


def _runtime_args(kernel, lowered, launch) -> list:
    """The values the lowering's compiled kernel takes (its IR parameters), from the example launch."""
    kwargs = {k: v for k, v in launch.kwargs.items() if k in kernel.param_names}
    bound = kernel.signature.bind(*launch.args, **kwargs)
    bound.apply_defaults()
    return [bound.arguments[p.name] for p in lowered.kernel.params]


def _run_interpret(kernel, lowered, launch) -> Run:
    """Without a GPU: run the lowering through its Compiled.interpret on CPU tensors and check it."""
    poison(launch)
    try:
        report = lowered.compiled.interpret(_runtime_args(kernel, lowered, launch))
    except Exception as e:
        return Run(False, None, first_line(e))
    zeroed = sum(getattr(report, "predicated_reads", {}).values())
    return _checked(launch, f"{zeroed} reads past a tensor read zero, as the generated program predicates them"
                    if zeroed else "")


def run_lowering(kernel, launch, backend_name: str, lowered, on_gpu: bool) -> tuple[Run | str, str]:
    """Run one backend's lowering at `launch` and check it: on a GPU launched and timed; without one as the
    backend declares (`cpu_run`: launched in Triton's interpreter, or its Compiled.interpret). (Run, where it
    ran), or (why it was not run, "")."""
    from tle.lowering.backend import get_backend
    if on_gpu:
        return _run_launch(kernel, launch, backend_name, time_it=True), "GPU"
    how, where = get_backend(backend_name).cpu_run or (None, "")
    if how == "launch" and launch.no_interpreter:
        return launch.no_interpreter, ""
    if how == "launch":
        return _run_launch(kernel, launch, backend_name, time_it=False), where
    if how == "interpret":
        return _run_interpret(kernel, lowered, launch), where
    return "it runs on a GPU only, and there is none here", ""
