"""The generalized Jensen-Shannon divergence of a student's distribution and a teacher's (distillation's loss).

    x = log Q: input, the student's log-probabilities     y = log P: target, the teacher's     rows [BT, V]
    M = beta * P + (1 - beta) * Q
    row loss = beta * KL(P || M) + (1 - beta) * KL(Q || M) = sum_v beta * P (y - log M) + (1 - beta) * Q (x - log M)
    beta 0:    row loss = KL(P || Q) = sum_v P (y - x)          (forward KL)
    beta 1:    row loss = KL(Q || P) = sum_v Q (x - y)          (reverse KL)
    loss = sum of the counted rows' losses / the number of counted rows

beta 0 and 1 are defined apart: the formula itself tends to 0 at both ends. The counted rows are every row, or
with shift_labels ([BT] ints) those whose label is not ignore_index; when no row counts the loss is 0 and the
gradient 0 (not 0 / 0). A probability of 0 (a log-probability of -inf) adds nothing to a sum (p log p -> 0).
Only `input` is differentiated:

    dloss/dx = (1 - beta) * Q * (x - log M)    (beta 0: -P;  beta 1: Q * (x - y + 1))    / the count

`tle.ops.jsd(input, target, shift_labels=None, *, beta=0.5, ignore_index=-100)` returns a 0-d loss in input's
dtype (target may have another floating dtype); `tle.ops.JSD(beta, ignore_index)` is the module, forward(input,
target, shift_labels=None).

Kernels: one program per row walks it in blocks of BLOCK_N columns and writes the row's loss and 1 (0 if ignored;
an ignored row reads nothing); when input requires grad the same pass writes the row's gradient (for an upstream
gradient 1, before the mean's division) in input's dtype. cross_entropy's reduce kernel adds the rows' losses
and counts up (one program, a fixed order) and divides; the backward is fused_linear_cross_entropy's scale
kernel, the forward's gradient times the upstream gradient over the count (read on the device), into a new
tensor. So a step reads input and target once, writes the gradient, and reads and writes it once more.
log M is taken as max(x, y) + log(s), s >= min(beta, 1 - beta): finite where P and Q underflow; with P and Q it
costs three exponentials or logarithms per element."""
from __future__ import annotations

import math
from typing import Optional

import torch
import triton.language as tl

import tle
from tle.checks import check_tensor
from tle.kernels import cross_entropy as ce
from tle.kernels.fused_linear_cross_entropy import scale_by_upstream
from tle.oplib import BenchSpec, Operator, Sample, check_float, check_kernel_dtypes
from tle.oplib.losses import check_input_and_target
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype

MAX_NUMEL = 2 ** 31         # row offsets are 64-bit, column counts 32-bit
MIXED, FORWARD_KL, REVERSE_KL = 0, 1, 2   # how the kernel sees beta: in (0, 1), 0, 1
# added to the count of counted rows: absorbed exactly by any count >= 1 (below half an fp32 ulp of 1), and
# when no row counts the mean is 0 / EMPTY = 0 and the gradient 0, not 0 / 0
EMPTY = 2.0 ** -100


def kind_of(beta: float) -> int:
    return FORWARD_KL if beta == 0.0 else REVERSE_KL if beta == 1.0 else MIXED


@tle.jit
def jsd_fwd_kernel(x_ptr, y_ptr, label_ptr, loss_ptr, counted_ptr, dx_ptr, x_row_stride, y_row_stride,
                   dx_row_stride, n_cols, ignore_index, beta, BLOCK_N: tl.constexpr, KIND: tl.constexpr,
                   HAS_LABELS: tl.constexpr, GRAD: tl.constexpr):
    # loss_ptr, counted_ptr: the row's loss and 1 (0 when ignored), fp32; dx_ptr (GRAD): the row's dloss/dx for
    # an upstream gradient 1, before the mean's division
    row = tl.program_id(0)
    if HAS_LABELS:
        n_read = tl.where(tl.load(label_ptr + row) != ignore_index, n_cols, 0)    # an ignored row: no step
    else:
        n_read = n_cols
    x_row = x_ptr + row.to(tl.int64) * x_row_stride
    y_row = y_ptr + row.to(tl.int64) * y_row_stride
    dx_row = dx_ptr + row.to(tl.int64) * dx_row_stride
    lanes = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for c0 in range(0, n_read, BLOCK_N):
        cols = c0 + lanes
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(tl.float32)
        # each term is kept only where its probability is > 0: 0 * -inf would be NaN (a NaN probability, from
        # x and y both -inf, compares false too)
        if KIND == FORWARD_KL:
            p = tl.exp(y)
            loss = tl.where(p > 0.0, p * (y - x), 0.0)
            d = -p
        elif KIND == REVERSE_KL:
            q = tl.exp(x)
            r = q * (x - y)
            loss = tl.where(q > 0.0, r, 0.0)
            d = tl.where(q > 0.0, r + q, 0.0)
        else:
            # the larger of x, y taken out: P, Q and M from exp(top), exp(-|x - y|) and one log
            top = tl.maximum(x, y)
            e = tl.exp(-tl.abs(x - y))
            big = tl.exp(top)
            x_top = x >= y
            q = tl.where(x_top, big, big * e)
            p = tl.where(x_top, big * e, big)
            log_m = top + tl.log(tl.where(x_top, (1.0 - beta) + beta * e, beta + (1.0 - beta) * e))
            d = tl.where(q > 0.0, (1.0 - beta) * q * (x - log_m), 0.0)     # the student's term is its gradient
            loss = tl.where(p > 0.0, beta * p * (y - log_m), 0.0) + d
        acc += tl.where(mask, loss, 0.0)
        if GRAD:
            tl.store(dx_row + cols, d.to(dx_ptr.dtype.element_ty), mask=mask)
    if GRAD:
        for c0 in range(n_read, n_cols, BLOCK_N):          # an ignored row's gradient: zeros
            cols = c0 + lanes
            tl.store(dx_row + cols, tl.zeros([BLOCK_N], dtype=tl.float32).to(dx_ptr.dtype.element_ty),
                     mask=cols < n_cols)
    tl.store(loss_ptr + row, tl.sum(acc, axis=0))
    tl.store(counted_ptr + row, tl.where(n_read == n_cols, 1.0, 0.0))


# -- the torch backend: the same arithmetic in fp32 (fp64 for fp64 inputs) ----------------------------------
def _torch_terms(x, y, beta):
    """(loss, dloss/dx) per element of x = log Q and y = log P (compute-dtype tensors)."""
    if beta == 0.0:
        p = torch.exp(y)
        return torch.where(p > 0, p * (y - x), 0.0), -p
    q = torch.exp(x)
    if beta == 1.0:
        r = q * (x - y)
        return torch.where(q > 0, r, 0.0), torch.where(q > 0, r + q, 0.0)
    p = torch.exp(y)
    log_m = torch.logaddexp(y + math.log(beta), x + math.log1p(-beta))
    d = torch.where(q > 0, (1 - beta) * q * (x - log_m), 0.0)
    return torch.where(p > 0, beta * p * (y - log_m), 0.0) + d, d


def _counted(x, shift_labels, ignore_index):
    if shift_labels is None:
        return torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
    return shift_labels != ignore_index


def _torch_forward(x, target, shift_labels, beta, ignore_index, need_grad):
    ct = torch_compute_dtype(x)
    loss, d = _torch_terms(x.to(ct), target.to(ct), beta)
    counted = _counted(x, shift_labels, ignore_index)
    rows = torch.where(counted, loss.sum(1), 0.0)
    denom = counted.to(ct).sum() + EMPTY
    dx = torch.where(counted[:, None], d, 0.0).to(x.dtype) if need_grad else x.new_empty(0)
    return (rows.sum() / denom).to(x.dtype), dx, denom.reshape(1)


def _torch_backward(dy, dx, stats):
    g = dy.to(stats.dtype) / stats[0]
    return (dx.to(g.dtype) * g).to(dx.dtype)


# -- the kernel backends ------------------------------------------------------------------------------------
def _kernel_forward(x, target, shift_labels, beta, ignore_index, need_grad, backend):
    n, v = x.shape
    dev = x.device
    # one slot past the rows: loss 0, count EMPTY (see EMPTY)
    loss_rows = torch.zeros(n + 1, device=dev, dtype=torch.float32)
    counted = torch.full((n + 1,), EMPTY, device=dev, dtype=torch.float32)
    dx = torch.empty((n, v), device=dev, dtype=x.dtype) if need_grad else x.new_empty(0)
    if n:
        bn, warps = ce.block_n(v)
        jsd_fwd_kernel[(n,)](x, target, shift_labels if shift_labels is not None else counted, loss_rows, counted,
                             dx if need_grad else loss_rows, x.stride(0), target.stride(0), v, v, ignore_index,
                             beta, BLOCK_N=bn, KIND=kind_of(beta), HAS_LABELS=shift_labels is not None,
                             GRAD=need_grad, backend=backend, num_warps=warps)
    loss = torch.empty((), device=dev, dtype=x.dtype)
    stats = torch.empty(1, device=dev, dtype=torch.float32)
    ce.cross_entropy_reduce_kernel[(1,)](loss_rows, loss_rows, counted, loss, loss, stats, n + 1,
                                         BLOCK=ce.REDUCE_BLOCK, MEAN=True, Z_LOSS=False, backend=backend,
                                         num_warps=4)
    return loss, dx, stats


def _kernel_backward(dy, dx, stats, backend):
    out = torch.empty_like(dx)
    scale_by_upstream(dx.reshape(-1), out.reshape(-1), dy, stats, True, backend)
    return out


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_problem(device, size):
    """(student log-probabilities, teacher log-probabilities, labels with every 7th row ignored): 37 x 1000 fp32,
    or 8192 x 128256 bf16."""
    g = torch.Generator().manual_seed(0)
    (n, v), dtype = ((37, 1000), torch.float32) if size == "small" else ((8192, 128256), torch.bfloat16)
    x = torch.log_softmax(torch.randn(n, v, generator=g) * 2, dim=-1).to(dtype)
    y = torch.log_softmax(torch.randn(n, v, generator=g) * 2, dim=-1).to(dtype)
    labels = torch.randint(0, v, (n,), generator=g)
    labels[::7] = -100
    return x.to(device), y.to(device), labels.to(device)


@tle.example(jsd_fwd_kernel)
def _fwd_example(device, size):
    x, y, labels = _example_problem(device, size)
    n, v = x.shape
    beta = 0.3
    loss, counted = torch.full((n,), float("nan"), device=device), torch.full((n,), float("nan"), device=device)
    dx = torch.full_like(x, float("nan"))
    bn, warps = ce.block_n(v)

    def ref():
        elem, d = _torch_terms(x.float(), y.float(), beta)
        keep = labels != -100
        return {"loss": torch.where(keep, elem.sum(1), 0.0), "counted": keep.float(),
                "dx": torch.where(keep[:, None], d, 0.0)}
    return tle.Launch(grid=(n,), args=(x, y, labels, loss, counted, dx, v, v, v, v, -100, beta),
                      kwargs=dict(BLOCK_N=bn, KIND=MIXED, HAS_LABELS=True, GRAD=True, num_warps=warps),
                      outputs={"loss": loss, "counted": counted, "dx": dx}, reference=ref,
                      bytes=3 * n * v * x.element_size(), label=f"{n}x{v} {str(x.dtype)[6:]}, beta {beta}")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _unit_columns(t):
    return t if t.shape[1] <= 1 or t.stride(1) == 1 else t.contiguous()


def _rows(run, x: torch.Tensor, target: torch.Tensor, shift_labels: Optional[torch.Tensor], beta: float,
          ignore_index: int, need_grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, dloss/dx for an upstream gradient 1 before the mean's division (empty without need_grad),
    [the count of counted rows + EMPTY] (fp32; fp64 for fp64 input on torch))."""
    labels = shift_labels.contiguous() if shift_labels is not None else None
    return run(_unit_columns(x), _unit_columns(target), labels, beta, ignore_index, need_grad)


def _backward_rows(run, dy: torch.Tensor, dx: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
    return run(dy.contiguous(), dx, stats)


def _forward_fake(x, target, shift_labels, beta, ignore_index, need_grad):
    return (x.new_empty(()), x.new_empty(x.shape if need_grad else (0,)),
            x.new_empty(1, dtype=torch_compute_dtype(x)))


def _save(ctx, inputs, output):
    ctx.save_for_backward(output[1], output[2])
    ctx.set_materialize_grads(False)


def _grads(ctx, backward, dloss, *_unused):
    if dloss is None:
        return ()
    return (backward(dloss, *ctx.saved_tensors),)


GENERALIZED_JSD = Recipe(
    "jsd",
    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_rows, fake=_forward_fake),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_rows,
                   fake=lambda dy, dx, stats: dx.new_empty(dx.shape)),
    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def _check_options(beta, ignore_index) -> None:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0.0 <= beta <= 1.0:
        raise tle.LaunchError(f"'beta' must be a number in [0, 1]; got {beta!r}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise tle.LaunchError(f"'ignore_index' must be an int; got {ignore_index!r}")


def jsd(input: torch.Tensor, target: torch.Tensor, shift_labels: torch.Tensor | None = None, *, beta: float = 0.5,
        ignore_index: int = -100, backend: str | None = None, fallback: str | None = None) -> torch.Tensor:
    """The generalized Jensen-Shannon divergence of input (the student's log-probabilities [BT, V]) and target
    (the teacher's), averaged over the rows whose shift_labels is not ignore_index (see the module doc)."""
    check_float(input, "input", rank=2)
    check_input_and_target(input, target)
    if shift_labels is not None:
        check_tensor(shift_labels, "shift_labels", dtypes=ce.TARGET_DTYPES, device=input.device,
                     shape=(input.shape[0],))
    _check_options(beta, ignore_index)
    if input.shape[1] == 0:
        raise tle.LaunchError("'input' has no columns (its vocabulary dimension is empty)")
    if torch.is_grad_enabled() and target.requires_grad:
        raise tle.LaunchError("'target' requires grad; tle.ops.jsd differentiates 'input' only (detach 'target')")
    b = GENERALIZED_JSD.resolve(input.device, backend, fallback)
    check_kernel_dtypes("jsd", b, input=input, target=target)
    if b != "torch" and input.shape[1] >= MAX_NUMEL:
        raise tle.LaunchError(f"'input' has {input.shape[1]} columns; jsd on {b} counts them in 32 bits")
    need_grad = torch.is_grad_enabled() and input.requires_grad
    loss, _, _ = GENERALIZED_JSD(input, target, shift_labels, float(beta), ignore_index, need_grad, backend=b)
    return loss


class JSD(torch.nn.Module):
    """The generalized Jensen-Shannon divergence as a module (`backend=`, else TLE_BACKEND):
    forward(input, target, shift_labels=None), input the student's log-probabilities, target the teacher's."""

    def __init__(self, beta: float = 0.5, ignore_index: int = -100, *, backend: str | None = None,
                 fallback: str | None = None):
        super().__init__()
        try:
            _check_options(beta, ignore_index)
        except tle.LaunchError as e:
            raise ValueError(f"tle.ops.JSD: {e}") from None
        self.beta, self.ignore_index = beta, ignore_index
        self.backend, self.fallback = backend, fallback

    def forward(self, input, target, shift_labels=None):
        return jsd(input, target, shift_labels, beta=self.beta, ignore_index=self.ignore_index,
                   backend=self.backend or None, fallback=self.fallback)

    def extra_repr(self):
        return f"beta={self.beta}, ignore_index={self.ignore_index}, backend={self.backend}"


# -- tests and benchmarks -----------------------------------------------------------------------------------
def _p_log_ratio(log_a, log_b):
    """exp(log_a) * (log_a - log_b), 0 where log_a is -inf: both replaced there before they meet a product, so
    that the gradient is 0 there too, not NaN."""
    keep = log_a > float("-inf")
    a, b = torch.where(keep, log_a, 0.0), torch.where(keep, log_b, 0.0)
    return torch.where(keep, torch.exp(a) * (a - b), 0.0)


def reference(input, target, shift_labels=None, *, beta=0.5, ignore_index=-100):
    """Plain differentiable torch: the definition on log-probabilities, evaluated in fp64 by the tests."""
    if beta == 0.0:
        per = _p_log_ratio(target, input)
    elif beta == 1.0:
        per = _p_log_ratio(input, target)
    else:
        both = (input == float("-inf")) & (target == float("-inf"))        # M is 0: no term, no gradient
        log_m = torch.logaddexp(torch.where(both, 0.0, target) + math.log(beta),
                                torch.where(both, 0.0, input) + math.log1p(-beta))
        per = beta * _p_log_ratio(target, log_m) + (1 - beta) * _p_log_ratio(input, log_m)
    counted = _counted(input, shift_labels, ignore_index)
    return torch.where(counted, per.sum(-1), 0.0).sum() / counted.sum().clamp_min(1)


def samples(device, dtype):
    g = torch.Generator().manual_seed(0)

    def logp(n, v, scale=2.0):
        return torch.log_softmax(torch.randn(n, v, generator=g) * scale, dim=-1).to(device=device, dtype=dtype)

    def labels(n, ignore=(), ignore_index=-100):
        out = torch.randint(0, 50, (n,), generator=g)
        for i in ignore:
            out[i] = ignore_index
        return out.to(device)

    masked_x, masked_y = logp(6, 40), logp(6, 40)
    masked_x[:, 30:], masked_y[:, 30:] = float("-inf"), float("-inf")       # a padded vocabulary
    masked_y[:, :3] = float("-inf")                                           # zeros in the teacher only
    return [Sample((logp(8, 10), logp(8, 10)), label="beta 0.5"),
            Sample((logp(5, 1000), logp(5, 1000), labels(5, ignore=(1, 3))), dict(beta=0.1),
                   label="1000 columns, ignored rows, beta 0.1"),
            Sample((logp(6, 33), logp(6, 33)), dict(beta=0.0), label="beta 0: KL(target || input)"),
            Sample((logp(6, 33), logp(6, 33), labels(6, ignore=(0,))), dict(beta=1.0),
                   label="beta 1: KL(input || target)"),
            Sample((logp(7, 70), logp(7, 70), labels(7, ignore=(2, 5), ignore_index=3)),
                   dict(beta=0.7, ignore_index=3), label="ignore_index 3"),
            Sample((logp(3, 9000, scale=4.0), logp(3, 9000, scale=4.0)), dict(beta=0.5),
                   label="9000 columns (three blocks)"),
            Sample((masked_x, masked_y, labels(6)), dict(beta=0.4), label="log-probabilities of -inf"),
            Sample((logp(4, 9), logp(4, 9), labels(4, ignore=(0, 1, 2, 3))), label="every row ignored"),
            Sample((logp(0, 9), logp(0, 9)), label="no rows")]


def _bench_make(shape, dtype, device):
    n, v = shape
    x = torch.log_softmax(torch.randn(n, v, device=device, dtype=torch.float32), dim=-1).to(dtype)
    y = torch.log_softmax(torch.randn(n, v, device=device, dtype=torch.float32), dim=-1).to(dtype)
    return Sample((x, y))


def _bench_bytes(sample, mode):
    """fwd: input and target read; bwd: the forward's gradient read and the gradient written (the forward of a
    step that differentiates writes that gradient too: full's count leaves it out)."""
    x = sample.args[0]
    return 2 * x.numel() * x.element_size()


def _eager(sample):
    x, y = sample.args

    def loss(x=x, y=y, beta=0.5):
        log_m = torch.logaddexp(y + math.log(beta), x + math.log1p(-beta))
        per = beta * torch.exp(y) * (y - log_m) + (1 - beta) * torch.exp(x) * (x - log_m)
        return per.sum() / x.shape[0]
    return loss


def _liger(sample):
    from liger_kernel.transformers import LigerJSD
    x, y = sample.args
    loss = LigerJSD(beta=0.5)
    return lambda x=x, y=y: loss(x, y)


OPERATOR = Operator(
    "jsd", fn=jsd, reference=reference, samples=samples, grad_inputs=(0,),
    bench=BenchSpec(dry_shapes=[(32, 1000)], shapes=[(8192, 32000), (8192, 128256), (16384, 128256)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, peers={"liger": _liger},
                    shape_help="TOKENSxVOCAB"))
