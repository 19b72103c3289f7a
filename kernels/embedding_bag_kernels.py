"""The kernels of tle.ops.embedding_bag (modes "sum", "mean", "max"; see kernels/embedding_bag.py for the
operator), their launches, and the integer bookkeeping of the sorted backward.

Forward: one program per bag (and per block of columns), a loop over the bag's indices in blocks of BLOCK_I
whose bounds are the bag's offsets, loaded in the kernel; each step gathers BLOCK_I weight rows at once.
- sum / mean (`embedding_bag_fwd_kernel`): the rows, times their per-sample weights where given, added up in
  fp32; mean also writes 1 / max(count, 1) per bag (fp32), which its backward multiplies by.
- max (`embedding_bag_max_fwd_kernel`): the largest value of each column and which weight row held it (the
  first position of the bag on a tie, as torch), written per bag and column (int32; -1 for an empty bag, whose
  output row is zeros).

Backward to weight (dweight is dense, zero where no index points):
- "sorted" (sum and mean; deterministic, no atomics): the (index, bag) pairs are sorted by index on the host
  side with torch ops (sort, searchsorted: bookkeeping of integer positions), which gives every weight row the
  run of positions that point at it. A program takes a block of BLOCK_R weight rows, adds up dy[bag] times the
  position's scale (1 / count of the bag for mean, its per-sample weight for weighted sums, 1 for sums) over
  each row's run, in a fixed order, one position of every run a step, and writes its rows once (zeros for an
  empty run). A row that many positions point at keeps its program stepping as many times: on heavily skewed
  indices "atomic" may be faster.
- "atomic" (sum and mean): one program per bag adds the scaled dy[bag] into the rows of its indices with
  tl.atomic_add, in an fp32 buffer (zero-filled first); for fp16/bf16 weights a second kernel casts it to
  weight's dtype. The order of the additions varies from run to run, so the low bits do too.
- max (atomic only): each (bag, column) adds dy[bag, column] into the row the forward chose for it, in the
  same fp32 buffer and cast. Only bags choosing the same row for the same column meet in one element.
Backward to the per-sample weights: one program per bag, the dot product of dy[bag] with each of its weight
rows (`embedding_bag_psw_grad_kernel`; zero for padding and for positions in no bag)."""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.kernels import embedding_bag_torch as torch_side
from tle.kernels.embedding_bag_torch import bags_of_positions
from tle.oplib.arith import cdiv, next_power_of_2

MAX_BLOCK_D = 1024          # wider rows take several programs per bag (grid axis 1)
CAST_BLOCK = 4096
MAX_BWD_BLOCK = 4096        # (bag, column) elements per program of the max backward


@tle.jit
def bag_bounds(off_ptr, bag, n_bags, n_indices):
    """[start, end) of `bag` in the indices: the next bag's offset, or the end of the indices for the last."""
    start = tl.load(off_ptr + bag)
    has_next = bag + 1 < n_bags
    end = tl.where(has_next, tl.load(off_ptr + bag + 1, mask=has_next, other=0), n_indices)
    return start, tl.minimum(end, n_indices)


@tle.jit
def bag_step(idx_ptr, i, end, padding_idx, BLOCK_I: tl.constexpr, HAS_PADDING: tl.constexpr):
    """The positions i .. i + BLOCK_I of a bag ending at `end`: (positions, which count (inside the bag, not
    padding), their indices (0 outside the bag))."""
    pos = i + tl.arange(0, BLOCK_I)
    keep = pos < end
    idx = tl.load(idx_ptr + pos, mask=keep, other=0)
    if HAS_PADDING:
        keep = keep & (idx != padding_idx)
    return pos, keep, idx


@tle.jit
def gather_rows(w_ptr, idx, keep, cols, col_mask, w_row_stride, OTHER: tl.constexpr):
    """The weight rows of `idx` over `cols`, OTHER where a position does not count, in fp32."""
    return tl.load(w_ptr + idx.to(tl.int64)[:, None] * w_row_stride + cols[None, :],
                   mask=keep[:, None] & col_mask[None, :], other=OTHER).to(tl.float32)


@tle.jit
def embedding_bag_fwd_kernel(w_ptr, idx_ptr, off_ptr, psw_ptr, out_ptr, inv_ptr, w_row_stride, n_bags, n_indices,
                             dim, padding_idx, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr, MEAN: tl.constexpr,
                             HAS_PSW: tl.constexpr, HAS_PADDING: tl.constexpr):
    bag = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    start, end = bag_bounds(off_ptr, bag, n_bags, n_indices)
    acc = tl.zeros([BLOCK_I, BLOCK_D], dtype=tl.float32)
    if MEAN:                # accumulators only where used: an unused fragment can defeat TileLang layout inference
        cnt = tl.zeros([BLOCK_I], dtype=tl.int32)
    for i in range(start, end, BLOCK_I):
        pos, keep, idx = bag_step(idx_ptr, i, end, padding_idx, BLOCK_I, HAS_PADDING)
        rows = gather_rows(w_ptr, idx, keep, cols, col_mask, w_row_stride, 0.0)
        if HAS_PSW:
            acc += rows * tl.load(psw_ptr + pos, mask=keep, other=0.0).to(tl.float32)[:, None]
        else:
            acc += rows
        if MEAN:
            cnt += keep.to(tl.int32)
    total = tl.sum(acc, axis=0)
    if MEAN:
        count = tl.maximum(tl.sum(cnt, axis=0), 1).to(tl.float32)
        total = total / count
        if tl.program_id(1) == 0:
            tl.store(inv_ptr + bag, 1.0 / count)
    tl.store(out_ptr + bag.to(tl.int64) * dim + cols, total.to(out_ptr.dtype.element_ty), mask=col_mask)


@tle.jit
def embedding_bag_max_fwd_kernel(w_ptr, idx_ptr, off_ptr, out_ptr, arg_ptr, w_row_stride, n_bags, n_indices, dim,
                                 padding_idx, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr, HAS_PADDING: tl.constexpr):
    # each of the BLOCK_I lanes keeps, per column, the largest value of the positions it saw and the first of
    # them (positions ascend along a lane, so a strictly larger value only replaces); the lanes are merged after
    # the loop: the largest value, at the least position holding it. No reduction inside the loop (TileLang's
    # layout inference takes minutes over one there).
    bag = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    start, end = bag_bounds(off_ptr, bag, n_bags, n_indices)
    none: tl.constexpr = 2147483647              # "no position yet"
    best = tl.full([BLOCK_I, BLOCK_D], float("-inf"), dtype=tl.float32)
    at = tl.full([BLOCK_I, BLOCK_D], none, dtype=tl.int32)       # position in the bag of each lane's best
    for i in range(start, end, BLOCK_I):
        pos, keep, idx = bag_step(idx_ptr, i, end, padding_idx, BLOCK_I, HAS_PADDING)
        rows = gather_rows(w_ptr, idx, keep, cols, col_mask, w_row_stride, float("-inf"))
        take = keep[:, None] & ((rows > best) | (at == none))      # the first counted value even if -inf
        best = tl.where(take, rows, best)
        at = tl.where(take, (pos - start).to(tl.int32)[:, None], at)
    top = tl.max(best, axis=0)
    first = tl.min(tl.where((best == top[None, :]) & (at != none), at, none), axis=0)
    found = first != none
    arg = tl.load(idx_ptr + start + first, mask=found & col_mask, other=0).to(tl.int32)
    arg = tl.where(found, arg, -1)
    tl.store(out_ptr + bag.to(tl.int64) * dim + cols, tl.where(found, top, 0.0).to(out_ptr.dtype.element_ty),
             mask=col_mask)
    tl.store(arg_ptr + bag.to(tl.int64) * dim + cols, arg, mask=col_mask)


@tle.jit
def embedding_bag_bwd_sorted_kernel(dy_ptr, bag_ptr, run_ptr, scale_ptr, dw_ptr, num_weights, dim,
                                    BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, SCALE: tl.constexpr):
    # weight row r is pointed at by the positions run_ptr[r] .. run_ptr[r + 1] of the sorted order; bag_ptr holds
    # the bag of each of them. SCALE: 0 none (sum), 1 scale_ptr[bag] (mean: 1 / max(count, 1) of each bag), 2
    # scale_ptr[position] (the per-sample weights in the sorted order). A program writes BLOCK_R consecutive rows
    # (one contiguous block of dweight) and takes one position of each row's run per step, so the steps run as
    # long as the block's longest run.
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < num_weights
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    start = tl.load(run_ptr + rows, mask=row_mask, other=0)
    end = tl.load(run_ptr + rows + 1, mask=row_mask, other=0)
    acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
    for step in range(0, tl.max(end - start, axis=0)):
        pos = start + step
        keep = pos < end
        bag = tl.load(bag_ptr + pos, mask=keep, other=0)
        g = tl.load(dy_ptr + bag.to(tl.int64)[:, None] * dim + cols[None, :], mask=keep[:, None] & col_mask[None, :],
                    other=0.0).to(tl.float32)
        if SCALE == 1:
            g = g * tl.load(scale_ptr + bag, mask=keep, other=0.0)[:, None]
        if SCALE == 2:
            g = g * tl.load(scale_ptr + pos, mask=keep, other=0.0).to(tl.float32)[:, None]
        acc += g
    tl.store(dw_ptr + rows.to(tl.int64)[:, None] * dim + cols[None, :], acc.to(dw_ptr.dtype.element_ty),
             mask=row_mask[:, None] & col_mask[None, :])


@tle.jit
def embedding_bag_bwd_atomic_kernel(dy_ptr, idx_ptr, off_ptr, scale_ptr, acc_ptr, n_bags, n_indices, dim,
                                    padding_idx, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr, SCALE: tl.constexpr,
                                    HAS_PADDING: tl.constexpr):
    # acc_ptr: fp32 [num_embeddings, dim], zero-filled; every bag adds its scaled dy[bag] into its indices' rows.
    # SCALE as the sorted kernel's: 0 none, 1 scale_ptr[bag], 2 scale_ptr[position] (per-sample weights)
    bag = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    start, end = bag_bounds(off_ptr, bag, n_bags, n_indices)
    g = tl.load(dy_ptr + bag.to(tl.int64) * dim + cols, mask=col_mask, other=0.0).to(tl.float32)
    if SCALE == 1:
        g = g * tl.load(scale_ptr + bag)
    for i in range(start, end, BLOCK_I):
        pos, keep, idx = bag_step(idx_ptr, i, end, padding_idx, BLOCK_I, HAS_PADDING)
        if SCALE == 2:
            sample = tl.load(scale_ptr + pos, mask=keep, other=0.0).to(tl.float32)
            vals = g[None, :] * sample[:, None]
        else:
            vals = tl.broadcast_to(g[None, :], [BLOCK_I, BLOCK_D])
        tl.atomic_add(acc_ptr + idx.to(tl.int64)[:, None] * dim + cols[None, :], vals,
                      mask=keep[:, None] & col_mask[None, :])


@tle.jit
def embedding_bag_max_bwd_kernel(dy_ptr, arg_ptr, acc_ptr, n, dim, BLOCK: tl.constexpr):
    # acc_ptr: fp32 [num_embeddings, dim], zero-filled; element (bag, column) of dy goes to the row arg_ptr chose
    # for it (-1: an empty bag, nowhere)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    arg = tl.load(arg_ptr + offs, mask=mask, other=-1)
    g = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.atomic_add(acc_ptr + arg.to(tl.int64) * dim + offs % dim, g, mask=mask & (arg >= 0))


@tle.jit
def embedding_bag_psw_grad_kernel(dy_ptr, w_ptr, idx_ptr, off_ptr, dpsw_ptr, w_row_stride, n_bags, n_indices,
                                  dim, padding_idx, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr,
                                  HAS_PADDING: tl.constexpr):
    # dpsw[position] = dy[bag] . weight[indices[position]] for each position of the program's bag (0 for padding)
    bag = tl.program_id(0)
    start, end = bag_bounds(off_ptr, bag, n_bags, n_indices)
    for i in range(start, end, BLOCK_I):
        pos, keep, idx = bag_step(idx_ptr, i, end, padding_idx, BLOCK_I, HAS_PADDING)
        dot = tl.zeros([BLOCK_I], dtype=tl.float32)
        for c in range(0, dim, BLOCK_D):
            cols = c + tl.arange(0, BLOCK_D)
            col_mask = cols < dim
            g = tl.load(dy_ptr + bag.to(tl.int64) * dim + cols, mask=col_mask, other=0.0).to(tl.float32)
            dot += tl.sum(gather_rows(w_ptr, idx, keep, cols, col_mask, w_row_stride, 0.0) * g[None, :], axis=1)
        tl.store(dpsw_ptr + pos, dot.to(dpsw_ptr.dtype.element_ty), mask=pos < end)


@tle.jit
def embedding_bag_cast_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    # the atomic backwards' fp32 buffer, rounded to weight's dtype
    base = tl.program_id(0).to(tl.int64) * BLOCK
    offs = tl.arange(0, BLOCK)
    mask = offs < n - base
    x = tl.load(src_ptr + base + offs, mask=mask, other=0.0)
    tl.store(dst_ptr + base + offs, x.to(dst_ptr.dtype.element_ty), mask=mask)


# -- launch configurations -----------------------------------------------------------------------------------
def _block_d(dim: int, cap: int = MAX_BLOCK_D) -> int:
    """Columns per program: dim rounded up to a power of two, at least 16, at most `cap`."""
    return min(cap, max(16, next_power_of_2(max(dim, 1))))


def atomic_config(dim: int) -> tuple[int, int, int]:
    """(BLOCK_I, BLOCK_D, num_warps) of the atomic backward: the columns of a row (up to MAX_BLOCK_D) by
    BLOCK_I gathered rows, about 8192 elements in flight per program."""
    block_d = _block_d(dim)
    block_i = max(1, min(64, 8192 // block_d))
    warps = 4 if block_i * block_d <= 2048 else 8
    return block_i, block_d, warps


def fwd_config(dim: int, backend: str) -> tuple[int, int, int]:
    """(BLOCK_I, BLOCK_D, num_warps) of the forwards. Their programs wait on three dependent loads (offsets, the
    indices, the rows), so what counts is how many bags are in flight per multiprocessor: small programs.
    Measured on the H200 (mean, 1M x 256 bf16, 64k bags of 32, TB/s): Triton, one-warp programs over 64-column
    slices of 16 rows a step 3.15, [32, 64] on 2 warps 2.43, [32, 256] on 8 warps 0.84; TileLang, whole rows of
    2 a step on one warp 3.13, [4, 256] on 1 warp 2.62, [8, 256] on 4 warps 2.24, [8, 64] on 1 warp 1.80,
    [16, 64] on 1 warp 1.24."""
    if backend == "triton":
        return 16, _block_d(dim, cap=64), 1
    block_d = _block_d(dim)
    return 2, block_d, max(1, block_d // 256)


def sorted_config(dim: int, backend: str) -> tuple[int, int, int]:
    """(BLOCK_R, BLOCK_D, num_warps) of the sorted backward: 2 weight rows by the columns of a row (up to
    MAX_BLOCK_D). Its steps wait on two dependent loads (the bags, then their dy rows) and there are as many
    steps as the longest run of the block, so small blocks, many of them in flight. Measured on the H200 (mean,
    1M x 256 bf16, 64k bags of 32: runs of 2 positions on average; the kernel alone, TB/s): Triton, [2, 256] on
    2 warps 1.66, on 1 warp 1.57, [4, 256] on 1 warp 1.49, [8, 256] on 4 warps 1.44, one row per program 0.89;
    TileLang [2, 256] on 1 warp 1.13, [4, 256] on 2 warps 1.06, [8, 256] on 4 warps 0.97."""
    block_d = _block_d(dim)
    return 2, block_d, max(1, block_d // (128 if backend == "triton" else 256))


def psw_grad_config(dim: int) -> tuple[int, int, int]:
    """(BLOCK_I, BLOCK_D, num_warps) of the per-sample weights' gradient: 8 positions by up to 256 columns a
    step (the columns of a row in as many steps as needed)."""
    return 8, _block_d(dim, cap=256), 2


# -- index bookkeeping (integer positions only, in torch) ---------------------------------------------------
def sorted_runs(indices, offsets, num_weights, padding_idx):
    """The positions of indices sorted by index (stable), as (bag of each sorted position, int32 where the bags
    and positions fit; run_ptr [num_weights + 1]: weight row r is pointed at by sorted positions
    run_ptr[r]..run_ptr[r + 1]; the permutation: original position of each sorted one). Positions that do not
    count (padding, in no bag, out of range) sort outside every run."""
    fits_int32 = max(indices.shape[0], num_weights) < 2**31 - 1
    bag, keep = bags_of_positions(indices, offsets, padding_idx, out_int32=fits_int32)
    key_dtype = torch.int32 if fits_int32 else torch.int64
    key = torch.where(keep, indices.to(key_dtype), num_weights)
    key_sorted, perm = torch.sort(key, stable=True)
    rows = torch.arange(num_weights + 1, device=indices.device, dtype=key_dtype)
    run_ptr = torch.searchsorted(key_sorted, rows, out_int32=fits_int32)
    return bag.index_select(0, perm), run_ptr, perm


# -- launches --------------------------------------------------------------------------------------------------
SCALE_NONE, SCALE_PER_BAG, SCALE_PER_POSITION = 0, 1, 2


def forward(weight, indices, offsets, per_sample_weights, mode, padding_idx, backend):
    """(out [n_bags, dim], aux): aux is 1 / max(count, 1) per bag (fp32) for mean, the chosen rows [n_bags, dim]
    (int32) for max, an empty tensor for sum."""
    n_bags, dim, n = offsets.shape[0], weight.shape[1], indices.shape[0]
    dev = weight.device
    if mode == "max":
        aux = torch.full((n_bags, dim), -1, device=dev, dtype=torch.int32)
    elif mode == "mean":
        aux = torch.ones(n_bags, device=dev, dtype=torch.float32)
    else:
        aux = torch.empty(0, device=dev, dtype=torch.float32)
    if n_bags == 0 or dim == 0 or n == 0:
        return torch.zeros(n_bags, dim, device=dev, dtype=weight.dtype), aux
    out = torch.empty(n_bags, dim, device=dev, dtype=weight.dtype)
    block_i, block_d, warps = fwd_config(dim, backend)
    grid = (n_bags, cdiv(dim, block_d))
    common = dict(BLOCK_I=block_i, BLOCK_D=block_d, HAS_PADDING=padding_idx >= 0, backend=backend, num_warps=warps)
    if mode == "max":
        embedding_bag_max_fwd_kernel[grid](weight, indices, offsets, out, aux, weight.stride(0), offsets.shape[0], n,
                                           dim, padding_idx, **common)
    else:
        psw = per_sample_weights if per_sample_weights is not None else weight
        embedding_bag_fwd_kernel[grid](weight, indices, offsets, psw, out, aux, weight.stride(0), offsets.shape[0], n,
                                       dim, padding_idx, MEAN=mode == "mean", HAS_PSW=per_sample_weights is not None,
                                       **common)
    return out, aux


def _scale_of(mode, per_sample_weights, aux):
    if per_sample_weights is not None:
        return SCALE_PER_POSITION, per_sample_weights
    return (SCALE_PER_BAG, aux) if mode == "mean" else (SCALE_NONE, None)


def _rounded(acc, dtype, backend):
    """The atomic backwards' fp32 buffer in weight's dtype."""
    if dtype == torch.float32:
        return acc
    dw = torch.empty(acc.shape, device=acc.device, dtype=dtype)
    embedding_bag_cast_kernel[(cdiv(acc.numel(), CAST_BLOCK),)](acc, dw, acc.numel(), BLOCK=CAST_BLOCK,
                                                                     backend=backend, num_warps=8)
    return dw


def weight_grad(dy, indices, offsets, per_sample_weights, aux, num_weights, mode, padding_idx, backward, backend):
    """dweight [num_weights, dim] in dy's dtype."""
    n_bags, dim = dy.shape
    n = indices.shape[0]
    if n_bags == 0 or dim == 0 or n == 0 or num_weights == 0:
        return torch.zeros(num_weights, dim, device=dy.device, dtype=dy.dtype)
    if mode == "max":
        acc = torch.zeros(num_weights, dim, device=dy.device, dtype=torch.float32)
        embedding_bag_max_bwd_kernel[(cdiv(n_bags * dim, MAX_BWD_BLOCK),)](dy, aux, acc, n_bags * dim, dim,
                                                                            BLOCK=MAX_BWD_BLOCK, backend=backend,
                                                                            num_warps=8)
        return _rounded(acc, dy.dtype, backend)
    scale_kind, scale = _scale_of(mode, per_sample_weights, aux)
    if backward == "sorted":
        bags, run_ptr, perm = sorted_runs(indices, offsets, num_weights, padding_idx)
        if scale_kind == SCALE_PER_POSITION:
            scale = scale.index_select(0, perm)
        dw = torch.empty(num_weights, dim, device=dy.device, dtype=dy.dtype)
        block_r, block_d, warps = sorted_config(dim, backend)
        embedding_bag_bwd_sorted_kernel[(cdiv(num_weights, block_r), cdiv(dim, block_d))](
            dy, bags, run_ptr, scale if scale is not None else dy, dw, num_weights, dim, BLOCK_R=block_r,
            BLOCK_D=block_d, SCALE=scale_kind, backend=backend, num_warps=warps)
        return dw
    acc = torch.zeros(num_weights, dim, device=dy.device, dtype=torch.float32)
    block_i, block_d, warps = atomic_config(dim)
    embedding_bag_bwd_atomic_kernel[(n_bags, cdiv(dim, block_d))](
        dy, indices, offsets, scale if scale is not None else dy, acc, offsets.shape[0], n, dim, padding_idx,
        BLOCK_I=block_i, BLOCK_D=block_d, SCALE=scale_kind, HAS_PADDING=padding_idx >= 0, backend=backend,
        num_warps=warps)
    return _rounded(acc, dy.dtype, backend)


def per_sample_weights_grad(dy, weight, indices, offsets, padding_idx, backend):
    """dper_sample_weights [len(indices)] in weight's dtype."""
    n_bags, dim = dy.shape
    dpsw = torch.zeros(indices.shape[0], device=dy.device, dtype=weight.dtype)
    if n_bags == 0 or dim == 0 or indices.shape[0] == 0:
        return dpsw
    block_i, block_d, warps = psw_grad_config(dim)
    embedding_bag_psw_grad_kernel[(n_bags,)](dy, weight, indices, offsets, dpsw, weight.stride(0), offsets.shape[0],
                                             indices.shape[0], dim, padding_idx, BLOCK_I=block_i, BLOCK_D=block_d,
                                             HAS_PADDING=padding_idx >= 0, backend=backend, num_warps=warps)
    return dpsw


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_problem(device, size):
    """(weight, indices, offsets, padding_idx): small: odd sizes, empty bags, padding, repeated indices;
    large: 1M x 256 bf16, 64k bags of 32."""
    g = torch.Generator().manual_seed(0)           # the small case is the same on every device
    if size == "small":
        e, dim, dtype = 50, 33, torch.float32
        lengths = torch.tensor([3, 0, 7, 1, 0, 12, 5, 2, 9, 0])
        indices = torch.randint(0, e, (int(lengths.sum()),), generator=g)
        indices[:4] = 7                          # repeated in a bag and across bags, and padding
        padding_idx = 9
        indices[10:13] = padding_idx
    else:
        e, dim, bags, size = 1 << 20, 256, 65536, 32
        weight = torch.randn(e, dim, device=device, dtype=torch.bfloat16)
        indices = torch.randint(0, e, (bags * size,), device=device)
        return weight, indices, torch.arange(0, bags * size, size, device=device), -1
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
    weight = torch.randn(e, dim, generator=g).to(dtype)
    return weight.to(device), indices.to(device), offsets.to(device), padding_idx


def _label(weight, indices, offsets, what=""):
    e, dim = weight.shape
    return (f"{e}x{dim}x{offsets.shape[0]}x{indices.shape[0] // max(offsets.shape[0], 1)} {str(weight.dtype)[6:]}"
            + (f" {what}" if what else ""))


@tle.example(embedding_bag_fwd_kernel)
def _fwd_example(device, size):
    """mean with per-sample weights is not an operator case, but the kernel's two options at once: mean over
    small; weighted sum over large."""
    weight, indices, offsets, padding_idx = _example_problem(device, size)
    n_bags, dim = offsets.shape[0], weight.shape[1]
    mean = size == "small"
    psw = None if mean else torch.rand(indices.shape[0], device=device, dtype=weight.dtype)
    out = torch.full((n_bags, dim), float("nan"), device=device, dtype=weight.dtype)
    inv_counts = torch.full((n_bags,), float("nan"), device=device)
    block_i, block_d, warps = fwd_config(dim, "triton")      # one launch for both lowerings

    def ref():
        y, c = torch_side.forward(weight, indices, offsets, psw, "mean" if mean else "sum", padding_idx)
        return {"out": y, "inv_counts": c} if mean else {"out": y}
    return tle.Launch(grid=(n_bags, cdiv(dim, block_d)),
                      args=(weight, indices, offsets, psw if psw is not None else weight, out, inv_counts, dim, n_bags,
                            indices.shape[0], dim, padding_idx),
                      kwargs=dict(BLOCK_I=block_i, BLOCK_D=block_d, MEAN=mean, HAS_PSW=psw is not None,
                                  HAS_PADDING=padding_idx >= 0, num_warps=warps),
                      outputs={"out": out, "inv_counts": inv_counts} if mean else {"out": out}, reference=ref,
                      bytes=(indices.shape[0] + n_bags) * dim * weight.element_size(),
                      label=_label(weight, indices, offsets, "mean" if mean else "weighted sum"))


@tle.example(embedding_bag_max_fwd_kernel)
def _max_fwd_example(device, size):
    weight, indices, offsets, padding_idx = _example_problem(device, size)
    n_bags, dim = offsets.shape[0], weight.shape[1]
    out = torch.full((n_bags, dim), float("nan"), device=device, dtype=weight.dtype)
    arg = torch.full((n_bags, dim), -7, device=device, dtype=torch.int32)
    block_i, block_d, warps = fwd_config(dim, "triton")

    def ref():
        y, a = torch_side.forward(weight, indices, offsets, None, "max", padding_idx)
        return {"out": y, "arg": a}
    return tle.Launch(grid=(n_bags, cdiv(dim, block_d)),
                      args=(weight, indices, offsets, out, arg, dim, n_bags, indices.shape[0], dim, padding_idx),
                      kwargs=dict(BLOCK_I=block_i, BLOCK_D=block_d, HAS_PADDING=padding_idx >= 0, num_warps=warps),
                      outputs={"out": out, "arg": arg}, reference=ref,
                      bytes=(indices.shape[0] + n_bags) * dim * weight.element_size() + n_bags * dim * 4,
                      label=_label(weight, indices, offsets, "max"))


def _example_backward(device, size, mode="mean"):
    weight, indices, offsets, padding_idx = _example_problem(device, size)
    aux = torch_side.forward(weight if mode == "max" else weight[:, :1], indices, offsets, None, mode,
                                     padding_idx)[1]
    dy = torch.randn(offsets.shape[0], weight.shape[1], device=device).to(weight.dtype)
    return weight, indices, offsets, padding_idx, aux, dy


def _weight_grad_ref(dy, indices, offsets, psw, aux, e, mode, padding_idx):
    return lambda: {"dw": torch_side.weight_grad(dy.float(), indices, offsets, psw, aux, e, mode,
                                                         padding_idx)}


@tle.example(embedding_bag_bwd_sorted_kernel)
def _sorted_example(device, size):
    """mean over small (scale per bag), weighted sum over large (scale per position)."""
    weight, indices, offsets, padding_idx, inv_counts, dy = _example_backward(device, size)
    (e, dim), n_bags = weight.shape, offsets.shape[0]
    bags, run_ptr, perm = sorted_runs(indices, offsets, e, padding_idx)
    psw = None if size == "small" else torch.rand(indices.shape[0], device=device, dtype=weight.dtype)
    scale = inv_counts if psw is None else psw.index_select(0, perm)
    dw = torch.full((e, dim), float("nan"), device=device, dtype=weight.dtype)
    block_r, block_d, warps = sorted_config(dim, "triton")     # one launch for both lowerings
    return tle.Launch(grid=(cdiv(e, block_r), cdiv(dim, block_d)), args=(dy, bags, run_ptr, scale, dw, e, dim),
                      kwargs=dict(BLOCK_R=block_r, BLOCK_D=block_d,
                                  SCALE=SCALE_PER_BAG if psw is None else SCALE_PER_POSITION, num_warps=warps),
                      outputs={"dw": dw},
                      reference=_weight_grad_ref(dy, indices, offsets, psw, inv_counts, e,
                                                 "mean" if psw is None else "sum", padding_idx),
                      bytes=(n_bags + e) * dim * weight.element_size(),
                      label=_label(weight, indices, offsets, "mean" if psw is None else "weighted sum"))


@tle.example(embedding_bag_bwd_atomic_kernel)
def _atomic_example(device, size):
    weight, indices, offsets, padding_idx, inv_counts, dy = _example_backward(device, size)
    (e, dim), n_bags = weight.shape, offsets.shape[0]
    acc = torch.zeros(e, dim, device=device)
    block_i, block_d, warps = atomic_config(dim)
    return tle.Launch(grid=(n_bags, cdiv(dim, block_d)),
                      args=(dy, indices, offsets, inv_counts, acc, n_bags, indices.shape[0], dim, padding_idx),
                      kwargs=dict(BLOCK_I=block_i, BLOCK_D=block_d, SCALE=SCALE_PER_BAG, HAS_PADDING=padding_idx >= 0,
                                  num_warps=warps),
                      outputs={"dw": acc}, accumulates=("dw",),
                      reference=_weight_grad_ref(dy, indices, offsets, None, inv_counts, e, "mean", padding_idx),
                      bytes=n_bags * dim * dy.element_size() + e * dim * 4, label=_label(weight, indices, offsets))


@tle.example(embedding_bag_max_bwd_kernel)
def _max_bwd_example(device, size):
    weight, indices, offsets, padding_idx, arg, dy = _example_backward(device, size, "max")
    (e, dim), n_bags = weight.shape, offsets.shape[0]
    acc = torch.zeros(e, dim, device=device)
    return tle.Launch(grid=(cdiv(n_bags * dim, MAX_BWD_BLOCK),), args=(dy, arg, acc, n_bags * dim, dim),
                      kwargs=dict(BLOCK=MAX_BWD_BLOCK, num_warps=8), outputs={"dw": acc}, accumulates=("dw",),
                      reference=_weight_grad_ref(dy, indices, offsets, None, arg, e, "max", padding_idx),
                      bytes=n_bags * dim * (dy.element_size() + 4 + 4), label=_label(weight, indices, offsets, "max"))


@tle.example(embedding_bag_psw_grad_kernel)
def _psw_grad_example(device, size):
    weight, indices, offsets, padding_idx = _example_problem(device, size)
    n_bags, dim = offsets.shape[0], weight.shape[1]
    dy = torch.randn(n_bags, dim, device=device).to(weight.dtype)
    dpsw = torch.zeros(indices.shape[0], device=device, dtype=weight.dtype)    # positions in no bag stay zero
    block_i, block_d, warps = psw_grad_config(dim)
    return tle.Launch(grid=(n_bags,), args=(dy, weight, indices, offsets, dpsw, dim, n_bags, indices.shape[0], dim,
                                            padding_idx),
                      kwargs=dict(BLOCK_I=block_i, BLOCK_D=block_d, HAS_PADDING=padding_idx >= 0, num_warps=warps),
                      outputs={"dpsw": dpsw},
                      reference=lambda: {"dpsw": torch_side.per_sample_weights_grad(
                          dy.float(), weight.float(), indices, offsets, padding_idx)},
                      bytes=(indices.shape[0] + n_bags) * dim * weight.element_size(),
                      label=_label(weight, indices, offsets, "per-sample weights' gradient"))


@tle.example(embedding_bag_cast_kernel)
def _cast_example(device, size):
    n = 3000 if size == "small" else (1 << 20) * 256
    src = torch.randn(n, device=device)
    dst = torch.full((n,), float("nan"), device=device, dtype=torch.float16 if size == "small" else torch.bfloat16)
    return tle.Launch(grid=(cdiv(n, CAST_BLOCK),), args=(src, dst, n),
                      kwargs=dict(BLOCK=CAST_BLOCK, num_warps=8),
                      outputs={"dst": dst}, reference=lambda: {"dst": src.to(dst.dtype)},
                      bytes=n * (4 + dst.element_size()), label=f"{n} fp32 -> {str(dst.dtype)[6:]}")
