"""The kernels and checks of tests/cpu/test_tilelang_atomic_kinds.py on the GPU, on both backends: tl.atomic_and,
atomic_xor, atomic_xchg, atomic_cas and the value of tl.atomic_or (TileLang: device functions the kernel brings),
with more blocks contending than on the CPU; and tl.device_print, whose lines (captured after the kernel is
synchronized) must be the ones Triton prints: TileLang prints each element once, Triton once per thread holding
a copy, so Triton's lines are compared as a set. The order of lines and of atomic updates is the GPU's."""
import importlib.util
import os
import warnings
from collections import Counter

import pytest
import torch

BACKENDS = ("triton", "tilelang")


def _cases():
    """tests/cpu/test_tilelang_atomic_kinds.py: its kernels and check_* functions."""
    path = os.path.join(os.path.dirname(__file__), "..", "cpu", "test_tilelang_atomic_kinds.py")
    spec = importlib.util.spec_from_file_location("tilelang_atomic_kinds_cases", path)
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():       # its `slow` mark is registered by tests/cpu/conftest.py
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        spec.loader.exec_module(module)
    return module


cases = _cases()


def run_cuda(backend, kernel, grid, *args, **kwargs):
    kernel[grid](*args, backend=backend, **kwargs)
    torch.cuda.synchronize()


@pytest.mark.parametrize("backend", BACKENDS)
def test_atomics_returning(backend):
    cases.check_atomics_returning(run_cuda, backend, "cuda")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("grid, block, slots", [(3, 32, 4), (48, 128, 8)])
def test_contended_bitwise_atomics(backend, dtype, grid, block, slots):
    cases.check_contended_bitwise(run_cuda, backend, "cuda", dtype, grid=grid, block=block, slots=slots)


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_atomic_kinds(backend):
    cases.check_masked_kinds(run_cuda, backend, "cuda")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("grid", [5, 30])
def test_masked_scalar_atomic_kinds(backend, grid):
    cases.check_masked_scalars(run_cuda, backend, "cuda", grid=grid)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float16, torch.bfloat16,
                                   torch.int16, torch.float64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_compare_and_swap_claims(backend, dtype):
    cases.check_claims(run_cuda, backend, "cuda", dtype, grid=8, block=32, flags=16)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("grid, nslots", [(6, 8), (64, 64)])
def test_a_slot_per_program_from_compare_and_swap(backend, grid, nslots):
    cases.check_first_free_slot(run_cuda, backend, "cuda", grid=grid, nslots=nslots)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_value_atomic_or_returns(backend):
    cases.check_or_value(run_cuda, backend, "cuda")


@pytest.mark.parametrize("backend", BACKENDS)
def test_orders_and_scopes(backend):
    c = torch.zeros(64, dtype=torch.int32, device="cuda")
    run_cuda(backend, cases.ordered, (1,), c, BLOCK=16)
    c = c.cpu()
    offs = torch.arange(16, dtype=torch.int32)
    assert torch.equal(c[:16], offs) and (c[16:32] == 0).all()
    assert c[32] == 1 and (c[33:48] == 0).all() and c[48] == 1 and c[49] == 2


# -- tl.device_print ---------------------------------------------------------------------------------------------
def _printed(capfd, backend, block, grid):
    x, i, w = cases.print_inputs(block, grid)
    torch.cuda.synchronize()
    capfd.readouterr()
    run_cuda(backend, cases.printed_kinds, (grid,), x.cuda(), i.cuda(), w.cuda(), BLOCK=block)
    lines = cases.printed_lines(capfd.readouterr().out)
    return lines, cases.expected_print_lines(x, i, w, block, grid, threads=128)


@pytest.mark.parametrize("block", [64, 128, 256])
def test_device_print_on_tilelang_prints_each_line_of_triton_once(capfd, block):
    lines, expected = _printed(capfd, "tilelang", block, 2)
    assert Counter(lines) == Counter(expected)


@pytest.mark.parametrize("block", [64, 128, 256])
def test_device_print_on_triton_prints_the_same_lines(capfd, block):
    lines, expected = _printed(capfd, "triton", block, 2)
    assert set(lines) == set(expected), (sorted(set(lines) - set(expected))[:10],
                                         sorted(set(expected) - set(lines))[:10])
