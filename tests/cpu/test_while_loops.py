"""`while` loops with runtime conditions: what each backend writes, what both lowerings compute when the
condition needs statements of its own, and the errors for what a while loop cannot be."""
import re

import pytest
import torch
import triton.language as tl

import tle
from tle.lowering.errors import LoweringError


@tle.jit
def halve_until_small(x_ptr, y_ptr, steps_ptr, limit, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    steps = 0
    while tl.max(tl.abs(x), axis=0) > limit:      # the condition reduces a tile every step
        x = x * 0.5
        steps += 1
    tl.store(y_ptr + offs, x)
    tl.store(steps_ptr, steps)


def _halving_reference(x, limit):
    steps = 0
    while x.abs().max() > limit:
        x, steps = x * 0.5, steps + 1
    return x, steps


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_a_condition_with_statements_runs_again_each_step(backend):
    from tilelang_oracle import run_on
    x = torch.randn(64) * 100
    y, steps = torch.full((64,), float("nan")), torch.full((1,), -1, dtype=torch.int32)
    run_on(backend, halve_until_small, (1,), x, y, steps, 0.75, BLOCK=64)
    ref, ref_steps = _halving_reference(x, 0.75)
    assert int(steps) == ref_steps > 3
    torch.testing.assert_close(y, ref)
    src = halve_until_small.lower(x, y, steps, 0.75, BLOCK=64, grid=(1,), backend=backend).source
    body = src[src.index("while "):]
    # the reduction is written before the loop and once more at the end of the body
    reduce = "tl.max(" if backend == "triton" else "T.reduce_max("
    assert src.count(reduce) == 2 and body.count(reduce) == 1, src
    if backend == "tilelang":
        # the condition's var, tested by the while and written again after the slots
        assert re.search(r"(go\w*) = T\.alloc_var\('bool', init=\((\w+)\[0\] > limit\)\)\n\s+while \1:", src), src
        assert re.search(r"T\.reduce_max\((\w+), (\w+), dim=0\)\n\s+go\w* = \(\2\[0\] > limit\)\n", body), src


@pytest.mark.slow
def test_a_condition_with_statements_compiles_for_sm_90a():
    if tle.available_backends().get("tilelang") is not None:
        pytest.skip("TileLang backend unavailable")
    x = torch.zeros(64)
    lowered = halve_until_small.lower(x, x, torch.zeros(1, dtype=torch.int32), 0.75, BLOCK=64, grid=(1,),
                                      backend="tilelang")
    assert "while (" in lowered.stage("cuda")
    assert ".entry halve_until_small" in lowered.stage("ptx")


@tle.jit
def count_down(n_ptr, out_ptr):
    n = tl.load(n_ptr)
    total = 0
    while n > 0:
        total += n
        n -= 1
    tl.store(out_ptr, total)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_the_ir_and_both_lowerings_of_a_counted_while(backend):
    n, out = torch.tensor([5], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    lowered = count_down.lower(n, out, grid=(1,), backend=backend)
    assert "while (" in lowered.ir and "} do (" in lowered.ir
    assert re.search(r"^\s+while \(?n(_\d+)? > 0\)?:$", lowered.source, re.M), lowered.source
    if backend == "triton":
        count_down[(1,)](n, out, backend="triton")
        assert int(out) == 15


@tle.jit
def constant_condition(x_ptr):
    i = 0
    while True:
        i += 1
    tl.store(x_ptr, i)


@tle.jit
def tile_condition(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    while x > 0:
        x = x - 1.0
    tl.store(x_ptr + tl.arange(0, BLOCK), x)


@tle.jit
def while_else(x_ptr):
    i = tl.load(x_ptr)
    while i > 0:
        i -= 1
    else:
        i = 3
    tl.store(x_ptr, i)


@tle.jit
def changing_type(x_ptr):
    i = tl.load(x_ptr)
    acc = tl.zeros([4], dtype=tl.float32)
    while i > 0:
        acc = tl.zeros([8], dtype=tl.float32)
        i -= 1
    tl.store(x_ptr + tl.arange(0, 8), acc)


@pytest.mark.parametrize("kernel, args, match", [
    (constant_condition, lambda: (torch.zeros(1, dtype=torch.int32),), r"runtime scalar .*constant True"),
    (tile_condition, lambda: (torch.zeros(16),), r"must be a scalar, not a"),
    (while_else, lambda: (torch.zeros(1, dtype=torch.int32),), r"while \.\.\. else is not supported"),
    (changing_type, lambda: (torch.zeros(8),), r"loop-carried variable 'acc' has type"),
])
@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_while_errors_name_the_loop(kernel, args, match, backend):
    kw = {"BLOCK": 16} if kernel is tile_condition else {}
    with pytest.raises(LoweringError, match=match) as e:
        kernel.lower(*args(), grid=(1,), backend=backend, **kw)
    assert "test_while_loops.py:" in str(e.value)
