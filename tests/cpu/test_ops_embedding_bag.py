"""tle.ops.embedding_bag and tle.ops.EmbeddingBag on CPU, against F.embedding_bag in fp64 (modes sum, mean,
max; per-sample weights, include_last_offset, 2-D input): forward, weight gradient and per-sample weights'
gradient, on the torch backend, the Triton kernels in Triton's interpreter and the TileLang
kernels through the interpreter of TileLang programs, with both backward kernels ("sorted", "atomic"); the
host-side bookkeeping of the sorted backward; the semantics where torch's CPU checks do not apply; bad inputs."""
import pytest
import torch
import torch.nn.functional as F

import tle
import tle.ops
from tilelang_oracle import needs_tilelang, tilelang_through_interpreter
from tle.examples import default_tolerance
from tle.kernels import embedding_bag_kernels as ebk

BACKWARDS = ("sorted", "atomic")


def offsets_of(*lengths, dtype=torch.int64):
    starts = [0]
    for n in lengths[:-1]:
        starts.append(starts[-1] + n)
    return torch.tensor(starts, dtype=dtype)


def case(name):
    """(weight fp32, indices, offsets, padding_idx) of a named case; indices int64 (tests convert)."""
    g = torch.Generator().manual_seed(CASES.index(name))

    def w(e, d):
        return torch.randn(e, d, generator=g)

    if name == "empty bags":                     # first, middle and last bags empty
        return w(11, 9), torch.tensor([2, 5, 5, 0, 10, 3]), offsets_of(0, 2, 0, 0, 4, 0), None
    if name == "repeated":                       # an index repeated within a bag and across bags
        return w(6, 17), torch.tensor([4, 4, 4, 1, 4, 1, 0, 4, 4]), offsets_of(3, 1, 2, 3), None
    if name == "padding":                        # a bag of padding only; padding beside repeats
        return w(8, 24), torch.tensor([3, 5, 3, 3, 3, 7, 5, 3]), offsets_of(2, 2, 1, 3), 3
    if name == "negative padding":
        return w(8, 5), torch.tensor([7, 1, 7, 2, 0, 7]), offsets_of(3, 3), -1
    if name == "long bags":                      # bags longer than a block of indices, and wide rows
        return w(30, 300), torch.randint(0, 30, (130,), generator=g), offsets_of(1, 100, 29), 0
    if name == "column blocks":                  # rows wider than one block of columns (grid axis 1)
        return w(7, ebk.MAX_BLOCK_D + 37), torch.randint(0, 7, (9,), generator=g), offsets_of(4, 5), None
    raise KeyError(name)


CASES = ["empty bags", "repeated", "padding", "negative padding", "long bags", "column blocks"]


MODES = ("sum", "mean", "max")


def backwards_of(mode):
    return ("atomic",) if mode == "max" else BACKWARDS


def expected(weight, indices, offsets, padding_idx, dy, mode, psw=None):
    w = weight.detach().double().requires_grad_()
    p = psw.detach().double().requires_grad_() if psw is not None else None
    out = F.embedding_bag(indices, w, offsets, mode=mode, padding_idx=padding_idx, per_sample_weights=p)
    out.backward(dy.double())
    return out.detach(), w.grad, (p.grad if p is not None else None)


def assert_close(got, ref, dtype, what):
    assert got.shape == ref.shape, what
    atol, rtol = default_tolerance(ref, dtype)
    atol = max(atol, default_tolerance(torch.ones(1, dtype=torch.float64), dtype)[0])
    torch.testing.assert_close(got.double(), ref, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")


def check(name, backend, backward, index_dtype, dtype=torch.float32, offsets_dtype=None, mode="mean",
          weighted=False):
    weight, indices, offsets, padding_idx = case(name)
    indices = indices.to(index_dtype)
    offsets = offsets.to(offsets_dtype or index_dtype)
    weight = weight.to(dtype)
    psw = (torch.rand(indices.shape[0]) + 0.5).to(dtype) if weighted else None
    dy = torch.randn(offsets.shape[0], weight.shape[1]).to(dtype)
    ref_out, ref_grad, ref_pgrad = expected(weight, indices.long(), offsets.long(), padding_idx, dy, mode, psw)
    w = weight.clone().requires_grad_()
    p = psw.clone().requires_grad_() if weighted else None
    out = tle.ops.embedding_bag(indices, w, offsets, mode=mode, per_sample_weights=p, padding_idx=padding_idx,
                                backward=backward, backend=backend)
    out.backward(dy)
    what = f"{name} [{backend}, {mode}{' weighted' if weighted else ''}, backward={backward}, {index_dtype}, {dtype}]"
    assert out.dtype == dtype
    assert_close(out, ref_out, dtype, what + " output")
    assert_close(w.grad, ref_grad, dtype, what + " weight gradient")
    if weighted:
        assert_close(p.grad, ref_pgrad, dtype, what + " per-sample weights' gradient")
    if padding_idx is not None:
        assert not w.grad[padding_idx].any(), what + ": the padding row got a gradient"


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_matches_torch(backend, mode, index_dtype):
    for backward in backwards_of(mode):
        for name in CASES:
            check(name, backend, backward, index_dtype, mode=mode)


@pytest.mark.parametrize("backward", BACKWARDS)
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_per_sample_weights(backend, backward):
    for name in CASES:
        check(name, backend, backward, torch.int64, mode="sum", weighted=True)


@pytest.mark.parametrize("mode", MODES)
def test_triton_fp16_and_mixed_index_dtypes(mode):
    for backward in backwards_of(mode):
        for name in ("padding", "long bags"):
            check(name, "triton", backward, torch.int32, torch.float16, offsets_dtype=torch.int64, mode=mode)
            check(name, "triton", backward, torch.int64, torch.float16, offsets_dtype=torch.int32, mode=mode,
                  weighted=mode == "sum")


@needs_tilelang
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_tilelang_through_interpreter(mode, index_dtype):
    with tilelang_through_interpreter():
        for backward in backwards_of(mode):
            for name in ("empty bags", "repeated", "padding", "negative padding", "long bags"):
                check(name, "tilelang", backward, index_dtype, mode=mode)
        if mode == "sum":
            check("padding", "tilelang", "sorted", index_dtype, mode=mode, weighted=True)
            check("long bags", "tilelang", "atomic", index_dtype, mode=mode, weighted=True)


def test_max_ties_go_to_the_first_position_as_in_torch():
    weight = torch.tensor([[1.0, 2.0, 5.0], [1.0, 3.0, 5.0], [0.0, 3.0, 5.0]])
    indices, offsets = torch.tensor([2, 0, 1, 1, 0]), torch.tensor([0, 3])
    for backend in ("torch", "triton"):
        w = weight.clone().requires_grad_()
        out = tle.ops.embedding_bag(indices, w, offsets, mode="max", backend=backend)
        out.sum().backward()
        theirs = weight.clone().requires_grad_()
        F.embedding_bag(indices, theirs, offsets, mode="max").sum().backward()
        torch.testing.assert_close(out, F.embedding_bag(indices, weight, offsets, mode="max"))
        assert torch.equal(w.grad, theirs.grad), (backend, w.grad, theirs.grad)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_include_last_offset_and_2d_input(backend):
    torch.manual_seed(0)
    weight = torch.randn(12, 10, dtype=torch.float64)
    indices = torch.randint(0, 12, (14,))
    for offsets in (torch.tensor([0, 5, 5, 9, 14]), torch.tensor([0, 5, 5, 9, 11])):   # torch runs to the end
        for mode in MODES:
            got = tle.ops.embedding_bag(indices, weight.float(), offsets, mode=mode, include_last_offset=True,
                                        backend=backend)
            want = F.embedding_bag(indices, weight, offsets, mode=mode, include_last_offset=True)
            torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-6)
    bags = indices[:12].reshape(4, 3)
    psw = torch.rand(4, 3, dtype=torch.float64)
    for kwargs in (dict(mode="mean"), dict(mode="max"), dict(mode="sum", per_sample_weights=psw)):
        got = tle.ops.embedding_bag(bags, weight.float(), backend=backend,
                                    **{k: (v.float() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()})
        torch.testing.assert_close(got.double(), F.embedding_bag(bags, weight, **kwargs), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("mode", ("sum", "mean"))
def test_sorted_backward_is_deterministic_and_agrees_with_atomic(mode):
    weight, indices, offsets, padding_idx = case("long bags")
    dy = torch.randn(offsets.shape[0], weight.shape[1])
    grads = {}
    for backward in ("sorted", "sorted", "atomic"):
        w = weight.clone().requires_grad_()
        tle.ops.embedding_bag(indices, w, offsets, mode=mode, padding_idx=padding_idx, backward=backward,
                              backend="triton").backward(dy)
        grads.setdefault(backward, []).append(w.grad)
    assert torch.equal(grads["sorted"][0], grads["sorted"][1])
    torch.testing.assert_close(grads["sorted"][0], grads["atomic"][0], atol=1e-5, rtol=1e-5)


# -- the sorted backward's bookkeeping ------------------------------------------------------------------------
def test_sorted_runs_list_each_rows_positions_in_order():
    indices = torch.tensor([5, 2, 5, 0, 2, 9, 5, 1, 2])
    offsets = torch.tensor([2, 2, 5, 8])                # positions 0 and 1 belong to no bag (GPU semantics)
    bags, run_ptr, perm = ebk.sorted_runs(indices, offsets, 10, padding_idx=9)
    assert torch.equal(bags, ebk.bags_of_positions(indices, offsets, 9)[0].index_select(0, perm).to(bags.dtype))
    assert run_ptr.shape == (11,) and run_ptr[0] == 0 and int(run_ptr[-1]) == 6     # 6 positions count
    bag_of = {2: 1, 3: 1, 4: 1, 5: 2, 6: 2, 7: 2, 8: 3}
    for row in range(10):
        want = [bag_of[p] for p in range(9) if p >= 2 and int(indices[p]) == row and row != 9]
        got = bags[int(run_ptr[row]):int(run_ptr[row + 1])].tolist()
        assert got == want, (row, got, want)


def test_out_of_range_indices_are_left_out_of_the_sorted_runs():
    indices = torch.tensor([3, -1, 4, 7, 0])           # -1 and 7 are outside 5 rows (unchecked on a GPU)
    bags, run_ptr, _ = ebk.sorted_runs(indices, torch.tensor([0, 2]), 5, padding_idx=-1)
    assert run_ptr.tolist() == [1, 2, 2, 2, 3, 4]      # rows 0, 3, 4 have one position each
    assert bags[1:4].tolist() == [1, 0, 1]


# -- where torch's CPU checks do not apply (the custom op itself, as on a GPU) -------------------------------
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("backward", BACKWARDS)
def test_indices_before_the_first_offset_belong_to_no_bag(backend, backward):
    weight = torch.randn(6, 8)
    indices = torch.tensor([1, 2, 3, 4, 5, 0, 0])
    offsets = torch.tensor([2, 4, 4])                   # indices[0:2] are in no bag; bag 1 is empty
    out, inv_counts = torch.ops.tle.embedding_bag(weight, indices, offsets, None, "mean", -1, backward, backend)
    torch.testing.assert_close(out, torch.stack([weight[[3, 4]].mean(0), torch.zeros(8), weight[[5, 0, 0]].mean(0)]))
    torch.testing.assert_close(inv_counts, torch.tensor([1 / 2, 1.0, 1 / 3]))
    dy = torch.randn(3, 8)
    dw, _ = torch.ops.tle.embedding_bag_backward(dy, indices, offsets, None, inv_counts, None, 6, "mean", -1, backward,
                                                 True, backend)
    want = torch.zeros(6, 8)
    want[3] += dy[0] / 2
    want[4] += dy[0] / 2
    want[5] += dy[2] / 3
    want[0] += 2 * dy[2] / 3
    torch.testing.assert_close(dw, want)


# -- empty tensors --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("mode", MODES)
def test_empty(backend, mode):
    for weight, indices, offsets in [(torch.randn(4, 3), torch.zeros(0, dtype=torch.long), torch.zeros(3, dtype=torch.long)),
                                     (torch.randn(4, 3), torch.tensor([1, 2]), torch.zeros(0, dtype=torch.long)),
                                     (torch.randn(4, 0), torch.tensor([1, 2]), torch.tensor([0, 1])),
                                     (torch.randn(0, 3), torch.zeros(0, dtype=torch.long), torch.tensor([0]))]:
        w = weight.clone().requires_grad_()
        out = tle.ops.embedding_bag(indices, w, offsets, mode=mode, backend=backend)
        if weight.shape[1] and offsets.shape[0]:
            torch.testing.assert_close(out, F.embedding_bag(indices, weight, offsets, mode=mode))
        else:                    # torch's CPU kernel fails on rows of no columns, and in mode max on no bags
            assert out.shape == (offsets.shape[0], weight.shape[1])
        out.sum().backward()
        assert w.grad.shape == weight.shape and not w.grad.any()
    out = tle.ops.embedding_bag(torch.zeros(3, 0, dtype=torch.long), torch.randn(4, 2), mode=mode, backend=backend)
    assert torch.equal(out, torch.zeros(3, 2))           # 2-D input of empty bags (torch's own call fails)


# -- the module -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_module_matches_torch_embedding_bag(mode):
    torch.manual_seed(0)
    ours = tle.ops.EmbeddingBag(20, 12, mode=mode, padding_idx=-2, backend="triton", backward="atomic")
    assert not ours.weight[18].any()                   # the padding row starts at zero, as in torch
    theirs = torch.nn.EmbeddingBag(20, 12, mode=mode, padding_idx=-2)
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
    indices, offsets = torch.tensor([1, 18, 3, 18, 18, 7, 1]), torch.tensor([0, 3, 5])
    torch.testing.assert_close(ours(indices, offsets), theirs(indices, offsets))
    ours(indices, offsets).sum().backward()
    theirs(indices, offsets).sum().backward()
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad)
    bags = torch.tensor([[1, 2, 3], [18, 18, 4]])       # 2-D input: one bag per row
    torch.testing.assert_close(ours(bags), theirs(bags))
    assert "backward='atomic'" in repr(ours) and "padding_idx=18" in repr(ours) and f"mode={mode!r}" in repr(ours)


def test_module_takes_torchs_constructor():
    w = torch.randn(9, 4)
    ours = tle.ops.EmbeddingBag(9, 4, None, 2.0, False, "sum", False, w, True, backend="torch")
    theirs = torch.nn.EmbeddingBag(9, 4, None, 2.0, False, "sum", False, w.clone(), True)
    indices, offsets, psw = torch.tensor([1, 2, 8, 8, 0]), torch.tensor([0, 2, 5]), torch.rand(5)
    torch.testing.assert_close(ours(indices, offsets, psw), theirs(indices, offsets, psw))
    assert ours(indices, offsets).shape == (2, 4)
    assert repr(ours).startswith("EmbeddingBag(9, 4, mode='sum', include_last_offset=True")


def test_module_errors():
    with pytest.raises(ValueError, match="'mode' must be one of 'sum', 'mean', 'max'; got 'median'"):
        tle.ops.EmbeddingBag(4, 3, mode="median")
    with pytest.raises(ValueError, match="'backward' must be one of"):
        tle.ops.EmbeddingBag(4, 3, backward="dense")
    with pytest.raises(ValueError, match="mode 'max' has the atomic backward only"):
        tle.ops.EmbeddingBag(4, 3, mode="max", backward="sorted")
    with pytest.raises(ValueError, match="'max_norm' is not taken"):
        tle.ops.EmbeddingBag(4, 3, max_norm=1.0)
    with pytest.raises(ValueError, match="'scale_grad_by_freq=True' is not taken"):
        tle.ops.EmbeddingBag(4, 3, scale_grad_by_freq=True)
    with pytest.raises(ValueError, match="'sparse=True' is not taken"):
        tle.ops.EmbeddingBag(4, 3, sparse=True)
    with pytest.raises(ValueError, match=r"'_weight' has shape \(3, 3\); expected \(4, 3\)"):
        tle.ops.EmbeddingBag(4, 3, _weight=torch.randn(3, 3))
    m = tle.ops.EmbeddingBag(4, 3, backend="torch")
    with pytest.raises(tle.LaunchError, match="'offsets' is required with 1-D input"):
        m(torch.tensor([1, 2]))
    with pytest.raises(tle.LaunchError, match="'offsets' must be None with 2-D input"):
        m(torch.tensor([[1, 2]]), torch.tensor([0]))


# -- bad inputs -----------------------------------------------------------------------------------------------
W, I, O = torch.randn(10, 4), torch.tensor([1, 2, 3]), torch.tensor([0, 2])
eb = tle.ops.embedding_bag


@pytest.mark.parametrize("bad, match", [
    (lambda: eb(I, torch.randn(10), O), "'weight' has rank 1"),
    (lambda: eb(I, torch.ones(10, 4, dtype=torch.int32), O), "'weight' has dtype int32"),
    (lambda: eb(I.float(), W, O), "'input' has dtype float32; expected one of: int32, int64"),
    (lambda: eb(I.short(), W, O), "'input' has dtype int16"),
    (lambda: eb(I[None, None], W, O), "'input' has rank 3"),
    (lambda: eb(I, W, O[None]), "'offsets' has rank 2"),
    (lambda: eb(I, W, O.double()), "'offsets' has dtype float64"),
    (lambda: eb(I.to("meta"), W, O), "'input' is on meta"),
    (lambda: eb(I, W, "O"), "'offsets' must be a torch.Tensor"),
    (lambda: eb(I, W), "'offsets' is required with 1-D input"),
    (lambda: eb(I[None], W, O), "'offsets' must be None with 2-D input"),
    (lambda: eb(I, W, O, padding_idx=10), r"'padding_idx' must be within .*got 10"),
    (lambda: eb(I, W, O, padding_idx=-11), r"'padding_idx' must be within .*got -11"),
    (lambda: eb(I, W, O, padding_idx=1.0), "'padding_idx' must be an int or None"),
    (lambda: eb(I, W, O, backward="dense"), "'backward' must be one of 'sorted', 'atomic'"),
    (lambda: eb(I, W, O, mode="max", backward="sorted"), "mode 'max' has the atomic backward only"),
    (lambda: eb(I, W, O, mode="prod"), "'mode' must be one of 'sum', 'mean', 'max'; got 'prod'"),
    (lambda: eb(I, W, O, max_norm=1.0), r"'max_norm' is not taken.*torch.embedding_renorm_"),
    (lambda: eb(I, W, O, scale_grad_by_freq=True), "'scale_grad_by_freq=True' is not taken"),
    (lambda: eb(I, W, O, sparse=True), "'sparse=True' is not taken"),
    (lambda: eb(I, W, O, per_sample_weights=torch.rand(3)), "'per_sample_weights' is only taken with mode='sum'"),
    (lambda: eb(I, W, O, mode="sum", per_sample_weights=torch.rand(3).double()),
     "'per_sample_weights' has dtype float64; expected one of: float32"),
    (lambda: eb(I, W, O, mode="sum", per_sample_weights=torch.rand(4)), r"'per_sample_weights' has shape \(4,\)"),
    (lambda: eb(I[None], W, mode="sum", per_sample_weights=torch.rand(3)), r"'per_sample_weights' has shape \(3,\)"),
    (lambda: eb(I, W, O[:0], include_last_offset=True), "at least one entry with include_last_offset=True"),
    (lambda: eb(I, W, torch.tensor([1, 2])), r"'offsets' must start at 0.*offsets\[0\] = 1"),
    (lambda: eb(I, W, torch.tensor([0, 3, 2])), "'offsets' must be non-decreasing"),
    (lambda: eb(I, W, torch.tensor([0, 4])), r"offsets\[-1\] = 4 > len\(input\) = 3"),
    (lambda: eb(torch.tensor([1, 10]), W, O), "'input' holds 10, outside the 10 rows"),
    (lambda: eb(torch.tensor([[-1, 2]]), W), "'input' holds -1, outside the 10 rows"),
    (lambda: eb(I, W.double(), O, backend="triton"), "'weight' has dtype float64, which backend"),
])
def test_bad_inputs(bad, match):
    with pytest.raises(tle.LaunchError, match=match):
        bad()


def test_fp64_runs_on_the_torch_backend():
    w = W.double()
    for mode in MODES:
        torch.testing.assert_close(eb(I, w, O, mode=mode, backend="torch"), F.embedding_bag(I, w, O, mode=mode))
