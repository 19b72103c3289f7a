"""torch.nn.functional.scaled_dot_product_attention's signature and meaning, on FlashAttention's kernels.

`tle.ops.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
scale=None, enable_gqa=False, *, seed=None, offset=0, backend=None, fallback=None)`

- query [B, H, L, E], key and value [B, H_kv, S, E]: SDPA's layout (or [B, L, E] and [B, S, E], one head).
  H_kv = H, or, with enable_gqa=True, any H_kv dividing H (query head h reads key head h // (H / H_kv)).
- is_causal: SDPA's causal mask, aligned to the top-left corner (query i sees keys j <= i whatever L and S;
  flash_attention's causal aligns to the bottom-right). Not together with attn_mask, as in torch.
- attn_mask: bool (True: the key takes part) or floating (added to the scores), broadcastable to
  [B, H, L, S]. It is not differentiable here: a mask that requires grad is refused.
- dropout_p: the attention probabilities are dropped (kept ones scaled by 1 / (1 - p)) with the layer's
  Philox stream, four probabilities to a counter (attention_parts.dropout_keep, kernels/philox.py), the
  same bits on every backend. seed=None draws (seed, offset) from torch's default generator of query's
  device, as tle.ops.dropout_add does, so torch.manual_seed repeats a run; pass seed (and offset) to fix the
  mask. torch's own dropout draws other bits: the two agree in distribution, not element by element. As in
  torch there is no training flag: dropout_p > 0 drops.
- scale: default E ** -0.5. A query that sees no key (all masked) gets output 0, as torch gives.
- value's head dim must be query's (E): the kernels take one head dim.

The kernels read the inputs through transposed views ([B, L, H, E], nothing copied) and the output comes
back as a view in SDPA's layout. Autograd: query, key and value. The tle::flash_attention op runs it.
"""
from __future__ import annotations

import math

import torch

import tle
from tle.kernels.attention_parts import Scores, dropout_counters, dropout_keep
from tle.kernels.dropout_add import check_dropout_args, draw_seed_offset, scale_of
from tle.kernels.flash_attention import (FLASH_ATTENTION, GRAD_TOLERANCES, KERNEL_DTYPES, attention_op,
                                         check_kernel_inputs, check_scale)
from tle.examples import default_tolerance
from tle.oplib import BenchSpec, Operator, Sample, check_tensor

MAX_OFFSET = 2**31 - 1          # the kernels address the mask with 32-bit offsets


def _check_qkv(query, key, value, enable_gqa):
    check_tensor(query, "query", dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64))
    if query.dim() not in (3, 4):
        raise tle.LaunchError(f"'query' has shape {tuple(query.shape)}; expected [B, H, L, E] (or [B, L, E])")
    check_tensor(key, "key", dtypes=(query.dtype,), rank=query.dim(), device=query.device)
    check_tensor(value, "value", dtypes=(query.dtype,), rank=query.dim(), device=query.device)
    if key.shape[0] != query.shape[0] or value.shape[0] != query.shape[0]:
        raise tle.LaunchError(f"'key' and 'value' have batch {key.shape[0]} and {value.shape[0]}; expected "
                              f"{query.shape[0]}, query's")
    if key.shape[-1] != query.shape[-1]:
        raise tle.LaunchError(f"'key' has head dim {key.shape[-1]}; expected {query.shape[-1]}, query's")
    if value.shape[-1] != query.shape[-1]:
        raise tle.LaunchError(f"'value' has head dim {value.shape[-1]}; tle's attention takes value's head dim "
                              f"equal to query's ({query.shape[-1]})")
    if value.shape[:-1] != key.shape[:-1]:
        raise tle.LaunchError(f"'value' has shape {tuple(value.shape)}; expected {tuple(key.shape[:-1])} before "
                              f"the head dim, key's")
    if query.dim() == 4:
        h, h_kv = query.shape[1], key.shape[1]
        if h != h_kv and not enable_gqa:
            raise tle.LaunchError(f"'key' has {h_kv} heads and 'query' {h}: pass enable_gqa=True for grouped-query "
                                  f"attention (as torch asks)")
        if h_kv == 0 or h % h_kv:
            raise tle.LaunchError(f"'key' has {h_kv} heads, which does not divide query's {h} heads")


def _mask_as_bias(attn_mask, query, shape4):
    """attn_mask as an additive bias viewed as [B, H, L, S] (stride 0 along broadcast axes): a bool mask becomes
    0 / -inf in query's dtype, in its own shape."""
    check_tensor(attn_mask, "attn_mask", dtypes=(torch.bool, torch.float16, torch.bfloat16, torch.float32,
                                                  torch.float64), device=query.device)
    if attn_mask.requires_grad:
        raise tle.LaunchError("'attn_mask' requires grad; tle.ops.scaled_dot_product_attention does not "
                              "differentiate the mask: pass attn_mask.detach()")
    b, h, l, s = shape4
    target = (b, h, l, s) if query.dim() == 4 else (b, l, s)
    try:
        fits = torch.broadcast_shapes(attn_mask.shape, target) == torch.Size(target)
    except RuntimeError:
        fits = False
    if not fits:
        raise tle.LaunchError(f"'attn_mask' has shape {tuple(attn_mask.shape)}, which does not broadcast to "
                              f"{list(target)} ([B, H, L, S] of query and key)")
    if attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device).masked_fill_(
            ~attn_mask, -math.inf)
    bias = attn_mask.expand(target)
    return bias if query.dim() == 4 else bias.unsqueeze(1)


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False, *,
                                 seed: int | None = None, offset: int = 0, backend: str | None = None,
                                 fallback: str | None = None) -> torch.Tensor:
    """torch's F.scaled_dot_product_attention on the layer's kernels (the module docstring gives the meaning)."""
    _check_qkv(query, key, value, enable_gqa)
    if not isinstance(is_causal, bool):
        raise tle.LaunchError(f"'is_causal' must be a bool, got {is_causal!r}")
    if is_causal and attn_mask is not None:
        raise tle.LaunchError("'attn_mask' and is_causal=True go separately (as in torch): fold the causal mask "
                              "into attn_mask")
    scale = check_scale(scale, query.shape[-1])
    check_dropout_args(dropout_p, seed, offset, "dropout_p")
    one_head = query.dim() == 3
    q, k, v = (t.unsqueeze(1) if one_head else t for t in (query, key, value))
    b, h, l, _ = q.shape
    s = k.shape[2]
    bias = None if attn_mask is None else _mask_as_bias(attn_mask, query, (b, h, l, s))
    backend = FLASH_ATTENTION.resolve(query.device, backend, fallback)
    q_t, k_t, v_t = (t.transpose(1, 2) for t in (q, k, v))           # [B, L, H, E]: the kernels' layout
    check_kernel_inputs("scaled_dot_product_attention", backend, b, query=q_t, key=k_t, value=v_t)
    if backend != "torch" and bias is not None and sum((n - 1) * st for n, st in zip(bias.shape, bias.stride())
                                                       if n) > MAX_OFFSET:
        raise tle.LaunchError(f"'attn_mask' spans more than 2^31 elements; backend '{backend}' addresses it with "
                              f"32-bit offsets")
    p = float(dropout_p)
    if p > 0 and seed is None:
        seed, offset = draw_seed_offset(query.device, dropout_counters((b, h, l, s)))
    sc = Scores(window=(None, l - s) if is_causal else (None, None), bias=bias, dropout_p=p,
                seed=(seed or 0) if p > 0 else 0, offset=offset if p > 0 else 0)
    out, _ = attention_op(q_t, k_t, v_t, sc, scale, backend)
    out = out.transpose(1, 2)
    return out.squeeze(1) if one_head else out


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
              seed=None, offset=0):
    """The tests' ground truth: torch's own F.scaled_dot_product_attention; with dropout the same formula
    written out with the mask of the torch Philox (an explicit seed needed)."""
    if dropout_p == 0.0:
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                                                is_causal=is_causal, scale=scale,
                                                                enable_gqa=enable_gqa)
    if seed is None:
        raise ValueError("reference() reproduces a dropout mask only from an explicit seed")
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    group = query.shape[-3] // key.shape[-3] if query.dim() == 4 else 1
    k, v = (t.repeat_interleave(group, dim=-3) if group > 1 else t for t in (key, value))
    s = query @ k.transpose(-2, -1) * scale
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), -math.inf)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    shape4 = p.shape if p.dim() == 4 else (p.shape[0], 1, *p.shape[1:])
    keep = dropout_keep(shape4, Scores(dropout_p=dropout_p, seed=seed, offset=offset), p.device).reshape(p.shape)
    return (p * keep * scale_of(dropout_p)) @ v


def samples(device, dtype):
    def t(*shape):
        return torch.randn(*shape, device=device, dtype=torch.float32).to(dtype)

    def qkv(b, h, h_kv, l, s, e):
        return t(b, h, l, e), t(b, h_kv, s, e), t(b, h_kv, s, e)

    def bool_mask(*shape):
        m = torch.rand(*shape, device=device) > 0.3
        m[..., 0, :] = False                   # a query that sees no key
        return m

    return [Sample(qkv(2, 4, 4, 33, 33, 32), label="B2 H4 L33 E32"),
            Sample(qkv(1, 2, 1, 9, 12, 16), dict(attn_mask=t(9, 12), dropout_p=0.3, seed=7, enable_gqa=True),
                   label="small: float mask [L, S], dropout 0.3, MQA"),
            Sample(qkv(1, 4, 2, 20, 45, 64), dict(is_causal=True, enable_gqa=True),
                   label="causal top-left L20 S45 GQA 4/2"),
            Sample(qkv(1, 2, 2, 45, 20, 32), dict(is_causal=True), label="causal top-left L45 S20"),
            Sample(qkv(2, 2, 2, 24, 70, 32), dict(attn_mask=bool_mask(24, 70)),
                   label="bool mask [L, S], a query that sees no key"),
            Sample(qkv(2, 3, 1, 17, 40, 16), dict(attn_mask=t(2, 1, 17, 40), enable_gqa=True, scale=0.3),
                   label="float mask [B, 1, L, S] MQA scale 0.3"),
            Sample(qkv(1, 2, 2, 70, 70, 64), dict(dropout_p=0.2, seed=1234, offset=5),
                   label="dropout 0.2 L70 E64"),
            Sample(qkv(1, 2, 2, 80, 72, 128), dict(dropout_p=0.1, is_causal=True, seed=99, offset=12),
                   label="dropout 0.1 causal L80 S72 E128"),
            Sample(qkv(1, 4, 2, 40, 90, 32), dict(dropout_p=0.5, is_causal=True, enable_gqa=True, seed=2**40 + 3,
                                                  offset=2**32 - 100),
                   label="dropout 0.5 causal GQA, the counter's low word wraps"),
            Sample((t(3, 30, 16), t(3, 50, 16), t(3, 50, 16)), dict(attn_mask=bool_mask(3, 30, 50)),
                   label="[B, L, E] one head, bool mask [B, L, S]")]


def _bench_make(shape, dtype, device):
    b, h, h_kv, s, e, kind = shape
    q, k, v = (torch.randn(b, n, s, e, device=device, dtype=dtype) for n in (h, h_kv, h_kv))
    kw = dict(enable_gqa=h != h_kv)
    if kind == "causal":
        kw["is_causal"] = True
    elif kind == "mask":                       # a causal pattern given as a bool mask: SDPA's masked path
        kw["attn_mask"] = torch.ones(s, s, dtype=torch.bool, device=device).tril()
    elif kind.startswith("dropout"):
        kw.update(dropout_p=float(kind[len("dropout"):]), is_causal=True)
    return Sample((q, k, v), kw)


def _sdpa_flops(sample, mode):
    q, k = sample.args[:2]
    b, h, l, e = q.shape
    fwd = 4 * b * h * l * k.shape[2] * e
    if sample.kwargs.get("is_causal") or sample.kwargs.get("attn_mask") is not None:
        fwd /= 2
    return fwd if mode == "fwd" else 2.5 * fwd


def _bench_check(sample, outputs, grads, upstream):
    """Without dropout: the output and gradients within the dtype's tolerance of torch's SDPA on the inputs cast to
    fp32. With dropout, whose bits differ between torch and the layer: all finite, and the output's mean within
    6 standard errors of the dropout-free fp32 output's mean (dropout leaves the expectation unchanged)."""
    q, k, v = (t.detach().float().requires_grad_() for t in sample.args[:3])
    kw = dict(sample.kwargs, dropout_p=0.0)
    kw.pop("seed", None)
    kw.pop("offset", None)
    if kw.get("attn_mask") is not None and kw["attn_mask"].is_floating_point():
        kw["attn_mask"] = kw["attn_mask"].float()
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)
    out = outputs[0].float()
    assert bool(out.isfinite().all()), "the output has non-finite elements"
    if sample.kwargs.get("dropout_p", 0.0) > 0:
        diff = (out - ref.detach()).flatten()
        bound = 6 * diff.std().item() / diff.numel() ** 0.5 + 1e-6
        assert abs(diff.mean().item()) <= bound, f"output mean off by {diff.mean().item():.3g} (bound {bound:.3g})"
        assert all(g is None or bool(g.isfinite().all()) for g in grads), "a gradient has non-finite elements"
        return None
    dtype = sample.args[0].dtype
    worst = (out - ref.detach()).abs().max().item()
    atol, rtol = default_tolerance(ref.detach(), dtype)
    torch.testing.assert_close(out, ref.detach(), atol=atol, rtol=rtol)
    if grads:
        ref_grads = torch.autograd.grad(ref, (q, k, v), upstream[0].float())
        for name, g, r in zip(("query", "key", "value"), grads, ref_grads):
            if g is not None:
                atol, rtol = default_tolerance(r, dtype)
                torch.testing.assert_close(g.float(), r, atol=atol, rtol=rtol, msg=lambda m, n=name: f"d{n}: {m}")
                worst = max(worst, (g.float() - r).abs().max().item())
    return worst


def _eager(sample):
    def sdpa(*args):
        return torch.nn.functional.scaled_dot_product_attention(*(args or sample.args), **sample.kwargs)
    return sdpa


OPERATOR = Operator(
    "scaled_dot_product_attention", fn=scaled_dot_product_attention, reference=reference, samples=samples,
    grad_inputs=(0, 1, 2), dtypes=KERNEL_DTYPES, tolerances=GRAD_TOLERANCES,
    bench=BenchSpec(dry_shapes=[(1, 2, 2, 128, 64, "causal"), (1, 2, 2, 128, 64, "mask"),
                                (1, 2, 1, 128, 64, "dropout0.1")],
                    shapes=[(4, 32, 32, 4096, 128, "causal"), (4, 32, 32, 4096, 128, "mask"),
                            (4, 32, 32, 4096, 128, "dropout0.1"), (8, 32, 8, 4096, 128, "causal")],
                    make=_bench_make, flops=_sdpa_flops, eager=_eager, check=_bench_check,
                    shape_help="BxHxH_KVxSxEx(causal|mask|dropoutP)"))
