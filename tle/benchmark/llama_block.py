"""A Llama-style decoder stack with a language-model head's loss, written once over a set of operators, so that
one training step can be run on tle.ops (each kernel backend), on eager torch, under torch.compile and on
Liger's kernels, and compared (tle-bench --model llama-block, tle/benchmark/model_step.py).

    per layer:  h = h + o_proj(attention(rope(q_proj(n), k_proj(n)), v_proj(n)))     n = rms_norm(h)
                h = h + down(swiglu(gate_up(n)))                                      n = rms_norm(h)
    loss = cross_entropy(rms_norm(h) @ W_head^T, targets)

Attention is causal with grouped heads (KV_HEADS < HEADS), rotary embedding in the half-split form. The stack
takes hidden states [B, S, HIDDEN] (no token embedding: its lookup is the same for every variant) and next-token
targets [B * S]. Each variant is an `Ops`: the seven functions the stack calls."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LlamaConfig:
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    intermediate: int = 14336
    layers: int = 2
    vocab: int = 128256
    seq: int = 4096
    batch: int = 2
    eps: float = 1e-5
    rope_theta: float = 500000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def label(self) -> str:
        return (f"{self.layers} layers, hidden {self.hidden}, {self.heads} heads / {self.kv_heads} KV, MLP "
                f"{self.intermediate}, vocabulary {self.vocab}, batch {self.batch} x sequence {self.seq}")


# the tests' and `--device cpu`'s stack: every part present, small enough for Triton's interpreter
DRY_CONFIG = LlamaConfig(hidden=64, heads=4, kv_heads=2, intermediate=96, layers=2, vocab=256, seq=16, batch=2)


def config_with(base: LlamaConfig, **sizes) -> LlamaConfig:
    """`base` with the sizes given (None: keep base's)."""
    return replace(base, **{k: v for k, v in sizes.items() if v is not None})


def make_params(cfg: LlamaConfig, device, dtype, seed: int = 0) -> dict[str, torch.Tensor]:
    """The stack's weights, leaves that require grad: nn.Linear's layout [out, in], norms' weights near 1."""
    g = torch.Generator().manual_seed(seed)
    d, kv = cfg.head_dim, cfg.kv_heads * cfg.head_dim

    def linear(n_out, n_in):
        return torch.randn(n_out, n_in, generator=g) * n_in ** -0.5

    def norm(n):
        return 1.0 + 0.1 * torch.randn(n, generator=g)

    params = {}
    for i in range(cfg.layers):
        params.update({f"{i}.attn_norm": norm(cfg.hidden), f"{i}.q": linear(cfg.heads * d, cfg.hidden),
                       f"{i}.k": linear(kv, cfg.hidden), f"{i}.v": linear(kv, cfg.hidden),
                       f"{i}.o": linear(cfg.hidden, cfg.heads * d), f"{i}.mlp_norm": norm(cfg.hidden),
                       f"{i}.gate_up": linear(2 * cfg.intermediate, cfg.hidden),
                       f"{i}.down": linear(cfg.hidden, cfg.intermediate)})
    params["final_norm"] = norm(cfg.hidden)
    params["head"] = linear(cfg.vocab, cfg.hidden)
    return {k: v.to(device=device, dtype=dtype).requires_grad_() for k, v in params.items()}


def make_inputs(cfg: LlamaConfig, device, dtype, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states [B, S, HIDDEN] (unit scale, as after an embedding and a norm) and targets [B * S]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(cfg.batch, cfg.seq, cfg.hidden, generator=g).to(device=device, dtype=dtype)
    targets = torch.randint(0, cfg.vocab, (cfg.batch * cfg.seq,), generator=g).to(device)
    return x, targets


def rope_tables(cfg: LlamaConfig, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [1, S, HEAD_DIM] in the half-split form (Llama's), computed in fp32 and rounded once."""
    d = cfg.head_dim
    inv = 1.0 / cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.outer(torch.arange(cfg.seq, dtype=torch.float32), inv)
    angles = torch.cat([angles, angles], dim=-1)[None]
    return angles.cos().to(device=device, dtype=dtype), angles.sin().to(device=device, dtype=dtype)


@dataclass(frozen=True)
class Ops:
    """What the stack calls. Layout of q, k, v: [B, S, heads, HEAD_DIM].

    rms_norm(x, weight, eps) -> y;  rope(q, k, cos, sin) -> (q, k);  attention(q, k, v) -> o (causal, GQA);
    linear(x, weight) -> x @ weight^T;  swiglu_mlp(x, gate_up, down) -> down(silu(gate) * up);
    head_loss(h [N, HIDDEN], head [V, HIDDEN], targets [N]) -> the mean cross entropy."""
    name: str
    rms_norm: Callable
    rope: Callable
    attention: Callable
    linear: Callable
    swiglu_mlp: Callable
    head_loss: Callable


def loss_of(cfg: LlamaConfig, ops: Ops, params: dict, x: torch.Tensor, targets: torch.Tensor,
            cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The stack's forward and its loss, on `ops`."""
    b, s, _ = x.shape
    d = cfg.head_dim
    h = x
    for i in range(cfg.layers):
        n = ops.rms_norm(h, params[f"{i}.attn_norm"], cfg.eps)
        q = ops.linear(n, params[f"{i}.q"]).view(b, s, cfg.heads, d)
        k = ops.linear(n, params[f"{i}.k"]).view(b, s, cfg.kv_heads, d)
        v = ops.linear(n, params[f"{i}.v"]).view(b, s, cfg.kv_heads, d)
        q, k = ops.rope(q, k, cos, sin)
        o = ops.attention(q, k, v).reshape(b, s, cfg.heads * d)
        h = h + ops.linear(o, params[f"{i}.o"])
        n = ops.rms_norm(h, params[f"{i}.mlp_norm"], cfg.eps)
        h = h + ops.swiglu_mlp(n, params[f"{i}.gate_up"], params[f"{i}.down"])
    n = ops.rms_norm(h, params["final_norm"], cfg.eps)
    return ops.head_loss(n.reshape(b * s, cfg.hidden), params["head"], targets)


# -- eager torch: the formulas as Hugging Face's Llama writes them ---------------------------------------------
def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _torch_rope(q, k, cos, sin):
    c, s = cos.unsqueeze(2), sin.unsqueeze(2)             # [1, S, 1, D] against [B, S, H, D]
    return q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s


def _torch_attention(q, k, v):
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                       enable_gqa=True)
    return o.transpose(1, 2)


def _torch_swiglu_mlp(x, gate_up, down):
    gate, up = F.linear(x, gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, down)


def _torch_head_loss(h, head, targets):
    return F.cross_entropy(F.linear(h, head).float(), targets)


TORCH_OPS = Ops("torch", rms_norm=lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps), rope=_torch_rope,
                attention=_torch_attention, linear=F.linear, swiglu_mlp=_torch_swiglu_mlp,
                head_loss=_torch_head_loss)


# -- tle.ops on one backend ------------------------------------------------------------------------------------
def tle_ops(backend: str) -> Ops:
    import tle.ops as o

    def rms_norm(x, w, eps):
        return o.rms_norm(x, (x.shape[-1],), w, eps, backend=backend)

    def rope(q, k, cos, sin):
        return o.apply_rotary_pos_emb(q, k, cos, sin, None, 2, backend=backend)       # [B, S, H, D]: dim 2

    def attention(q, k, v):
        return o.flash_attention(q, k, v, causal=True, backend=backend)

    def linear(x, w):
        return o.linear_act(x, w, None, None, backend=backend)

    def swiglu_mlp(x, gate_up, down):
        return linear(o.linear_swiglu(x, gate_up, backend=backend), down)

    def head_loss(h, head, targets):
        return o.fused_linear_cross_entropy(h, head, targets, backend=backend)

    return Ops(f"tle {backend}", rms_norm=rms_norm, rope=rope, attention=attention, linear=linear,
               swiglu_mlp=swiglu_mlp, head_loss=head_loss)


# -- Liger's kernels where Liger has them (attention: SDPA, as a Liger-patched Llama runs it) -------------------
def liger_ops() -> Ops:
    """Raises ImportError without liger_kernel."""
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
    flce = LigerFusedLinearCrossEntropyLoss()

    def rope(q, k, cos, sin):                # Liger's rope takes [B, H, S, D]
        q, k = liger_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        return q.transpose(1, 2), k.transpose(1, 2)

    def swiglu_mlp(x, gate_up, down):
        gate, up = F.linear(x, gate_up).chunk(2, dim=-1)
        return F.linear(LigerSiLUMulFunction.apply(gate, up), down)

    return Ops("liger", rms_norm=lambda x, w, eps: LigerRMSNormFunction.apply(x, w, eps), rope=rope,
               attention=_torch_attention, linear=F.linear, swiglu_mlp=swiglu_mlp,
               head_loss=lambda h, head, targets: flce(head, h, targets))


def flops_per_step(cfg: LlamaConfig) -> float:
    """The products' floating-point operations of a forward and backward (3x the forward's): projections, MLP,
    head, and causal attention (half of the S x S scores)."""
    t, d = cfg.batch * cfg.seq, cfg.head_dim
    per_layer = 2 * t * cfg.hidden * (2 * cfg.heads * d + 2 * cfg.kv_heads * d + 3 * cfg.intermediate)
    attention = 2 * 2 * cfg.batch * cfg.heads * cfg.seq * cfg.seq * d / 2
    head = 2 * t * cfg.hidden * cfg.vocab
    return 3.0 * (cfg.layers * (per_layer + attention) + head)


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref|| in fp64 (0 for two zero tensors; inf when got is not finite)."""
    g, r = got.double(), ref.double()
    if not torch.isfinite(g).all():
        return math.inf
    denom = r.norm().item()
    return (g - r).norm().item() / denom if denom else g.norm().item()
