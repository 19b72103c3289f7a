"""tle.ops.sample and tle.ops.top_k_top_p_mask on the GPU, both kernel backends: no token outside the kept set
over many seeds (against the sort-based thresholds), the draws' distribution (a chi-square test on a small
vocabulary, 10^6 draws), the same tokens as the torch backend (so on every backend) for one seed, temperature
0 as argmax, the mask equal to the torch backend's but for columns at the top-p boundary within fp32
rounding."""
import math

import pytest
import torch

import tle.ops
from tle.kernels import sampling_torch

BACKENDS = ("triton", "tilelang")
FILTERS = [dict(top_k=50), dict(top_p=0.9), dict(top_k=50, top_p=0.9), dict(top_k=1000, top_p=0.95, min_p=0.02),
           dict(top_p=0.999), dict()]


def kept_threshold(logits, temperature, top_k=None, top_p=None, min_p=None):
    rows, cols = logits.shape
    y = sampling_torch.scaled(logits, torch.full((rows,), 1.0 / temperature, device=logits.device))
    k = torch.full((rows,), top_k or cols, device=logits.device, dtype=torch.int32)
    p = torch.full((rows,), top_p or 1.0, device=logits.device)
    tau = sampling_torch.thresholds(y, k, p)
    if min_p:
        tau = torch.maximum(tau, y.max(-1, keepdim=True).values + math.log(min_p))
    return y, tau


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("cols, scale", [(32000, 4.0), (131072, 1.0), (262144, 8.0)])
def test_never_outside_the_kept_set(backend, dtype, cols, scale):
    torch.manual_seed(0)
    logits = (torch.randn(64, cols, device="cuda") * scale).to(dtype)
    for filters in FILTERS:
        y, tau = kept_threshold(logits, 0.8, **filters)
        for seed in range(10):
            tokens = tle.ops.sample(logits, 0.8, seed=seed, backend=backend, **filters)
            inside = y.gather(1, tokens[:, None]) >= tau
            assert bool(inside.all()), f"{filters} seed {seed}: {int((~inside).sum())} tokens outside the kept set"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("filters", [dict(top_k=10), dict(top_p=0.8), dict(top_k=12, top_p=0.9, min_p=0.05)],
                         ids=str)
def test_distribution_matches_the_renormalized_probabilities(backend, filters):
    """10^6 draws of one row of 40 logits (each row its own element of the stream): chi-square against
    softmax over the kept set, at significance 10^-4 (a fixed seed: the test is deterministic)."""
    torch.manual_seed(1)
    row = torch.randn(40, device="cuda") * 1.5
    n = 10**6
    logits = row.expand(n, 40).contiguous()
    tokens = tle.ops.sample(logits, 1.0, seed=2024, backend=backend, **filters)
    y, tau = kept_threshold(row[None], 1.0, **filters)
    kept = (y >= tau)[0]
    probs = torch.where(kept, torch.softmax(y[0].double(), -1), 0.0)
    probs /= probs.sum()
    counts = torch.bincount(tokens, minlength=40).double()
    assert float(counts[~kept].sum()) == 0.0
    expected = probs[kept] * n
    chi2 = float(((counts[kept] - expected) ** 2 / expected).sum())
    dof = int(kept.sum()) - 1
    # the chi-square quantile at 1 - 10^-4 (Wilson-Hilferty)
    z = 3.719
    bound = dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3
    assert chi2 < bound, f"chi-square {chi2:.1f} over {dof} degrees of freedom (bound {bound:.1f})"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_same_tokens_as_the_torch_backend(backend, dtype):
    """bf16 logits: every row; fp32: all but the rows where the two backends' fp32 sums (in different orders)
    put a boundary of the top-p set or of a column's share on different sides (at most 2 of 128 here)."""
    torch.manual_seed(2)
    logits = (torch.randn(128, 131072, device="cuda") * 4).to(dtype)
    allowed = 0 if dtype == torch.bfloat16 else 2
    for filters in FILTERS:
        got = tle.ops.sample(logits, 0.9, seed=99, backend=backend, **filters)
        ref = tle.ops.sample(logits, 0.9, seed=99, backend="torch", **filters)
        differ = int((got != ref).sum())
        assert differ <= allowed, f"{filters}: {backend} differs from torch in {differ} of 128 rows"


def near_the_top_p_boundary(row, top_k, top_p, columns, rel=1e-5):
    """Do all `columns` of `row` sit where the running mass of the sorted top-k set passes top_p times its mass
    within `rel` of that mass (fp64)?"""
    v, order = row.double().sort(descending=True)
    e = torch.exp(v - v[0])
    in_k = v >= (v[top_k - 1] if top_k else -torch.inf)
    cum = torch.where(in_k, e, 0).cumsum(0)
    target = top_p * cum[-1]
    position = torch.empty_like(order)
    position[order] = torch.arange(len(order), device=row.device)
    for c in columns.tolist():
        i = int(position[c])
        before = cum[i - 1] if i else torch.zeros((), dtype=cum.dtype, device=cum.device)
        if min(abs(before - target), abs(cum[i] - target)) > rel * cum[-1]:
            return False
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_temperature_zero_is_argmax(backend):
    torch.manual_seed(3)
    logits = torch.randn(64, 50000, device="cuda")
    logits[5, 100] = logits[5, 200] = logits[5].max() + 1            # the first of two equal maxima
    tokens = tle.ops.sample(logits, 0.0, top_k=5, top_p=0.5, seed=1, backend=backend)
    assert torch.equal(tokens, logits.argmax(-1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_mask_matches_torch(backend, dtype):
    torch.manual_seed(4)
    logits = (torch.randn(128, 131072, device="cuda") * 4).to(dtype)
    for filters in [dict(top_k=50), dict(top_p=0.9), dict(top_k=50, top_p=0.9), dict(top_k=5000, top_p=0.99)]:
        got = tle.ops.top_k_top_p_mask(logits, backend=backend, **filters)
        ref = tle.ops.top_k_top_p_mask(logits, backend="torch", **filters)
        assert torch.equal(got[~got.isinf()], logits[~got.isinf()])
        differ = got.isinf() != ref.isinf()
        for r in differ.any(-1).nonzero()[:, 0].tolist():
            # fp32 sums in another order: only a column at the top-p boundary may fall on the other side
            assert filters.get("top_p") and near_the_top_p_boundary(
                logits[r], filters.get("top_k"), filters["top_p"], differ[r].nonzero()[:, 0]), \
                f"{filters}: row {r} keeps {int((~got[r].isinf()).sum())} columns, torch {int((~ref[r].isinf()).sum())}"
