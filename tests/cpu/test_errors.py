"""Errors users see: unsupported constructs name the kernel's file:line; bad launches name the argument;
backend selection follows call > decorator > TLE_BACKEND > "triton" and never switches silently."""
import os

import pytest
import torch
import triton.language as tl

import tle
from tle import select
from tle.kernels.examples.matmul import matmul
from tle.kernels.rms_norm import rms_norm
from tle.kernels.softmax import softmax
from tle.kernels.examples.vector_add import add
from markers import marked_line

HERE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


# -- unsupported constructs: LoweringError with file:line ----------------------------------------------
@tle.jit
def uses_break(x_ptr, n, BLOCK: tl.constexpr):
    i = 0
    while i < n:
        i += 1
        if i > 3:
            break  # ERR-break
    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)


@tle.jit
def uses_block_pointer_load(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, boundary_check=(0,))  # ERR-boundary-check
    tl.store(x_ptr + offs, x)


def not_a_kernel_function(x):
    return x


@tle.jit
def calls_plain_python_on_tiles(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = not_a_kernel_function(tl.load(x_ptr + offs))  # ERR-unknown-call
    tl.store(x_ptr + offs, x)


@tle.jit
def uses_unsupported_triton_builtin(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, tl.histogram(x, 8))  # ERR-triton-builtin


@pytest.mark.parametrize("kernel, marker, words", [
    (uses_break, "ERR-break", "break"),
    (uses_block_pointer_load, "ERR-boundary-check", "boundary_check"),
    (calls_plain_python_on_tiles, "ERR-unknown-call", "not_a_kernel_function"),
    (uses_unsupported_triton_builtin, "ERR-triton-builtin", "histogram"),
])
def test_unsupported_construct_names_file_and_line(kernel, marker, words):
    args = (meta(64), 64) if "n" in kernel.param_names else (meta(64),)
    with pytest.raises(tle.LoweringError) as err:
        kernel.lower(*args, BLOCK=64, backend="triton")
    msg = str(err.value)
    assert f"{HERE}:{line_of(marker)}" in msg, msg
    assert words in msg, msg


# -- launch errors: LaunchError naming the argument -------------------------------------------------------
@tle.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def test_missing_constexpr_is_named():
    x = torch.zeros(8)
    with pytest.raises(tle.LaunchError, match="missing constexpr 'BLOCK'"):
        scale[(1,)](x, x, 8)


def test_missing_runtime_argument_is_named():
    x = torch.zeros(8)
    with pytest.raises(tle.LaunchError, match="missing argument 'n'"):
        scale[(1,)](x, x, BLOCK=8)


@pytest.mark.parametrize("grid", [(0,), 0, (1, 1, 1, 1), (1.5,), ("2",), (), (2, -1)])
def test_bad_grid(grid):
    x = torch.zeros(8)
    with pytest.raises(tle.LaunchError, match="grid"):
        scale[grid](x, x, 8, BLOCK=8)


def test_meta_tensors_cannot_launch():
    x = meta(8)
    with pytest.raises(tle.LaunchError) as err:
        scale[(1,)](x, x, 8, BLOCK=8, backend="triton")
    assert "meta" in str(err.value) and "x_ptr" in str(err.value)


def test_tensors_on_different_devices():
    with pytest.raises(tle.LaunchError, match="'y_ptr'"):
        scale[(1,)](torch.zeros(8), meta(8), 8, BLOCK=8, backend="triton")


def test_unsupported_scalar_argument_is_named():
    x = torch.zeros(8)
    with pytest.raises(tle.LaunchError, match="'n'"):
        scale[(1,)](x, x, "eight", BLOCK=8)


@pytest.mark.parametrize("call, words", [
    (lambda: rms_norm(torch.tensor(1.0), 16, torch.ones(16), backend="torch"), ["'input'", "rank 0"]),
    (lambda: rms_norm(torch.randn(4, 16), 16, torch.ones(15), backend="torch"), ["'weight'", "shape"]),
    (lambda: softmax(torch.randint(0, 5, (4, 16)), -1), ["'input'", "dtype int64"]),
    (lambda: softmax(torch.randn(4, 16), dim=2), ["'dim'", "expected an int in [-2, 1]"]),
    (lambda: add(torch.randn(8), torch.randn(8).double()), ["'y'", "dtype float64"]),
    (lambda: matmul(torch.randn(8, 16).half(), torch.randn(8, 16).half()), ["'a'", "'b'", "inner"]),
    (lambda: matmul(torch.randn(16, 16), torch.randn(16, 16)), ["'a'", "dtype float32"]),
])
def test_operator_wrappers_check_their_inputs(call, words):
    with pytest.raises(tle.LaunchError) as err:
        call()
    for w in words:
        assert w in str(err.value), (w, str(err.value))


# -- backend selection --------------------------------------------------------------------------------------
def test_unknown_backend_lists_available_ones():
    x = torch.zeros(8)
    with pytest.raises(tle.BackendUnavailable) as err:
        scale[(1,)](x, x, 8, BLOCK=8, backend="no-such-backend")
    msg = str(err.value)
    assert "no-such-backend" in msg and "available:" in msg and "triton" in msg


def test_available_backends_reports_triton_usable():
    backends = tle.available_backends()
    assert backends["triton"] is None
    assert "tilelang" in backends


@tle.jit(backend="from-decorator")
def scale_decorated(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def test_backend_from_env(monkeypatch):
    x = torch.zeros(8)
    monkeypatch.setenv("TLE_BACKEND", "from-env")
    with pytest.raises(tle.BackendUnavailable, match="from-env"):
        scale[(1,)](x, x, 8, BLOCK=8)
    monkeypatch.setenv("TLE_BACKEND", "triton")
    assert scale.lower(x, x, 8, BLOCK=8).backend == "triton"


def test_backend_precedence_call_decorator_env_default(monkeypatch):
    x, y = torch.arange(8.0), torch.zeros(8)
    monkeypatch.setenv("TLE_BACKEND", "from-env")
    # the decorator beats the environment
    with pytest.raises(tle.BackendUnavailable, match="from-decorator"):
        scale_decorated[(1,)](x, y, 8, BLOCK=8)
    # the call beats the decorator (and the environment)
    scale_decorated[(1,)](x, y, 8, BLOCK=8, backend="triton")
    torch.testing.assert_close(y, x * 2)
    # with nothing chosen anywhere: triton
    monkeypatch.delenv("TLE_BACKEND")
    assert scale.lower(x, y, 8, BLOCK=8).backend == "triton"
    assert select.choose(None, None) == "triton"
    assert select.choose("a", "b") == "a" and select.choose(None, "b") == "b"
    monkeypatch.setenv("TLE_BACKEND", "c")
    assert select.choose(None, None) == "c" and select.choose(None, "b") == "b"


def test_triton_interpret_changed_after_triton_was_imported(monkeypatch):
    """Triton reads TRITON_INTERPRET once, at import (this suite sets it before); unset or set afterwards, a launch
    would fail deep inside Triton: the launch says what happened and what to do instead."""
    x = torch.randn(64)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(tle.LaunchError, match=r"TRITON_INTERPRET is unset now but was set when Triton was imported "
                                              r"\(Triton reads it once, at import\); unset it before Python starts"):
        scale[(1,)](x, torch.empty_like(x), 64, BLOCK=64, backend="triton")
    with pytest.raises(tle.BackendUnavailable, match="TRITON_INTERPRET is unset now but was set"):
        rms_norm(x.view(4, 16), 16, torch.ones(16), backend="triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = torch.empty_like(x)
    scale[(1,)](x, out, 64, BLOCK=64, backend="triton")       # as imported: it runs
    assert torch.equal(out, 2 * x)
