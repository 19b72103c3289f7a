"""tl.dot(input_precision=...) of fp32 operands compiled and run on the GPU, against an fp64 reference
(tests/dot_precision.py has the bounds): 'ieee' and 'tf32x3' within fp32's bound, 'tf32' outside it and equal,
to fp32 summation, to the product of the operands truncated to tf32, as the interpreter of TileLang programs
computes a T.gemm of fp32 operands. The TileLang lowering has 'tf32' (T.gemm) and 'ieee' (a multiply-add loop
over K); it refuses 'tf32x3' (tests/cpu/test_dot_precision.py)."""
import pytest
import torch

from dot_precision import K, M, N, errors, fp32_dot, ieee_bound, operands, tf32_bound, tf32_truncated

# tf32x3 sums three tf32 products (big x big, big x small, small x big): it drops small x small and the
# small parts' own truncation, each under 2^-20 relative
TF32X3 = 4 * 2.0 ** -20


@pytest.mark.parametrize("backend, precision", [("triton", "ieee"), ("triton", "tf32x3"), ("triton", "tf32"),
                                                ("tilelang", "tf32"), ("tilelang", "ieee")])
def test_fp32_dot_precision(backend, precision):
    a, b = operands("cuda")
    c = torch.full((M, N), float("nan"), device="cuda")
    fp32_dot[(1,)](a, b, c, PRECISION=precision, M=M, N=N, K=K, backend=backend)
    torch.cuda.synchronize()
    err = errors(c, a, b)
    sums = ieee_bound(truncating_sums=True)
    if precision == "ieee":
        assert err.max() <= ieee_bound(), err.max()
    elif precision == "tf32x3":
        assert err.max() <= TF32X3 + sums, err.max()
    else:
        assert 8 * sums < err.max() <= tf32_bound(), err.max()
        assert errors(c, tf32_truncated(a.cpu()), tf32_truncated(b.cpu())).max() <= sums
