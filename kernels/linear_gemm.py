"""The matrix product of the linear operators, with their activation in its epilogue:

    C = act(A @ B + bias)            (ACT "none", "silu", "gelu", "gelu_tanh" or "relu")
    C = silu(A @ B) * (A @ B2)       (GATED: SwiGLU of two products sharing A)
    C = C + A @ B                    (ACCUMULATE: the epilogue adds the tile C holds, then rounds once)

A and B come in either orientation (A_T: A is stored [K, M]; B_T: B is stored [N, K], as nn.Linear's weight
is), read by tensor descriptors: Triton issues TMA loads and stores, TileLang copies the same boxes. The
product accumulates in fp32; bias and activation apply to the fp32 accumulator and the result is rounded
once. With SAVE_PRE the epilogue also writes the rounded pre-activation (both products when GATED) for the
backward.

Programs: one tile a program (PERSISTENT=False), or NUM_PROGRAMS programs walking the tiles in grouped order
(PERSISTENT=True, a program per SM: the next tile's loads overlap this tile's epilogue when the tile loop is
warp-specialized). Tiles are taken in groups of GROUP_M row blocks, so that the B blocks they share stay in
L2. Edges: descriptor loads read zeros past M, N and K, and stores drop what lies past M and N."""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.kernels.activation_math import activation, torch_activation
from tle.oplib.arith import cdiv
from tle.oplib.tensors import programs


@tle.jit
def _tile_origin(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(first row, first column) of output tile `tile` in grouped order: GROUP_M row blocks run across all
    column blocks before the next group starts."""
    blocks_m = tl.cdiv(M, BLOCK_M)
    group_width = GROUP_M * tl.cdiv(N, BLOCK_N)
    first_m = (tile // group_width) * GROUP_M
    rows_here = tl.minimum(blocks_m - first_m, GROUP_M)
    return (first_m + (tile % group_width) % rows_here) * BLOCK_M, ((tile % group_width) // rows_here) * BLOCK_N


@tle.jit
def _operand(desc, row, col, TRANSPOSED: tl.constexpr):
    """A block of an operand whose descriptor is in the stored orientation; TRANSPOSED reads [col, row]."""
    if TRANSPOSED:
        block = tl.trans(desc.load([col, row]))
    else:
        block = desc.load([row, col])
    return block


@tle.jit
def _output_tile(a_desc, b_desc, b2_desc, bias_ptr, c_desc, pre_ptr, pre2_ptr, stride_pre, tile, M, N, K,
                 A_T: tl.constexpr, B_T: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                 GATED: tl.constexpr, SAVE_PRE: tl.constexpr, ACCUMULATE: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_STAGES: tl.constexpr):
    off_m, off_n = _tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if GATED:
        acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, num_stages=NUM_STAGES):
        a = _operand(a_desc, off_m, k, A_T)
        acc = tl.dot(a, _operand(b_desc, k, off_n, B_T), acc)
        if GATED:
            acc2 = tl.dot(a, _operand(b2_desc, k, off_n, B_T), acc2)
    if ACCUMULATE:
        acc += c_desc.load([off_m, off_n]).to(tl.float32)
    cols = off_n + tl.arange(0, BLOCK_N)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    if SAVE_PRE:
        # stored from registers: a descriptor store would take another tile of shared memory (64 KB at 128x256),
        # a pipeline stage's worth on Triton (1.37x the forward's time at 8192^3 with 2 stages instead of 3)
        rows = off_m + tl.arange(0, BLOCK_M)
        at = rows.to(tl.int64)[:, None] * stride_pre + cols[None, :]
        inside = (rows < M)[:, None] & (cols < N)[None, :]
        tl.store(pre_ptr + at, acc.to(pre_ptr.dtype.element_ty), mask=inside)
        if GATED:
            tl.store(pre2_ptr + at, acc2.to(pre2_ptr.dtype.element_ty), mask=inside)
    if GATED:
        acc = activation(acc, "silu") * acc2
    elif ACT != "none":
        acc = activation(acc, ACT)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@tle.jit
def linear_gemm_kernel(a_ptr, b_ptr, b2_ptr, bias_ptr, c_ptr, pre_ptr, pre2_ptr, M, N, K, stride_pre, NUM_PROGRAMS,
                       A_T: tl.constexpr, B_T: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                       GATED: tl.constexpr, SAVE_PRE: tl.constexpr, ACCUMULATE: tl.constexpr,
                       PERSISTENT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr, NUM_STAGES: tl.constexpr):
    if A_T:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[K, M], strides=[M, 1], block_shape=[BLOCK_K, BLOCK_M])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_T:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    b2_desc = b_desc                    # descriptors a launch does not use are not made (the same one stands in)
    if GATED:
        if B_T:
            b2_desc = tl.make_tensor_descriptor(b2_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
        else:
            b2_desc = tl.make_tensor_descriptor(b2_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    if PERSISTENT:
        tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        for tile in tl.range(tl.program_id(0), tiles, NUM_PROGRAMS, warp_specialize=True):
            _output_tile(a_desc, b_desc, b2_desc, bias_ptr, c_desc, pre_ptr, pre2_ptr, stride_pre, tile, M, N, K,
                         A_T, B_T, HAS_BIAS, ACT, GATED, SAVE_PRE, ACCUMULATE, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                         NUM_STAGES)
    else:
        _output_tile(a_desc, b_desc, b2_desc, bias_ptr, c_desc, pre_ptr, pre2_ptr, stride_pre, tl.program_id(0), M, N,
                     K, A_T, B_T, HAS_BIAS, ACT, GATED, SAVE_PRE, ACCUMULATE, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                     NUM_STAGES)


# -- configurations, measured on the H200 (docs/benchmark/linear_act.md) -------------------------------------
WAVE = 132          # the H200's multiprocessors: one program each at a time for these tiles' footprints


def config(m: int, n: int, k: int, backend: str, gated: bool = False) -> dict:
    """Tiles, stages, warps and program layout of a product C[m, n] = A[m, k] B[k, n] on `backend`. Triton:
    persistent and warp-specialized (128x256 tiles: 1.59 ms at 8192^3 against 1.90 for a tile a program);
    TileLang: a tile a program (its own producer/consumer split; its persistent loop measured slower).
    Fewer 128x256 tiles than about a wave of programs (a few rows by a long K, as fused linear cross entropy's
    dx of a chunk: 512x4096 over K 128256) take 128x128 tiles while those make a wave (Triton: a third of one),
    else 64x128 (the tests' sizes too). Measured at that dx: Triton 658 TFLOP/s in 128x128 tiles against 463 in
    128x256 and 356 in 64x128; TileLang 517 / 465 / 482; at 256 rows Triton 405 / 232 / 346, TileLang
    349 (128x128) / 485 (64x128)."""
    block_n = 128 if gated else 256          # gated: two [128, 128] accumulators, the footprint of one 128x256
    # groups of 16 row blocks on TileLang: 1.3% to 1.8% faster than 8 there (16384x8192x8192, 4096x8192x8192,
    # SwiGLU 16384x4096x14336); Triton's best is 8 at 16384 rows, within 1% of 16 at the others
    group_m = 16 if backend == "tilelang" else 8
    cfg = dict(BLOCK_M=128, BLOCK_N=block_n, BLOCK_K=64, GROUP_M=group_m, NUM_STAGES=3, num_warps=8)
    nearly_a_wave = WAVE - WAVE // 8
    if k < 256 or cdiv(m, 128) * cdiv(n, block_n) < nearly_a_wave:
        if k >= 256 and not gated and cdiv(m, 128) * cdiv(n, 128) >= (WAVE // 3 if backend == "triton"
                                                                        else nearly_a_wave):
            cfg.update(BLOCK_N=128, NUM_STAGES=4)
        else:
            cfg.update(BLOCK_M=64, BLOCK_N=128 if not gated else 64, NUM_STAGES=4, num_warps=4)
    cfg["PERSISTENT"] = backend == "triton"
    return cfg


def launch(a, b, c, *, a_t=False, b_t=False, bias=None, act="none", b2=None, pre=None, pre2=None,
           accumulate=False, backend: str):
    """c[M, N] = the product of a and b (in their stored orientations a_t / b_t) with bias, activation, gating
    (b2) and saved pre-activations (pre, and pre2 when gated: [M, N] views of one row stride) as the kernel
    doc says; c, pre and pre2 are written. accumulate: c += the product (nothing else with it). Shapes are the
    caller's to check; the tensors are contiguous."""
    if accumulate and (bias is not None or act != "none" or b2 is not None or pre is not None):
        raise ValueError("linear_gemm.launch: accumulate takes no bias, activation, gating or saved pre-activation")
    m, n = c.shape
    k = a.shape[0] if a_t else a.shape[1]
    cfg = config(m, n, k, backend, gated=b2 is not None)
    tiles = cdiv(m, cfg["BLOCK_M"]) * cdiv(n, cfg["BLOCK_N"])
    n_programs = programs(c.device, 1, tiles) if cfg["PERSISTENT"] else tiles
    linear_gemm_kernel[(n_programs,)](
        a, b, b if b2 is None else b2, c if bias is None else bias, c, c if pre is None else pre,
        c if pre2 is None else pre2, m, n, k, n if pre is None else pre.stride(0), n_programs,
        A_T=a_t, B_T=b_t, HAS_BIAS=bias is not None, ACT=act, GATED=b2 is not None, SAVE_PRE=pre is not None,
        ACCUMULATE=accumulate, backend=backend, **cfg)
    return c


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
@tle.example(linear_gemm_kernel)
def _example(device, size):
    """gelu(x W^T + b) with the pre-activation saved, persistent: 96x72 by 80x72 in fp16 (ragged against the
    64x128x64 tiles), or 8192^3 bf16 with silu on 132 programs."""
    small = size == "small"
    (m, n, k), dtype = ((96, 80, 72), torch.float16) if small else ((8192, 8192, 8192), torch.bfloat16)
    x = (torch.randn(m, k, device=device) * k ** -0.5).to(dtype)
    w = torch.randn(n, k, device=device).to(dtype)
    bias = torch.randn(n, device=device).to(dtype)
    y, pre = (torch.full((m, n), float("nan"), device=device, dtype=dtype) for _ in range(2))
    cfg = config(m, n, k, "triton")
    act = "gelu" if small else "silu"
    tiles = cdiv(m, cfg["BLOCK_M"]) * cdiv(n, cfg["BLOCK_N"])
    n_programs = min(tiles, 132)

    def reference():
        p = x.float() @ w.float().T + bias.float()
        return {"y": torch_activation(p, act), "pre": p}
    return tle.Launch(grid=(n_programs,), args=(x, w, w, bias, y, pre, pre, m, n, k, n, n_programs),
                      kwargs=dict(A_T=False, B_T=True, HAS_BIAS=True, ACT=act, GATED=False, SAVE_PRE=True,
                                  ACCUMULATE=False, **cfg),
                      outputs={"y": y, "pre": pre}, reference=reference, flops=2 * m * n * k,
                      label=f"{m}x{n}x{k} {str(dtype)[6:]} {act}, bias, pre-activation saved")
