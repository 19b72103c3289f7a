"""chunk_gated_delta_rule split over the ranks of a gloo process group (2 and 3 processes on the CPU) equals the
unsplit operator: each rank's output and gradients are its slice of the unsplit ones, its final states are the
rows of the sequences ending on it, and the ranks' initial-state gradients sum to the unsplit one. The torch
backend in fp64 (the operator composed), the Triton backend under its interpreter and the TileLang backend
through the interpreter of TileLang programs (each rank walks its shard once and corrects it: the transition
walks, the exchange, the correction kernel), its kernels also built for sm_90a."""
import contextlib
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tle
import tle.ops
from kernel_cases import lower_example
from tle.kernels import gated_delta_rule_cp
from tle.kernels.gated_delta_rule_backward_kernels import gdr_state_backward_kernel
from tle.kernels.gated_delta_rule_kernels import gdr_state_kernel
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter

# (ranks, tokens per rank, H, HV, K, V, packed lengths or None, with an initial state)
CASES = {
    "one sequence over 2 ranks": (2, 70, 1, 2, 16, 16, None, True),
    "one sequence over 3 ranks, no initial state": (3, 40, 1, 1, 16, 32, None, False),
    # rank boundaries at 66 and 132: a sequence crossing both (1..130), one ending on a boundary (..132), empty
    # and one-token sequences, one starting on a boundary
    "packed over 3 ranks": (3, 66, 2, 2, 16, 16, [1, 0, 129, 2, 0, 1, 65, 0], True),
}


def _inputs(case, dtype):
    world, t, h, hv, kd, vd, lengths, initial = case
    gen = torch.Generator().manual_seed(0)
    total = world * t
    n = 1 if lengths is None else len(lengths)
    q = torch.randn(1, total, h, kd, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(1, total, h, kd, generator=gen), dim=-1)
    v = torch.randn(1, total, hv, vd, generator=gen)
    g = torch.nn.functional.logsigmoid(torch.randn(1, total, hv, generator=gen))
    beta = torch.rand(1, total, hv, generator=gen)
    h0 = torch.randn(n, hv, kd, vd, generator=gen) if initial else None
    cu = None if lengths is None else torch.tensor([0] + lengths).cumsum(0)
    do = torch.randn(1, total, hv, vd, generator=gen)
    dht = torch.randn(n, hv, kd, vd, generator=gen)
    xs = [x.to(dtype) for x in (q, k, v, g, beta)]
    return xs, (None if h0 is None else h0.to(dtype)), cu, do.to(dtype), dht.to(dtype)


def _run(xs, h0, cu, do, dht, backend, group=None, shard=slice(None)):
    leaves = [x[:, shard].clone().requires_grad_() for x in xs]
    h0 = None if h0 is None else h0.clone().requires_grad_()
    o, final = tle.ops.chunk_gated_delta_rule(*leaves, initial_state=h0, output_final_state=True, cu_seqlens=cu,
                                              cp_group=group, backend=backend)
    ((o * do[:, shard]).sum() + (final * dht).sum()).backward()
    return dict(o=o.detach(), final=final.detach(), grads=[x.grad for x in leaves],
                dh0=None if h0 is None else h0.grad)


def _backend_context(backend):
    """TileLang on the CPU: through the interpreter of TileLang programs."""
    return tilelang_through_interpreter() if backend == "tilelang" else contextlib.nullcontext()


def _rank(rank, world, port, case, dtype, backend, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        t = case[1]
        with _backend_context(backend):
            result = _run(*_inputs(case, dtype), backend, dist.group.WORLD, slice(rank * t, (rank + 1) * t))
        torch.save(result, os.path.join(out, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# TileLang's interpreter is slow: the packed case alone, which takes every path
RUNS = ([(name, "torch", torch.float64) for name in CASES] + [(name, "triton", torch.float32) for name in CASES]
        + [pytest.param("packed over 3 ranks", "tilelang", torch.float32, marks=needs_tilelang)])


@pytest.mark.parametrize("name, backend, dtype", RUNS)
def test_split_over_ranks_equals_the_unsplit_operator(name, backend, dtype, tmp_path):
    case = CASES[name]
    world, t = case[:2]
    mp.spawn(_rank, args=(world, _free_port(), case, dtype, backend, str(tmp_path)), nprocs=world, join=True)
    parts = [torch.load(tmp_path / f"{r}.pt") for r in range(world)]
    with _backend_context(backend):
        whole = _run(*_inputs(case, dtype), backend)
    # the split walks other chunks than the whole (chunks start at each rank's first token) and adds the
    # incoming state's share afterwards: equal up to rounding; TileLang's fp32 products are TF32
    bound = {torch.float64: 1e-10, torch.float32: 2e-5 if backend == "triton" else 2 ** -9}[dtype]

    def close(got, ref, what):
        err = ((got.double() - ref.double()).abs().max() / ref.double().abs().max()).item()
        assert err < bound, f"{what}: {err:.3g} of the largest magnitude, beyond {bound:g}"
    close(torch.cat([p["o"] for p in parts], 1), whole["o"], "o")
    close(sum(p["final"] for p in parts), whole["final"], "final state")
    for i, what in enumerate(("dq", "dk", "dv", "dg", "dbeta")):
        close(torch.cat([p["grads"][i] for p in parts], 1), whole["grads"][i], what)
    if whole["dh0"] is not None:
        close(sum(p["dh0"] for p in parts), whole["dh0"], "initial state's gradient")


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_the_split_kernel_names_each_ranks_sequences(backend):
    # 4 ranks of 10 tokens; sequences [0,3) [3,3) [3,25) [25,30) [30,30) [30,40)
    cu = torch.tensor([0, 3, 3, 25, 30, 30, 40], dtype=torch.int32)
    local_cu, roles, links = gated_delta_rule_cp.split(cu, 4, 2, 10, backend)
    assert local_cu.tolist() == [0, 0, 0, 5, 10, 10, 10]
    # sequence 2 ends here (token 24), 3 starts and ends here, 4 (empty, at 30) starts and ends on rank 3
    assert roles.tolist() == [0, 0, 2, 3, 0, 0]
    assert links.tolist() == [[-1, 2], [2, 2], [2, -1], [-1, -1]]


def test_cp_group_needs_torch_distributed():
    assert not dist.is_initialized()
    x = torch.randn(1, 8, 1, 16)
    with pytest.raises(tle.LaunchError, match="'cp_group' needs torch.distributed"):
        tle.ops.chunk_gated_delta_rule(x, x, x, x[..., 0], x[..., 0], cp_group=object(), backend="torch")


@needs_tilelang
@pytest.mark.slow
@pytest.mark.parametrize("kernel, flag", [(gdr_state_kernel, "UPDATES"), (gdr_state_backward_kernel, "OUTPUT_GRAD")],
                         ids=["transition", "transposed transition"])
def test_the_transition_walks_build_for_sm90a(kernel, flag):
    """The state walks without updates (or output gradients), as the split runs them, build with TileLang."""
    assert ".entry" in lower_example(kernel, "tilelang", **{flag: False}).stage("ptx")
