"""chunk_gated_delta_rule split over two GPUs (NCCL, one process per GPU) equals the operator on one GPU: each
rank's output and gradients are its slice of the unsplit ones, its final states the rows of the sequences
ending on it. Needs two GPUs (the nvidia-h200-x2 machine); bf16 inputs, so the two differ by bf16 roundings:
the bounds are the single-GPU tests' (2^-6 of the largest magnitude for outputs, 2^-5 for gradients)."""
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import tle
import tle.ops

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")

WORLD = 2
CASES = {  # (tokens per rank, H, K, packed lengths or None)
    "one sequence": (4096, 4, 128, None),
    "packed": (3000, 2, 64, [1, 0, 2900, 164, 1000, 0, 1935]),     # the fourth crosses the boundary at 3000
}


def _inputs(case, device):
    t, h, d, lengths = case
    gen = torch.Generator(device=device).manual_seed(0)
    total = WORLD * t
    n = 1 if lengths is None else len(lengths)
    q = torch.randn(1, total, h, d, device=device, generator=gen).bfloat16()
    k = F.normalize(torch.randn(1, total, h, d, device=device, generator=gen), dim=-1).bfloat16()
    v = torch.randn(1, total, h, d, device=device, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(1, total, h, device=device, generator=gen))
    beta = torch.rand(1, total, h, device=device, generator=gen).bfloat16()
    h0 = torch.randn(n, h, d, d, device=device, generator=gen)
    do = torch.randn(1, total, h, d, device=device, generator=gen).bfloat16()
    dht = torch.randn(n, h, d, d, device=device, generator=gen)
    cu = None if lengths is None else torch.tensor([0] + lengths, device=device).cumsum(0)
    return (q, k, v, g, beta), h0, cu, do, dht


def _run(xs, h0, cu, do, dht, backend, group=None, shard=slice(None)):
    leaves = [x[:, shard].clone().requires_grad_() for x in xs]
    h0 = h0.clone().requires_grad_()
    o, final = tle.ops.chunk_gated_delta_rule(*leaves, initial_state=h0, output_final_state=True, cu_seqlens=cu,
                                              cp_group=group, backend=backend)
    ((o.float() * do[:, shard].float()).sum() + (final * dht).sum()).backward()
    return {"o": o.detach().cpu(), "final": final.detach().cpu(), "grads": [x.grad.cpu() for x in leaves],
            "dh0": h0.grad.cpu()}


def _rank(rank, port, case, backend, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=WORLD)
    try:
        t = case[0]
        result = _run(*_inputs(case, f"cuda:{rank}"), backend, dist.group.WORLD, slice(rank * t, (rank + 1) * t))
        torch.save(result, os.path.join(out, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def relative_error(got, ref):
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("name", list(CASES))
def test_two_gpus_equal_one(name, backend, tmp_path):
    case = CASES[name]
    mp.spawn(_rank, args=(_free_port(), case, backend, str(tmp_path)), nprocs=WORLD, join=True)
    parts = [torch.load(tmp_path / f"{r}.pt") for r in range(WORLD)]
    whole = _run(*_inputs(case, "cuda:0"), backend)
    assert relative_error(torch.cat([p["o"] for p in parts], 1), whole["o"]) < 2 ** -6
    assert relative_error(sum(p["final"] for p in parts), whole["final"]) < 2 ** -6
    for i, what in enumerate(("dq", "dk", "dv", "dg", "dbeta")):
        err = relative_error(torch.cat([p["grads"][i] for p in parts], 1), whole["grads"][i])
        assert err < 2 ** -5, (what, err)
    assert relative_error(sum(p["dh0"] for p in parts), whole["dh0"]) < 2 ** -5
