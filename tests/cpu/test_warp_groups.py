"""tle.gpu.warp_group: the frontend's attributes, TileLang's warp-specialized lowering (one branch per group,
hand-offs through mbarriers, cp.async row gathers), its errors, and the numbers both backends give on CPU
(the interpreter of TileLang programs runs the groups as roles synchronised by the barriers; Triton's
interpreter runs the program in order)."""
import re

import pytest
import torch
import triton.language as tl

import tle
from tle.errors import LaunchError
from tle.lowering.errors import LoweringError, UnsupportedConstruct
from tle.lowering.ir import ops
from tle.lowering.tilelang import warp_group_code
from tle.lowering.tilelang.interpreter import InterpreterError

needs_tilelang = pytest.mark.skipif(tle.available_backends().get("tilelang") is not None,
                                    reason="TileLang is not installed")
ORDERS = ("lowest_first", "highest_first")
M, N, D, STEPS = 64, 64, 128, 5


@tle.jit
def two_consumers(q_ptr, kv_ptr, out_ptr, steps, M: tl.constexpr, N: tl.constexpr, D: tl.constexpr,
                  TURNS: tl.constexpr = False):
    """Group 0 copies each step's keys into shared memory; group 1 computes P = q kᵀ / 100 and the left half of
    P k, and hands P to group 2, which computes the right half. TURNS: the two halves' products take turns."""
    rows = tl.arange(0, M)
    half = tl.arange(0, D // 2)
    keys = tl.arange(0, N)
    q_lo = tle.gpu.alloc([M, D // 2], tl.float16)
    q_hi = tle.gpu.alloc([M, D // 2], tl.float16)
    tle.gpu.copy(q_ptr + rows[:, None] * D + half[None, :], q_lo, [M, D // 2])
    tle.gpu.copy(q_ptr + rows[:, None] * D + D // 2 + half[None, :], q_hi, [M, D // 2])
    p_buf = tle.gpu.alloc([M, N], tl.float16)
    acc_lo = tl.zeros([M, D // 2], tl.float32)
    acc_hi = tl.zeros([M, D // 2], tl.float32)
    for i in tle.gpu.pipeline(0, steps, num_stages=2):
        kv_lo = tle.gpu.alloc([N, D // 2], tl.float16)
        kv_hi = tle.gpu.alloc([N, D // 2], tl.float16)
        with tle.gpu.warp_group(0, registers=56):
            base = kv_ptr + (i * N + keys)[:, None] * D
            tle.gpu.copy(base + half[None, :], kv_lo, [N, D // 2])
            tle.gpu.copy(base + D // 2 + half[None, :], kv_hi, [N, D // 2])
        with tle.gpu.warp_group(1, registers=224):
            s = tl.dot(tle.gpu.local_load(q_lo), tl.trans(tle.gpu.local_load(kv_lo)))
            s = tl.dot(tle.gpu.local_load(q_hi), tl.trans(tle.gpu.local_load(kv_hi)), s)
            tle.gpu.local_store(p_buf, (s * 0.01).to(tl.float16))
            with tle.gpu.turn(enabled=TURNS):
                acc_lo = tl.dot(tle.gpu.local_load(p_buf), tle.gpu.local_load(kv_lo), acc_lo)
        with tle.gpu.warp_group(2, registers=224):
            with tle.gpu.turn(enabled=TURNS):
                acc_hi = tl.dot(tle.gpu.local_load(p_buf), tle.gpu.local_load(kv_hi), acc_hi)
    with tle.gpu.warp_group(1):
        tl.store(out_ptr + rows[:, None] * D + half[None, :], acc_lo)
    with tle.gpu.warp_group(2):
        tl.store(out_ptr + rows[:, None] * D + D // 2 + half[None, :], acc_hi)


def _two_consumers_reference(q, kv, steps):
    out = torch.zeros(q.shape, dtype=torch.float32)
    for i in range(steps):
        k = kv[i * N:(i + 1) * N].float()
        out += (q.float() @ k.T * 0.01).half().float() @ k
    return out


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(M, D, generator=g).half(), torch.randn(STEPS * N, D, generator=g).half(), torch.empty(M, D)


def _tilelang_source(kernel=two_consumers, **kw):
    q, kv, out = _inputs()
    return kernel.lower(q, kv, out, STEPS, M=M, N=N, D=D, grid=(1,), backend="tilelang", num_warps=12, **kw).source


# -- frontend ------------------------------------------------------------------------------------------------
def test_ops_in_a_warp_group_block_carry_its_index_and_the_kernel_its_registers():
    q, kv, out = _inputs()
    ir = two_consumers.lower(q, kv, out, STEPS, M=M, N=N, D=D, grid=(1,), backend="triton", num_warps=12).kernel
    groups = {op.attrs.get("warp_group") for op in ir.walk() if op.defn is ops.DOT}
    assert groups == {1, 2}
    assert not any("warp_group" in op.attrs for op in ir.body.ops if op.defn is ops.FOR)   # the loop is everyone's
    assert ir.warp_groups == {0: 56, 1: 224, 2: 224}


@pytest.mark.parametrize("body, message", [
    ("with tle.gpu.warp_group(0):\n        with tle.gpu.warp_group(1):\n            pass", "do not nest"),
    ("with tle.gpu.warp_group(-1):\n        pass", "index must be a constexpr int >= 0"),
    ("with tle.gpu.warp_group(0, registers=300):\n        pass", "registers must be a constexpr multiple of 8"),
    ("with tle.gpu.warp_group(0) as g:\n        pass", "only as `with tle.gpu.warp_group(k):`"),
    ("with open('x'):\n        pass", "only as `with tle.gpu.warp_group(k):`"),
    ("with tle.gpu.turn():\n        pass", "tle.gpu.turn blocks go inside a tle.gpu.warp_group block"),
    ("with tle.gpu.warp_group(0):\n        with tle.gpu.turn():\n            with tle.gpu.turn():\n"
     "                pass", "and do not nest"),
    ("with tle.gpu.warp_group(0):\n        with tle.gpu.turn(x_ptr):\n            pass", "enabled must be a constexpr"),
])
def test_bad_warp_group_blocks_are_errors_at_their_line(tmp_path, body, message):
    src = tmp_path / "bad_kernel.py"
    src.write_text("import triton.language as tl\nimport tle\n\n\n@tle.jit\ndef bad(x_ptr):\n    " + body + "\n")
    import importlib.util
    spec = importlib.util.spec_from_file_location("bad_kernel", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(LoweringError, match=re.escape(message)) as e:
        mod.bad.lower(torch.empty(4), grid=(1,), backend="triton")
    assert "bad_kernel.py:" in str(e.value)


def test_launch_takes_a_multiple_of_four_warps_and_triton_runs_a_power_of_two():
    q, kv, out = _inputs()
    low = two_consumers.lower(q, kv, out, STEPS, M=M, N=N, D=D, grid=(1,), backend="triton", num_warps=12)
    assert "num_warps=12: Triton launches a power of two of warps, so 8" in low.notes
    assert any("warp_group: stock Triton has no warp-group roles" in n for n in low.notes)
    # decided once: the IR, the generated source, inspection and the launch all say 8 on Triton, 12 on TileLang
    assert low.num_warps == 8 and "launch {num_warps=8, num_stages=3}" in low.ir
    assert "# launch: num_warps=8, num_stages=3" in low.source and low.compiled.ir.options.num_warps == 8
    if tle.available_backends()["tilelang"] is None:
        low = two_consumers.lower(q, kv, out, STEPS, M=M, N=N, D=D, grid=(1,), backend="tilelang", num_warps=12)
        assert low.num_warps == 12 and "launch {num_warps=12, num_stages=3}" in low.ir
        assert "T.Kernel(1, threads=384)" in low.source
    with pytest.raises(LaunchError, match="multiple of 4"):
        two_consumers[(1,)](q, kv, out, STEPS, M=M, N=N, D=D, backend="triton", num_warps=6)


# -- TileLang lowering ---------------------------------------------------------------------------------------
@needs_tilelang
def test_tilelang_gives_each_group_a_branch_and_each_hand_off_a_barrier_pair():
    src = _tilelang_source()
    assert "with T.Kernel(1, threads=384)" in src
    assert "if tx < 128:" in src and "elif tx < 256:" in src and "else:" in src
    assert "T.set_max_nreg(56, 0)" in src and src.count("T.set_max_nreg(224, 1)") == 2
    # kv_hi is read by both consumers: its release needs both groups' 256 threads; the keys are allocated in
    # the loop, so they get two versions (step i uses version i % 2); p_buf, allocated outside, one
    assert "kv_hi_empty = T.alloc_barrier(arrive_count=[256, 256])" in src
    assert "kv_lo_empty = T.alloc_barrier(arrive_count=[128, 128])" in src
    assert "p_buf_full = T.alloc_barrier(arrive_count=[128])" in src
    assert "kv_lo = T.alloc_shared((2, 64, 64), 'float16')" in src
    assert "T.barrier_wait(kv_lo_empty[i % 2], ((i // 2) & 1) ^ 1)" in src
    # the first product of s is issued without a wait; the releases of its operands follow the last one
    assert "T.wgmma_gemm(q_lo, kv_lo[i_1 % 2, :, :], s, transpose_B=True)" in src


def _run_two_consumers_on_tilelang(monkeypatch, order):
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_ORDER", order)
    q, kv, out = _inputs()
    two_consumers.interpret_tilelang((1,), q, kv, out, STEPS, M=M, N=N, D=D, num_warps=12)
    return (out - _two_consumers_reference(q, kv, STEPS)).abs().max().item()


@needs_tilelang
@pytest.mark.parametrize("order", ORDERS)
def test_tilelang_groups_give_the_programs_numbers(monkeypatch, tmp_cache, order):
    assert _run_two_consumers_on_tilelang(monkeypatch, order) < 2e-3


def test_triton_runs_the_groups_in_program_order():
    q, kv, out = _inputs()
    two_consumers[(1,)](q, kv, out, STEPS, M=M, N=N, D=D, backend="triton", num_warps=12)
    assert (out - _two_consumers_reference(q, kv, STEPS)).abs().max().item() < 2e-3


def failures_without_waits(monkeypatch, kernel, error_at_order, dropped, tolerance) -> int:
    """Under how many role orders the lowering of `kernel` without the hand-off waits `dropped(h, group, section)`
    picks gives an error above `tolerance` (`error_at_order(monkeypatch, order)` runs it) or an interpreter
    error: the mutation a test of a hand-off's waits must catch."""
    real = warp_group_code._wait

    def without(g, h, group, section, indent):
        if not dropped(h, group, section):
            real(g, h, group, section, indent)
    monkeypatch.setattr(warp_group_code, "_wait", without)
    failures = 0
    for order in ORDERS:
        monkeypatch.setattr(kernel, "_cache", {})       # lower it again, with the mutation
        try:
            failures += error_at_order(monkeypatch, order) > tolerance
        except InterpreterError:
            failures += 1
    return failures


@needs_tilelang
@pytest.mark.parametrize("dropped", ["writer", "reader"])
def test_a_hand_off_without_its_wait_fails(monkeypatch, tmp_cache, dropped):
    """Mutation: the lowering without the writer's wait for the readers' release (or without the readers' wait
    for the writer) gives wrong numbers or an interpreter error under at least one role order."""
    assert failures_without_waits(monkeypatch, two_consumers, _run_two_consumers_on_tilelang,
                                  lambda h, group, section: (group == h.writer) == (dropped == "writer"), 2e-3)


@tle.jit
def _cross_group_tile(x_ptr, y_ptr):
    i = tl.arange(0, 16)
    for k in tle.gpu.pipeline(0, 2, num_stages=2):
        with tle.gpu.warp_group(0):
            t = tl.load(x_ptr + i)
        with tle.gpu.warp_group(1):
            tl.store(y_ptr + i, t)


@tle.jit
def _two_writers(x_ptr, y_ptr):
    i = tl.arange(0, 16)
    buf = tle.gpu.alloc([16], tl.float32)
    for k in tle.gpu.pipeline(0, 2, num_stages=2):
        with tle.gpu.warp_group(0):
            tle.gpu.copy(x_ptr + i, buf, [16])
        with tle.gpu.warp_group(1):
            tle.gpu.local_store(buf, tle.gpu.local_load(buf) + 1)
        with tle.gpu.warp_group(2):
            tl.store(y_ptr + i, tle.gpu.local_load(buf))


@tle.jit
def _read_before_write(x_ptr, y_ptr):
    i = tl.arange(0, 16)
    buf = tle.gpu.alloc([16], tl.float32)
    for k in tle.gpu.pipeline(0, 2, num_stages=2):
        with tle.gpu.warp_group(1):
            tl.store(y_ptr + i, tle.gpu.local_load(buf))
        with tle.gpu.warp_group(0):
            tle.gpu.copy(x_ptr + i, buf, [16])


@tle.jit
def _store_outside_groups(x_ptr, y_ptr):
    i = tl.arange(0, 16)
    with tle.gpu.warp_group(0):
        t = tl.load(x_ptr + i)
        tl.store(y_ptr + i, t)
    tl.store(y_ptr + i, tl.load(x_ptr + i))


@tle.jit
def _too_many_registers(x_ptr, y_ptr):
    i = tl.arange(0, 16)
    buf = tle.gpu.alloc([16], tl.float32)
    with tle.gpu.warp_group(0, registers=256):
        tle.gpu.copy(x_ptr + i, buf, [16])
    with tle.gpu.warp_group(1, registers=264 - 8):
        tl.store(y_ptr + i, tle.gpu.local_load(buf))
    with tle.gpu.warp_group(2, registers=24):
        pass


@tle.jit
def _turns(x_ptr, y_ptr, WHERE: tl.constexpr):
    """Groups 1 and 2 read what group 0 copies, each step; WHERE puts turn blocks where they cannot be taken."""
    i = tl.arange(0, 16)
    acc1 = tl.zeros([16], tl.float32)
    acc2 = tl.zeros([16], tl.float32)
    for step in range(4):
        buf = tle.gpu.alloc([16], tl.float32)
        with tle.gpu.warp_group(0):
            tle.gpu.copy(x_ptr + i, buf, [16])
        with tle.gpu.warp_group(1):
            with tle.gpu.turn():
                acc1 += tle.gpu.local_load(buf)
            if WHERE == "twice in one group":
                with tle.gpu.turn():
                    acc1 += tle.gpu.local_load(buf)
        with tle.gpu.warp_group(2):
            with tle.gpu.turn(enabled=WHERE != "in one group"):
                acc2 += tle.gpu.local_load(buf)
    with tle.gpu.warp_group(1):
        with tle.gpu.turn(enabled=WHERE == "after the loop"):
            tl.store(y_ptr + i, acc1)
    with tle.gpu.warp_group(2):
        tl.store(y_ptr + 16 + i, acc2)


@needs_tilelang
@pytest.mark.parametrize("where, message", [
    ("in one group", "only warp group 1 has turn blocks in this loop"),
    ("twice in one group", r"different numbers of turn blocks in this loop \(\{1: 2, 2: 1\}\)"),
    ("after the loop", "a turn block goes in a loop that holds several warp groups"),
])
def test_turns_that_cannot_be_taken_are_errors_naming_the_line(where, message):
    x, y = torch.randn(16), torch.empty(32)
    with pytest.raises(UnsupportedConstruct, match=message) as e:
        _turns.lower(x, y, WHERE=where, grid=(1,), backend="tilelang", num_warps=12)
    assert "test_warp_groups.py:" in str(e.value)


@needs_tilelang
@pytest.mark.parametrize("kernel, warps, message", [
    (_too_many_registers, 12, "more than the 65536 registers of the SM"),
    (_cross_group_tile, 8, "a tile computed in warp group 0 .* and read in warp group 1"),
    (_two_writers, 12, r"written by warp groups \[0, 1\]"),
    (_read_before_write, 8, "read by warp group 1 before warp group 0 writes it"),
    (_store_outside_groups, 4, "'store' outside every tle.gpu.warp_group block"),
    (_cross_group_tile, 4, "2 warp groups need num_warps=8"),
])
def test_what_tilelang_cannot_hand_over_is_an_error_naming_the_line(kernel, warps, message):
    x, y = torch.randn(16), torch.empty(16)
    with pytest.raises(UnsupportedConstruct, match=message) as e:
        kernel.lower(x, y, grid=(1,), backend="tilelang", num_warps=warps)
    assert "test_warp_groups.py:" in str(e.value)


# -- the sparse-MLA forward in warp groups (its numbers on both backends: test_kernels_interpreter.py) -------
@needs_tilelang
def test_sparse_mla_warp_groups_gather_rows_with_cp_async_and_build_for_sm90a(tmp_cache):
    import tle.kernels.sparse_mla_attention as m
    from tle.cli import meta_copy
    launch = m.sparse_mla_fwd_warp_groups_kernel.example("cpu", "small")
    low = m.sparse_mla_fwd_warp_groups_kernel.lower(*[meta_copy(a) for a in launch.args], grid=launch.grid,
                                                    backend="tilelang", **launch.kwargs)
    assert low.source.count("T.ptx_cp_async(") == 3          # the three row gathers
    assert "T.cp_async_barrier_noinc(kv_lo_full[it % 2])" in low.source
    cuda = str(low.stage("cuda"))
    assert "cp_async_gs_conditional<16>" in cuda and "mbarrier_cp_async_arrive_noinc" in cuda
    assert "warpgroup_reg_alloc<240>" in cuda and "warpgroup_reg_dealloc<80>" in cuda


@pytest.mark.parametrize("group, d_v, dt, backend, sm90, smem, chosen", [
    (128, 512, 576, "tilelang", True, 227 * 1024, "warp_groups"),   # DeepSeek's shape on an H100 / H200
    (40, 64, 96, "tilelang", True, 227 * 1024, "warp_groups"),      # a partial 64-head tile
    (128, 512, 576, "triton", True, 227 * 1024, "plain"),           # Triton drops the groups
    (128, 512, 576, "tilelang", False, 227 * 1024, "plain"),        # no wgmma / setmaxnreg before sm_90
    (8, 512, 576, "tilelang", True, 227 * 1024, "warp_groups"),     # a 64-head tile mostly padding, still faster
    (128, 32, 48, "tilelang", True, 227 * 1024, "plain"),           # halves of 16 value columns
    (128, 512, 640, "tilelang", True, 227 * 1024, "plain"),         # the buffers outgrow shared memory
    (128, 512, 576, "tilelang", True, 200 * 1024, "plain"),
])
def test_sparse_mla_forward_runs_in_warp_groups_on_tilelang_where_it_fits(group, d_v, dt, backend, sm90, smem,
                                                                          chosen):
    import tle.kernels.sparse_mla_attention as m
    kernel, cfg = m.fwd_kernel(group, d_v, dt, backend, sm90=sm90, smem_bytes=smem)
    expected = m.sparse_mla_fwd_warp_groups_kernel if chosen == "warp_groups" else m.sparse_mla_fwd_kernel
    assert kernel is expected
    assert cfg["num_warps"] == (12 if chosen == "warp_groups" else m.fwd_config(group, backend)["num_warps"])


@pytest.mark.parametrize("head_dim, seqlen_q, backend, sm90, chosen, scale", [
    (64, 1024, "tilelang", True, "warp_groups", 0.125),
    (32, 65, "tilelang", True, "warp_groups", 0.125),
    (128, 8192, "tilelang", True, "plain", 0.125),   # not clearly faster there
    (64, 64, "tilelang", True, "plain", 0.125),      # one block of 64 queries: half of 128 rows idle
    (64, 1024, "triton", True, "plain", 0.125),
    (64, 1024, "tilelang", False, "plain", 0.125),
    (64, 1024, "tilelang", True, "plain", -0.125),   # the scale folds into exp2's argument: positive only
    (64, 1024, "tilelang", True, "plain", 0.0),
    (64, 1024, "tilelang", True, "plain", 1e5),      # -1e30 x scale would overflow
])
def test_flash_attention_forward_runs_in_warp_groups_on_tilelang_at_small_head_dims(head_dim, seqlen_q, backend,
                                                                                    sm90, chosen, scale):
    import tle.kernels.flash_attention as fa
    import tle.kernels.flash_attention_warp_groups as wg
    kernel, cfg = fa.fwd_kernel(head_dim, seqlen_q, backend, sm90=sm90, scale=scale)
    expected = wg.flash_attention_fwd_warp_groups_kernel if chosen == "warp_groups" else fa.flash_attention_fwd_kernel
    assert kernel is expected
    assert (cfg["num_warps"] == 12) == (chosen == "warp_groups")


def test_the_warp_group_forward_computes_the_next_scores_ahead_without_the_causal_mask():
    import tle.kernels.flash_attention as fa
    from tle.kernels.attention_parts import CAUSAL, Scores
    for scores, ahead in ((Scores(), True), (CAUSAL, False)):
        kernel, cfg = fa.fwd_kernel(64, 1024, "tilelang", sm90=True, scale=0.125, scores=scores)
        assert kernel is fa.warp_groups.flash_attention_fwd_warp_groups_kernel and cfg["AHEAD"] is ahead


@needs_tilelang
def test_flash_attention_warp_groups_copy_blocks_with_tma_and_keep_p_in_registers(tmp_cache):
    """The loader copies each key/value block (a box of rows whose mask is the tensor's edge) with a TMA load
    and arrives on the hand-off's barrier; each consumer's products are FullRow on its own 4 warps, so P is the
    A operand of P v straight from registers (the scores pass through an `if` that masks the edge blocks
    only)."""
    import tle.kernels.flash_attention_warp_groups as m
    from tle.cli import meta_copy
    launch = m.flash_attention_fwd_warp_groups_kernel.example("cpu", "small")
    low = m.flash_attention_fwd_warp_groups_kernel.lower(*[meta_copy(a) for a in launch.args], grid=launch.grid,
                                                         backend="tilelang", **launch.kwargs)
    assert "T.ptx_cp_async(" not in low.source
    for name in ("k", "v"):
        copy = (f"T.tma_copy({name}_ptr_v[b, start_n:start_n + 128, T.truncdiv(h, 2), 0:32], {name}_buf[it % 2, :, :], "
                f"barrier={name}_buf_full[it % 2])\n")
        assert copy + f"                T.barrier_arrive({name}_buf_full[it % 2])" in low.source
    assert low.source.count("policy=T.GemmWarpPolicy.FullRow") == 4          # QK and PV in each consumer
    half, block_n = launch.kwargs["BLOCK_M"] // 2, launch.kwargs["BLOCK_N"]
    assert f"T.alloc_shared(({half}, {block_n})" not in low.source            # P never goes through shared
    assert low.source.count(f"T.alloc_fragment(({half}, {block_n}), 'float16')") == 2


@needs_tilelang
def test_flash_attention_warp_groups_copy_packed_blocks_with_cp_async(tmp_cache):
    """On packed sequences the blocks' mask is a sequence's end, not the tensor's edge: a TMA load would read
    the next sequence's rows, so the loader gathers the rows with cp.async, zero-filled past the end."""
    import tle.kernels.flash_attention_warp_groups as m
    from tle.kernels.attention_parts import Problem
    q, k = torch.empty(96, 4, 32, dtype=torch.float16), torch.empty(96, 2, 32, dtype=torch.float16)
    cu = torch.tensor([0, 40, 96], dtype=torch.int32)
    out, lse = torch.empty_like(q), torch.empty(4, 96)
    pr = Problem(q, k, cu, cu, 56, 56)
    src = m.flash_attention_fwd_warp_groups_kernel.lower(
        q, k, k, out, lse, cu, cu, 0.125, *pr.strides(q), *pr.strides(k), *pr.strides(k), *pr.strides(out),
        *pr.lse_strides(lse), pr.seqlen_q, pr.seqlen_k, grid=(1, 8), backend="tilelang", H=4, GROUP=2, HEAD_DIM=32,
        CAUSAL=True, VARLEN=True, **m.fwd_warp_groups_config(32)).source
    assert src.count("T.ptx_cp_async(") == 2 and "T.tma_copy(" not in src
    assert "T.cp_async_barrier_noinc(k_buf_full[it % 2])" in src


# -- turns (tle.gpu.turn) ------------------------------------------------------------------------------------
@needs_tilelang
def test_turns_give_each_group_a_barrier_the_previous_group_arrives_on():
    src = _tilelang_source(TURNS=True)
    assert "turn_1 = T.alloc_barrier(arrive_count=[128])" in src and "turn_2 = T.alloc_barrier(arrive_count=[128])" in src
    # one turn a step: group 1's first wait passes on the fresh barrier (parity 1), group 2 waits for group 1
    assert "T.barrier_wait(turn_1[0], (i_1 & 1) ^ 1)" in src and "T.barrier_wait(turn_2[0], i_2 & 1)" in src
    g2 = src[src.index("        else:\n            T.set_max_nreg"):]
    # the data first (P from group 1), then the turn, the product, the turn handed on, then the release
    order = [g2.index(s) for s in ("T.barrier_wait(p_buf_full", "T.barrier_wait(turn_2[0]", "T.gemm(p_buf, kv_hi",
                                   "T.barrier_arrive(turn_1[0])", "T.barrier_arrive(kv_hi_empty")]
    assert order == sorted(order)
    assert "turn_" not in _tilelang_source(TURNS=False)


@needs_tilelang
def test_two_turns_a_step_wait_on_constant_parities(tmp_cache):
    import tle.kernels.flash_attention_warp_groups as m
    from tle.cli import meta_copy
    launch = m.flash_attention_fwd_warp_groups_kernel.example("cpu", "small")
    src = m.flash_attention_fwd_warp_groups_kernel.lower(*[meta_copy(a) for a in launch.args], grid=launch.grid,
                                                         backend="tilelang", TURNS=True, **launch.kwargs).source
    for wait in ("turn_1[0], 1)", "turn_1[0], 0)", "turn_2[0], 0)", "turn_2[0], 1)"):
        assert src.count("T.barrier_wait(" + wait) == 1, wait


@needs_tilelang
@pytest.mark.parametrize("order", ORDERS)
def test_turns_keep_the_numbers(monkeypatch, tmp_cache, order):
    import tle.kernels.flash_attention_warp_groups as m
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_ORDER", order)
    q, kv, out = _inputs()
    two_consumers.interpret_tilelang((1,), q, kv, out, STEPS, M=M, N=N, D=D, num_warps=12, TURNS=True)
    assert (out - _two_consumers_reference(q, kv, STEPS)).abs().max().item() < 2e-3
    launch = m.flash_attention_fwd_warp_groups_kernel.example("cpu", "small")
    ref = launch.reference()
    m.flash_attention_fwd_warp_groups_kernel.interpret_tilelang(launch.grid, *launch.args, TURNS=True, **launch.kwargs)
    assert (launch.outputs["out"].float() - ref["out"].float()).abs().max().item() < 2e-3


@needs_tilelang
def test_a_turn_handed_to_the_wrong_group_deadlocks(monkeypatch, tmp_cache):
    """Mutation: a group that hands the turn to itself leaves the other waiting for ever; the interpreter says
    so instead of hanging."""
    from tle.lowering.tilelang.interpreter.errors import Deadlock
    monkeypatch.setattr(warp_group_code, "_pass_turn", lambda g, turns, group, indent: g.emit(
        f"T.barrier_arrive({turns.barriers[group]}[0])", indent))
    monkeypatch.setattr(two_consumers, "_cache", {})       # lower it again, with the mutation
    q, kv, out = _inputs()
    with pytest.raises(Deadlock, match="turn_"):
        two_consumers.interpret_tilelang((1,), q, kv, out, STEPS, M=M, N=N, D=D, num_warps=12, TURNS=True)


def test_triton_drops_the_turns_with_a_note():
    q, kv, out = _inputs()
    low = two_consumers.lower(q, kv, out, STEPS, M=M, N=N, D=D, grid=(1,), backend="triton", num_warps=12,
                              TURNS=True)
    assert any("turn: with no warp-group roles there are no turns to take" in n for n in low.notes)


@needs_tilelang
def test_sparse_mla_warp_groups_shared_memory_estimate_is_what_tilelang_asks_for(tmp_cache):
    """fwd_kernel chooses the warp-group kernel where _warp_groups_shared_bytes fits the device; at DeepSeek's
    576 columns (227 KB of 227 KB) the estimate is the dynamic shared memory TileLang's build launches with."""
    import tle.kernels.sparse_mla_attention as m
    b, s, s_kv, h, dt, d_v, topk = 1, 4, 256, 64, 576, 512, 128
    q, kv = torch.empty(b, s, h, dt, dtype=torch.bfloat16), torch.empty(b, s_kv, 1, dt, dtype=torch.bfloat16)
    idx, out = torch.zeros(b, s, 1, topk, dtype=torch.int32), torch.empty(b, s, h, d_v, dtype=torch.bfloat16)
    lse = torch.empty(b, s, h)
    cfg = m.fwd_warp_groups_config()
    grid, consts = m._launch_shape(q, kv, cfg)
    low = m.sparse_mla_fwd_warp_groups_kernel.lower(
        q, kv, idx, out, lse, dt ** -0.5, *m._strides3(q), *m._strides3(kv), *m._strides3(idx), *m._strides3(out),
        lse.stride(0), lse.stride(1), s_kv, topk, D=d_v, TD=dt - d_v, grid=grid, backend="tilelang", **consts, **cfg)
    estimate = m._warp_groups_shared_bytes(dt, cfg)
    assert estimate <= 227 * 1024
    assert f"((int64_t){estimate})" in low.compiled.kernel.get_host_source()     # the launch's dynamic smem


# -- row copies become cp.async only where every address is 16-byte aligned ---------------------------------
R, C = 64, 16       # rows of 16 fp16 values: two 16-byte chunks


@tle.jit
def _rows_through_shared(x_ptr, idx_ptr, y_ptr, STRIDE: tl.constexpr, OFFSET: tl.constexpr, GATHER: tl.constexpr):
    """Group 0 copies R rows of x (row r at OFFSET + r * STRIDE; gathered through idx, or in order) into shared
    memory; group 1 stores them to y, contiguous."""
    rows = tl.arange(0, R)
    cols = tl.arange(0, C)
    for step in range(2):
        buf = tle.gpu.alloc([R, C], tl.float16)
        with tle.gpu.warp_group(0):
            if GATHER:
                src = tl.load(idx_ptr + step * R + rows)
            else:
                src = step * R + rows
            tle.gpu.copy(x_ptr + OFFSET + src[:, None] * STRIDE + cols[None, :], buf, [R, C])
        with tle.gpu.warp_group(1):
            tl.store(y_ptr + (step * R + rows)[:, None] * C + cols[None, :], tle.gpu.local_load(buf))


def _copy_rows(stride, offset, gather, lead=0):
    """(generated source, y, expected y); x starts `lead` elements into its storage."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(lead + offset + 2 * R * stride, generator=g).half()[lead:]
    idx = torch.randperm(2 * R, generator=g).to(torch.int32)
    y = torch.full((2 * R, C), float("nan")).half()
    kw = dict(STRIDE=stride, OFFSET=offset, GATHER=gather, num_warps=8)
    _rows_through_shared.interpret_tilelang((1,), x, idx, y, **kw)
    src = _rows_through_shared.lower(x, idx, y, grid=(1,), backend="tilelang", **kw).source
    rows = idx.long() if gather else torch.arange(2 * R)
    return src, y, torch.stack([x[offset + r * stride:][:C] for r in rows.tolist()])


@needs_tilelang
@pytest.mark.parametrize("gather", [False, True], ids=["box", "gather"])
@pytest.mark.parametrize("stride, offset, cp_async", [
    (24, 8, True),      # 48-byte rows, 16 bytes in
    (20, 0, False),     # 40-byte rows: every other row starts 8 bytes past a 16-byte boundary
    (16, 4, False),     # 32-byte rows, 8 bytes in
])
def test_row_copies_are_cp_async_only_at_aligned_addresses(tmp_cache, stride, offset, gather, cp_async):
    """cp.async of 16 bytes faults at an address that is not a multiple of 16 (the interpreter reports it as
    Misaligned): the column count alone (two chunks a row here) does not make a row copy one."""
    src, y, want = _copy_rows(stride, offset, gather)
    assert torch.equal(y, want)
    assert ("T.ptx_cp_async(" in src) == cp_async


@needs_tilelang
def test_a_row_copy_from_a_misaligned_tensor_is_not_cp_async(tmp_cache):
    src, y, want = _copy_rows(24, 8, False, lead=1)      # the offsets are aligned, x's own address is not
    assert torch.equal(y, want)
    assert "T.ptx_cp_async(" not in src


# -- programs the warp-group plan refuses (each error names the construct and the line) ---------------------
@tle.jit
def _groups_skip_an_index(x_ptr, y_ptr):
    i = tl.arange(0, 16)
    with tle.gpu.warp_group(0):
        tl.store(y_ptr + i, tl.load(x_ptr + i))
    with tle.gpu.warp_group(2):
        pass


@tle.jit
def _groups_in_a_while_loop(x_ptr, y_ptr):
    i = tl.arange(0, 16)
    k = 0
    while k < 2:
        with tle.gpu.warp_group(0):
            tl.store(y_ptr + i, tl.load(x_ptr + i))
        with tle.gpu.warp_group(1):
            tl.store(y_ptr + 16 + i, tl.load(x_ptr + i))
        k += 1


@tle.jit
def _handed_over_in_and_after_a_loop(x_ptr, y_ptr):
    i = tl.arange(0, 16)
    buf = tle.gpu.alloc([16], tl.float32)
    for k in tle.gpu.pipeline(0, 2, num_stages=2):
        with tle.gpu.warp_group(0):
            tle.gpu.copy(x_ptr + i, buf, [16])
        with tle.gpu.warp_group(1):
            tl.store(y_ptr + i, tle.gpu.local_load(buf))
    with tle.gpu.warp_group(0):
        tle.gpu.copy(x_ptr + i, buf, [16])
    with tle.gpu.warp_group(1):
        tl.store(y_ptr + i, tle.gpu.local_load(buf))


@needs_tilelang
@pytest.mark.parametrize("kernel, warps, message", [
    (_groups_skip_an_index, 8, r"the kernel's warp groups are \[0, 2\]; number them 0 to 1"),
    (_groups_in_a_while_loop, 8, "a while loop holding several warp groups' code"),
    (_handed_over_in_and_after_a_loop, 8, "handed over both inside a loop and after it"),
])
def test_what_the_warp_group_plan_refuses_is_an_error_naming_the_line(kernel, warps, message):
    x, y = torch.randn(16), torch.empty(32)
    with pytest.raises(LoweringError, match=message) as e:
        kernel.lower(x, y, grid=(1,), backend="tilelang", num_warps=warps)
    assert "test_warp_groups.py:" in str(e.value)
