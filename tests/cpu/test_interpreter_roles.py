"""Warp-specialized TileLang programs in the interpreter of TileLang programs: a block split into roles
(thread ranges running their own code) that synchronise through mbarriers. The correct program gives the
reference's numbers under both role orders; a program missing a wait or with a wrong arrive count gives
wrong numbers or an error, and a deadlock is reported, never a hang."""
import os
import threading

import pytest
import torch

import tle
from tle.lowering.tilelang.interpreter import (BarrierOverflow, Deadlock, InterpreterError, Program,
                                               UninitializedRead, load_prim_func)

pytestmark = pytest.mark.skipif(tle.available_backends().get("tilelang") is not None,
                                reason="the interpreter reads programs with TileLang's parser")

ORDERS = ("lowest_first", "highest_first")
SWITCHES = ("wait", "arrive")
HEADER = "import tilelang.language as T\n\n\n"
BLOCKS, H, BI, D, N = 2, 16, 16, 32, 4        # blocks, rows of Q per block, KV rows per step, width, steps

# Three roles of 128 threads: a producer (threads 256..383) copies KV tiles into a two-version shared
# buffer; consumer 1 computes P = Q K^T, hands P to consumer 2 through shared memory, and accumulates the
# left half of P V; consumer 2 accumulates the right half. Two blocks: the second needs fresh mbarriers.
WARP_SPECIALIZED = f'''
@T.prim_func
def warp_specialized(Q: T.Tensor(({BLOCKS * H}, {D}), "bfloat16"),
                     KV: T.Tensor(({N * BI}, {D}), "bfloat16"),
                     O: T.Tensor(({BLOCKS * H}, {D}), "float32")):
    with T.Kernel({BLOCKS}, threads=384) as bx:
        q_s = T.alloc_shared(({H}, {D}), "bfloat16")
        kv_s = T.alloc_shared((2, {BI}, {D}), "bfloat16")
        p_s = T.alloc_shared(({H}, {BI}), "bfloat16")
        acc = T.alloc_fragment(({H}, {BI}), "float32")
        o_l = T.alloc_fragment(({H}, {D // 2}), "float32")
        o_r = T.alloc_fragment(({H}, {D // 2}), "float32")
        full = T.alloc_barrier(arrive_count=[128, 128])
        empty = T.alloc_barrier(arrive_count=[256, 256])
        p_full = T.alloc_barrier(arrive_count=128)
        p_empty = T.alloc_barrier(arrive_count=128)
        T.copy(Q[bx * {H}:(bx + 1) * {H}, :], q_s)
        tx = T.get_thread_binding()
        if tx < 128:
            T.set_max_nreg(240, 1)
            T.fill(o_l, 0)
            for i in T.serial({N}):
                T.barrier_wait(full[i % 2], (i // 2) & 1)
                T.clear(acc)
                T.gemm(q_s, kv_s[i % 2, :, :], acc, transpose_B=True)
                T.barrier_wait(p_empty[0], (i & 1) ^ 1)
                T.copy(acc, p_s)
                T.fence_proxy_async()
                T.barrier_arrive(p_full[0])
                T.gemm(p_s, kv_s[i % 2, :, 0:{D // 2}], o_l)
                T.barrier_arrive(empty[i % 2])
            T.copy(o_l, O[bx * {H}:(bx + 1) * {H}, 0:{D // 2}])
        elif tx < 256:
            T.set_max_nreg(240, 1)
            T.fill(o_r, 0)
            for i in T.serial({N}):
                T.barrier_wait(full[i % 2], (i // 2) & 1)
                T.barrier_wait(p_full[0], i & 1)
                T.gemm(p_s, kv_s[i % 2, :, {D // 2}:{D}], o_r)
                T.barrier_arrive(p_empty[0])
                T.barrier_arrive(empty[i % 2])
            T.copy(o_r, O[bx * {H}:(bx + 1) * {H}, {D // 2}:{D}])
        else:
            T.set_max_nreg(80, 0)
            for i in T.serial({N}):
                T.barrier_wait(empty[i % 2], ((i // 2) & 1) ^ 1)
                T.copy(KV[i * {BI}:(i + 1) * {BI}, :], kv_s[i % 2, :, :])
                T.fence_proxy_async()
                T.barrier_arrive(full[i % 2])
'''

# what each mutation replaces in WARP_SPECIALIZED (one occurrence each)
PRODUCER_WAIT = "                T.barrier_wait(empty[i % 2], ((i // 2) & 1) ^ 1)\n"
FULL_WAIT = "                T.barrier_wait(full[i % 2], (i // 2) & 1)\n"
CONSUMER_WAIT = f"            for i in T.serial({N}):\n{FULL_WAIT}                T.clear(acc)\n"   # consumer 1's
LAST_READ_THEN_RELEASE = (f"                T.gemm(p_s, kv_s[i % 2, :, 0:{D // 2}], o_l)\n"     # consumer 1's
                          "                T.barrier_arrive(empty[i % 2])\n")
RELEASE_THEN_LAST_READ = ("                T.barrier_arrive(empty[i % 2])\n"
                          f"                T.gemm(p_s, kv_s[i % 2, :, 0:{D // 2}], o_l)\n")
FULL_COUNTS = "full = T.alloc_barrier(arrive_count=[128, 128])"
EMPTY_COUNTS = "empty = T.alloc_barrier(arrive_count=[256, 256])"


def mutated(old: str, new: str) -> str:
    assert WARP_SPECIALIZED.count(old) == 1, old
    return WARP_SPECIALIZED.replace(old, new)


@pytest.fixture
def load(tmp_path):
    def compile_source(source: str, name: str = "warp_specialized") -> Program:
        path = os.path.join(str(tmp_path), f"{name}_{abs(hash(source))}.py")
        with open(path, "w") as f:
            f.write(HEADER + source.strip() + "\n")
        return Program(load_prim_func(path, name))
    return compile_source


def inputs():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(BLOCKS * H, D, generator=g).bfloat16()
    kv = torch.randn(N * BI, D, generator=g).bfloat16()
    return q, kv


def reference(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """O = sum over steps of bf16(Q K_i^T) V_i, K_i = V_i the step's KV tile (P is rounded to bf16 as p_s is)."""
    out = torch.zeros(q.shape[0], D, dtype=torch.float64)
    for i in range(N):
        tile = kv[i * BI:(i + 1) * BI].double()
        p = (q.double() @ tile.T).float().bfloat16().double()
        out += p @ tile
    return out.float()


def without_hanging(program: Program, args, timeout: float = 20.0, **policy):
    """program.run(args, **policy); one that has not ended after `timeout` seconds fails the test (a hang:
    the interpreter must report a deadlock, not wait for one)."""
    result: dict = {}

    def target():
        try:
            program.run(args, **policy)
        except BaseException as e:          # re-raised in the test's thread
            result["error"] = e
    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), f"the interpreter hung ({policy})"
    if "error" in result:
        raise result["error"]


def run(program: Program, order: str, switch: str = "wait") -> torch.Tensor:
    """The warp-specialized program's O under the role order and switch."""
    q, kv = inputs()
    out = torch.full((BLOCKS * H * D,), float("nan"))
    without_hanging(program, [q.reshape(-1), kv.reshape(-1), out], role_order=order, role_switch=switch)
    return out.view(BLOCKS * H, D)


def matches_reference(out: torch.Tensor) -> bool:
    q, kv = inputs()
    return torch.allclose(out, reference(q, kv), atol=1e-4, rtol=1e-4)


# -- the correct program --------------------------------------------------------------------------------
@pytest.mark.parametrize("switch", SWITCHES)
@pytest.mark.parametrize("order", ORDERS)
def test_warp_specialized_matches_reference(load, order, switch):
    out = run(load(WARP_SPECIALIZED), order, switch)
    q, kv = inputs()
    torch.testing.assert_close(out, reference(q, kv), atol=1e-4, rtol=1e-4)


def test_the_scheduling_policy_is_checked(load):
    program = load(WARP_SPECIALIZED)
    with pytest.raises(ValueError, match="role_order 'producer_first': expected one of lowest_first, highest_first"):
        run(program, "producer_first")
    with pytest.raises(ValueError, match="role_switch 'never'"):
        run(program, "lowest_first", "never")


# -- missing synchronisation ----------------------------------------------------------------------------
def outcomes(program: Program, switch: str = "wait") -> dict[str, str]:
    """Per role order: 'correct', 'wrong numbers', or the error's name."""
    seen = {}
    for order in ORDERS:
        try:
            out = run(program, order, switch)
        except InterpreterError as e:
            seen[order] = type(e).__name__
            continue
        seen[order] = "correct" if matches_reference(out) else "wrong numbers"
    return seen


def test_producer_not_waiting_for_the_consumers_is_caught(load):
    # the producer overwrites a version of kv_s the consumers still read
    seen = outcomes(load(mutated(PRODUCER_WAIT, "")))
    assert any(v != "correct" for v in seen.values()), seen


def test_consumer_not_waiting_for_the_producer_is_caught(load):
    program = load(mutated(CONSUMER_WAIT, CONSUMER_WAIT.replace(FULL_WAIT, "")))
    assert any(v != "correct" for v in outcomes(program).values())
    # run first, consumer 1 reads kv_s before the producer has written it
    with pytest.raises(UninitializedRead, match=r"read of kv_s\[0, 0, 0\] before anything wrote it.*"
                                                r"threads \[0, 128\)"):
        run(program, "lowest_first")


def test_releasing_a_buffer_before_the_last_read_is_caught_when_arrives_switch_roles(load):
    # consumer 1 releases its kv_s version (the second of the two consumers' arrivals), then reads it: run
    # until it blocks, it reads before the producer can overwrite; switching at the arrive, the producer
    # (run first) overwrites the version first
    program = load(mutated(LAST_READ_THEN_RELEASE, RELEASE_THEN_LAST_READ))
    assert outcomes(program, "wait") == {"lowest_first": "correct", "highest_first": "correct"}
    assert outcomes(program, "arrive")["highest_first"] == "wrong numbers"


# -- wrong arrive counts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
def test_an_arrive_count_never_reached_is_a_deadlock(load, order):
    # full expects both consumers' threads, only the producer's 128 arrive: every role ends up waiting
    program = load(mutated(FULL_COUNTS, "full = T.alloc_barrier(arrive_count=[256, 256])"))
    with pytest.raises(Deadlock, match=r"threads \[0, 128\) wait on full\[0\] for parity 0 \(0 phases completed, "
                                       r"128 of 256 arrivals in the current one\).*threads \[256, 384\) wait on "
                                       r"empty\[0\] for parity 0.*block \(bx=0\)"):
        run(program, order)


def test_more_arrivals_than_a_phase_expects(load):
    # the two consumers' 256 threads arrive on a barrier that expects 200 a phase
    program = load(mutated(EMPTY_COUNTS, "empty = T.alloc_barrier(arrive_count=[200, 200])"))
    for order in ORDERS:
        with pytest.raises(BarrierOverflow, match=r"128 threads arrive on empty\[0\], which expects 200 arrivals a "
                                                  r"phase and has 128 in this one"):
            run(program, order)


# -- thread ids, block-wide arrivals, thread-level code in a role ----------------------------------------
ROLE_IDS = '''
@T.prim_func
def role_ids(ids: T.Tensor((384,), "int32"), counts: T.Tensor((3,), "int32")):
    with T.Kernel(1, threads=384) as bx:
        s = T.alloc_shared((128,), "int32")
        n = T.alloc_var("int32")
        all_here = T.alloc_barrier(arrive_count=384)
        ready = T.alloc_barrier(arrive_count=[1, 128])
        n = 0
        T.barrier_arrive(all_here[0])
        T.barrier_wait(all_here[0], 0)
        tx = T.get_thread_binding()
        if tx < 128:
            T.barrier_wait(ready[0], 0)
            ids[tx] = tx
            n = n + 1
            counts[0] = n
        elif tx < 256:
            T.barrier_wait(ready[1], 0)
            ids[tx] = s[tx - 128]
            counts[1] = n
        else:
            for j in T.Parallel(128):
                s[j] = j + 128
            T.barrier_arrive(ready[1])
            if tx == 256:
                T.barrier_arrive(ready[0])
            ids[tx] = tx
            n = n + 2
            counts[2] = n
'''


@pytest.mark.parametrize("order", ORDERS)
def test_roles_see_their_own_threads_and_barriers_count_the_threads_arriving(load, order):
    ids, counts = torch.full((384,), -1, dtype=torch.int32), torch.full((3,), -1, dtype=torch.int32)
    without_hanging(load(ROLE_IDS, "role_ids"), [ids, counts], role_order=order)
    assert torch.equal(ids, torch.arange(384, dtype=torch.int32))
    assert counts.tolist() == [1, 0, 2]       # a thread-local variable is each role's own


def test_a_block_wide_wait_nothing_can_complete_is_a_deadlock(load):
    source = ROLE_IDS.replace("arrive_count=384", "arrive_count=385")
    with pytest.raises(Deadlock, match=r"all 384 threads of the block wait on all_here\[0\] for parity 0"):
        without_hanging(load(source, "role_ids"), [torch.zeros(384, dtype=torch.int32),
                                                   torch.zeros(3, dtype=torch.int32)])
