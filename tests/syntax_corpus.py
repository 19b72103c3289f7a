"""Kernels in plain Triton syntax beyond the project's own operators: odd shapes and masks, loops with
carried values, branches, gathers through loaded indices, atomics, integer semantics, helpers.

Each case builds a `tle.Launch` on a device; the CPU tests run them through the Triton interpreter and
compile their TileLang lowering, the GPU tests run both backends against the torch reference.
"""
from __future__ import annotations

import torch
import triton.language as tl

import tle

CASES = {}   # name -> (kernel, make(device) -> tle.Launch)


def case(kernel):
    def deco(fn):
        CASES[fn.__name__] = (kernel, fn)
        return fn
    return deco


def _nan_like(t):
    return torch.full_like(t, float("nan")) if t.is_floating_point() else torch.full_like(t, -7)


# -- 2-D masked copy with odd shape and a strided (transposed-storage) input ----------------------------
@tle.jit
def scale_2d(x_ptr, y_ptr, M, N, sxm, sxn, sym, syn, alpha, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0)
    tl.store(y_ptr + rm[:, None] * sym + rn[None, :] * syn, x * alpha + 1.0, mask=mask)


@case(scale_2d)
def odd_2d_masked(device):
    x = torch.randn(77, 45, device=device)
    y = _nan_like(x)
    return tle.Launch(grid=(3, 3), args=(x, y, 77, 45, 45, 1, 45, 1, 0.5), kwargs=dict(BM=32, BN=16),
                      outputs={"y": y}, reference=lambda: {"y": x * 0.5 + 1.0})


@case(scale_2d)
def transposed_input(device):
    base = torch.randn(45, 77, device=device)
    x = base.t()                               # (77, 45) with strides (1, 77): innermost is not unit
    y = torch.full((77, 45), float("nan"), device=device)
    return tle.Launch(grid=(3, 3), args=(x, y, 77, 45, x.stride(0), x.stride(1), 45, 1, 2.0),
                      kwargs=dict(BM=32, BN=16), outputs={"y": y}, reference=lambda: {"y": x * 2.0 + 1.0})


# -- gather through loaded indices ----------------------------------------------------------------------
@tle.jit
def gather_rows(x_ptr, idx_ptr, out_ptr, n_idx, D, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    ri = pid * BLOCK_I + tl.arange(0, BLOCK_I)
    rd = tl.arange(0, BLOCK_D)
    idx = tl.load(idx_ptr + ri, mask=ri < n_idx, other=0)
    mask = (ri[:, None] < n_idx) & (rd[None, :] < D)
    rows = tl.load(x_ptr + idx[:, None] * D + rd[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + ri[:, None] * D + rd[None, :], rows, mask=mask)


@case(gather_rows)
def gather(device):
    x = torch.randn(50, 24, device=device)
    idx = torch.randint(0, 50, (37,), device=device, dtype=torch.int32)
    out = torch.full((37, 24), float("nan"), device=device)
    return tle.Launch(grid=(3,), args=(x, idx, out, 37, 24), kwargs=dict(BLOCK_I=16, BLOCK_D=32),
                      outputs={"out": out}, reference=lambda: {"out": x[idx.long()]})


# -- atomics --------------------------------------------------------------------------------------------
@tle.jit
def histogram(x_ptr, hist_ptr, n, BINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.atomic_add(hist_ptr + v % BINS, 1, mask=offs < n)


@case(histogram)
def atomic_histogram(device):
    x = torch.randint(0, 1000, (300,), device=device, dtype=torch.int32)
    hist = torch.zeros(8, device=device, dtype=torch.int32)
    return tle.Launch(grid=(10,), args=(x, hist, 300), kwargs=dict(BINS=8, BLOCK=32),   # 32 < thread count
                      outputs={"hist": hist},
                      reference=lambda: {"hist": torch.bincount((x % 8).long(), minlength=8).int()})


@tle.jit
def row_sum_atomic(x_ptr, out_ptr, M, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
    tl.atomic_add(out_ptr + row, tl.sum(x, axis=0))


@case(row_sum_atomic)
def atomic_scalar(device):
    x = torch.randn(5, 300, device=device)
    out = torch.zeros(5, device=device)
    return tle.Launch(grid=(5, 3), args=(x, out, 5, 300), kwargs=dict(BLOCK_N=128),
                      outputs={"out": out}, reference=lambda: {"out": x.sum(1)},
                      tolerances={"out": (1e-4, 1e-4)})


# -- loops with carried values, branches ---------------------------------------------------------------
@tle.jit
def col_stats(x_ptr, sum_ptr, max_ptr, cnt_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    cols = tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros((BN,), dtype=tl.float32)
    best = tl.full((BN,), float("-inf"), dtype=tl.float32)
    count = 0
    for start in range(0, M, BM):
        rows = start + tl.arange(0, BM)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
        acc += tl.sum(x, axis=0)
        best = tl.maximum(best, tl.max(tl.where(mask, x, float("-inf")), axis=0))
        count += 1
    tl.store(sum_ptr + cols, acc, mask=cols < N)
    tl.store(max_ptr + cols, best, mask=cols < N)
    if tl.program_id(0) == 0:
        tl.store(cnt_ptr, count)


@case(col_stats)
def carried_loop(device):
    x = torch.randn(70, 40, device=device)
    s, mx = torch.full((40,), float("nan"), device=device), torch.full((40,), float("nan"), device=device)
    cnt = torch.full((1,), -1, device=device, dtype=torch.int32)
    return tle.Launch(grid=(3,), args=(x, s, mx, cnt, 70, 40), kwargs=dict(BM=16, BN=16),
                      outputs={"sum": s, "max": mx, "cnt": cnt},
                      reference=lambda: {"sum": x.sum(0), "max": x.max(0).values,
                                         "cnt": torch.tensor([5], dtype=torch.int32)},
                      tolerances={"sum": (1e-4, 1e-4)})


@tle.jit
def branchy(x_ptr, y_ptr, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    if pid % 2 == 0:
        y = x * 2.0
        k = 1
    else:
        y = x - 1.0
        k = 2
    if MODE == "square":
        y = y * y
    tl.store(y_ptr + offs, y + k, mask=offs < n)


@case(branchy)
def runtime_branch(device):
    x = torch.randn(200, device=device)
    y = _nan_like(x)

    def ref():
        blk = torch.arange(200, device=x.device) // 64
        t = torch.where(blk % 2 == 0, x * 2.0, x - 1.0)
        return {"y": t * t + torch.where(blk % 2 == 0, 1.0, 2.0)}
    return tle.Launch(grid=(4,), args=(x, y, 200), kwargs=dict(BLOCK=64, MODE="square"), outputs={"y": y},
                      reference=ref)


@tle.jit
def unrolled(x_ptr, y_ptr, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.static_range(STEPS):
        acc = acc * 0.5 + x * (i + 1)
    tl.store(y_ptr + offs, acc)


@case(unrolled)
def static_range_carried(device):
    x = torch.randn(64, device=device)
    y = _nan_like(x)

    def ref():
        acc = torch.zeros_like(x)
        for i in range(3):
            acc = acc * 0.5 + x * (i + 1)
        return {"y": acc}
    return tle.Launch(grid=(1,), args=(x, y), kwargs=dict(BLOCK=64, STEPS=3), outputs={"y": y}, reference=ref)


# -- reductions -----------------------------------------------------------------------------------------
@tle.jit
def row_argmax(x_ptr, idx_ptr, val_ptr, colsum_ptr, N, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=cols[None, :] < N, other=float("-inf"))
    tl.store(idx_ptr + rows, tl.argmax(x, axis=1))
    tl.store(val_ptr + rows, tl.max(x, axis=1))
    tl.atomic_add(colsum_ptr + cols, tl.sum(tl.where(cols[None, :] < N, x, 0.0), axis=0), mask=cols < N)


@case(row_argmax)
def argmax_rows(device):
    x = torch.randn(32, 50, device=device)
    idx = torch.full((32,), -1, device=device, dtype=torch.int32)
    val = torch.full((32,), float("nan"), device=device)
    colsum = torch.zeros(50, device=device)
    return tle.Launch(grid=(2,), args=(x, idx, val, colsum, 50), kwargs=dict(BM=16, BN=64),
                      outputs={"idx": idx, "val": val, "colsum": colsum},
                      reference=lambda: {"idx": x.argmax(1).int(), "val": x.max(1).values, "colsum": x.sum(0)},
                      tolerances={"colsum": (1e-4, 1e-4)})


# -- integer semantics (truncating // and %), bitwise, math, helpers ----------------------------------
@tle.jit
def _affine_helper(x, a, b):
    return x * a + b


@tle.jit
def int_and_math(a_ptr, b_ptr, q_ptr, r_ptr, bits_ptr, f_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m, other=1)
    b = tl.load(b_ptr + offs, mask=m, other=1)
    tl.store(q_ptr + offs, a // b, mask=m)
    tl.store(r_ptr + offs, a % b, mask=m)
    tl.store(bits_ptr + offs, ((a & 0xFF) | (b << 2)) ^ (a >> 1), mask=m)
    x = a.to(tl.float32) / 7.0
    y = tl.sigmoid(x) + tl.exp2(x * 0.1) + tl.log2(tl.abs(x) + 1.0) + tl.erf(x * 0.3) + tl.sqrt(tl.abs(x))
    y = tl.where(x > 0, y, tl.minimum(y, tl.rsqrt(tl.abs(x) + 2.0)))
    tl.store(f_ptr + offs, _affine_helper(y, 2.0, tl.cdiv(n, BLOCK).to(tl.float32)), mask=m)


@case(int_and_math)
def integer_semantics(device):
    a = torch.randint(-100, 100, (150,), device=device, dtype=torch.int32)
    b = torch.randint(1, 9, (150,), device=device, dtype=torch.int32) * torch.where(
        torch.arange(150, device=device) % 3 == 0, -1, 1).int()
    q, r, bits = (torch.full_like(a, -7) for _ in range(3))
    f = torch.full((150,), float("nan"), device=device)

    def ref():
        x = a.float() / 7.0
        y = torch.sigmoid(x) + torch.exp2(x * 0.1) + torch.log2(x.abs() + 1.0) + torch.erf(x * 0.3) + x.abs().sqrt()
        y = torch.where(x > 0, y, torch.minimum(y, torch.rsqrt(x.abs() + 2.0)))
        return {"q": torch.div(a, b, rounding_mode="trunc").int(), "r": torch.fmod(a, b).int(),
                "bits": ((a & 0xFF) | (b << 2)) ^ (a >> 1), "f": y * 2.0 + 3.0}
    return tle.Launch(grid=(3,), args=(a, b, q, r, bits, f, 150), kwargs=dict(BLOCK=64),
                      outputs={"q": q, "r": r, "bits": bits, "f": f}, reference=ref,
                      tolerances={"f": (1e-4, 1e-4)})


# -- dot with a transposed operand, 2-D grid with num_programs -----------------------------------------
@tle.jit
def abt(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rn[:, None] * K + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0)
        acc = tl.dot(a, tl.trans(b), acc)
    acc = acc * tl.num_programs(1)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@case(abt)
def dot_transposed(device):
    a = (torch.randn(80, 100, device=device) / 10).half()
    b = (torch.randn(70, 100, device=device) / 10).half()
    c = torch.full((80, 70), float("nan"), device=device, dtype=torch.float16)
    return tle.Launch(grid=(2, 2), args=(a, b, c, 80, 70, 100), kwargs=dict(BM=64, BN=64, BK=32),
                      outputs={"c": c}, reference=lambda: {"c": (a.float() @ b.float().t()) * 2})


@tle.jit
def pipelined_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.range(0, tl.cdiv(n, BLOCK), num_stages=3):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


@case(pipelined_sum)
def tl_range_stages(device):
    x = torch.randn(1000, device=device)
    out = torch.full((1,), float("nan"), device=device)
    return tle.Launch(grid=(1,), args=(x, out, 1000), kwargs=dict(BLOCK=128), outputs={"out": out},
                      reference=lambda: {"out": x.sum().reshape(1)}, tolerances={"out": (1e-4, 1e-4)})


@tle.jit
def async_hint(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tle.load(x_ptr + offs, mask=offs < n, other=0.0, is_async=True)
    tl.store(y_ptr + offs, x * 3.0, mask=offs < n)


@case(async_hint)
def tle_load_async(device):
    x = torch.randn(100, device=device)
    y = _nan_like(x)
    return tle.Launch(grid=(2,), args=(x, y, 100), kwargs=dict(BLOCK=64), outputs={"y": y},
                      reference=lambda: {"y": x * 3.0})


# -- a mask that stops one element short of the tile, on a tensor that goes on ----------------------------
@tle.jit
def scaled_prefix(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, x * 2.0, mask=offs < n)


@case(scaled_prefix)
def masked_prefix(device):
    x = torch.randn(128, device=device)
    y = torch.full((128,), -7.0, device=device)     # the last element must keep this value

    def ref():
        out = torch.full((128,), -7.0, device=x.device)
        out[:127] = x[:127] * 2.0
        return {"y": out}
    return tle.Launch(grid=(1,), args=(x, y, 127), kwargs=dict(BLOCK=128), outputs={"y": y}, reference=ref)
