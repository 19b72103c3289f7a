"""`tle-bench --warm N`: every tle kernel a run will time, compiled first in N processes at once.

A TileLang kernel takes seconds to a minute to compile, and a run compiles each kernel of each shape one after
the other (an attention operator's page: twenty kernels or more). Each worker runs one (operator, shape, kernel
backend) once, forward and, where the run has a backward mode, backward, on the inputs the benchmark makes;
what it compiles lands in the on-disk caches (TileLang's, Triton's) that the timed run then reads. The workers
measure nothing: a failure is printed and left to the timed run, which reports it in its table."""
from __future__ import annotations

import multiprocessing as mp
import sys
import time
from dataclasses import dataclass

import torch

from tle.oplib.backend import KERNEL_BACKENDS


@dataclass(frozen=True)
class Task:
    op: str
    shape: tuple
    backend: str
    dtype: torch.dtype
    device: str
    backward: bool

    def __str__(self) -> str:
        return f"{self.op} {'x'.join(map(str, self.shape))} {self.backend}"


def tasks(plans, backends, dtype: torch.dtype, device: torch.device, modes) -> list[Task]:
    """One task per operator, shape and kernel backend of the run (`plans`: (Operator, shapes) pairs)."""
    backward = any(m != "fwd" for m in modes)
    return [Task(op.name, tuple(shape), b, dtype, str(device), backward)
            for op, shapes in plans for shape in shapes for b in backends if b in KERNEL_BACKENDS]


def run_task(task: Task) -> str:
    """Runs the operator of `task` once (forward, and backward where asked); returns what happened, in a line."""
    from tle.benchmark.measure import as_tuple, input_grads, make_upstream, prepared
    from tle.ops import OPERATORS
    start = time.perf_counter()
    try:
        op = OPERATORS[task.op]
        sample = op.bench.make(task.shape, task.dtype, torch.device(task.device))
        keys = op.grad_keys(sample) if task.backward else []
        s, leaves = prepared(sample, keys)
        outs = as_tuple(op.fn(*s.args, backend=task.backend, **s.kwargs))
        if keys:
            input_grads(outs, leaves, make_upstream(outs))
        if torch.device(task.device).type == "cuda":
            torch.cuda.synchronize()
        return f"{task}: compiled ({time.perf_counter() - start:.0f} s)"
    except Exception as e:  # noqa: BLE001 - the timed run reports it in its table
        return f"{task}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def warm(todo: list[Task], processes: int, out=None) -> None:
    """Runs `todo` in `processes` fresh processes (spawned: CUDA does not survive a fork), printing each line
    (to stderr by default)."""
    if not todo:
        return
    out = out or sys.stderr
    print(f"tle-bench: compiling {len(todo)} operator runs in {processes} processes first", file=out, flush=True)
    with mp.get_context("spawn").Pool(min(processes, len(todo))) as pool:
        for line in pool.imap_unordered(run_task, todo):
            print(f"  {line}", file=out, flush=True)
