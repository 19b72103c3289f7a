"""tl.debug_barrier: a program's writes to global memory before it are seen by its reads after it, on both
backends (Triton's own barrier; TileLang's T.sync_threads()), and refused by TileLang in a pipelined loop."""
import pytest
import torch
import triton.language as tl

import tle
from tilelang_oracle import interpret_launch


@tle.jit
def reverse_through_memory(x_ptr, scratch_ptr, y_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(scratch_ptr + i, tl.load(x_ptr + i) * 2)
    tl.debug_barrier()
    tl.store(y_ptr + i, tl.load(scratch_ptr + (N - 1 - i)))


@tle.jit
def barrier_in_pipelined_loop(x_ptr, y_ptr, n, N: tl.constexpr):
    i = tl.arange(0, N)
    acc = tl.zeros([N], tl.float32)
    for start in tl.range(0, n, N, num_stages=2):
        acc += tl.load(x_ptr + start + i)
        tl.debug_barrier()
    tl.store(y_ptr + i, acc)


def _launch():
    x = torch.arange(64, dtype=torch.float32)
    scratch, y = torch.zeros(64), torch.full((64,), float("nan"))
    return tle.Launch(grid=(1,), args=(x, scratch, y), kwargs=dict(N=64), outputs={"y": y},
                      reference=lambda: {"y": x.flip(0) * 2})


def test_triton_writes_the_barrier_and_its_interpreter_runs_it():
    launch = _launch()
    assert "tl.debug_barrier()" in reverse_through_memory.lower(*launch.args, backend="triton", N=64).source
    reverse_through_memory[launch.grid](*launch.args, backend="triton", **launch.kwargs)
    torch.testing.assert_close(launch.outputs["y"], launch.reference()["y"])


def test_tilelang_writes_sync_threads_between_the_store_and_the_load():
    launch = _launch()
    source = reverse_through_memory.lower(*launch.args, backend="tilelang", grid=launch.grid, N=64).source
    store, barrier, load = (source.index(s) for s in ("scratch_ptr[0:64])", "T.sync_threads()", "scratch_ptr[(63 - "))
    assert store < barrier < load, source
    interpret_launch(reverse_through_memory, launch)
    torch.testing.assert_close(launch.outputs["y"], launch.reference()["y"])


def test_tilelang_refuses_a_barrier_in_a_pipelined_loop():
    x, y = torch.zeros(256), torch.zeros(64)
    with pytest.raises(tle.LoweringError, match=r"test_debug_barrier.py:\d+: \[tilelang\].*tl.debug_barrier in a pipelined loop: a block-wide barrier"):
        barrier_in_pipelined_loop.lower(x, y, 256, backend="tilelang", grid=(1,), N=64)
