"""A buffer one warp group writes before the loop and the others read only inside it (the keys a backward's
program holds, say): handed over before the loop (lowering/tilelang/warp_groups.py), the readers waiting once,
at the loop. The TileLang source, the numbers under both role orders of the interpreter, against Triton's
interpreter and torch, and the mutation without the readers' wait."""
import pytest
import torch
import triton.language as tl

import tle
from test_warp_groups import ORDERS, failures_without_waits

needs_tilelang = pytest.mark.skipif(tle.available_backends().get("tilelang") is not None,
                                    reason="TileLang is not installed")
M, N, D, STEPS = 64, 64, 32, 3


@tle.jit
def keys_before_the_loop(q_ptr, k_ptr, out_ptr, steps, M: tl.constexpr, N: tl.constexpr, D: tl.constexpr):
    """Group 0 copies the keys once, then each step's queries; group 1 adds up the steps' scores q kᵀ, group 2
    the keys' own products k kᵀ (doubled): group 2 reads nothing else in the loop, so only the keys' hand-off
    orders its reads after group 0's copy."""
    rows, cols, keys = tl.arange(0, M), tl.arange(0, D), tl.arange(0, N)
    k_buf = tle.gpu.alloc([N, D], tl.float16)
    with tle.gpu.warp_group(0, registers=56):
        tle.gpu.copy(k_ptr + keys[:, None] * D + cols[None, :], k_buf, [N, D])
    acc_a = tl.zeros([M, N], tl.float32)
    acc_b = tl.zeros([M, N], tl.float32)
    for i in tle.gpu.pipeline(0, steps, num_stages=2):
        q_buf = tle.gpu.alloc([M, D], tl.float16)
        with tle.gpu.warp_group(0):
            tle.gpu.copy(q_ptr + (i * M + rows)[:, None] * D + cols[None, :], q_buf, [M, D])
        with tle.gpu.warp_group(1, registers=224):
            acc_a = tl.dot(tle.gpu.local_load(q_buf), tl.trans(tle.gpu.local_load(k_buf)), acc_a)
        with tle.gpu.warp_group(2, registers=224):
            acc_b = tl.dot(tle.gpu.local_load(k_buf), tl.trans(tle.gpu.local_load(k_buf)), acc_b)
    with tle.gpu.warp_group(1):
        tl.store(out_ptr + rows[:, None] * N + keys[None, :], acc_a)
    with tle.gpu.warp_group(2):
        tl.store(out_ptr + M * N + rows[:, None] * N + keys[None, :], acc_b * 2.0)


def _inputs():
    g = torch.Generator().manual_seed(0)
    q = (torch.randn(STEPS * M, D, generator=g) / 4).half()
    k = (torch.randn(N, D, generator=g) / 4).half()
    return q, k, torch.full((2 * M, N), float("nan"))


def _reference(q, k):
    s = sum(q[i * M:(i + 1) * M].double() @ k.double().T for i in range(STEPS))
    return torch.cat([s, 2 * STEPS * (k.double() @ k.double().T)])


def _run_tilelang(monkeypatch, order):
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_ORDER", order)
    q, k, out = _inputs()
    keys_before_the_loop.interpret_tilelang((1,), q, k, out, STEPS, M=M, N=N, D=D, num_warps=12)
    return (out.double() - _reference(q, k)).abs().max().item()


@needs_tilelang
def test_the_readers_wait_once_before_their_loops(tmp_cache):
    q, k, out = _inputs()
    src = keys_before_the_loop.lower(q, k, out, STEPS, M=M, N=N, D=D, grid=(1,), backend="tilelang",
                                     num_warps=12).source
    # the writer arrives once after its copy; each reader waits on the first phase before its loop
    assert src.count("T.barrier_arrive(k_buf_full[0])") == 1
    for branch in src.split("T.set_max_nreg(224, 1)")[1:]:
        wait, loop = branch.index("T.barrier_wait(k_buf_full[0], 0)"), branch.index("for i_")
        assert wait < loop


@needs_tilelang
@pytest.mark.parametrize("order", ORDERS)
def test_numbers(monkeypatch, tmp_cache, order):
    assert _run_tilelang(monkeypatch, order) < 1e-3


def test_triton_runs_it_in_program_order():
    q, k, out = _inputs()
    keys_before_the_loop[(1,)](q, k, out, STEPS, M=M, N=N, D=D, backend="triton", num_warps=12)
    assert (out.double() - _reference(q, k)).abs().max().item() < 1e-3


@needs_tilelang
def test_without_the_readers_wait_it_fails(monkeypatch, tmp_cache):
    assert failures_without_waits(monkeypatch, keys_before_the_loop, _run_tilelang,
                                  lambda h, group, section: section and group != h.writer, 1e-3)
