"""Launch arguments a kernel cannot use: None, a wrongly typed scalar or constexpr, a tensor on another
device, a missing constexpr. Each is a tle.LaunchError naming the kernel and the argument, what it got and
what the kernel needed, raised before anything is compiled or launched, the same on both backends. A None
argument is a constexpr None, as in Triton: a kernel may test it."""
import os

import pytest
import torch
import triton.language as tl

import tle
from tilelang_oracle import run_on
from markers import marked_line

HERE = os.path.basename(__file__)
PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(tle.__file__))))
BACKENDS = ["triton", "tilelang"]


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "tilelang" and tle.available_backends()["tilelang"] is not None:
        pytest.skip("TileLang backend unavailable here")
    return request.param


# -- kernels -------------------------------------------------------------------------------------------------
@tle.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # USE-BLOCK
    mask = offs < n  # USE-n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)  # USE-y_ptr


@tle.jit
def row_sum(x_ptr, y_ptr, n_rows, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    for r in range(0, n_rows):  # USE-n_rows
        acc += tl.load(x_ptr + r * BLOCK + tl.arange(0, BLOCK))
    tl.store(y_ptr + tl.arange(0, BLOCK), acc)


@tle.jit
def pick_row(x_ptr, y_ptr, row, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + row * BLOCK + offs))  # USE-row


@tle.jit
def add_bias(x_ptr, bias_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    if bias_ptr is not None:
        x += tl.load(bias_ptr + offs)
    tl.store(y_ptr + offs, x)


@tle.jit
def add_two(x_ptr, a_ptr, b_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)  # USE-a_ptr
    b = tl.load(b_ptr + offs)
    tl.store(x_ptr + offs, a + b)


@tle.jit
def optional_bias_and_a_bug(x_ptr, bias_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    if bias_ptr is not None:
        x += tl.load(bias_ptr + offs)
    tl.store(y_ptr + offs.to(tl.float32), x)  # BUG-float-offset


def cpu(n=16):
    return torch.arange(float(n))


# -- each bad form: (kernel, arguments, constexprs, words the message must hold) --------------------------------
# every message also names the kernel and, where the kernel's use of the argument failed, that line
BAD_LAUNCHES = {
    "None for a tensor": (scale, (cpu(), None, 16), {"BLOCK": 16},
                          ["argument 'y_ptr' is None", "needs a tensor", "USE-y_ptr", "y_ptr is None"]),
    "None for an int": (scale, (cpu(), cpu(), None), {"BLOCK": 16},
                        ["argument 'n' is None", "needs a number", "USE-n"]),
    "None for a loop bound": (row_sum, (cpu(), cpu(), None), {"BLOCK": 16},
                              ["argument 'n_rows' is None", "needs an int", "USE-n_rows"]),
    "a str for a scalar": (scale, (cpu(), cpu(), "16"), {"BLOCK": 16},
                           ["argument 'n' is a str ('16')", "expected a torch.Tensor, an int, a float"]),
    "a list for a scalar": (scale, (cpu(), cpu(), [16]), {"BLOCK": 16},
                            ["argument 'n' is a list ([16])", "expected a torch.Tensor, an int, a float"]),
    "a tensor for a scalar": (scale, (cpu(), cpu(), torch.tensor(16)), {"BLOCK": 16},
                              ["argument 'n' is a torch.Tensor (int64, shape (), on cpu)", "needs a number",
                               "USE-n", "t.item()"]),
    "a float loop bound": (row_sum, (cpu(32), cpu(), 2.0), {"BLOCK": 16},
                           ["argument 'n_rows' is a float (2.0)", "needs an int", "USE-n_rows"]),
    "a float index": (pick_row, (cpu(32), cpu(), 1.0), {"BLOCK": 16},
                      ["argument 'row' is a float (1.0)", "needs an int", "USE-row"]),
    "a tensor on another device": (scale, (cpu(), torch.empty(16, device="meta"), 16), {"BLOCK": 16},
                                   ["argument 'y_ptr' is on meta", "'x_ptr' is on cpu"]),
    "a missing constexpr": (scale, (cpu(), cpu(), 16), {}, ["missing constexpr 'BLOCK'"]),
    "None for a constexpr": (scale, (cpu(), cpu(), 16), {"BLOCK": None},
                             ["constexpr 'BLOCK' is None", "needs an int", "USE-BLOCK"]),
    "a str for a constexpr": (scale, (cpu(), cpu(), 16), {"BLOCK": "16"},
                              ["constexpr 'BLOCK' is a str ('16')", "needs an int", "USE-BLOCK"]),
    "a tensor for a constexpr": (scale, (cpu(), cpu(), 16), {"BLOCK": torch.tensor(16)},
                                 ["constexpr 'BLOCK' is a torch.Tensor", "a constexpr takes a Python value"]),
    "two None arguments": (add_two, (cpu(), None, None), {"BLOCK": 16},
                           ["argument 'a_ptr' is None", "uses it as a value", "USE-a_ptr"]),
}


def _expected(words):
    """The markers (USE-...) become this file's file:line."""
    return [f"{HERE}:{line_of(w)}" if w.startswith("USE-") else w for w in words]


def _launch_error(kernel, args, kwargs, backend) -> pytest.ExceptionInfo:
    lowered_before = len(kernel._cache)
    with pytest.raises(tle.LaunchError) as err:
        kernel[(1,)](*args, backend=backend, **kwargs)
    assert len(kernel._cache) == lowered_before, "nothing is lowered for arguments the kernel cannot use"
    return err


@pytest.mark.parametrize("case", list(BAD_LAUNCHES))
def test_a_bad_argument_is_a_launch_error_naming_it(case, backend):
    kernel, args, kwargs, words = BAD_LAUNCHES[case]
    err = _launch_error(kernel, args, kwargs, backend)
    msg = str(err.value)
    assert msg.startswith(f"{kernel.__name__}: "), msg
    for w in _expected(words):
        assert w in msg, (w, msg)
    # raised by tle, before anything is compiled or launched: never from inside Triton's or TileLang's sources
    assert str(err.traceback[-1].path).startswith(PROJECT), err.traceback[-1].path


@pytest.mark.parametrize("case", list(BAD_LAUNCHES))
def test_both_backends_say_the_same(case):
    if tle.available_backends()["tilelang"] is not None:
        pytest.skip("TileLang backend unavailable here")
    kernel, args, kwargs, _ = BAD_LAUNCHES[case]
    messages = {b: str(_launch_error(kernel, args, kwargs, b).value) for b in BACKENDS}
    assert messages["triton"] == messages["tilelang"], messages


def test_lower_and_the_interpreter_report_the_same_error():
    kernel, args, kwargs, words = BAD_LAUNCHES["a float loop bound"]
    launched = str(_launch_error(kernel, args, kwargs, "triton").value)
    with pytest.raises(tle.LaunchError) as lowered:
        kernel.lower(*args, grid=(1,), backend="triton", **kwargs)
    assert str(lowered.value) == launched
    if tle.available_backends()["tilelang"] is None:
        with pytest.raises(tle.LaunchError) as interpreted:
            kernel.interpret_tilelang((1,), *args, **kwargs)
        assert str(interpreted.value) == launched


def test_the_failure_it_explains_is_chained():
    kernel, args, kwargs, _ = BAD_LAUNCHES["a float index"]
    err = _launch_error(kernel, args, kwargs, "triton")
    assert isinstance(err.value.__cause__, tle.LoweringError)
    assert "pointer offset must be an integer" in str(err.value.__cause__)


# -- None as a constexpr None, as in Triton ------------------------------------------------------------------------
@pytest.mark.parametrize("with_bias", [True, False])
def test_none_is_a_constexpr_the_kernel_may_test(with_bias, backend):
    x, bias = torch.randn(16), torch.randn(16)
    y = torch.full((16,), float("nan"))
    run_on(backend, add_bias, (1,), x, bias if with_bias else None, y, BLOCK=16)
    torch.testing.assert_close(y, x + bias if with_bias else x)


def test_none_specializes_the_kernel():
    meta = torch.empty(16, device="meta")
    without = add_bias.lower(meta, None, meta, BLOCK=16, backend="triton")
    with_bias = add_bias.lower(meta, meta, meta, BLOCK=16, backend="triton")
    assert "def add_bias(x_ptr, y_ptr)" in without.source          # folded away: not a parameter
    assert "def add_bias(x_ptr, bias_ptr, y_ptr)" in with_bias.source


# -- what stays the kernel's own error -----------------------------------------------------------------------------
def test_a_kernel_bug_beside_a_none_argument_is_not_blamed_on_it(backend):
    with pytest.raises(tle.LoweringError) as err:
        optional_bias_and_a_bug[(1,)](cpu(), None, cpu(), BLOCK=16, backend=backend)
    msg = str(err.value)
    assert f"{HERE}:{line_of('BUG-float-offset')}" in msg and "pointer offset must be an integer" in msg
    assert not isinstance(err.value, tle.LaunchError) and "bias_ptr" not in msg


def test_a_float_the_kernel_uses_as_a_float_is_accepted(backend):
    x, y = torch.randn(16), torch.full((16,), float("nan"))
    run_on(backend, scale, (1,), x, y, 16.0, BLOCK=16)       # `offs < n` compares with a float: fine
    torch.testing.assert_close(y, x * 2)


@tle.jit
def selected_form(x_ptr, y_ptr, BLOCK: tl.constexpr, FORM: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs[:, None] * BLOCK + offs[None, :])
    if FORM == "product":
        x = tl.dot(x, x, tl.zeros([BLOCK, 2 * BLOCK], dtype=tl.float32))  # BUG-dot-shape
    tl.store(y_ptr + offs[:, None] * BLOCK + offs[None, :], x)


def test_a_kernel_bug_on_a_path_a_string_constexpr_selects_is_not_blamed_on_it(backend):
    """A number in place of FORM would take another path that traces; that does not make FORM wrong."""
    with pytest.raises(tle.LoweringError) as err:
        selected_form[(1,)](cpu(256), cpu(256), BLOCK=16, FORM="product", backend=backend)
    msg = str(err.value)
    assert f"{HERE}:{line_of('BUG-dot-shape')}" in msg and "accumulator shape" in msg, msg
    assert not isinstance(err.value, tle.LaunchError) and "FORM" not in msg, msg
