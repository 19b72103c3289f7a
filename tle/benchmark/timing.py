"""How long a callable takes, in milliseconds.

On a GPU: triton.testing.do_bench (the median, 25 ms of warm-up, 100 ms of repetitions), with the device
synchronized before and after. On the CPU (`tle-bench --device cpu`): the median of a few wall-clock runs,
a dry run of the measuring loop for tests, never a measurement to report."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

WARMUP_MS, REP_MS = 25, 100
DESCRIPTION = {"cuda": f"triton.testing.do_bench medians (warm-up {WARMUP_MS} ms, repetitions {REP_MS} ms)",
               "cpu": "wall-clock medians on the CPU: a dry run of the measuring loop, not a measurement"}


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gpu_ms(fn: Callable) -> float:
    from triton.testing import do_bench
    torch.cuda.synchronize()
    ms = do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")
    torch.cuda.synchronize()
    return float(ms)


def wall_ms(fn: Callable, reps: int = 3) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def timer_for(device: torch.device) -> Callable[[Callable], float]:
    return gpu_ms if device.type == "cuda" else wall_ms


def copy_ms(nbytes: int, device: torch.device, timer: Callable[[Callable], float]) -> float:
    """A device-to-device copy moving `nbytes` (half read, half written): the bandwidth ceiling."""
    src = torch.empty(max(nbytes // 2, 1), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return timer(lambda: dst.copy_(src))


def tb_per_s(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e12


def tflop_per_s(flops: int, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12
