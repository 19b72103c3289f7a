"""Every tle.ops function and module that shares a name with torch.nn.functional or torch.nn takes torch's
signature: the same parameters in the same order with the same defaults, tle's own (backend=, fallback=,
residual=, ...) keyword-only after them. A user swaps the import and nothing else."""
import inspect

import pytest
import torch
import torch.nn.functional as F

import tle.ops

# torch functions implemented in C, whose signatures inspect cannot read: torch's documented ones
DOCUMENTED = {
    "gelu": "(input, approximate='none')",
    "scaled_dot_product_attention": "(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, "
                                    "enable_gqa=False)",
}


def _torch_params(name):
    if name in DOCUMENTED:
        ns = {}
        exec(f"def documented{DOCUMENTED[name]}: pass", ns)
        return _params(inspect.signature(ns["documented"]))
    return _params(inspect.signature(getattr(F, name)))


def _params(sig, skip_self=False):
    """[(name, default)] of the parameters a positional or keyword call can give; the rest keyword-only."""
    out, kw_only = [], []
    for p in sig.parameters.values():
        if skip_self and p.name == "self":
            continue
        default = p.default if p.default is not inspect.Parameter.empty else "<required>"
        (kw_only if p.kind == p.KEYWORD_ONLY else out).append((p.name, default))
    return out, kw_only


FUNCTIONS = sorted(n for n in dir(tle.ops) if not n.startswith("_") and hasattr(F, n)
                   and inspect.isfunction(getattr(tle.ops, n)))
MODULES = sorted(n for n in dir(tle.ops) if not n.startswith("_") and isinstance(getattr(tle.ops, n), type)
                 and issubclass(getattr(tle.ops, n), torch.nn.Module) and hasattr(torch.nn, n))


def test_the_shared_names_are_found():
    assert {"rms_norm", "layer_norm", "softmax", "silu", "gelu", "binary_cross_entropy_with_logits",
            "scaled_dot_product_attention"} <= set(FUNCTIONS)
    assert {"RMSNorm", "LayerNorm", "Softmax", "SiLU", "GELU", "BCEWithLogitsLoss", "EmbeddingBag"} <= set(MODULES)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_take_torchs_signature(name):
    theirs, _ = _torch_params(name)
    ours, ours_kw = _params(inspect.signature(getattr(tle.ops, name)))
    assert ours == theirs, f"tle.ops.{name}{ours} against torch's {theirs}"
    assert {"backend", "fallback"} <= {n for n, _ in ours_kw}


@pytest.mark.parametrize("name", MODULES)
def test_modules_take_torchs_constructor(name):
    theirs, _ = _params(inspect.signature(getattr(torch.nn, name).__init__), skip_self=True)
    ours, ours_kw = _params(inspect.signature(getattr(tle.ops, name).__init__), skip_self=True)
    assert ours == theirs, f"tle.ops.{name}{ours} against torch's {theirs}"
    assert {"backend", "fallback"} <= {n for n, _ in ours_kw}
