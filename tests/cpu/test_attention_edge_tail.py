"""The TileLang forward over packed sequences (EDGE_TAIL): its pipelined loop reads only blocks of whole keys,
so their K and V copies need no zero-fill in shared memory (which would put a barrier of every consumer thread
before each product), and the block that reaches past a sequence's keys runs after the loop with the masked
copies. The numbers of this form are checked by the operator tests (packed samples, both interpreters)."""
import torch

import tle.ops
import tle.oplib.backend as op_backend
from tle.jit import Kernel
from tle.kernels import flash_attention as fa


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
