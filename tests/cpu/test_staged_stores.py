"""Which TileLang stores of a product's tile go through shared memory (lowering/tilelang/staged_stores.py):
a large product tile stored after the kernel's loops does; an element-wise tile, a store inside a loop, a
small tile and a destination whose rows are not contiguous keeps the direct `T.copy` from the fragment. The
staged form computes the same result (TileLang's interpreter on the CPU)."""
import pytest
import torch
import triton.language as tl

import tle
from dot_precision import roundings, sum_bound
from tilelang_oracle import needs_tilelang


@tle.jit
def product_tile(a_ptr, b_ptr, c_ptr, stride_cm, stride_cn, K: tl.constexpr, BM: tl.constexpr,
                 BN: tl.constexpr, BK: tl.constexpr, FORM: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    if FORM == "elementwise":
        a = tl.load(a_ptr + rm[:, None] * BN + rn[None, :])
        tl.store(c_ptrs, (a * 2).to(c_ptr.dtype.element_ty))
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
            acc = tl.dot(a, b, acc)
            if FORM == "in_loop":
                tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty))
        if FORM == "after_loops":
            tl.store(c_ptrs, (acc * 0.5).to(c_ptr.dtype.element_ty))


def _lower(form, bm=64, bn=64, misaligned=False, k=64):
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(bm, bn if form == "elementwise" else k, generator=gen).half()
    b = torch.randn(k, bn, generator=gen).half()
    c = torch.full((bm * bn + 1,), float("nan")).half()
    c = c[1:].view(bm, bn) if misaligned else c[:-1].view(bm, bn)
    return product_tile.lower(a, b, c, c.stride(0), c.stride(1), K=k, BM=bm, BN=bn, BK=32, FORM=form,
                              grid=(1,), backend="tilelang"), (a, b, c)


def _stores(source: str) -> list[str]:
    return [ln.strip() for ln in source.splitlines() if ln.strip().startswith("T.copy(") and "c_ptr" in ln]


def test_a_product_tile_stored_after_the_loops_goes_through_shared_memory():
    lowered, _ = _lower("after_loops")
    src = lowered.source
    (store,) = _stores(src)
    staged = store[len("T.copy("):].split(",")[0]
    assert f"{staged} = T.alloc_shared((64, 64), 'float16')" in src, src
    # the fragment, converted to the stored dtype in registers, is copied whole into the shared buffer
    assert any(ln.strip().startswith("T.copy(") and ln.strip().endswith(f", {staged})") for ln in src.splitlines())
    assert any(how == "T.copy from fragment through shared" for _, op, _, how in lowered.compiled.access_report
               if op == "store")


@pytest.mark.parametrize("form, bm, bn, misaligned, why", [
    ("elementwise", 64, 64, False, "no product: TileLang's own layout already stores whole vectors"),
    ("in_loop", 64, 64, False, "inside a loop, the shared buffer would sit beside the pipelined ones"),
    ("after_loops", 32, 64, False, "fewer than 64x64 elements"),
    ("after_loops", 64, 64, True, "not 16-byte aligned: no bulk store"),
])
def test_other_stores_copy_straight_from_the_fragment(form, bm, bn, misaligned, why):
    lowered, _ = _lower(form, bm, bn, misaligned)
    src = lowered.source
    for store in _stores(src):
        source = store[len("T.copy("):].split(",")[0]
        assert f"{source} = T.alloc_fragment(" in src, (why, store)
    assert all("through shared" not in how for _, _, _, how in lowered.compiled.access_report), why


@needs_tilelang
def test_the_staged_store_computes_the_product():
    lowered, (a, b, c) = _lower("after_loops")
    values = dict(a_ptr=a, b_ptr=b, c_ptr=c, stride_cm=c.stride(0), stride_cn=c.stride(1))
    lowered.compiled.interpret([values[p.name] for p in lowered.kernel.params])
    # the fp32 sum of exact fp16 products, halved, rounded once to fp16: one of the fp16 values around it
    lo, hi = roundings((a.double() @ b.double()) * 0.5, sum_bound(a, b) * 0.5, torch.float16)
    assert bool(((lo <= c) & (c <= hi)).all()), (c.float() - (a.float() @ b.float()) * 0.5).abs().max()
