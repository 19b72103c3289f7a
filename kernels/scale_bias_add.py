"""Scale, bias and residual in one pass: the affine tail of a block (a layer scale, its bias, the residual add).

    y = x * scale + bias + residual        scale, bias: [N], broadcast over the rows of x [..., N]

`tle.ops.scale_bias_add(x, scale, bias, residual)`; a 0-d or one-element scale or bias is expanded to [N]
first (its gradient is then summed back to its own shape by autograd). The kernels run over [rows, N] in
2-D box tiles, in fp32, rounding once. Backward: dx = dy * scale, dresidual = dy (the upstream gradient
itself, no copy), and the column sums dscale = sum_rows(dy * x), dbias = sum_rows(dy): each program of
the backward kernel owns a block of columns and a run of row blocks, adds up its rows' contributions in
registers and writes one row of partial sums, which column_sums adds up, both in one launch (one pass over dy and x)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton.language as tl

import tle
from tle.kernels.column_sum import column_sums
from tle.oplib import BenchSpec, Operator, Sample, as_rows, check_float, check_kernel_dtypes, programs
from tle.oplib.arith import cdiv, next_power_of_2
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import box_config, box_grid, int32_row_chunks, torch_compute_dtype
from tle.oplib.tensors import reshaped


def fwd_config(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) of the forward kernel: tiles of 4096 elements, up to 2048 columns wide,
    and warps enough for 8 columns a thread where the row allows it: TileLang lays the tiles out as the
    [BLOCK_N] scale and bias, so that is what gives 16-byte accesses in bf16."""
    block_n = min(2048, next_power_of_2(max(n_cols, 1)))
    return max(1, 4096 // block_n), block_n, max(4, min(8, block_n // 256))


def bwd_config(n_cols: int, backend: str) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, programs per multiprocessor) of the backward kernel: the forward's box
    tiles on TileLang, half as many rows and half the programs on Triton. Measured on the H200 (bf16,
    32768x8192, TB/s): Triton [2, 1024] 4 warps 4 per SM 3.97, [4, 1024] 8 per SM 3.77; TileLang [4, 1024]
    8 per SM 3.73, [2, 1024] 4 per SM 3.27."""
    block_m, block_n, _ = box_config(n_cols)
    if backend == "triton":
        return max(1, block_m // 2), block_n, 4, 4
    return block_m, block_n, 4, 8


@tle.jit
def scale_bias_add_fwd_kernel(x_ptr, s_ptr, b_ptr, r_ptr, y_ptr, x_row_stride, r_row_stride, y_row_stride, n_rows,
                              n_cols, n_col_blocks, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # a 1-D grid whose column blocks vary fastest: consecutive programs read consecutive memory (box_grid)
    tile = tl.program_id(0)
    rows = (tile // n_col_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (tile % n_col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + rows[:, None] * r_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    s = tl.load(s_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    y = x * s[None, :] + b[None, :] + r
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@tle.jit
def scale_bias_add_bwd_kernel(dy_ptr, x_ptr, s_ptr, dx_ptr, ds_ptr, db_ptr, dy_row_stride, x_row_stride,
                              dx_row_stride, n_rows, n_cols, blocks_per_program, BLOCK_M: tl.constexpr,
                              BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    s = tl.load(s_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    ds = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    # the loads of row block i + 1 are issued before block i is used, so that their latency overlaps its work
    first = pid * blocks_per_program * BLOCK_M + tl.arange(0, BLOCK_M)
    first_mask = (first < n_rows)[:, None] & col_mask[None, :]
    dy_next = tl.load(dy_ptr + first[:, None] * dy_row_stride + cols[None, :], mask=first_mask, other=0.0)
    x_next = tl.load(x_ptr + first[:, None] * x_row_stride + cols[None, :], mask=first_mask, other=0.0)
    for i in range(0, blocks_per_program):
        rows = (pid * blocks_per_program + i) * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        dy = dy_next.to(tl.float32)
        x = x_next.to(tl.float32)
        next_rows = rows + BLOCK_M
        # the last step reads the next program's first block (a masked step would be a mask term that TileLang
        # cannot load as a box): one block in blocks_per_program read twice
        next_mask = (next_rows < n_rows)[:, None] & col_mask[None, :]
        dy_next = tl.load(dy_ptr + next_rows[:, None] * dy_row_stride + cols[None, :], mask=next_mask, other=0.0)
        x_next = tl.load(x_ptr + next_rows[:, None] * x_row_stride + cols[None, :], mask=next_mask, other=0.0)
        ds += dy * x
        db += dy
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], (dy * s[None, :]).to(dx_ptr.dtype.element_ty),
                 mask=mask)
    tl.store(ds_ptr + pid * n_cols + cols, tl.sum(ds, axis=0), mask=col_mask)
    tl.store(db_ptr + pid * n_cols + cols, tl.sum(db, axis=0), mask=col_mask)


# -- the torch backend: the same arithmetic in torch (fp32, or fp64 for fp64 inputs) ------------------------
def _torch_forward(x, scale, bias, residual):
    ct = torch_compute_dtype(x)
    return (x.to(ct) * scale.to(ct) + bias.to(ct) + residual.to(ct)).to(x.dtype)


def _torch_backward(dy, x, scale, bias):
    ct = torch_compute_dtype(x)
    dyc = dy.to(ct)
    return ((dyc * scale.to(ct)).to(x.dtype), (dyc * x.to(ct)).sum(0).to(scale.dtype),
            dyc.sum(0).to(bias.dtype))


# -- the kernel backends: one launch per range of rows whose offsets fit an int32 ---------------------------
def _kernel_forward(x, scale, bias, residual, backend):
    scale, bias = scale.contiguous(), bias.contiguous()
    m, n = x.shape
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    block_m, block_n, warps = fwd_config(n)
    for r0, r1 in int32_row_chunks(m, max(x.stride(0), residual.stride(0), n), block_m) if n else []:
        xc, rc, yc = x[r0:r1], residual[r0:r1], y[r0:r1]
        grid, col_blocks = box_grid(r1 - r0, n, block_m, block_n)
        scale_bias_add_fwd_kernel[grid](
            xc, scale, bias, rc, yc, xc.stride(0), rc.stride(0), yc.stride(0), r1 - r0, n, col_blocks, BLOCK_M=block_m,
            BLOCK_N=block_n, backend=backend, num_warps=warps)
    return y


def _bwd_grid(device, rows: int, n_cols: int, block_m: int, block_n: int, per_sm: int) -> tuple[int, int, int]:
    """(programs over the rows, over the columns, row blocks per program) of the backward kernel."""
    blocks, col_blocks = cdiv(rows, block_m), cdiv(n_cols, block_n)
    grid_m = max(1, min(blocks, programs(device, per_sm, blocks * col_blocks) // col_blocks))
    per_program = cdiv(blocks, grid_m)
    return cdiv(blocks, per_program), col_blocks, per_program


def _kernel_backward(dy, x, scale, bias, backend):
    scale = scale.contiguous()
    m, n = x.shape
    if backend == "tilelang" and n == 1 and m:
        # TileLang 0.1.15's CUDA codegen fails on this kernel for rows of one column ("Cannot convert type
        # float16x32 to CUDA type"): the kernel runs on the rows widened by a zero column, cut off after
        dx, ds, db = _kernel_backward(F.pad(dy, (0, 1)), F.pad(x, (0, 1)), F.pad(scale.reshape(1), (0, 1)),
                                      F.pad(bias.reshape(1), (0, 1)), backend)
        return dx[:, :1].contiguous(), ds[:1].clone(), db[:1].clone()
    dx = torch.empty((m, n), device=x.device, dtype=x.dtype)
    if not (m and n):
        return dx, torch.zeros_like(scale), torch.zeros_like(bias)
    block_m, block_n, warps, per_sm = bwd_config(n, backend)
    chunks = int32_row_chunks(m, max(dy.stride(0), x.stride(0), n), block_m)
    grids = [_bwd_grid(x.device, r1 - r0, n, block_m, block_n, per_sm) for r0, r1 in chunks]
    parts = torch.empty((2, sum(g[0] for g in grids), n), device=x.device, dtype=torch.float32)
    p0 = 0
    for (r0, r1), (grid_m, grid_n, per_program) in zip(chunks, grids):
        dyc, xc, dxc = dy[r0:r1], x[r0:r1], dx[r0:r1]
        scale_bias_add_bwd_kernel[(grid_m, grid_n)](
            dyc, xc, scale, dxc, parts[0, p0:p0 + grid_m], parts[1, p0:p0 + grid_m], dyc.stride(0), xc.stride(0),
            dxc.stride(0), r1 - r0, n, per_program, BLOCK_M=block_m, BLOCK_N=block_n, backend=backend,
            num_warps=warps)
        p0 += grid_m
    return (dx,) + column_sums(parts, scale.dtype, bias.dtype, backend)


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_shape(size):
    return ((33, 1000), torch.float32) if size == "small" else ((32768, 8192), torch.bfloat16)


@tle.example(scale_bias_add_fwd_kernel)
def _fwd_example(device, size):
    (m, n), dtype = _example_shape(size)
    x, r = torch.randn(m, n, device=device, dtype=dtype), torch.randn(m, n, device=device, dtype=dtype)
    s, b = torch.rand(n, device=device, dtype=dtype) + 0.5, torch.randn(n, device=device, dtype=dtype)
    y = torch.full_like(x, float("nan"))
    block_m, block_n, warps = fwd_config(n)
    grid, col_blocks = box_grid(m, n, block_m, block_n)
    return tle.Launch(grid=grid, args=(x, s, b, r, y, n, n, n, m, n, col_blocks),
                      kwargs=dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps), outputs={"y": y},
                      reference=lambda: {"y": _torch_forward(x, s, b, r)}, bytes=3 * m * n * x.element_size(),
                      label=f"{m}x{n} {str(dtype)[6:]}")


@tle.example(scale_bias_add_bwd_kernel)
def _bwd_example(device, size):
    (m, n), dtype = _example_shape(size)
    dy, x = torch.randn(m, n, device=device, dtype=dtype), torch.randn(m, n, device=device, dtype=dtype)
    s = torch.rand(n, device=device, dtype=dtype) + 0.5
    dx = torch.full_like(x, float("nan"))
    block_m, block_n, warps, _ = bwd_config(n, "triton")      # one launch for both lowerings
    blocks = cdiv(m, block_m)
    grid_m = 4 if size == "small" else 132
    per_program = cdiv(blocks, grid_m)
    grid_m = cdiv(blocks, per_program)
    ds, db = (torch.full((grid_m, n), float("nan"), device=device) for _ in range(2))

    def ref():
        rows = torch.arange(m, device=device) // block_m // per_program
        return {"dx": dy.float() * s.float(),
                "ds_partials": torch.zeros(grid_m, n, device=device).index_add_(0, rows, dy.float() * x.float()),
                "db_partials": torch.zeros(grid_m, n, device=device).index_add_(0, rows, dy.float())}
    return tle.Launch(grid=(grid_m, cdiv(n, block_n)), args=(dy, x, s, dx, ds, db, n, n, n, m, n, per_program),
                      kwargs=dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps),
                      outputs={"dx": dx, "ds_partials": ds, "db_partials": db}, reference=ref,
                      bytes=3 * m * n * x.element_size(), label=f"{m}x{n} {str(dtype)[6:]}")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _by_rows(run, x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return reshaped(run(as_rows(x, "x"), scale, bias, as_rows(residual, "residual")), x.shape)


def _backward_by_rows(run, dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor,
                      bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dscale, dbias); `bias` gives dbias its dtype."""
    dx, ds, db = run(as_rows(dy, "dy"), as_rows(x, "x"), scale, bias)
    return reshaped(dx, x.shape), ds, db


def _save(ctx, inputs, y):
    x, scale, bias, residual = inputs
    ctx.save_for_backward(x, scale, bias)


def _grads(ctx, backward, dy):
    return (*backward(dy, *ctx.saved_tensors), dy)


SCALE_BIAS_ADD = Recipe(
    "scale_bias_add",
    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_by_rows,
                  fake=lambda x, scale, bias, residual: x.new_empty(x.shape)),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_by_rows,
                   fake=lambda dy, x, scale, bias: (x.new_empty(x.shape), scale.new_empty(scale.shape),
                                                    bias.new_empty(bias.shape))),
    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def _as_vector(t, name: str, n: int, device) -> torch.Tensor:
    """`t` as an [n] vector: a 0-d or one-element tensor is expanded to [n] (a contiguous copy)."""
    check_float(t, name, device=device)
    if tuple(t.shape) == (n,):
        return t
    if t.dim() <= 1 and t.numel() == 1:
        return t.reshape(1).expand(n).contiguous()
    raise tle.LaunchError(f"'{name}' has shape {tuple(t.shape)}; expected ({n},) (the last dimension of x), "
                          f"or a scalar (0-d or one element)")


def scale_bias_add(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, *,
                   backend: str | None = None, fallback: str | None = None) -> torch.Tensor:
    """x * scale + bias + residual, with scale and bias [N] (or scalars, expanded to [N]) broadcast over the
    rows of x [..., N], and residual of x's shape and dtype."""
    check_float(x, "x", rank=tuple(range(1, 9)))
    n = x.shape[-1]
    scale, bias = _as_vector(scale, "scale", n, x.device), _as_vector(bias, "bias", n, x.device)
    check_float(residual, "residual", device=x.device, shape=tuple(x.shape))
    if residual.dtype != x.dtype:
        raise tle.LaunchError(f"'residual' has dtype {residual.dtype}; expected x's dtype {x.dtype}")
    b = SCALE_BIAS_ADD.resolve(x.device, backend, fallback)
    check_kernel_dtypes("scale_bias_add", b, x=x, scale=scale, bias=bias)
    return SCALE_BIAS_ADD(x, scale, bias, residual, backend=b)


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(x, scale, bias, residual):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64."""
    return x * scale + bias + residual


def samples(device, dtype):
    def t(*shape, shift=0.0):
        return torch.randn(*shape, device=device, dtype=torch.float32).add(shift).to(dtype)
    return [Sample((t(5, 1), t(1, shift=1), t(1), t(5, 1)), label="1 column"),
            Sample((t(3, 7), t(7, shift=1), t(7), t(3, 7)), label="7 columns"),
            Sample((t(2, 3, 33), t(33, shift=1), t(33), t(2, 3, 33)), label="rank 3, 33 columns"),
            Sample((t(4, 1000), t(1000, shift=1), t(1000), t(4, 1000)), label="1000 columns"),
            Sample((t(4, 9), t((), shift=1), t(1), t(4, 9)), label="0-d scale, one-element bias"),
            Sample((t(9, 4).t(), t(9, shift=1), t(9), t(4, 9)), label="transposed x (copied)"),
            Sample((t(0, 16), t(16), t(16), t(0, 16)), label="no rows")]


def _bench_make(shape, dtype, device):
    m, n = shape
    x, r = torch.randn(m, n, device=device, dtype=dtype), torch.randn(m, n, device=device, dtype=dtype)
    return Sample((x, torch.rand(n, device=device, dtype=dtype) + 0.5, torch.randn(n, device=device, dtype=dtype), r))


def _bench_bytes(sample, mode):
    x = sample.args[0]
    # fwd: read x and residual, write y; bwd: read dy and x, write dx (dresidual is dy itself; the
    # scale, bias and their gradients are a rounding error)
    return 3 * x.numel() * x.element_size() + 2 * x.shape[-1] * x.element_size()


def _eager(sample):
    x, s, b, r = sample.args
    return lambda x=x, s=s, b=b, r=r: x * s + b + r


OPERATOR = Operator(
    "scale_bias_add", fn=scale_bias_add, reference=reference, samples=samples, grad_inputs=(0, 1, 2, 3),
    bench=BenchSpec(dry_shapes=[(64, 256), (32, 512)],
                    shapes=[(32768, 8192), (32768, 4096), (65536, 2048), (65536, 1024), (131072, 512)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, shape_help="ROWSxCOLS"))
