"""Tiling of the row-wise operators (norms, softmax): a program holds BLOCK_M whole rows of BLOCK_N columns."""
from __future__ import annotations

import torch

from tle.oplib.arith import next_power_of_2


def row_config(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) for rows of `n_cols`: a row fits one tile; short rows are stacked, up to
    64 of them, so a program holds about 2048 elements, and the warps grow with the tile."""
    block_n = next_power_of_2(max(n_cols, 1))
    block_m = max(1, min(64, 2048 // block_n))
    elems = block_m * block_n
    warps = 4 if elems <= 2048 else 8 if elems <= 4096 else 16
    return block_m, block_n, warps


def torch_compute_dtype(x: torch.Tensor) -> torch.dtype:
    """What the torch backend computes in: fp64 for fp64 inputs (gradcheck), fp32 otherwise."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def backward_row_config(n_cols: int) -> tuple[int, int, int, int, bool]:
    """(BLOCK_M, BLOCK_N, num_warps, programs per multiprocessor, PREFETCH) for the row-wise backward kernels,
    which loop over row blocks accumulating column sums. Tiles of 8192 elements and more: one 16-warp program
    per multiprocessor that loads block i + 1 while it reduces block i (PREFETCH). Measured on the H200 (bf16,
    32768x8192, TB/s, rms_norm / layer_norm, Triton): 3.83 / 3.67, against 3.05 / 2.84 for 4 warps x 8 per SM
    without prefetch. Narrower tiles: 4 warps, 8 per multiprocessor, no prefetch (with it, rms_norm at 4096 and
    1024 columns ran at half the speed on Triton)."""
    block_m, block_n, _ = row_config(n_cols)
    if block_m * block_n >= 8192:
        return block_m, block_n, 16, 1, True
    return block_m, block_n, 4, 8, False


def box_config(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) for element-wise operators over [rows, n_cols] in 2-D box tiles (a grid
    over both row and column blocks): tiles of 4096 elements, at most 1024 columns wide, 8 warps."""
    block_n = min(1024, next_power_of_2(max(n_cols, 1)))
    return max(1, 4096 // block_n), block_n, 8


INT32_MAX = 2 ** 31 - 1


def int32_row_chunks(n_rows: int, row_elems: int, block_m: int = 1) -> list[tuple[int, int]]:
    """Row ranges [r0, r1) covering n_rows, each of at most INT32_MAX elements (rows of `row_elems`
    elements, whole blocks of `block_m` rows): within one launch on such a range every offset a kernel
    computes as row * row_stride + column fits an int32. One range, unless the tensor has 2^31 elements."""
    step = max(block_m, INT32_MAX // max(row_elems, 1) // block_m * block_m)
    return [(r0, min(n_rows, r0 + step)) for r0 in range(0, n_rows, step)]
