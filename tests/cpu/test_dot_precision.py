"""tl.dot(input_precision=...) of fp32 operands, numerically (tests/dot_precision.py has the bounds).

TileLang's T.gemm has no IEEE fp32 product: the TileLang lowering writes 'tf32' as T.gemm, 'ieee' as an fp32
multiply-add loop over K for each element, and refuses 'tf32x3'; the interpreter of TileLang programs reads fp32
T.gemm operands as the tensor cores do (tf32, truncated), so a T.gemm in place of the loop would fail the fp32
bound. Triton's interpreter multiplies fp32 operands in fp32 whatever input_precision says, so on
the CPU the Triton lowering's attribute is checked in its text (test_lowering_rules.py) and by the GPU test
(tests/gpu/test_dot_precision_gpu.py)."""
import pytest
import torch

from dot_precision import K, M, N, errors, fp32_dot, ieee_bound, operands, tf32_bound, tf32_truncated
from tilelang_oracle import needs_tilelang
from tle.lowering.errors import UnsupportedConstruct


def _run(backend, precision):
    a, b = operands()
    c = torch.full((M, N), float("nan"))
    if backend == "tilelang":
        fp32_dot.interpret_tilelang((1,), a, b, c, PRECISION=precision, M=M, N=N, K=K)
    else:
        fp32_dot[(1,)](a, b, c, PRECISION=precision, M=M, N=N, K=K, backend="triton")
    return c, a, b


@needs_tilelang
def test_tilelang_tf32_dot_reads_its_operands_as_tf32():
    c, a, b = _run("tilelang", "tf32")
    err = errors(c, a, b)
    assert err.max() <= tf32_bound() and err.max() > 8 * ieee_bound(truncating_sums=True), err.max()
    # exactly the product of the truncated operands, rounded once
    assert torch.equal(c, (tf32_truncated(a).double() @ tf32_truncated(b).double()).float())


@needs_tilelang
def test_tilelang_ieee_dot_is_within_the_fp32_bound():
    c, a, b = _run("tilelang", "ieee")
    assert errors(c, a, b).max() <= ieee_bound()


@needs_tilelang
def test_tilelang_refuses_tf32x3():
    """Refused; were it lowered to T.gemm, the interpreter's tf32 product would fail the fp32 bound here."""
    try:
        c, a, b = _run("tilelang", "tf32x3")
    except UnsupportedConstruct as e:
        assert "input_precision='tf32x3'" in str(e) and "no three-pass TF32 product" in str(e)
        return
    assert errors(c, a, b).max() <= ieee_bound()


@pytest.mark.parametrize("precision", ["ieee", "tf32", "tf32x3"])
def test_triton_interpreter_multiplies_fp32_whatever_the_precision(precision):
    """What Triton's interpreter does (np.matmul in fp32), not what the GPU does for 'tf32'."""
    c, a, b = _run("triton", precision)
    assert errors(c, a, b).max() <= ieee_bound()
