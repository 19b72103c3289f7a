"""A small transformer-style model built from the operators of tle.ops, for the torch.compile tests."""
import torch

import tle.ops


class Model(torch.nn.Module):
    """Pre-norm residual blocks: RMSNorm with the fused residual add, a SwiGLU MLP, LayerNorm, GELU, dropout
    plus residual (explicit seed: a seed drawn from torch's generator breaks the graph), an affine epilogue,
    an L2-normalized head with a softmax over it and a BCE loss."""

    def __init__(self, d, backend):
        super().__init__()
        self.norm = tle.ops.RMSNorm(d, backend=backend)
        self.up = torch.nn.Linear(d, 2 * d)
        self.ln = tle.ops.LayerNorm(d, backend=backend)
        self.act = tle.ops.GELU(approximate="tanh", backend=backend)
        self.scale = torch.nn.Parameter(torch.rand(d) + 0.5)
        self.bias = torch.nn.Parameter(torch.randn(d) * 0.1)
        self.backend = backend

    def forward(self, x, target=None):
        b = self.backend
        y, h = self.norm(x, x)
        y = tle.ops.swiglu(self.up(y), backend=b)
        y = tle.ops.dropout_add(self.act(self.ln(y)), h, 0.1, seed=7, backend=b)
        y = tle.ops.scale_bias_add(y, self.scale, self.bias, h, backend=b)
        y = tle.ops.softmax(tle.ops.l2_norm(tle.ops.silu(y, backend=b), backend=b), -1, backend=b)
        if target is None:
            return y
        return y, tle.ops.binary_cross_entropy_with_logits(y, target, backend=b)
