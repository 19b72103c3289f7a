"""flash_attention's warp-group backward (kernels/flash_attention_bwd_warp_groups.py) without a GPU: which calls the
operator gives it (bwd_warp_groups_applies), and the kernel without dropout on both interpreters against the torch
reference (its example, which the every-kernel tests run, has dropout)."""
import pytest
import torch

import tle
from tle.kernels import flash_attention as fa
from tle.kernels.attention_parts import Scores
from tle.kernels.flash_attention_bwd_warp_groups import bwd_warp_groups_launch, flash_attention_bwd_warp_groups_kernel
from tle.examples import compare_outputs
from tilelang_oracle import interpret_launch

CAUSAL, FULL = (None, 0), (None, None)


@pytest.mark.parametrize("d, window, extra, taken", [
    (128, CAUSAL, {}, True),
    (128, FULL, {}, True),
    (64, FULL, {}, True),
    (64, CAUSAL, {}, False),                          # measured slower than the two kernels
    (256, FULL, {}, False),
    (128, FULL, dict(dropout_p=0.1), True),
    (64, FULL, dict(dropout_p=0.1), True),
    (128, CAUSAL, dict(dropout_p=0.1), False),        # dropout with the causal mask: measured slower
    (128, (16, 0), {}, False),                        # a window beyond the causal mask
    (128, FULL, dict(softcap=30.0), False),
    (128, FULL, dict(bias=torch.zeros(1, 1, 1, 1)), False),
])
def test_which_calls_take_it(d, window, extra, taken):
    sc = Scores(window=window, **extra)
    assert fa.bwd_warp_groups_applies(d, "tilelang", sm90=True, scores=sc) == taken
    assert not fa.bwd_warp_groups_applies(d, "tilelang", sm90=False, scores=sc)
    assert not fa.bwd_warp_groups_applies(d, "triton", sm90=True, scores=sc)
    assert not fa.bwd_warp_groups_applies(d, "tilelang", sm90=True, scores=sc, varlen=True)


def test_deterministic_algorithms_refuse_it():
    torch.use_deterministic_algorithms(True)
    try:
        assert not fa.bwd_warp_groups_applies(128, "tilelang", sm90=True, scores=Scores(window=CAUSAL))
    finally:
        torch.use_deterministic_algorithms(False)


def _check(launch):
    errors = compare_outputs(launch)
    assert errors and all(e == e for e in errors.values()), errors


def test_triton_without_dropout():
    launch = bwd_warp_groups_launch("cpu", "small", dropout_p=0.0)
    assert launch.kwargs["DROPOUT"] is False
    flash_attention_bwd_warp_groups_kernel[launch.grid](*launch.args, backend="triton", **launch.kwargs)
    _check(launch)


@pytest.mark.skipif(tle.available_backends().get("tilelang") is not None, reason="TileLang backend unavailable")
def test_tilelang_without_dropout():
    launch = bwd_warp_groups_launch("cpu", "small", dropout_p=0.0)
    interpret_launch(flash_attention_bwd_warp_groups_kernel, launch)
    _check(launch)
