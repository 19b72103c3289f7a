"""flash_attention's benchmark inputs (kernels/flash_attention_bench.py): the packed ("varlen") shape counts the
flops of its sequences, and torch's anchor computes what the operator computes, dense and packed."""
import torch

import tle.ops
from tle.kernels import flash_attention_bench as bench


def test_varlen_lengths_spread_around_the_mean():
    lengths = bench.varlen_lengths(16, 2048)
    assert lengths[0] == 512 and lengths[-1] == 3584 and sorted(lengths) == lengths
    assert abs(sum(lengths) / 16 - 2048) <= 1
    assert bench.varlen_lengths(1, 100) == [100]


def test_varlen_flops_are_the_sum_of_its_sequences():
    packed = bench.bench_make((3, 2, 1, 40, 16, "varlen"), torch.float32, "cpu")
    lengths = bench.varlen_lengths(3, 40)
    assert packed.kwargs["cu_seqlens_q"].tolist() == [0, *torch.tensor(lengths).cumsum(0).tolist()]
    dense = [bench.bench_make((1, 2, 1, n, 16, "causal"), torch.float32, "cpu") for n in lengths]
    for mode in ("fwd", "bwd"):
        assert bench.bench_flops(packed, mode) == sum(bench.bench_flops(d, mode) for d in dense)


def test_the_anchor_matches_the_operator():
    torch.manual_seed(0)
    for shape in ((3, 4, 2, 40, 16, "varlen"), (2, 4, 2, 33, 16, "causal"), (2, 2, 2, 17, 32, "full")):
        s = bench.bench_make(shape, torch.float32, "cpu")
        got = tle.ops.flash_attention(*s.args, backend="torch", **s.kwargs)
        torch.testing.assert_close(bench.bench_eager(s)(), got, atol=1e-5, rtol=1e-5, msg=str(shape))
