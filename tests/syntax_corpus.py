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
        CASES[fn.__name__] = (kernel, tle.examples.seeded(fn))      # the same inputs on every run
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


# -- a full tile chosen by a mask of one row: the result keeps the tile's shape ----------------------------
@tle.jit
def masked_full_tile(x_ptr, out_ptr, N, BM: tl.constexpr, BN: tl.constexpr):
    cols = tl.arange(0, BN)
    col_ok = (cols < N)[None, :]                                # [1, BN]
    start = tl.where(col_ok, tl.zeros([BM, BN], dtype=tl.float32), -1.0)   # [BM, BN], not [1, BN]
    tl.store(out_ptr + cols, tl.sum(start, axis=0) + tl.load(x_ptr + cols))


@case(masked_full_tile)
def row_mask_full_tile(device):
    x = torch.randn(16, device=device)
    out = _nan_like(x)
    return tle.Launch(grid=(1,), args=(x, out, 11), kwargs=dict(BM=8, BN=16), outputs={"out": out},
                      reference=lambda: {"out": x - 8.0 * (torch.arange(16, device=device) >= 11)},
                      tolerances={"out": (1e-4, 1e-4)})


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


# -- masks written in other ways: comparisons expanded after the fact, bound first, lower bounds, `|` -----
@tle.jit
def masked_forms(x_ptr, y_ptr, z_ptr, w_ptr, M, N, lo, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    row_ok = rm < M
    col_ok = N > rn
    mask = row_ok[:, None] & col_ok[None, :]
    offs = rm[:, None] * N + rn[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, x * 2.0, mask=mask)
    band = (rn[None, :] >= lo) & (rn[None, :] <= N - 1) & row_ok[:, None]
    tl.store(z_ptr + offs, x + 1.0, mask=band)
    ends = ((rn[None, :] < 1) | (rn[None, :] == N - 1)) & row_ok[:, None]
    tl.store(w_ptr + offs, x - 1.0, mask=ends)


@case(masked_forms)
def mask_forms(device):
    M, N, lo = 37, 45, 5
    x = torch.randn(M, N, device=device)
    y = _nan_like(x)
    z, w = torch.full_like(x, -7.0), torch.full_like(x, -7.0)

    def ref():
        col = torch.arange(N, device=x.device)
        zr = torch.where(col >= lo, x + 1.0, torch.full_like(x, -7.0))
        wr = torch.where((col < 1) | (col == N - 1), x - 1.0, torch.full_like(x, -7.0))
        return {"y": x * 2.0, "z": zr, "w": wr}
    return tle.Launch(grid=(3,), args=(x, y, z, w, M, N, lo), kwargs=dict(BM=16, BN=64),
                      outputs={"y": y, "z": z, "w": w}, reference=ref)


# -- a store masked by the data it stores ---------------------------------------------------------------
@tle.jit
def positive_part(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, x, mask=(offs < n) & (x > 0))


@case(positive_part)
def data_mask(device):
    x = torch.randn(100, device=device)
    y = torch.full_like(x, -7.0)
    return tle.Launch(grid=(2,), args=(x, y, 100), kwargs=dict(BLOCK=64), outputs={"y": y},
                      reference=lambda: {"y": torch.where(x > 0, x, torch.full_like(x, -7.0))})


# -- reductions: keep_dims, along the first axis, arg-reductions with ties, integers ---------------------
@tle.jit
def reduce_forms(x_ptr, k_ptr, c_ptr, mn_ptr, am_ptr, kmax_ptr, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    m = rn[None, :] < N
    offs = rm[:, None] * N + rn[None, :]
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    centered = x - tl.sum(x, axis=1, keep_dims=True) / N
    tl.store(c_ptr + offs, centered, mask=m)
    tl.store(mn_ptr + rn, tl.min(tl.where(m, x, float("inf")), axis=0), mask=rn < N)
    steps = tl.where(m, tl.floor(x * 2.0), float("inf"))
    tl.store(am_ptr + rm, tl.argmin(steps, axis=1))
    k = tl.load(k_ptr + offs, mask=m, other=-1000)
    tl.store(kmax_ptr + rn, tl.max(k, axis=0), mask=rn < N)


@case(reduce_forms)
def reductions_2d(device):
    BM, N = 16, 20
    x = torch.randn(BM, N, device=device)
    k = torch.randint(-50, 50, (BM, N), device=device, dtype=torch.int32)
    c, mn = _nan_like(x), torch.full((N,), float("nan"), device=device)
    am = torch.full((BM,), -7, device=device, dtype=torch.int32)
    kmax = torch.full((N,), -7, device=device, dtype=torch.int32)

    def ref():
        steps = torch.floor(x * 2.0)
        first_min = (steps == steps.min(1, keepdim=True).values).int().argmax(1).int()
        return {"c": x - x.sum(1, keepdim=True) / N, "mn": x.min(0).values, "am": first_min,
                "kmax": k.max(0).values}
    return tle.Launch(grid=(1,), args=(x, k, c, mn, am, kmax, N), kwargs=dict(BM=BM, BN=32),
                      outputs={"c": c, "mn": mn, "am": am, "kmax": kmax}, reference=ref,
                      tolerances={"c": (1e-5, 1e-5)})


# -- loops: a start and a step, values swapped each iteration, a branch without else, merged branches -----
@tle.jit
def loop_forms(x_ptr, y_ptr, z_ptr, lo, hi, flag, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    a = x
    b = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(lo, hi, 2):
        a, b = b, a + b * 0.5 + i            # both new values from the old ones
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for j in range(5):
        if j % 2 == 0:
            acc = acc + x * j
    if flag > 0:
        t = acc * 2.0
    else:
        t = acc - 1.0
    tl.store(y_ptr + offs, a - b)
    tl.store(z_ptr + offs, t)


@case(loop_forms)
def loops_and_branches(device):
    x = torch.randn(64, device=device)
    y, z = _nan_like(x), _nan_like(x)

    def ref():
        a, b = x.clone(), torch.zeros_like(x)
        for i in range(3, 12, 2):
            a, b = b, a + b * 0.5 + i
        acc = x * (0 + 2 + 4)
        return {"y": a - b, "z": acc - 1.0}
    return tle.Launch(grid=(1,), args=(x, y, z, 3, 12, 0), kwargs=dict(BLOCK=64), outputs={"y": y, "z": z},
                      reference=ref, tolerances={"y": (1e-4, 1e-5), "z": (1e-5, 1e-5)})


# -- dot: without an accumulator, with a transposed A, accumulating into a copy still in use --------------
@tle.jit
def dot_forms(a_ptr, at_ptr, b_ptr, c_ptr, d_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    at = tl.load(at_ptr + rk[:, None] * BM + rm[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    c = tl.dot(a, b)
    c += tl.dot(tl.trans(at), b)
    d = tl.dot(a, b, c)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], c)
    tl.store(d_ptr + rm[:, None] * BN + rn[None, :], d)


@case(dot_forms)
def dot_variants(device):
    a = (torch.randn(64, 32, device=device) / 4).half()
    b = (torch.randn(32, 64, device=device) / 4).half()
    at = a.t().contiguous()
    c = torch.full((64, 64), float("nan"), device=device)
    d = torch.full((64, 64), float("nan"), device=device)
    p = lambda: a.float() @ b.float()     # noqa: E731
    return tle.Launch(grid=(1,), args=(a, at, b, c, d), kwargs=dict(BM=64, BN=64, BK=32),
                      outputs={"c": c, "d": d}, reference=lambda: {"c": 2 * p(), "d": 3 * p()},
                      tolerances={"c": (1e-3, 1e-3), "d": (1e-3, 1e-3)})


# -- shapes: an outer sum, its transpose, a reshape, a broadcast ------------------------------------------
@tle.jit
def shape_ops(x_ptr, y_ptr, o_ptr, t_ptr, r_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm)
    y = tl.load(y_ptr + rn)
    outer = x[:, None] + y[None, :]
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], outer)
    tl.store(t_ptr + rn[:, None] * M + rm[None, :], tl.trans(outer) * 2.0)
    r = tl.reshape(outer, (M * N // 8, 8))
    rr = tl.arange(0, M * N // 8)
    rc = tl.arange(0, 8)
    tl.store(r_ptr + rr[:, None] * 8 + rc[None, :], r + tl.broadcast_to(tl.max(x, axis=0), (M * N // 8, 8)))


@case(shape_ops)
def reshape_and_transpose(device):
    M, N = 16, 32
    x, y = torch.randn(M, device=device), torch.randn(N, device=device)
    o = torch.full((M, N), float("nan"), device=device)
    t = torch.full((N, M), float("nan"), device=device)
    r = torch.full((M * N // 8, 8), float("nan"), device=device)

    def ref():
        outer = x[:, None] + y[None, :]
        return {"o": outer, "t": outer.t() * 2.0, "r": outer.reshape(-1, 8) + x.max()}
    return tle.Launch(grid=(1,), args=(x, y, o, t, r), kwargs=dict(M=M, N=N), outputs={"o": o, "t": t, "r": r},
                      reference=ref)


# -- scalars: a masked scalar load and store, scalar and tile atomics of max and min ----------------------
@tle.jit
def scalar_forms(x_ptr, first_ptr, mx_ptr, mn_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    first = tl.load(x_ptr + pid * BLOCK, mask=pid * BLOCK < n, other=-1.0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(first_ptr + pid, first * tl.num_programs(0), mask=pid < 3)
    tl.atomic_max(mx_ptr, tl.max(tl.where(offs < n, v, float("-inf")), axis=0))
    tl.atomic_min(mn_ptr + offs % 4, v, mask=offs < n)


@case(scalar_forms)
def scalar_and_atomic_extremes(device):
    x = torch.randn(150, device=device)
    first = torch.full((4,), -7.0, device=device)
    mx = torch.full((1,), float("-inf"), device=device)
    mn = torch.full((4,), float("inf"), device=device)

    def ref():
        f = torch.tensor([x[0], x[64], x[128], -7.0], device=x.device)
        f[:3] *= 3
        return {"first": f, "mx": x.max().reshape(1), "mn": x.view(-1, 2)[:, :1].new_tensor(
            [x[i::4].min().item() for i in range(4)])}
    return tle.Launch(grid=(3,), args=(x, first, mx, mn, 150), kwargs=dict(BLOCK=64),
                      outputs={"first": first, "mx": mx, "mn": mn}, reference=ref)


# -- math and casts: exp and log as Triton lowers them, float remainder, casts through fp16, bitcasts -----
@tle.jit
def math_casts(x_ptr, i_ptr, f_ptr, h_ptr, k_ptr, bits_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    i = tl.load(i_ptr + offs, mask=m, other=1)
    f = tl.exp(x) + tl.log(tl.abs(x) + 1.0) + x % 0.75 - x + tl.where(x > 0, 1.0, -2.0)
    tl.store(f_ptr + offs, f, mask=m)
    tl.store(h_ptr + offs, (x * 3.0).to(tl.float16).to(tl.bfloat16), mask=m)
    tl.store(k_ptr + offs, (~i) ^ (i // -3) ^ (i % -3), mask=m)
    tl.store(bits_ptr + offs, x.to(tl.int32, bitcast=True) & 0xFFFF, mask=m)


@case(math_casts)
def math_and_casts(device):
    x = torch.randn(100, device=device) * 2
    i = torch.randint(-1000, 1000, (100,), device=device, dtype=torch.int32)
    f = _nan_like(x)
    h = torch.full((100,), float("nan"), device=device, dtype=torch.bfloat16)
    k, bits = torch.full_like(i, -7), torch.full_like(i, -7)

    def ref():
        fr = torch.exp(x) + torch.log(x.abs() + 1.0) + torch.fmod(x, 0.75) - x + torch.where(x > 0, 1.0, -2.0)
        q = torch.div(i, -3, rounding_mode="trunc")
        return {"f": fr, "h": (x * 3.0).half().bfloat16(), "k": (~i) ^ q.int() ^ torch.fmod(i, -3).int(),
                "bits": x.view(torch.int32) & 0xFFFF}
    return tle.Launch(grid=(2,), args=(x, i, f, h, k, bits, 100), kwargs=dict(BLOCK=64),
                      outputs={"f": f, "h": h, "k": k, "bits": bits}, reference=ref,
                      tolerances={"f": (1e-5, 1e-5)})


# -- bounds written as <=, > and >=, exact (a bulk copy) or tighter than the tensor; an int data mask -----
@tle.jit
def bound_forms(x_ptr, k_ptr, a_ptr, b_ptr, c_ptr, d_ptr, e_ptr, n, M, rows, N, BLOCK: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs <= n - 1, other=0.0)
    tl.store(a_ptr + offs, x + 1.0, mask=n > offs)
    tl.store(b_ptr + offs, x + 2.0, mask=n - 1 >= offs)
    k = tl.load(k_ptr + offs, mask=offs < n, other=0)
    tl.store(c_ptr + offs, k, mask=(offs < n) & (k * k > 4))
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    tile = rm[:, None] * N + rn[None, :]
    inside = (rm[:, None] < rows) & (rn[None, :] < N)          # fewer rows than the tensor has
    y = tl.load(x_ptr + tile, mask=inside, other=0.0)
    tl.store(d_ptr + tile, y * 3.0, mask=inside)
    tl.store(e_ptr + tile, y - 3.0, mask=(rm[:, None] <= M - 1) & (rn[None, :] <= N - 1))


@case(bound_forms)
def mask_bounds(device):
    n, M, rows, N = 150, 12, 9, 12
    x = torch.randn(n, device=device)
    k = torch.randint(-5, 6, (n,), device=device, dtype=torch.int32)
    a, b = _nan_like(x), _nan_like(x)
    c = torch.full_like(k, -7)
    d, e = torch.full((M, N), -7.0, device=device), torch.full((M, N), -7.0, device=device)

    def ref():
        xm = x[:M * N].view(M, N)
        dr = torch.full((M, N), -7.0, device=x.device)
        dr[:rows] = xm[:rows] * 3.0
        seen = torch.where(torch.arange(M, device=x.device)[:, None] < rows, xm, 0.0)
        return {"a": x + 1.0, "b": x + 2.0, "c": torch.where(k * k > 4, k, torch.full_like(k, -7)), "d": dr,
                "e": seen - 3.0}
    return tle.Launch(grid=(3,), args=(x, k, a, b, c, d, e, n, M, rows, N), kwargs=dict(BLOCK=64, BM=16, BN=16),
                      outputs={"a": a, "b": b, "c": c, "d": d, "e": e}, reference=ref)


# -- boxes whose base splits over several dimensions: a block at a constant offset of a matrix in a batch,
#    a constant offset into a flat output, a tensor with a unit dimension ------------------------------
@tle.jit
def sub_blocks(x_ptr, u_ptr, y_ptr, z_ptr, w_ptr, M, N, R0: tl.constexpr, C0: tl.constexpr, BM: tl.constexpr,
               BN: tl.constexpr):
    b = tl.program_id(0)
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    t = tl.load(x_ptr + b * M * N + (R0 + rm)[:, None] * N + (C0 + rn)[None, :])
    tl.store(y_ptr + b * BM * BN + rm[:, None] * BN + rn[None, :], t * 2.0)
    tl.store(z_ptr + 7 + b * BN + rn, tl.sum(t, axis=0))
    rb = tl.arange(0, 4)
    u = tl.load(u_ptr + rb[:, None] * BN + rn[None, :])          # u is (4, 1, BN): a unit middle dimension
    tl.store(w_ptr + b * BN + rn, tl.max(u, axis=0) + b)


@case(sub_blocks)
def offset_boxes(device):
    B, M, N, R0, C0, BM, BN = 3, 10, 12, 2, 3, 4, 8
    x = torch.randn(B, M, N, device=device)
    u = torch.randn(4, 1, BN, device=device)
    y = torch.full((B, BM, BN), float("nan"), device=device)
    z = torch.full((7 + B * BN + 5,), -7.0, device=device)
    w = torch.full((B, BN), float("nan"), device=device)

    def ref():
        blk = x[:, R0:R0 + BM, C0:C0 + BN]
        zr = torch.full_like(z, -7.0)
        zr[7:7 + B * BN] = blk.sum(1).reshape(-1)
        return {"y": blk * 2.0, "z": zr, "w": u.amax(0).reshape(1, BN) + torch.arange(B, device=x.device)[:, None]}
    return tle.Launch(grid=(B,), args=(x, u, y, z, w, M, N), kwargs=dict(R0=R0, C0=C0, BM=BM, BN=BN),
                      outputs={"y": y, "z": z, "w": w}, reference=ref, tolerances={"z": (1e-5, 1e-5)})


# -- expressions: an arange that does not start at 0, !=, grid sizes past the grid's rank, NaN literals ---
@tle.jit
def expr_forms(x_ptr, y_ptr, z_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(3, 3 + BLOCK)
    x = tl.load(x_ptr + offs)
    odd = (offs % 5) != 0
    y = tl.where(odd, x, -x) * tl.num_programs(0) + tl.num_programs(1) + tl.num_programs(2)
    tl.store(y_ptr + offs - 3, y)
    nan32 = tl.full([BLOCK], float("nan"), tl.float32)
    nan16 = tl.full([BLOCK], float("nan"), tl.bfloat16).to(tl.float32)    # Triton's interpreter compares bf16 bits
    flags = tl.where(nan32 != nan32, 1, 0) + tl.where(nan16 != nan16, 2, 0)
    tl.store(z_ptr + offs - 3, flags)


@case(expr_forms)
def expression_forms(device):
    x = torch.randn(67, device=device)
    y = torch.full((64,), float("nan"), device=device)
    z = torch.full((64,), -7, device=device, dtype=torch.int32)

    def ref():
        i = torch.arange(3, 67, device=x.device)
        return {"y": torch.where(i % 5 != 0, x[3:], -x[3:]) + 2.0,
                "z": torch.full((64,), 3, device=x.device, dtype=torch.int32)}
    return tle.Launch(grid=(1,), args=(x, y, z), kwargs=dict(BLOCK=64), outputs={"y": y, "z": z}, reference=ref)


# -- masked scalar loads, and a non-zero `other` where the mask ends one short of the tile or at it ------
@tle.jit
def edge_loads(x_ptr, e_ptr, f_ptr, s_ptr, LIMIT: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    v = tl.load(x_ptr + pid, mask=pid < LIMIT, other=7.0)          # in bounds, masked off past LIMIT
    w = tl.load(x_ptr + pid, mask=pid < LIMIT)                     # no `other`: zero
    tl.store(s_ptr + pid, v + 10.0 * w)
    offs = tl.arange(0, BLOCK)
    short = tl.load(e_ptr + offs, mask=offs < BLOCK - 1, other=5.0)     # e has BLOCK - 1 elements
    full = tl.load(f_ptr + offs, mask=offs < BLOCK, other=5.0)          # always true: `other` unused
    tl.store(f_ptr + BLOCK + offs, short + full * 100.0, mask=pid == 0)


@case(edge_loads)
def masked_edges(device):
    x = torch.randn(8, device=device)
    e = torch.randn(63, device=device)
    f = torch.cat([torch.randn(64, device=device), torch.full((64,), float("nan"), device=device)])
    s = torch.full((8,), float("nan"), device=device)

    def ref():
        lim = torch.arange(8, device=x.device) < 5
        short = torch.cat([e, torch.full((1,), 5.0, device=e.device)])
        return {"s": torch.where(lim, x * 11.0, torch.full_like(x, 7.0)),
                "f": torch.cat([f[:64], short + f[:64] * 100.0])}
    return tle.Launch(grid=(8,), args=(x, e, f, s), kwargs=dict(LIMIT=5, BLOCK=64), outputs={"s": s, "f": f},
                      reference=ref)


# -- integer arguments divided: the TileLang lowering compiles them in as constants and folds the ---------
# -- arithmetic, which must keep Triton's truncating // and % -------------------------------------------
@tle.jit
def scalar_int_div(out_ptr, a, b, c):
    tl.store(out_ptr + 0, a // b)
    tl.store(out_ptr + 1, a % b)
    tl.store(out_ptr + 2, a // c)
    tl.store(out_ptr + 3, a % c)
    tl.store(out_ptr + 4, (a * c) // (b * c))
    tl.store(out_ptr + 5, (a - c * 4) // b + (a - c * 4) % b)


@case(scalar_int_div)
def folded_int_division(device):
    a, b, c = -7, 2, -3
    out = torch.full((6,), -99, device=device, dtype=torch.int32)

    def trunc(x, y):
        return int(x / y)
    expect = [trunc(a, b), a - trunc(a, b) * b, trunc(a, c), a - trunc(a, c) * c, trunc(a * c, b * c),
              trunc(a - c * 4, b) + (a - c * 4) - trunc(a - c * 4, b) * b]
    return tle.Launch(grid=(1,), args=(out, a, b, c), kwargs={}, outputs={"out": out},
                      reference=lambda: {"out": torch.tensor(expect, device=out.device, dtype=torch.int32)})


# -- a keep_dims reduction along the first axis, broadcast back; an unmasked scalar load ------------------
@tle.jit
def first_axis_keep(x_ptr, s_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    scale = tl.load(s_ptr + 1)
    y = (x - tl.max(x, axis=0, keep_dims=True)) * scale
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y)


@case(first_axis_keep)
def keep_dims_first_axis(device):
    x = torch.randn(8, 16, device=device)
    s = torch.tensor([5.0, 3.0], device=device)
    y = torch.full_like(x, float("nan"))
    return tle.Launch(grid=(1,), args=(x, s, y), kwargs=dict(M=8, N=16), outputs={"y": y},
                      reference=lambda: {"y": (x - x.amax(0, keepdim=True)) * 3.0})


# -- masked scalar atomics (one thread does each) -------------------------------------------------------
@tle.jit
def masked_scalar_atomics(cnt_ptr, LIMIT: tl.constexpr):
    pid = tl.program_id(0)
    tl.atomic_add(cnt_ptr + 0, 1, mask=pid < LIMIT)
    tl.atomic_max(cnt_ptr + 1, pid, mask=(pid % 2) == 1)
    tl.atomic_add(cnt_ptr + 2, pid)


@case(masked_scalar_atomics)
def scalar_atomics_masked(device):
    cnt = torch.zeros(3, device=device, dtype=torch.int32)
    return tle.Launch(grid=(8,), args=(cnt,), kwargs=dict(LIMIT=5), outputs={"cnt": cnt},
                      reference=lambda: {"cnt": torch.tensor([5, 7, 28], device=cnt.device, dtype=torch.int32)})


# -- index values: aranges read as values, an unmasked scatter and tile atomics, a loop that may not run ---
@tle.jit
def index_values(x_ptr, p_ptr, h_ptr, y_ptr, q_ptr, lo, hi, steps, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    perm = tl.load(p_ptr + offs)
    h = tl.load(h_ptr + offs)
    ramp = tl.arange(3, 3 + BLOCK).to(tl.float32) * 0.5 + offs.to(tl.float32)
    y = x * 2.0 + 1.0
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(lo, hi, 3):                 # the counter is never read; the loop may run no steps
        acc += tl.sum(y, axis=0)               # `y` is first held in a buffer here, inside the loop
    s = tl.sum(y, axis=0) + tl.max(y, axis=0)
    for j in tl.range(0, steps, num_stages=1):     # one stage: a plain loop
        h = h * 0.5 + x                        # the carried tile starts from a load nothing else reads
    tl.store(y_ptr + perm, acc + ramp + s + h)
    tl.atomic_add(q_ptr + offs % 4, x)


@case(index_values)
def index_values_scatter(device):
    x = torch.randn(64, device=device)
    perm = torch.randperm(64, device=device).to(torch.int32)
    h0 = torch.randn(64, device=device)
    y = _nan_like(x)
    q = torch.zeros(4, device=device)

    def ref():
        yy = x * 2.0 + 1.0
        h = h0.clone()
        for _ in range(3):
            h = h * 0.5 + x
        ramp = torch.arange(3, 67, device=x.device, dtype=torch.float32) * 0.5 + torch.arange(64, device=x.device)
        out = torch.empty_like(x)
        out[perm.long()] = ramp + yy.sum() + yy.max() + h
        return {"y": out, "q": x.view(16, 4).sum(0)}
    return tle.Launch(grid=(1,), args=(x, perm, h0, y, q, 5, 5, 3), kwargs=dict(BLOCK=64),
                      outputs={"y": y, "q": q}, reference=ref, tolerances={"y": (1e-4, 1e-4), "q": (1e-5, 1e-5)})


# -- gathers through an index tile: pipelined and asynchronous, masked on both axes; synchronous, masked on rows
@tle.jit
def row_gathers(x_ptr, idx_ptr, y_ptr, z_ptr, D, BI: tl.constexpr, BD: tl.constexpr, STEPS: tl.constexpr):
    offs_i = tl.arange(0, BI)
    offs_d = tl.arange(0, BD)
    acc = tl.zeros([BI, BD], dtype=tl.float32)
    for s in tl.range(0, STEPS, num_stages=2):
        rows = tl.load(idx_ptr + s * BI + offs_i)
        m = (rows >= 0)[:, None] & (offs_d[None, :] < D)
        acc += tle.load(x_ptr + rows[:, None] * BD + offs_d[None, :], mask=m, other=0.0, is_async=True)
    tl.store(y_ptr + offs_i[:, None] * BD + offs_d[None, :], acc)
    first = tl.load(idx_ptr + offs_i)
    g = tl.load(x_ptr + first[:, None] * BD + offs_d[None, :], mask=(first >= 0)[:, None], other=0.0)
    tl.store(z_ptr + offs_i[:, None] * BD + offs_d[None, :], g * 2.0)


@case(row_gathers)
def gathers_masked_rows(device):
    x = torch.randn(40, 32, device=device)
    idx = torch.randint(0, 40, (3 * 16,), device=device, dtype=torch.int32)
    idx[::5] = -1
    y = torch.full((16, 32), float("nan"), device=device)
    z = torch.full((16, 32), float("nan"), device=device)

    def ref():
        r = idx.long().view(3, 16)
        g = torch.where((r >= 0)[..., None], x[r.clamp(min=0)], 0.0)
        g[..., 29:] = 0.0
        first = torch.where((r[0] >= 0)[:, None], x[r[0].clamp(min=0)], 0.0)
        return {"y": g.sum(0), "z": first * 2.0}
    return tle.Launch(grid=(1,), args=(x, idx, y, z, 29), kwargs=dict(BI=16, BD=32, STEPS=3),
                      outputs={"y": y, "z": z}, reference=ref, tolerances={"y": (1e-5, 1e-5)})


# -- dot operands and accumulators: a column-major operand also stored, updates written in place or not ----
@tle.jit
def operand_reuse(a_ptr, b_ptr, c_ptr, h_ptr, g_ptr, d_ptr, e_ptr, f_ptr, s_ptr, t_ptr,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] + rk[None, :] * BM)     # stored column-major
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    c = tl.load(c_ptr + rm[:, None] * BN + rn[None, :])
    h = tl.load(h_ptr + rm[:, None] * BN + rn[None, :])
    g = tl.load(g_ptr + rm[:, None] * BN + rn[None, :])
    d = tl.dot(a, b, c * 2.0 + 1.0)            # c is read again below: not overwritten
    e = tl.dot(a, b, h.to(tl.float32))         # a cast is never written in place
    f = tl.dot(a, b, (g * 0.5) - 1.0)          # g is read nowhere else: the update is written into it
    tl.store(f_ptr + rm[:, None] * BN + rn[None, :], f)
    tl.store(d_ptr + rm[:, None] * BN + rn[None, :], d)
    tl.store(e_ptr + rm[:, None] * BN + rn[None, :], e)
    tl.store(s_ptr + rm[:, None] * BN + rn[None, :], c)
    tl.store(t_ptr + rm[:, None] * BK + rk[None, :], a)    # the operand itself, in row-major order


@case(operand_reuse)
def dot_operand_reuse(device):
    at = (torch.randn(32, 64, device=device) / 4).half()    # A^T, contiguous: A is column-major
    b = (torch.randn(32, 64, device=device) / 4).half()
    c = torch.randn(64, 64, device=device)
    h = torch.randn(64, 64, device=device).half()
    g = torch.randn(64, 64, device=device)
    outs = {k: torch.full((64, 64), float("nan"), device=device) for k in ("d", "e", "f", "s")}
    outs["t"] = torch.full((64, 32), float("nan"), device=device, dtype=torch.float16)
    p = lambda: at.float().t() @ b.float()     # noqa: E731
    return tle.Launch(grid=(1,), args=(at, b, c, h, g, *outs.values()),
                      kwargs=dict(BM=64, BN=64, BK=32), outputs=outs,
                      reference=lambda: {"d": p() + c * 2.0 + 1.0, "e": p() + h.float(), "f": p() + g * 0.5 - 1.0,
                                         "s": c, "t": at.t()},
                      tolerances={"d": (1e-3, 1e-3), "e": (1e-3, 1e-3), "f": (1e-3, 1e-3)})


# -- a tle.gpu buffer written again while a tile read from it is in use, and from another dtype -----------
@tle.jit
def buffer_rewrites(x_ptr, w_ptr, y_ptr, z_ptr, r_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    buf = tle.gpu.alloc([BLOCK], dtype=tl.float16, scope=tle.gpu.storage_kind.smem)
    w = tl.load(w_ptr + offs)
    tle.gpu.copy(x_ptr + offs, buf, [BLOCK])
    t = tle.gpu.local_load(buf)
    tle.gpu.local_store(buf, w.to(tl.float16))      # written again at once: `t` is kept in a copy
    u = tle.gpu.local_load(buf)
    tle.gpu.local_store(buf, (u * 2.0).to(tl.float16))    # the new contents read the buffer itself
    v = tle.gpu.local_load(buf)
    tl.store(y_ptr + offs, t.to(tl.float32) + v.to(tl.float32))
    tle.gpu.local_store(buf, w)                     # from a float32 fragment into the float16 buffer
    tl.store(z_ptr + offs, tle.gpu.local_load(buf).to(tl.float32))
    tle.gpu.local_store(buf, tl.load(x_ptr + offs))  # from a float16 fragment: a plain copy
    r = tle.gpu.local_load(buf)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(2):                              # read in a loop before the next write: in place
        acc += r.to(tl.float32) * (k + 1)
    seen = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(2):                              # written in a loop that carries a tile too
        seen += acc
        tle.gpu.local_store(buf, (acc * k).to(tl.float16))
    tl.store(r_ptr + offs, seen + tle.gpu.local_load(buf).to(tl.float32))


@case(buffer_rewrites)
def buffer_written_while_read(device):
    x = torch.randn(128, device=device).half()
    w = torch.randn(128, device=device)
    y, z, r = _nan_like(w), _nan_like(w), _nan_like(w)

    def ref():
        acc = x.float() * 3.0
        return {"y": x.float() + (w.half() * 2).float(), "z": w.half().float(), "r": 2 * acc + acc.half().float()}
    return tle.Launch(grid=(1,), args=(x, w, y, z, r), kwargs=dict(BLOCK=128), outputs={"y": y, "z": z, "r": r},
                      reference=ref, tolerances={"y": (1e-3, 1e-3), "z": (1e-3, 1e-3), "r": (1e-3, 1e-3)})


# -- unit and two-element axes: (M, 1) and (1, N) tiles broadcast together, a (32, 2) tile flattened ------
@tle.jit
def unit_axes(c_ptr, r_ptr, p_ptr, o_ptr, f_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    col = tl.load(c_ptr + rm[:, None])                 # shape (M, 1), held as loaded
    row = tl.load(r_ptr + rn[None, :])                 # shape (1, N)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], col * 2.0 + row)
    r32 = tl.arange(0, 32)
    r2 = tl.arange(0, 2)
    pair = tl.load(p_ptr + r32[:, None] * 2 + r2[None, :])
    flat = tl.reshape(pair * 3.0, (64,))
    first = tl.load(p_ptr + r32[:, None] * 2)           # shape (32, 1)
    tl.store(f_ptr + tl.arange(0, 64), flat + tl.reshape(tl.broadcast_to(first, (32, 2)), (64,)))


@case(unit_axes)
def unit_and_pair_axes(device):
    c, r = torch.randn(16, device=device), torch.randn(32, device=device)
    pr = torch.randn(32, 2, device=device)
    o = torch.full((16, 32), float("nan"), device=device)
    f = torch.full((64,), float("nan"), device=device)
    return tle.Launch(grid=(1,), args=(c, r, pr, o, f), kwargs=dict(M=16, N=32), outputs={"o": o, "f": f},
                      reference=lambda: {"o": c[:, None] * 2.0 + r[None, :],
                                         "f": (pr * 3.0 + pr[:, :1].expand(32, 2)).reshape(64)})

# -- a loop of dot operands without num_stages of its own: the launch's num_stages decides ---------------
@tle.jit
def k_loop(a_ptr, b_ptr, c_ptr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def _k_loop(device, stages):
    a = (torch.randn(32, 64, device=device) / 4).half()
    b = (torch.randn(64, 32, device=device) / 4).half()
    c = torch.full((32, 32), float("nan"), device=device)
    return tle.Launch(grid=(1,), args=(a, b, c), kwargs=dict(K=64, BM=32, BN=32, BK=16, num_stages=stages),
                      outputs={"c": c}, reference=lambda: {"c": a.float() @ b.float()},
                      tolerances={"c": (1e-3, 1e-3)})


@case(k_loop)
def launch_two_stages(device):
    return _k_loop(device, 2)


@case(k_loop)
def launch_one_stage(device):
    return _k_loop(device, 1)


# -- accumulations under a branch in a loop, a scalar counted there, an accumulator also carried -----------
@tle.jit
def branch_accumulate(a_ptr, b_ptr, x_ptr, c_ptr, p_ptr, q_ptr, n, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tile = rm[:, None] * BN + rn[None, :]
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    prev = tl.zeros([BM, BN], dtype=tl.float32)
    out = tl.zeros([BM, BN], dtype=tl.float32)
    cnt = 0
    for i in range(n):
        if i % 2 == 0:
            acc = tl.dot(a, b, acc)            # the else keeps acc: the branch writes the loop's own slot
        if i % 3 == 0:
            cnt += 1                           # a carried scalar, the same way
        x = tl.load(x_ptr + tile)
        t = x + i * 1.0
        prev = t                               # `t` is carried by the loop and accumulated into below
        out += tl.dot(a, b, t)
    tl.store(c_ptr + tile, acc + out)
    tl.store(p_ptr + tile, prev)
    tl.store(q_ptr, cnt)


@case(branch_accumulate)
def branch_accumulations(device):
    a = (torch.randn(32, 32, device=device) / 4).half()
    b = (torch.randn(32, 32, device=device) / 4).half()
    x = torch.randn(32, 32, device=device)
    c, p = _nan_like(x), _nan_like(x)
    q = torch.full((1,), -7, device=device, dtype=torch.int32)

    def ref():
        ab = a.float() @ b.float()
        out = sum(ab + x + i for i in range(5))
        return {"c": 3 * ab + out, "p": x + 4.0, "q": torch.tensor([2], device=x.device, dtype=torch.int32)}
    return tle.Launch(grid=(1,), args=(a, b, x, c, p, q, 5), kwargs=dict(BM=32, BN=32, BK=32),
                      outputs={"c": c, "p": p, "q": q}, reference=ref,
                      tolerances={"c": (1e-3, 1e-3), "p": (1e-5, 1e-5)})


# -- tle.gpu buffers: written by the op right after a read, under a branch beside another buffer ----------
@tle.jit
def buffer_paths(x_ptr, y_ptr, o_ptr, p_ptr, flag, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    buf = tle.gpu.alloc([BLOCK], dtype=tl.float32, scope=tle.gpu.storage_kind.smem)
    aux = tle.gpu.alloc([BLOCK], dtype=tl.float32, scope=tle.gpu.storage_kind.smem)
    xp = x_ptr + offs
    yp = y_ptr + offs
    tle.gpu.copy(xp, buf, [BLOCK])
    t = tle.gpu.local_load(buf)
    tle.gpu.copy(yp, buf, [BLOCK])            # the very next op writes buf: `t` is kept in a copy
    u = tle.gpu.local_load(buf)
    tle.gpu.local_store(aux, t * 2.0)         # the last read of `t`
    kept = tle.gpu.local_load(aux)            # read after the branch below, which writes only buf
    if flag > 0:
        tle.gpu.local_store(buf, u * 3.0)
    else:
        tle.gpu.local_store(buf, u - 1.0)
    r = tle.gpu.local_load(buf)               # the buffer's version from the branch
    tl.store(o_ptr + offs, r + kept)
    tl.store(p_ptr + offs, u)


@case(buffer_paths)
def buffer_versions(device):
    x, y = torch.randn(64, device=device), torch.randn(64, device=device)
    o, p = _nan_like(x), _nan_like(x)
    return tle.Launch(grid=(1,), args=(x, y, o, p, 1), kwargs=dict(BLOCK=64), outputs={"o": o, "p": p},
                      reference=lambda: {"o": y * 3.0 + x * 2.0, "p": y})


# -- index tiles: also summed, gathered by a plain load in a pipelined loop, staged over three stages ------
@tle.jit
def index_uses(x_ptr, idx_ptr, s_ptr, y_ptr, z_ptr, D: tl.constexpr, BI: tl.constexpr, STEPS: tl.constexpr):
    offs_i = tl.arange(0, BI)
    offs_d = tl.arange(0, D)
    first = tl.load(idx_ptr + offs_i)
    g = tl.load(x_ptr + first[:, None] * D + offs_d[None, :])
    tl.store(s_ptr, tl.sum(first, axis=0))          # the index tile is also reduced: held in a fragment
    acc = tl.zeros([BI, D], dtype=tl.float32)
    for s in tl.range(0, STEPS, num_stages=2):      # a plain gather: nothing to stage
        rows = tl.load(idx_ptr + s * BI + offs_i)
        acc += tl.load(x_ptr + rows[:, None] * D + offs_d[None, :])
    acc2 = tl.zeros([BI, D], dtype=tl.float32)
    for s in tl.range(0, STEPS, num_stages=3):      # an asynchronous gather through a plain index tile
        rows = tl.load(idx_ptr + s * BI + offs_i)
        acc2 += tle.load(x_ptr + rows[:, None] * D + offs_d[None, :], is_async=True)
    acc4 = tl.zeros([BI, D], dtype=tl.float32)
    for s in tl.range(0, STEPS, num_stages=3):      # the index tile padded with -1: read synchronously, staged
        rows = tl.load(idx_ptr + s * BI + offs_i, mask=offs_i < BI - 2, other=-1)
        acc4 += tle.load(x_ptr + rows[:, None] * D + offs_d[None, :], mask=(rows >= 0)[:, None], other=0.0,
                         is_async=True)
    acc3 = tl.zeros([BI, D], dtype=tl.float32)
    for s in tl.range(0, STEPS, num_stages=2):      # a let after the gather: the loop names no stages
        rows = tl.load(idx_ptr + s * BI + offs_i, mask=offs_i < BI - 2, other=-1)
        v = tle.load(x_ptr + rows[:, None] * D + offs_d[None, :], mask=(rows >= 0)[:, None], other=0.0,
                     is_async=True)
        w = (s + 1) * 0.5
        acc3 += v * w
    tl.store(y_ptr + offs_i[:, None] * D + offs_d[None, :], g + acc + acc2 + acc4)
    tl.store(z_ptr + offs_i[:, None] * D + offs_d[None, :], acc3)


@case(index_uses)
def index_tile_uses(device):
    x = torch.randn(40, 32, device=device)
    idx = torch.randint(0, 40, (3 * 16,), device=device, dtype=torch.int32)
    s = torch.full((1,), -7, device=device, dtype=torch.int32)
    y = torch.full((16, 32), float("nan"), device=device)
    z = torch.full((16, 32), float("nan"), device=device)

    def ref():
        r = idx.long().view(3, 16)
        g = x[r]
        padded = g.clone()
        padded[:, 14:] = 0.0
        return {"s": r[0].sum().view(1).int(), "y": g[0] + 2 * g.sum(0) + padded.sum(0),
                "z": sum(padded[i] * (i + 1) * 0.5 for i in range(3))}
    return tle.Launch(grid=(1,), args=(x, idx, s, y, z), kwargs=dict(D=32, BI=16, STEPS=3),
                      outputs={"s": s, "y": y, "z": z}, reference=ref,
                      tolerances={"y": (1e-5, 1e-5), "z": (1e-5, 1e-5)})


# -- dot operands read element by element with strides, and a loaded accumulator --------------------------
@tle.jit
def strided_operands(a_ptr, b_ptr, c_ptr, d_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] + rk[None, :] * 2)          # consecutive along the rows
    b = tl.load(b_ptr + rk[:, None] * 2 + rn[None, :] * 3)      # consecutive along neither axis
    a1 = tl.load(a_ptr + rm[:, None] + rk[None, :])               # consecutive along both axes
    c = tl.load(c_ptr + rm[:, None] * BN + rn[None, :])
    tl.store(d_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b, c) + tl.dot(a1, b))


@case(strided_operands)
def strided_dot_operands(device):
    a = (torch.randn(128, device=device) / 4).half()
    b = (torch.randn(256, device=device) / 4).half()
    c = torch.randn(32, 32, device=device)
    d = _nan_like(c)
    r = torch.arange(32, device=device)

    def ref():
        am = a[r[:, None] + r[None, :] * 2].float()
        bm = b[r[:, None] * 2 + r[None, :] * 3].float()
        a1 = a[r[:, None] + r[None, :]].float()
        return {"d": am @ bm + c + a1 @ bm}
    return tle.Launch(grid=(1,), args=(a, b, c, d), kwargs=dict(BM=32, BN=32, BK=32), outputs={"d": d},
                      reference=ref, tolerances={"d": (1e-3, 1e-3)})


# -- masked asynchronous gathers without `other`: unit row stride, two columns, one column, two rows -------
@tle.jit
def narrow_gathers(x_ptr, t_ptr, u_ptr, idx_ptr, y_ptr, z_ptr, w_ptr, v_ptr, h_ptr, e_ptr, BI: tl.constexpr,
                   STEPS: tl.constexpr):
    offs_i = tl.arange(0, BI)
    c2 = tl.arange(0, 2)
    c1 = tl.arange(0, 1)
    r2 = tl.arange(0, 2)
    acc1 = tl.zeros([BI], dtype=tl.float32)
    acc2 = tl.zeros([BI, 2], dtype=tl.float32)
    acc3 = tl.zeros([BI, 1], dtype=tl.float32)
    acc4 = tl.zeros([2, 1], dtype=tl.float32)
    acc5 = tl.zeros([2], dtype=tl.float32)
    for s in tl.range(0, STEPS, num_stages=2):
        rows = tl.load(idx_ptr + s * BI + offs_i)
        pair = tl.load(idx_ptr + s * BI + r2)
        ok = rows >= 0
        g1 = tle.load(x_ptr + rows, mask=ok, is_async=True)
        g2 = tle.load(t_ptr + rows[:, None] * 2 + c2[None, :], mask=ok[:, None] & (c2[None, :] < 2), is_async=True)
        g3 = tle.load(u_ptr + rows[:, None] + c1[None, :], mask=ok[:, None], is_async=True)
        g4 = tle.load(u_ptr + pair[:, None] + c1[None, :], mask=(pair >= 0)[:, None], is_async=True)
        acc1 += tl.where(ok, g1, 0.0)          # masked-off elements of a load without `other` are unspecified
        acc2 += tl.where(ok[:, None], g2, 0.0)
        acc3 += tl.where(ok[:, None], g3, 0.0)
        acc4 += tl.where((pair >= 0)[:, None], g4, 0.0)
    for s in tl.range(0, STEPS, num_stages=2):
        rows = tl.load(idx_ptr + s * BI + offs_i, mask=offs_i < BI - 1, other=-1)   # read synchronously
        g1 = tle.load(x_ptr + rows, mask=rows >= 0, is_async=True)
        r0 = tl.load(idx_ptr + s * BI + 1)     # a scalar let after a statement: the loop names no stages
        g5 = tle.load(t_ptr + r0 * 2 + c2, mask=r0 >= 0, is_async=True)
        acc5 += tl.where(r0 >= 0, g5, 0.0) + tl.sum(tl.where(rows >= 0, g1, 0.0), axis=0)
    first = tl.load(idx_ptr + offs_i)
    h = tl.load(x_ptr + first, mask=first >= 0)        # a synchronous gather without `other`
    tl.store(y_ptr + offs_i, acc1)
    tl.store(z_ptr + offs_i[:, None] * 2 + c2[None, :], acc2)
    tl.store(w_ptr + offs_i[:, None] + c1[None, :], acc3)
    tl.store(v_ptr + r2[:, None] + c1[None, :], acc4)
    tl.store(h_ptr + offs_i, tl.where(first >= 0, h, 0.0))
    tl.store(e_ptr + c2, acc5)


@case(narrow_gathers)
def gathers_without_other(device):
    x, t, u = torch.randn(40, device=device), torch.randn(40, 2, device=device), torch.randn(40, device=device)
    idx = torch.randint(0, 40, (3 * 16,), device=device, dtype=torch.int32)
    idx[::3] = -1
    idx[17] = -1                 # the scalar row of step 1
    outs = {k: torch.full(s, float("nan"), device=device)
            for k, s in (("y", (16,)), ("z", (16, 2)), ("w", (16, 1)), ("v", (2, 1)), ("h", (16,)), ("e", (2,)))}

    def ref():
        r = idx.long().view(3, 16)
        ok = r >= 0
        rc = r.clamp(min=0)
        g1 = torch.where(ok, x[rc], 0.0)
        g2 = torch.where(ok[..., None], t[rc], 0.0)
        g3 = torch.where(ok, u[rc], 0.0)
        return {"y": g1.sum(0), "z": g2.sum(0), "w": g3.sum(0)[:, None], "v": g3[:, :2].sum(0)[:, None],
                "h": g1[0], "e": g2[:, 1].sum(0) + g1[:, :15].sum()}
    return tle.Launch(grid=(1,), args=(x, t, u, idx, *outs.values()), kwargs=dict(BI=16, STEPS=3),
                      outputs=outs, reference=ref, tolerances={k: (1e-5, 1e-5) for k in outs})


# -- a kernel whose body a constexpr switches off, given an empty tensor -----------------------------------
@tle.jit
def switched_off(x_ptr, y_ptr, n, ON: tl.constexpr, BLOCK: tl.constexpr):
    if ON:
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0))


@case(switched_off)
def empty_body(device):
    x = torch.empty(0, device=device)
    y = torch.arange(8, device=device, dtype=torch.float32)
    return tle.Launch(grid=(1,), args=(x, y, 0), kwargs=dict(ON=False, BLOCK=8), outputs={"y": y},
                      reference=lambda: {"y": torch.arange(8, device=device, dtype=torch.float32)})


# -- an offset named once and reused, beside one that shares only part of it ------------------------------
@tle.jit
def named_offsets(x_ptr, y_ptr, z_ptr, B: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    base = pid_m * 64 + pid_n * 8
    offs = tl.arange(0, B)
    tl.store(y_ptr + base + offs, tl.load(x_ptr + base + offs) * 2.0)
    tl.store(z_ptr + pid_m * 64 + pid_n * 16 + offs, tl.load(x_ptr + pid_m * 64 + pid_n * 16 + offs))


@case(named_offsets)
def partly_named_offsets(device):
    x = torch.randn(128, device=device)
    y, z = torch.zeros(128, device=device), torch.zeros(128, device=device)

    def ref():
        yy, zz = torch.zeros_like(x), torch.zeros_like(x)
        for m in range(2):
            for n in range(3):
                yy[m * 64 + n * 8:m * 64 + n * 8 + 8] = x[m * 64 + n * 8:m * 64 + n * 8 + 8] * 2.0
                zz[m * 64 + n * 16:m * 64 + n * 16 + 8] = x[m * 64 + n * 16:m * 64 + n * 16 + 8]
        return {"y": yy, "z": zz}
    return tle.Launch(grid=(2, 3), args=(x, y, z), kwargs=dict(B=8), outputs={"y": y, "z": z}, reference=ref)


# -- bounds computed in steps that the box analysis folds away: lets that become unused one after another ----
@tle.jit
def folded_bounds(x_ptr, y_ptr, n, B: tl.constexpr):
    start = tl.program_id(0) * B
    rem = n - start
    over = start - n
    left = 0 - over                        # unused once its mask is folded, and then `over` is too
    offs = tl.arange(0, B)
    tl.store(y_ptr + start + offs, tl.load(x_ptr + start + offs, mask=offs < rem, other=0.0) + 1.0,
             mask=offs < left)


@case(folded_bounds)
def bound_lets(device):
    x = torch.randn(100, device=device)
    y = _nan_like(x)
    return tle.Launch(grid=(4,), args=(x, y, 100), kwargs=dict(B=32), outputs={"y": y},
                      reference=lambda: {"y": x + 1.0})


# -- an unnamed scalar read by two ops ---------------------------------------------------------------------
@tle.jit
def _scaled_pair(v, w):
    return v * 2.0 + w, v - w


@tle.jit
def reused_scalar(x_ptr, y_ptr, z_ptr, B: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * B + tl.arange(0, B)
    p, q = _scaled_pair(pid.to(tl.float32) + 0.5, 1.0)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x * p)
    tl.store(z_ptr + offs, x + q)


@case(reused_scalar)
def scalar_read_twice(device):
    x = torch.randn(96, device=device)
    y, z = _nan_like(x), _nan_like(x)
    s = torch.arange(3, device=device, dtype=torch.float32).repeat_interleave(32) + 0.5
    return tle.Launch(grid=(3,), args=(x, y, z), kwargs=dict(B=32), outputs={"y": y, "z": z},
                      reference=lambda: {"y": x * (s * 2.0 + 1.0), "z": x + (s - 1.0)})


# -- loop bounds: a range from the outer counter, constant ranges with a start, empty, negative; an unread load --
@tle.jit
def bounded_loops(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.load(x_ptr + 1)                         # nothing reads it: not emitted
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(4):
        for j in range(i, 8, 2):               # starts at the outer counter
            acc += x * (j + 1)
    for k in range(3, 10):                     # seven steps
        acc += x
    for k in range(5, 3):                      # no steps
        acc += x * 100.0
    for k in range(-4, 0):                     # four steps
        acc -= x * k
    tl.store(y_ptr + offs, acc)


@case(bounded_loops)
def loop_bounds(device):
    x = torch.randn(32, device=device)
    y = _nan_like(x)
    inner = sum(j + 1 for i in range(4) for j in range(i, 8, 2))
    return tle.Launch(grid=(1,), args=(x, y), kwargs=dict(BLOCK=32), outputs={"y": y},
                      reference=lambda: {"y": x * (inner + 7 + 10)}, tolerances={"y": (1e-5, 1e-5)})


# -- pipelined lookups: through a 2-D index tile, a plain gather, carried scalars swapped beside a staged gather --
@tle.jit
def table_lookups(x_ptr, idx_ptr, y_ptr, z_ptr, BI: tl.constexpr, BJ: tl.constexpr, STEPS: tl.constexpr):
    oi = tl.arange(0, BI)
    oj = tl.arange(0, BJ)
    acc = tl.zeros([BI, BJ], dtype=tl.float32)
    acc1 = tl.zeros([BI], dtype=tl.float32)
    for s in tl.range(0, STEPS, num_stages=2):
        ids = tl.load(idx_ptr + s * BI * BJ + oi[:, None] * BJ + oj[None, :])     # a 2-D index tile
        acc += tle.load(x_ptr + ids, mask=ids >= 0, other=0.0, is_async=True)
        rows = tl.load(idx_ptr + s * BI * BJ + oi, mask=oi < BI - 2, other=-1)
        acc1 += tl.load(x_ptr + rows, mask=rows >= 0, other=0.0)                # a plain gather: nothing staged
    acc2 = tl.zeros([BI], dtype=tl.float32)
    fa = 2.0
    fb = 3.0
    for s in tl.range(0, STEPS, num_stages=2):
        rows = tl.load(idx_ptr + s * BI * BJ + oi, mask=oi < BI - 2, other=-1)
        acc2 += tle.load(x_ptr + rows, mask=rows >= 0, other=0.0, is_async=True)
        fa, fb = fb, fa                        # swapped through temporaries: the loop names no stages
    tl.store(y_ptr + oi[:, None] * BJ + oj[None, :], acc)
    tl.store(z_ptr + oi, acc1 + acc2 * fa + fb)


@case(table_lookups)
def pipelined_lookups(device):
    x = torch.randn(64, device=device)
    idx = torch.randint(0, 64, (3 * 64,), device=device, dtype=torch.int32)
    idx[::7] = -1
    y = torch.full((16, 4), float("nan"), device=device)
    z = torch.full((16,), float("nan"), device=device)

    def ref():
        blocks = idx.long().view(3, 64)
        ids = blocks.view(3, 16, 4)
        acc = torch.where(ids >= 0, x[ids.clamp(min=0)], 0.0).sum(0)
        rows = blocks[:, :16].clone()
        rows[:, 14:] = -1
        g = torch.where(rows >= 0, x[rows.clamp(min=0)], 0.0).sum(0)
        return {"y": acc, "z": g + g * 3.0 + 2.0}
    return tle.Launch(grid=(1,), args=(x, idx, y, z), kwargs=dict(BI=16, BJ=4, STEPS=3), outputs={"y": y, "z": z},
                      reference=ref, tolerances={"y": (1e-5, 1e-5), "z": (1e-5, 1e-5)})


# -- promises to the compiler: tl.multiple_of / tl.max_contiguous (kept by Triton, dropped by TileLang) -----
@tle.jit
def promised_offsets(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    start = tl.multiple_of(tl.program_id(0) * BLOCK, BLOCK)
    offs = tl.max_contiguous(tl.multiple_of(start + tl.arange(0, BLOCK), BLOCK), BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 3.0, mask=m)


@case(promised_offsets)
def alignment_hints(device):
    x = torch.randn(300, device=device)
    y = _nan_like(x)
    return tle.Launch(grid=(3,), args=(x, y, 300), kwargs=dict(BLOCK=128), outputs={"y": y},
                      reference=lambda: {"y": x * 3.0})


# -- libdevice functions, tl.fma, tl.clamp, tl.umulhi -----------------------------------------------------
from triton.language.extra.cuda import libdevice  # noqa: E402 (here, so the cases above keep their lines)

@tle.jit
def special_functions(x_ptr, u_ptr, y_ptr, h_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    y = libdevice.tanh(x) + libdevice.pow(tl.abs(x), 1.5) + tl.fma(x, x, 1.0) + libdevice.rint(x * 3.0)
    y += libdevice.atan2(x, 2.0) + libdevice.log1p(tl.abs(x)) + tl.clamp(x, -0.5, 0.5)
    tl.store(y_ptr + offs, y, mask=m)
    u = tl.load(u_ptr + offs, mask=m)
    tl.store(h_ptr + offs, tl.umulhi(u, u * 7 + 3), mask=m)


@case(special_functions)
def libdevice_and_umulhi(device):
    x = torch.randn(200, device=device)
    u = torch.randint(-2**31, 2**31 - 1, (200,), dtype=torch.int32, device=device)
    y, h = _nan_like(x), _nan_like(u)

    def reference():
        r = torch.tanh(x) + x.abs() ** 1.5 + (x * x + 1) + torch.round(x * 3) + torch.atan2(x, torch.tensor(2.0))
        r = r + torch.log1p(x.abs()) + x.clamp(-0.5, 0.5)
        a, b = u.long() & 0xFFFFFFFF, (u * 7 + 3).long() & 0xFFFFFFFF
        return {"y": r, "h": ((a * b) >> 32).to(torch.int64).to(torch.int32)}     # the high 32 bits, as i32
    return tle.Launch(grid=(2,), args=(x, u, y, h, 200), kwargs=dict(BLOCK=128), outputs={"y": y, "h": h},
                      reference=reference)


# -- tl.join / tl.split / tl.interleave -----------------------------------------------------------------
@tle.jit
def pairs(x_ptr, y_ptr, z_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    j = tl.join(tl.load(x_ptr + offs), tl.load(y_ptr + offs))      # (BLOCK, 2)
    a, b = tl.split(j * 2.0)
    tl.store(z_ptr + tl.arange(0, 2 * BLOCK), tl.interleave(a, b + 1.0))


@case(pairs)
def join_split_interleave(device):
    x, y = torch.randn(64, device=device), torch.randn(64, device=device)
    z = torch.full((128,), float("nan"), device=device)
    return tle.Launch(grid=(1,), args=(x, y, z), kwargs=dict(BLOCK=64), outputs={"z": z},
                      reference=lambda: {"z": torch.stack([2 * x, 2 * y + 1], 1).reshape(-1)})


# -- a persistent loop: tl.range with a runtime step ----------------------------------------------------
@tle.jit
def persistent_softmax(x_ptr, y_ptr, n_rows, n_cols, BLOCK: tl.constexpr, num_stages: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=num_stages):
        offs = tl.arange(0, BLOCK)
        m = offs < n_cols
        x = tl.load(x_ptr + row * n_cols + offs, mask=m, other=-float("inf"))
        e = tl.exp(x - tl.max(x, 0))
        tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, 0), mask=m)


@case(persistent_softmax)
def runtime_step(device):
    x = torch.randn(37, 100, device=device)
    y = _nan_like(x)
    return tle.Launch(grid=(5,), args=(x, y, 37, 100), kwargs=dict(BLOCK=128, num_stages=2), outputs={"y": y},
                      reference=lambda: {"y": torch.softmax(x, 1)})


# -- block pointers: tl.make_block_ptr / tl.advance with boundary_check and padding ----------------------
@tle.jit
def block_ptr_matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr,
                     BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    a_blk = tl.make_block_ptr(a_ptr, (M, K), (sam, sak), (pid_m * BM, 0), (BM, BK), (1, 0))
    b_blk = tl.make_block_ptr(b_ptr, (K, N), (sbk, sbn), (0, pid_n * BN), (BK, BN), (1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_blk, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_blk, boundary_check=(0, 1), padding_option="zero")
        acc = tl.dot(a, b, acc)
        a_blk = tl.advance(a_blk, (0, BK))
        b_blk = tl.advance(b_blk, (BK, 0))
    c_blk = tl.make_block_ptr(c_ptr, (M, N), (scm, scn), (pid_m * BM, pid_n * BN), (BM, BN), (1, 0))
    tl.store(c_blk, acc.to(tl.float16), boundary_check=(0, 1))


@case(block_ptr_matmul)
def block_pointers(device):
    M, N, K = 100, 72, 90
    a = torch.randn(M, K, device=device).half()
    b = torch.randn(K, N, device=device).half()
    c = torch.full((M, N), float("nan"), device=device).half()
    return tle.Launch(grid=(4, 3), args=(a, b, c, M, N, K, K, 1, N, 1, N, 1), kwargs=dict(BM=32, BN=32, BK=32),
                      outputs={"c": c}, reference=lambda: {"c": (a.float() @ b.float()).half()})


# -- tl.atomic_or ------------------------------------------------------------------------------------------
@tle.jit
def bit_sets(x_ptr, bits_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m, other=0)
    tl.atomic_or(bits_ptr + v // 32, (1 << (v % 32)).to(tl.int32), mask=m)


@case(bit_sets)
def atomic_or(device):
    x = torch.randint(0, 256, (300,), dtype=torch.int32, device=device)
    bits = torch.zeros(8, dtype=torch.int32, device=device)

    def reference():
        out = [0] * 8
        for v in x.tolist():
            out[v // 32] |= 1 << (v % 32)
        return {"bits": torch.tensor([w - (1 << 32) if w >= 1 << 31 else w for w in out], dtype=torch.int32)}
    return tle.Launch(grid=(3,), args=(x, bits, 300), kwargs=dict(BLOCK=128), outputs={"bits": bits},
                      reference=reference)


# -- while loops: a binary search, and a linked-list walk whose condition is the value it last loaded ------
@tle.jit
def while_forms(sorted_ptr, q_ptr, pos_ptr, head_ptr, next_ptr, val_ptr, sum_ptr, len_ptr, n):
    pid = tl.program_id(0)
    q = tl.load(q_ptr + pid)
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) // 2
        if tl.load(sorted_ptr + mid) < q:
            lo = mid + 1
        else:
            hi = mid
    tl.store(pos_ptr + pid, lo)
    node = tl.load(head_ptr + pid)
    total = 0.0
    length = 0
    while node >= 0:
        total += tl.load(val_ptr + node)
        length += 1
        node = tl.load(next_ptr + node)
    tl.store(sum_ptr + pid, total)
    tl.store(len_ptr + pid, length)


@case(while_forms)
def while_loops(device):
    n, lists = 300, 6
    srt = torch.sort(torch.randint(0, 1000, (n,), dtype=torch.int32)).values.to(device)
    q = torch.tensor([-5, 0, 17, 500, 999, 2000], dtype=torch.int32, device=device)
    # six linked lists threaded through 40 nodes in a random order; the last one is empty
    order = torch.randperm(40, generator=torch.Generator().manual_seed(3)).tolist()
    nxt, heads = [-1] * 40, []
    for chunk in (order[0:1], order[1:9], order[9:20], order[20:33], order[33:40], []):
        heads.append(chunk[0] if chunk else -1)
        for a, b in zip(chunk, chunk[1:]):
            nxt[a] = b
    head = torch.tensor(heads, dtype=torch.int32, device=device)
    nxt_t = torch.tensor(nxt, dtype=torch.int32, device=device)
    val = torch.randn(40, device=device)
    pos = torch.full((lists,), -7, dtype=torch.int32, device=device)
    sums, lens = torch.full((lists,), float("nan"), device=device), torch.full((lists,), -7, dtype=torch.int32,
                                                                                device=device)

    def reference():
        s, ln = [], []
        for h in heads:
            total, count, node = 0.0, 0, h
            while node >= 0:
                total, count, node = total + val[node].item(), count + 1, nxt[node]
            s.append(total)
            ln.append(count)
        return {"pos": torch.searchsorted(srt.cpu(), q.cpu(), side="left").to(torch.int32),
                "sums": torch.tensor(s), "lens": torch.tensor(ln, dtype=torch.int32)}
    return tle.Launch(grid=(lists,), args=(srt, q, pos, head, nxt_t, val, sums, lens, n), kwargs={},
                      outputs={"pos": pos, "sums": sums, "lens": lens}, reference=reference,
                      tolerances={"sums": (1e-5, 1e-5)})


# -- tensor descriptors: a matmul over ragged edges, read and written through descriptors ------------------
@tle.jit
def descriptor_matmul(a_ptr, b_ptr, c_ptr, s_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BM, BN])
    s_desc = tl.make_tensor_descriptor(s_ptr, [M, N], [N, 1], [BM, BN])
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(a_desc.load([off_m, k]), b_desc.load([k, off_n]), acc)
    c_desc.store([off_m, off_n], acc.to(tl.float16))
    s_desc.atomic_add([off_m, off_n], acc)


@case(descriptor_matmul)
def tensor_descriptors(device):
    M, N, K = 100, 72, 88       # row strides of whole 16 bytes, as TMA needs (Triton issues these as TMA)
    a = torch.randn(M, K, device=device).half()
    b = torch.randn(K, N, device=device).half()
    c = torch.full((M, N), float("nan"), device=device).half()
    s = torch.ones(M, N, device=device)

    def reference():
        prod = a.float() @ b.float()
        return {"c": prod.half(), "s": prod + 1.0}
    return tle.Launch(grid=(4, 3), args=(a, b, c, s, M, N, K), kwargs=dict(BM=32, BN=32, BK=32),
                      outputs={"c": c, "s": s}, reference=reference, tolerances={"s": _fp32_sums(a, b, K)})


# -- the values atomics return: per element of distinct addresses, and one ticket per program ------------------
@tle.jit
def atomic_returns(x_ptr, old_ptr, mx_ptr, old_mx_ptr, cnt_ptr, total_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    old = tl.atomic_add(x_ptr + offs, 1.0, mask=m)            # distinct elements: each returns what it held
    tl.store(old_ptr + offs, old, mask=m)
    before = tl.atomic_max(mx_ptr + offs, offs.to(tl.float32), mask=m)
    tl.store(old_mx_ptr + offs, before, mask=m)
    ticket = tl.atomic_add(cnt_ptr, 1)                         # one per program, in an order the GPU picks
    tl.atomic_add(total_ptr, ticket)                           # their sum does not depend on that order


@case(atomic_returns)
def atomic_values(device):
    n, block = 300, 128
    grid = (n + block - 1) // block
    x = torch.randn(n, device=device)
    mx = torch.randn(n, device=device) * n
    old, old_mx = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    cnt, total = torch.zeros(1, dtype=torch.int32, device=device), torch.zeros(1, dtype=torch.int32, device=device)
    x0, mx0 = x.clone(), mx.clone()

    def reference():
        return {"x": x0 + 1.0, "old": x0, "mx": torch.maximum(mx0, torch.arange(n, device=device).float()),
                "old_mx": mx0, "cnt": torch.tensor([grid], dtype=torch.int32),
                "total": torch.tensor([grid * (grid - 1) // 2], dtype=torch.int32)}
    return tle.Launch(grid=(grid,), args=(x, old, mx, old_mx, cnt, total, n), kwargs=dict(BLOCK=block),
                      outputs={"x": x, "old": old, "mx": mx, "old_mx": old_mx, "cnt": cnt, "total": total},
                      reference=reference)


# -- scans and reductions both backends have: tl.cumsum, and tl.associative_scan / tl.reduce whose combine
#    function is a plain sum or maximum (T.cumsum, T.reduce_sum, T.reduce_max on TileLang) ---------------------
@tle.jit
def _plus(a, b):
    return a + b


@tle.jit
def _larger(a, b):
    return tl.maximum(a, b)


@tle.jit
def prefix_sums(x_ptr, down_ptr, back_ptr, count_ptr, sum_ptr, max_ptr, n_rows, ROWS: tl.constexpr,
                COLS: tl.constexpr):
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)
    tile = rows[:, None] * COLS + cols[None, :]
    mask = rows[:, None] < n_rows
    x = tl.load(x_ptr + tile, mask=mask, other=0.0)
    tl.store(down_ptr + tile, tl.cumsum(x, 0), mask=mask)                                 # down the columns
    tl.store(back_ptr + tile, tl.associative_scan(x, 1, _plus, reverse=True), mask=mask)  # suffix sums of rows
    tl.store(count_ptr + cols, tl.cumsum(tl.sum((x > 0).to(tl.int32), 0), 0))            # 1-D, integers
    tl.store(sum_ptr + cols, tl.reduce(x, 0, _plus))
    tl.store(max_ptr + rows, tl.reduce(x, 1, _larger), mask=rows < n_rows)


@case(prefix_sums)
def user_combine_sums(device):
    n = 13
    x = torch.randn(n, 32, device=device)
    down, back = _nan_like(x), _nan_like(x)
    count = torch.full((32,), -7, dtype=torch.int32, device=device)
    sums, maxes = torch.full((32,), float("nan"), device=device), torch.full((n,), float("nan"), device=device)

    def reference():
        return {"down": x.cumsum(0), "back": x.flip(1).cumsum(1).flip(1),
                "count": (x > 0).int().sum(0).cumsum(0).int(), "sums": x.sum(0), "maxes": x.amax(1)}
    return tle.Launch(grid=(1,), args=(x, down, back, count, sums, maxes, n), kwargs=dict(ROWS=16, COLS=32),
                      outputs={"down": down, "back": back, "count": count, "sums": sums, "maxes": maxes},
                      reference=reference)


# -- fp8: conversions from fp32 and back (rounding to nearest even, saturating), bitcasts, two kinds mixed ------
def _fp8(x, dtype):
    """x rounded to the fp8 dtype as the GPU converts: to nearest even, saturating at the largest finite value."""
    limit = torch.finfo(dtype).max
    return x.clamp(-limit, limit).to(dtype)


@tle.jit
def fp8_conversions(x_ptr, e4_ptr, e5_ptr, e45_ptr, back_ptr, half_ptr, bits_ptr, raw_ptr, raw_back_ptr, n,
                    BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    e4 = x.to(tl.float8e4nv)
    e5 = tl.cast(x, tl.float8e5)
    tl.store(e4_ptr + offs, e4, mask=m)
    tl.store(e5_ptr + offs, e5, mask=m)
    tl.store(e45_ptr + offs, e5.to(tl.float8e4nv), mask=m)   # one fp8 kind to the other
    tl.store(back_ptr + offs, e4.to(tl.float32), mask=m)
    tl.store(half_ptr + offs, e4 + e5, mask=m)               # two fp8 kinds meet in fp16 (Triton's rule)
    tl.store(bits_ptr + offs, e4.to(tl.uint8, bitcast=True), mask=m)
    raw = tl.load(raw_ptr + offs, mask=m, other=0).to(tl.float8e5, bitcast=True)
    tl.store(raw_back_ptr + offs, tl.abs(raw).to(tl.float16), mask=m)


@case(fp8_conversions)
def fp8_round_trips(device):
    n = 300
    g = torch.Generator().manual_seed(8)
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-18, 18, (n,), generator=g).float())
    x[:10] = torch.tensor([float("inf"), -float("inf"), 1000.0, 464.0, 449.0, -70000.0, 2.0 ** -10, 2.0 ** -17,
                           0.5625, 0.1875])                  # saturated, subnormal and half-way values
    raw = (torch.arange(n) * 37 % 256).to(torch.uint8)
    nonfinite = (raw & 0x7C) == 0x7C                         # fp8e5 infinities and NaNs
    raw[nonfinite] &= 0x83
    x, raw = x.to(device), raw.to(device)

    def fp8_nan(dtype):
        return torch.full((n,), float("nan"), device=device).to(dtype)
    e4, e45, e5 = fp8_nan(torch.float8_e4m3fn), fp8_nan(torch.float8_e4m3fn), fp8_nan(torch.float8_e5m2)
    back, half = _nan_like(x), torch.full((n,), float("nan"), device=device, dtype=torch.float16)
    bits = torch.full((n,), 7, device=device, dtype=torch.uint8)
    raw_back = torch.full((n,), float("nan"), device=device, dtype=torch.float16)

    def reference():
        r4, r5 = _fp8(x, torch.float8_e4m3fn), _fp8(x, torch.float8_e5m2)
        return {"e4": r4, "e5": r5, "e45": _fp8(r5.float(), torch.float8_e4m3fn), "back": r4.float(),
                "half": r4.half() + r5.half(), "bits": r4.view(torch.uint8),
                "raw_back": raw.view(torch.float8_e5m2).float().abs().half()}
    outputs = {"e4": e4, "e5": e5, "e45": e45, "back": back, "half": half, "bits": bits, "raw_back": raw_back}
    return tle.Launch(grid=(3,), args=(x, e4, e5, e45, back, half, bits, raw, raw_back, n), kwargs=dict(BLOCK=128),
                      outputs=outputs, reference=reference,
                      tolerances={k: (0.0, 0.0) for k in outputs if k != "bits"})


# -- fp8: a loaded fp8 operand, one converted in the kernel, tl.dot accumulating in fp32 -------------------------
@tle.jit
def fp8_matmul(a_ptr, b_ptr, bt_ptr, c_ptr, c8_ptr, d_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    acc5 = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        kk = k + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K),
                    other=0.0)                                                            # fp8e4nv in memory
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N),
                    other=0.0).to(tl.float8e4nv)                                          # fp16, converted here
        acc = tl.dot(a, b, acc)
        bt = tl.load(bt_ptr + rn[:, None] * K + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K),
                     other=0.0)                                                           # fp8e5, K-major
        acc5 = tl.dot(a.to(tl.float8e5), tl.trans(bt), acc5)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=mask)
    tl.store(c8_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float8e4nv), mask=mask)
    tl.store(d_ptr + rm[:, None] * N + rn[None, :], acc5, mask=mask)


@case(fp8_matmul)
def fp8_dot(device):
    M, N, K = 64, 128, 128
    g = torch.Generator().manual_seed(9)

    def halves(*shape):
        # multiples of 1/2 in [-2, 2]: exact in both fp8 kinds, with partial sums of a few bits, which even the
        # GPU's fp8 tensor-core accumulation (narrower than fp32) adds exactly
        return torch.randint(-4, 5, shape, generator=g).float() / 2
    a = halves(M, K).to(device).to(torch.float8_e4m3fn)
    b = halves(K, N).to(device).half()
    bt = halves(N, K).to(device).to(torch.float8_e5m2)
    c, d = torch.full((M, N), float("nan"), device=device), torch.full((M, N), float("nan"), device=device)
    c8 = torch.full((M, N), float("nan"), device=device).to(torch.float8_e4m3fn)

    def reference():
        c_ref = a.float() @ b.float()
        return {"c": c_ref, "c8": _fp8(c_ref, torch.float8_e4m3fn), "d": a.float() @ bt.float().t()}
    return tle.Launch(grid=(1, 2), args=(a, b, bt, c, c8, d, M, N, K), kwargs=dict(BM=64, BN=64, BK=64),
                      outputs={"c": c, "c8": c8, "d": d}, reference=reference,
                      tolerances={"c": (0.0, 0.0), "c8": (0.0, 0.0), "d": (0.0, 0.0)})


# -- tl.split of loaded tiles: a half is every other element, which TileLang reads from shared memory (it
#    cannot lay out a fragment read at a stride); a 1-D tile reshaped, an (N, 2) tile, an (M, 2N) tile as
#    (M, N, 2), halves interleaved back ------------------------------------------------------------------
@tle.jit
def loaded_halves(x_ptr, p_ptr, m_ptr, a_ptr, b_ptr, z_ptr, c_ptr, BLOCK: tl.constexpr, M: tl.constexpr,
                  N: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a, b = tl.split(tl.reshape(tl.load(x_ptr + tl.arange(0, 2 * BLOCK)), (BLOCK, 2)))
    tl.store(a_ptr + offs, a)
    tl.store(b_ptr + offs, b * 2.0)
    lo, hi = tl.split(tl.load(p_ptr + offs[:, None] * 2 + tl.arange(0, 2)[None, :]))
    tl.store(z_ptr + tl.arange(0, 2 * BLOCK), tl.interleave(hi, lo - a))
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    m = tl.load(m_ptr + rm[:, None] * (2 * N) + tl.arange(0, 2 * N)[None, :])
    re, im = tl.split(tl.reshape(m, (M, N, 2)))
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], re * re + im * im)


@case(loaded_halves)
def split_loaded_tiles(device):
    x, p, m = torch.randn(128, device=device), torch.randn(64, 2, device=device), torch.randn(8, 32, device=device)
    a, b, z, c = (torch.full(shape, float("nan"), device=device) for shape in ((64,), (64,), (128,), (8, 16)))

    def reference():
        return {"a": x[0::2], "b": 2 * x[1::2], "z": torch.stack([p[:, 1], p[:, 0] - x[0::2]], 1).reshape(-1),
                "c": m[:, 0::2] ** 2 + m[:, 1::2] ** 2}
    return tle.Launch(grid=(1,), args=(x, p, m, a, b, z, c), kwargs=dict(BLOCK=64, M=8, N=16),
                      outputs={"a": a, "b": b, "z": z, "c": c}, reference=reference)


# -- tl.split of computed tiles: one materialized (read by both halves), one written inline over the
#    loaded tile, a loop-carried accumulator, and an interleave of halves split again -----------------------
@tle.jit
def computed_halves(x_ptr, y_ptr, d_ptr, s_ptr, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.arange(0, 2 * BLOCK))
    e, o = tl.split(tl.reshape(tl.exp(x) * 0.5, (BLOCK, 2)))
    u, v = tl.split(tl.reshape(x * 2.0 + 1.0, (BLOCK, 2)))
    tl.store(d_ptr + offs, e - o + u * v)
    acc = tl.zeros((BLOCK, 2), dtype=tl.float32)
    for s in range(STEPS):
        acc += tl.load(y_ptr + s * 2 * BLOCK + offs[:, None] * 2 + tl.arange(0, 2)[None, :])
    lo, hi = tl.split(acc)
    w0, w1 = tl.split(tl.reshape(tl.interleave(lo * hi, hi), (BLOCK, 2)))
    tl.store(s_ptr + offs, w0 - w1 + tl.sum(lo, 0))


@case(computed_halves)
def split_computed_tiles(device):
    x, y = torch.randn(128, device=device), torch.randn(3, 64, 2, device=device)
    d, s = torch.full((64,), float("nan"), device=device), torch.full((64,), float("nan"), device=device)

    def reference():
        ex, lin = torch.exp(x) * 0.5, x * 2.0 + 1.0
        acc = y.sum(0)
        lo, hi = acc[:, 0], acc[:, 1]
        return {"d": ex[0::2] - ex[1::2] + lin[0::2] * lin[1::2], "s": lo * hi - hi + lo.sum()}
    return tle.Launch(grid=(1,), args=(x, y, d, s), kwargs=dict(BLOCK=64, STEPS=3), outputs={"d": d, "s": s},
                      reference=reference, tolerances={"d": (1e-4, 1e-4), "s": (1e-4, 1e-4)})


# -- a split of a carried fragment in a loop whose index tile could be staged: the copy of the tile it halves
#    is a statement before the scalar let, so the loop names no stages (the tile is read again at each use) --
@tle.jit
def halves_in_gather_loop(t_ptr, idx_ptr, z_ptr, BI: tl.constexpr, STEPS: tl.constexpr):
    offs_i = tl.arange(0, BI)
    c2 = tl.arange(0, 2)
    acc2 = tl.zeros([BI, 2], dtype=tl.float32)
    acc = tl.zeros([BI], dtype=tl.float32)
    for s in tl.range(0, STEPS, num_stages=2):
        lo, hi = tl.split(acc2)
        r0 = tl.load(idx_ptr + s * BI + 1)
        rows = tl.load(idx_ptr + s * BI + offs_i, mask=offs_i < BI - 1, other=-1)      # read synchronously
        g = tle.load(t_ptr + rows[:, None] * 2 + c2[None, :], mask=(rows >= 0)[:, None] & (c2[None, :] < 2),
                     is_async=True)
        acc += lo * hi + r0.to(tl.float32)
        acc2 += tl.where((rows >= 0)[:, None], g, 0.0)
    tl.store(z_ptr + offs_i, acc)


@case(halves_in_gather_loop)
def split_in_gather_loop(device):
    t = torch.randn(40, 2, device=device)
    idx = torch.randint(0, 40, (3 * 16,), device=device, dtype=torch.int32)
    idx[::3] = -1
    z = torch.full((16,), float("nan"), device=device)

    def reference():
        r = idx.long().view(3, 16)
        ok = r >= 0
        ok[:, 15] = False                          # masked off: `other` is -1
        g = torch.where(ok[..., None], t[r.clamp(min=0)], 0.0)
        acc2, acc = torch.zeros(16, 2, device=device), torch.zeros(16, device=device)
        for s in range(3):
            acc = acc + acc2[:, 0] * acc2[:, 1] + r[s, 1].float()
            acc2 = acc2 + g[s]
        return {"z": acc}
    return tle.Launch(grid=(1,), args=(t, idx, z), kwargs=dict(BI=16, STEPS=3), outputs={"z": z},
                      reference=reference, tolerances={"z": (1e-4, 1e-4)})


def _fp32_sums(a, b, k):
    """(atol, rtol) of fp32 sums of exact fp16 products: the reference's within (K + 1) u |a| @ |b| of the exact
    product and a kernel's within twice that (the tensor cores' sums truncate), with room to spare; rtol for
    a value added to the sum."""
    return 4 * (k + 1) * 2.0 ** -24 * (a.float().abs() @ b.float().abs()).max().item(), 2.0 ** -23


# -- a tile's row sums and column sums in one expression ------------------------------------------------
@tle.jit
def row_minus_column_sums(x_ptr, y_ptr, out_ptr, B: tl.constexpr):
    """A product's row sums minus its column sums (the antisymmetric part of a gate gradient): one T.Parallel
    over both on TileLang."""
    r = tl.arange(0, B)
    p = tl.dot(tl.load(x_ptr + r[:, None] * B + r[None, :]), tl.load(y_ptr + r[:, None] * B + r[None, :]))
    rows = tl.sum(p, axis=1) * 2.0
    tl.store(out_ptr + r, rows - tl.sum(p, axis=0))


@case(row_minus_column_sums)
def row_and_column_sums(device):
    x, y = torch.randn(32, 32, device=device), torch.randn(32, 32, device=device)
    out = torch.full((32,), float("nan"), device=device)
    return tle.Launch(grid=(1,), args=(x, y, out), kwargs=dict(B=32), outputs={"out": out},
                      reference=lambda: {"out": (x @ y).sum(1) * 2.0 - (x @ y).sum(0)},
                      tolerances={"out": (2e-2, 2e-2)})
