"""The torch side of tle.ops.embedding_bag: the "torch" backend's arithmetic (fp32, or fp64 for fp64 weights)
and the integer bookkeeping the kernels' launches share with it (which bag each position of the indices is
in). Below both the operator module (kernels/embedding_bag.py) and the kernels' (kernels/embedding_bag_kernels.py),
whose examples take these as references."""
from __future__ import annotations

import torch

from tle.oplib.rows import torch_compute_dtype


def bags_of_positions(indices, offsets, padding_idx, out_int32=False):
    """(bag of each position of indices, -1 before offsets[0] (int64, or int32 with out_int32); which positions
    count: in a bag and not padding)."""
    n = indices.shape[0]
    pos = torch.arange(n, device=indices.device, dtype=offsets.dtype)
    bag = torch.searchsorted(offsets, pos, right=True, out_int32=out_int32) - 1
    keep = bag >= 0
    if padding_idx >= 0:
        keep = keep & (indices != padding_idx)
    return bag, keep


def positions(indices, offsets, padding_idx):
    """(the bag of each position, clamped into range; which positions count; the index of each, 0 where it does
    not count)."""
    bag, keep = bags_of_positions(indices, offsets, padding_idx)
    return torch.where(keep, bag, 0), keep, torch.where(keep, indices, 0)


def torch_max(rows, keep, at, indices, n_bags):
    """(the largest value of each bag and column, the weight row holding it: the first position on a tie, -1
    for an empty bag)."""
    n, dim = rows.shape
    vals = torch.where(keep[:, None], rows, float("-inf"))
    where = at[:, None].expand(n, dim)
    best = torch.full((n_bags, dim), float("-inf"), dtype=rows.dtype, device=rows.device)
    best = best.scatter_reduce(0, where, vals, "amax")
    pos = torch.arange(n, device=rows.device)[:, None].expand(n, dim)
    first = torch.full((n_bags, dim), n, dtype=torch.int64, device=rows.device)
    first = first.scatter_reduce(0, where, torch.where(keep[:, None] & (vals == best.gather(0, where)), pos, n), "amin")
    arg = torch.where(first < n, indices[first.clamp(max=n - 1)], -1).to(torch.int32)
    return torch.where(arg >= 0, best, 0), arg


def forward(weight, indices, offsets, per_sample_weights, mode, padding_idx):
    ct = torch_compute_dtype(weight)
    n_bags, dim, n = offsets.shape[0], weight.shape[1], indices.shape[0]
    out = torch.zeros(n_bags, dim, device=weight.device, dtype=ct)
    aux = {"max": lambda: torch.full((n_bags, dim), -1, device=weight.device, dtype=torch.int32),
           "mean": lambda: torch.ones(n_bags, device=weight.device, dtype=ct),
           "sum": lambda: torch.empty(0, device=weight.device, dtype=ct)}[mode]()
    if n_bags and n and dim:
        at, keep, idx = positions(indices, offsets, padding_idx)
        rows = weight.index_select(0, idx).to(ct)
        if mode == "max":
            out, aux = torch_max(rows, keep, at, indices, n_bags)
            return out.to(weight.dtype), aux
        if per_sample_weights is not None:
            rows = rows * per_sample_weights.to(ct)[:, None]
        out.index_add_(0, at, torch.where(keep[:, None], rows, 0))
        if mode == "mean":
            counts = torch.zeros(n_bags, device=weight.device, dtype=ct).index_add_(0, at, keep.to(ct)).clamp(min=1)
            out, aux = out / counts[:, None], 1 / counts
    return out.to(weight.dtype), aux


def weight_grad(dy, indices, offsets, per_sample_weights, aux, num_weights, mode, padding_idx):
    ct = torch_compute_dtype(dy)
    n_bags, dim = dy.shape
    dw = torch.zeros(num_weights, dim, device=dy.device, dtype=ct)
    if not (n_bags and indices.shape[0] and num_weights and dim):
        return dw.to(dy.dtype)
    if mode == "max":
        hit = aux >= 0
        cols = torch.arange(dim, device=dy.device).expand(n_bags, dim)
        dw.view(-1).index_add_(0, (aux.long() * dim + cols)[hit], dy.to(ct)[hit])
        return dw.to(dy.dtype)
    at, keep, idx = positions(indices, offsets, padding_idx)
    g = dy.to(ct) * aux.to(ct)[:, None] if mode == "mean" else dy.to(ct)
    g = g.index_select(0, at)
    if per_sample_weights is not None:
        g = g * per_sample_weights.to(ct)[:, None]
    dw.index_add_(0, idx, torch.where(keep[:, None], g, 0))
    return dw.to(dy.dtype)


def per_sample_weights_grad(dy, weight, indices, offsets, padding_idx):
    ct = torch_compute_dtype(weight)
    n_bags = dy.shape[0]
    if not (n_bags and indices.shape[0]):
        return torch.zeros(indices.shape[0], device=dy.device, dtype=weight.dtype)
    at, keep, idx = positions(indices, offsets, padding_idx)
    dots = (dy.to(ct).index_select(0, at) * weight.index_select(0, idx).to(ct)).sum(1)
    return torch.where(keep, dots, 0).to(weight.dtype)
