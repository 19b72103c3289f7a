"""How tle-bench measures flash_attention: its shapes' inputs and flops, torch's anchors (SDPA for dense
batches, torch.nn.attention.varlen.varlen_attn for packed sequences) and TileLang's own FlashAttention examples
as a peer.

A shape is (B, H, H_KV, S, D, mask), mask one of "causal", "full" or "varlen": B causal sequences packed into
[total, H, D] (cu_seqlens), their lengths spread evenly from S/4 to 7S/4 (mean S), so that blocks of every
kind (short sequences, sequence ends inside a block) are timed."""
from __future__ import annotations

import importlib
import inspect
import os
import sys

import torch
import torch.nn.functional as F

from tle.oplib import Sample


def varlen_lengths(b: int, s: int) -> list[int]:
    """B lengths spread evenly from S/4 to 7S/4 (their mean S, to rounding)."""
    if b == 1:
        return [s]
    return [s // 4 + (3 * s // 2) * i // (b - 1) for i in range(b)]


def bench_make(shape, dtype, device):
    b, h, h_kv, s, d, mask = shape
    if mask == "varlen":
        lengths = varlen_lengths(b, s)
        total = sum(lengths)
        cu = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)
        x = [torch.randn(total, n, d, device=device, dtype=dtype) for n in (h, h_kv, h_kv)]
        return Sample((*x, True), dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(lengths),
                                       max_seqlen_k=max(lengths)))
    x = [torch.randn(b, s, n, d, device=device, dtype=dtype) for n in (h, h_kv, h_kv)]
    return Sample((*x, mask == "causal"))


def _lengths(sample) -> list[int]:
    q = sample.args[0]
    cu = sample.kwargs.get("cu_seqlens_q")
    return [q.shape[1]] * q.shape[0] if cu is None else cu.diff().tolist()


def bench_flops(sample, mode):
    q, k, _, causal = sample.args
    h, d = q.shape[-2], q.shape[-1]
    s_k = None if "cu_seqlens_k" in sample.kwargs else k.shape[1]
    # per sequence: 2 products of L_q x L_k x D multiply-adds, half of them under a causal mask
    fwd = sum(4 * h * n * (s_k or n) * d for n in _lengths(sample)) / (2 if causal else 1)
    return fwd if mode == "fwd" else 2.5 * fwd          # backward: five matmuls against the forward's two


def _varlen_attn(q, k, cu, max_len):
    """torch's packed-sequence attention (FlashAttention's varlen kernel), causal, as a callable of (q, k, v): its
    arguments settled once, outside the timed calls. The argument that asks for the causal mask is `window_size`
    in newer torch and `is_causal` in older."""
    from torch.nn.attention.varlen import varlen_attn
    params = inspect.signature(varlen_attn).parameters
    extra = dict(window_size=(-1, 0)) if "window_size" in params else dict(is_causal=True)
    if q.shape[1] != k.shape[1]:
        extra["enable_gqa"] = True
    return lambda q, k, v: varlen_attn(q, k, v, cu, cu, max_len, max_len, **extra)


def _sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal,
                                          enable_gqa=q.shape[2] != k.shape[2]).transpose(1, 2)


def bench_eager(sample):
    """What a torch user runs: SDPA on [B, S, H, D] (transposed to its layout), varlen_attn on packed sequences.
    varlen_attn takes fp16 and bf16 on CUDA only: on fp32 inputs (the benchmark's reference) and on the CPU (a dry
    run) each sequence runs SDPA."""
    q, k, v, causal = sample.args
    cu = sample.kwargs.get("cu_seqlens_q")
    if cu is None:
        return lambda q=q, k=k, v=v: _sdpa(q, k, v, causal)
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        attend = _varlen_attn(q, k, cu, sample.kwargs["max_seqlen_q"])
        return lambda q=q, k=k, v=v: attend(q, k, v)
    bounds = list(zip(cu[:-1].tolist(), cu[1:].tolist()))
    return lambda q=q, k=k, v=v: torch.cat([_sdpa(q[None, a:e], k[None, a:e], v[None, a:e], True)[0]
                                            for a, e in bounds])


def _tilelang_examples():
    """TileLang's FlashAttention examples (examples/flash_attention of its repository), kept outside this tree:
    the folder named by TLE_TILELANG_FA_EXAMPLES, default .peers/tilelang_flash_attention."""
    folder = os.path.abspath(os.environ.get("TLE_TILELANG_FA_EXAMPLES",
                                            os.path.join(".peers", "tilelang_flash_attention")))
    if not os.path.isfile(os.path.join(folder, "example_gqa_bwd.py")):
        raise ImportError(f"TileLang's flash_attention examples are not in {folder}")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module("example_gqa_fwd_bshd"), importlib.import_module("example_gqa_bwd")


def tilelang_example_peer(sample):
    """TileLang's examples at what they take (fp16, [B, S, H, D], the default scale, head dims up to 128, no
    packed sequences): the forward is example_gqa_fwd_bshd's kernel at one configuration, 128x128 tiles, 2 stages,
    256 threads (not autotuned per shape); with gradients asked for, example_gqa_bwd's autograd function (its own
    forward saving the log-sum-exp, its backward accumulating dQ with atomics, its own configuration)."""
    q, k, v, causal = sample.args
    if q.dtype != torch.float16 or sample.kwargs or q.shape[-1] > 128:
        return None
    fwd, bwd = _tilelang_examples()
    b, s, h, d = q.shape
    groups = h // k.shape[2]
    if q.requires_grad:
        return lambda q=q, k=k, v=v: bwd.attention(q, k, v, causal, groups)
    kernel = fwd.flashattn(b, h, s, d, causal, groups=groups, block_M=128, block_N=128, num_stages=2, threads=256)
    return lambda q=q, k=k, v=v: kernel(q, k, v)
