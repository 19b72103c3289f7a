"""Fused linear cross entropy: the LM head's product and the loss in chunks of rows, never the whole logits.

    loss = cross_entropy(input @ weight^T + bias, target)          (tle.ops.cross_entropy's options)

`tle.ops.fused_linear_cross_entropy(input, weight, target, bias=None, ignore_index=-100, label_smoothing=0.0,
reduction="mean", *, lse_square_scale=0.0, softcap=None, return_z_loss=False, chunk_rows=None)`: input [N, H]
(the hidden states, rows of tokens), weight [V, H] (nn.Linear's layout), bias [V], target [N] class indices.
The logits [N, V] (4.2 GB at N 16384, V 128256 in bf16) are never held whole: a buffer of chunk_rows x V is.

How, per chunk of rows (kernels/linear_gemm.py for the products, kernels/cross_entropy.py for the loss):
    logits = x_c @ W^T + b                      the product kernel, into the chunk buffer
    loss rows, lse rows                         cross_entropy's forward kernel
    dlogits = softmax - target (in place)       cross_entropy's backward kernel, upstream 1 per row
    dx_c = dlogits @ W                          the product kernel
    dW += dlogits^T @ x_c                       the product kernel, adding into dW in its epilogue
    db partial_c = column sums of dlogits
When a gradient will be needed ("mean" and "sum"), the forward does all of it, as Liger's does: the chunk's logits
are made once. The backward then multiplies dx, dW (and db) by the upstream gradient (over the mean's
denominator), one pass on the device, where they lie when the backward is the graph's last (autograd frees the
saved tensors before .grad takes them, so a step holds one dW, as Liger's does); when the graph is retained (or
under torch.compile, modes, create_graph) into new tensors, so that a second backward finds them unscaled.
With reduction "none" the upstream gradient of each row is needed before
dW is formed: the forward computes the loss only and the backward makes each chunk's logits again (a second
product per chunk). dW accumulates in weight's dtype (rounded once per chunk, as Liger's addmm), dx is written
once per chunk. Numerics: the chunk's logits are rounded to the weight's dtype before the loss, and dlogits before
the products (as Liger's): bf16 losses within about 1% of fp64 over whole logits.

chunk_rows: the rows per chunk; by default Liger's rule, N / ceil(V / H) rounded up to a power of two (512 at N
16384, H 4096, V 128256): a chunk's logits are about the size of the input; but at least 512 rows (with fewer the
products are short of tiles to fill the GPU)."""
from __future__ import annotations

from typing import Optional

import torch
import triton.language as tl

import tle
from tle.checks import check_tensor
from tle.kernels import cross_entropy as ce
from tle.kernels import linear_gemm
from tle.kernels.column_sum import BLOCK, BLOCK_P, column_sum_kernel
from tle.oplib import BenchSpec, Operator, Sample, check_float, check_kernel_dtypes
from tle.oplib.arith import cdiv, next_power_of_2
from tle.oplib.dispatch import last_use_of_saved
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype

KERNEL_DTYPES = (torch.float16, torch.bfloat16)
REDUCTIONS = ("mean", "sum", "none")
SCALE_BLOCK = 4096


@tle.jit
def scale_by_upstream_kernel(x_ptr, out_ptr, dy_ptr, stats_ptr, n, BLOCK: tl.constexpr, MEAN: tl.constexpr):
    # out = x * dy (a 0-d upstream gradient), over stats_ptr[0] (the mean's denominator) with MEAN
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(dy_ptr).to(tl.float32)
    if MEAN:
        g = g / tl.load(stats_ptr)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x * g).to(out_ptr.dtype.element_ty), mask=mask)


MIN_CHUNK_ROWS = 512     # fewer rows leave the products short of a wave of tiles: 72 ms a step at 8192x4096x128256
                         # in chunks of 256 (Liger's rule), against Liger's 63 (H200)


def default_chunk_rows(n: int, h: int, v: int) -> int:
    """Liger's rule, the chunk's logits about as large as the input (N / ceil(V / H) rows, a power of two), but
    at least MIN_CHUNK_ROWS rows."""
    return max(MIN_CHUNK_ROWS, next_power_of_2(cdiv(max(n, 1), cdiv(v, max(h, 1)))))


# -- the torch backend: the same arithmetic in fp32 (fp64 for fp64 inputs), the logits whole ------------------
def _torch_logits(x, weight, bias):
    ct = torch_compute_dtype(x)
    logits = x.to(ct) @ weight.to(ct).T
    return logits if bias is None else logits + bias.to(ct)


def _torch_grads(dlogits, x, weight, bias):
    ct = dlogits.dtype
    dx = (dlogits @ weight.to(ct)).to(x.dtype)
    dw = (dlogits.T @ x.to(ct)).to(weight.dtype)
    db = dlogits.sum(0).to(bias.dtype) if bias is not None else x.new_empty(0)
    return dx, dw, db


def _torch_forward(x, weight, target, bias, ignore_index, label_smoothing, lse_square_scale, softcap, reduction,
                   chunk_rows, need_grads):
    logits = _torch_logits(x, weight, bias)
    loss, z, lse, stats = ce._torch_forward(logits, target, None, ignore_index, label_smoothing, lse_square_scale,
                                            softcap, reduction)
    grads = tuple(x.new_empty(0) for _ in range(3))
    if need_grads and reduction != "none":
        one = torch.ones((), dtype=logits.dtype, device=x.device)
        dlogits = ce._torch_backward(one, logits, target, None, lse, stats, ignore_index, label_smoothing,
                                     lse_square_scale, softcap, "sum")
        grads = _torch_grads(dlogits, x, weight, bias)
    return (loss.to(x.dtype), z.to(x.dtype)) + grads + (lse, stats)


def _torch_backward(dy, x, weight, target, bias, dx, dw, db, lse, stats, ignore_index, label_smoothing,
                    lse_square_scale, softcap, reduction, chunk_rows):
    if reduction == "none":
        logits = _torch_logits(x, weight, bias)
        dlogits = ce._torch_backward(dy, logits, target, None, lse, stats, ignore_index, label_smoothing,
                                     lse_square_scale, softcap, "none")
        return _torch_grads(dlogits.to(logits.dtype), x, weight, bias)
    g = dy.to(torch_compute_dtype(x)) / (stats[0] if reduction == "mean" else 1)
    return tuple((t.to(g.dtype) * g).to(t.dtype) for t in (dx, dw, db))


# -- the kernel backends ------------------------------------------------------------------------------------
def _grad_buffers(x, weight, bias, present):
    """dx, dW (zeroed: it accumulates) and db to write, or empty tensors."""
    if not present:
        return tuple(x.new_empty(0) for _ in range(3))
    return (torch.empty_like(x), torch.zeros_like(weight),
            torch.empty_like(bias) if bias is not None else x.new_empty(0))


class _Chunks:
    """A chunk loop's rows and buffers: the chunk's logits (weight's dtype) and, with a bias, its per-chunk
    column sums (fp32)."""

    def __init__(self, x, weight, bias, chunk_rows, grads: bool):
        n = x.shape[0]
        v = weight.shape[0]
        self.rows = min(chunk_rows, max(n, 1))
        self.starts = list(range(0, n, self.rows))
        self.logits = torch.empty((self.rows, v), device=x.device, dtype=weight.dtype)
        self.db_partials = (torch.empty((len(self.starts), v), device=x.device, dtype=torch.float32)
                            if grads and bias is not None else None)


def _chunk_gradients(buf, i, r0, r1, x, weight, target, lse, stats, dy, opts, reduce, dx, dw, backend):
    """dlogits of chunk i in place (REDUCE: cross_entropy's SUM with dy 1, or NONE with the rows' dy), then its
    share of dx and dW, and its column sums for db."""
    rows = r1 - r0
    logits = buf.logits[:rows]
    v = weight.shape[0]
    bn, warps = ce.block_n(v)
    ce.cross_entropy_bwd_kernel[(rows,)](dy, logits, target[r0:r1], lse, lse[r0:r1], stats, logits, v, v, v,
                                         *opts.args, BLOCK_N=bn, REDUCE=reduce, **opts.flags, backend=backend,
                                         num_warps=warps)
    linear_gemm.launch(logits, weight, dx[r0:r1], backend=backend)                        # [c, V] x [V, H]
    linear_gemm.launch(logits, x[r0:r1], dw, a_t=True, accumulate=True, backend=backend)  # [V, c] x [c, H]
    if buf.db_partials is not None:
        column_sum_kernel[(cdiv(v, BLOCK),)](logits, buf.db_partials[i], rows, v, BLOCK_P=BLOCK_P, BLOCK_N=BLOCK,
                                             backend=backend, num_warps=4)


def _bias_grad_into(buf, db, backend):
    if buf.db_partials is not None:
        v = db.shape[0]
        column_sum_kernel[(cdiv(v, BLOCK),)](buf.db_partials, db, buf.db_partials.shape[0], v, BLOCK_P=BLOCK_P,
                                             BLOCK_N=BLOCK, backend=backend, num_warps=4)


def _kernel_forward(x, weight, target, bias, ignore_index, label_smoothing, lse_square_scale, softcap, reduction,
                    chunk_rows, need_grads, backend):
    n = x.shape[0]
    opts = ce._Options(None, ignore_index, label_smoothing, lse_square_scale, softcap)
    grads = need_grads and reduction != "none"
    dx, dw, db = _grad_buffers(x, weight, bias, grads)
    buf = _Chunks(x, weight, bias, chunk_rows, grads)
    rows = ce.RowLosses(n, x.dtype, x.device, reduction)
    one = torch.ones((), device=x.device, dtype=torch.float32)
    for i, r0 in enumerate(buf.starts):
        r1 = min(n, r0 + buf.rows)
        logits = buf.logits[:r1 - r0]
        linear_gemm.launch(x[r0:r1], weight, logits, b_t=True, bias=bias, backend=backend)
        rows.fill(logits, target[r0:r1], None, opts, r0, backend)
        if grads:
            _chunk_gradients(buf, i, r0, r1, x, weight, target, rows.lse, rows.stats, one, opts, ce.SUM, dx, dw,
                             backend)
    if grads and n:
        _bias_grad_into(buf, db, backend)
    elif grads:
        db.zero_()
    return (*rows.reduced(opts, x.dtype, backend), dx, dw, db, rows.lse, rows.stats)


def scale_by_upstream(t, out, dy, stats, mean: bool, backend):
    """out = t * dy (over stats[0], the mean's denominator, with `mean`); out may be t; both contiguous."""
    if t.numel():
        scale_by_upstream_kernel[(cdiv(t.numel(), SCALE_BLOCK),)](
            t, out, dy, stats, t.numel(), BLOCK=SCALE_BLOCK, MEAN=mean, backend=backend, num_warps=8)


def _kernel_backward(dy, x, weight, target, bias, dx, dw, db, lse, stats, ignore_index, label_smoothing,
                     lse_square_scale, softcap, reduction, chunk_rows, backend):
    n = x.shape[0]
    if reduction != "none":
        out = tuple(torch.empty_like(t) for t in (dx, dw, db))
        for t, o in zip((dx, dw, db), out):
            scale_by_upstream(t, o, dy, stats, reduction == "mean", backend)
        return out
    dx, dw, db = _grad_buffers(x, weight, bias, True)
    if n == 0:
        return dx, dw, db.zero_()
    opts = ce._Options(None, ignore_index, label_smoothing, lse_square_scale, softcap)
    buf = _Chunks(x, weight, bias, chunk_rows, True)
    for i, r0 in enumerate(buf.starts):
        r1 = min(n, r0 + buf.rows)
        linear_gemm.launch(x[r0:r1], weight, buf.logits[:r1 - r0], b_t=True, bias=bias, backend=backend)
        _chunk_gradients(buf, i, r0, r1, x, weight, target, lse, stats, dy[r0:r1], opts, ce.NONE, dx, dw, backend)
    _bias_grad_into(buf, db, backend)
    return dx, dw, db


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
@tle.example(scale_by_upstream_kernel)
def _scale_example(device, size):
    """dW scaled by the upstream gradient over the mean's denominator: 3000 fp16 values, or 128256 x 4096 bf16
    (the LM head's weight)."""
    n, dtype = (3000, torch.float16) if size == "small" else (128256 * 4096, torch.bfloat16)
    x = torch.randn(n, device=device).to(dtype)
    dy = torch.tensor(0.75, device=device, dtype=dtype)
    stats = torch.tensor([1234.0, 0.0], device=device)
    out = torch.full_like(x, float("nan"))
    return tle.Launch(grid=(cdiv(n, SCALE_BLOCK),), args=(x, out, dy, stats, n),
                      kwargs=dict(BLOCK=SCALE_BLOCK, MEAN=True, num_warps=8), outputs={"out": out},
                      reference=lambda: {"out": x.float() * (0.75 / 1234.0)}, bytes=2 * n * x.element_size(),
                      label=f"{n} {str(dtype)[6:]}, mean")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _adapt(run, x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: Optional[torch.Tensor],
           ignore_index: int, label_smoothing: float, lse_square_scale: float, softcap: float, reduction: str,
           chunk_rows: int, need_grads: bool
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                      torch.Tensor]:
    """(loss, z-loss term, dx, dW, db (for "mean"/"sum" those of an upstream gradient 1 and no mean; empty for
    "none", whose backward makes them, and without need_grads), lse per row, [the mean's denominator, C] (fp32));
    softcap 0: none."""
    return run(x.contiguous(), weight.contiguous(), target.contiguous(),
               bias.contiguous() if bias is not None else None, ignore_index, label_smoothing, lse_square_scale,
               softcap, reduction, chunk_rows, need_grads)


def _backward_adapt(run, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                    bias: Optional[torch.Tensor], dx: torch.Tensor, dw: torch.Tensor, db: torch.Tensor,
                    lse: torch.Tensor, stats: torch.Tensor, ignore_index: int, label_smoothing: float,
                    lse_square_scale: float, softcap: float, reduction: str, chunk_rows: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dW, db): the forward's scaled by dy ("mean", "sum"), or made ("none")."""
    return run(dy.contiguous(), x.contiguous(), weight.contiguous(), target.contiguous(),
               bias.contiguous() if bias is not None else None, dx, dw, db, lse, stats, ignore_index,
               label_smoothing, lse_square_scale, softcap, reduction, chunk_rows)


def _forward_fake(x, weight, target, bias, ignore_index, label_smoothing, lse_square_scale, softcap, reduction,
                  chunk_rows, need_grads):
    n = x.shape[0]
    shape = (n,) if reduction == "none" else ()
    ct = torch_compute_dtype(x)
    return (x.new_empty(shape), x.new_empty(shape)) + _grads_like(x, weight, bias, need_grads and reduction != "none") \
        + (x.new_empty(n, dtype=ct), x.new_empty(2, dtype=ct))


def _grads_like(x, weight, bias, present):
    if not present:
        return tuple(x.new_empty(0) for _ in range(3))
    return (x.new_empty(x.shape), weight.new_empty(weight.shape),
            bias.new_empty(bias.shape) if bias is not None else x.new_empty(0))


def _backward_fake(dy, x, weight, target, bias, *_):
    return _grads_like(x, weight, bias, True)


def _save(ctx, inputs, output):
    x, weight, target, bias, *ctx.options = inputs
    ctx.options = ctx.options[:-1]                       # need_grads is not the backward's
    dx = output[2]
    if ctx.options[-2] != "none" and dx.numel():
        x = dx          # "mean" and "sum" read only x's shape and dtype: dx stands in, x is not kept alive
    ctx.save_for_backward(x, weight, target, bias, *output[2:])
    ctx.has_bias = bias is not None
    ctx.set_materialize_grads(False)


def _grads(ctx, backward, dloss, *_unused):
    # the z-loss output is for logging: its part of the loss carries the gradient, its own upstream is ignored
    if dloss is None:
        return ()
    saved = ctx.saved_tensors
    if _last_use_of_forward_grads(ctx, dloss, saved):
        dx, dw, db = _scale_in_place(dloss, saved, ctx.options, ctx.backend)
    else:
        dx, dw, db = backward(dloss, *saved, *ctx.options)
    return (dx, dw, None, db if ctx.has_bias else None)


def _last_use_of_forward_grads(ctx, dloss, saved) -> bool:
    """True when the forward's gradients may be scaled where they lie: a kernel backend's "mean" or "sum" whose
    backward is the last use of what the forward saved (tle.oplib.dispatch.last_use_of_saved: then autograd frees
    the saved tensors before it hands the gradients on, so .grad takes them without a copy)."""
    return ctx.backend != "torch" and ctx.options[-2] != "none" and last_use_of_saved(ctx, (dloss, *saved))


def _scale_in_place(dy, saved, options, backend):
    """The forward's dx, dW and db multiplied by dy (over the mean's denominator) in place; returns them."""
    dx, dw, db, stats = saved[4], saved[5], saved[6], saved[8]
    for t in (dx, dw, db):
        scale_by_upstream(t, t, dy, stats, options[-2] == "mean", backend)
    return dx, dw, db


FUSED_LINEAR_CROSS_ENTROPY = Recipe(
    "fused_linear_cross_entropy",
    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_adapt, fake=_forward_fake),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_adapt,
                   fake=_backward_fake),
    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def fused_linear_cross_entropy(input: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                               bias: torch.Tensor | None = None, ignore_index: int = -100,
                               label_smoothing: float = 0.0, reduction: str = "mean", *,
                               lse_square_scale: float = 0.0, softcap: float | None = None,
                               return_z_loss: bool = False, chunk_rows: int | None = None,
                               backend: str | None = None, fallback: str | None = None):
    """cross_entropy(input @ weight^T + bias, target) without the whole logits (see the module doc)."""
    check_float(input, "input", rank=2)
    check_float(weight, "weight", rank=2, device=input.device)
    if weight.dtype != input.dtype:
        raise tle.LaunchError(f"'weight' has dtype {str(weight.dtype)[6:]}; expected input's "
                              f"({str(input.dtype)[6:]})")
    n, h = input.shape
    if weight.shape[1] != h:
        raise tle.LaunchError(f"'weight' has shape {tuple(weight.shape)}; expected [V, {h}] (input's last "
                              f"dimension {h})")
    if bias is not None:
        check_float(bias, "bias", device=input.device, shape=(weight.shape[0],))
    check_tensor(target, "target", device=input.device, shape=(n,))
    if target.is_floating_point():
        raise tle.LaunchError("'target' holds class probabilities (a floating tensor); tle.ops."
                              "fused_linear_cross_entropy takes class indices only (int64 or int32)")
    check_tensor(target, "target", dtypes=ce.TARGET_DTYPES)
    ce._check_options(reduction, label_smoothing, lse_square_scale, softcap, ignore_index)
    v = weight.shape[0]
    if v == 0:
        raise tle.LaunchError("'weight' has no rows: there are no classes")
    if chunk_rows is None:
        chunk_rows = default_chunk_rows(n, h, v)
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise tle.LaunchError(f"'chunk_rows' must be a positive int; got {chunk_rows!r}")
    b = FUSED_LINEAR_CROSS_ENTROPY.resolve(input.device, backend, fallback)
    check_kernel_dtypes("fused_linear_cross_entropy", b, input=input, weight=weight, bias=bias)
    if b != "torch":
        if input.dtype not in KERNEL_DTYPES:
            raise tle.LaunchError(f"tle.ops.fused_linear_cross_entropy: 'input' has dtype {str(input.dtype)[6:]}; "
                                  f"backend '{b}' takes fp16 and bf16 (its products read tensor-memory rows)")
        if h % 8 or v % 8:
            raise tle.LaunchError(f"tle.ops.fused_linear_cross_entropy on {b}: the hidden size ({h}) and the "
                                  f"vocabulary ({v}) must be multiples of 8 (the products' rows are whole 16 bytes)")
    if input.device.type == "cpu" and n and not torch.compiler.is_compiling():
        bad = (target != ignore_index) & ((target < 0) | (target >= v))
        if bool(bad.any()):
            raise tle.LaunchError(f"'target' holds {int(target[bad][0])}, outside the {v} classes (and not "
                                  f"ignore_index {ignore_index})")
    need_grads = torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad
                                              or (bias is not None and bias.requires_grad))
    loss, z, *_ = FUSED_LINEAR_CROSS_ENTROPY(input, weight, target, bias, ignore_index, float(label_smoothing),
                                             float(lse_square_scale), float(softcap or 0.0), reduction, chunk_rows,
                                             need_grads, backend=b)
    return (loss, z.detach()) if return_z_loss else loss


class FusedLinearCrossEntropyLoss(torch.nn.Module):
    """The loss of an LM head: forward(weight, input, target, bias=None) as Liger's module takes them (the head's
    weight first), with tle.ops.fused_linear_cross_entropy's options."""

    def __init__(self, ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean", *,
                 lse_square_scale: float = 0.0, softcap: float | None = None, return_z_loss: bool = False,
                 chunk_rows: int | None = None, backend: str | None = None, fallback: str | None = None):
        super().__init__()
        try:
            ce._check_options(reduction, label_smoothing, lse_square_scale, softcap, ignore_index)
        except tle.LaunchError as e:
            raise ValueError(f"tle.ops.FusedLinearCrossEntropyLoss: {e}") from None
        self.ignore_index, self.label_smoothing, self.reduction = ignore_index, label_smoothing, reduction
        self.lse_square_scale, self.softcap, self.return_z_loss = lse_square_scale, softcap, return_z_loss
        self.chunk_rows, self.backend, self.fallback = chunk_rows, backend, fallback

    def forward(self, weight, input, target, bias=None):
        return fused_linear_cross_entropy(input, weight, target, bias, self.ignore_index, self.label_smoothing,
                                          self.reduction, lse_square_scale=self.lse_square_scale,
                                          softcap=self.softcap, return_z_loss=self.return_z_loss,
                                          chunk_rows=self.chunk_rows, backend=self.backend or None,
                                          fallback=self.fallback)

    def extra_repr(self):
        return f"reduction={self.reduction!r}, ignore_index={self.ignore_index}, backend={self.backend}"


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(input, weight, target, bias=None, ignore_index=-100, label_smoothing=0.0, reduction="mean", *,
              lse_square_scale=0.0, softcap=None, return_z_loss=False, chunk_rows=None):
    """Plain differentiable torch: cross_entropy's reference on the whole logits."""
    logits = input @ weight.T + (bias if bias is not None else 0)
    return ce.reference(logits, target, ignore_index=ignore_index, reduction=reduction,
                        label_smoothing=label_smoothing, lse_square_scale=lse_square_scale, softcap=softcap,
                        return_z_loss=return_z_loss)


def samples(device, dtype):
    g = torch.Generator().manual_seed(0)

    def t(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)

    def tgt(v, n, ignore=()):
        out = torch.randint(0, v, (n,), generator=g)
        for i in ignore:
            out[i] = -100
        return out.to(device)

    x, w = t(40, 64, scale=0.5), t(200, 64, scale=0.3)
    return [Sample((x, w, tgt(200, 40, ignore=(3, 17))), label="40 rows, 200 classes, mean"),
            Sample((x, w, tgt(200, 40)), dict(chunk_rows=16, reduction="sum"), label="3 chunks (one short), sum"),
            Sample((x, w, tgt(200, 40, ignore=(0,)), t(200, scale=0.1)), dict(chunk_rows=8),
                   label="bias, 5 chunks"),
            Sample((x, w, tgt(200, 40, ignore=(5,))), dict(reduction="none", chunk_rows=16), label="none"),
            Sample((t(24, 32), t(96, 32, scale=0.5), tgt(96, 24)),
                   dict(label_smoothing=0.1, lse_square_scale=1e-3, softcap=3.0, chunk_rows=8),
                   label="label smoothing, z-loss, soft cap"),
            Sample((x[:0], w, tgt(200, 0)), dict(reduction="sum"), label="no rows")]


def _bench_make(shape, dtype, device):
    n, h, v = shape
    x = torch.randn(n, h, device=device, dtype=dtype) * h ** -0.5
    w = torch.randn(v, h, device=device, dtype=dtype) * h ** -0.5
    return Sample((x, w, torch.randint(0, v, (n,), device=device)))


def _bench_flops(sample, mode):
    """fwd: the logits' product; bwd: dx and dW's products (the forward with a gradient makes all three)."""
    x, w = sample.args[:2]
    return 2 * x.shape[0] * x.shape[1] * w.shape[0] * (1 if mode == "fwd" else 2)


def _eager(sample):
    x, w, t = sample.args
    return lambda x=x, w=w, t=t: torch.nn.functional.cross_entropy(x @ w.T, t)


def _liger(sample):
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    x, w, t = sample.args
    loss = LigerFusedLinearCrossEntropyLoss()
    return lambda x=x, w=w, t=t: loss(w, x, t)


OPERATOR = Operator(
    "fused_linear_cross_entropy", fn=fused_linear_cross_entropy, reference=reference, samples=samples,
    grad_inputs=(0, 1, 3), dtypes=(torch.float16, torch.bfloat16),
    bench=BenchSpec(dry_shapes=[(64, 64, 512)],
                    shapes=[(16384, 4096, 128256), (8192, 4096, 128256), (8192, 4096, 32000)],
                    make=_bench_make, flops=_bench_flops, eager=_eager, peers={"liger": _liger},
                    shape_help="TOKENSxHIDDENxVOCAB"))
