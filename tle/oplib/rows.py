"""Tiling of the row-wise operators (norms, softmax): a program holds BLOCK_M whole rows of BLOCK_N columns."""
from __future__ import annotations

import torch
import triton


def row_config(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) for rows of `n_cols`: a row fits one tile; short rows are stacked so a
    program holds at least 2048 elements, and the warps grow with the tile (so do registers per thread)."""
    block_n = triton.next_power_of_2(max(n_cols, 1))
    block_m = max(1, min(64, 2048 // block_n))
    elems = block_m * block_n
    warps = 4 if elems <= 2048 else 8 if elems <= 4096 else 16
    return block_m, block_n, warps


def torch_compute_dtype(x: torch.Tensor) -> torch.dtype:
    """What the torch backend computes in: fp64 for fp64 inputs (gradcheck), fp32 otherwise."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32
