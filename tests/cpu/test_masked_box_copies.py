"""A masked load of a box whose rows past a packed sequence are zero-filled by a select after the copy
(lowering/tilelang/memory.py, _copy_then_select): outside a pipelined loop the copy is a plain one, so the select
runs after it (TileLang 0.1.15 issues such a T.copy as a TMA load and waits for it only before the first product
reading the buffer: the select raced with it, NaN on packed attention on the H200); inside T.Pipelined the copy
stays the pipeline's, the select a consumer stage after its wait."""
import torch

import tle.ops
from tilelang_oracle import tilelang_through_interpreter
from tle.jit import Kernel
from tle.kernels import flash_attention as fa


def _packed_forward_source() -> str:
    seen = {}

    def capture(self, grid, args, kwargs, warmup=False):
        kw = {k: v for k, v in kwargs.items() if k != "backend"}
        seen["source"] = self.lower(*args, grid=grid, backend="tilelang", **kw).source
        raise StopIteration
    torch.manual_seed(0)
    sample = next(s for s in tle.ops.OPERATORS["flash_attention"].samples("cpu", torch.float16)
                  if "cu_seqlens_q" in s.kwargs)
    # Kernel._launch is swapped inside the context and put back before it exits, which restores its own
    # (a monkeypatch would restore the context's interpreter launch after it, for every later test)
    with tilelang_through_interpreter():
        interpreted, Kernel._launch = Kernel._launch, capture
        try:
            fa.flash_attention(*sample.args, backend="tilelang", **sample.kwargs)
        except StopIteration:
            pass
        finally:
            Kernel._launch = interpreted
    return seen["source"]


def test_the_select_after_a_copy_outside_a_pipeline_follows_a_plain_copy():
    lines = _packed_forward_source().splitlines()
    loop = next(i for i, line in enumerate(lines) if "T.Pipelined(" in line)
    # the block past the keys, after the loop (EDGE_TAIL): its K and V copies, each then the select
    plain = [i for i, line in enumerate(lines) if "T.copy(" in line and line.rstrip().endswith(", disable_tma=True)")]
    assert [lines[i].strip()[:len("T.copy(k_ptr_v[")] for i in plain] == ["T.copy(k_ptr_v[", "T.copy(v_ptr_v["]
    assert all(i > loop and lines[i + 1].strip().startswith("if (") for i in plain)   # the select, past the keys
    k_copy = next(line for line in lines[loop:] if "T.copy(k_ptr_v[" in line)
    assert "disable_tma" not in k_copy                               # the pipeline's copy (TMA on sm_90)
    # q is read up to the packed tensor's end (flash_attention._query_rows): its mask is the tensor's edge, one
    # copy with no select after it
    q_copy = next(i for i, line in enumerate(lines[:loop]) if "T.copy(q_ptr_v[" in line)
    assert "disable_tma" not in lines[q_copy] and not lines[q_copy + 1].strip().startswith("if (")
