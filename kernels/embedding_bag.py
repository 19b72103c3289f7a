"""EmbeddingBag in "mean" mode: each bag's output row is the mean of the weight rows its indices pick.

    out[b] = sum(weight[i] for i in bag b if i != padding_idx) / max(count_b, 1)
    bag b = indices[offsets[b]:offsets[b + 1]]          (the last bag runs to the end of indices)

`tle.ops.embedding_bag_mean(weight, indices, offsets, padding_idx=None)` is
`F.embedding_bag(indices, weight, offsets, mode="mean", padding_idx=padding_idx)` for 1-D indices and 1-D
offsets (include_last_offset=False, no per-sample weights, no max_norm): entries equal to padding_idx count
neither in the sum nor in the count, and an empty bag (or one holding only padding) gives zeros.

Forward: one program per bag (and per block of columns), a loop over the bag's indices in blocks of BLOCK_I
whose bounds are the bag's offsets, loaded in the kernel; each step gathers BLOCK_I weight rows at once and
adds them up in fp32. It also writes 1 / max(count, 1) per bag (fp32), which the backward multiplies by.

Backward (to weight only; dweight is dense, zero where no index points), two ways, chosen by `backward=`:
- "sorted" (the default; deterministic, no atomics): the (index, bag) pairs are sorted by index on the host
  side with torch ops (sort, searchsorted: bookkeeping of integer positions, no float arithmetic), which
  gives every weight row the run of positions that point at it. A program takes a block of BLOCK_R weight
  rows, adds up dy[bag] / count[bag] over each row's run, in a fixed order, one position of every run a step,
  and writes its rows once (zeros for an empty run). A row that many positions point at keeps its program
  stepping as many times: on heavily skewed indices "atomic" may be faster.
- "atomic": one program per bag adds dy[bag] / count[bag] into the rows of its indices with tl.atomic_add,
  in an fp32 buffer (zero-filled first); for fp16/bf16 weights a second kernel casts it to weight's dtype.
  The order of the additions varies from run to run, so the low bits do too.
The cost of "sorted" beyond the kernel is one sort of the indices and two binary searches (no device
synchronization); that of "atomic" is the zero fill of the fp32 buffer and, for half precision, the cast
pass. tle-bench measures the default as the operator and "atomic" as the peers "tle <backend>,
backward=atomic".

Checks: ranks and dtypes of every argument, padding_idx in [-num_embeddings, num_embeddings) as torch. Where
the tensors are on the CPU, also what torch's CPU kernel checks, which costs no device synchronization
there: offsets[0] == 0, offsets non-decreasing, offsets[-1] <= len(indices), every index in range. On a GPU
none of these is checked (a check would synchronize with the device on every call; torch's CUDA kernel
does not check the offsets either). There the offsets must be non-decreasing; indices before offsets[0]
belong to no bag and a bag ends at len(indices) at the latest, in the forward and both backwards alike; an
index out of range is undefined in the forward (Triton reads outside weight; TileLang's bounds predication
reads zeros) and left out of the sorted backward.

TileLang kernels are compiled for their shapes: every new number of indices or bags compiles the forward
and backward again (cached on disk after the first time)."""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.oplib import BenchSpec, Operator, Sample, check_float, check_kernel_dtypes, check_tensor
from tle.oplib.arith import cdiv, next_power_of_2
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype

INDEX_DTYPES = (torch.int32, torch.int64)
BACKWARDS = ("sorted", "atomic")
DEFAULT_BACKWARD = "sorted"
MAX_BLOCK_D = 1024          # wider rows take several programs per bag (grid axis 1)


@tle.jit
def bag_bounds(off_ptr, bag, n_bags, n_indices):
    """[start, end) of `bag` in the indices: the next bag's offset, or the end of the indices for the last."""
    start = tl.load(off_ptr + bag)
    has_next = bag + 1 < n_bags
    end = tl.where(has_next, tl.load(off_ptr + bag + 1, mask=has_next, other=0), n_indices)
    return start, tl.minimum(end, n_indices)


@tle.jit
def embedding_bag_fwd_kernel(w_ptr, idx_ptr, off_ptr, out_ptr, inv_ptr, w_row_stride, n_bags, n_indices, dim,
                             padding_idx, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr, HAS_PADDING: tl.constexpr):
    bag = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    start, end = bag_bounds(off_ptr, bag, n_bags, n_indices)
    acc = tl.zeros([BLOCK_I, BLOCK_D], dtype=tl.float32)
    cnt = tl.zeros([BLOCK_I], dtype=tl.int32)
    for i in range(start, end, BLOCK_I):
        pos = i + tl.arange(0, BLOCK_I)
        keep = pos < end
        idx = tl.load(idx_ptr + pos, mask=keep, other=0)
        if HAS_PADDING:
            keep = keep & (idx != padding_idx)
        rows = tl.load(w_ptr + idx.to(tl.int64)[:, None] * w_row_stride + cols[None, :],
                       mask=keep[:, None] & col_mask[None, :], other=0.0)
        acc += rows.to(tl.float32)
        cnt += keep.to(tl.int32)
    count = tl.maximum(tl.sum(cnt, axis=0), 1).to(tl.float32)
    mean = tl.sum(acc, axis=0) / count
    tl.store(out_ptr + bag.to(tl.int64) * dim + cols, mean.to(out_ptr.dtype.element_ty), mask=col_mask)
    if tl.program_id(1) == 0:
        tl.store(inv_ptr + bag, 1.0 / count)


@tle.jit
def embedding_bag_bwd_sorted_kernel(dy_ptr, bag_ptr, run_ptr, inv_ptr, dw_ptr, num_weights, dim,
                                    BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    # weight row r is pointed at by the positions run_ptr[r] .. run_ptr[r + 1] of the sorted order; bag_ptr holds
    # the bag of each of them, inv_ptr 1 / max(count, 1) of each bag. A program writes BLOCK_R consecutive rows
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
        scale = tl.load(inv_ptr + bag, mask=keep, other=0.0)
        g = tl.load(dy_ptr + bag.to(tl.int64)[:, None] * dim + cols[None, :], mask=keep[:, None] & col_mask[None, :],
                    other=0.0)
        acc += g.to(tl.float32) * scale[:, None]
    tl.store(dw_ptr + rows.to(tl.int64)[:, None] * dim + cols[None, :], acc.to(dw_ptr.dtype.element_ty),
             mask=row_mask[:, None] & col_mask[None, :])


@tle.jit
def embedding_bag_bwd_atomic_kernel(dy_ptr, idx_ptr, off_ptr, inv_ptr, acc_ptr, n_bags, n_indices, dim,
                                    padding_idx, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr,
                                    HAS_PADDING: tl.constexpr):
    # acc_ptr: fp32 [num_embeddings, dim], zero-filled; every bag adds dy[bag] / count into its indices' rows
    # (inv_ptr: 1 / max(count, 1) of each bag)
    bag = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < dim
    start, end = bag_bounds(off_ptr, bag, n_bags, n_indices)
    scale = tl.load(inv_ptr + bag)
    g = tl.load(dy_ptr + bag.to(tl.int64) * dim + cols, mask=col_mask, other=0.0).to(tl.float32) * scale
    for i in range(start, end, BLOCK_I):
        pos = i + tl.arange(0, BLOCK_I)
        keep = pos < end
        idx = tl.load(idx_ptr + pos, mask=keep, other=0)
        if HAS_PADDING:
            keep = keep & (idx != padding_idx)
        tl.atomic_add(acc_ptr + idx.to(tl.int64)[:, None] * dim + cols[None, :],
                      tl.broadcast_to(g[None, :], [BLOCK_I, BLOCK_D]), mask=keep[:, None] & col_mask[None, :])


@tle.jit
def embedding_bag_cast_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    # the atomic backward's fp32 buffer, rounded to weight's dtype
    base = tl.program_id(0).to(tl.int64) * BLOCK
    offs = tl.arange(0, BLOCK)
    mask = offs < n - base
    x = tl.load(src_ptr + base + offs, mask=mask, other=0.0)
    tl.store(dst_ptr + base + offs, x.to(dst_ptr.dtype.element_ty), mask=mask)


def _block_d(dim: int, cap: int = MAX_BLOCK_D) -> int:
    """Columns per program: dim rounded up to a power of two, at least 16, at most `cap`."""
    return min(cap, max(16, next_power_of_2(max(dim, 1))))


def _config(dim: int) -> tuple[int, int, int]:
    """(BLOCK_I, BLOCK_D, num_warps) of the atomic backward: the columns of a row (up to MAX_BLOCK_D) by
    BLOCK_I gathered rows, about 8192 elements in flight per program."""
    block_d = _block_d(dim)
    block_i = max(1, min(64, 8192 // block_d))
    warps = 4 if block_i * block_d <= 2048 else 8
    return block_i, block_d, warps


def _fwd_config(dim: int, backend: str) -> tuple[int, int, int]:
    """(BLOCK_I, BLOCK_D, num_warps) of the forward. Its programs wait on three dependent loads (offsets, the
    indices, the rows), so what counts is how many bags are in flight per multiprocessor: small programs.
    Measured on the H200 (1M x 256 bf16, 64k bags of 32, TB/s): Triton, one-warp programs over 64-column
    slices of 16 rows a step 3.15, [32, 64] on 2 warps 2.43, [32, 256] on 8 warps 0.84; TileLang, whole rows of
    2 a step on one warp 3.13, [4, 256] on 1 warp 2.62, [8, 256] on 4 warps 2.24, [8, 64] on 1 warp 1.80,
    [16, 64] on 1 warp 1.24."""
    if backend == "triton":
        return 16, _block_d(dim, cap=64), 1
    block_d = _block_d(dim)
    return 2, block_d, max(1, block_d // 256)


def _sorted_config(dim: int, backend: str) -> tuple[int, int, int]:
    """(BLOCK_R, BLOCK_D, num_warps) of the sorted backward: 2 weight rows by the columns of a row (up to
    MAX_BLOCK_D). Its steps wait on two dependent loads (the bags, then their dy rows) and there are as many
    steps as the longest run of the block, so small blocks, many of them in flight. Measured on the H200 (1M x
    256 bf16, 64k bags of 32: runs of 2 positions on average; the kernel alone, TB/s): Triton, [2, 256] on 2
    warps 1.66, on 1 warp 1.57, [4, 256] on 1 warp 1.49, [8, 256] on 4 warps 1.44, one row per program 0.89;
    TileLang [2, 256] on 1 warp 1.13, [4, 256] on 2 warps 1.06, [8, 256] on 4 warps 0.97."""
    block_d = _block_d(dim)
    return 2, block_d, max(1, block_d // (128 if backend == "triton" else 256))


CAST_BLOCK = 4096


# -- index bookkeeping (integer positions only, in torch) ---------------------------------------------------
def _bags_of_positions(indices, offsets, padding_idx, out_int32=False):
    """(bag of each position of indices, -1 before offsets[0] (int64, or int32 with out_int32); which positions
    count: in a bag and not padding)."""
    n = indices.shape[0]
    pos = torch.arange(n, device=indices.device, dtype=offsets.dtype)
    bag = torch.searchsorted(offsets, pos, right=True, out_int32=out_int32) - 1
    keep = bag >= 0
    if padding_idx >= 0:
        keep = keep & (indices != padding_idx)
    return bag, keep


def _sorted_runs(indices, offsets, num_weights, padding_idx):
    """The positions of indices sorted by index (stable), as (bag of each sorted position, int32 where the bags
    and positions fit; run_ptr [num_weights + 1]: weight row r is pointed at by sorted positions
    run_ptr[r]..run_ptr[r + 1]). Positions that do not count (padding, before offsets[0], out of range) sort
    outside every run."""
    fits_int32 = max(indices.shape[0], num_weights) < 2**31 - 1
    bag, keep = _bags_of_positions(indices, offsets, padding_idx, out_int32=fits_int32)
    key_dtype = torch.int32 if fits_int32 else torch.int64
    key = torch.where(keep, indices.to(key_dtype), num_weights)
    key_sorted, perm = torch.sort(key, stable=True)
    rows = torch.arange(num_weights + 1, device=indices.device, dtype=key_dtype)
    run_ptr = torch.searchsorted(key_sorted, rows, out_int32=fits_int32)
    return bag.index_select(0, perm), run_ptr


# -- the torch backend: the same arithmetic in torch (fp32, or fp64 for fp64 weights) -----------------------
def _torch_forward(weight, indices, offsets, padding_idx):
    ct = torch_compute_dtype(weight)
    n_bags, dim = offsets.shape[0], weight.shape[1]
    out = torch.zeros(n_bags, dim, device=weight.device, dtype=ct)
    counts = torch.zeros(n_bags, device=weight.device, dtype=ct)
    if n_bags and indices.shape[0]:
        bag, keep = _bags_of_positions(indices, offsets, padding_idx)
        rows = weight.index_select(0, torch.where(keep, indices, 0)).to(ct)
        at = bag.clamp(min=0)
        out.index_add_(0, at, torch.where(keep[:, None], rows, 0))
        counts.index_add_(0, at, keep.to(ct))
    counts = counts.clamp(min=1)
    return (out / counts[:, None]).to(weight.dtype), 1 / counts


def _torch_backward(dy, indices, offsets, inv_counts, num_weights, padding_idx):
    ct = inv_counts.dtype
    dw = torch.zeros(num_weights, dy.shape[1], device=dy.device, dtype=ct)
    if offsets.shape[0] and indices.shape[0] and num_weights:
        bag, keep = _bags_of_positions(indices, offsets, padding_idx)
        g = (dy.to(ct) * inv_counts[:, None]).index_select(0, bag.clamp(min=0))
        dw.index_add_(0, torch.where(keep, indices, 0), torch.where(keep[:, None], g, 0))
    return dw.to(dy.dtype)


# -- the kernel backends ------------------------------------------------------------------------------------
def _kernel_forward(weight, indices, offsets, padding_idx, backend):
    n_bags, dim = offsets.shape[0], weight.shape[1]
    n = indices.shape[0]
    if n_bags == 0 or dim == 0 or n == 0:
        return (torch.zeros(n_bags, dim, device=weight.device, dtype=weight.dtype),
                torch.ones(n_bags, device=weight.device, dtype=torch.float32))
    out = torch.empty(n_bags, dim, device=weight.device, dtype=weight.dtype)
    inv_counts = torch.empty(n_bags, device=weight.device, dtype=torch.float32)
    block_i, block_d, warps = _fwd_config(dim, backend)
    embedding_bag_fwd_kernel[(n_bags, cdiv(dim, block_d))](
        weight, indices, offsets, out, inv_counts, weight.stride(0), n_bags, n, dim, padding_idx, BLOCK_I=block_i,
        BLOCK_D=block_d, HAS_PADDING=padding_idx >= 0, backend=backend, num_warps=warps)
    return out, inv_counts


def _kernel_backward(dy, indices, offsets, inv_counts, num_weights, padding_idx, backward, backend):
    n_bags, dim = dy.shape
    n = indices.shape[0]
    if n_bags == 0 or dim == 0 or n == 0 or num_weights == 0:
        return torch.zeros(num_weights, dim, device=dy.device, dtype=dy.dtype)
    if backward == "sorted":
        bags, run_ptr = _sorted_runs(indices, offsets, num_weights, padding_idx)
        dw = torch.empty(num_weights, dim, device=dy.device, dtype=dy.dtype)
        block_r, block_d, warps = _sorted_config(dim, backend)
        embedding_bag_bwd_sorted_kernel[(cdiv(num_weights, block_r), cdiv(dim, block_d))](
            dy, bags, run_ptr, inv_counts, dw, num_weights, dim, BLOCK_R=block_r, BLOCK_D=block_d, backend=backend,
            num_warps=warps)
        return dw
    acc = torch.zeros(num_weights, dim, device=dy.device, dtype=torch.float32)
    block_i, block_d, warps = _config(dim)
    embedding_bag_bwd_atomic_kernel[(n_bags, cdiv(dim, block_d))](
        dy, indices, offsets, inv_counts, acc, n_bags, n, dim, padding_idx, BLOCK_I=block_i, BLOCK_D=block_d,
        HAS_PADDING=padding_idx >= 0, backend=backend, num_warps=warps)
    if dy.dtype == torch.float32:
        return acc
    dw = torch.empty(num_weights, dim, device=dy.device, dtype=dy.dtype)
    embedding_bag_cast_kernel[(cdiv(acc.numel(), CAST_BLOCK),)](acc, dw, acc.numel(), BLOCK=CAST_BLOCK,
                                                                     backend=backend, num_warps=8)
    return dw


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


def _label(weight, indices, offsets):
    e, dim = weight.shape
    return f"{e}x{dim}x{offsets.shape[0]}x{indices.shape[0] // max(offsets.shape[0], 1)} {str(weight.dtype)[6:]}"


@tle.example(embedding_bag_fwd_kernel)
def _fwd_example(device, size):
    weight, indices, offsets, padding_idx = _example_problem(device, size)
    n_bags, dim = offsets.shape[0], weight.shape[1]
    out = torch.full((n_bags, dim), float("nan"), device=device, dtype=weight.dtype)
    inv_counts = torch.full((n_bags,), float("nan"), device=device)
    block_i, block_d, warps = _fwd_config(dim, "triton")      # one launch for both lowerings

    def ref():
        y, c = _torch_forward(weight, indices, offsets, padding_idx)
        return {"out": y, "inv_counts": c}
    return tle.Launch(grid=(n_bags, cdiv(dim, block_d)),
                      args=(weight, indices, offsets, out, inv_counts, dim, n_bags, indices.shape[0], dim,
                            padding_idx),
                      kwargs=dict(BLOCK_I=block_i, BLOCK_D=block_d, HAS_PADDING=padding_idx >= 0, num_warps=warps),
                      outputs={"out": out, "inv_counts": inv_counts}, reference=ref,
                      bytes=(indices.shape[0] + n_bags) * dim * weight.element_size(),
                      label=_label(weight, indices, offsets))


def _example_backward(device, size):
    weight, indices, offsets, padding_idx = _example_problem(device, size)
    _, inv_counts = _torch_forward(weight[:, :1], indices, offsets, padding_idx)
    dy = torch.randn(offsets.shape[0], weight.shape[1], device=device).to(weight.dtype)
    return weight, indices, offsets, padding_idx, inv_counts, dy


@tle.example(embedding_bag_bwd_sorted_kernel)
def _sorted_example(device, size):
    weight, indices, offsets, padding_idx, inv_counts, dy = _example_backward(device, size)
    (e, dim), n_bags = weight.shape, offsets.shape[0]
    bags, run_ptr = _sorted_runs(indices, offsets, e, padding_idx)
    dw = torch.full((e, dim), float("nan"), device=device, dtype=weight.dtype)
    block_r, block_d, warps = _sorted_config(dim, "triton")     # one launch for both lowerings
    return tle.Launch(grid=(cdiv(e, block_r), cdiv(dim, block_d)), args=(dy, bags, run_ptr, inv_counts, dw, e, dim),
                      kwargs=dict(BLOCK_R=block_r, BLOCK_D=block_d, num_warps=warps), outputs={"dw": dw},
                      reference=lambda: {"dw": _torch_backward(dy.float(), indices, offsets, inv_counts, e,
                                                               padding_idx)},
                      bytes=(n_bags + e) * dim * weight.element_size(), label=_label(weight, indices, offsets))


@tle.example(embedding_bag_bwd_atomic_kernel)
def _atomic_example(device, size):
    weight, indices, offsets, padding_idx, inv_counts, dy = _example_backward(device, size)
    (e, dim), n_bags = weight.shape, offsets.shape[0]
    acc = torch.zeros(e, dim, device=device)
    block_i, block_d, warps = _config(dim)
    return tle.Launch(grid=(n_bags, cdiv(dim, block_d)),
                      args=(dy, indices, offsets, inv_counts, acc, n_bags, indices.shape[0], dim, padding_idx),
                      kwargs=dict(BLOCK_I=block_i, BLOCK_D=block_d, HAS_PADDING=padding_idx >= 0, num_warps=warps),
                      outputs={"dw": acc}, accumulates=("dw",),
                      reference=lambda: {"dw": _torch_backward(dy.float(), indices, offsets, inv_counts, e,
                                                               padding_idx)},
                      bytes=n_bags * dim * dy.element_size() + e * dim * 4, label=_label(weight, indices, offsets))


@tle.example(embedding_bag_cast_kernel)
def _cast_example(device, size):
    n = 3000 if size == "small" else (1 << 20) * 256
    src = torch.randn(n, device=device)
    dst = torch.full((n,), float("nan"), device=device, dtype=torch.float16 if size == "small" else torch.bfloat16)
    return tle.Launch(grid=(cdiv(n, CAST_BLOCK),), args=(src, dst, n),
                      kwargs=dict(BLOCK=CAST_BLOCK, num_warps=8),
                      outputs={"dst": dst}, reference=lambda: {"dst": src.to(dst.dtype)},
                      bytes=n * (4 + dst.element_size()), label=f"{n} fp32 -> {str(dst.dtype)[6:]}")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _contiguous(run, weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, padding_idx: int,
                backward: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(the bags' means, the bags' inverse sizes); `backward` is the backward's choice, saved for it."""
    return run(weight, indices.contiguous(), offsets.contiguous(), padding_idx)


def _backward_contiguous(run, dy: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                         inv_counts: torch.Tensor, num_weights: int, padding_idx: int, backward: str) -> torch.Tensor:
    return run(dy.contiguous(), indices.contiguous(), offsets.contiguous(), inv_counts, num_weights, padding_idx,
               backward)


def _kernel_stage(weight, indices, offsets, padding_idx, backend):
    if weight.shape[1] > 1 and weight.stride(1) != 1:
        weight = weight.contiguous()
    return _kernel_forward(weight, indices, offsets, padding_idx, backend)


def _torch_backward_stage(dy, indices, offsets, inv_counts, num_weights, padding_idx, backward):
    return _torch_backward(dy, indices, offsets, inv_counts, num_weights, padding_idx)   # one way in torch


def _forward_fake(weight, indices, offsets, padding_idx, backward):
    n_bags = offsets.shape[0]
    return weight.new_empty((n_bags, weight.shape[1])), weight.new_empty(n_bags, dtype=torch_compute_dtype(weight))


def _save(ctx, inputs, output):
    weight, indices, offsets, ctx.padding_idx, ctx.backward = inputs
    ctx.save_for_backward(indices, offsets, output[1])
    ctx.num_weights = weight.shape[0]
    ctx.set_materialize_grads(False)     # no zeros made on the host for the bag sizes' unused gradient


def _grads(ctx, backward, dy, _dinv_counts):
    if dy is None:
        return ()
    return (backward(dy, *ctx.saved_tensors, ctx.num_weights, ctx.padding_idx, ctx.backward),)


EMBEDDING_BAG_MEAN = Recipe(
    "embedding_bag_mean",
    forward=Stage(torch=_torch_forward, kernels=_kernel_stage, adapt=_contiguous, fake=_forward_fake),
    backward=Stage(torch=_torch_backward_stage, kernels=_kernel_backward, adapt=_backward_contiguous,
                   fake=lambda dy, indices, offsets, inv_counts, num_weights, *_: dy.new_empty((num_weights,
                                                                                               dy.shape[1]))),
    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def _check_offsets_on_cpu(indices, offsets, num_weights):
    """What torch's CPU kernel checks, where it costs no device synchronization (CPU tensors)."""
    n = indices.shape[0]
    if offsets.shape[0]:
        if int(offsets[0]) != 0:
            raise tle.LaunchError(f"'offsets' must start at 0 (the first bag starts at the first index); "
                                  f"got offsets[0] = {int(offsets[0])}")
        if offsets.shape[0] > 1 and bool((offsets[1:] < offsets[:-1]).any()):
            raise tle.LaunchError("'offsets' must be non-decreasing")
        if int(offsets[-1]) > n:
            raise tle.LaunchError(f"'offsets' runs past the end of indices: offsets[-1] = {int(offsets[-1])} "
                                  f"> len(indices) = {n}")
    if n:
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= num_weights:
            bad = lo if lo < 0 else hi
            raise tle.LaunchError(f"'indices' holds {bad}, outside the {num_weights} rows of weight "
                                  f"(valid: 0 .. {num_weights - 1})")


def _padding(padding_idx, num_weights: int) -> int:
    """torch's normalization: None -> -1 (no padding), a negative index counts from the end."""
    if padding_idx is None:
        return -1
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, int):
        raise tle.LaunchError(f"'padding_idx' must be an int or None, got {type(padding_idx).__name__}")
    if not -num_weights <= padding_idx < num_weights:
        raise tle.LaunchError(f"'padding_idx' must be within the {num_weights} rows of weight "
                              f"(-{num_weights} .. {num_weights - 1}); got {padding_idx}")
    return padding_idx + num_weights if padding_idx < 0 else padding_idx


def embedding_bag_mean(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                       padding_idx: int | None = None, *, backward: str = DEFAULT_BACKWARD,
                       backend: str | None = None, fallback: str | None = None) -> torch.Tensor:
    """F.embedding_bag(indices, weight, offsets, mode="mean", padding_idx=padding_idx) for 1-D indices and
    offsets: [len(offsets), weight.shape[1]], each row the mean of its bag's weight rows (padding left out,
    zeros for an empty bag). `backward`: "sorted" (deterministic) or "atomic", how the weight gradient is
    computed on the kernel backends."""
    check_float(weight, "weight", rank=2)
    check_tensor(indices, "indices", dtypes=INDEX_DTYPES, rank=1, device=weight.device)
    check_tensor(offsets, "offsets", dtypes=INDEX_DTYPES, rank=1, device=weight.device)
    if backward not in BACKWARDS:
        raise tle.LaunchError(f"'backward' must be one of {', '.join(map(repr, BACKWARDS))}; got {backward!r}")
    num_weights = weight.shape[0]
    pad = _padding(padding_idx, num_weights)
    if weight.device.type == "cpu" and not torch.compiler.is_compiling():
        # a traced graph holds no data-dependent branches (fullgraph compiles): unchecked there, as on CUDA
        _check_offsets_on_cpu(indices, offsets, num_weights)
    b = EMBEDDING_BAG_MEAN.resolve(weight.device, backend, fallback)
    check_kernel_dtypes("embedding_bag_mean", b, weight=weight)
    out, _ = EMBEDDING_BAG_MEAN(weight, indices, offsets, pad, backward, backend=b)
    return out


class EmbeddingBag(torch.nn.Module):
    """torch.nn.EmbeddingBag in mode "mean" on a tle backend (`backend=`, else TLE_BACKEND). forward(input,
    offsets) takes 1-D indices and offsets, or 2-D input of equal bags with offsets=None."""

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "mean", padding_idx: int | None = None,
                 device=None, dtype=None, *, backward: str = DEFAULT_BACKWARD, backend: str | None = None,
                 fallback: str | None = None):
        super().__init__()
        if mode != "mean":
            raise ValueError(f"tle.ops.EmbeddingBag supports mode='mean' only; got mode={mode!r}")
        if backward not in BACKWARDS:
            raise ValueError(f"tle.ops.EmbeddingBag: backward must be one of {', '.join(map(repr, BACKWARDS))}; "
                             f"got {backward!r}")
        self.num_embeddings, self.embedding_dim, self.mode = num_embeddings, embedding_dim, mode
        self.padding_idx = _padding(padding_idx, num_embeddings) if padding_idx is not None else None
        self.backward, self.backend, self.fallback = backward, backend, fallback
        self.weight = torch.nn.Parameter(torch.empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
        torch.nn.init.normal_(self.weight)
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].fill_(0)

    def forward(self, input, offsets=None):
        if offsets is None:
            if not isinstance(input, torch.Tensor) or input.dim() != 2:
                raise tle.LaunchError("'offsets' is required with 1-D input (2-D input holds one bag per row)")
            bags, size = input.shape
            offsets = torch.arange(0, bags * size, size, device=input.device, dtype=input.dtype) if size else \
                torch.zeros(bags, device=input.device, dtype=input.dtype)
            input = input.reshape(-1)
        elif isinstance(input, torch.Tensor) and input.dim() == 2:
            raise tle.LaunchError("'offsets' must be None with 2-D input (each row is a bag)")
        return embedding_bag_mean(self.weight, input, offsets, self.padding_idx, backward=self.backward,
                                  backend=self.backend or None, fallback=self.fallback)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s + f", backward={self.backward!r}, backend={self.backend}"


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(weight, indices, offsets, padding_idx=None, backward=DEFAULT_BACKWARD):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64."""
    return torch.nn.functional.embedding_bag(indices, weight, offsets, mode="mean", padding_idx=padding_idx)


def samples(device, dtype):
    """Small cases; `dtype` applies to weight only (indices and offsets are built as integers here)."""
    def w(e, dim):
        return torch.randn(e, dim, device=device, dtype=torch.float32).to(dtype)

    def idx(e, n, dtype=torch.int64):
        return torch.randint(0, e, (n,), device=device, dtype=dtype)

    def offs(*lengths, dtype=torch.int64):
        starts = [0]
        for n in lengths[:-1]:
            starts.append(starts[-1] + n)
        return torch.tensor(starts, device=device, dtype=dtype)

    repeated = torch.tensor([3, 3, 1, 3, 0, 1, 1, 3, 2], device=device)        # within and across bags
    padded = torch.tensor([4, 2, 4, 4, 6, 2, 4, 0, 4], device=device)          # bag 2 holds only padding
    return [Sample((w(10, 1), idx(10, 5), offs(2, 3)), label="1 column"),
            Sample((w(13, 7), idx(13, 20), offs(3, 0, 6, 1, 10)), label="7 columns, an empty bag"),
            Sample((w(5, 33), repeated, offs(3, 2, 4)), label="33 columns, repeated indices"),
            Sample((w(9, 33), padded, offs(3, 2, 2, 2)), dict(padding_idx=4), label="padding_idx, a padding-only bag"),
            Sample((w(9, 33), padded, offs(3, 2, 2, 2)), dict(padding_idx=-5), label="negative padding_idx"),
            Sample((w(3, 1000), idx(3, 8, torch.int32), offs(0, 3, 1, 4, dtype=torch.int32)),
                   dict(backward="atomic"), label="1000 columns, int32, atomic backward"),
            Sample((w(6, 20), idx(6, 150), offs(70, 0, 80, 0)), dict(padding_idx=0, backward="atomic"),
                   label="long bags, padding, atomic backward"),
            Sample((w(12, 16), idx(12, 0), offs(0, 0, 0)), label="no indices: empty bags"),
            Sample((w(12, 16), idx(12, 0), offs()[:0]), label="no bags")]


def _bench_make(shape, dtype, device):
    e, dim, bags, size = shape
    weight = torch.randn(e, dim, device=device, dtype=dtype)
    indices = torch.randint(0, e, (bags * size,), device=device)
    offsets = torch.arange(0, bags * size, size, device=device)
    return Sample((weight, indices, offsets))


def _bench_bytes(sample, mode):
    """fwd: the gathered weight rows (one per index) read and the output written; bwd: dy read and the dense
    dweight written once (every row: the zeros of untouched rows are part of the result). Indices, offsets,
    the inverse counts and the sort's bookkeeping are not counted (8 bytes per index against 2 x dim per
    gathered row)."""
    weight, indices, offsets = sample.args[:3]
    row = weight.shape[1] * weight.element_size()
    if mode == "fwd":
        return (indices.shape[0] + offsets.shape[0]) * row
    return (offsets.shape[0] + weight.shape[0]) * row


def _eager(sample):
    weight, indices, offsets = sample.args[:3]
    return lambda w=weight, i=indices, o=offsets: torch.nn.functional.embedding_bag(i, w, o, mode="mean")


def _tle_variant(backend, backward):
    """The backward not taken by default, as a peer of its own (the forward is the same kernel)."""
    def make(sample):
        weight, indices, offsets = sample.args[:3]
        return lambda w=weight, i=indices, o=offsets: embedding_bag_mean(w, i, o, backward=backward, backend=backend)
    return make


OPERATOR = Operator(
    "embedding_bag_mean", fn=embedding_bag_mean, reference=reference, samples=samples, grad_inputs=(0,),
    bench=BenchSpec(dry_shapes=[(1024, 64, 32, 8)],
                    shapes=[(1048576, 256, 65536, 32), (1048576, 64, 65536, 32), (1048576, 128, 65536, 32),
                            (1048576, 512, 65536, 32), (1048576, 1024, 65536, 32)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager,
                    peers={f"tle {b}, backward=atomic": _tle_variant(b, "atomic")
                           for b in tle.oplib.backend.KERNEL_BACKENDS},
                    shape_help="NUM_EMBEDDINGSxDIMxBAGSxBAG_SIZE"))
