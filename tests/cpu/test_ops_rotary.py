"""tle.ops.apply_rotary_pos_emb on CPU against Hugging Face's formula in fp64: both layouts (unsqueeze_dim 1
and 2), GQA, the interleaved form, partial rotary, position_ids into a table, cos [S, R], forward and
backward on the torch backend, the Triton kernel in Triton's interpreter and the TileLang kernel through the
interpreter of TileLang programs; bad inputs."""
import contextlib

import pytest
import torch

import tle
import tle.ops
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter
from tle.kernels import rotary


def check(backend, dtype=torch.float32):
    for s in rotary.samples("cpu", dtype):
        args64 = [a.double().requires_grad_() if i < 2 else
                  (a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a)
                  for i, a in enumerate(s.args)]
        ref = rotary.reference(*args64, **s.kwargs)
        args = [a.clone().requires_grad_() if i < 2 else a for i, a in enumerate(s.args)]
        out = tle.ops.apply_rotary_pos_emb(*args, backend=backend, **s.kwargs)
        dys = [torch.randn(r.shape, dtype=torch.float64) for r in ref]
        torch.autograd.backward(ref, dys)
        torch.autograd.backward(out, [d.to(dtype) for d in dys])
        tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=2e-2)
        for name, o, r, a, a64 in zip(("q", "k"), out, ref, args, args64):
            assert o.dtype == dtype and o.shape == r.shape, (s.label, name)
            torch.testing.assert_close(o.double(), r.detach(), **tol, msg=lambda m: f"{s.label} {name}: {m}")
            torch.testing.assert_close(a.grad.double(), a64.grad, **tol, msg=lambda m: f"{s.label} d{name}: {m}")


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_matches_the_formula(backend):
    check(backend)


def test_triton_bf16():
    check("triton", torch.bfloat16)


@needs_tilelang
def test_tilelang_through_interpreter():
    with tilelang_through_interpreter():
        check("tilelang")


@pytest.mark.parametrize("backend", ["triton", pytest.param("tilelang", marks=needs_tilelang)])
def test_tiles_of_a_few_rows(backend, monkeypatch):
    """Tiles of 4 rows: a tile spans heads, positions and batch entries in either row order, and the last tile
    of some tensors (15 rows, 330 rows) is masked."""
    monkeypatch.setattr(rotary, "TILES", dict.fromkeys(rotary.TILES, (4, 1)))
    if backend == "tilelang":
        with tilelang_through_interpreter():
            check(backend)
    else:
        check(backend)


def _strided(leaves):
    """From leaves [B, S, H, D] and [B, S, (H + Hk) * D]: q and k as Hugging Face's attention makes them,
    [B, H, S, D] views of [B, S, H, D] projections (rows evenly spaced in memory, heads inner); the same sliced
    out of one fused projection (rows not evenly spaced); one of each."""
    q, k, qk = leaves
    h, hk = q.shape[2], k.shape[2]
    fq = qk[..., :h * 16].unflatten(-1, (h, 16)).transpose(1, 2)
    fk = qk[..., h * 16:].unflatten(-1, (hk, 16)).transpose(1, 2)
    return [(q.transpose(1, 2), k.transpose(1, 2)), (fq, fk), (q.transpose(1, 2), fk)]


@pytest.mark.parametrize("backend", ["torch", "triton", pytest.param("tilelang", marks=needs_tilelang)])
def test_strided_inputs_are_read_in_place(backend):
    """The outputs (and gradients) are laid out as q's rows lie: [B, H, S, D] views of [B, S, H, D] memory."""
    g = torch.Generator().manual_seed(1)
    bases = [torch.randn(*shape, generator=g) for shape in ((2, 5, 3, 16), (2, 5, 2, 16), (2, 5, 80))]
    cos, sin = rotary._angles(2, 5, 16, "cpu", torch.float32, g)
    for i in range(3):
        leaves = [t.clone().requires_grad_() for t in bases]
        leaves64 = [t.double().requires_grad_() for t in bases]
        (q, k), (q64, k64) = _strided(leaves)[i], _strided(leaves64)[i]
        want = rotary.reference(q64, k64, cos.double(), sin.double())
        dys = [torch.randn(w.shape, generator=g, dtype=torch.float64) for w in want]
        with tilelang_through_interpreter() if backend == "tilelang" else contextlib.nullcontext():
            got = tle.ops.apply_rotary_pos_emb(q, k, cos, sin, backend=backend)
            torch.autograd.backward(got, [d.float() for d in dys])
        torch.autograd.backward(want, dys)
        for o, w in zip(got, want):
            assert o.transpose(1, 2).is_contiguous()
            torch.testing.assert_close(o.double(), w, atol=1e-5, rtol=1e-5)
        for x, x64 in zip(leaves, leaves64):
            if x64.grad is not None:
                torch.testing.assert_close(x.grad.double(), x64.grad, atol=1e-5, rtol=1e-5)


Q, K = torch.randn(1, 2, 4, 8), torch.randn(1, 1, 4, 8)
C, S = torch.randn(1, 4, 8), torch.randn(1, 4, 8)
rope = tle.ops.apply_rotary_pos_emb


@pytest.mark.parametrize("bad, match", [
    (lambda: rope(Q[0], K, C, S), "'q' has rank 3"),
    (lambda: rope(Q, K[..., :4], C, S), r"'k' has shape \(1, 1, 4, 4\); expected the batch, sequence and head size"),
    (lambda: rope(Q, K, C, S, unsqueeze_dim=3), "'unsqueeze_dim' must be 1"),
    (lambda: rope(Q, K, C[..., :3], S[..., :3]), "'cos' has 3 features; expected an even number"),
    (lambda: rope(Q, K, C, S[..., :6]), r"'sin' has shape \(1, 4, 6\); expected \(1, 4, 8\)"),
    (lambda: rope(Q, K, C[:, :3], S[:, :3]), r"'cos' has shape \(1, 3, 8\); expected \[1, 4, R\]"),
    (lambda: rope(Q, K, C, S, torch.arange(4)), "with position_ids it is a table"),
    (lambda: rope(Q, K, C[0], S[0], torch.arange(3)), r"'position_ids' has shape \(3,\)"),
    (lambda: rope(Q, K, C, S, torch.arange(4.0)), "'position_ids' has dtype float32"),
    (lambda: rope(Q, K, C.clone().requires_grad_(), S), "'cos' or 'sin' requires grad"),
    (lambda: rope(Q.double(), K.double(), C.double(), S.double(), backend="triton"), "'q' has dtype float64"),
])
def test_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()
