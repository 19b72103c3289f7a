"""Triton's own decorators over @tle.jit, as over @triton.jit: `triton.autotune` (configs, key, grid
functions of the chosen meta-parameters) and `triton.heuristics`. Run here in Triton's interpreter; the
GPU suite runs them on both backends."""
import pytest
import torch
import triton
import triton.language as tl

import tle
from tle.errors import LaunchError


@tle.jit
def _scale(x, y, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=m) * alpha, mask=m)


_scale_blocks: list[int] = []       # the BLOCK of each launch, recorded by the configs' pre_hook


def _record_block(kwargs):
    _scale_blocks.append(kwargs["BLOCK"])


def _timings(by_block):
    """A do_bench for triton.autotune: runs the call once and reports a made-up time for its BLOCK."""
    calls = []

    def do_bench(kernel_call, quantiles=None):
        kernel_call()
        calls.append(_scale_blocks[-1])
        t = by_block[_scale_blocks[-1]]
        return [t, t, t] if quantiles else t
    return do_bench, calls


def test_autotune_picks_the_fastest_config_and_launches_with_it():
    do_bench, calls = _timings({16: 3.0, 64: 1.0, 128: 2.0})
    configs = [triton.Config({"BLOCK": b}, num_warps=w, pre_hook=_record_block) for b, w in ((16, 1), (64, 2), (128, 4))]
    tuned = triton.autotune(configs=configs, key=["n"], do_bench=do_bench)(_scale)
    x = torch.randn(300)
    y = torch.full_like(x, float("nan"))
    tuned[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, y, x.numel(), 2.0)
    assert len(calls) == 3
    assert tuned.best_config.kwargs == {"BLOCK": 64} and tuned.best_config.num_warps == 2
    torch.testing.assert_close(y, 2 * x)
    y.fill_(float("nan"))
    _scale_blocks.clear()
    tuned[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, y, x.numel(), 3.0)      # same key: no tuning
    assert len(calls) == 3 and _scale_blocks == [64]
    torch.testing.assert_close(y, 3 * x)


def test_heuristics_fill_a_constexpr_from_the_arguments():
    tuned = triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"])})(_scale)
    x = torch.randn(100)
    y = torch.full_like(x, float("nan"))
    lowered = tuned[(1,)](x, y, x.numel(), -1.0)
    assert "BLOCK=128" in lowered.source
    torch.testing.assert_close(y, -x)


def test_run_with_warmup_lowers_without_launching():
    x = torch.randn(64)
    y = torch.full_like(x, float("nan"))
    lowered = _scale.run(x, y, 64, 2.0, BLOCK=64, grid=(1,), warmup=True)
    assert "tl.store" in lowered.source and torch.isnan(y).all()


@pytest.mark.parametrize("option, value", [("num_ctas", 2), ("maxnreg", 128)])
def test_triton_launch_options_tle_cannot_take_are_errors(option, value):
    x = torch.randn(64)
    with pytest.raises(LaunchError, match=rf"_scale: {option}={value} is not supported"):
        _scale[(1,)](x, x, 64, 1.0, BLOCK=64, **{option: value})
    _scale[(1,)](x, x, 64, 1.0, BLOCK=64, num_ctas=1, maxnreg=None)     # the defaults are fine


@tle.jit
def _staged_copy(x, y, n, BLOCK: tl.constexpr, num_stages: tl.constexpr):
    # a parameter named like a launch option, as in Triton's fused-softmax tutorial
    for start in tl.range(0, n, BLOCK, num_stages=num_stages):
        offs = start + tl.arange(0, BLOCK)
        tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


def test_a_parameter_named_like_a_launch_option_is_the_kernels_constexpr():
    x = torch.randn(100)
    y = torch.full_like(x, float("nan"))
    lowered = _staged_copy[(1,)](x, y, 100, BLOCK=32, num_stages=2)
    assert "num_stages=2" in lowered.source and "launch: num_warps=4, num_stages=2" in lowered.source
    torch.testing.assert_close(y, x)
    lowered = _staged_copy[(1,)](x, y, 100, 32, 1)               # by position: the constexpr only
    assert "tl.range(0, n, 32, num_stages=1)" in lowered.source
