"""Which path the TileLang lowering takes for a reduction, a scan, a sort and a product, and what it writes:
TileLang's own T.reduce_* and T.cumsum only on the dtypes and ranks where they give Triton's result, trees
and log-step scans over shared buffers elsewhere (lowering/tilelang/combines.py), a scan's shared result
reduced where it lies, an accumulator that cannot be overwritten element by element copied first
(lowering/tilelang/reductions.py), the FullRow and register-A decisions of products (lowering/tilelang/
row_products.py), and the layout of the sorting networks' loops (lowering/tilelang/sorting.py). Each case
checks the generated source, and where it computes something, its numbers through the interpreter of
TileLang programs against torch."""
import contextlib
import re
import signal

import pytest
import torch
import triton
import triton.language as tl

import tle
from sorting_kernels import histogram_blocks, topk_1d, triton_counts
from tilelang_oracle import interpret_tilelang


def _body(source: str) -> str:
    return source[source.index("with T.Kernel"):]


# -- combine functions ---------------------------------------------------------------------------------------
@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b)


@triton.jit
def _larger(a, b):
    return tl.where(a > b, a, b)


@tle.jit
def combine_paths(x_ptr, s_ptr, mx_ptr, lg_ptr, y_ptr, c_ptr, p_ptr, BLOCK: tl.constexpr):
    """Sums, maxima and products of one tile with the kernel's combine functions; the tile is also read
    element-wise after a tree has copied it, and a scan's result is reduced again."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(s_ptr, tl.reduce(x, 0, _add))
    tl.store(mx_ptr, tl.reduce(x, 0, _maximum))
    tl.store(lg_ptr, tl.reduce(x, 0, _larger))
    tl.store(y_ptr + offs, x + 1)
    sc = tl.associative_scan(x, 0, _mul)
    tl.store(c_ptr + offs, sc)
    tl.store(p_ptr, tl.reduce(sc, 0, _mul))


def _combine_paths(dtype, block=8):
    # products that stay in range: integers whose scan's product fits in int32, floats around 1 for fp16
    values = [1, 2, 3, 1, 2, 1, 3, 2] if not dtype.is_floating_point else [1, 2, 0.5, 1, 3, 0.25, 1, 1]
    x = torch.tensor(values * (block // 8)).to(dtype)
    outs = dict(s=torch.zeros(1, dtype=dtype), mx=torch.zeros(1, dtype=dtype), lg=torch.zeros(1, dtype=dtype),
                y=torch.zeros(block, dtype=dtype), c=torch.zeros(block, dtype=dtype), p=torch.zeros(1, dtype=dtype))
    return x, outs


def _combine_source(dtype) -> str:
    x, outs = _combine_paths(dtype)
    return combine_paths.lower(x, *outs.values(), BLOCK=8, grid=(1,), backend="tilelang").source


@pytest.mark.parametrize("dtype", [torch.int32, torch.float16, torch.float32], ids=["i32", "fp16", "fp32"])
def test_combine_paths_against_torch(dtype):
    """Every path (TileLang's own reduction, a tree, a log-step scan, a tree over the scan) gives torch's
    numbers."""
    x, outs = _combine_paths(dtype)
    interpret_tilelang(combine_paths, (1,), x, *outs.values(), BLOCK=8)
    x64 = x.double()
    ref = dict(s=x64.sum().reshape(1), mx=x64.max().reshape(1), lg=x64.max().reshape(1), y=x64 + 1,
               c=x64.cumprod(0), p=x64.cumprod(0).prod().reshape(1))
    for k, v in ref.items():
        torch.testing.assert_close(outs[k].double(), v, msg=k)


def test_an_int32_sum_keeps_tilelangs_reduce_sum():
    """A `tl.reduce` whose combine function is `a + b` of 32-bit integers is T.reduce_sum, which sums them as
    Triton does; only narrower integers take the tree."""
    body = _body(_combine_source(torch.int32))
    assert re.search(r"T\.reduce_sum\(x, (\w+), dim=0\)\n\s+s_ptr\[0\] = \1\[0\]", body), body
    assert re.search(r"T\.reduce_max\(x, (\w+), dim=0\)\n\s+mx_ptr\[0\] = \1\[0\]", body), body


def test_an_fp16_maximum_is_a_tree_and_an_fp32_one_reduce_max():
    """T.reduce_max is known to give tl.maximum's result (NaN ignored, fmaxf) for fp32 and integers only: a
    `tl.reduce` with tl.maximum of fp16 is a tree of T.max, while its sum stays T.reduce_sum."""
    body = _body(_combine_source(torch.float16))
    assert "T.reduce_max" not in body, body
    assert "T.reduce_sum(x, " in body, body
    assert re.search(r"= T\.max\((\w+)\[2 \* i0\], \1\[2 \* i0 \+ 1\]\)", body), body
    body = _body(_combine_source(torch.float32))
    assert "T.reduce_max(x, " in body and "T.max(" not in body, body


def test_a_tree_reads_a_shared_copy_named_after_the_tile_and_leaves_the_tile_as_it_is():
    """A tree reduces over shared memory: a tile held in a fragment is copied into a shared buffer named
    after it, and the tile's later element-wise uses and scans still read the fragment itself."""
    body = _body(_combine_source(torch.int32))
    copy = re.search(r"for i0 in T\.Parallel\(8\):\n\s+(x_\d+)\[i0\] = x\[i0\]\n"
                     r"\s+for i0 in T\.Parallel\(4\):\n\s+(\w+)\[i0\] = T\.if_then_else\(\(\1\[2 \* i0\] > "
                     r"\1\[2 \* i0 \+ 1\]\)", body)
    assert copy, body
    shared = copy.group(1)
    assert f"{shared} = T.alloc_shared((8,), 'int32')" in body, body
    assert re.search(r"(\w+)\[i0\] = \(x\[i0\] \+ 1\)\n\s+T\.copy\(\1, y_ptr\[0:8\]\)", body), body
    assert re.search(r"(sc\w*)\[i0\] = x\[i0\]\n\s+for i0 in T\.Parallel\(8\):\n\s+if i0 >= 1:", body), body
    assert f"{shared}[" not in body.split("lg_ptr[0] = ")[1], body


def test_a_scans_shared_result_is_reduced_where_it_lies():
    """The scan's result already is a shared buffer of the tile's dtype: the tree over it reads it in place,
    with no copy."""
    body = _body(_combine_source(torch.int32))
    assert re.search(r"T\.copy\(sc, c_ptr\[0:8\]\)\n\s+for i0 in T\.Parallel\(4\):\n"
                     r"\s+\w+\[i0\] = \(sc\[2 \* i0\] \* sc\[2 \* i0 \+ 1\]\)", body), body
    assert "= sc[i0]" not in body.split("T.copy(sc, c_ptr[0:8])")[1], body


@tle.jit
def sum_scan_3d(x_ptr, y_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    t = (tl.arange(0, A)[:, None, None] * (B * C) + tl.arange(0, B)[None, :, None] * C +
         tl.arange(0, C)[None, None, :])
    tl.store(y_ptr + t, tl.associative_scan(tl.load(x_ptr + t), 1, _add))


def test_a_sum_scan_of_a_3d_tile_is_a_log_step_scan():
    """T.cumsum scans 1-D and 2-D tiles only: an associative scan of `a + b` over a 3-D tile is the log-step
    scan, along the middle axis, and sums as torch does."""
    x = torch.randn(2 * 4 * 8, generator=torch.Generator().manual_seed(0))
    y = torch.full_like(x, float("nan"))
    body = _body(sum_scan_3d.lower(x, y, A=2, B=4, C=8, grid=(1,), backend="tilelang").source)
    assert "T.cumsum" not in body, body
    assert re.search(r"if i1 >= 2:\n\s+(\w+)\[i0, i1, i2\] = \((\w+)\[i0, i1 - 2, i2\] \+ \2\[i0, i1, i2\]\)",
                     body), body
    interpret_tilelang(sum_scan_3d, (1,), x, y, A=2, B=4, C=8)
    torch.testing.assert_close(y.view(2, 4, 8), x.view(2, 4, 8).cumsum(1))


# -- accumulators ---------------------------------------------------------------------------------------------
@tle.jit
def onto_transpose(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    """c = a @ b + (a @ b)^T: the second product accumulates onto the transpose of the first."""
    r = tl.arange(0, N)
    t = r[:, None] * N + r[None, :]
    a = tl.load(a_ptr + t)
    b = tl.load(b_ptr + t)
    acc = tl.dot(a, b)
    acc = tl.dot(a, b, tl.trans(acc))
    tl.store(c_ptr + t, acc)


def test_an_accumulator_that_is_a_transpose_is_copied_before_the_product():
    """T.gemm overwrites its accumulator in place; a transpose of another fragment is no element-wise update of
    it (element (i, j) reads (j, i), which another iteration overwrites), so the product accumulates into a
    fresh fragment holding the transpose."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 16, generator=g).half(), torch.randn(16, 16, generator=g).half()
    c = torch.full((16, 16), float("nan"))
    body = _body(onto_transpose.lower(a, b, c, N=16, grid=(1,), backend="tilelang").source)
    assert re.search(r"T\.gemm\(a, b, acc\)\n\s+for i0, i1 in T\.Parallel\(16, 16\):\n"
                     r"\s+(acc_\d+)\[i0, i1\] = acc\[i1, i0\]\n\s+T\.gemm\(a, b, \1\)", body), body
    interpret_tilelang(onto_transpose, (1,), a, b, c, N=16)
    ab = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ab + ab.T, rtol=1e-4, atol=1e-4)


# -- which products keep their rows per warp -------------------------------------------------------------------
def _gemms(source: str) -> list[str]:
    return re.findall(r"T\.gemm\(.*\)", source)


class _Deadline(Exception):
    pass


@contextlib.contextmanager
def _promptly(seconds=30):
    """The block must finish within `seconds`: the products' decisions settle in a few rounds over the
    kernel's values, so a lowering that runs on has gone wrong; it fails here instead of hanging."""
    def expired(signum, frame):
        raise _Deadline(f"lowering took more than {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@tle.jit
def weighted_attention(q_ptr, k_ptr, v_ptr, o_ptr, scale, n, M: tl.constexpr, N: tl.constexpr, D: tl.constexpr,
                       CARRIED: tl.constexpr):
    """Attention's two products; the probabilities scaled by a scalar, or (CARRIED) weighted by a tile the
    loop carries, halved at every step."""
    rm, rn, rd = tl.arange(0, M), tl.arange(0, N), tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    acc = tl.zeros((M, D), tl.float32)
    w = tl.full((M, N), 1.0, tl.float32)
    for it in range(n):
        k = tl.load(k_ptr + it * N * D + rn[:, None] * D + rd[None, :])
        v = tl.load(v_ptr + it * N * D + rn[:, None] * D + rd[None, :])
        s = tl.dot(q, tl.trans(k))
        m = tl.max(s, 1)
        if CARRIED:
            p = tl.exp(s - m[:, None]) * w
            w = w * 0.5
        else:
            p = tl.exp(s - m[:, None]) * scale
        acc = tl.dot(p.to(tl.float16), v, acc)
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], acc)


def _attention_inputs(M=64, N=32, D=16, steps=2):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(r, D, generator=g).half() for r in (M, steps * N, steps * N))
    return q, k, v, torch.full((M, D), float("nan"))


@pytest.mark.parametrize("carried", [False, True], ids=["scaled", "carried"])
def test_probabilities_weighted_by_a_carried_tile_go_through_shared_memory(carried):
    """P computed from the scores and scalars is, in registers, the A operand of the FullRow product that
    follows. Weighted by a tile the loop carries, whose layout is not known where the product is written, P
    is staged in shared memory and the second product keeps the default policy. Either way the decisions
    settle at once."""
    q, k, v, o = _attention_inputs()
    with _promptly():
        source = weighted_attention.lower(q, k, v, o, 0.5, 2, M=64, N=32, D=16, CARRIED=carried, grid=(1,),
                                          backend="tilelang").source
    scores, weighted = _gemms(source)
    assert scores.endswith("transpose_B=True, policy=T.GemmWarpPolicy.FullRow)"), scores
    p = weighted[len("T.gemm("):].split(",")[0]
    if carried:
        assert "policy=" not in weighted, weighted
        assert f"{p} = T.alloc_shared((64, 32), 'float16')" in source, source
    else:
        assert weighted.endswith("policy=T.GemmWarpPolicy.FullRow)"), weighted
        assert f"{p} = T.alloc_fragment((64, 32), 'float16')" in source, source
    interpret_tilelang(weighted_attention, (1,), q, k, v, o, 0.5, 2, M=64, N=32, D=16, CARRIED=carried)
    acc, w = torch.zeros(64, 16, dtype=torch.float64), torch.ones(64, 32, dtype=torch.float64)
    for it in range(2):
        s = q.double() @ k[it * 32:(it + 1) * 32].double().T
        p = torch.exp(s - s.max(1, keepdim=True).values) * (w if carried else 0.5)
        w = w * 0.5
        acc = acc + p.half().double() @ v[it * 32:(it + 1) * 32].double()
    torch.testing.assert_close(o.double(), acc, rtol=2e-3, atol=2e-3)


@tle.jit
def scores_through_a_branch(q_ptr, k_ptr, o_ptr, r_ptr, flag, M: tl.constexpr, N: tl.constexpr, D: tl.constexpr):
    """A product's result and an unrelated tile of its shape pass through one `if`; only the other tile is
    reduced along its rows."""
    rm, rn, rd = tl.arange(0, M), tl.arange(0, N), tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    k = tl.load(k_ptr + rn[:, None] * D + rd[None, :])
    s = tl.dot(q, tl.trans(k))
    w = tl.load(o_ptr + rm[:, None] * N + rn[None, :])
    if flag > 0:
        s = s * 2.0
        w = w + 1.0
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], s)
    tl.store(r_ptr + rm, tl.sum(w, 1))


def test_a_tile_beside_a_product_in_a_branch_is_not_the_products():
    """What a branch yields next to a product's result is not that result: reducing it along its rows asks
    nothing of the product, which keeps the default policy."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(64, 16, generator=g).half(), torch.randn(32, 16, generator=g).half()
    o, r = torch.randn(64, 32, generator=g), torch.full((64,), float("nan"))
    with _promptly():
        source = scores_through_a_branch.lower(q, k, o, r, 3, M=64, N=32, D=16, grid=(1,),
                                               backend="tilelang").source
    (scores,) = _gemms(source)
    assert scores == "T.gemm(q, k, s, transpose_B=True)", scores
    w = o.clone()
    interpret_tilelang(scores_through_a_branch, (1,), q, k, o, r, 3, M=64, N=32, D=16)
    torch.testing.assert_close(o.double(), 2 * q.double() @ k.double().T, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(r, (w + 1).sum(1))


@tle.jit
def refined_attention(q_ptr, k_ptr, v_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, D: tl.constexpr,
                      STEPS: tl.constexpr):
    """P refined by STEPS element-wise steps, each reading the step before twice."""
    rm, rn, rd = tl.arange(0, M), tl.arange(0, N), tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    k = tl.load(k_ptr + rn[:, None] * D + rd[None, :])
    v = tl.load(v_ptr + rn[:, None] * D + rd[None, :])
    s = tl.dot(q, tl.trans(k))
    p = tl.exp(s - tl.max(s, 1)[:, None])
    for _ in tl.static_range(STEPS):
        p = p * (2.0 - p)
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], tl.dot(p.to(tl.float16), v))


def test_a_long_chain_of_element_wise_steps_is_traced_once_per_value():
    """Finding the products an A operand comes from visits each value once: 40 steps that each read the step
    before twice lower at once (not in 2**40 visits), and P still comes from registers."""
    q, k, v, o = _attention_inputs(steps=1)
    with _promptly():
        source = refined_attention.lower(q, k, v, o, M=64, N=32, D=16, STEPS=40, grid=(1,),
                                         backend="tilelang").source
    scores, weighted = _gemms(source)
    assert scores.endswith("policy=T.GemmWarpPolicy.FullRow)") and weighted.endswith("policy=T.GemmWarpPolicy.FullRow)")
    p = weighted[len("T.gemm("):].split(",")[0]
    assert f"{p} = T.alloc_fragment((64, 32), 'float16')" in source, source


# -- sorting networks ------------------------------------------------------------------------------------------
def _topk_source(n=16, k=4):
    x = torch.randn(n)
    return topk_1d.lower(x, torch.empty(k), N=n, K=k, grid=(1,), backend="tilelang").source


def test_topk_halving_loops_say_which_elements_they_keep():
    """Each halving loop of tl.topk is annotated with the two elements it keeps the larger of: i and i + k of
    each pair of runs of k, as the loop body reads them."""
    body = _body(_topk_source(16, 4))
    notes = re.findall(r"for i0 in T\.Parallel\(\d+\):  # (the larger of elements .*)\n\s+\w+\[i0\] = "
                       r"T\.max\(\w+\[(.*?)\], \w+\[(.*?)\]\)", body)
    assert len(notes) == 2, body
    for note, first, second in notes:
        assert first == "i0 // 4 * 8 + i0 % 4" and second == f"{first} + 4", (first, second)
        assert note == f"the larger of elements {first} and {second}", note
    body = _body(_topk_source(8, 1))
    assert "# the larger of elements i0 * 2 and i0 * 2 + 1\n" in body, body


def _check_nesting(source: str):
    """Each statement is indented as its block nests: one level (4 spaces) deeper right after a line that
    opens a block, never deeper otherwise."""
    body = source[source.rindex("\n", 0, source.index("with T.Kernel")) + 1:]
    lines = [re.sub(r"  # .*$", "", ln) for ln in body.splitlines() if ln.strip()]
    for prev, line in zip(lines, lines[1:]):
        depth, before = len(line) - len(line.lstrip()), len(prev) - len(prev.lstrip())
        if prev.rstrip().endswith(":"):
            assert depth == before + 4, (prev, line)
        else:
            assert depth <= before, (prev, line)


def test_sorting_and_counting_loops_nest_one_level_per_block():
    """The loops the sorting networks and tl.histogram write are laid out as Python blocks one level deep each:
    a halving step's body under its loop, an atomic add under its `if`."""
    source = _topk_source(16, 4)
    assert re.search(r"T\.Parallel\(8\):  # the larger.*\n {12}\w+\[i0\] = T\.max\(", source), source
    _check_nesting(source)
    x = torch.tensor([0, 3, 5, 3, 31, 17, 3, 0, 1, 2, 2, 9, 12, 30, 3, 7], dtype=torch.int32)
    rows, total = torch.zeros(32, dtype=torch.int32), torch.zeros(32, dtype=torch.int32)
    source = histogram_blocks.lower(x, rows, total, 16, BLOCK=16, BINS=32, grid=(1,), backend="tilelang").source
    assert re.search(r"\n( +)if (\w+)\[i0\] >= 0:\n\1    T\.atomic_add\(\w+\[\2\[i0\]\], 1\)\n", source), source
    _check_nesting(source)
    interpret_tilelang(histogram_blocks, (1,), x, rows, total, 16, BLOCK=16, BINS=32)
    assert torch.equal(rows, triton_counts(x, 32)) and torch.equal(total, triton_counts(x, 32))
