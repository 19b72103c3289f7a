"""Tile atomic adds issued as one TMA reduction from shared memory (lowering/tilelang/tma_reductions.py): which
atomics take it (an fp32 add nothing reads, relaxed, over a box masked at most by the tensor's edge, in a warp
group), what the TileLang source says, and the numbers the interpreter of TileLang programs gives (the region's
elements past the tensor dropped, as the hardware drops them), against Triton's interpreter."""
import re

import pytest
import torch
import triton.language as tl

import tle
from tilelang_oracle import run_on

needs_tilelang = pytest.mark.skipif(tle.available_backends().get("tilelang") is not None,
                                    reason="TileLang is not installed")
M, N, K, STEPS = 64, 32, 16, 3


@tle.jit
def add_products(a_ptr, b_ptr, out_ptr, rows_out, limit, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                 HAND_OFF: tl.constexpr, EDGE_MASK: tl.constexpr, HALF: tl.constexpr):
    """Each step, group 0 copies a block of a; the product a_i b is added into the rows [M i, M i + M) of out
    (rows_out rows), masked to the tensor's edge (EDGE_MASK) or to `limit` rows. HAND_OFF: group 1 hands the
    product to group 2 in shared memory, which adds it; else group 1 adds it. HALF: the value added is fp16."""
    rows, cols, ks = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    b_buf = tle.gpu.alloc([K, N], tl.float16)
    tle.gpu.copy(b_ptr + ks[:, None] * N + cols[None, :], b_buf, [K, N])
    part = tle.gpu.alloc([M, N], tl.float32)
    for i in tle.gpu.pipeline(0, STEPS, num_stages=2):
        a_buf = tle.gpu.alloc([M, K], tl.float16)
        r = i * M + rows
        with tle.gpu.warp_group(0, registers=56):
            tle.gpu.copy(a_ptr + r[:, None] * K + ks[None, :], a_buf, [M, K])
        mask = (r < rows_out)[:, None] if EDGE_MASK else (r < limit)[:, None]
        with tle.gpu.warp_group(1, registers=224):
            p = tl.dot(tle.gpu.local_load(a_buf), tle.gpu.local_load(b_buf))
            if HAND_OFF:
                tle.gpu.local_store(part, p)
            elif HALF:
                tl.atomic_add(out_ptr + r[:, None] * N + cols[None, :], p.to(tl.float16), mask=mask, sem="relaxed")
            else:
                tl.atomic_add(out_ptr + r[:, None] * N + cols[None, :], p, mask=mask, sem="relaxed")
        if HAND_OFF:
            with tle.gpu.warp_group(2, registers=56):
                tl.atomic_add(out_ptr + r[:, None] * N + cols[None, :], tle.gpu.local_load(part), mask=mask,
                              sem="relaxed")


def _inputs(rows_out, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(STEPS * M, K, generator=g) / 4).half()
    b = (torch.randn(K, N, generator=g) / 4).half()
    out = torch.randn(rows_out, N, generator=g).to(dtype)
    return a, b, out


def _reference(a, b, out, limit):
    p = (a.double() @ b.double())[:out.shape[0]]
    p[limit:] = 0
    return out.double() + p


def _kwargs(hand_off=False, edge=True, half=False):
    return dict(M=M, N=N, K=K, HAND_OFF=hand_off, EDGE_MASK=edge, HALF=half, num_warps=12 if hand_off else 8)


def _source(rows_out=STEPS * M - 24, **kw):
    a, b, out = _inputs(rows_out, torch.float16 if kw.get("half") else torch.float32)
    low = add_products.lower(a, b, out, rows_out, rows_out - 40, grid=(1,), backend="tilelang", **_kwargs(**kw))
    return low.source, [how for _, op, _, how in low.compiled.access_report if op == "atomic"]


@needs_tilelang
@pytest.mark.parametrize("hand_off", [False, True])
def test_an_fp32_add_over_the_tensor_edge_is_one_tma_reduction(hand_off, tmp_cache):
    src, how = _source(hand_off=hand_off)
    assert how == [how[0]] and how[0].startswith("TMA reduce-add from shared")
    assert "use_tma=True)" in src and "T.atomic_add(out_ptr[" not in src
    if hand_off:        # straight from the hand-off's version: no staging copy
        assert re.search(r"T\.atomic_add\(out_ptr_v\[(i_\d+) \* 64:\1 \* 64 \+ 64, 0:32\], part, use_tma=True\)", src)


@needs_tilelang
@pytest.mark.parametrize("kw", [dict(edge=False), dict(half=True)], ids=["mask-inside-the-tensor", "fp16"])
def test_other_atomics_stay_per_element(kw, tmp_cache):
    src, how = _source(**kw)
    assert "use_tma" not in src and how and all(h.startswith("T.atomic_add per element") for h in how)


@needs_tilelang
@pytest.mark.parametrize("hand_off", [False, True])
@pytest.mark.parametrize("edge", [True, False])
def test_numbers(hand_off, edge, tmp_cache):
    """The last step's box reaches 24 rows past the tensor: the reduction drops them (the interpreter would
    report a write outside the tensor otherwise); out starts non-zero, so an add that overwrote would show."""
    rows_out = STEPS * M - 24
    limit = rows_out if edge else rows_out - 40
    for backend in ("triton", "tilelang"):
        a, b, out = _inputs(rows_out)
        ref = _reference(a, b, out, limit)
        run_on(backend, add_products, (1,), a, b, out, rows_out, limit, **_kwargs(hand_off, edge))
        assert (out.double() - ref).abs().max().item() < 1e-3, backend
