"""The FlagTree forms compiled and run on CUDA on both backends: tle.gpu layout hints, memory_space and the
pipeline's unroll factor; min/max on runtime values, tl.cat, tl.gather, tl.assume; tle.gpu.local_ptr loads and
stores; host tensor descriptors as arguments and the TMA copy form. tests/cpu/test_flagtree_spellings.py,
test_language_gaps.py, test_local_pointers.py and test_descriptor_arguments.py run the same kernels
(tests/flagtree_form_kernels.py) in the interpreters."""
import pytest
import torch

from triton.tools.tensor_descriptor import TensorDescriptor

from flagtree_form_kernels import (asm_fma_and_bits, assumed, axpy_through_pointers, descriptor_add,
                                   descriptor_copies, extremes_and_cat, gather_in_loop, gathers, hinted_buffers,
                                   product_of_pointer_slices, slices_in_a_loop)

BACKENDS = ("triton", "tilelang")


def _run(kernel, grid, *args, backend, **kw):
    kernel[grid](*args, backend=backend, **kw)
    torch.cuda.synchronize()


def _nan(*shape):
    return torch.full(shape, float("nan"), device="cuda")


@pytest.mark.parametrize("backend", BACKENDS)
def test_layout_hints(backend):
    x, out = torch.randn(4 * 32, device="cuda"), _nan(32)
    _run(hinted_buffers, (1,), x, out, N=4, BLOCK=32, backend=backend)
    torch.testing.assert_close(out, x.view(4, 32).sum(0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_min_max_and_cat(backend):
    x, y, out = torch.randn(16, device="cuda"), torch.randn(16, device="cuda"), _nan(64)
    _run(extremes_and_cat, (1,), x, y, out, 5, B=16, backend=backend)
    keep = torch.arange(16, device="cuda") < 5
    ref = torch.cat([x, y, torch.clamp(torch.maximum(x, y), min=0.5), torch.where(keep, torch.minimum(x, y), 0.0)])
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gathers(backend):
    x = torch.randn(8, 16, device="cuda")
    idx = torch.randint(0, 8, (8, 16), dtype=torch.int32, device="cuda")
    out = _nan(8, 16)
    _run(gathers, (1,), x, idx, out, R=8, C=16, backend=backend)
    torch.testing.assert_close(out, torch.gather(x, 0, idx.long()) + torch.gather(x, 1, (idx % 16).long()) * 1000)
    x = torch.randn(3, 32, device="cuda")
    idx = torch.randint(0, 32, (3, 32), dtype=torch.int32, device="cuda")
    out = _nan(32)
    _run(gather_in_loop, (1,), x, idx, out, N=32, backend=backend)
    torch.testing.assert_close(out, torch.gather(x, 1, idx.long()).sum(0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_assume(backend):
    x, out = torch.randn(64, device="cuda"), torch.zeros(32, device="cuda")
    _run(assumed, (2,), x, out, 32, 2, B=16, backend=backend)
    torch.testing.assert_close(out, x[::2] * 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_local_pointers(backend):
    x, y, out = torch.randn(100, device="cuda"), torch.randn(100, device="cuda"), _nan(100)
    _run(axpy_through_pointers, (2,), x, y, out, 100, 1.5, BLOCK=64, backend=backend)
    torch.testing.assert_close(out, 1.5 * x + y)
    x, out = torch.randn(8, 16, device="cuda"), _nan(8, 16)
    _run(slices_in_a_loop, (1,), x, out, R=8, C=16, S=4, backend=backend)
    ref = (x * 2 + torch.arange(16, device="cuda").div(4, rounding_mode="floor")).flatten().flip(0).view(8, 16)
    torch.testing.assert_close(out, ref)
    a, b = torch.randn(32, 64, device="cuda").half(), torch.randn(64, 32, device="cuda").half()
    c = _nan(32, 32)
    _run(product_of_pointer_slices, (1,), a, b, c, M=32, N=32, K=64, PARTS=2, backend=backend)
    torch.testing.assert_close(c, a.float() @ b.float(), atol=5e-3, rtol=5e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_descriptor_arguments_and_tma_copies(backend):
    a, b = torch.randn(40, 100, device="cuda"), torch.randn(40, 100, device="cuda")
    c = _nan(40, 100)
    descs = [TensorDescriptor.from_tensor(t, [16, 64]) for t in (a, b, c)]
    _run(descriptor_add, (3,), *descs, 128, XBLOCK=16, YBLOCK=64, backend=backend)      # past the edges
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)
    for dtype in (torch.float32, torch.float16):
        a = torch.randn(256, 192, device="cuda").to(dtype)
        c = torch.full((256, 192), float("nan"), device="cuda", dtype=dtype)
        descs = [TensorDescriptor.from_tensor(t, [32, 64]) for t in (a, c)]
        _run(descriptor_copies, (8,), *descs, 192, XBLOCK=32, YBLOCK=64, backend=backend)
        torch.testing.assert_close(c, a * 2, rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inline_asm(backend):
    x, y = torch.randn(32, device="cuda"), torch.randn(32, device="cuda")
    out, bits = _nan(32), torch.zeros(32, dtype=torch.int32, device="cuda")
    _run(asm_fma_and_bits, (1,), x, y, out, bits, BLOCK=32, backend=backend)
    torch.testing.assert_close(out, 2 * x + y)
    assert torch.equal(bits, x.view(torch.int32))
