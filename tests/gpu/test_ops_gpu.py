"""Every operator of tle.ops on the GPU, on both kernel backends, forward and backward, in fp32, fp16 and
bf16: its small odd-shaped samples against the fp64 reference, its headline benchmark shape against the
fp32 reference; opcheck of its custom ops with the kernels; torch.compile (inductor) of a model of them."""
import pytest
import torch

import tle.ops
from op_cases import OPS, assert_matches_reference, custom_op_calls, opcheck_calls
from tle.ops import OPERATORS

BACKENDS = ("triton", "tilelang")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def supported(name, dtype):
    if dtype not in OPERATORS[name].dtypes:
        pytest.skip(f"{name} does not take {dtype}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_samples(name, dtype, backend):
    supported(name, dtype)
    if name in ("flash_attention", "scaled_dot_product_attention", "silu_attention", "sparse_mla"):
        pytest.skip("test_attention_gpu.py runs each sample as a test of its own")
    torch.manual_seed(0)
    # TileLang compiles per shape: every sample in fp32 (the first dtype the kernels take), the first three in
    # the others (odd shapes all)
    samples = OPERATORS[name].samples("cuda", dtype)
    for sample in samples if dtype == OPERATORS[name].dtypes[0] else samples[:3]:
        assert_matches_reference(OPERATORS[name], sample, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("name", OPS)
def test_headline_shape(name, dtype, backend):
    supported(name, dtype)
    if name == "sparse_mla":
        pytest.skip("its headline shape's unchunked fp32 reference with autograd needs about 65 GB; "
                    "test_kernels_gpu checks both kernels at the 64-head benchmark shape against the chunked one")
    op = OPERATORS[name]
    if op.bench is None:
        pytest.skip(f"{name} has no benchmark shape")
    torch.manual_seed(0)
    sample = op.bench.make(op.bench.shapes[0], dtype, "cuda")
    assert_matches_reference(op, sample, backend, f"at {op.bench.shapes[0]}", ref_dtype=torch.float32)
    torch.cuda.empty_cache()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", OPS)
def test_opcheck_with_kernels(name, backend):
    torch.manual_seed(0)
    opcheck_calls(custom_op_calls(OPERATORS[name], OPERATORS[name].samples("cuda", torch.float16)[:3], backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile_inductor(backend):
    from op_model import Model
    torch.manual_seed(0)
    model = Model(64, backend).cuda().to(torch.bfloat16)
    x = torch.randn(4, 33, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True)
    eager, comp = model(x), compiled(x)
    torch.testing.assert_close(comp.float(), eager.float(), atol=2e-2, rtol=2e-2)
    ge = torch.autograd.grad(eager.float().sum(), x)[0]
    gc = torch.autograd.grad(comp.float().sum(), x)[0]
    torch.testing.assert_close(gc.float(), ge.float(), atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name, rows, cols, residual", [
    ("rms_norm", 8, 16384, True), ("rms_norm", 8, 32768, False), ("rms_norm", 4, 65536, True),
    ("layer_norm", 8, 16384, False), ("layer_norm", 4, 65536, False), ("l2_norm", 4, 65536, False)])
def test_wide_rows(name, rows, cols, residual, backend):
    """Rows up to the 65536 columns the norms take, forward and backward in bf16: the staged rows of TileLang's
    backward loop must fit in shared memory (fewer stages, else the plain loop), Triton's tiles in registers."""
    op = OPERATORS[name]
    torch.manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    args = (x,) if name == "l2_norm" else (x, (cols,), torch.rand(cols, device="cuda", dtype=torch.bfloat16) + 0.5)
    kwargs = {"residual": torch.randn_like(x)} if residual else {}
    from tle.oplib import Sample
    assert_matches_reference(op, Sample(args, kwargs, label=f"{rows}x{cols}"), backend, ref_dtype=torch.float32)
