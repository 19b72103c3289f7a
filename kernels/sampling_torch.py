"""The sampling operators' mathematics in torch, sorting each row: the "torch" backend and the tests' reference.

Per row, y = logits * inv_temperature (the kernels' fp32 product; fp64 when the logits are fp64). The kept set
is {y >= tau}, tau the largest of:
- top-k: the k-th largest value (ties with it are kept, so more than k may be); k >= the row's length: -inf;
- top-p: over the top-k set renormalized, the largest value v whose mass at and above v reaches top_p of the
  set's mass (the smallest set of largest values with that mass, ties with its last value kept); p >= 1: -inf;
- min-p: max + log(min_p), the values whose probability is at least min_p times the largest; min_p <= 0: -inf.
A row samples column c with probability exp(y_c) / sum over the kept set: the first kept column, in column
order, whose running kept mass exceeds u times the kept mass, u the row's uniform from the Philox stream. An
inverse temperature of 0 (temperature 0) takes the first column of the largest logit."""
from __future__ import annotations

import torch

from tle.kernels.philox import stream_words_torch


def uniforms(rows: int, seed: int, offset: int, device) -> torch.Tensor:
    """Row r's uniform in [0, 1): element r of the Philox stream of (seed, offset), its top 24 bits (fp64)."""
    return (stream_words_torch(rows, seed, offset, device) >> 8).double() / 2.0**24


def thresholds(y: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """tau of top-k then top-p for each row of y [B, V] ([B, 1]), from each row sorted."""
    n = y.shape[-1]
    v, _ = y.sort(dim=-1, descending=True)
    e = torch.exp(v - v[:, :1])
    k = top_k.long().clamp(1, n)
    tau_k = torch.where((top_k < n)[:, None], v.gather(1, k[:, None] - 1), torch.full_like(v[:, :1], -torch.inf))
    in_k = v >= tau_k
    mass_k = torch.where(in_k, e, 0).cumsum(-1)
    want = top_p.to(v.dtype)[:, None] * mass_k[:, -1:]
    reached = (mass_k >= want) & in_k
    first = torch.where(reached.any(-1), reached.int().argmax(-1), in_k.sum(-1) - 1)
    tau_p = torch.where((top_p < 1)[:, None], v.gather(1, first[:, None]), torch.full_like(tau_k, -torch.inf))
    return torch.maximum(tau_k, tau_p)


def scaled(logits: torch.Tensor, inv_temp: torch.Tensor) -> torch.Tensor:
    ct = torch.float64 if logits.dtype == torch.float64 else torch.float32
    return logits.to(ct) * inv_temp.to(ct)[:, None]


def top_k_top_p_mask(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    y = scaled(logits, torch.ones(logits.shape[0], device=logits.device))
    tau = thresholds(y, top_k, top_p)
    return torch.where(y >= tau, logits, torch.full_like(logits, -torch.inf))


def sample(logits, inv_temp, top_k, top_p, min_p, seed: int, offset: int) -> torch.Tensor:
    rows, n = logits.shape
    greedy = inv_temp == 0
    y = scaled(logits, torch.where(greedy, 1.0, inv_temp))
    top = y.max(-1, keepdim=True).values
    tau = thresholds(y, torch.where(greedy, n, top_k), torch.where(greedy, 1.0, top_p))
    min_p = torch.where(greedy, 1.0, min_p).to(y.dtype)[:, None]
    floor = torch.where(min_p > 0, top + torch.log(min_p), -torch.inf)
    kept = y >= torch.maximum(tau, floor)
    e = torch.where(kept, torch.exp(y - top), 0)
    running = e.cumsum(-1)
    u = torch.where(greedy, 0.0, uniforms(rows, seed, offset, logits.device)).to(y.dtype)
    hit = kept & (running > u[:, None] * running[:, -1:])
    last = n - 1 - kept.flip(-1).int().argmax(-1)
    return torch.where(hit.any(-1), hit.int().argmax(-1), last).long()
