"""Gated activations of the transformer MLP, forward and backward:

    swiglu(gate, value) = silu(gate) * value
    geglu(gate, value, approximate) = gelu(gate, approximate) * value

`tle.ops.swiglu(gate, value)` takes two tensors of one shape [..., D]; `tle.ops.swiglu(x)` takes the packed
form [..., 2D] (gate = x[..., :D], value = x[..., D:], the output of one fused up-projection) and returns
[..., D]. geglu likewise. The kernels read the gate and the value each through a row stride, the value at a
column offset, so the packed form is read in place, no copy: the value is the packed tensor at column
offset D, the gate its view x[..., :D] (the same memory and row stride, with bounds of its own). They run
over [rows, D] in 2-D box tiles [BLOCK_M, BLOCK_N], in fp32, rounding once. The backward recomputes the
activation from the gate and writes both gradients in one pass (dgate = dy * value * act'(gate), dvalue =
dy * act(gate)); for the packed form those are the two halves of one [..., 2D] gradient. The math is
kernels/activation_math.py's, shared with tle.ops.gelu and tle.ops.silu."""
from __future__ import annotations

from typing import Optional

import torch
import triton.language as tl

import tle
from tle.kernels.activation_math import (activation, activation_and_grad, gelu_activation, reference_activation,
                                         torch_activation, torch_activation_and_grad)
from tle.oplib import BenchSpec, Operator, Sample, as_rows, check_float, check_kernel_dtypes
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import box_config, box_grid, int32_row_chunks, torch_compute_dtype


@tle.jit
def gated_fwd_kernel(g_ptr, v_ptr, y_ptr, g_row_stride, v_row_stride, v_col_offset, y_row_stride, n_rows, n_cols,
                     n_col_blocks, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACT: tl.constexpr):
    # a 1-D grid whose column blocks vary fastest: consecutive programs read consecutive memory (box_grid)
    tile = tl.program_id(0)
    rows = (tile // n_col_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (tile % n_col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    g = tl.load(g_ptr + rows[:, None] * g_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + rows[:, None] * v_row_stride + v_col_offset + cols[None, :], mask=mask,
                other=0.0).to(tl.float32)
    y = activation(g, ACT) * v
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@tle.jit
def gated_bwd_kernel(dy_ptr, g_ptr, v_ptr, dg_ptr, dv_ptr, dy_row_stride, g_row_stride, v_row_stride, v_col_offset,
                     dg_row_stride, dv_row_stride, dv_col_offset, n_rows, n_cols, n_col_blocks,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACT: tl.constexpr):
    tile = tl.program_id(0)
    rows = (tile // n_col_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (tile % n_col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + rows[:, None] * g_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + rows[:, None] * v_row_stride + v_col_offset + cols[None, :], mask=mask,
                other=0.0).to(tl.float32)
    act, dact = activation_and_grad(g, ACT)
    tl.store(dg_ptr + rows[:, None] * dg_row_stride + cols[None, :], (dy * v * dact).to(dg_ptr.dtype.element_ty),
             mask=mask)
    tl.store(dv_ptr + rows[:, None] * dv_row_stride + dv_col_offset + cols[None, :],
             (dy * act).to(dv_ptr.dtype.element_ty), mask=mask)


# -- the torch backend: the same arithmetic in torch (fp32, or fp64 for fp64 inputs) ------------------------
def _torch_forward(g, v, act):
    ct = torch_compute_dtype(g)
    return (torch_activation(g.to(ct), act) * v.to(ct)).to(g.dtype)


def _torch_backward(dy, g, v, act):
    ct = torch_compute_dtype(g)
    dyc = dy.to(ct)
    a, da = torch_activation_and_grad(g.to(ct), act)
    return (dyc * v.to(ct) * da).to(g.dtype), (dyc * a).to(v.dtype)


# -- the kernel backends ------------------------------------------------------------------------------------
# The operands are [rows, *] views with unit column stride: g and dg are [rows, D]; v and dv hold the value
# (its gradient) at column offset v_off (dv_off) of each row, so the packed form passes the packed tensor
# itself there, at offset D, and for g (dg) the view x[:, :D] of the same memory: every access is then a
# box whose mask is exactly its bounds (a bulk copy on TileLang).
def _kernel_forward(g, v, v_off, act, backend):
    m, n = g.shape
    y = torch.empty((m, n), device=g.device, dtype=g.dtype)
    block_m, block_n, warps = box_config(n)
    for r0, r1 in int32_row_chunks(m, max(g.stride(0), v.stride(0), n), block_m) if n else []:
        gc, vc, yc = g[r0:r1], v[r0:r1], y[r0:r1]
        grid, col_blocks = box_grid(r1 - r0, n, block_m, block_n)
        gated_fwd_kernel[grid](
            gc, vc, yc, gc.stride(0), vc.stride(0), v_off, yc.stride(0), r1 - r0, n, col_blocks, BLOCK_M=block_m,
            BLOCK_N=block_n, ACT=act, backend=backend, num_warps=warps)
    return y


def _kernel_backward(dy, g, v, v_off, dg, dv, dv_off, act, backend):
    m, n = g.shape
    block_m, block_n, warps = box_config(n)
    widest = max(dy.stride(0), g.stride(0), v.stride(0), dg.stride(0), dv.stride(0), n)
    for r0, r1 in int32_row_chunks(m, widest, block_m) if n else []:
        dyc, gc, vc, dgc, dvc = dy[r0:r1], g[r0:r1], v[r0:r1], dg[r0:r1], dv[r0:r1]
        grid, col_blocks = box_grid(r1 - r0, n, block_m, block_n)
        gated_bwd_kernel[grid](
            dyc, gc, vc, dgc, dvc, dyc.stride(0), gc.stride(0), vc.stride(0), v_off, dgc.stride(0), dvc.stride(0),
            dv_off, r1 - r0, n, col_blocks, BLOCK_M=block_m, BLOCK_N=block_n, ACT=act, backend=backend, num_warps=warps)


# Each stage on rows, in torch and on the kernels; value None: gate is the packed [rows, 2D] tensor.
def _torch_stage(gate, value, act):
    if value is None:
        d = gate.shape[1] // 2
        # contiguous halves: torch's vectorized CPU kernels can round a strided view's elements differently
        # from the same elements of a contiguous tensor, and the two forms must agree bit for bit
        gate, value = gate[:, :d].contiguous(), gate[:, d:].contiguous()
    return _torch_forward(gate, value, act)


def _kernel_stage(gate, value, act, backend):
    if value is None:
        return _kernel_forward(gate[:, :gate.shape[1] // 2], gate, gate.shape[1] // 2, act, backend)
    return _kernel_forward(gate, value, 0, act, backend)


def _torch_backward_stage(dy, gate, value, act):
    """(dgate, dvalue), or for the packed form (dx [rows, 2D], None)."""
    if value is None:
        d = gate.shape[1] // 2
        return torch.cat(_torch_backward(dy, gate[:, :d].contiguous(), gate[:, d:].contiguous(), act), dim=1), None
    return _torch_backward(dy, gate, value, act)


def _kernel_backward_stage(dy, gate, value, act, backend):
    dg = torch.empty(gate.shape, device=gate.device, dtype=gate.dtype)
    if value is None:
        d = gate.shape[1] // 2
        _kernel_backward(dy, gate[:, :d], gate, d, dg[:, :d], dg, d, act, backend)
        return dg, None
    dv = torch.empty(value.shape, device=value.device, dtype=value.dtype)
    _kernel_backward(dy, gate, value, 0, dg, dv, 0, act, backend)
    return dg, dv


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_shape(size):
    return ((33, 1000), torch.float32) if size == "small" else ((32768, 8192), torch.bfloat16)


@tle.example(gated_fwd_kernel)
def _fwd_example(device, size):
    """swiglu of the packed form: x [m, 2n] read in place, the gate through x[:, :n], the value at column
    offset n of x."""
    (m, n), dtype = _example_shape(size)
    x = (torch.randn(m, 2 * n, device=device) * 3).to(dtype)
    y = torch.full((m, n), float("nan"), device=device, dtype=dtype)
    block_m, block_n, warps = box_config(n)

    def ref():
        return {"y": torch_activation(x[:, :n].float(), "silu") * x[:, n:].float()}
    grid, col_blocks = box_grid(m, n, block_m, block_n)
    return tle.Launch(grid=grid, args=(x[:, :n], x, y, 2 * n, 2 * n, n, n, m, n, col_blocks),
                      kwargs=dict(BLOCK_M=block_m, BLOCK_N=block_n, ACT="silu",
                                  num_warps=warps),
                      outputs={"y": y}, reference=ref, bytes=3 * m * n * x.element_size(),
                      label=f"swiglu packed {m}x{2 * n} {str(dtype)[6:]}")


@tle.example(gated_bwd_kernel)
def _bwd_example(device, size):
    """geglu (erf) of separate gate and value tensors, the gradients into separate tensors."""
    (m, n), dtype = _example_shape(size)
    dy, g, v = ((torch.randn(m, n, device=device) * s).to(dtype) for s in (1, 3, 1))
    dg, dv = torch.full_like(g, float("nan")), torch.full_like(v, float("nan"))
    block_m, block_n, warps = box_config(n)

    def ref():
        a, da = torch_activation_and_grad(g.float(), "gelu")
        return {"dg": dy.float() * v.float() * da, "dv": dy.float() * a}
    grid, col_blocks = box_grid(m, n, block_m, block_n)
    return tle.Launch(grid=grid, args=(dy, g, v, dg, dv, n, n, n, 0, n, n, 0, m, n, col_blocks),
                      kwargs=dict(BLOCK_M=block_m, BLOCK_N=block_n, ACT="gelu",
                                  num_warps=warps),
                      outputs={"dg": dg, "dv": dv}, reference=ref, bytes=5 * m * n * g.element_size(),
                      label=f"geglu backward {m}x{n} {str(dtype)[6:]}")


# -- the operators' recipes: their custom ops and autograd -------------------------------------------------
def _by_rows(run, gate, value, act):
    """y of [..., D] from the gate and value ([..., D] each), or from the packed gate ([..., 2D], value None)."""
    if value is None:
        return run(as_rows(gate, "x"), None, act).reshape(*gate.shape[:-1], gate.shape[-1] // 2)
    return run(as_rows(gate, "gate"), as_rows(value, "value"), act).reshape(gate.shape)


def _backward_by_rows(run, dy, gate, value, act):
    """(dgate, dvalue), or for the packed form (dx [..., 2D], an empty placeholder)."""
    if value is None:
        dx, _ = run(as_rows(dy, "dy"), as_rows(gate, "x"), None, act)
        return dx.reshape(gate.shape), gate.new_empty(0)
    dg, dv = run(as_rows(dy, "dy"), as_rows(gate, "gate"), as_rows(value, "value"), act)
    return dg.reshape(gate.shape), dv.reshape(value.shape)


def _swiglu(run, gate: torch.Tensor, value: Optional[torch.Tensor]) -> torch.Tensor:
    return _by_rows(run, gate, value, "silu")


def _swiglu_backward(run, dy: torch.Tensor, gate: torch.Tensor,
                     value: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return _backward_by_rows(run, dy, gate, value, "silu")


def _geglu(run, gate: torch.Tensor, value: Optional[torch.Tensor], approximate: str) -> torch.Tensor:
    return _by_rows(run, gate, value, gelu_activation(approximate))


def _geglu_backward(run, dy: torch.Tensor, gate: torch.Tensor, value: Optional[torch.Tensor],
                    approximate: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _backward_by_rows(run, dy, gate, value, gelu_activation(approximate))


def _fake_forward(gate, value, *_):
    shape = gate.shape if value is not None else (*gate.shape[:-1], gate.shape[-1] // 2)
    return gate.new_empty(shape)


def _fake_backward(dy, gate, value, *_):
    return gate.new_empty(gate.shape), (value.new_empty(value.shape) if value is not None else gate.new_empty(0))


def _save(ctx, inputs, y):
    gate, value, *ctx.attributes = inputs          # geglu's approximate, or nothing
    ctx.save_for_backward(gate, value)


def _grads(ctx, backward, dy):
    gate, value = ctx.saved_tensors
    dg, dv = backward(dy, gate, value, *ctx.attributes)
    return dg, (dv if value is not None else None)


SWIGLU_OP = Recipe("swiglu",
                   forward=Stage(torch=_torch_stage, kernels=_kernel_stage, adapt=_swiglu, fake=_fake_forward),
                   backward=Stage(torch=_torch_backward_stage, kernels=_kernel_backward_stage,
                                  adapt=_swiglu_backward, fake=_fake_backward),
                   save=_save, grads=_grads)
GEGLU_OP = Recipe("geglu",
                  forward=Stage(torch=_torch_stage, kernels=_kernel_stage, adapt=_geglu, fake=_fake_forward),
                  backward=Stage(torch=_torch_backward_stage, kernels=_kernel_backward_stage,
                                 adapt=_geglu_backward, fake=_fake_backward),
                  save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def _check(op: Recipe, gate, value, backend, fallback) -> str:
    if value is None:
        check_float(gate, "x", rank=tuple(range(1, 9)))
        if gate.shape[-1] % 2:
            raise tle.LaunchError(f"'x' has shape {tuple(gate.shape)}: the packed form of {op.name} splits the last "
                                  f"dimension into gate and value halves, so it must be even")
    else:
        check_float(gate, "gate", rank=tuple(range(1, 9)))
        check_float(value, "value", device=gate.device, shape=tuple(gate.shape))
        if value.dtype != gate.dtype:
            raise tle.LaunchError(f"'value' has dtype {value.dtype}; expected gate's dtype {gate.dtype}")
    b = op.resolve(gate.device, backend, fallback)
    check_kernel_dtypes(op.name, b, gate=gate, value=value)
    return b


def swiglu(gate: torch.Tensor, value: torch.Tensor | None = None, *, backend: str | None = None,
           fallback: str | None = None) -> torch.Tensor:
    """silu(gate) * value; with `value` omitted, `gate` is the packed [..., 2D] tensor [gate | value] and the
    result is [..., D]."""
    b = _check(SWIGLU_OP, gate, value, backend, fallback)
    return SWIGLU_OP(gate, value, backend=b)


def geglu(gate: torch.Tensor, value: torch.Tensor | None = None, approximate: str = "none", *,
          backend: str | None = None, fallback: str | None = None) -> torch.Tensor:
    """gelu(gate, approximate) * value; with `value` None, `gate` is the packed [..., 2D] tensor
    [gate | value] and the result is [..., D]."""
    gelu_activation(approximate)
    b = _check(GEGLU_OP, gate, value, backend, fallback)
    return GEGLU_OP(gate, value, approximate, backend=b)


# -- tests and benchmarks -----------------------------------------------------------------------------------
def _reference(gate, value, act):
    if value is None:
        gate, value = gate.chunk(2, dim=-1)
    return reference_activation(gate, act) * value


def swiglu_reference(gate, value=None):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64."""
    return _reference(gate, value, "silu")


def geglu_reference(gate, value=None, approximate="none"):
    return _reference(gate, value, gelu_activation(approximate))


def swiglu_samples(device, dtype):
    def t(*shape, scale=3.0):
        return (torch.randn(*shape, device=device, dtype=torch.float32) * scale).to(dtype)
    return [Sample((t(5, 1), t(5, 1, scale=1)), label="1 column"),
            Sample((t(3, 7), t(3, 7, scale=1)), label="7 columns"),
            Sample((t(2, 3, 33), t(2, 3, 33, scale=1)), label="rank 3, 33 columns"),
            Sample((t(2, 1000), t(2, 1000, scale=1)), label="1000 columns"),
            Sample((t(1, 1500), t(1, 1500, scale=1)), label="1500 columns: two column blocks"),
            Sample((t(40, 9).t(), t(9, 40, scale=1)), label="transposed gate (copied)"),
            Sample((t(5, 2),), label="packed, 1 column"),
            Sample((t(3, 14),), label="packed, 7 columns"),
            Sample((t(2, 3, 66),), label="packed, rank 3, 33 columns"),
            Sample((t(2, 2000),), label="packed, 1000 columns"),
            Sample((t(1, 3000),), label="packed, 1500 columns: two column blocks"),
            Sample((t(0, 16), t(0, 16)), label="no rows"),
            Sample((t(0, 16),), label="packed, no rows")]


def geglu_samples(device, dtype):
    erf = swiglu_samples(device, dtype)
    tanh = [Sample((s.args[0], s.args[1] if len(s.args) > 1 else None, "tanh"), label=f"tanh, {s.label}")
            for i, s in enumerate(swiglu_samples(device, dtype)) if i in (1, 2, 4, 7, 8, 10)]
    return erf + tanh


_SHAPES = [(32768, 8192), (32768, 4096), (65536, 2048), (65536, 1024), (131072, 512)]


def _bench_make(shape, dtype, device):
    m, n = shape
    return Sample((torch.randn(m, n, device=device, dtype=dtype), torch.randn(m, n, device=device, dtype=dtype)))


def _bench_bytes(sample, mode):
    g = sample.args[0]
    # fwd: read gate and value, write y; bwd: read dy, gate and value, write dgate and dvalue
    return (3 if mode == "fwd" else 5) * g.numel() * g.element_size()


def _liger_swiglu(sample):
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    g, v = sample.args[:2]
    return lambda g=g, v=v: LigerSiLUMulFunction.apply(g, v)


def _liger_geglu(sample):
    from liger_kernel.ops.geglu import LigerGELUMulFunction
    g, v = sample.args[:2]
    approximate = sample.args[2] if len(sample.args) > 2 else "none"
    if approximate != "tanh":
        return None             # Liger's geglu is the tanh approximation only
    return lambda g=g, v=v: LigerGELUMulFunction.apply(g, v)


def _bench_make_tanh(shape, dtype, device):
    s = _bench_make(shape, dtype, device)
    return Sample(s.args + ("tanh",))


SWIGLU_OPERATOR = Operator(
    "swiglu", fn=swiglu, reference=swiglu_reference, samples=swiglu_samples, grad_inputs=(0, 1),
    bench=BenchSpec(dry_shapes=[(64, 256), (32, 512)],
                    shapes=_SHAPES, make=_bench_make, bytes=_bench_bytes,
                    eager=lambda s: (lambda g=s.args[0], v=s.args[1]: torch.nn.functional.silu(g) * v),
                    peers={"liger": _liger_swiglu}, shape_help="ROWSxCOLS (of the gate)"))
GEGLU_OPERATOR = Operator(
    "geglu", fn=geglu, reference=geglu_reference, samples=geglu_samples, grad_inputs=(0, 1),
    bench=BenchSpec(dry_shapes=[(64, 256), (32, 512)],
                    shapes=_SHAPES, make=_bench_make_tanh, bytes=_bench_bytes,
                    eager=lambda s: (lambda g=s.args[0], v=s.args[1]:
                                     torch.nn.functional.gelu(g, approximate="tanh") * v),
                    peers={"liger": _liger_geglu}, shape_help="ROWSxCOLS (of the gate)"))
OPERATOR = (SWIGLU_OPERATOR, GEGLU_OPERATOR)
