"""Frontend and IR: each kernel below exercises a part of the language. Every test checks the IR text for
the ops it should contain, then runs the Triton lowering in Triton's interpreter against torch."""
import re

import pytest
import torch
import triton
import triton.language as tl

import tle
from tle.examples import default_tolerance
from tle.lowering.analysis import classify_accesses
from tle.lowering.ir import ops


def lower_and_run(kernel, grid, *args, **kw):
    """Lower for these arguments (the IR), then launch the same call on the Triton backend."""
    lowered = kernel.lower(*args, grid=grid, backend="triton", **kw)
    kernel[grid](*args, backend="triton", **kw)
    return lowered


def assert_close(out, ref):
    if out.is_floating_point():
        atol, rtol = default_tolerance(ref.float(), out.dtype)
        torch.testing.assert_close(out, ref.to(out.dtype), atol=atol, rtol=rtol)
    else:
        torch.testing.assert_close(out, ref.to(out.dtype), atol=0, rtol=0)


def has_op(ir: str, op: str) -> bool:
    """Whether the IR text has an op spelled `op` (e.g. "load", "reduce.sum", "for", "if")."""
    return re.search(rf"(^|= |\s){re.escape(op)}(\s|$)", ir, re.M) is not None


def nan_like(x, extra=0):
    return torch.full((x.numel() + extra,), float("nan"), dtype=x.dtype)


# -- program ids, arange, masked load/store with `other` ----------------------------------------------
@tle.jit
def affine_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=-1.0)
    tl.store(y_ptr + offs, x * 2.0 + 1.0, mask=mask)


def test_program_id_arange_masked_load_store():
    n = 1000                                       # not a multiple of BLOCK: the last program is masked
    x = torch.randn(n)
    y = nan_like(x, extra=24)                      # past n must stay untouched
    ir = lower_and_run(affine_copy, (triton.cdiv(n, 128),), x, y, n, BLOCK=128).ir
    for op in ("program_id", "arange", "cmp.lt", "load", "store"):
        assert has_op(ir, op), op
    assert "arange {start=0, end=128}" in ir and "mask=" in ir and "other=" in ir
    assert_close(y[:n], x * 2 + 1)
    assert torch.isnan(y[n:]).all()


@tle.jit
def grid_stride_scale(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    for i in range(0, tl.cdiv(n, BLOCK * nprog)):
        offs = (i * nprog + pid) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, x * scale, mask=offs < n)


def test_num_programs_and_runtime_loop_bound():
    n = 1000
    x = torch.randn(n)
    y = nan_like(x)
    ir = lower_and_run(grid_stride_scale, (3,), x, y, n, 0.75, BLOCK=64).ir
    assert has_op(ir, "num_programs") and has_op(ir, "for")
    assert_close(y, x * 0.75)


# -- constexprs, full/zeros, `if` on a constexpr ------------------------------------------------------
@tle.jit
def fill(out_ptr, n, value, BLOCK: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MODE == 0:
        t = tl.zeros((BLOCK,), dtype=tl.float32) + value
    else:
        t = tl.full((BLOCK,), 2.5, tl.float32) * value
    tl.store(out_ptr + offs, t, mask=offs < n)


@pytest.mark.parametrize("mode, expected", [(0, 3.0), (1, 7.5)])
def test_constexpr_full_zeros_and_constexpr_if(mode, expected):
    out = torch.full((77,), float("nan"))
    ir = lower_and_run(fill, (3,), out, 77, 3.0, BLOCK=32, MODE=mode).ir
    assert "MODE=%d" % mode in ir                   # constexprs are recorded in the IR header
    assert not has_op(ir, "if")                     # a constexpr `if` folds away
    assert ("value=2.5" in ir) == (mode == 1)       # only the taken branch is traced
    assert_close(out, torch.full((77,), expected))


# -- broadcasting with [:, None], 2-D masks, a 2-D grid ------------------------------------------------
@tle.jit
def outer(x_ptr, y_ptr, out_ptr, M, N, stride_om, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    x = tl.load(x_ptr + rm, mask=rm < M, other=0.0)
    y = tl.load(y_ptr + rn, mask=rn < N, other=0.0)
    z = x[:, None] * y[None, :] + x[:, None]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], z, mask=mask)


def test_broadcasting_and_2d_masks():
    M, N = 37, 45
    x, y = torch.randn(M), torch.randn(N)
    out = torch.full((M, N), float("nan"))
    ir = lower_and_run(outer, (triton.cdiv(M, 16), triton.cdiv(N, 32)), x, y, out, M, N, out.stride(0),
                       BM=16, BN=32).ir
    assert has_op(ir, "expand_dims") and has_op(ir, "broadcast") and has_op(ir, "binary.and")
    assert "program_id {axis=1}" in ir
    assert_close(out, x[:, None] * y[None, :] + x[:, None])


# -- element-wise float arithmetic and math -------------------------------------------------------------
@tle.jit
def math_ops(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)     # x > 0
    y = tl.load(y_ptr + offs, mask=mask, other=1.0)     # |y| >= 0.5
    results = (tl.exp(y), tl.exp2(y), tl.log(x), tl.log2(x), tl.sqrt(x), tl.rsqrt(x), tl.sigmoid(y), tl.abs(y),
               tl.maximum(x, y), tl.minimum(x, y), tl.where(y > 0, x, -x), tl.erf(y),
               x + y, x - y, x * y, x / y, -y, 1.0 - x * 0.5)
    for i in tl.static_range(len(results)):
        tl.store(out_ptr + i * n + offs, results[i], mask=mask)


def test_elementwise_math():
    n = 100
    x = torch.rand(n) * 4 + 0.1
    y = torch.randn(n).sign() * (0.5 + torch.rand(n) * 2)
    ref = [y.exp(), torch.exp2(y), x.log(), x.log2(), x.sqrt(), x.rsqrt(), y.sigmoid(), y.abs(),
           torch.maximum(x, y), torch.minimum(x, y), torch.where(y > 0, x, -x), torch.erf(y),
           x + y, x - y, x * y, x / y, -y, 1.0 - x * 0.5]
    out = torch.full((len(ref), n), float("nan"))
    ir = lower_and_run(math_ops, (1,), x, y, out, n, BLOCK=128).ir
    for op in ("unary.exp", "unary.exp2", "unary.log", "unary.log2", "unary.sqrt", "unary.rsqrt",
               "unary.sigmoid", "unary.abs", "unary.erf", "unary.neg", "binary.maximum", "binary.minimum",
               "where", "binary.add", "binary.sub", "binary.mul", "binary.fdiv", "cmp.gt"):
        assert has_op(ir, op), op
    for i, r in enumerate(ref):
        assert_close(out[i], r)


# -- integer arithmetic, comparisons, bitwise ops, cdiv ---------------------------------------------------
@tle.jit
def int_ops(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0)
    b = tl.load(b_ptr + offs, mask=mask, other=1)        # b > 0
    results = (a + b, a - b, a * b, a // b, a % b, a & b, a | b, a ^ b, a << 2, a >> 1,
               (a < b).to(tl.int32), (a <= b).to(tl.int32), (a == b).to(tl.int32), (a != b).to(tl.int32),
               ((a > 0) & (b > 3)).to(tl.int32), ((a >= 0) | (b == 1)).to(tl.int32), tl.where(a >= b, a, b),
               tl.cdiv(tl.abs(a), b))
    for i in tl.static_range(len(results)):
        tl.store(out_ptr + i * n + offs, results[i], mask=mask)


def test_integer_comparison_and_bitwise_ops():
    n = 200
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-50, 50, (n,), generator=g, dtype=torch.int32)
    b = torch.randint(1, 9, (n,), generator=g, dtype=torch.int32)
    # Triton's integer // and % truncate toward zero, as in C
    ref = [a + b, a - b, a * b, torch.div(a, b, rounding_mode="trunc"), torch.fmod(a, b), a & b, a | b, a ^ b,
           a << 2, a >> 1, a < b, a <= b, a == b, a != b, (a > 0) & (b > 3), (a >= 0) | (b == 1),
           torch.where(a >= b, a, b), (a.abs() + b - 1) // b]
    out = torch.full((len(ref), n), -12345, dtype=torch.int32)
    ir = lower_and_run(int_ops, (1,), a, b, out, n, BLOCK=256).ir
    for op in ("binary.div", "binary.rem", "binary.and", "binary.or", "binary.xor", "binary.shl", "binary.shr",
               "cmp.lt", "cmp.le", "cmp.eq", "cmp.ne", "cmp.ge", "cast"):
        assert has_op(ir, op), op
    for i, r in enumerate(ref):
        assert_close(out[i], r.to(torch.int32))


# -- Python ints typed as Triton types them: 2^31 <= x < 2^32 is a uint32 --------------------------------
def u32_constants_body(x_ptr, y_ptr):
    i = tl.arange(0, 4)
    x = tl.load(x_ptr + i).to(tl.uint32, bitcast=True)
    h = (x * 0xCD9E8D57 + 0x9E3779B9) ^ 0xBB67AE85          # uint32 arithmetic, wrapping at 2^32
    tl.store(y_ptr + i, (h >> 31).to(tl.int32) + (h & 0xFFFF).to(tl.int32))


u32_constants = tle.jit(u32_constants_body)


def test_python_ints_below_2_32_keep_a_uint32_tile_uint32():
    x = torch.tensor([0x70000000, 1, -1, 123456789], dtype=torch.int32)
    out = torch.full((4,), -1, dtype=torch.int32)
    ir = lower_and_run(u32_constants, (1,), x, out).ir
    assert "i64" not in ir and "const {value=2654435769} : u32" in ir
    h = ((x.to(torch.int64) & 0xFFFFFFFF) * 0xCD9E8D57 + 0x9E3779B9) & 0xFFFFFFFF ^ 0xBB67AE85
    assert torch.equal(out, ((h >> 31) + (h & 0xFFFF)).to(torch.int32))
    raw = torch.full((4,), -1, dtype=torch.int32)
    triton.jit(u32_constants_body)[(1,)](x, raw)           # what Triton itself makes of the same program
    assert torch.equal(out, raw)


@tle.jit
def i32_plus_u32_constant(x_ptr, y_ptr):
    i = tl.arange(0, 4)
    tl.store(y_ptr + i, tl.load(x_ptr + i) + 3000000000)


def test_an_int32_tile_and_a_constant_past_int32_is_an_error_as_in_triton():
    x = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(tle.LoweringError, match="out of range for type i32"):
        i32_plus_u32_constant.lower(x, x.clone(), grid=(1,), backend="triton")


# -- casts -----------------------------------------------------------------------------------------------
@tle.jit
def casts(x_ptr, h_ptr, i_ptr, f_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(h_ptr + offs, x.to(tl.float16), mask=mask)
    i = x.to(tl.int32)
    tl.store(i_ptr + offs, i, mask=mask)
    tl.store(f_ptr + offs, i.to(tl.float32) * 0.5, mask=mask)


def test_casts():
    n = 50
    x = torch.randn(n) * 10
    h = torch.full((n,), float("nan"), dtype=torch.float16)
    i = torch.full((n,), -1, dtype=torch.int32)
    f = torch.full((n,), float("nan"))
    ir = lower_and_run(casts, (1,), x, h, i, f, n, BLOCK=64).ir
    assert "tile<64xfp16>" in ir and "tile<64xi32>" in ir and has_op(ir, "cast")
    assert_close(h, x.half())
    assert_close(i, x.to(torch.int32))                # toward zero
    assert_close(f, x.to(torch.int32).float() * 0.5)


# -- reductions over an axis ------------------------------------------------------------------------------
@tle.jit
def reductions(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    ptrs = x_ptr + rm[:, None] * N + rn[None, :]
    x0 = tl.load(ptrs, mask=mask, other=0.0)
    lo = tl.load(ptrs, mask=mask, other=-float("inf"))
    hi = tl.load(ptrs, mask=mask, other=float("inf"))
    tl.store(out_ptr + rn, tl.sum(x0, axis=0), mask=rn < N)
    tl.store(out_ptr + N + rm, tl.max(lo, axis=1), mask=rm < M)
    tl.store(out_ptr + N + M + rm, tl.min(hi, axis=1), mask=rm < M)
    tl.store(out_ptr + N + 2 * M + rm, tl.argmax(lo, axis=1).to(tl.float32), mask=rm < M)
    tl.store(out_ptr + N + 3 * M + rm, x0.sum(axis=1), mask=rm < M)


def test_reductions():
    M, N = 13, 29
    x = torch.randn(M, N)
    out = torch.full((N + 4 * M,), float("nan"))
    ir = lower_and_run(reductions, (1,), x, out, M, N, BM=16, BN=32).ir
    for op in ("reduce.sum", "reduce.max", "reduce.min", "reduce.argmax"):
        assert has_op(ir, op), op
    assert "{axis=0}" in ir and "{axis=1}" in ir
    assert_close(out[:N], x.sum(0))
    assert_close(out[N:N + M], x.max(1).values)
    assert_close(out[N + M:N + 2 * M], x.min(1).values)
    assert_close(out[N + 2 * M:N + 3 * M], x.argmax(1).float())
    assert_close(out[N + 3 * M:], x.sum(1))


# -- dot with an accumulator, out_dtype, trans --------------------------------------------------------------
@tle.jit
def dot_acc(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
    acc = tl.full((BM, BN), 1.0, tl.float32)
    acc = tl.dot(a, b, acc)                                    # A @ B + 1
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@tle.jit
def dot_trans(a_ptr, bt_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
    bt = tl.load(bt_ptr + rn[:, None] * K + rk[None, :], mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0)
    c = tl.dot(a, tl.trans(bt), out_dtype=tl.float32)          # no accumulator: A @ (B^T)^T
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _dot_inputs(M=20, N=24, K=30):
    a = (torch.randn(M, K) / K ** 0.5).half()
    b = torch.randn(K, N).half()
    return a, b, torch.full((M, N), float("nan"))


def test_dot_with_accumulator():
    a, b, c = _dot_inputs()
    (M, K), N = a.shape, b.shape[1]
    ir = lower_and_run(dot_acc, (1,), a, b, c, M, N, K, BM=32, BN=32, BK=32).ir
    assert has_op(ir, "dot") and "acc=%acc" in ir
    # fp16 inputs, fp32 accumulation: exact products, so only the fp32 summation order differs
    torch.testing.assert_close(c, a.float() @ b.float() + 1, atol=1e-4, rtol=1e-4)


def test_dot_out_dtype_and_trans():
    a, b, c = _dot_inputs()
    (M, K), N = a.shape, b.shape[1]
    ir = lower_and_run(dot_trans, (1,), a, b.t().contiguous(), c, M, N, K, BM=32, BN=32, BK=32).ir
    assert has_op(ir, "dot") and has_op(ir, "trans") and "out_dtype=fp32" in ir
    torch.testing.assert_close(c, a.float() @ b.float(), atol=1e-4, rtol=1e-4)


# -- loops: range / tl.range(num_stages=) with carried values; tl.static_range unrolled ---------------------
@tle.jit
def row_stats(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    biggest = -float("inf")          # a Python float that becomes a runtime value in the loop
    count = 0
    for start in tl.range(0, N, BLOCK, num_stages=STAGES):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0)
        acc += x
        biggest = tl.maximum(biggest, tl.max(tl.where(cols < N, x, -float("inf")), axis=0))
        count += 1
    tl.store(out_ptr + row * 3, tl.sum(acc, axis=0))
    tl.store(out_ptr + row * 3 + 1, biggest)
    tl.store(out_ptr + row * 3 + 2, count.to(tl.float32))


def test_tl_range_num_stages_with_carried_values():
    M, N = 5, 1000
    x = torch.randn(M, N)
    out = torch.full((M, 3), float("nan"))
    lowered = lower_and_run(row_stats, (M,), x, out, N, x.stride(0), BLOCK=128, STAGES=2)
    assert has_op(lowered.ir, "for") and "iter_args(" in lowered.ir and "num_stages=2" in lowered.ir
    assert "tl.range(" in lowered.source and "num_stages=2" in lowered.source
    assert_close(out[:, 0], x.sum(1))
    assert_close(out[:, 1], x.max(1).values)
    assert_close(out[:, 2], torch.full((M,), float(triton.cdiv(N, 128))))


@tle.jit
def horner(x_ptr, out_ptr, n, BLOCK: tl.constexpr, DEGREE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.static_range(DEGREE + 1):
        acc = acc * x + (i + 1)              # coefficients 1, 2, ..., DEGREE + 1
    tl.store(out_ptr + offs, acc, mask=offs < n)


def test_static_range_unrolls_with_carried_value():
    n = 300
    x = torch.rand(n) - 0.5
    out = nan_like(x)
    ir = lower_and_run(horner, (triton.cdiv(n, 128),), x, out, n, BLOCK=128, DEGREE=3).ir
    assert not has_op(ir, "for")                       # unrolled at trace time
    assert len(re.findall(r"= binary\.mul %acc", ir)) == 4
    ref = torch.zeros(n)
    for i in range(4):
        ref = ref * x + (i + 1)
    assert_close(out, ref)


# -- `if` on runtime scalars ---------------------------------------------------------------------------------
@tle.jit
def branchy(x_ptr, out_ptr, n, threshold, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    if pid % 2 == 0:
        y = x * 2.0
    else:
        y = x - 1.0
    if threshold > 0:
        y = tl.where(y > threshold, threshold, y)
    tl.store(out_ptr + offs, y, mask=offs < n)


@pytest.mark.parametrize("threshold", [0.5, -1.0])
def test_if_on_runtime_scalars(threshold):
    n, block = 200, 32
    x = torch.randn(n)
    out = nan_like(x)
    ir = lower_and_run(branchy, (triton.cdiv(n, block),), x, out, n, threshold, BLOCK=block).ir
    assert len(re.findall(r"\bif %", ir)) == 2
    even = (torch.arange(n) // block) % 2 == 0
    ref = torch.where(even, x * 2, x - 1)
    if threshold > 0:
        ref = torch.where(ref > threshold, torch.tensor(threshold), ref)
    assert_close(out, ref)


# -- calls to other @tle.jit functions are inlined ------------------------------------------------------------
@tle.jit
def _scaled_square(x, c):
    return x * x * c


@tle.jit
def _clamp01(x):
    return tl.minimum(tl.maximum(x, 0.0), 1.0)


@tle.jit
def calls(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, _clamp01(_scaled_square(x, 0.5) - 0.25), mask=offs < n)


def test_calls_to_jit_functions_are_inlined():
    n = 60
    x = torch.randn(n) * 2
    out = nan_like(x)
    ir = lower_and_run(calls, (1,), x, out, n, BLOCK=64).ir
    assert not has_op(ir, "call") and has_op(ir, "binary.maximum") and has_op(ir, "binary.minimum")
    assert_close(out, (x * x * 0.5 - 0.25).clamp(0, 1))


# -- gathers through loaded indices, atomics ---------------------------------------------------------------------
@tle.jit
def embedding(table_ptr, idx_ptr, out_ptr, n, D: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    cols = tl.arange(0, BD)
    idx = tl.load(idx_ptr + rows, mask=rows < n, other=0)
    mask = (rows[:, None] < n) & (cols[None, :] < D)
    v = tl.load(table_ptr + idx[:, None] * D + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], v, mask=mask)


def test_gather_through_loaded_indices():
    V, D, n = 50, 19, 70
    table = torch.randn(V, D)
    idx = torch.randint(0, V, (n,), dtype=torch.int32)
    out = torch.full((n, D), float("nan"))
    # D is a constexpr: with a runtime row stride the offsets would not be affine (coefficients are ints)
    lowered = lower_and_run(embedding, (triton.cdiv(n, 16),), table, idx, out, n, D=D, BN=16, BD=32)
    kinds = {(a.param.name if a.param else None, a.op.defn): a.kind
             for a in classify_accesses(lowered.kernel).values()}
    assert kinds == {("idx_ptr", ops.LOAD): "box", ("table_ptr", ops.LOAD): "gather", ("out_ptr", ops.STORE): "box"}
    assert_close(out, table[idx.long()])


@tle.jit
def histogram(idx_ptr, counts_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    idx = tl.load(idx_ptr + offs, mask=mask, other=0)
    tl.atomic_add(counts_ptr + idx, 1, mask=mask)


@tle.jit
def total(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0))


def test_atomic_add_scatter_and_scalar():
    n, bins = 1000, 17
    idx = torch.randint(0, bins, (n,), dtype=torch.int32)
    counts = torch.zeros(bins, dtype=torch.int32)
    lowered = lower_and_run(histogram, (triton.cdiv(n, 128),), idx, counts, n, BLOCK=128)
    assert has_op(lowered.ir, "atomic.add")
    assert [a.kind for a in classify_accesses(lowered.kernel).values() if a.op.defn is ops.ATOMIC] == ["gather"]
    assert_close(counts, torch.bincount(idx.long(), minlength=bins))

    x = torch.randn(n)
    out = torch.zeros(1)
    ir = lower_and_run(total, (triton.cdiv(n, 128),), x, out, n, BLOCK=128).ir
    assert has_op(ir, "atomic.add") and has_op(ir, "reduce.sum")
    torch.testing.assert_close(out, x.sum().reshape(1), atol=1e-4, rtol=1e-5)   # summation order varies


@tle.jit
def strided_read(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs * 2, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, v, mask=offs < n)


def test_strided_access_is_classified():
    x = torch.randn(40)
    out = torch.full((20,), float("nan"))
    lowered = lower_and_run(strided_read, (1,), x, out, 20, BLOCK=32)
    kinds = [a.kind for a in sorted(classify_accesses(lowered.kernel).values(), key=lambda a: a.line)]
    assert kinds == ["strided", "box"]
    assert_close(out, x[::2])


# -- TLE-Lite: tle.load(..., is_async=True) ----------------------------------------------------------------------
@tle.jit
def async_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tle.load(x_ptr + offs, mask=offs < n, other=0.0, is_async=True)
    tl.store(y_ptr + offs, x + 1.0, mask=offs < n)


def test_tle_load_is_async_hint():
    n = 333
    x = torch.randn(n)
    y = nan_like(x)
    lowered = lower_and_run(async_copy, (triton.cdiv(n, 128),), x, y, n, BLOCK=128)
    assert re.search(r"= load .*is_async=true", lowered.ir)
    # the hint is kept visible where the backend cannot honor it: in the source or in the notes
    assert "is_async" in lowered.source or any("is_async" in note for note in lowered.notes)
    assert_close(y, x + 1)


# -- scan dtypes: Triton's tl.cumsum / tl.cumprod scan bf16 in fp32; only tl.cumsum widens narrow integers --------
@tle.jit
def scans_of(x_ptr, k_ptr, s_ptr, p_ptr, q_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x, k = tl.load(x_ptr + offs), tl.load(k_ptr + offs)
    tl.store(s_ptr + offs, tl.cumsum(x, 0))
    tl.store(p_ptr + offs, tl.cumprod(k, 0))
    tl.store(q_ptr + offs, tl.cumsum(k, 0))


def test_scan_result_dtypes_are_tritons():
    x, k = torch.randn(16).bfloat16(), torch.ones(16, dtype=torch.int8)
    s, p, q = torch.empty(16), torch.empty(16, dtype=torch.int8), torch.empty(16, dtype=torch.int32)
    lowered = lower_and_run(scans_of, (1,), x, k, s, p, q, BLOCK=16)
    assert re.search(r"scan\.sum .* : tile<16xfp32>", lowered.ir)
    assert re.search(r"scan\.prod .* : tile<16xi8>", lowered.ir)
    assert re.search(r"scan\.sum .* : tile<16xi32>", lowered.ir)
    assert_close(s, x.float().cumsum(0))
    assert torch.equal(p, k) and torch.equal(q, torch.arange(1, 17, dtype=torch.int32))
