"""Kernels of the Triton parity benchmark (`python -m tle.benchmark.parity`, docs/benchmark/triton_parity.md).

Each kernel is plain Triton text, as a Triton user writes it, decorated with `@tle.jit` and nothing else from
tle: the benchmark runs the same function under `triton.jit(kernel.fn)` and through both tle lowerings, at
the same launch configuration. Beside each kernel: its torch reference, the inputs and launch of a shape
(`make(shape, device) -> tle.Launch`, with grid, meta-parameters, num_warps and num_stages fixed per shape for
an H100/H200), the FLOP or byte count of the throughput figure, and shapes from small to large.

A shape is (dims, dtype) or (dims, dtype, overrides): the overrides replace entries of the shape's launch
configuration (the CPU shapes use them to get several loop iterations out of a small problem).
"""
from __future__ import annotations

import math

import torch
import triton.language as tl

import tle
from tle.benchmark.parity import Case

fp16, bf16, fp32 = torch.float16, torch.bfloat16, torch.float32
DTYPE_NAMES = {fp16: "fp16", bf16: "bf16", fp32: "fp32"}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def sm_count(device) -> int:
    """Streaming multiprocessors of the device (132 on an H100 SXM or an H200); 4 on the CPU, whose runs are
    checks in an interpreter."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _split(shape):
    dims, dtype, *rest = shape
    return dims, dtype, (rest[0] if rest else {})


# -- vector add ----------------------------------------------------------------------------------------------
@tle.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements       # the last block may run past the end
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)


def add_config(n: int) -> dict:
    if n < (1 << 22):
        return dict(BLOCK_SIZE=1024, num_warps=4, num_stages=3)
    return dict(BLOCK_SIZE=4096, num_warps=8, num_stages=3)


def make_add(shape, device) -> tle.Launch:
    (n,), dtype, over = _split(shape)
    cfg = {**add_config(n), **over}
    x = torch.randn(n, device=device, dtype=dtype)
    y = torch.randn(n, device=device, dtype=dtype)
    out = torch.empty_like(x)
    return tle.Launch(grid=(cdiv(n, cfg["BLOCK_SIZE"]),), args=(x, y, out, n), kwargs=cfg, outputs={"out": out},
                      reference=lambda: {"out": x.float() + y.float()}, bytes=3 * n * x.element_size(),
                      label=f"{n} {DTYPE_NAMES[dtype]}")


# -- fused softmax, persistent: a few programs per SM, each taking rows n_programs apart ----------------------
@tle.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        mask = col_offsets < n_cols
        # padding columns read -inf: they add nothing to the max or the sum
        row = tl.load(row_ptr + col_offsets, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        out_row_ptr = output_ptr + row_idx * output_row_stride
        tl.store(out_row_ptr + col_offsets, softmax_output, mask=mask)


def softmax_config(n_cols: int, elem_size: int) -> dict:
    """BLOCK_SIZE holds a whole row; warps grow with it; num_stages rows in flight per program, and as many
    programs per SM as the registers and the shared memory of the stages allow (228 KB an SM)."""
    block = next_power_of_2(n_cols)
    if block <= 1024:
        warps, stages, per_sm = 4, 4, 8
    elif block <= 4096:
        warps, stages, per_sm = 8, 3, 4
    elif block <= 8192:
        warps, stages, per_sm = 16, 2, 2
    else:
        warps, stages, per_sm = 16, 2, 1
    per_sm = max(1, min(per_sm, (200 * 1024) // (block * elem_size * stages)))
    return dict(BLOCK_SIZE=block, num_warps=warps, num_stages=stages, programs_per_sm=per_sm)


def make_softmax(shape, device) -> tle.Launch:
    (m, n), dtype, over = _split(shape)
    x = torch.randn(m, n, device=device, dtype=dtype)
    y = torch.empty_like(x)
    cfg = {**softmax_config(n, x.element_size()), **over}
    programs = min(m, sm_count(device) * cfg.pop("programs_per_sm"))
    return tle.Launch(grid=(programs,), args=(y, x, x.stride(0), y.stride(0), m, n), kwargs=cfg, outputs={"y": y},
                      reference=lambda: {"y": torch.softmax(x.float(), dim=-1)}, bytes=2 * m * n * x.element_size(),
                      label=f"{m}x{n} {DTYPE_NAMES[dtype]}")


# -- layer norm forward: the row's statistics in one pass over its columns, the normalization in a second ------
@tle.jit
def layer_norm_fwd_kernel(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    # pass 1: sum and sum of squares, BLOCK_SIZE columns at a time, in fp32
    sum_x = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    sum_xx = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        sum_x += x
        sum_xx += x * x
    mean = tl.sum(sum_x, axis=0) / N
    var = tl.maximum(tl.sum(sum_xx, axis=0) / N - mean * mean, 0.0)
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    # pass 2: normalize, scale and shift (the row is read again, mostly from L2)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(Y + cols, y, mask=mask)


def layer_norm_config(n: int) -> dict:
    block = min(next_power_of_2(n), 4096)
    return dict(BLOCK_SIZE=block, num_warps=min(max(block // 256, 1), 8), num_stages=3)


def layer_norm_reference(x, w, b, eps):
    xf = x.float()
    mean = xf.mean(-1)
    rstd = torch.rsqrt(xf.var(-1, unbiased=False) + eps)
    y = torch.nn.functional.layer_norm(xf, (x.shape[-1],), w.float(), b.float(), eps)
    return {"y": y, "mean": mean, "rstd": rstd}


def make_layer_norm(shape, device) -> tle.Launch:
    (m, n), dtype, over = _split(shape)
    cfg = {**layer_norm_config(n), **over}
    x = (torch.randn(m, n, device=device) + 0.5).to(dtype)
    w = (torch.rand(n, device=device) + 0.5).to(dtype)
    b = torch.randn(n, device=device).to(dtype)
    y = torch.empty_like(x)
    mean = torch.empty(m, device=device, dtype=torch.float32)
    rstd = torch.empty(m, device=device, dtype=torch.float32)
    eps = 1e-5
    return tle.Launch(grid=(m,), args=(x, y, w, b, mean, rstd, x.stride(0), n, eps), kwargs=cfg,
                      outputs={"y": y, "mean": mean, "rstd": rstd},
                      reference=lambda: layer_norm_reference(x, w, b, eps),
                      bytes=2 * m * n * x.element_size() + 2 * n * w.element_size() + 8 * m,
                      label=f"{m}x{n} {DTYPE_NAMES[dtype]}")


# -- matmul, grouped program order ------------------------------------------------------------------------------
@tle.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    # Programs walk the tiles of C a group of GROUP_SIZE_M tile rows at a time, down each column of the group
    # before the next: the programs running together share their tiles of A and B in L2.
    pid = tl.program_id(axis=0)
    tiles_m = tl.cdiv(M, BLOCK_SIZE_M)
    tiles_n = tl.cdiv(N, BLOCK_SIZE_N)
    tiles_per_group = GROUP_SIZE_M * tiles_n
    group = pid // tiles_per_group
    group_first_m = group * GROUP_SIZE_M
    group_rows = tl.minimum(tiles_m - group_first_m, GROUP_SIZE_M)
    pid_m = group_first_m + (pid % tiles_per_group) % group_rows
    pid_n = (pid % tiles_per_group) // group_rows

    rm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    rn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    rk = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        k_left = K - k * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_config(m: int, n: int, k: int) -> dict:
    """Tiles for Hopper's tensor cores: 128x256 at 8 warps for large products, 128x128 for mid-size ones (more
    tiles than SMs), 64x64 for small ones."""
    if min(m, n) >= 4096:
        return dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, num_warps=8, num_stages=3)
    if min(m, n) >= 1024:
        return dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, num_warps=8, num_stages=4)
    return dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, num_warps=4, num_stages=4)


def _matmul_launch(shape, device, names: dict, strides: bool) -> tle.Launch:
    """A launch of one of the matmul kernels: its meta-parameters renamed by `names`, with or without the
    six stride arguments."""
    (m, n, k), dtype, over = _split(shape)
    cfg = {names.get(key, key): v for key, v in {**matmul_config(m, n, k), **over}.items()}
    a = (torch.randn(m, k, device=device) / math.sqrt(k)).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    c = torch.empty(m, n, device=device, dtype=dtype)
    block_m, block_n = (cfg[names.get(x, x)] for x in ("BLOCK_SIZE_M", "BLOCK_SIZE_N"))
    grid = (cdiv(m, block_m) * cdiv(n, block_n),)
    args = (a, b, c, m, n, k) + ((a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
                                 if strides else ())
    return tle.Launch(grid=grid, args=args, kwargs=cfg, outputs={"c": c},
                      reference=lambda: {"c": a.float() @ b.float()},
                      flops=2 * m * n * k, label=f"{m}x{n}x{k} {DTYPE_NAMES[dtype]}")


def make_matmul(shape, device) -> tle.Launch:
    return _matmul_launch(shape, device, {}, strides=True)


# -- matmul through block pointers --------------------------------------------------------------------------------
@tle.jit
def matmul_block_ptr_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_width = GROUP_M * num_pid_n
    first_m = (pid // group_width) * GROUP_M
    rows_here = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_width) % rows_here
    pid_n = (pid % group_width) // rows_here

    a_block = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(stride_am, stride_ak),
                                offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K), order=(1, 0))
    b_block = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(stride_bk, stride_bn),
                                offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K, BLOCK_N), order=(1, 0))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        # out-of-range rows and columns of a block read as zero
        a = tl.load(a_block, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_block, boundary_check=(0, 1), padding_option="zero")
        acc += tl.dot(a, b)
        a_block = tl.advance(a_block, (0, BLOCK_K))
        b_block = tl.advance(b_block, (BLOCK_K, 0))
    c_block = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                                offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N),
                                order=(1, 0))
    tl.store(c_block, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))


_BLOCK_PTR_NAMES = {"BLOCK_SIZE_M": "BLOCK_M", "BLOCK_SIZE_N": "BLOCK_N", "BLOCK_SIZE_K": "BLOCK_K",
                    "GROUP_SIZE_M": "GROUP_M"}


def make_matmul_block_ptr(shape, device) -> tle.Launch:
    return _matmul_launch(shape, device, _BLOCK_PTR_NAMES, strides=True)


# -- matmul through tensor descriptors (TMA on Hopper) --------------------------------------------------------
@tle.jit
def matmul_descriptor_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_width = GROUP_M * num_pid_n
    first_m = (pid // group_width) * GROUP_M
    rows_here = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_width) % rows_here
    pid_n = (pid % group_width) // rows_here

    # row-major tensors; blocks past the edges read as zero and are not written
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([pid_m * BLOCK_M, k])
        b = b_desc.load([k, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


def make_matmul_descriptor(shape, device) -> tle.Launch:
    return _matmul_launch(shape, device, _BLOCK_PTR_NAMES, strides=False)

# -- attention forward: online softmax in base 2, causal or not -------------------------------------------------
@tle.jit
def attention_fwd_kernel(Q, K, V, Out, sm_scale,
                         stride_qz, stride_qh, stride_qm, stride_qd,
                         stride_kz, stride_kh, stride_kn, stride_kd,
                         stride_vz, stride_vh, stride_vn, stride_vd,
                         stride_oz, stride_oh, stride_om, stride_od,
                         H, N_CTX,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    o_base = Out + off_z * stride_oz + off_h * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=offs_m[:, None] < N_CTX, other=0.0)
    # exp(x * scale) = exp2(x * scale * log2(e)): fold log2(e) into the scale once
    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)   # keys past the block's last query are all masked
    else:
        hi = N_CTX
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        kt = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd,
                     mask=cols[None, :] < N_CTX, other=0.0)
        qk = tl.dot(q, kt) * qk_scale
        keep = cols[None, :] < N_CTX
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(keep, qk, -float("inf"))
        # running max, and the rescaling of what was summed under the old one
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=cols[:, None] < N_CTX, other=0.0)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od, acc.to(Out.dtype.element_ty),
             mask=offs_m[:, None] < N_CTX)


def attention_config(head_dim: int) -> dict:
    if head_dim <= 64:
        return dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)


def attention_reference(q, k, v, sm_scale, causal):
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                            scale=sm_scale)


def make_attention(shape, device, causal: bool) -> tle.Launch:
    (z, h, n_ctx, d), dtype, over = _split(shape)
    cfg = {**attention_config(d), **over}
    q, k, v = (torch.randn(z, h, n_ctx, d, device=device).to(dtype) for _ in range(3))
    out = torch.empty_like(q)
    sm_scale = d ** -0.5
    flops = 4 * z * h * n_ctx * n_ctx * d // (2 if causal else 1)
    grid = (cdiv(n_ctx, cfg["BLOCK_M"]), z * h)
    return tle.Launch(grid=grid, args=(q, k, v, out, sm_scale, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                                       h, n_ctx),
                      kwargs=dict(HEAD_DIM=d, CAUSAL=causal, **cfg), outputs={"out": out},
                      reference=lambda: {"out": attention_reference(q, k, v, sm_scale, causal)}, flops=flops,
                      label=f"Z{z} H{h} N{n_ctx} D{d} {DTYPE_NAMES[dtype]}" + (" causal" if causal else ""))


# -- the cases ------------------------------------------------------------------------------------------------
_MATMUL_SHAPES = [((512, 512, 512), fp16), ((2048, 2048, 2048), fp16), ((3000, 2000, 1500), fp16),
                  ((4096, 4096, 4096), fp16), ((8192, 8192, 8192), bf16)]
_MATMUL_CPU = [((96, 80, 72), fp16, dict(BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=16, GROUP_SIZE_M=2,
                                         num_warps=4, num_stages=2))]
_ATTENTION_SHAPES = [((1, 16, 512, 64), fp16), ((4, 16, 1024, 64), fp16), ((4, 32, 2048, 128), fp16),
                     ((2, 32, 8192, 128), fp16)]
_ATTENTION_CPU = [((1, 2, 72, 32), fp16, dict(BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=2))]

CASES = [
    Case("vector_add", add_kernel, make_add,
         shapes=[((1 << 16,), fp32), ((1 << 20,), fp32), ((1 << 24,), fp32), ((1 << 27,), fp32)],
         cpu_shapes=[((5000,), fp32, dict(BLOCK_SIZE=1024))], source="tests/parity_kernels.py"),
    Case("softmax", softmax_kernel, make_softmax,
         shapes=[((4096, 781), fp32), ((8192, 1024), fp32), ((8192, 4096), fp32), ((16384, 8192), fp32)],
         cpu_shapes=[((37, 100), fp32)], source="tests/parity_kernels.py"),
    Case("layer_norm", layer_norm_fwd_kernel, make_layer_norm,
         shapes=[((4096, 512), fp16), ((4096, 2048), fp16), ((8192, 8192), fp16), ((4096, 32768), bf16)],
         cpu_shapes=[((7, 300), fp16, dict(BLOCK_SIZE=128, num_warps=1))], source="tests/parity_kernels.py"),
    Case("matmul", matmul_kernel, make_matmul, shapes=_MATMUL_SHAPES, cpu_shapes=_MATMUL_CPU,
         source="tests/parity_kernels.py"),
    Case("matmul_block_ptr", matmul_block_ptr_kernel, make_matmul_block_ptr, shapes=_MATMUL_SHAPES,
         cpu_shapes=_MATMUL_CPU, source="tests/parity_kernels.py"),
    # TMA wants row strides of whole 16 bytes: K = 1504, not 1500, for the ragged shape
    Case("matmul_descriptor", matmul_descriptor_kernel, make_matmul_descriptor,
         shapes=[s if s[0] != (3000, 2000, 1500) else ((3000, 2000, 1504), fp16) for s in _MATMUL_SHAPES],
         cpu_shapes=_MATMUL_CPU, source="tests/parity_kernels.py"),
    Case("attention", attention_fwd_kernel, lambda s, d: make_attention(s, d, causal=False),
         shapes=_ATTENTION_SHAPES, cpu_shapes=_ATTENTION_CPU, source="tests/parity_kernels.py"),
    Case("attention_causal", attention_fwd_kernel, lambda s, d: make_attention(s, d, causal=True),
         shapes=_ATTENTION_SHAPES, cpu_shapes=_ATTENTION_CPU, source="tests/parity_kernels.py"),
]

