"""tle.raw.dialect functions on Triton, on the device: what the linked LLVM IR computes against torch
(pointers, a shared tile reduced in a while loop on 4 and 8 warps, shared atomics, a 2-D tile through libdevice
with a named barrier, printing and a passing assertion)."""
import pytest
import torch

pytest.importorskip("jaxlib.mlir")

import raw_dialect_kernels as K  # noqa: E402


@pytest.mark.parametrize("n", [1000, 4096])
def test_vector_add(n):
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    K.vector_add_kernel[(3,)](x, y, out, n, backend="triton")
    torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize("block, num_warps", [(128, 4), (256, 8), (512, 4)])
def test_tree_sum(block, num_warps):
    x = torch.randn(3 * block, device="cuda")
    out = torch.full_like(x, float("nan"))
    K.tree_sum_kernel[(3,)](x, out, BLOCK=block, backend="triton", num_warps=num_warps)
    sums = out.view(3, block)[:, 0]
    torch.testing.assert_close(sums, x.view(3, block).sum(1), rtol=1e-5, atol=1e-4)


def test_histogram():
    data = torch.randint(0, 16, (512,), device="cuda", dtype=torch.int32)
    out = torch.full((16,), -1, device="cuda", dtype=torch.int32)
    K.histogram_kernel[(1,)](data, out, N=512, BINS=16, backend="triton")
    torch.testing.assert_close(out, torch.bincount(data, minlength=16).to(torch.int32))


def test_exp_rows(capfd):
    x = torch.randn(8 * 32, device="cuda")
    out = torch.full_like(x, float("nan"))
    K.exp_rows_kernel[(1,)](x, out, 0.5, R=8, C=32, backend="triton")
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch.exp(x * 0.5), rtol=1e-5, atol=1e-6)
    assert "exp_rows: y[0][0]=" in capfd.readouterr().out
