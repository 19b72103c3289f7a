"""Cross entropy over class indices, with torch's semantics and the training options of large-vocabulary models.

    lse_i  = log(sum_c exp(x_ic))                      x: the logits, soft-capped first with softcap:
    loss_i = (1 - eps) * w[t_i] * (lse_i - x_i,t_i)         x <- softcap * tanh(x / softcap)
           + eps / C * sum_c w_c * (lse_i - x_ic)        eps: label_smoothing, w: the class weights (1 if none)
           + z * lse_i^2                                 z: lse_square_scale (the "z-loss")
    rows whose target is ignore_index: loss 0, and no weight in the mean
    "mean": sum_i loss_i / sum_i w[t_i];  "sum": sum_i loss_i;  "none": loss_i

`tle.ops.cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
reduction="mean", label_smoothing=0.0, *, lse_square_scale=0.0, softcap=None, return_z_loss=False)` takes
torch.nn.functional.cross_entropy's arguments (input [N, C], [C] or [N, C, d1, ...]; class-index targets),
and the options LLM training adds, keyword-only: the z-loss, the logits' soft cap (Gemma 2) and, with
return_z_loss, the z-loss term alone beside the loss (for logging; it carries no gradient of its own, its part
of the loss does). Targets of class probabilities are refused by name.

Forward: one program per row walks the row in blocks of BLOCK_N columns once, keeping per column lane a
running max and a running sum of exponentials (merged after the loop: the log-sum-exp), and, with label
smoothing, the sum of the logits (weighted); the target's logit is one scalar load. It writes the row's loss
and lse (fp32, saved), and for "mean"/"sum" a one-program kernel adds the rows up (no atomics: the same result
every run). Backward: one program per row reads the row once more and writes
    dx_ic = g_i * [(p_ic * ((1 - eps) * w[t_i] + eps / C * sum w) - (1 - eps) * w[t_i] * [c = t_i]
                   - eps / C * w_c + 2 z lse_i p_ic) * (1 - tanh^2 where capped)],   p_ic = exp(x_ic - lse_i)
with g_i the upstream gradient of row i (divided by the mean's denominator, read on the device). The logits
are read twice and the gradient written once over a step."""
from __future__ import annotations

from typing import Optional

import torch
import triton.language as tl

import tle
from tle.checks import check_tensor
from tle.oplib import BenchSpec, Operator, Sample, check_float, check_kernel_dtypes
from tle.oplib.arith import next_power_of_2
from tle.oplib.losses import reduction_of
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype

REDUCTIONS = ("none", "mean", "sum")
TARGET_DTYPES = (torch.int64, torch.int32)
REDUCE_BLOCK = 1024
MAX_NUMEL = 2 ** 31         # the kernels' row offsets are 64-bit, but their column counts are 32-bit
NONE, SUM, MEAN = 0, 1, 2   # how the kernels see `reduction`


@tle.jit
def _capped(x, softcap, SOFTCAP: tl.constexpr):
    # softcap * tanh(x / softcap), tanh as 1 - 2 / (exp(2u) + 1): exact at both ends
    if SOFTCAP:
        x = softcap * (1.0 - 2.0 / (tl.exp(x * (2.0 / softcap)) + 1.0))
    return x


@tle.jit
def cross_entropy_fwd_kernel(x_ptr, t_ptr, w_ptr, loss_ptr, z_ptr, lse_ptr, wt_ptr, stats_ptr, x_row_stride,
                             n_cols, ignore_index, smoothing, z_scale, softcap, BLOCK_N: tl.constexpr,
                             HAS_WEIGHT: tl.constexpr, SMOOTH: tl.constexpr, Z_LOSS: tl.constexpr,
                             SOFTCAP: tl.constexpr):
    # loss_ptr: the row's loss (the output's dtype for "none", fp32 rows to reduce otherwise); z_ptr: its z-loss
    # term (with Z_LOSS); lse_ptr: its log-sum-exp (fp32, saved); wt_ptr: the weight of its target (0 when
    # ignored: the mean's denominator); stats_ptr[1]: sum_c w_c, or C without weights (program 0, with SMOOTH)
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * x_row_stride
    target = tl.load(t_ptr + row)
    valid = (target != ignore_index) & (target >= 0) & (target < n_cols)
    safe = tl.where(valid, target, 0)
    lanes = tl.arange(0, BLOCK_N)
    m = tl.full([BLOCK_N], -3.0e38, dtype=tl.float32)       # finite: exp(m - m_new) never meets -inf - -inf
    s = tl.zeros([BLOCK_N], dtype=tl.float32)
    if SMOOTH:
        sx = tl.zeros([BLOCK_N], dtype=tl.float32)
        if HAS_WEIGHT:
            sw = tl.zeros([BLOCK_N], dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK_N):
        cols = c0 + lanes
        mask = cols < n_cols
        x = _capped(tl.load(base + cols, mask=mask, other=0.0).to(tl.float32), softcap, SOFTCAP)
        xm = tl.where(mask, x, float("-inf"))
        m_new = tl.maximum(m, xm)
        s = s * tl.exp(m - m_new) + tl.exp(xm - m_new)
        m = m_new
        if SMOOTH:
            if HAS_WEIGHT:
                w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
                sx += w * x
                sw += w
            else:
                sx += tl.where(mask, x, 0.0)
    top = tl.max(m, axis=0)
    lse = top + tl.log(tl.sum(s * tl.exp(m - top), axis=0))
    x_t = _capped(tl.load(base + safe).to(tl.float32), softcap, SOFTCAP)
    if HAS_WEIGHT:
        w_t = tl.load(w_ptr + safe).to(tl.float32)
    else:
        w_t = 1.0
    loss = (1.0 - smoothing) * w_t * (lse - x_t)
    if SMOOTH:
        if HAS_WEIGHT:
            sum_w = tl.sum(sw, axis=0)
            loss += smoothing / n_cols * (sum_w * lse - tl.sum(sx, axis=0))
            if row == 0:
                tl.store(stats_ptr + 1, sum_w)
        else:
            loss += smoothing * (lse - tl.sum(sx, axis=0) / n_cols)
            if row == 0:
                tl.store(stats_ptr + 1, n_cols.to(tl.float32))
    if Z_LOSS:
        z = z_scale * lse * lse
        loss += z
        tl.store(z_ptr + row, tl.where(valid, z, 0.0).to(z_ptr.dtype.element_ty))
    tl.store(loss_ptr + row, tl.where(valid, loss, 0.0).to(loss_ptr.dtype.element_ty))
    tl.store(lse_ptr + row, lse)
    tl.store(wt_ptr + row, tl.where(valid, w_t, 0.0))


@tle.jit
def cross_entropy_reduce_kernel(loss_ptr, z_ptr, wt_ptr, out_ptr, z_out_ptr, stats_ptr, n_rows,
                                BLOCK: tl.constexpr, MEAN: tl.constexpr, Z_LOSS: tl.constexpr):
    # one program: the rows' losses (and z-loss terms) added up in a fixed order, divided for "mean" by the sum
    # of the targets' weights, which stats_ptr[0] keeps for the backward
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    acc_w = tl.zeros([BLOCK], dtype=tl.float32)
    if Z_LOSS:
        acc_z = tl.zeros([BLOCK], dtype=tl.float32)
    for r0 in range(0, n_rows, BLOCK):
        rows = r0 + tl.arange(0, BLOCK)
        mask = rows < n_rows
        acc += tl.load(loss_ptr + rows, mask=mask, other=0.0)
        acc_w += tl.load(wt_ptr + rows, mask=mask, other=0.0)
        if Z_LOSS:
            acc_z += tl.load(z_ptr + rows, mask=mask, other=0.0)
    total = tl.sum(acc, axis=0)
    denom = tl.sum(acc_w, axis=0)
    if MEAN:
        total = total / denom
    tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))
    if Z_LOSS:
        total_z = tl.sum(acc_z, axis=0)
        if MEAN:
            total_z = total_z / denom
        tl.store(z_out_ptr, total_z.to(z_out_ptr.dtype.element_ty))
    tl.store(stats_ptr, denom)


@tle.jit
def cross_entropy_bwd_kernel(dy_ptr, x_ptr, t_ptr, w_ptr, lse_ptr, stats_ptr, dx_ptr, x_row_stride, dx_row_stride,
                             n_cols, ignore_index, smoothing, z_scale, softcap, BLOCK_N: tl.constexpr,
                             REDUCE: tl.constexpr, HAS_WEIGHT: tl.constexpr, SMOOTH: tl.constexpr,
                             Z_LOSS: tl.constexpr, SOFTCAP: tl.constexpr):
    # REDUCE: 0 "none" (dy per row), 1 "sum" (dy 0-d), 2 "mean" (dy 0-d over stats_ptr[0])
    row = tl.program_id(0)
    target = tl.load(t_ptr + row)
    valid = (target != ignore_index) & (target >= 0) & (target < n_cols)
    safe = tl.where(valid, target, 0)
    if REDUCE == 0:
        g = tl.load(dy_ptr + row).to(tl.float32)
    else:
        g = tl.load(dy_ptr).to(tl.float32)
    if REDUCE == 2:
        g = g / tl.load(stats_ptr)
    g = tl.where(valid, g, 0.0)
    lse = tl.load(lse_ptr + row)
    if HAS_WEIGHT:
        w_t = tl.load(w_ptr + safe).to(tl.float32)
    else:
        w_t = 1.0
    hit = (1.0 - smoothing) * w_t                      # what the target's column loses
    coef = hit                                        # what multiplies p
    if SMOOTH:
        if HAS_WEIGHT:
            coef += smoothing / n_cols * tl.load(stats_ptr + 1)
        else:
            coef += smoothing
    if Z_LOSS:
        coef += 2.0 * z_scale * lse
    base = x_ptr + row.to(tl.int64) * x_row_stride
    out = dx_ptr + row.to(tl.int64) * dx_row_stride
    lanes = tl.arange(0, BLOCK_N)
    for c0 in range(0, n_cols, BLOCK_N):
        cols = c0 + lanes
        mask = cols < n_cols
        raw = tl.load(base + cols, mask=mask, other=0.0).to(tl.float32)
        x = _capped(raw, softcap, SOFTCAP)
        d = tl.exp(x - lse) * coef - tl.where(cols == safe, hit, 0.0)
        if SMOOTH:
            if HAS_WEIGHT:
                d -= smoothing / n_cols * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            else:
                d -= smoothing / n_cols
        if SOFTCAP:
            t = x / softcap
            d = d * (1.0 - t * t)
        tl.store(out + cols, (g * d).to(dx_ptr.dtype.element_ty), mask=mask)


def block_n(n_cols: int) -> tuple[int, int]:
    """(BLOCK_N, num_warps): columns per step of a row's loop and the warps of its program: 4096 on 8 warps
    (16 per thread) for long rows, the row rounded up to a power of two for short ones."""
    bn = min(4096, max(32, next_power_of_2(max(n_cols, 1))))
    return bn, max(1, min(8, bn // 512))


class _Options:
    """The kernels' view of the options: constexpr flags and scalar arguments."""

    def __init__(self, weight, ignore_index, label_smoothing, lse_square_scale, softcap):
        self.args = (int(ignore_index), float(label_smoothing), float(lse_square_scale), float(softcap or 1.0))
        self.flags = dict(HAS_WEIGHT=weight is not None, SMOOTH=label_smoothing > 0, Z_LOSS=lse_square_scale != 0,
                          SOFTCAP=bool(softcap))


# -- the torch backend: the same arithmetic in torch (fp32, or fp64 for fp64 logits) ------------------------
def _torch_rows(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap):
    """(loss per row, z-loss term per row, lse per row, weight of each row's target (0 where ignored), capped
    logits), in the compute dtype."""
    ct = torch_compute_dtype(x)
    xf = x.to(ct)
    if softcap:
        xf = softcap * torch.tanh(xf / softcap)
    n, c = xf.shape
    valid = (target != ignore_index) & (target >= 0) & (target < c)
    safe = torch.where(valid, target, 0).long()
    lse = torch.logsumexp(xf, dim=1) if c else torch.full((n,), float("-inf"), dtype=ct, device=x.device)
    w = weight.to(ct) if weight is not None else None
    w_t = w[safe] if w is not None else torch.ones(n, dtype=ct, device=x.device)
    loss = (1 - label_smoothing) * w_t * (lse - xf.gather(1, safe[:, None])[:, 0])
    if label_smoothing > 0:
        smooth = (lse[:, None] - xf) * (w if w is not None else 1)
        loss = loss + label_smoothing / c * smooth.sum(1)
    z = lse_square_scale * lse * lse
    loss = loss + z if lse_square_scale != 0 else loss
    zero = torch.zeros((), dtype=ct, device=x.device)
    return (torch.where(valid, loss, zero), torch.where(valid, z, zero), lse, torch.where(valid, w_t, zero), xf)


def _torch_forward(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, reduction):
    ct = torch_compute_dtype(x)
    loss, z, lse, w_t, _ = _torch_rows(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap)
    denom = w_t.sum()
    sum_w = weight.to(ct).sum() if weight is not None else torch.tensor(float(x.shape[1]), dtype=ct, device=x.device)
    stats = torch.stack([denom, sum_w]).to(ct)
    if reduction != "none":
        loss, z = loss.sum(), z.sum()
        if reduction == "mean":
            loss, z = loss / denom, z / denom
    return loss.to(x.dtype), z.to(x.dtype), lse, stats


def _torch_backward(dy, x, target, weight, lse, stats, ignore_index, label_smoothing, lse_square_scale, softcap,
                    reduction):
    ct = torch_compute_dtype(x)
    xf = x.to(ct)
    n, c = xf.shape
    t = torch.tanh(xf / softcap) if softcap else None
    xc = softcap * t if softcap else xf
    valid = (target != ignore_index) & (target >= 0) & (target < c)
    safe = torch.where(valid, target, 0).long()
    w = weight.to(ct) if weight is not None else None
    w_t = w[safe] if w is not None else torch.ones(n, dtype=ct, device=x.device)
    hit = (1 - label_smoothing) * w_t
    coef = hit + (label_smoothing / c * stats[1] if label_smoothing > 0 else 0) + 2 * lse_square_scale * lse
    d = torch.exp(xc - lse[:, None]) * coef[:, None]
    d = d - torch.nn.functional.one_hot(safe, c).to(ct) * hit[:, None] if c else d
    if label_smoothing > 0:
        d = d - label_smoothing / c * (w if w is not None else 1)
    if softcap:
        d = d * (1 - t * t)
    g = dy.to(ct)
    if reduction == "mean":
        g = g / stats[0]
    g = torch.where(valid, g if reduction == "none" else g.expand(n), 0)
    return (g[:, None] * d).to(x.dtype)


# -- the kernel backends ------------------------------------------------------------------------------------
class RowLosses:
    """What the forward kernel writes per row (the loss: in the output's dtype for "none", fp32 to reduce
    otherwise; the z-loss term; lse and the target's weight, fp32) and [the mean's denominator, the class
    weights' sum]; `reduced` adds the rows up. fused_linear_cross_entropy fills it chunk by chunk."""

    def __init__(self, n: int, dtype: torch.dtype, device, reduction: str):
        self.reduction = reduction
        row_dtype = dtype if reduction == "none" else torch.float32
        self.loss = torch.empty(n, device=device, dtype=row_dtype)
        self.z = torch.zeros(n, device=device, dtype=row_dtype)
        self.lse = torch.empty(n, device=device, dtype=torch.float32)
        self.w_t = torch.empty(n, device=device, dtype=torch.float32)
        self.stats = torch.zeros(2, device=device, dtype=torch.float32)

    def fill(self, x, target, weight, opts, r0: int, backend: str) -> None:
        """The forward kernel over the rows of x ([rows, C], row-major), the rows r0.. of the results."""
        rows, c = x.shape
        r1 = r0 + rows
        bn, warps = block_n(c)
        cross_entropy_fwd_kernel[(rows,)](x, target, weight if weight is not None else self.lse, self.loss[r0:r1],
                                          self.z[r0:r1], self.lse[r0:r1], self.w_t[r0:r1], self.stats, x.stride(0),
                                          c, *opts.args, BLOCK_N=bn, **opts.flags, backend=backend,
                                          num_warps=warps)

    def reduced(self, opts, dtype: torch.dtype, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, z-loss term): the rows themselves for "none", else added up (the mean over the weights)."""
        if self.reduction == "none":
            return self.loss, self.z
        dev, n = self.loss.device, self.loss.shape[0]
        if n == 0:          # no rows to add up: torch's 0 for "sum", 0 / 0 for "mean"
            empty = torch.full((), float("nan") if self.reduction == "mean" else 0.0, device=dev, dtype=dtype)
            return empty, empty.clone()
        loss, z = torch.empty((), device=dev, dtype=dtype), torch.zeros((), device=dev, dtype=dtype)
        cross_entropy_reduce_kernel[(1,)](self.loss, self.z, self.w_t, loss, z, self.stats, n, BLOCK=REDUCE_BLOCK,
                                          MEAN=self.reduction == "mean", Z_LOSS=opts.flags["Z_LOSS"],
                                          backend=backend, num_warps=4)
        return loss, z


def _kernel_forward(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, reduction,
                    backend):
    opts = _Options(weight, ignore_index, label_smoothing, lse_square_scale, softcap)
    rows = RowLosses(x.shape[0], x.dtype, x.device, reduction)
    if x.shape[0]:
        rows.fill(x, target, weight, opts, 0, backend)
    return (*rows.reduced(opts, x.dtype, backend), rows.lse, rows.stats)


def _kernel_backward(dy, x, target, weight, lse, stats, ignore_index, label_smoothing, lse_square_scale, softcap,
                     reduction, backend):
    n, c = x.shape
    dx = torch.empty((n, c), device=x.device, dtype=x.dtype)
    if n and c:
        opts = _Options(weight, ignore_index, label_smoothing, lse_square_scale, softcap)
        bn, warps = block_n(c)
        cross_entropy_bwd_kernel[(n,)](dy, x, target, weight if weight is not None else lse, lse, stats, dx,
                                       x.stride(0), dx.stride(0), c, *opts.args, BLOCK_N=bn,
                                       REDUCE={"none": NONE, "sum": SUM, "mean": MEAN}[reduction], **opts.flags,
                                       backend=backend, num_warps=warps)
    return dx


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_problem(device, size):
    """(logits, targets, class weights): small: 37 rows of 1000 classes, fp32, ignored rows, weights; large:
    8192 x 128256 bf16."""
    g = torch.Generator().manual_seed(0)
    n, c, dtype = (37, 1000, torch.float32) if size == "small" else (8192, 128256, torch.bfloat16)
    x = (torch.randn(n, c, generator=g) * 3).to(dtype).to(device)
    t = torch.randint(0, c, (n,), generator=g)
    t[::7] = -100
    w = torch.rand(c, generator=g) + 0.5
    return x, t.to(device), (w.to(device) if size == "small" else None)


EXAMPLE_OPTIONS = dict(ignore_index=-100, label_smoothing=0.1, lse_square_scale=1e-4, softcap=30.0)


@tle.example(cross_entropy_fwd_kernel)
def _fwd_example(device, size):
    x, t, w = _example_problem(device, size)
    n, c = x.shape
    opts = _Options(w, **EXAMPLE_OPTIONS)
    loss, z = torch.full((n,), float("nan"), device=device), torch.full((n,), float("nan"), device=device)
    lse, w_t = torch.full((n,), float("nan"), device=device), torch.full((n,), float("nan"), device=device)
    stats = torch.zeros(2, device=device)
    bn, warps = block_n(c)

    def ref():
        rl, rz, rlse, rwt, _ = _torch_rows(x, t, w, **EXAMPLE_OPTIONS)
        return {"loss": rl, "z": rz, "lse": rlse, "w_t": rwt}
    return tle.Launch(grid=(n,), args=(x, t, w if w is not None else lse, loss, z, lse, w_t, stats, c, c,
                                       *opts.args),
                      kwargs=dict(BLOCK_N=bn, **opts.flags, num_warps=warps),
                      outputs={"loss": loss, "z": z, "lse": lse, "w_t": w_t}, reference=ref,
                      bytes=n * c * x.element_size(), label=f"{n}x{c} {str(x.dtype)[6:]}")


@tle.example(cross_entropy_reduce_kernel)
def _reduce_example(device, size):
    n = 3000 if size == "small" else 16384
    loss, z, w_t = torch.rand(n, device=device), torch.rand(n, device=device), torch.rand(n, device=device)
    out, z_out, stats = (torch.full((), float("nan"), device=device), torch.full((), float("nan"), device=device),
                         torch.zeros(2, device=device))
    return tle.Launch(grid=(1,), args=(loss, z, w_t, out, z_out, stats, n),
                      kwargs=dict(BLOCK=REDUCE_BLOCK, MEAN=True, Z_LOSS=True, num_warps=4),
                      outputs={"out": out, "z_out": z_out},
                      reference=lambda: {"out": loss.sum() / w_t.sum(), "z_out": z.sum() / w_t.sum()},
                      bytes=3 * n * 4, label=f"{n} rows, mean")


@tle.example(cross_entropy_bwd_kernel)
def _bwd_example(device, size):
    x, t, w = _example_problem(device, size)
    n, c = x.shape
    opts = _Options(w, **EXAMPLE_OPTIONS)
    _, _, lse, stats = _torch_forward(x, t, w, *opts.args[:3], EXAMPLE_OPTIONS["softcap"], "mean")
    lse, stats = lse.float(), stats.float()
    dy = torch.tensor(1.5, device=device)
    dx = torch.full_like(x, float("nan"))
    bn, warps = block_n(c)
    return tle.Launch(grid=(n,), args=(dy, x, t, w if w is not None else lse, lse, stats, dx, c, c, c, *opts.args),
                      kwargs=dict(BLOCK_N=bn, REDUCE=MEAN, **opts.flags, num_warps=warps), outputs={"dx": dx},
                      reference=lambda: {"dx": _torch_backward(dy, x.float(), t, w, lse, stats, *opts.args[:3],
                                                               EXAMPLE_OPTIONS["softcap"], "mean")},
                      bytes=2 * n * c * x.element_size(), label=f"{n}x{c} {str(x.dtype)[6:]}, mean")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _contiguous(run, x: torch.Tensor, target: torch.Tensor, weight: Optional[torch.Tensor], ignore_index: int,
                label_smoothing: float, lse_square_scale: float, softcap: float, reduction: str
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, z-loss term, lse per row (fp32), [sum of the targets' weights, sum of the class weights] (fp32));
    softcap 0: none."""
    if x.shape[1] > 1 and x.stride(1) != 1:
        x = x.contiguous()
    return run(x, target.contiguous(), weight.contiguous() if weight is not None else None, ignore_index,
               label_smoothing, lse_square_scale, softcap, reduction)


def _backward_contiguous(run, dy: torch.Tensor, x: torch.Tensor, target: torch.Tensor, weight: Optional[torch.Tensor],
                         lse: torch.Tensor, stats: torch.Tensor, ignore_index: int, label_smoothing: float,
                         lse_square_scale: float, softcap: float, reduction: str) -> torch.Tensor:
    if x.shape[1] > 1 and x.stride(1) != 1:
        x = x.contiguous()
    return run(dy.contiguous(), x, target.contiguous(), weight.contiguous() if weight is not None else None, lse,
               stats, ignore_index, label_smoothing, lse_square_scale, softcap, reduction)


def _forward_fake(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, reduction):
    n = x.shape[0]
    shape = (n,) if reduction == "none" else ()
    ct = torch_compute_dtype(x)
    return x.new_empty(shape), x.new_empty(shape), x.new_empty(n, dtype=ct), x.new_empty(2, dtype=ct)


def _save(ctx, inputs, output):
    x, target, weight, *ctx.options = inputs
    ctx.save_for_backward(x, target, weight, output[2], output[3])
    ctx.set_materialize_grads(False)


def _grads(ctx, backward, dloss, _dz, _dlse, _dstats):
    # the z-loss output is for logging: its part of the loss carries the gradient, its own upstream is ignored
    if dloss is None:
        return ()
    return (backward(dloss, *ctx.saved_tensors, *ctx.options),)


CROSS_ENTROPY = Recipe(
    "cross_entropy",
    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_contiguous, fake=_forward_fake),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_contiguous,
                   fake=lambda dy, x, *_: x.new_empty(x.shape)),
    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def _as_rows(input, target):
    """(logits [N, C], targets [N], how to give "none" losses their shape) from torch's forms: [N, C] with [N],
    [C] with a 0-d target, [N, C, d1, ...] with [N, d1, ...] (the class dimension moved last: a copy)."""
    if input.dim() == 1:
        check_tensor(target, "target", shape=())
        return input[None], target.reshape(1), ()
    expected = (input.shape[0],) + tuple(input.shape[2:])
    check_tensor(target, "target", shape=expected)
    if input.dim() == 2:
        return input, target, expected
    return input.movedim(1, -1).reshape(-1, input.shape[1]), target.reshape(-1), expected


def _check_options(reduction, label_smoothing, lse_square_scale, softcap, ignore_index, size_average=None,
                   reduce=None) -> str:
    """The reduction (torch's deprecated size_average / reduce converted), the options checked."""
    reduction = reduction_of(size_average, reduce, reduction, REDUCTIONS)
    if not isinstance(label_smoothing, (int, float)) or not 0.0 <= label_smoothing <= 1.0:
        raise tle.LaunchError(f"'label_smoothing' must be a number in [0, 1]; got {label_smoothing!r}")
    if not isinstance(lse_square_scale, (int, float)):
        raise tle.LaunchError(f"'lse_square_scale' must be a number; got {lse_square_scale!r}")
    if softcap is not None and (not isinstance(softcap, (int, float)) or softcap <= 0):
        raise tle.LaunchError(f"'softcap' must be None or a positive number; got {softcap!r}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise tle.LaunchError(f"'ignore_index' must be an int; got {ignore_index!r}")
    return reduction


def cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                  size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
                  reduction: str = "mean", label_smoothing: float = 0.0, *, lse_square_scale: float = 0.0,
                  softcap: float | None = None, return_z_loss: bool = False, backend: str | None = None,
                  fallback: str | None = None):
    """torch.nn.functional.cross_entropy on a tle backend, over class-index targets (see the module doc);
    keyword-only: lse_square_scale (the z-loss), softcap, return_z_loss ((loss, z-loss term) then)."""
    check_float(input, "input", rank=tuple(range(1, 9)))
    check_tensor(target, "target", device=input.device)
    if target.is_floating_point():
        raise tle.LaunchError("'target' holds class probabilities (a floating tensor); tle.ops.cross_entropy takes "
                              "class indices only (int64 or int32)")
    check_tensor(target, "target", dtypes=TARGET_DTYPES)
    if weight is not None:
        check_float(weight, "weight", device=input.device, shape=(input.shape[1 if input.dim() > 1 else 0],))
    reduction = _check_options(reduction, label_smoothing, lse_square_scale, softcap, ignore_index, size_average,
                               reduce)
    x, t, shape = _as_rows(input, target)
    if x.shape[1] == 0:
        raise tle.LaunchError("'input' has no classes (its class dimension is empty)")
    b = CROSS_ENTROPY.resolve(input.device, backend, fallback)
    check_kernel_dtypes("cross_entropy", b, input=input, weight=weight)
    if b != "torch" and x.shape[1] >= MAX_NUMEL:
        raise tle.LaunchError(f"'input' has {x.shape[1]} classes; cross_entropy on {b} counts them in 32 bits")
    if input.device.type == "cpu" and t.numel() and not torch.compiler.is_compiling():
        bad = (t != ignore_index) & ((t < 0) | (t >= x.shape[1]))
        if bool(bad.any()):
            raise tle.LaunchError(f"'target' holds {int(t[bad][0])}, outside the {x.shape[1]} classes (and not "
                                  f"ignore_index {ignore_index})")
    loss, z, _, _ = CROSS_ENTROPY(x, t, weight, ignore_index, float(label_smoothing), float(lse_square_scale),
                                  float(softcap or 0.0), reduction, backend=b)
    if reduction == "none":
        loss, z = loss.reshape(shape), z.reshape(shape)
    return (loss, z.detach()) if return_z_loss else loss


class CrossEntropyLoss(torch.nn.Module):
    """torch.nn.CrossEntropyLoss on a tle backend (`backend=`, else TLE_BACKEND), torch's constructor, and the
    keyword-only options of tle.ops.cross_entropy."""

    def __init__(self, weight: torch.Tensor | None = None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0, *, lse_square_scale: float = 0.0,
                 softcap: float | None = None, return_z_loss: bool = False, backend: str | None = None,
                 fallback: str | None = None):
        super().__init__()
        try:
            reduction = _check_options(reduction, label_smoothing, lse_square_scale, softcap, ignore_index,
                                       size_average, reduce)
        except tle.LaunchError as e:
            raise ValueError(f"tle.ops.CrossEntropyLoss: {e}") from None
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing
        self.lse_square_scale, self.softcap, self.return_z_loss = lse_square_scale, softcap, return_z_loss
        self.backend, self.fallback = backend, fallback

    def forward(self, input, target):
        return cross_entropy(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction,
                             label_smoothing=self.label_smoothing, lse_square_scale=self.lse_square_scale,
                             softcap=self.softcap, return_z_loss=self.return_z_loss, backend=self.backend or None,
                             fallback=self.fallback)

    def extra_repr(self):
        s = f"reduction={self.reduction!r}, ignore_index={self.ignore_index}"
        for name in ("label_smoothing", "lse_square_scale", "softcap"):
            if getattr(self, name):
                s += f", {name}={getattr(self, name)}"
        return s + f", backend={self.backend}"


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
              label_smoothing=0.0, *, lse_square_scale=0.0, softcap=None, return_z_loss=False):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64. torch's own
    function, with the soft cap applied to the logits first and the z-loss added as its definition says."""
    if size_average is not None or reduce is not None:
        reduction = torch.nn._reduction.legacy_get_string(size_average, reduce)
    x = softcap * torch.tanh(input / softcap) if softcap else input
    loss = torch.nn.functional.cross_entropy(x, target, weight, ignore_index=ignore_index, reduction=reduction,
                                             label_smoothing=label_smoothing)
    if not lse_square_scale and not return_z_loss:
        return loss
    xr = x if x.dim() > 1 else x[None]
    lse = torch.logsumexp(xr, dim=1)
    t = target if x.dim() > 1 else target.reshape(1)
    valid = t != ignore_index
    w_t = (weight[torch.where(valid, t, 0)] if weight is not None else torch.ones_like(lse)) * valid
    z = lse_square_scale * lse * lse * valid
    if reduction == "none":
        z = z.reshape(loss.shape)
    else:
        z = z.sum() / (w_t.sum() if reduction == "mean" else 1)
    loss = loss + z
    return (loss, z.detach()) if return_z_loss else loss


def samples(device, dtype):
    g = torch.Generator().manual_seed(0)

    def x(*shape, scale=2.0):
        return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)

    def t(c, *shape, ignore=(), ignore_index=-100):
        out = torch.randint(0, c, shape, generator=g)
        for i in ignore:
            out.view(-1)[i] = ignore_index
        return out.to(device)

    def w(c):
        return (torch.rand(c, generator=g) + 0.5).to(device=device, dtype=dtype)

    return [Sample((x(8, 10), t(10, 8)), label="8x10 mean"),
            Sample((x(5, 1000), t(1000, 5, ignore=(1, 3))), dict(reduction="sum"),
                   label="1000 classes, ignored rows, sum"),
            Sample((x(6, 33), t(33, 6, ignore=(0,))), dict(reduction="none"), label="none"),
            Sample((x(7, 70), t(70, 7, ignore=(2,))), dict(weight=w(70)), label="class weights"),
            Sample((x(7, 70), t(70, 7, ignore=(4,))), dict(label_smoothing=0.2), label="label smoothing"),
            Sample((x(7, 70), t(70, 7, ignore=(4,))), dict(weight=w(70), label_smoothing=0.1, reduction="none"),
                   label="weights and label smoothing, none"),
            Sample((x(6, 300), t(300, 6)), dict(lse_square_scale=1e-3), label="z-loss"),
            Sample((x(6, 300, scale=20.0), t(300, 6, ignore=(5,))), dict(softcap=15.0, label_smoothing=0.05),
                   label="soft cap, label smoothing"),
            Sample((x(9, 5000), t(5000, 9, ignore=(0, 4), ignore_index=7)), dict(ignore_index=7, reduction="mean"),
                   label="5000 classes (two blocks), ignore_index 7"),
            Sample((x(2, 11, 3, 4), t(11, 2, 3, 4, ignore=(5,))), dict(reduction="none"), label="[N, C, d1, d2]"),
            Sample((x(12), t(12)), label="[C] with a 0-d target"),
            Sample((x(4, 9), t(9, 4, ignore=(0, 1, 2, 3))), dict(reduction="sum"), label="every row ignored, sum"),
            Sample((x(0, 9), t(9, 0)), dict(reduction="sum"), label="no rows")]


def _bench_make(shape, dtype, device):
    n, c = shape
    return Sample((torch.randn(n, c, device=device, dtype=dtype), torch.randint(0, c, (n,), device=device)))


def _bench_bytes(sample, mode):
    """fwd: the logits read once; bwd: read once more and the gradient written (what the backward does; the
    forward's pass is not repeated)."""
    x = sample.args[0]
    return (1 if mode == "fwd" else 2) * x.numel() * x.element_size()


def _eager(sample):
    x, t = sample.args
    return lambda x=x, t=t: torch.nn.functional.cross_entropy(x, t)


def _liger(sample):
    from liger_kernel.transformers import LigerCrossEntropyLoss
    x, t = sample.args
    loss = LigerCrossEntropyLoss()
    return lambda x=x, t=t: loss(x, t)


OPERATOR = Operator(
    "cross_entropy", fn=cross_entropy, reference=reference, samples=samples, grad_inputs=(0,),
    bench=BenchSpec(dry_shapes=[(64, 1000), (16, 5000)],
                    shapes=[(8192, 32000), (8192, 128256), (16384, 128256), (4096, 256000)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, peers={"liger": _liger},
                    shape_help="TOKENSxVOCAB"))
