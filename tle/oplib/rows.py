"""Tiling of the row-wise operators (norms, softmax): a program holds BLOCK_M whole rows of BLOCK_N columns."""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from tle.oplib.arith import cdiv, next_power_of_2
from tle.oplib.tensors import DEFAULT_SMEM_BYTES


def row_config(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) for rows of `n_cols`: a row fits one tile; short rows are stacked, up to
    64 of them, so a program holds about 2048 elements, and the warps grow with the tile."""
    block_n = next_power_of_2(max(n_cols, 1))
    block_m = max(1, min(64, 2048 // block_n))
    elems = block_m * block_n
    warps = 4 if elems <= 2048 else 8 if elems <= 4096 else 16
    return block_m, block_n, warps


class ForwardRows(NamedTuple):
    """How a row-wise forward kernel that normalizes by a row statistic is launched."""
    block_m: int
    block_n: int            # the row tile, or with two_pass the column chunk
    num_warps: int
    two_pass: bool          # TWO_PASS: a first loop over column chunks computes the statistic, keeping the row
                            # in L2 (evict_last); a second re-reads it (evict_first) to write the output


def forward_row_config(n_cols: int, backend: str) -> ForwardRows:
    """The launch of the norms' forward kernels on `backend`. On Triton, rows of more than 2048 columns take two
    passes over chunks of 8 elements per thread. Measured on the H200 (bf16, the kernel alone, TB/s, rms_norm /
    l2_norm): 8192 columns, [1, 4096] chunks on 16 warps 4.25 / 4.25 (torch.compile 4.24, whose kernel is the same
    two passes), [1, 2048] on 16 warps 4.04 / 4.26, on 8 warps 4.02 / 4.11, the row in one tile 4.08; 4096
    columns, [1, 2048] on 8 warps 4.13 / 4.16, [1, 1024] on 8 warps 4.03 / 4.16, one tile 3.98 (torch.compile
    3.70). Without the eviction hints the two passes ran at 3.45-4.12. TileLang's loads take no cache hints: its
    two passes ran at 4.03-4.10 against 4.08 in one tile, so it keeps the one tile."""
    block_m, block_n, warps = row_config(n_cols)
    if backend != "triton" or block_n < 4096:
        return ForwardRows(block_m, block_n, warps, False)
    warps = 16 if n_cols > 4096 else 8
    return ForwardRows(1, 256 * warps, warps, True)


def torch_compute_dtype(x: torch.Tensor) -> torch.dtype:
    """What the torch backend computes in: fp64 for fp64 inputs (gradcheck), fp32 otherwise."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def row_stat_like(x: torch.Tensor) -> torch.Tensor:
    """An empty per-row statistic (mean, rstd) of `x` folded into rows, in the compute dtype: what the fake of
    a normalization returns for it."""
    return x.new_empty(math.prod(x.shape[:-1]), dtype=torch_compute_dtype(x))


class BackwardRows(NamedTuple):
    """How a row-wise backward kernel (a loop over row blocks accumulating column sums) is launched."""
    block_m: int
    block_n: int
    num_warps: int
    per_sm: int             # programs per multiprocessor
    prefetch: bool          # PREFETCH: row block i + 1 loaded into registers while block i is reduced
    async_loads: bool       # ASYNC_LOADS: the loop's loads are tle.load(is_async=True), pipelined in num_stages
    num_stages: int


STAGE_SMEM_MARGIN = 8 * 1024       # shared memory left beside the staged rows (reduction workspace, barriers)


def backward_row_config(n_cols: int, backend: str, staged_bytes: int = 4, smem_bytes: int = DEFAULT_SMEM_BYTES,
                        tilelang_rows: int = 1) -> BackwardRows:
    """The launch of the norms' backward kernels on `backend`. `staged_bytes`: the bytes per column of one row
    over the tensors that TileLang's loop copies into shared memory (dy and x in bf16: 4); `smem_bytes`: what a
    block may use (`shared_memory_per_block`); `tilelang_rows`: the rows per step the kernel runs best with on
    TileLang, taken where they fit (with one program per multiprocessor). Measured on the H200 (bf16,
    32768x8192, TB/s, the kernel alone unless said otherwise):

    - Triton: tiles of 8192 elements and more run one 16-warp program per multiprocessor that loads block i + 1
      while it reduces block i (rms_norm / layer_norm 3.83 / 3.67, against 3.05 / 2.84 for 4 warps x 8 per SM
      without prefetch); narrower tiles keep 4 warps x 8 per SM without it (with it, rms_norm at 4096 and 1024
      columns ran at half the speed). The async loop ran at 3.14-3.28 on [1, 8192] tiles.
    - TileLang: on tiles of 8192 elements and more the loop's loads are asynchronous copies into shared memory,
      pipelined in 3 stages where they fit, else 2 (rms_norm 3.92 with 8 warps x 2 per SM, 3.90 with 16 x 1, 3.43
      with 4 x 4; the register prefetch ran at 3.23 with the column sums: TileLang's lowering copies the carried
      tiles each step; layer_norm 3.40 on [2, 8192] tiles with 8 warps x 1 per SM, 3.23 on [1, 8192] with 8 x 2,
      3.28 with 8 x 1, 3.12 with 16 x 1, 2.16 on [2, 8192] with 16 x 1). Narrower tiles keep the plain loop:
      pipelined on 4 warps x 8 per SM, the operator's backward fell to 1.87 TB/s at 65536x2048 (3.28 plain) and
      to 0.01 at 131072x512. Rows too wide for two stages in shared memory (bf16 rms_norm from 32768 columns, or
      from 16384 with the residual's gradient: TileLang could not launch them) run the plain loop on 16 warps."""
    block_m, block_n, _ = row_config(n_cols)
    if block_m * block_n < 8192:
        return BackwardRows(block_m, block_n, 4, 8, False, False, 3)
    if backend == "tilelang":
        budget = smem_bytes - STAGE_SMEM_MARGIN
        shapes = ((tilelang_rows, 1), (1, 2)) if tilelang_rows > 1 else ((1, 2),)
        for rows, per_sm in shapes:
            for stages in (3, 2):
                if stages * rows * block_n * staged_bytes <= budget:
                    return BackwardRows(rows, block_n, 8, per_sm, False, True, stages)
        return BackwardRows(1, block_n, 16, 1, False, False, 3)
    return BackwardRows(block_m, block_n, 16, 1, True, False, 3)


def box_config(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) for element-wise operators over [rows, n_cols] in 2-D box tiles (a grid
    over both row and column blocks): tiles of 4096 elements, at most 1024 columns wide, 8 warps."""
    block_n = min(1024, next_power_of_2(max(n_cols, 1)))
    return max(1, 4096 // block_n), block_n, 8


def box_grid(n_rows: int, n_cols: int, block_m: int, block_n: int) -> tuple[tuple[int], int]:
    """((programs,), column blocks) of a 1-D grid over [n_rows, n_cols] in [block_m, block_n] tiles, tile t at
    row block t // column blocks and column block t % column blocks. Column blocks vary fastest, so that the
    programs running at once stream one stretch of memory: measured on the H200 (swiglu forward, bf16, 32768x8192
    and 8192x28672, both backends), 4.31-4.34 TB/s against 4.12-4.15 with row blocks fastest, over tiles from
    [16, 256] to [1, 4096]."""
    col_blocks = cdiv(n_cols, block_n)
    return (cdiv(n_rows, block_m) * col_blocks,), col_blocks


INT32_MAX = 2 ** 31 - 1


def int32_row_chunks(n_rows: int, row_elems: int, block_m: int = 1) -> list[tuple[int, int]]:
    """Row ranges [r0, r1) covering n_rows, each of at most INT32_MAX elements (rows of `row_elems`
    elements, whole blocks of `block_m` rows): within one launch on such a range every offset a kernel
    computes as row * row_stride + column fits an int32. One range, unless the tensor has 2^31 elements."""
    step = max(block_m, INT32_MAX // max(row_elems, 1) // block_m * block_m)
    return [(r0, min(n_rows, r0 + step)) for r0 in range(0, n_rows, step)]
