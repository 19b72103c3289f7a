"""A warp group's product waited for where its result is first used (lowering/tilelang/product_waits.py): the
TileLang source it gives, the numbers the interpreter gives (which runs a T.wgmma_gemm only when its threads wait
for it, so a result read early or an operand overwritten early changes them), and the mutations that break it."""
import pytest
import torch
import triton.language as tl

import tle
from tle.lowering.tilelang import warp_group_code
from tle.lowering.tilelang.interpreter import InterpreterError
from tle.lowering.tilelang.warp_groups import Plan

needs_tilelang = pytest.mark.skipif(tle.available_backends().get("tilelang") is not None,
                                    reason="TileLang is not installed")
M, N, D, STEPS = 64, 64, 32, 5
SCHEDULES = [("lowest_first", "wait"), ("highest_first", "wait"), ("lowest_first", "arrive")]


@tle.jit
def scores_ahead(q_ptr, k_ptr, out_ptr, steps, M: tl.constexpr, N: tl.constexpr, D: tl.constexpr):
    """Group 0 copies each step's keys into shared memory; group 1 computes the step's scores s = q kᵀ and,
    while that product runs, adds the row sums of the previous step's squared scores to its total. Out: the
    total plus the last step's scores."""
    rows, cols, keys = tl.arange(0, M), tl.arange(0, D), tl.arange(0, N)
    q_buf = tle.gpu.alloc([M, D], tl.float16)
    tle.gpu.copy(q_ptr + rows[:, None] * D + cols[None, :], q_buf, [M, D])
    total = tl.zeros([M, N], tl.float32)
    prev = tl.zeros([M, N], tl.float32)
    for i in tle.gpu.pipeline(0, steps, num_stages=2):
        k_buf = tle.gpu.alloc([N, D], tl.float16)
        with tle.gpu.warp_group(0, registers=56):
            tle.gpu.copy(k_ptr + (i * N + keys)[:, None] * D + cols[None, :], k_buf, [N, D])
        with tle.gpu.warp_group(1, registers=224):
            s = tl.dot(tle.gpu.local_load(q_buf), tl.trans(tle.gpu.local_load(k_buf)))
            total = total + tl.sum(prev * prev, 1)[:, None]
            prev = s
    with tle.gpu.warp_group(1):
        tl.store(out_ptr + rows[:, None] * N + keys[None, :], total + prev)


def _inputs():
    g = torch.Generator().manual_seed(0)
    q = (torch.randn(M, D, generator=g) / 4).half()
    k = (torch.randn(STEPS * N, D, generator=g) / 4).half()
    return q, k, torch.full((M, N), float("nan"))


def _reference(q, k):
    s = [q.double() @ k[i * N:(i + 1) * N].double().T for i in range(STEPS)]
    return sum((x * x).sum(1, keepdim=True) for x in s[:-1]) + s[-1]


def _lower(**kw):
    q, k, out = _inputs()
    return scores_ahead.lower(q, k, out, STEPS, M=M, N=N, D=D, grid=(1,), backend="tilelang", num_warps=8, **kw)


def _run(monkeypatch, order, switch):
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_ORDER", order)
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_SWITCH", switch)
    monkeypatch.setattr(scores_ahead, "_cache", {})
    q, k, out = _inputs()
    scores_ahead.interpret_tilelang((1,), q, k, out, STEPS, M=M, N=N, D=D, num_warps=8)
    return (out.double() - _reference(q, k)).abs().max().item()


@needs_tilelang
def test_the_product_is_issued_without_a_wait_and_waited_for_before_its_first_use(tmp_cache):
    src = _lower().source
    body = src[src.index("T.wgmma_gemm("):]
    # issued, the row sums beside it, then the wait (nothing issued after it), the fence of its 64 x 64
    # fp32 result over 128 threads (32 registers each), its first use, and the keys' release
    order = [body.index(x) for x in ("T.wgmma_gemm(q_buf, k_buf[", "T.reduce_sum(", "T.wait_wgmma(0)",
                                     "T.warpgroup_fence_operand(s, num_regs=32)", "= s[i0, i1]",
                                     "T.barrier_arrive(k_buf_empty")]
    assert order == sorted(order)
    assert "T.gemm(" not in body


@needs_tilelang
@pytest.mark.parametrize("order, switch", SCHEDULES)
def test_the_numbers_are_the_programs(monkeypatch, tmp_cache, order, switch):
    assert _run(monkeypatch, order, switch) < 1e-3


def test_triton_computes_the_same():
    import os
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton's interpreter runs with TRITON_INTERPRET=1")
    q, k, out = _inputs()
    scores_ahead[(1,)](q, k, out, STEPS, M=M, N=N, D=D, backend="triton", num_warps=8)
    assert (out.double() - _reference(q, k)).abs().max().item() < 1e-3


@needs_tilelang
def test_mutation_no_wait_is_caught(monkeypatch, tmp_cache):
    monkeypatch.setattr(warp_group_code, "_wait_for_products", lambda gen, wait, indent: None)
    with pytest.raises(InterpreterError, match="never waited for|read of memory nothing wrote"):
        err = _run(monkeypatch, "lowest_first", "wait")
        assert err < 1e-3        # reached only if the interpreter raised nothing: fails the test either way


@needs_tilelang
def test_mutation_release_at_the_issue_is_caught(monkeypatch, tmp_cache):
    """Releasing the keys when the product is issued lets the loader overwrite them before the product reads
    them: with the scheduler switching at arrives, the loader runs ahead and the numbers change."""
    monkeypatch.setattr(Plan, "reads_operands_until", lambda self, op, level_ops: level_ops.index(op))
    assert _run(monkeypatch, "lowest_first", "arrive") > 1e-2


# -- the attention forward that computes the next block's scores first (AHEAD) ------------------------------
@needs_tilelang
@pytest.mark.parametrize("order, switch", SCHEDULES)
def test_flash_attention_ahead_keeps_the_numbers(monkeypatch, tmp_cache, order, switch):
    import tle.kernels.flash_attention_warp_groups as m
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_ORDER", order)
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_SWITCH", switch)
    launch = m.flash_attention_fwd_warp_groups_kernel.example("cpu", "small")
    ref = launch.reference()
    m.flash_attention_fwd_warp_groups_kernel.interpret_tilelang(launch.grid, *launch.args, AHEAD=True,
                                                                **launch.kwargs)
    for name in ("out", "lse"):
        assert (launch.outputs[name].float() - ref[name].float()).abs().max().item() < 2e-3, name


@needs_tilelang
def test_flash_attention_ahead_issues_the_next_scores_before_the_softmax(tmp_cache):
    """Each consumer's next-block scores are issued without a wait; the softmax's row maximum and P v run before
    the group waits for them at the step's end, and the next keys are released after that wait."""
    import tle.kernels.flash_attention_warp_groups as m
    from tle.cli import meta_copy
    launch = m.flash_attention_fwd_warp_groups_kernel.example("cpu", "small")
    src = m.flash_attention_fwd_warp_groups_kernel.lower(*[meta_copy(a) for a in launch.args], grid=launch.grid,
                                                         backend="tilelang", AHEAD=True, **launch.kwargs).source
    assert src.count("T.wgmma_gemm(") == 2 and src.count("T.wait_wgmma(1)") == 2
    for group in src.split("T.set_max_nreg(224, 1)")[1:]:
        order = [group.index(x) for x in ("T.wgmma_gemm(", "T.reduce_max(", "T.gemm(t", "T.wait_wgmma(1)",
                                          "T.barrier_arrive(k_next_empty")]
        assert order == sorted(order)


def _warp_group_forward(q, k, v, cu, max_q, max_k, causal, ahead, run):
    """flash_attention's warp-group forward on dense [B, S, H, D] or packed [total, H, D] (cu) inputs, run by
    `run(kernel, grid, args, kwargs)`; (out, lse) and torch's."""
    import tle.kernels.flash_attention_warp_groups as m
    from tle.kernels.attention_parts import CAUSAL, Problem, Scores, _torch_forward, cu_or_dummy, nan_like
    pr = Problem(q, k, cu, cu, max_q, max_k)
    out = nan_like(q)
    lse = torch.full(pr.lse_shape(q), float("nan"))
    cfg = m.fwd_warp_groups_config(pr.d)
    grid = ((pr.seqlen_q + cfg["BLOCK_M"] - 1) // cfg["BLOCK_M"], pr.b * pr.h)
    run(m.flash_attention_fwd_warp_groups_kernel, grid,
        (q, k, v, out, lse, cu_or_dummy(cu, lse), cu_or_dummy(cu, lse), q.shape[-1] ** -0.5, *pr.strides(q),
         *pr.strides(k), *pr.strides(v), *pr.strides(out), *pr.lse_strides(lse), pr.seqlen_q, pr.seqlen_k),
        dict(H=pr.h, GROUP=pr.group, HEAD_DIM=pr.d, CAUSAL=causal, VARLEN=cu is not None, AHEAD=ahead, **cfg))
    ref = _torch_forward(q, k, v, cu, cu, CAUSAL if causal else Scores(), q.shape[-1] ** -0.5)
    return (out, lse), ref


def _interpret(kernel, grid, args, kwargs):
    kernel.interpret_tilelang(grid, *args, **kwargs)


def _triton(kernel, grid, args, kwargs):
    import os
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton's interpreter runs with TRITON_INTERPRET=1")
    kernel[grid](*args, backend="triton", **kwargs)


@pytest.mark.parametrize("run", [pytest.param(_interpret, marks=needs_tilelang, id="tilelang"),
                                 pytest.param(_triton, id="triton")])
@pytest.mark.parametrize("s_q, s_k, causal", [(300, 300, True), (300, 300, False), (200, 72, True), (72, 330, True)])
def test_flash_attention_ahead_over_several_blocks(tmp_cache, s_q, s_k, causal, run):
    """AHEAD with loops of several steps, a last block that is partial or whole, and rows that see no key
    (bottom-right causal with more queries than keys): torch's numbers, on both backends."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, s_q, 2, 32, generator=g).half()
    k, v = (torch.randn(1, s_k, 1, 32, generator=g).half() for _ in range(2))
    (out, lse), (ref_out, ref_lse) = _warp_group_forward(q, k, v, None, None, None, causal, True, run)
    assert (out.float() - ref_out.float()).abs().max().item() < 2e-3
    seen = ref_lse.isfinite()
    assert torch.equal(lse.isfinite(), seen) and (lse[seen] - ref_lse[seen]).abs().max().item() < 1e-3


@needs_tilelang
def test_flash_attention_ahead_on_packed_sequences(tmp_cache):
    g = torch.Generator().manual_seed(2)
    cu = torch.tensor([0, 40, 300, 312], dtype=torch.int32)
    q = torch.randn(312, 2, 32, generator=g).half()
    k, v = (torch.randn(312, 1, 32, generator=g).half() for _ in range(2))
    (out, lse), (ref_out, ref_lse) = _warp_group_forward(q, k, v, cu, 260, 260, True, True, _interpret)
    assert (out.float() - ref_out.float()).abs().max().item() < 2e-3
    assert (lse - ref_lse).abs().max().item() < 1e-3
