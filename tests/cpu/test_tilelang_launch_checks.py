"""What TileLang compiled is checked before, or explained at, its first launch. A block-wide barrier inside a branch
on the thread index is found in the CUDA source and refused (lowering/tilelang/divergent_barriers.py): on the GPU,
the launch would hang. So is a pipeline stage the compute warps read after freeing it for the producer warps'
next copy (stage_reuse.py): the results would be wrong. A request for more shared memory than the GPU has is named
(shared_memory.py).

The barrier check is tried on hand-made sources, and on what TileLang really emits for the gated delta rule's WY
kernel with k read inside the expression that makes a product's operand while a broadcast vector (beta exp(g))
lays that expression's loop out one row a thread (product_feeds.py keeps k in a fragment there: forced here),
where its first launch hung on the H200."""
import pytest
import torch
import triton.language as tl

import tle

from tle.lowering.errors import LoweringError
from tle.lowering.tilelang import product_feeds
from tle.kernels.gated_delta_rule_kernels import gdr_wy_kernel
from tle.lowering.tilelang.divergent_barriers import check_barriers, divergent_barrier
from tle.lowering.tilelang.stage_reuse import check_stage_reuse, freed_before_read
from tilelang_oracle import needs_tilelang


def _kernel(body: str) -> str:
    return "extern \"C\" __global__ void k(float* x) {\n  int a = 0;\n" + body + "\n}\n"


def test_a_barrier_in_a_thread_branch_is_found_with_its_line_and_branch():
    src = _kernel("  for (int i = 0; i < 2; ++i) {\n    if ((((int)threadIdx.x) >> 6) == 0) {\n"
                  "      __syncthreads();\n      a += 1;\n    }\n  }")
    assert divergent_barrier(src) == (5, "if ((((int)threadIdx.x) >> 6) == 0)")


@pytest.mark.parametrize("body", [
    "  if (threadIdx.x < 128) {\n    a = 1;\n  } else {\n    __syncthreads();\n  }",      # the else of one
    "  for (int i = threadIdx.x; i < 9; i += 128) {\n    __syncthreads();\n  }",         # a per-thread trip count
    "  if (threadIdx.x < 64) {\n    if (a < 2) {\n      __syncthreads();\n    }\n  }",  # nested below one
])
def test_every_way_in_that_depends_on_the_thread_is_found(body):
    assert divergent_barrier(_kernel(body)) is not None


@pytest.mark.parametrize("body", [
    "  for (int i = 0; i < 4; ++i) {\n    __syncthreads();\n  }",
    "  if (a < 3) {\n    __syncthreads();\n  }",
    "  if (threadIdx.x < 128) {\n    a = 1;\n  }\n  a = 2;\n  if (a) {\n    __syncthreads();\n  }",
    "  if (threadIdx.x < 128) {\n    a = 1;\n  }\n  __syncthreads();",
])
def test_barriers_every_thread_reaches_pass(body):
    assert divergent_barrier(_kernel(body)) is None


def _lower_wy():
    """The WY kernel of the gated delta rule (w = A (k beta exp(g)), u = A (v beta)) at 2 chunks of one head."""
    gdr_wy_kernel._cache.clear()            # lowered afresh: one test changes the rule
    t, h, d = 128, 1, 128
    bf = dict(dtype=torch.bfloat16)
    k, v, w, u = (torch.zeros(1, t, h, d, **bf) for _ in range(4))
    beta, gc, ai = torch.zeros(1, t, h, **bf), torch.zeros(1, t, h), torch.zeros(1, t, h, 64, **bf)
    index = torch.tensor([[0, 64], [64, 128]], dtype=torch.int32)
    return gdr_wy_kernel.lower(k, v, beta, gc, ai, w, u, index, H=h, HV=h, K=d, V=d, BK=64, BV=64, BT=64,
                               grid=(2, h), backend="tilelang")


@needs_tilelang
def test_tilelang_source_of_the_replicated_loop_is_refused(monkeypatch):
    monkeypatch.setattr(product_feeds, "_laid_out_elsewhere", lambda *a: True)
    lowered = _lower_wy()
    assert "k_ptr[" in lowered.source.split("T.gemm")[0].split("T.Parallel(64, 64)")[-1]   # k read inside
    cuda = lowered.stage("cuda")
    line, header = divergent_barrier(cuda)
    assert "threadIdx" in header and "__syncthreads" in cuda.splitlines()[line - 1]
    with pytest.raises(LoweringError, match=r"gdr_wy_kernel .*barrier.*would hang"):
        check_barriers(cuda, lowered.compiled.ir)


@needs_tilelang
def test_the_kernel_as_lowered_has_no_such_barrier():
    lowered = _lower_wy()
    assert "kb = T.alloc_fragment" in lowered.source
    assert divergent_barrier(lowered.stage("cuda")) is None


def test_a_shared_memory_request_past_the_limit_is_named():
    """TVM's message at the launch (as the H200 gave it for 229 KB), raised again naming the kernel and limit."""
    from tle.lowering.tilelang.shared_memory import shared_memory_error
    ir = _lower_wy().compiled.ir
    err = RuntimeError("InternalError: Failed to set the allowed dynamic shared memory size to 234496 with error: "
                       "invalid argument")
    better = shared_memory_error(err, ir, 232448)
    assert isinstance(better, LoweringError)
    assert "gdr_wy_kernel" in str(better) and "234496 bytes" in str(better) and "232448" in str(better)
    assert shared_memory_error(RuntimeError("an illegal memory access was encountered"), ir, 232448) is None


@tle.jit
def masked_walk(w_ptr, u_ptr, g_ptr, k_ptr, out_ptr, g_out_ptr, s_ptr, n, m, R: tl.constexpr, C: tl.constexpr,
                G_LATE: tl.constexpr):
    """A state walk over n steps of R rows (the first m valid), reading u (a masked box) and g (a masked vector, a
    cp.async copy) ahead (is_async); g is read after the step's first product (G_LATE) or only before it."""
    rows = tl.arange(0, R)
    cols = tl.arange(0, C)
    s = tl.zeros([C, C], dtype=tl.float32)
    for c in tl.range(0, n, num_stages=3):
        at = (c * R + rows)[:, None] * C + cols[None, :]
        ok = (c * R + rows) < m
        w = tl.load(w_ptr + at)
        u = tle.load(u_ptr + at, mask=ok[:, None], other=0.0, is_async=True)
        g = tle.load(g_ptr + c * R + rows, mask=ok, other=0.0, is_async=True)
        if not G_LATE:
            tl.store(g_out_ptr + c * R + rows, g)
        v = u.to(tl.float32) - tl.dot(w, s.to(w.dtype))
        tl.store(out_ptr + at, v)
        if G_LATE:
            v = v * g[:, None]
        kb = tl.load(k_ptr + at)
        s = s + tl.dot(tl.trans(kb), v.to(kb.dtype))
    tl.store(s_ptr + cols[:, None] * C + cols[None, :], s)


def _lower_walk(g_late):
    x, g = torch.zeros(64 * 8, 64, dtype=torch.bfloat16), torch.zeros(64 * 8)
    return masked_walk.lower(x, x, g, x, torch.zeros(64 * 8, 64), g.clone(), torch.zeros(64, 64), 8, 500, R=64,
                             C=64, G_LATE=g_late, grid=(1,), backend="tilelang")


@needs_tilelang
def test_a_stage_read_after_it_is_freed_is_refused():
    lowered = _lower_walk(True)
    cuda = lowered.stage("cuda")
    line, buf = freed_before_read(cuda)
    assert buf == "g" and "((float*)g)" in cuda.splitlines()[line - 1]
    with pytest.raises(LoweringError, match=r"masked_walk .*'g'.*after freeing its pipeline stage"):
        check_stage_reuse(cuda, lowered.compiled.ir)


@needs_tilelang
def test_a_stage_read_before_it_is_freed_passes():
    """g read only before the product; u, a masked box, is copied whole (TMA) into a stage of its own."""
    lowered = _lower_walk(False)
    assert "T.copy(u_ptr" in lowered.source
    assert freed_before_read(lowered.stage("cuda")) is None


def test_a_stage_filled_once_is_never_refilled():
    """A producer wait with a constant phase (no more steps than stages): the freed stage is not filled again."""
    src = _kernel("  if (threadIdx.x < 128) {\n    for (int c = 0; c < 2; ++c) {\n      mbarrier[(c + 2)].wait(1);\n"
                  "      tl::cp_async_gs<16>((&(((half_t*)u)[c * 64])), x);\n    }\n  } else {\n"
                  "    for (int c_1 = 0; c_1 < 2; ++c_1) {\n      mbarrier[c_1].wait(0);\n"
                  "      mbarrier[(c_1 + 2)].arrive();\n      a += ((half_t*)u)[c_1 * 64];\n    }\n  }")
    assert freed_before_read(src) is None
    assert freed_before_read(src.replace(".wait(1)", ".wait(((c / 2) ^ 1))")) == (12, "u")
