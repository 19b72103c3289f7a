"""`while` loops with runtime conditions: what each backend writes, what the Triton lowering computes
when the condition needs statements of its own, and the errors for what a while loop cannot be."""
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


def test_a_condition_with_statements_runs_again_each_step_on_triton():
    x = torch.randn(64) * 100
    y, steps = torch.empty(64), torch.zeros(1, dtype=torch.int32)
    halve_until_small[(1,)](x, y, steps, 0.75, BLOCK=64, backend="triton")
    ref, ref_steps = _halving_reference(x, 0.75)
    assert int(steps) == ref_steps > 3
    torch.testing.assert_close(y, ref)
    src = halve_until_small.lower(x, y, steps, 0.75, BLOCK=64, grid=(1,), backend="triton").source
    body = src[src.index("while "):]
    # the reduction is written before the loop and once more at the end of the body
    assert src.count("tl.max(") == 2 and body.count("tl.max(") == 1, src


def test_tilelang_refuses_a_condition_that_reads_a_tile():
    x = torch.randn(64)
    with pytest.raises(LoweringError) as e:
        halve_until_small.lower(x, x, torch.zeros(1, dtype=torch.int32), 0.75, BLOCK=64, grid=(1,),
                                backend="tilelang")
    msg = str(e.value)
    import inspect
    lines, start = inspect.getsourcelines(halve_until_small.fn)
    line = start + next(i for i, t in enumerate(lines) if t.lstrip().startswith("while "))
    assert re.search(rf"test_while_loops.py:{line}: \[tilelang\]", msg), msg
    assert "while loop" in msg and "condition" in msg


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
