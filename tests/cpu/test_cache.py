"""Caches: a kernel lowered twice for the same key is lowered once; generated sources land in
TLE_CACHE_DIR; processes that lower the same kernel at the same time do not trip over each other."""
import glob
import os
import subprocess
import sys

import pytest
import torch
import triton.language as tl

import tle

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def fresh_kernel():
    """A new Kernel object each time, so that no earlier test has filled its in-memory cache."""
    return tle.jit(_double)


def test_same_key_hits_the_in_memory_cache(tmp_cache):
    k = fresh_kernel()
    x = torch.empty(100, device="meta")
    first = k.lower(x, x, 100, BLOCK=64, backend="triton")
    assert k.lower(x, x, 100, BLOCK=64, backend="triton") is first
    assert k.lower(x, x, 100, BLOCK=128, backend="triton") is not first      # another constexpr
    assert k.lower(x.half(), x.half(), 100, BLOCK=64, backend="triton") is not first   # another dtype
    # a launch with the same key reuses it too (the interpreter runs on CPU tensors)
    xc, yc = torch.arange(100.0), torch.zeros(100)
    assert k[(2,)](xc, yc, 100, BLOCK=64, backend="triton") is first
    torch.testing.assert_close(yc, xc * 2)


def test_generated_source_is_written_under_cache_dir(tmp_cache):
    k = fresh_kernel()
    x = torch.empty(100, device="meta")
    lowered = k.lower(x, x, 100, BLOCK=64, backend="triton")
    files = glob.glob(os.path.join(str(tmp_cache), "**", "*.py"), recursive=True)
    assert files, f"nothing written under {tmp_cache}"
    contents = []
    for f in files:
        with open(f) as fh:
            contents.append(fh.read())
    assert lowered.source in contents


def _run_at_once(code: str, env: dict, n: int) -> list[str]:
    """Start `n` Python processes running `code` together; all must succeed. Their stdouts."""
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    results = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err[-2000:]
    return [out.strip() for out, _ in results]


CHILD = r"""
import os, sys, hashlib, torch
import tle
from tle.cli import poison
from tle.examples import compare_outputs
from tle.kernels.softmax import softmax_kernel
launch = softmax_kernel.example("cpu", "small")
poison(launch)
lowered = softmax_kernel[launch.grid](*launch.args, backend="triton", **launch.kwargs)
compare_outputs(launch)
print(hashlib.sha256(lowered.source.encode()).hexdigest())
"""


@pytest.mark.slow
def test_concurrent_processes_lower_the_same_kernel(tmp_cache):
    env = dict(os.environ, TLE_CACHE_DIR=str(tmp_cache), TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    outputs = _run_at_once(CHILD, env, 4)
    assert len(set(outputs)) == 1                                  # the same source everywhere
    written = glob.glob(os.path.join(str(tmp_cache), "**", "softmax_kernel_*.py"), recursive=True)
    assert len(written) == 1                                       # content-addressed: one file
    leftovers = glob.glob(os.path.join(str(tmp_cache), "**", ".tmp-*"), recursive=True)
    assert not leftovers                                           # atomic writes leave no temporaries


CHILD_TILELANG = r"""
import hashlib
from tle.kernels.softmax import softmax_kernel
launch = softmax_kernel.example("cpu", "small")
lowered = softmax_kernel.lower(*launch.args, grid=launch.grid, backend="tilelang", **launch.kwargs)
print(hashlib.sha256(lowered.stage("cuda").encode()).hexdigest())
"""


@pytest.mark.slow
def test_concurrent_processes_compile_the_same_tilelang_kernel(tmp_cache):
    # TileLang's binary cache goes under TLE_CACHE_DIR when TILELANG_CACHE_DIR is not set
    env = {k: v for k, v in os.environ.items() if k != "TILELANG_CACHE_DIR"}
    env.update(TLE_CACHE_DIR=str(tmp_cache),
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    outputs = _run_at_once(CHILD_TILELANG, env, 3)
    assert len(set(outputs)) == 1                                  # the same CUDA source everywhere
    assert glob.glob(os.path.join(str(tmp_cache), "tilelang", "**", "*.cu"), recursive=True)
