"""Raw functions in FlagTree's form (tle.raw.dialect) on the device, against torch: pointers and program ids,
a tree reduction with barriers in a while loop, atomics on shared copies, 2-D tiles with carried values,
printf, and an assertion that stops the kernel (in a child process: it leaves the CUDA context unusable)."""
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("jaxlib.mlir")

from raw_dialect_functions import add_kernel, hello_kernel, histogram_kernel, product_kernel, sum_kernel  # noqa: E402

BACKENDS = ("triton", "tilelang")
CUDA = torch.device("cuda")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_grid_stride_add(backend, num_warps):
    x, y = torch.randn(100_000, device=CUDA), torch.randn(100_000, device=CUDA)
    out = torch.zeros_like(x)
    add_kernel[(7,)](x, y, out, x.numel(), backend=backend, num_warps=num_warps)
    torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n, num_warps", [(128, 1), (1024, 4), (512, 8)])
def test_tree_sum(backend, n, num_warps):
    x = torch.randn(33, n, device=CUDA)
    out = torch.zeros_like(x)
    sum_kernel[(33,)](x, out, N=n, backend=backend, num_warps=num_warps)
    torch.testing.assert_close(out[:, 0], x.sum(1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_histogram(backend):
    bins = torch.randint(0, 64, (4096,), dtype=torch.int32, device=CUDA)
    counts = torch.full((64,), -1, dtype=torch.int32, device=CUDA)
    seen = torch.full((64,), -1, dtype=torch.int32, device=CUDA)
    histogram_kernel[(1,)](bins, counts, seen, N=4096, B=64, backend=backend, num_warps=4)
    assert counts.tolist() == torch.bincount(bins, minlength=64).int().tolist()
    assert seen.tolist() == [0] * 64


@pytest.mark.parametrize("backend", BACKENDS)
def test_product(backend):
    a, b = torch.randn(32, 16, device=CUDA), torch.randn(16, 64, device=CUDA)
    c = torch.zeros(32, 64, device=CUDA)
    product_kernel[(1,)](a, b, c, M=32, N=64, K=16, backend=backend, num_warps=4)
    torch.testing.assert_close(c, 1.0 + 2 * (a @ b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_printf(backend, capfd):
    hello_kernel[(3,)](backend=backend, num_warps=1)
    torch.cuda.synchronize()
    lines = [ln for ln in capfd.readouterr().out.splitlines() if ln.startswith("program")]
    assert len(lines) == 96 and "program 2 thread 31" in lines


_ASSERT_CHILD = """
import sys, torch
sys.path[:0] = {paths!r}
from raw_dialect_functions import assert_kernel
assert_kernel[(1,)](torch.zeros(1, device="cuda"), {limit}, backend={backend!r}, num_warps=2)
torch.cuda.synchronize()
print("finished")
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_vassert(backend):
    paths = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    ok = subprocess.run([sys.executable, "-c", _ASSERT_CHILD.format(paths=paths, limit=64, backend=backend)],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "finished" in ok.stdout, ok.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-c", _ASSERT_CHILD.format(paths=paths, limit=40, backend=backend)],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "finished" not in bad.stdout
    assert "is not below the limit" in bad.stdout + bad.stderr
