"""Philox 4x32-10, the counter-based generator every random operator of tle.ops draws from.

Philox (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011) maps a
128-bit counter (four 32-bit words) and a 64-bit key (two words) to four 32-bit words through ten rounds
of two 32x32 -> 64-bit products and xors, the key bumped by the Weyl constants between rounds. The same
counter and key give the same words anywhere: that is what lets the Triton kernel, the TileLang kernel and
the torch code of one operator draw bit-identical bits, and lets a backward pass regenerate a dropout mask
from (seed, offset) instead of storing it.

It is written once in the layer, as `philox4x32_10` (a `@tle.jit` function that kernels call, inlined into
both backends' kernels), and once in torch (`philox4x32_10_torch`, int64 arithmetic kept to 32 bits) for
the torch backends and the tests, which check it against Random123's published known-answer vectors and the
kernel version bit for bit against it.

The stream of an operator (`stream_words`, `stream_words_torch`): element e of a flattened tensor takes
word (e mod 4) of Philox(counter, key) with key = (seed mod 2^32, seed div 2^32 mod 2^32) and
counter = (lo, hi, 0, 0) where lo + 2^32 hi = (offset + e div 4) mod 2^64. It does not depend on how a kernel
tiles the tensor, so a change of tile size never changes the bits. `seed` and `offset` are 64-bit unsigned
(taken modulo 2^64); kernels receive each as two 32-bit words passed as signed int32 (`split_u64`), so the
arguments' types never change with their values and nothing recompiles when they do."""
from __future__ import annotations

import torch
import triton.language as tl

import tle

PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57          # round multipliers
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85          # key increments (golden ratio, sqrt(3) - 1)
ROUNDS = 10
MASK32 = 0xFFFFFFFF


# -- the kernel version --------------------------------------------------------------------------------------
@tle.jit
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of the counter (c0, c1, c2, c3) under the key (k0, k1): uint32 tiles (or scalars) that
    broadcast together; returns the four uint32 words. The high word of each 32x32 product comes from a
    uint64 product shifted down (nvcc and LLVM make one wide multiply of it)."""
    m0 = tl.full([], 0xD2511F53, tl.uint64)
    m1 = tl.full([], 0xCD9E8D57, tl.uint64)
    w0 = tl.full([], 0x9E3779B9, tl.uint32)
    w1 = tl.full([], 0xBB67AE85, tl.uint32)
    for r in tl.static_range(10):
        if r > 0:
            k0 = k0 + w0
            k1 = k1 + w1
        p0 = c0.to(tl.uint64) * m0
        p1 = c2.to(tl.uint64) * m1
        c0, c1, c2, c3 = ((p1 >> 32).to(tl.uint32) ^ c1 ^ k0, p1.to(tl.uint32),
                          (p0 >> 32).to(tl.uint32) ^ c3 ^ k1, p0.to(tl.uint32))
    return c0, c1, c2, c3


@tle.jit
def stream_words(row, col, seed_lo, seed_hi, offset_lo, offset_hi):
    """The stream's words for a tile of [R, 4] elements: element (i, j) is element 4 * row[i] + col[j] of the
    flattened tensor (row: int32 [R], counters relative to the offset; col: int32 [4], 0..3). The seed and
    offset words are int32 scalars holding the uint32 bits (`split_u64`). Philox runs once per row; each
    column takes its word. Returns a uint32 [R, 4] tile."""
    off_lo = offset_lo.to(tl.uint32, bitcast=True)
    lo = off_lo + row.to(tl.uint32)
    hi = offset_hi.to(tl.uint32, bitcast=True) + (lo < off_lo).to(tl.uint32)      # carry into the high word
    zero = tl.zeros_like(lo)
    r0, r1, r2, r3 = philox4x32_10(lo, hi, zero, zero, seed_lo.to(tl.uint32, bitcast=True),
                                   seed_hi.to(tl.uint32, bitcast=True))
    c = col[None, :]
    return tl.where(c == 0, r0[:, None], tl.where(c == 1, r1[:, None], tl.where(c == 2, r2[:, None], r3[:, None])))


@tle.jit
def counter_words(n, w, seed_lo, seed_hi, offset_lo, offset_hi):
    """Word w (0..3) of Philox(counter = offset + n, key = seed) for tiles of counters `n` (int64, relative to
    the offset, below 2^64) and word numbers `w` that broadcast together: streams whose elements are not laid
    out four to a counter along a tile's rows (attention's dropout). Each element's Philox is written out;
    elements whose counters the compiler sees to be equal share one. Returns a uint32 tile."""
    off_lo = offset_lo.to(tl.uint32, bitcast=True)
    lo = off_lo + n.to(tl.uint32)                                    # the low 32 bits of n
    carry = (lo < off_lo).to(tl.uint32)
    hi = offset_hi.to(tl.uint32, bitcast=True) + (n >> 32).to(tl.uint32) + carry
    zero = tl.zeros_like(lo)
    r0, r1, r2, r3 = philox4x32_10(lo, hi, zero, zero, seed_lo.to(tl.uint32, bitcast=True),
                                   seed_hi.to(tl.uint32, bitcast=True))
    return tl.where(w == 0, r0, tl.where(w == 1, r1, tl.where(w == 2, r2, r3)))


# -- the host side -------------------------------------------------------------------------------------------
def split_u64(v: int) -> tuple[int, int]:
    """(low, high) 32-bit words of `v` mod 2^64, each as the int32 with the same bits (kernel arguments)."""
    v &= (1 << 64) - 1

    def s32(w):
        return w - (1 << 32) if w >= (1 << 31) else w
    return s32(v & MASK32), s32(v >> 32)


def _mul_hi_lo(a: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) words of a * m for int64 tensors a holding uint32 values and a uint32 constant m, without
    leaving int64 (m is split into 16-bit halves: every partial product stays below 2^49)."""
    t = a * (m & 0xFFFF)                       # < 2^48
    s = a * (m >> 16) + (t >> 16)              # < 2^49; a * m = s * 2^16 + (t mod 2^16)
    return s >> 16, ((s & 0xFFFF) << 16) | (t & 0xFFFF)


def philox4x32_10_torch(c0, c1, c2, c3, k0, k1) -> tuple[torch.Tensor, ...]:
    """Philox4x32-10 in torch: int64 tensors (or ints) holding uint32 values, counters and keys broadcasting
    together; returns four int64 tensors of uint32 values."""
    c0, c1, c2, c3 = (torch.as_tensor(c, dtype=torch.int64) for c in (c0, c1, c2, c3))
    k0, k1 = (torch.as_tensor(k, dtype=torch.int64, device=c0.device) & MASK32 for k in (k0, k1))
    for r in range(ROUNDS):
        if r > 0:
            k0, k1 = (k0 + PHILOX_W0) & MASK32, (k1 + PHILOX_W1) & MASK32
        hi0, lo0 = _mul_hi_lo(c0, PHILOX_M0)
        hi1, lo1 = _mul_hi_lo(c2, PHILOX_M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def stream_words_torch(numel: int, seed: int, offset: int, device=None) -> torch.Tensor:
    """Words 0 .. numel-1 of the stream of (seed, offset), as int64 values in [0, 2^32), shape [numel]."""
    seed, offset = seed & ((1 << 64) - 1), offset & ((1 << 64) - 1)
    counters = (numel + 3) // 4
    idx = torch.arange(counters, device=device, dtype=torch.int64)
    lo = idx + (offset & MASK32)                        # < 2^33: the carry is bit 32
    hi = (lo >> 32) + (offset >> 32)
    zero = torch.zeros_like(lo)
    words = philox4x32_10_torch(lo & MASK32, hi & MASK32, zero, zero, seed & MASK32, seed >> 32)
    return torch.stack(words, dim=1).reshape(-1)[:numel]
