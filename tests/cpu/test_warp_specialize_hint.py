"""`tl.range(..., warp_specialize=False)` on TileLang: TileLang splits a kernel's warps into producers and consumers by
itself where its pipelined copies allow; the split is a compile setting of the whole kernel there. A loop that asks for
no split has its kernel compiled with tl.disable_warp_specialized (written into the generated module as PASS_CONFIGS);
`True` is TileLang's own choice, dropped with a note; one kernel asking both ways is an error naming the line. On
Triton the hint is Triton's own and is written as it was asked."""
import pytest
import torch
import triton.language as tl

import tle
from tle.lowering.errors import LoweringError
from tilelang_oracle import needs_tilelang, run_on

pytestmark = needs_tilelang


@tle.jit
def summed_products(a_ptr, b_ptr, c_ptr, K: tl.constexpr, SPLIT: tl.constexpr):
    r = tl.arange(0, 64)
    kk = tl.arange(0, 32)
    acc = tl.zeros([64, 64], dtype=tl.float32)
    for k0 in tl.range(0, K, 32, num_stages=2, warp_specialize=SPLIT):
        a = tl.load(a_ptr + r[:, None] * K + k0 + kk[None, :])
        b = tl.load(b_ptr + (k0 + kk[:, None]) * 64 + r[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + r[:, None] * 64 + r[None, :], acc)


@tle.jit
def two_loops(a_ptr, c_ptr, K: tl.constexpr):
    r = tl.arange(0, 64)
    acc = tl.zeros([64], dtype=tl.float32)
    for k0 in tl.range(0, K, 1, warp_specialize=True):
        acc += tl.load(a_ptr + k0 * 64 + r)
    for k0 in tl.range(0, K, 1, warp_specialize=False):
        acc += tl.load(a_ptr + k0 * 64 + r)
    tl.store(c_ptr + r, acc)


def _operands(k=128):
    bf = dict(dtype=torch.bfloat16)
    return torch.randn(64, k, **bf), torch.randn(k, 64, **bf), torch.zeros(64, 64)


def _lower(split, backend="tilelang"):
    a, b, c = _operands()
    return summed_products.lower(a, b, c, K=128, SPLIT=split, grid=(1,), backend=backend)


def test_false_writes_the_kernels_pass_config_and_reports_the_loop():
    lowered = _lower(False)
    assert "PASS_CONFIGS = {'tl.disable_warp_specialized': True}" in lowered.source
    assert any(op == "for" and how == "warp_specialize=False: the kernel compiles with tl.disable_warp_specialized"
               for _, op, _, how in lowered.compiled.access_report)


def test_false_compiles_without_producer_warps_and_true_with_them():
    # the compiled block: 128 threads (4 warps, no producers) against TileLang's split into 256
    assert "__launch_bounds__(128" in _lower(False).stage("cuda")
    assert "__launch_bounds__(256" in _lower(True).stage("cuda")


def test_true_is_tilelangs_own_choice_and_a_note():
    lowered = _lower(True)
    assert "PASS_CONFIGS" not in lowered.source
    assert any("warp_specialize=True" in n and "it splits producer and consumer warps by itself" in n
               for n in lowered.notes)


def test_triton_takes_the_hint_as_written():
    assert "warp_specialize=False" in _lower(False, "triton").source


def test_one_kernel_asking_both_ways_is_refused_at_its_line():
    a, c = torch.zeros(4, 64), torch.zeros(64)
    with pytest.raises(LoweringError, match=r"test_warp_specialize_hint.py:\d+: \[tilelang\] .*"
                                            r"tl.range\(warp_specialize=...\): .*for and against warp specialization"):
        two_loops.lower(a, c, K=4, grid=(1,), backend="tilelang")


@pytest.mark.parametrize("split", [False, True])
def test_both_settings_compute_the_same_products(split):
    a, b, c = _operands()
    run_on("tilelang", summed_products, (1,), a, b, c, K=128, SPLIT=split)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-3)
