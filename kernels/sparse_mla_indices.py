"""The index tensors DeepSeek's sparse-attention tests draw, shared by the sparse MLA operator's samples and
benchmarks and the seed's example kernel (examples/sparse_mla.py)."""
from __future__ import annotations

import torch


def make_indices(B: int, S: int, SKV: int, VG: int, topk: int, generator=None, device="cpu") -> torch.Tensor:
    """Indices as DeepSeek's tests draw them: query t takes a random permutation of [0, t) (of [0] for
    t = 0) cut to topk, padded with SKV (an out-of-range index)."""
    idx = torch.full((B, S, VG, topk), SKV, dtype=torch.int32)
    for b in range(B):
        for t in range(S):
            for g in range(VG):
                perm = torch.randperm(max(1, t), generator=generator)[:topk]
                idx[b, t, g, :len(perm)] = perm.to(torch.int32)
    return idx.to(device)
