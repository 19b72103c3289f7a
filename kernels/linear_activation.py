"""A linear layer with its activation fused into the product's epilogue, and its SwiGLU form.

    y = tle.ops.linear_act(x, weight, bias=None, activation="silu")    # act(x @ weight^T + bias)
    y = tle.ops.linear_swiglu(x, w_gate_up)                           # silu(x @ Wg^T) * (x @ Wu^T)

x is [..., K]; weight [N, K] (nn.Linear's layout), bias [N]; activation "silu", "gelu", "gelu_tanh", "relu" or
None. w_gate_up is [2I, K]: the gate projection's rows, then the up projection's (the concatenated gate/up
weight of Llama-style MLPs); y is [..., I]. fp16 or bf16 (fp32 and fp64 on the torch backend only); N, K and
I multiples of 8 on the kernel backends (tensor-memory rows are whole 16 bytes).

Numerics: the product accumulates in fp32 and the bias and activation apply to the fp32 accumulator, so the
output is rounded once (torch's F.linear then F.silu rounds the product to the dtype first, then the
activation's result). The torch backend computes the same in fp32.

Backward: when a gradient is needed, the forward's epilogue also writes the pre-activation (x W^T + b, rounded
to the dtype; both products for SwiGLU) and the backward computes dpre = dy * act'(pre) in one element-wise
pass, then dx = dpre W and dW = dpre^T x with the same product kernel (and db = the column sums of dpre). The
alternative, recomputing the product in the backward instead of saving it, costs a whole GEMM (the forward's
time) against one [M, N] store; docs/benchmark/linear_act.md has both figures.

How (kernels/linear_gemm.py): one product kernel, read through tensor descriptors; on Triton a program per
SM walks the output tiles with its tile loop warp-specialized (TMA loads ahead of the tensor cores while the
last tile's epilogue runs); on TileLang a program per 128x256 tile, which TileLang splits into producer and
consumer warps itself."""
from __future__ import annotations

import math
from functools import partial
from typing import Optional

import torch

import tle
from tle.errors import LaunchError
from tle.kernels import activations, gated_activations, linear_gemm
from tle.kernels.activation_math import ACTIVATIONS, reference_activation, torch_activation
from tle.kernels.column_sum import column_sum
from tle.oplib import BenchSpec, Operator, Sample, check_float
from tle.oplib.dispatch import last_use_of_saved
from tle.oplib.operator import Sweep
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype

KERNEL_DTYPES = (torch.float16, torch.bfloat16)
# the gradients round twice before their products (the saved pre-activation, then dpre): twice the default
# tolerances of tle.examples.TOLERANCES
GRAD_TOLERANCES = {torch.float16: (2 ** -10, 2 ** -9), torch.bfloat16: (2 ** -7, 2 ** -6)}


# -- the torch backend: the same arithmetic in fp32 (fp64 for fp64 inputs) ----------------------------------
def _torch_product(x, w, bias):
    ct = torch_compute_dtype(x)
    pre = x.to(ct) @ w.to(ct).T
    return pre if bias is None else pre + bias.to(ct)


def _torch_forward(x, weight, bias, activation, save_pre):
    pre = _torch_product(x, weight, bias)
    y = pre if activation == "none" else torch_activation(pre, activation)
    return y.to(x.dtype), (pre.to(x.dtype) if save_pre else x.new_empty(0))


def _torch_grads(dpre, x, weight, has_bias):
    """(dx, dW, db) of the product from dpre (in the compute dtype); db is empty without a bias."""
    ct = dpre.dtype
    dx = (dpre @ weight.to(ct)).to(x.dtype)
    dw = (dpre.T @ x.to(ct)).to(weight.dtype)
    return dx, dw, (dpre.sum(0).to(weight.dtype) if has_bias else weight.new_empty(0))


def _torch_backward(dy, x, weight, pre, activation, has_bias):
    # the element-wise operators' torch backwards, on the pre-activation in the compute dtype
    ct = torch_compute_dtype(x)
    dpre = dy.to(ct) if activation == "none" else activations._torch_backward(dy, pre.to(ct), activation)
    return _torch_grads(dpre, x, weight, has_bias)


def _torch_swiglu(x, w_gate_up, save_pre):
    pre = _torch_product(x, w_gate_up, None)
    i = w_gate_up.shape[0] // 2
    y = gated_activations._torch_forward(pre[:, :i], pre[:, i:], "silu")
    return y.to(x.dtype), (pre.to(x.dtype) if save_pre else x.new_empty(0))


def _torch_swiglu_backward(dy, x, w_gate_up, pre):
    ct = torch_compute_dtype(x)
    i = w_gate_up.shape[0] // 2
    dgate, dup = gated_activations._torch_backward(dy, pre[:, :i].to(ct), pre[:, i:].to(ct), "silu")
    return _torch_grads(torch.cat([dgate, dup], dim=1), x, w_gate_up, False)[:2]


# -- the kernel backends ------------------------------------------------------------------------------------
def _empty(rows, cols, like):
    return torch.empty((rows, cols), device=like.device, dtype=like.dtype)


def _kernel_forward(x, weight, bias, activation, save_pre, backend):
    (m, _), n = x.shape, weight.shape[0]
    y = _empty(m, n, x)
    pre = _empty(m, n, x) if save_pre else x.new_empty(0)
    if m and n:
        if x.shape[1] == 0:
            return _empty_product(y, bias, activation), (_empty_product(pre, bias, "none") if save_pre else pre)
        linear_gemm.launch(x, weight, y, b_t=True, bias=bias, act=activation, pre=pre if save_pre else None,
                           backend=backend)
    return y, pre


def _empty_product(out, bias, activation):
    """act(bias) (or zeros) broadcast: the product over an empty inner dimension."""
    base = torch.zeros(out.shape[1], device=out.device) if bias is None else bias.float()
    return out.copy_((base if activation == "none" else torch_activation(base, activation)).expand(out.shape))


def _kernel_grads(dpre, x, weight, has_bias, backend):
    (m, k), n = x.shape, dpre.shape[1]
    dx, dw = _empty(m, k, x), _empty(n, k, weight)
    if m and k and n:
        linear_gemm.launch(dpre, weight, dx, backend=backend)                 # [M, N] x [N, K]
        linear_gemm.launch(dpre, x, dw, a_t=True, backend=backend)            # [N, M] x [M, K]
    else:                                                                     # an empty sum
        dx.zero_(), dw.zero_()
    db = weight.new_empty(0)
    if has_bias:
        db = column_sum(dpre, weight.dtype, backend) if m else torch.zeros(n, device=x.device, dtype=weight.dtype)
    return dx, dw, db


def _kernel_backward(dy, x, weight, pre, activation, has_bias, backend):
    dpre = dy if activation == "none" else activations._kernel_backward(dy, pre, activation, backend)
    return _kernel_grads(dpre, x, weight, has_bias, backend)


def _kernel_swiglu(x, w_gate_up, save_pre, backend):
    m, i = x.shape[0], w_gate_up.shape[0] // 2
    y = _empty(m, i, x)
    pre = _empty(m, 2 * i, x) if save_pre else x.new_empty(0)
    if m and i:
        if x.shape[1] == 0:
            return y.zero_(), (pre.zero_() if save_pre else pre)
        linear_gemm.launch(x, w_gate_up[:i], y, b_t=True, b2=w_gate_up[i:], pre=pre[:, :i] if save_pre else None,
                           pre2=pre[:, i:] if save_pre else None, backend=backend)
    return y, pre


def _kernel_swiglu_backward(dy, x, w_gate_up, pre, backend, overwrite_pre=False):
    # overwrite_pre: the gradient of the pre-activations goes where they lie (each element is read before it is
    # written, by the same program): no second [M, 2I] buffer at the backward's peak
    i = w_gate_up.shape[0] // 2
    dpre = pre if overwrite_pre else torch.empty_like(pre)
    if dpre.numel():
        gated_activations._kernel_backward(dy, pre[:, :i], pre, i, dpre[:, :i], dpre, i, "silu", backend)
    return _kernel_grads(dpre, x, w_gate_up, False, backend)[:2]


def _dense(t: torch.Tensor) -> torch.Tensor:
    """`t` contiguous and starting on 16 bytes (what a tensor descriptor reads; a copy where it is not)."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _rows(t: torch.Tensor) -> torch.Tensor:
    """`t` [..., C] as a dense [rows, C] matrix."""
    return _dense(t.reshape(-1, t.shape[-1]))


# -- the operators' recipes: custom ops on x [..., K] (the stages fold it into rows), and autograd ----------
def _linear_act(run, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], activation: str,
                save_pre: bool) -> tuple[torch.Tensor, torch.Tensor]:
    y, pre = run(_rows(x), _dense(weight), bias, activation, save_pre)
    return y.view(*x.shape[:-1], weight.shape[0]), pre


def _linear_act_backward(run, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, pre: torch.Tensor,
                         activation: str, has_bias: bool
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dw, db = run(_rows(dy), _rows(x), _dense(weight), pre, activation, has_bias)
    return dx.view(x.shape), dw, db


def _forward_fake(x, weight, bias, activation, save_pre):
    n = weight.shape[0]
    pre = x.new_empty((math.prod(x.shape[:-1]), n)) if save_pre else x.new_empty(0)
    return x.new_empty((*x.shape[:-1], n)), pre


def _save(ctx, inputs, output):
    x, weight, bias, ctx.activation, _ = inputs
    ctx.has_bias = bias is not None
    ctx.save_for_backward(x, weight, output[1])
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)        # no zero-filled [M, N] gradient for the pre-activation output


def _grads(ctx, backward, dy, _dpre):
    if dy is None:                          # no gradient reached the output (grads are not materialized)
        return None, None, None
    x, weight, pre = ctx.saved_tensors
    dx, dw, db = backward(dy, x, weight, pre, ctx.activation, ctx.has_bias)
    return dx, dw, (db if ctx.has_bias else None)


LINEAR_ACT = Recipe(
    "linear_act",
    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_linear_act, fake=_forward_fake),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_linear_act_backward,
                   fake=lambda dy, x, weight, pre, activation, has_bias: (
                       x.new_empty(x.shape), weight.new_empty(weight.shape),
                       weight.new_empty(weight.shape[0] if has_bias else 0))),
    save=_save, grads=_grads)


def _swiglu(run, x: torch.Tensor, w_gate_up: torch.Tensor, save_pre: bool) -> tuple[torch.Tensor, torch.Tensor]:
    y, pre = run(_rows(x), _dense(w_gate_up), save_pre)
    return y.view(*x.shape[:-1], w_gate_up.shape[0] // 2), pre


def _swiglu_backward(run, dy: torch.Tensor, x: torch.Tensor, w_gate_up: torch.Tensor,
                     pre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    dx, dw = run(_rows(dy), _rows(x), _dense(w_gate_up), pre)
    return dx.view(x.shape), dw


def _swiglu_fake(x, w_gate_up, save_pre):
    i = w_gate_up.shape[0] // 2
    pre = x.new_empty((math.prod(x.shape[:-1]), 2 * i)) if save_pre else x.new_empty(0)
    return x.new_empty((*x.shape[:-1], i)), pre


def _swiglu_save(ctx, inputs, output):
    x, w_gate_up, _ = inputs
    ctx.save_for_backward(x, w_gate_up, output[1])
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)


def _swiglu_grads(ctx, backward, dy, _dpre):
    if dy is None:
        return None, None
    saved = ctx.saved_tensors
    if ctx.backend != "torch" and last_use_of_saved(ctx, (dy, *saved)):       # the saved pre-activations are free
        return _swiglu_backward(partial(_kernel_swiglu_backward, backend=ctx.backend, overwrite_pre=True), dy, *saved)
    return backward(dy, *saved)


LINEAR_SWIGLU = Recipe(
    "linear_swiglu",
    forward=Stage(torch=_torch_swiglu, kernels=_kernel_swiglu, adapt=_swiglu, fake=_swiglu_fake),
    backward=Stage(torch=_torch_swiglu_backward, kernels=_kernel_swiglu_backward, adapt=_swiglu_backward,
                   fake=lambda dy, x, w, pre: (x.new_empty(x.shape), w.new_empty(w.shape))),
    save=_swiglu_save, grads=_swiglu_grads)


# -- the public surface -------------------------------------------------------------------------------------
def _check(op: str, x, weight, weight_name: str, backend: str, out_features: int) -> None:
    check_float(x, "x")
    check_float(weight, weight_name, device=x.device, rank=2)
    if x.dim() == 0:
        raise LaunchError(f"tle.ops.{op}: 'x' is a scalar; expected [..., in_features]")
    if weight.dtype != x.dtype:
        raise LaunchError(f"tle.ops.{op}: '{weight_name}' has dtype {weight.dtype}, 'x' {x.dtype}; they must match")
    if weight.shape[1] != x.shape[-1]:
        raise LaunchError(f"tle.ops.{op}: 'x' has {x.shape[-1]} features (last dimension) and '{weight_name}' "
                          f"takes {weight.shape[1]} (shape {tuple(weight.shape)})")
    if backend != "torch":
        if x.dtype not in KERNEL_DTYPES:
            raise LaunchError(f"tle.ops.{op}: 'x' has dtype {str(x.dtype)[6:]}; backend '{backend}' takes fp16 and "
                              f"bf16 (the torch backend takes fp32 and fp64 too)")
        for name, size in (("in_features", x.shape[-1]), ("out_features", out_features)):
            if size % 8:
                raise LaunchError(f"tle.ops.{op}: {name} is {size}; backend '{backend}' needs a multiple of 8 "
                                  f"(tensor-memory rows of whole 16 bytes)")


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def linear_act(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               activation: str | None = "silu", *, backend: str | None = None,
               fallback: str | None = None) -> torch.Tensor:
    """act(x @ weight^T + bias): x [..., K], weight [N, K], bias [N] or None; activation "silu", "gelu",
    "gelu_tanh", "relu" or None (the plain linear layer). Returns [..., N]."""
    act = "none" if activation is None else activation
    if act not in ACTIVATIONS + ("none",):
        raise LaunchError(f"tle.ops.linear_act: 'activation' is {activation!r}; expected one of "
                          f"{', '.join(map(repr, ACTIVATIONS))} or None")
    b = LINEAR_ACT.resolve(x.device, backend, fallback) if isinstance(x, torch.Tensor) else None
    _check("linear_act", x, weight, "weight", b, weight.shape[0] if isinstance(weight, torch.Tensor) else 0)
    if bias is not None:
        check_float(bias, "bias", device=x.device, shape=(weight.shape[0],))
        if bias.dtype != x.dtype:
            raise LaunchError(f"tle.ops.linear_act: 'bias' has dtype {bias.dtype}, 'x' {x.dtype}; they must match")
    save = act != "none" and _needs_grad(x, weight, bias)
    y, _ = LINEAR_ACT(x, weight, None if bias is None else bias.contiguous(), act, save, backend=b)
    return y


def linear_swiglu(x: torch.Tensor, w_gate_up: torch.Tensor, *, backend: str | None = None,
                  fallback: str | None = None) -> torch.Tensor:
    """silu(x @ Wg^T) * (x @ Wu^T) with w_gate_up = [Wg; Wu] of shape [2I, K]: x [..., K] -> [..., I]."""
    b = LINEAR_SWIGLU.resolve(x.device, backend, fallback) if isinstance(x, torch.Tensor) else None
    _check("linear_swiglu", x, w_gate_up, "w_gate_up", b,
           w_gate_up.shape[0] // 2 if isinstance(w_gate_up, torch.Tensor) else 0)
    if w_gate_up.shape[0] % 2:
        raise LaunchError(f"tle.ops.linear_swiglu: 'w_gate_up' has {w_gate_up.shape[0]} rows; expected 2I "
                          f"(the gate's I rows, then the up projection's)")
    y, _ = LINEAR_SWIGLU(x, w_gate_up, _needs_grad(x, w_gate_up), backend=b)
    return y


# -- tests and benchmarks -----------------------------------------------------------------------------------
def linear_act_reference(x, weight, bias=None, activation="silu"):
    """Plain differentiable torch (no custom op): the tests' ground truth."""
    y = torch.nn.functional.linear(x, weight, bias)
    return y if activation is None else reference_activation(y, activation)


def linear_swiglu_reference(x, w_gate_up):
    gate, up = torch.nn.functional.linear(x, w_gate_up).chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


def _tensor(device, dtype, *shape, scale=1.0):
    return (torch.randn(*shape, device=device) * scale).to(dtype)


def linear_act_samples(device, dtype):
    def case(m, k, n, act, bias=True, label=""):
        x, w = _tensor(device, dtype, *m, k), _tensor(device, dtype, n, k, scale=k ** -0.5)
        b = _tensor(device, dtype, n) if bias else None
        return Sample((x, w, b, act), label=label or f"{'x'.join(map(str, m))}x{k} -> {n}, {act}")
    return [case((40,), 48, 24, "silu"), case((2, 33), 64, 40, "gelu"), case((70,), 32, 136, "gelu_tanh"),
            case((17,), 24, 16, "relu", bias=False), case((9,), 40, 16, None, label="no activation"),
            case((3, 5), 16, 8, "silu", bias=False, label="rank 3, no bias"),
            case((0,), 16, 8, "silu", label="no rows")]


def linear_swiglu_samples(device, dtype):
    def case(m, k, i, label=""):
        return Sample((_tensor(device, dtype, *m, k), _tensor(device, dtype, 2 * i, k, scale=k ** -0.5)),
                      label=label or f"{'x'.join(map(str, m))}x{k} -> {i}")
    return [case((6,), 16, 8, label="6x16 -> 8 (small enough for gradcheck)"), case((40,), 48, 24),
            case((2, 33), 64, 136), case((0,), 16, 8, label="no rows")]


def _bench_make(shape, dtype, device):
    m, k, n = shape
    return Sample((_tensor(device, dtype, m, k), _tensor(device, dtype, n, k, scale=k ** -0.5)),
                  dict(activation="silu"))


def _bench_flops(sample, mode):
    x, w = sample.args[:2]
    return 2 * x.shape[0] * x.shape[1] * w.shape[0] * (1 if mode == "fwd" else 2)     # bwd: dx and dW


def _eager(sample):
    x, w = sample.args[:2]
    return lambda: torch.nn.functional.silu(torch.nn.functional.linear(x, w))


def _swiglu_bench_make(shape, dtype, device):
    m, k, i = shape
    return Sample((_tensor(device, dtype, m, k), _tensor(device, dtype, 2 * i, k, scale=k ** -0.5)))


def _swiglu_eager(sample):
    x, w = sample.args[:2]

    def run():
        gate, up = torch.nn.functional.linear(x, w).chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up
    return run


SHAPES = [(16384, 8192, 8192), (8192, 8192, 8192), (4096, 4096, 14336)]
SWEEP = Sweep("M", (16384, 8192, 8192), 0, (1024, 2048, 4096, 8192, 16384, 32768))

OPERATOR = (
    Operator("linear_act", fn=linear_act, reference=linear_act_reference, samples=linear_act_samples,
             grad_inputs=(0, 1, 2), dtypes=KERNEL_DTYPES, tolerances=GRAD_TOLERANCES,
             bench=BenchSpec(dry_shapes=[(64, 128, 128)],
                             shapes=SHAPES, make=_bench_make, flops=_bench_flops, eager=_eager,
                             shape_help="MxKxN (x [M, K], weight [N, K]; SiLU)", sweep=SWEEP)),
    Operator("linear_swiglu", fn=linear_swiglu, reference=linear_swiglu_reference, samples=linear_swiglu_samples,
             grad_inputs=(0, 1), dtypes=KERNEL_DTYPES, tolerances=GRAD_TOLERANCES,
             bench=BenchSpec(dry_shapes=[(64, 128, 128)],
                             shapes=[(16384, 4096, 14336), (8192, 8192, 8192)], make=_swiglu_bench_make,
                             flops=_bench_flops, eager=_swiglu_eager,
                             shape_help="MxKxI (x [M, K], w_gate_up [2I, K])")),
)
