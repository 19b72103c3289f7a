"""A tile loaded only to be made, element by element, into a product's operand is read inside that expression
on TileLang (lowering/tilelang/product_feeds.py), with no fragment of its own: TileLang would lay such a fragment
out replicated over the threads of a row. Checked on the lowering's report and source, and on its result (the
interpreter of TileLang programs, against torch); a tile with a second use keeps its own buffer."""
import pytest
import torch
import triton.language as tl

import tle
from tilelang_oracle import needs_tilelang, run_on

pytestmark = needs_tilelang
READ_INSIDE = "read inside the element-wise expression that makes a product's operand"


@tle.jit
def decayed_product(q_ptr, g_ptr, x_ptr, y_ptr, q_out_ptr, n, R: tl.constexpr, C: tl.constexpr,
                    KEEP: tl.constexpr):
    """y = (q exp(g))^T x over the first n rows; with KEEP, q is also stored (a second use)."""
    rows = tl.arange(0, R)
    cols = tl.arange(0, C)
    ok = rows < n
    at = rows[:, None] * C + cols[None, :]
    q = tl.load(q_ptr + at, mask=ok[:, None], other=0.0)
    g = tl.load(g_ptr + rows, mask=ok, other=0.0)
    qd = q.to(tl.float32) * tl.exp(g)[:, None]
    x = tl.load(x_ptr + at)
    tl.store(y_ptr + cols[:, None] * C + cols[None, :], tl.dot(tl.trans(qd), x))
    if KEEP:
        tl.store(q_out_ptr + at, q)


def _args(n=29, r=32, c=16):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(r, c, generator=gen).to(torch.bfloat16)
    g = torch.nn.functional.logsigmoid(torch.randn(r, generator=gen))
    x = torch.randn(r, c, generator=gen)
    return q, g, x, torch.full((c, c), float("nan")), torch.zeros(r, c, dtype=torch.bfloat16), n


@pytest.mark.parametrize("keep", [False, True])
def test_the_feed_is_read_where_it_is_used(keep):
    q, g, x, y, q_out, n = _args()
    lowered = decayed_product.lower(q, g, x, y, q_out, n, R=32, C=16, KEEP=keep, grid=(1,), backend="tilelang")
    inside = [how for _, op, _, how in lowered.compiled.access_report if op == "load" and READ_INSIDE in how]
    assert len(inside) == (0 if keep else 1)
    # q has a buffer of its own only where something else reads it
    assert ("q = T.alloc_" in lowered.source) == keep


@pytest.mark.parametrize("keep", [False, True])
def test_the_product_matches_torch(keep):
    q, g, x, y, q_out, n = _args()
    run_on("tilelang", decayed_product, (1,), q, g, x, y, q_out, n, R=32, C=16, KEEP=keep)
    ok = (torch.arange(32) < n)[:, None]
    qd = torch.where(ok, q.float() * g.exp()[:, None], 0.0)
    ref = qd.T.double() @ x.double()
    # TF32 operands, as the GPU rounds them: about 2^-10 of the largest magnitude
    assert ((y.double() - ref).abs().max() / ref.abs().max()).item() < 2 ** -7
