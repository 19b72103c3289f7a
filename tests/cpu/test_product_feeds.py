"""A tile loaded only to be made, element by element, into a product's operand is read inside that expression
on TileLang (lowering/tilelang/product_feeds.py), with no fragment of its own: TileLang would lay such a fragment
out replicated over the threads of a row. Checked on the lowering's report and source, and on its result (the
interpreter of TileLang programs, against torch). A tile with a second use keeps its own buffer; so does one
whose expression broadcasts a vector that nothing else lays out over all the threads (the expression's loop
would run on part of the threads, with its barrier inside that branch)."""
import re

import pytest
import torch
import triton.language as tl

import tle
from tilelang_oracle import needs_tilelang, run_on

pytestmark = needs_tilelang
READ_INSIDE = "read inside the element-wise expression that makes a product's operand"
PLAIN, KEEP, SCALED = "plain", "keep", "scaled"


@tle.jit
def decayed_product(q_ptr, g_ptr, x_ptr, r_ptr, y_ptr, q_out_ptr, r_out_ptr, n, R: tl.constexpr, C: tl.constexpr,
                    KEEP: tl.constexpr, SCALED: tl.constexpr):
    """y = (q exp(g))^T x over the first n rows; with KEEP, q is also stored (a second use); with SCALED, r is
    stored scaled by exp(g) too (a fragment of r's that exp(g) is laid out by)."""
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
    if SCALED:
        r = tl.load(r_ptr + at)
        tl.store(r_out_ptr + at, r * tl.exp(g)[:, None])


def _args(n=29, r=32, c=16):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(r, c, generator=gen).to(torch.bfloat16)
    g = torch.nn.functional.logsigmoid(torch.randn(r, generator=gen))
    x = torch.randn(r, c, generator=gen)
    rr = torch.randn(r, c, generator=gen)
    return (q, g, x, rr, torch.full((c, c), float("nan")), torch.zeros(r, c, dtype=torch.bfloat16),
            torch.zeros(r, c), n)


def _flags(mode):
    return dict(R=32, C=16, KEEP=mode == KEEP, SCALED=mode == SCALED)


@pytest.mark.parametrize("mode", [PLAIN, KEEP, SCALED])
def test_the_feed_is_read_where_it_is_used(mode):
    lowered = decayed_product.lower(*_args(), **_flags(mode), grid=(1,), backend="tilelang")
    inside = [how for _, op, _, how in lowered.compiled.access_report if op == "load" and READ_INSIDE in how]
    # only in SCALED does a fragment of a full tile (r's) lay out exp(g), the vector q's expression broadcasts
    assert len(inside) == (1 if mode == SCALED else 0)
    assert ("q = T.alloc_" in lowered.source) == (mode != SCALED)


def test_a_vector_nothing_lays_out_keeps_the_feed_in_a_fragment():
    """Read inside, q's expression would take the layout of g's fragment, one row a thread: TileLang would run
    it on 32 of the 128 threads."""
    lowered = decayed_product.lower(*_args(), **_flags(PLAIN), grid=(1,), backend="tilelang")
    assert re.search(r"q\[i0, i1\] = T.if_then_else\(.*q_ptr\[", lowered.source)


@pytest.mark.parametrize("mode", [PLAIN, KEEP, SCALED])
def test_the_product_matches_torch(mode):
    q, g, x, r, y, q_out, r_out, n = _args()
    run_on("tilelang", decayed_product, (1,), q, g, x, r, y, q_out, r_out, n, **_flags(mode))
    ok = (torch.arange(32) < n)[:, None]
    qd = torch.where(ok, q.float() * g.exp()[:, None], 0.0)
    ref = qd.T.double() @ x.double()
    # TF32 operands, as the GPU rounds them: about 2^-10 of the largest magnitude
    assert ((y.double() - ref).abs().max() / ref.abs().max()).item() < 2 ** -7
    if mode == SCALED:
        torch.testing.assert_close(r_out, r * torch.where(ok[:, 0], g, 0.0).exp()[:, None])


@tle.jit
def decayed_products_in_a_loop(q_ptr, g_ptr, x_ptr, r_ptr, y_ptr, r_out_ptr, STEPS: tl.constexpr, R: tl.constexpr,
                               C: tl.constexpr):
    """y += (q_s exp(g_s))^T x_s over STEPS blocks of rows, in a loop pipelined in 3 stages; r is stored scaled
    by exp(g) too (a fragment that lays exp(g) out, as in SCALED above)."""
    rows = tl.arange(0, R)
    cols = tl.arange(0, C)
    acc = tl.zeros([C, C], dtype=tl.float32)
    for s in tl.range(0, STEPS, num_stages=3):
        at = (s * R + rows)[:, None] * C + cols[None, :]
        q = tl.load(q_ptr + at)
        g = tl.load(g_ptr + s * R + rows)
        x = tl.load(x_ptr + at)
        acc += tl.dot(tl.trans(q.to(tl.float32) * tl.exp(g)[:, None]), x)
        tl.store(r_out_ptr + at, tl.load(r_ptr + at) * tl.exp(g)[:, None])
    tl.store(y_ptr + cols[:, None] * C + cols[None, :], acc)


def test_a_feed_in_a_pipelined_loop_keeps_its_fragment():
    """There TileLang would keep the operand's fp32 tile once per stage (it is written from global memory)."""
    q, x = torch.zeros(96, 16, dtype=torch.bfloat16), torch.zeros(96, 16)
    lowered = decayed_products_in_a_loop.lower(q, torch.zeros(96), x, x, torch.zeros(16, 16), x.clone(), STEPS=3,
                                               R=32, C=16, grid=(1,), backend="tilelang")
    assert "T.Pipelined" in lowered.source
    assert not any(READ_INSIDE in how for _, op, _, how in lowered.compiled.access_report if op == "load")
