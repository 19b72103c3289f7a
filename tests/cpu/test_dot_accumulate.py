"""`acc += tl.dot(a, b)` accumulates into acc on TileLang (T.gemm into the accumulator's fragment), as
Triton's compiler makes it; a dot whose result is read elsewhere too is left as written."""
import pytest
import torch
import triton.language as tl

import tle
from dot_precision import sum_bound
from tilelang_oracle import needs_tilelang


@tle.jit
def add_of_dots(a_ptr, b_ptr, c_ptr, d_ptr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr, TWICE: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    seen = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        if TWICE:
            d = tl.dot(a, b)
            acc += d
            seen = tl.maximum(seen, d)          # the product is read twice: not folded
        else:
            acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)
    tl.store(d_ptr + rm[:, None] * BN + rn[None, :], seen)


def _args():
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(32, 64, generator=gen).half()
    b = torch.randn(64, 32, generator=gen).half()
    return a, b, torch.full((32, 32), float("nan")), torch.full((32, 32), float("nan"))


@pytest.mark.parametrize("twice", [False, True])
def test_the_add_becomes_the_dots_accumulator_only_where_nothing_else_reads_the_dot(twice):
    a, b, c, d = _args()
    src = add_of_dots.lower(a, b, c, d, K=64, BM=32, BN=32, BK=32, TWICE=twice, grid=(1,),
                            backend="tilelang").source
    gemms = [ln.strip() for ln in src.splitlines() if "T.gemm(" in ln]
    assert len(gemms) == 1
    assert gemms[0].endswith(", acc)") != twice, src


@needs_tilelang
@pytest.mark.parametrize("twice", [False, True])
def test_both_forms_compute_the_sum_of_products(twice):
    a, b, c, d = _args()
    add_of_dots.interpret_tilelang((1,), a, b, c, d, K=64, BM=32, BN=32, BK=32, TWICE=twice)
    # fp16 products are exact: only the fp32 sums' rounding separates c from the exact product
    _within(c, a.double() @ b.double(), sum_bound(a, b))
    if twice:
        parts = [(a[:, s].double() @ b[s].double(), sum_bound(a[:, s], b[s])) for s in (slice(0, 32), slice(32, 64))]
        _within(d, torch.stack([p for p, _ in parts]).amax(0).clamp(min=0), torch.maximum(*[t for _, t in parts]))


def _within(got, want, tol):
    err = (got.double() - want).abs()
    assert bool((err <= tol).all()), f"max error {err.max().item():.3g}, by {(err - tol).max().item():.3g} past its bound"
