"""Every operator of tle.ops on CPU, forward and backward, against its reference evaluated in fp64: the torch
backend (and gradcheck of it in fp64), the Triton kernels in Triton's interpreter, the TileLang kernels in the
interpreter of TileLang programs; opcheck of every custom op the operator calls; torch.compile of a model
built from them; the runtime surface (backend choice, fallback, errors)."""
import warnings

import pytest
import torch

import tle
import tle.ops
from op_cases import OPS, as_tuple, assert_matches_reference, custom_op_calls, opcheck_calls
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter
from tle.ops import OPERATORS

CPU_DTYPES = [torch.float32, torch.float16]     # Triton's interpreter has no bf16 arithmetic
GRADCHECK_MAX_ELEMENTS = 4096


def samples(name, dtype):
    torch.manual_seed(0)
    return OPERATORS[name].samples("cpu", dtype)


@pytest.mark.parametrize("name", OPS)
def test_torch_backend_gradcheck_fp64(name):
    op = OPERATORS[name]
    if op.forward_only:
        pytest.skip(f"{name} is forward-only: {op.forward_only}")
    checked = 0
    for sample in samples(name, torch.float64):
        positions = op.grad_keys(sample)
        if not positions or any(a.numel() == 0 for a in sample.args if isinstance(a, torch.Tensor)):
            continue
        if sum(sample.get(p).numel() for p in positions) > GRADCHECK_MAX_ELEMENTS:
            continue                  # the numerical Jacobian has (inputs x outputs) entries
        checked += 1
        leaves = tuple(sample.get(p).detach().requires_grad_() for p in positions)

        def f(*xs):
            call = sample.replaced(dict(zip(positions, xs)))
            return tuple(o for o in as_tuple(op.fn(*call.args, backend="torch", **call.kwargs))
                         if o.is_floating_point())

        assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-5), sample.label
    assert checked, f"no sample of {name} is small enough for gradcheck"


@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_torch_backend(name, dtype):
    for sample in samples(name, dtype):
        assert_matches_reference(OPERATORS[name], sample, "torch")


@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_triton_kernels_in_interpreter(name, dtype):
    if dtype not in OPERATORS[name].dtypes:
        pytest.skip(f"{name}'s kernels do not take {dtype}")
    for sample in samples(name, dtype):
        assert_matches_reference(OPERATORS[name], sample, "triton")


@needs_tilelang
@pytest.mark.parametrize("name", OPS)
def test_tilelang_kernels_in_interpreter(name):
    dtype = torch.float32 if torch.float32 in OPERATORS[name].dtypes else torch.float16
    with tilelang_through_interpreter():
        for sample in samples(name, dtype):
            assert_matches_reference(OPERATORS[name], sample, "tilelang")


# operators whose tiles and warps follow the problem (head dim, sequence length, heads per group): each
# sample's TileLang kernels are also built for sm_90a, as TileLang refuses at build time warp partitions that
# its interpreter runs
BUILT_PER_SAMPLE = ("flash_attention", "scaled_dot_product_attention", "silu_attention", "sparse_mla")


@needs_tilelang
@pytest.mark.slow
@pytest.mark.parametrize("name", BUILT_PER_SAMPLE)
def test_tilelang_kernels_of_every_sample_build_for_sm90a(name):
    with tilelang_through_interpreter(compile_cuda=True):
        for sample in samples(name, torch.float16):
            assert_matches_reference(OPERATORS[name], sample, "tilelang")


@pytest.mark.parametrize("name", OPS)
def test_opcheck(name):
    """torch.library.opcheck of every tle:: op the operator calls, forward and backward (torch backend)."""
    calls = custom_op_calls(OPERATORS[name], samples(name, torch.float32), "torch")
    assert calls, f"{name} called no tle:: custom op"
    opcheck_calls(calls)


# -- torch.compile -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_torch_compile_fullgraph_matches_eager(backend):
    """A model of the operators compiles into one graph (fullgraph) and gives the eager results and gradients."""
    from op_model import Model
    torch.manual_seed(0)
    model = Model(48, backend)
    x = torch.randn(2, 5, 48, requires_grad=True)
    target = torch.rand(2, 5, 48)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    eager_out, compiled_out = model(x, target), compiled(x, target)
    for e, c in zip(eager_out, compiled_out):
        torch.testing.assert_close(c, e)
    params = [x] + [p for p in model.parameters()]
    g_eager = torch.autograd.grad(eager_out[1], params)
    g_comp = torch.autograd.grad(compiled_out[1], params)
    for e, c in zip(g_eager, g_comp):
        torch.testing.assert_close(c, e)


# -- the runtime surface -------------------------------------------------------------------------------------
def test_unknown_backend_lists_the_operator_backends():
    with pytest.raises(tle.BackendUnavailable, match=r"tle.ops.rms_norm: unknown backend 'cuda'.*torch, triton, "
                                                     r"tilelang"):
        tle.ops.rms_norm(torch.randn(2, 4), 4, backend="cuda")


def test_unusable_backend_is_an_error_unless_fallback_is_allowed(monkeypatch):
    x = torch.randn(3, 8)
    with pytest.raises(tle.BackendUnavailable, match="backend 'tilelang' cannot run on cpu.*fallback='torch'"):
        tle.ops.rms_norm(x, 8, backend="tilelang")
    import tle.oplib.backend as b
    b._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y1 = tle.ops.rms_norm(x, 8, backend="tilelang", fallback="torch")
        monkeypatch.setenv("TLE_FALLBACK", "torch")
        y2 = tle.ops.rms_norm(x, 8, backend="tilelang")
    said = [str(w.message) for w in caught if "running the torch reference" in str(w.message)]
    assert len(said) == 1, said                     # once per operator, backend and reason
    torch.testing.assert_close(y1, tle.ops.rms_norm(x, 8, backend="torch"))
    torch.testing.assert_close(y2, y1)
    with pytest.raises(ValueError, match="fallback must be None or 'torch'"):
        tle.ops.rms_norm(x, 8, backend="torch", fallback="triton")


def test_backend_order_call_module_env(monkeypatch):
    x = torch.randn(3, 8)
    monkeypatch.setenv("TLE_BACKEND", "tilelang")
    with pytest.raises(tle.BackendUnavailable, match="'tilelang'"):
        tle.ops.rms_norm(x, 8)                                    # the environment's choice
    tle.ops.RMSNorm(8, backend="torch")(x)                        # the module's beats it
    tle.ops.rms_norm(x, 8, backend="torch")                       # the call's beats it
    monkeypatch.delenv("TLE_BACKEND")
    with pytest.raises(tle.BackendUnavailable, match="'tilelang'"):
        tle.ops.RMSNorm(8, backend="tilelang")(x)
    with pytest.raises(tle.BackendUnavailable, match="'tilelang'"):   # the call's beats the module's
        tle.ops.rms_norm(x, 8, tle.ops.RMSNorm(8, backend="torch").weight, backend="tilelang")


def _sdpa_inputs(h=4, h_kv=4, l=6, s=7, e=16):
    return (torch.randn(2, h, l, e), torch.randn(2, h_kv, s, e), torch.randn(2, h_kv, s, e))


@pytest.mark.parametrize("call, match", [
    (lambda q, k, v: tle.ops.scaled_dot_product_attention(q, k[:, :2], v[:, :2], backend="torch"),
     "pass enable_gqa=True"),
    (lambda q, k, v: tle.ops.scaled_dot_product_attention(q, k[:, :3], v[:, :3], enable_gqa=True, backend="torch"),
     "does not divide query's 4 heads"),
    (lambda q, k, v: tle.ops.scaled_dot_product_attention(q, k, v, torch.ones(6, 7, dtype=torch.bool),
                                                          is_causal=True, backend="torch"),
     "'attn_mask' and is_causal=True go separately"),
    (lambda q, k, v: tle.ops.scaled_dot_product_attention(q, k, v, torch.zeros(6, 7, requires_grad=True),
                                                          backend="torch"), "'attn_mask' requires grad"),
    (lambda q, k, v: tle.ops.scaled_dot_product_attention(q, k, v, torch.ones(3, 6, 7, dtype=torch.bool),
                                                          backend="torch"), r"does not broadcast to \[2, 4, 6, 7\]"),
    (lambda q, k, v: tle.ops.scaled_dot_product_attention(q, k, v[..., :8], backend="torch"),
     "'value' has head dim 8"),
    (lambda q, k, v: tle.ops.scaled_dot_product_attention(q, k, v, dropout_p=1.5, backend="torch"),
     "'dropout_p' is the dropout probability"),
    (lambda q, k, v: tle.ops.scaled_dot_product_attention(q, k, v, torch.ones(6, 7, dtype=torch.int32),
                                                          backend="torch"), "'attn_mask' has dtype int32"),
    (lambda q, k, v: tle.ops.scaled_dot_product_attention(q[0], k, v, backend="torch"), "'key' has rank 4"),
    (lambda q, k, v: tle.ops.scaled_dot_product_attention(q, k, v, backend="triton"), "'query' has dtype float32"),
])
def test_scaled_dot_product_attention_bad_inputs(call, match):
    with pytest.raises((tle.LaunchError, tle.BackendUnavailable), match=match):
        call(*_sdpa_inputs())


def test_scaled_dot_product_attention_is_torchs():
    """Where torch's SDPA draws no random bits, the same call gives torch's result (fp64, the torch backend):
    top-left causal with L != S, GQA, bool and float masks broadcast from [L, S], one head [B, L, E]."""
    torch.manual_seed(0)
    q, k, v = (t.double() for t in _sdpa_inputs(4, 2, 9, 13))
    mask = torch.rand(9, 13) > 0.4
    for kw in (dict(is_causal=True), dict(attn_mask=mask), dict(attn_mask=torch.randn(9, 13, dtype=torch.float64)),
               dict(is_causal=True, scale=0.7)):
        got = tle.ops.scaled_dot_product_attention(q, k, v, enable_gqa=True, backend="torch", **kw)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
        torch.testing.assert_close(got, want)
    got = tle.ops.scaled_dot_product_attention(q[:, 0], k[:, 0], v[:, 0], is_causal=True, backend="torch")
    torch.testing.assert_close(got, torch.nn.functional.scaled_dot_product_attention(q[:, 0], k[:, 0], v[:, 0],
                                                                                      is_causal=True))


def test_scaled_dot_product_attention_dropout_follows_the_generator():
    """seed=None draws from torch's generator: the same torch.manual_seed gives the same output, another seed
    another; the kept share is about 1 - p."""
    q, k, v = (t.double() for t in _sdpa_inputs(2, 2, 64, 64))
    outs = []
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        outs.append(tle.ops.scaled_dot_product_attention(q, k, v, dropout_p=0.5, backend="torch"))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])
    ones = tle.ops.scaled_dot_product_attention(q, k, torch.ones_like(v), dropout_p=0.5, seed=3, backend="torch")
    assert abs(ones.mean().item() - 1.0) < 0.05           # E[kept / (1 - p)] = 1


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_scaled_dot_product_attention_compiles_fullgraph(backend):
    """With a mask and with dropout (an explicit seed: seed=None draws it in Python, outside the op), one graph,
    the eager results and gradients."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, h, 7, 16, dtype=torch.float16, requires_grad=True) for h in (4, 2, 2))
    mask = torch.rand(7, 7) > 0.3
    for kw in (dict(attn_mask=mask), dict(dropout_p=0.25, seed=11, is_causal=True)):
        def f(q, k, v, kw=kw):
            return tle.ops.scaled_dot_product_attention(q, k, v, enable_gqa=True, backend=backend, **kw)

        eager, comp = f(q, k, v), torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
        torch.testing.assert_close(comp, eager)
        do = torch.randn_like(eager)
        for a, b in zip(torch.autograd.grad(comp, (q, k, v), do), torch.autograd.grad(eager, (q, k, v), do)):
            torch.testing.assert_close(a, b)


def test_flash_attention_window_and_softcap_checks():
    q, k, v = torch.randn(1, 5, 2, 16), torch.randn(1, 5, 2, 16), torch.randn(1, 5, 2, 16)
    with pytest.raises(tle.LaunchError, match="'window_size' is"):
        tle.ops.flash_attention(q, k, v, window_size=(-2, 0), backend="torch")
    with pytest.raises(tle.LaunchError, match="with causal=True"):
        tle.ops.flash_attention(q, k, v, True, window_size=(4, 2), backend="torch")
    with pytest.raises(tle.LaunchError, match="'softcap' is"):
        tle.ops.flash_attention(q, k, v, softcap=-1.0, backend="torch")


@pytest.mark.parametrize("bad, match", [
    (lambda: tle.ops.rms_norm(torch.arange(8).reshape(2, 4), 4, backend="torch"), "'input' has dtype int64"),
    (lambda: tle.ops.rms_norm(torch.randn(2, 4), 4, torch.randn(5), backend="torch"),
     r"'weight' has shape \[5\]; expected normalized_shape \[4\]"),
    (lambda: tle.ops.rms_norm(torch.randn(2, 4), 4, residual=torch.randn(2, 5), backend="torch"),
     "'residual' has shape"),
    (lambda: tle.ops.rms_norm(torch.randn(2, 4), 4, residual=torch.randn(2, 4).half(), backend="torch"),
     "'residual' has dtype"),
    (lambda: tle.ops.rms_norm(torch.randn(2, 4).double(), 4, backend="triton"),
     "'input' has dtype float64, which backend"),
    (lambda: tle.ops.rms_norm("x", 4, backend="torch"), "'input' must be a torch.Tensor"),
    (lambda: tle.ops.rms_norm(torch.tensor(1.0), 4, backend="torch"), "'input' has rank 0"),
    (lambda: tle.ops.rms_norm(torch.randn(2, 4), 5, backend="torch"),
     r"'normalized_shape' is \[5\], but 'input' has shape \[2, 4\]: its last 1 dimension must be that"),
    (lambda: tle.ops.rms_norm(torch.randn(2, 4), (2, 3), backend="torch"), "its last 2 dimensions must be that"),
    (lambda: tle.ops.rms_norm(torch.randn(2, 4), "4", backend="torch"), "'normalized_shape' is '4'; expected an int or a non-empty"),
    (lambda: tle.ops.rms_norm(torch.randn(2, 4), (), backend="torch"), "non-empty sequence of ints"),
    (lambda: tle.ops.rms_norm(torch.randn(2, 4), torch.ones(4), backend="torch"),
     r"'normalized_shape' is a tensor; the arguments are torch's, \(input, normalized_shape, weight, ...\)"),
])
def test_rms_norm_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm", "l2_norm"])
def test_norms_refuse_tensors_past_int32_offsets_on_the_kernel_backends(name):
    x = torch.zeros(1, 1).expand(2 ** 16, 2 ** 15)           # 2^31 elements, no memory
    shape = () if name == "l2_norm" else (2 ** 15,)           # torch's normalized_shape where torch has one
    arg = "x" if name == "l2_norm" else "input"
    with pytest.raises(tle.LaunchError, match=f"'{arg}' has 2147483648 elements; backend 'triton'"):
        getattr(tle.ops, name)(x, *shape, backend="triton")


def test_non_contiguous_inputs_are_handled():
    x = torch.randn(8, 6, 16).transpose(0, 1)          # rows not evenly strided: copied
    w = torch.rand(16) + 0.5
    for backend in ("torch", "triton"):
        torch.testing.assert_close(tle.ops.rms_norm(x, 16, w, 1e-6, backend=backend),
                                   OPERATORS["rms_norm"].reference(x, 16, w, 1e-6), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_flash_attention_compiles_fullgraph(backend, packed):
    """flash_attention in one graph (packed: max_seqlen given, so nothing reads cu_seqlens on the host), with
    the eager results and gradients."""
    torch.manual_seed(0)
    if packed:
        q, k, v = (torch.randn(9, h, 16, dtype=torch.float16, requires_grad=True) for h in (4, 2, 2))
        kw = dict(cu_seqlens_q=torch.tensor([0, 4, 9], dtype=torch.int32),
                  cu_seqlens_k=torch.tensor([0, 6, 9], dtype=torch.int32), max_seqlen_q=5, max_seqlen_k=6)
    else:
        q, k, v = (torch.randn(2, 7, h, 16, dtype=torch.float16, requires_grad=True) for h in (4, 2, 2))
        kw = {}

    def f(q, k, v):
        return tle.ops.flash_attention(q, k, v, True, backend=backend, **kw)

    eager, comp = f(q, k, v), torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    torch.testing.assert_close(comp, eager)
    do = torch.randn_like(eager)
    for a, b in zip(torch.autograd.grad(comp, (q, k, v), do), torch.autograd.grad(eager, (q, k, v), do)):
        torch.testing.assert_close(a, b)


def test_flash_attention_folded_forward_in_triton_interpreter(monkeypatch):
    """The forward's FOLD form (the mask as the product's starting value, the scale in exp2's argument; TileLang's
    launch) is one kernel text: on Triton's interpreter too it matches the reference on every sample, full and
    causal (the samples of a scale it cannot take, or with a soft cap, keep the scaled form)."""
    import tle.kernels.flash_attention as fa

    def folded(head_dim, max_seqlen_q, backend, *, sm90, scale=1.0, scores=fa.CAUSAL):
        kernel, cfg = fa.flash_attention_fwd_kernel, fa.fwd_config(head_dim, max_seqlen_q, backend)
        return kernel, dict(cfg, FOLD=0 < scale < 1e4 and scores.softcap == 0 and scores.bias is None)
    monkeypatch.setattr(fa, "fwd_kernel", folded)
    for sample in samples("flash_attention", torch.float16):
        assert_matches_reference(OPERATORS["flash_attention"], sample, "triton")


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, v: tle.ops.flash_attention(q, k.repeat(1, 1, 2, 1)[:, :, :3], v.repeat(1, 1, 2, 1)[:, :, :3],
                                             backend="torch"),
     "'k' has 3 heads, which does not divide q's 4 heads"),
    (lambda q, k, v: tle.ops.flash_attention(q.transpose(1, 2), k[:, :2].transpose(1, 2), v[:, :2].transpose(1, 2),
                                             backend="torch"),
     r"'k' has 2 heads, which does not divide q's 5 heads. If they are laid out \[B, H, S, D\] \(torch's "
     r"scaled_dot_product_attention layout, in which they fit: 4 query heads over 2 key heads\): this operator "
     r"takes \[B, S, H, D\]"),
    (lambda q, k, v: tle.ops.flash_attention(q, k[..., :8], v[..., :8], backend="torch"), "'k' has head dim 8"),
    (lambda q, k, v: tle.ops.flash_attention(q, k, v.float(), backend="torch"), "'v' has dtype float32"),
    (lambda q, k, v: tle.ops.flash_attention(q[0], k[0], v[0], backend="torch"), r"'q' has shape \(5, 4, 16\)"),
    (lambda q, k, v: tle.ops.flash_attention(q, k, v, causal=1, backend="torch"), "'causal' must be a bool"),
    (lambda q, k, v: tle.ops.flash_attention(q.double(), k.double(), v.double(), backend="triton"),
     "'q' has dtype float64, which backend 'triton' does not take"),
    (lambda q, k, v: tle.ops.flash_attention(q.repeat(1, 1, 1, 3), k.repeat(1, 1, 1, 3), v.repeat(1, 1, 1, 3),
                                             backend="triton"), "'q' has head dim 48; backend 'triton' takes"),
    (lambda q, k, v: tle.ops.flash_attention(q[0], k[0], v[0], cu_seqlens_q=torch.tensor([0, 5], dtype=torch.int32),
                                             backend="torch"), "'cu_seqlens_q' and 'cu_seqlens_k' go together"),
    (lambda q, k, v: tle.ops.flash_attention(q[0], k[0], v[0], cu_seqlens_q=torch.tensor([0, 4], dtype=torch.int32),
                                             cu_seqlens_k=torch.tensor([0, 5], dtype=torch.int32), backend="torch"),
     "'cu_seqlens_q' must start at 0, never decrease and end at the packed length 5"),
    (lambda q, k, v: tle.ops.flash_attention(q[0], k[0], v[0], cu_seqlens_q=torch.tensor([0, 5], dtype=torch.int32),
                                             cu_seqlens_k=torch.tensor([0, 5]), backend="torch"),
     "'cu_seqlens_k' has dtype int64"),
    (lambda q, k, v: tle.ops.flash_attention(q[0], k[0], v[0], cu_seqlens_q=torch.tensor([0, 5], dtype=torch.int32),
                                             cu_seqlens_k=torch.tensor([0, 5], dtype=torch.int32), max_seqlen_q=3,
                                             backend="torch"), "'max_seqlen_q' is 3; expected an int of at least 5"),
    (lambda q, k, v: tle.ops.flash_attention(q, k, v, max_seqlen_q=5, backend="torch"),
     "'max_seqlen_q' / 'max_seqlen_k' go with packed inputs"),
    (lambda q, k, v: tle.ops.flash_attention(q.expand(16384, 5, 4, 16), k.expand(16384, 5, 2, 16),
                                             v.expand(16384, 5, 2, 16), backend="triton"),
     "16384 sequences of 4 heads; backend 'triton' launches a program per"),
])
def test_flash_attention_bad_inputs(bad, match):
    q, k, v = (torch.randn(1, 5, h, 16, dtype=torch.float16) for h in (4, 2, 2))
    with pytest.raises(tle.LaunchError, match=match):
        bad(q, k, v)


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, v: tle.ops.silu_attention(q, k, v, attn_bias=torch.randn(1, 4, 5, 4), backend="torch"),
     r"'attn_bias' has shape \(1, 4, 5, 4\); expected \[1, 4, 5, 5\]"),
    (lambda q, k, v: tle.ops.silu_attention(q, k, v, attn_bias=torch.randn(1, 4, 5, 5).double(), backend="torch"),
     "'attn_bias' has dtype float64"),
    (lambda q, k, v: tle.ops.silu_attention(q, k[:, :3], v[:, :3], backend="torch"), "expected the rows of q"),
    (lambda q, k, v: tle.ops.silu_attention(q, k, v, max_seqlen=5, backend="torch"),
     "'max_seqlen' goes with packed inputs"),
    (lambda q, k, v: tle.ops.silu_attention(q[0], k[0], v[0], cu_seqlens=torch.tensor([0, 2, 4], dtype=torch.int32),
                                            backend="torch"), "'cu_seqlens' must start at 0"),
    (lambda q, k, v: tle.ops.silu_attention(q.expand(16384, 5, 4, 16), k.expand(16384, 5, 2, 16),
                                            v.expand(16384, 5, 2, 16), backend="triton"),
     "16384 sequences of 4 heads; backend 'triton' launches a program per"),
])
def test_silu_attention_bad_inputs(bad, match):
    q, k, v = (torch.randn(1, 5, h, 16, dtype=torch.float16) for h in (4, 2, 2))
    with pytest.raises(tle.LaunchError, match=match):
        bad(q, k, v)


@pytest.mark.parametrize("bad, match", [
    (lambda q, kv, i: tle.ops.sparse_mla(q, kv[..., :40], i, d_v=32, backend="torch"),
     r"'kv' has shape \(1, 8, 1, 40\); expected \[1, S_kv, VG, 48\]"),
    (lambda q, kv, i: tle.ops.sparse_mla(q, kv.expand(1, 8, 3, 48), i, d_v=32, backend="torch"),
     "'kv' has 3 groups"),
    (lambda q, kv, i: tle.ops.sparse_mla(q, kv, i.long(), d_v=32, backend="torch"), "'indices' has dtype int64"),
    (lambda q, kv, i: tle.ops.sparse_mla(q, kv, i[:, :3], d_v=32, backend="torch"),
     r"'indices' has shape \(1, 3, 1, 8\); expected \[1, 5, 1, topk\]"),
    (lambda q, kv, i: tle.ops.sparse_mla(q, kv.float(), i, d_v=32, backend="torch"), "'kv' has dtype float32"),
    (lambda q, kv, i: tle.ops.sparse_mla(q, kv, i, d_v=48, backend="torch"), r"'d_v' must be an int in \(0, 48\)"),
    (lambda q, kv, i: tle.ops.sparse_mla(q, kv, i, sm_scale=float("nan"), d_v=32, backend="torch"),
     "'sm_scale' must be a finite float"),
    (lambda q, kv, i: tle.ops.sparse_mla(q[0], kv, i, d_v=32, backend="torch"), "'q' has rank 3"),
    (lambda q, kv, i: tle.ops.sparse_mla(q.double(), kv.double(), i, d_v=32, backend="triton"),
     "'q' has dtype float64, which backend 'triton' does not take"),
    (lambda q, kv, i: tle.ops.sparse_mla(q[:, :1].expand(1, 65536, 4, 48), kv, i[:, :1].expand(1, 65536, 1, 8), d_v=32,
                                         backend="triton"), "launches a program per query and batch"),
    (lambda q, kv, i: tle.ops.sparse_mla(q, kv, i, d_v=24, backend="triton"),
     "backend 'triton' takes 'd_v' and DT - d_v powers of two of at least 16; got d_v=24"),
])
def test_sparse_mla_bad_inputs(bad, match):
    q, kv = torch.randn(1, 5, 4, 48, dtype=torch.float16), torch.randn(1, 8, 1, 48, dtype=torch.float16)
    indices = torch.zeros(1, 5, 1, 8, dtype=torch.int32)
    with pytest.raises(tle.LaunchError, match=match):
        bad(q, kv, indices)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_embedding_bag_compiles_fullgraph(backend):
    """CPU tensors: the eager call checks offsets and indices on the host (.item()); a compiled graph cannot
    branch on data, so the checks stay out of it (as on CUDA) and fullgraph holds."""
    torch.manual_seed(0)
    w = torch.randn(20, 8, requires_grad=True)
    idx, off = torch.randint(0, 20, (12,)), torch.tensor([0, 3, 7, 7])
    f = lambda w: tle.ops.embedding_bag(idx, w, off, padding_idx=2, backend=backend)   # noqa: E731
    eager, comp = f(w), torch.compile(f, fullgraph=True, backend="aot_eager")(w)
    torch.testing.assert_close(comp, eager)
    g = torch.randn_like(eager)
    torch.testing.assert_close(torch.autograd.grad(comp, w, g)[0], torch.autograd.grad(eager, w, g)[0])



@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_sparse_mla_compiles_fullgraph(backend):
    """sparse_mla in one graph, with the eager results and gradients."""
    torch.manual_seed(0)
    q = torch.randn(1, 9, 16, 48, dtype=torch.float16, requires_grad=True)
    kv = torch.randn(1, 12, 1, 48, dtype=torch.float16, requires_grad=True)
    indices = torch.randint(-1, 13, (1, 9, 1, 8), dtype=torch.int32)

    def f(q, kv):
        return tle.ops.sparse_mla(q, kv, indices, d_v=32, backend=backend)

    eager, comp = f(q, kv), torch.compile(f, fullgraph=True, backend="aot_eager")(q, kv)
    torch.testing.assert_close(comp, eager)
    do = torch.randn_like(eager)
    for a, b in zip(torch.autograd.grad(comp, (q, kv), do), torch.autograd.grad(eager, (q, kv), do)):
        torch.testing.assert_close(a, b)
