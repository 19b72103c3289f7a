"""Every kernel on both backends against the torch reference, at its small and large examples, plus odd
shapes through the operator wrappers."""
import pytest
import torch

from kernel_cases import example_kernels
from tle.cli import poison
from tle.examples import compare_outputs, default_tolerance
from tle.kernels.examples.matmul import matmul
from tle.kernels.softmax import softmax
from tle.kernels.examples.vector_add import add

BACKENDS = ("triton", "tilelang")
KERNELS = example_kernels()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("name, kernel", KERNELS, ids=[n for n, _ in KERNELS])
def test_example_matches_reference(name, kernel, size, backend):
    launch = kernel.example("cuda", size)
    poison(launch)                                    # a kernel that writes nothing must fail
    kernel[launch.grid](*launch.args, backend=backend, **launch.kwargs)
    torch.cuda.synchronize()
    compare_outputs(launch)


def assert_close(out, ref):
    atol, rtol = default_tolerance(ref.float(), out.dtype)
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_odd_shape(backend, dtype):
    x = torch.randn(1000, 1000, device="cuda", dtype=dtype)
    assert_close(softmax(x, backend=backend), torch.softmax(x.float(), -1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_odd_shape(backend):
    a = (torch.randn(1000, 1000, device="cuda") / 1000 ** 0.5).half()
    b = torch.randn(1000, 1000, device="cuda").half()
    assert_close(matmul(a, b, backend=backend), a.float() @ b.float())


@pytest.mark.parametrize("backend", BACKENDS)
def test_add_odd_length(backend):
    x = torch.randn(12345, device="cuda")
    y = torch.randn(12345, device="cuda")
    torch.testing.assert_close(add(x, y, backend=backend), x + y, atol=0, rtol=0)


def _sparse_mla_case():
    """Rows with fewer valid indices than topk (padding SKV), out-of-range indices (-7, SKV + 3) in the
    middle of rows, two batches, two head blocks."""
    from tle.kernels.examples import sparse_mla as M
    gen = torch.Generator().manual_seed(1)
    B, S, SKV, H, VG, topk = 2, 160, 256, 128, 1, 128
    q = torch.randn(B, S, H, 576, generator=gen).to("cuda", torch.bfloat16)
    kv = torch.randn(B, SKV, VG, 576, generator=gen).to("cuda", torch.bfloat16)
    idx = M.make_indices(B, S, SKV, VG, topk, gen, "cuda")
    bad = (torch.rand(idx.shape, generator=gen) < 0.1).to("cuda") & (torch.arange(topk, device="cuda") > 0)
    idx = torch.where(bad, torch.where(torch.rand(idx.shape, device="cuda") < 0.5, -7, SKV + 3), idx).to(torch.int32)
    return q, kv, idx


@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_mla_smem_invalid_and_short_rows(backend):
    """The tle.gpu-staged sparse MLA against the fp32 reference on the same hard rows."""
    from tle.kernels.examples import sparse_mla as M
    from tle.kernels.examples.sparse_mla_smem import sparse_mla_fwd_smem
    q, kv, idx = _sparse_mla_case()
    out, lse = sparse_mla_fwd_smem(q, kv, idx, backend=backend)
    ref_o, ref_l = M.reference(q, kv, idx, None, 512)
    torch.testing.assert_close(out.float(), ref_o, atol=1e-2, rtol=1.6e-2)
    torch.testing.assert_close(lse.float(), ref_l, atol=1e-2, rtol=1.6e-2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_smem_odd_shape(backend):
    from tle.kernels.examples.matmul_smem import matmul_smem
    a = (torch.randn(1000, 1000, device="cuda") / 1000 ** 0.5).half()
    b = torch.randn(1000, 1000, device="cuda").half()
    assert_close(matmul_smem(a, b, backend=backend), a.float() @ b.float())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("is_async", [True, False])
def test_sparse_mla_invalid_and_short_rows(backend, is_async):
    """Rows with fewer valid indices than topk (padding SKV), out-of-range indices (-7, SKV + 3) in the
    middle of rows, two head blocks, and an fp32 reference."""
    from tle.kernels.examples import sparse_mla as M
    q, kv, idx = _sparse_mla_case()
    (B, S, H, _), cfg = q.shape, dict(M.CONFIG_SMALL)
    # NaN until written, so that a kernel that writes nothing fails (torch.empty may reuse a right answer)
    out = torch.full((B, S, H, 512), float("nan"), device="cuda", dtype=torch.bfloat16)
    lse = torch.full((B, S, H), float("nan"), device="cuda", dtype=torch.bfloat16)
    grid, args = M.kernel_args(q, kv, idx, out, lse, 576 ** -0.5, 512, cfg.pop("BK"), cfg.pop("BH"))
    M.sparse_mla_fwd_kernel[grid](*args, backend=backend, ASYNC=is_async, **cfg)
    ref_o, ref_l = M.reference(q, kv, idx, None, 512)
    torch.testing.assert_close(out.float(), ref_o, atol=1e-2, rtol=1.6e-2)
    torch.testing.assert_close(lse.float(), ref_l, atol=1e-2, rtol=1.6e-2)
    o2, l2 = M.sparse_mla_fwd(q, kv, idx, backend=backend)
    torch.testing.assert_close(o2, out)


def test_tilelang_block_over_cuda_limit_raises_before_launch():
    """32 warps beside the producer warpgroup of a warp-specialized loop: a LoweringError naming the loop, not
    an unexplained CUDA error from TileLang's runtime."""
    from tle.kernels.rms_norm import rms_norm_bwd_kernel
    from tle.lowering.errors import LoweringError
    m, n, grid = 1024, 8192, 8
    dy, h = torch.randn(m, n, device="cuda"), torch.randn(m, n, device="cuda")
    w, rstd = torch.ones(n, device="cuda"), torch.ones(m, device="cuda")
    dx, part = torch.empty_like(h), torch.empty(grid, n, device="cuda")
    with pytest.raises(LoweringError, match="more than CUDA's 1024: it warp-specialized the pipelined loop"):
        rms_norm_bwd_kernel[(grid,)](dy, h, w, rstd, dy, dx, part, n, n, 0, n, m, n, m // grid, BLOCK_M=1,
                                     BLOCK_N=n, HAS_WEIGHT=True, HAS_DH=False, PREFETCH=False, ASYNC_LOADS=True,
                                     backend="tilelang", num_warps=32, num_stages=3)
