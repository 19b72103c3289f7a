"""The TileLang forward over packed sequences (EDGE_TAIL): its pipelined loop reads only blocks of whole keys,
so their K and V copies need no zero-fill in shared memory (which would put a barrier of every consumer thread
before each product), and the block that reaches past a sequence's keys runs after the loop with the masked
copies. The numbers of this form are checked by the operator tests (packed samples, both interpreters). Also:
the q (and dO) blocks read past their sequence up to the packed tensor's end, and what that leaves alone."""
import contextlib

import pytest
import torch

import tle.ops
import tle.oplib.backend as op_backend
from tle.jit import Kernel
from tle.kernels import flash_attention as fa
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter


def _lowerings(monkeypatch, backend, packed, backward=False):
    """{kernel name: lowering} of the kernels flash_attention launches, forward (and backward); nothing runs."""
    lowered = {}

    def launch(kernel, grid, args, kwargs, warmup=False):
        kw = dict(kwargs)
        lowered[kernel.__name__] = kernel.lower(*args, grid=grid, **kw)
    monkeypatch.setattr(Kernel, "_launch", launch)
    monkeypatch.setattr(op_backend, "kernel_unusable_reason", lambda name, device: None)
    lens = [200, 64, 131]
    total, d = sum(lens), 128            # (head dims up to 64 take the warp-group forward on sm_90)
    q, k, v = (torch.randn(total if packed else 1, *([] if packed else [total]), 2, d, dtype=torch.float16,
                           requires_grad=True) for _ in range(3))
    if packed:
        cu = torch.tensor([0, 200, 264, 395], dtype=torch.int32)
        out = tle.ops.flash_attention(q, k, v, True, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=200,
                                      max_seqlen_k=200, backend=backend)
    else:
        out = tle.ops.flash_attention(q, k, v, True, backend=backend)
    if backward:
        out.backward(torch.ones_like(out))
    return lowered


def _forward_lowering(monkeypatch, backend, packed):
    return _lowerings(monkeypatch, backend, packed)["flash_attention_fwd_kernel"]


def _box_loads(lowered):
    return sorted(how.split(" (")[0] for _, op, kind, how in lowered.compiled.access_report
                  if op == "load" and kind == "box")


def test_packed_tilelang_forward_loop_copies_whole_blocks(monkeypatch):
    lw = _forward_lowering(monkeypatch, "tilelang", packed=True)
    assert lw.kernel.constexprs["EDGE_TAIL"] is True
    # the loop's K and V copied whole, and q, read up to the packed tensor's end (_query_rows); the tail's K and
    # V zero-filled past the keys
    assert _box_loads(lw) == ["T.copy into shared"] * 3 + ["T.copy then mask select in shared"] * 2


def test_packed_tilelang_backward_loops_copy_whole_blocks(monkeypatch):
    lowered = _lowerings(monkeypatch, "tilelang", packed=True, backward=True)
    dq, dkdv = lowered["flash_attention_bwd_dq_kernel"], lowered["flash_attention_bwd_dkdv_kernel"]
    assert dq.kernel.constexprs["EDGE_TAIL"] is True and dkdv.kernel.constexprs["EDGE_TAIL"] is True
    # the dQ kernel reads q and dO up to the packed tensor's end, its loop K and V whole, its tail masked; the
    # dK/dV kernel's loop reads q and dO whole
    assert _box_loads(dq).count("T.copy into shared") == 4
    assert _box_loads(dkdv).count("T.copy into shared") == 2


def test_edge_tail_only_where_it_helps(monkeypatch):
    assert _forward_lowering(monkeypatch, "tilelang", packed=False).kernel.constexprs["EDGE_TAIL"] is False
    assert _forward_lowering(monkeypatch, "triton", packed=True).kernel.constexprs["EDGE_TAIL"] is False
    cfg = fa.fwd_config(128, 200, "tilelang")
    assert fa.edge_tail(cfg, True, "tilelang") and not fa.edge_tail(dict(cfg, DESC=True), True, "tilelang")


@pytest.mark.parametrize("backend", ["triton", pytest.param("tilelang", marks=needs_tilelang)])
def test_rows_read_past_a_packed_sequence_stay_their_own(backend):
    """The forward's q block and the dQ kernel's q and dO blocks read past their sequence up to the packed
    tensor's end (_query_rows): another sequence's rows, whose results are never stored. With inf in the next
    sequence's q (NaN in every row the first sequence's last block reads past it), the first sequence's output,
    lse and gradients are those of the sequence alone."""
    torch.manual_seed(0)
    h, d, first = 2, 32, 70
    q, k, v = (torch.randn(first + 40, h, d).half() for _ in range(3))
    q[first:] = float("inf")
    cu = torch.tensor([0, first, first + 40], dtype=torch.int32)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    context = tilelang_through_interpreter() if backend == "tilelang" else contextlib.nullcontext()
    with context:
        out, lse = tle.ops.flash_attention(q, k, v, True, cu_seqlens_q=cu, cu_seqlens_k=cu, return_lse=True,
                                           backend=backend)
        do = torch.randn_like(out)
        do[first:] = 0.0
        grads = torch.autograd.grad(out, (q, k, v), do)
    alone = [t.detach()[None, :first].double().requires_grad_() for t in (q, k, v)]
    ref, ref_lse = fa.reference(*alone, True, return_lse=True)
    ref_grads = torch.autograd.grad(ref, alone, do[None, :first].double())
    assert not out[:first].isnan().any() and grads[0][:first].isfinite().all()
    torch.testing.assert_close(out[:first].double(), ref[0], atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(lse[:, :first].double(), ref_lse[0].double(), atol=2e-3, rtol=2e-3)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got[:first].double(), want[0], atol=5e-3, rtol=5e-3)
