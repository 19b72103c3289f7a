"""GroupNorm, as torch.nn.functional.group_norm: the channels of input [N, C, *] split into `num_groups`
groups of C / num_groups consecutive channels, each (sample, group) normalized over its channels and
spatial positions together (biased variance), then scaled and shifted per channel:

    y[n, c, s] = (x[n, c, s] - mean[n, g]) * rstd[n, g] * weight[c] + bias[c]     g: the group of channel c
    rstd[n, g] = rsqrt(mean over the group of (x - mean[n, g])^2 + eps)

`tle.ops.group_norm(input, num_groups, weight=None, bias=None, eps=1e-5)` takes torch's arguments;
`tle.ops.GroupNorm` is torch.nn.GroupNorm. The kernels see the input as [N, C, S] (the spatial dimensions
folded, contiguous), where the channels of one group are one contiguous run of C / num_groups * S elements.

Forward: one program per (sample, group). A first loop over the run in flat tiles keeps a running mean and
sum of squared deviations per lane (Welford: no E[x^2] - E[x]^2 cancellation on inputs far from zero), merged
across lanes after the loop; a second loop over [channels, spatial] tiles of the run writes y with each
channel's weight and bias. The mean and rstd of each group (fp32, [N, G]) are kept for the backward.

Backward, with x_hat = (x - mean) * rstd and g = dy * weight:
    dx = rstd * (g - mean over the group of g - x_hat * mean over the group of g * x_hat)
one program per (sample, group): a first loop adds up, per channel, dy * x_hat and dy over the spatial
positions (the weight's and bias's gradients of this sample, written as [N, C] fp32 partials that column_sums
adds up over the samples), whose weighted sums are the group's two means; a second loop writes dx."""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
import triton.language as tl

import tle
from tle.kernels.column_sum import parameter_grads
from tle.oplib import BenchSpec, Operator, Sample, check_float, check_kernel_dtypes
from tle.oplib.arith import next_power_of_2
from tle.oplib.normalized_shape import add_affine_parameters, reset_affine_parameters
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype
from tle.oplib.tensors import reshaped

SPATIAL_TILE = 1024     # the widest spatial extent of a [channels, spatial] tile (wider ones waste more at the edge)
# (elements a program loads a step, warps) of the forward by backend and of the backward: measured on the H200 (bf16,
# the kernels' device time, TB/s at 32x512x4096 / 16x1024x1024 / 16x320x4096, 32 groups). Forward: Triton 8192 on 16
# warps 2.89 / 2.63 / 2.63 (4096 on 8: 2.43 / 2.58 / 2.47; 16384 on 16: 2.08 / 1.75 / 1.82); TileLang 8192 on 8
# 2.69 / 2.82 / 2.66 (on 16: 2.59 / 2.64 / 2.63; 16384 on 16: 2.90 / 2.23 / 2.24; 4096 on 8: 2.55 / 2.64 / 2.47).
# Backward: 16384 on 16, Triton 3.07 / 2.14 / 2.22, TileLang 2.83 / 2.12 / 2.25 (4096 on 8: 2.35 / 2.11 / 2.21 and
# 2.33 / 2.15 / 1.86; 8192 on 16: 2.86 / 1.98 / 1.89 and 2.55 / 2.41 / 1.90).
FORWARD_TILES = {"triton": (8192, 16), "tilelang": (8192, 8)}
BACKWARD_TILES = (16384, 16)
MAX_GROUP = 2 ** 31     # the kernels' offsets within a group are 32-bit


# The kernels take each tensor as views whose dimensions the tiles follow, so that TileLang copies every tile as
# a box: x, y, dy, dx as [N * G, C / G, S] (a group, its channels, their positions) and, for the flat loop, x
# again as [N * G, C / G * S]; weight and bias as [G, C / G]; the [N, C] partials as [N * G, C / G].
@tle.jit
def channel_tile(pid, group_size, ch, ch_mask, s0, spatial, BLOCK_S: tl.constexpr):
    """(offsets, mask) of the tile of channels `ch` and positions s0 .. s0 + BLOCK_S of group `pid` (in the
    [N * G, C / G, S] view: a box)."""
    sp = s0 + tl.arange(0, BLOCK_S)
    offs = pid.to(tl.int64) * group_size + ch[:, None] * spatial + sp[None, :]
    return offs, ch_mask[:, None] & (sp < spatial)[None, :]


@tle.jit
def group_norm_fwd_kernel(x_ptr, xg_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, groups, group_channels, spatial,
                          eps, BLOCK: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr,
                          HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    # x_ptr: x as [N * G, C / G * S], xg_ptr: x as [N * G, C / G, S]
    pid = tl.program_id(0)                          # sample pid // groups, group pid % groups
    group_size = group_channels * spatial
    lanes = tl.arange(0, BLOCK)
    # Welford per lane: lane l sees elements l, l + BLOCK, ...; every tile but the last is full, so the
    # lanes a step updates have all seen t0 // BLOCK elements before it
    mean_l = tl.zeros([BLOCK], dtype=tl.float32)
    m2_l = tl.zeros([BLOCK], dtype=tl.float32)
    for t0 in range(0, group_size, BLOCK):
        offs = t0 + lanes
        mask = offs < group_size
        x = tl.load(x_ptr + pid.to(tl.int64) * group_size + offs, mask=mask, other=0.0,
                    eviction_policy="evict_last").to(tl.float32)
        delta = tl.where(mask, x - mean_l, 0.0)
        mean_l += delta * (1.0 / (t0 // BLOCK + 1))
        m2_l += delta * (x - mean_l)
    # merge the lanes (Chan et al.): lane l saw ceil((group_size - l) / BLOCK) elements. The lanes' means are
    # added up as differences from lane 0's, which keeps the sum's rounding far below an ulp of the mean where
    # the group lies far from zero
    seen = ((group_size - lanes + BLOCK - 1) // BLOCK).to(tl.float32)
    origin = tl.sum(tl.where(lanes == 0, mean_l, 0.0), axis=0)
    mean = origin + tl.sum(seen * (mean_l - origin), axis=0) / group_size
    dev = mean_l - mean
    var = (tl.sum(m2_l, axis=0) + tl.sum(seen * dev * dev, axis=0)) / group_size
    rstd = tl.rsqrt(var + eps)
    tl.store(mean_ptr + pid, mean)
    tl.store(rstd_ptr + pid, rstd)
    group = pid % groups
    for c0 in range(0, group_channels, BLOCK_C):
        ch = c0 + tl.arange(0, BLOCK_C)
        ch_mask = ch < group_channels
        scale = tl.zeros([BLOCK_C], dtype=tl.float32) + rstd
        if HAS_WEIGHT:
            scale = scale * tl.load(w_ptr + group * group_channels + ch, mask=ch_mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            shift = tl.load(b_ptr + group * group_channels + ch, mask=ch_mask, other=0.0).to(tl.float32)
        for s0 in range(0, spatial, BLOCK_S):
            offs, mask = channel_tile(pid, group_size, ch, ch_mask, s0, spatial, BLOCK_S)
            x = tl.load(xg_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            y = (x - mean) * scale[:, None]
            if HAS_BIAS:
                y = y + shift[:, None]
            tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@tle.jit
def group_norm_bwd_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr, groups, group_channels,
                          spatial, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                          HAS_BIAS: tl.constexpr):
    # dw_ptr, db_ptr: fp32 partials, each sample's sums over the positions of dy * x_hat and of dy per channel
    pid = tl.program_id(0)
    group_size = group_channels * spatial
    group = pid % groups
    mean = tl.load(mean_ptr + pid)
    rstd = tl.load(rstd_ptr + pid)
    # the group's sums of g * x_hat and of g, per channel lane
    sum_gx = tl.zeros([BLOCK_C], dtype=tl.float32)
    sum_g = tl.zeros([BLOCK_C], dtype=tl.float32)
    for c0 in range(0, group_channels, BLOCK_C):
        ch = c0 + tl.arange(0, BLOCK_C)
        ch_mask = ch < group_channels
        acc_dyx = tl.zeros([BLOCK_C, BLOCK_S], dtype=tl.float32)
        acc_dy = tl.zeros([BLOCK_C, BLOCK_S], dtype=tl.float32)
        for s0 in range(0, spatial, BLOCK_S):
            offs, mask = channel_tile(pid, group_size, ch, ch_mask, s0, spatial, BLOCK_S)
            dy = tl.load(dy_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            acc_dyx += dy * (x - mean)             # zero where masked: dy is
            acc_dy += dy
        dyx = tl.sum(acc_dyx, axis=1) * rstd       # per channel: the sum of dy * x_hat
        dyc = tl.sum(acc_dy, axis=1)
        if HAS_WEIGHT:
            w = tl.load(w_ptr + group * group_channels + ch, mask=ch_mask, other=0.0).to(tl.float32)
            sum_gx += w * dyx
            sum_g += w * dyc
            tl.store(dw_ptr + pid * group_channels + ch, dyx, mask=ch_mask)
        else:
            sum_gx += dyx
            sum_g += dyc
        if HAS_BIAS:
            tl.store(db_ptr + pid * group_channels + ch, dyc, mask=ch_mask)
    c_hat = tl.sum(sum_gx, axis=0) / group_size
    c_one = tl.sum(sum_g, axis=0) / group_size
    for c0 in range(0, group_channels, BLOCK_C):
        ch = c0 + tl.arange(0, BLOCK_C)
        ch_mask = ch < group_channels
        if HAS_WEIGHT:
            w = tl.load(w_ptr + group * group_channels + ch, mask=ch_mask, other=0.0).to(tl.float32)
        for s0 in range(0, spatial, BLOCK_S):
            offs, mask = channel_tile(pid, group_size, ch, ch_mask, s0, spatial, BLOCK_S)
            dy = tl.load(dy_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            x_hat = (x - mean) * rstd
            if HAS_WEIGHT:
                g = dy * w[:, None]
            else:
                g = dy
            dx = (g - x_hat * c_hat - c_one) * rstd
            tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)


# -- the torch backend: the same arithmetic in torch (fp32, or fp64 for fp64 inputs) ------------------------
def _grouped(t, num_groups):
    """[N, C, S] -> [N, G, C / G * S] (a view of a contiguous tensor)."""
    n, c, s = t.shape
    return t.reshape(n, num_groups, c // num_groups * s)


def _torch_forward(x, weight, bias, num_groups, eps):
    ct = torch_compute_dtype(x)
    xg = _grouped(x.to(ct), num_groups)
    mean = xg.mean(-1)
    xc = xg - mean[..., None]
    rstd = torch.rsqrt(xc.pow(2).mean(-1) + eps)
    y = (xc * rstd[..., None]).reshape(x.shape)
    if weight is not None:
        y = y * weight.to(ct)[:, None]
    if bias is not None:
        y = y + bias.to(ct)[:, None]
    return y.to(x.dtype), mean, rstd


def _torch_backward(dy, x, weight, bias, mean, rstd, num_groups):
    ct = rstd.dtype
    x_hat = ((_grouped(x.to(ct), num_groups) - mean[..., None]) * rstd[..., None]).reshape(x.shape)
    dyf = dy.to(ct)
    g = dyf * weight.to(ct)[:, None] if weight is not None else dyf
    gg, xg = _grouped(g, num_groups), _grouped(x_hat, num_groups)
    dx = (gg - xg * (gg * xg).mean(-1, keepdim=True) - gg.mean(-1, keepdim=True)) * rstd[..., None]
    dw = (dyf * x_hat).sum((0, 2)).to(weight.dtype) if weight is not None else None
    db = dyf.sum((0, 2)).to(bias.dtype) if bias is not None else None
    return dx.reshape(x.shape).to(x.dtype), dw, db


# -- the kernel backends ------------------------------------------------------------------------------------
class Tiles(NamedTuple):
    block: int          # the flat tile of the statistics' loop
    block_c: int        # the [channels, spatial] tile of the loops that need each element's channel
    block_s: int
    num_warps: int


def tiles(group_channels: int, spatial: int, size: tuple[int, int]) -> Tiles:
    """Tiles of at most size[0] elements on size[1] warps, no wider than the group's run (flat) or its channels and
    spatial extent; tiles of a small group take 4 warps."""
    tile, warps = size
    block = min(tile, next_power_of_2(group_channels * spatial))
    block_s = min(SPATIAL_TILE, next_power_of_2(spatial))
    block_c = min(next_power_of_2(group_channels), tile // block_s)
    return Tiles(block, block_c, block_s, warps if max(block, block_c * block_s) >= 4096 else 4)


def _by_group(t, num_groups):
    """[N, C, S] (contiguous) -> [N * G, C / G, S]: the kernels' view of a tensor of the input's shape."""
    n, c, s = t.shape
    return t.view(n * num_groups, c // num_groups, s)


def _by_channel(p, num_groups, absent):
    """A parameter [C], or the [N, C] partials of its gradient, as [..., C / G] rows of one group each; `absent`
    where there is none (a kernel then never reads it)."""
    return p.view(-1, p.shape[-1] // num_groups) if p is not None else absent


def _kernel_forward(x, weight, bias, num_groups, eps, backend):
    n, c, s = x.shape
    y = torch.empty((n, c, s), device=x.device, dtype=x.dtype)
    if not x.numel():   # NaN: the statistics of empty groups
        return (y, torch.full((n, num_groups), float("nan"), device=x.device),
                torch.full((n, num_groups), float("nan"), device=x.device))
    mean = torch.empty((n, num_groups), device=x.device)        # the kernel writes every group's statistics
    rstd = torch.empty((n, num_groups), device=x.device)
    cfg = tiles(c // num_groups, s, FORWARD_TILES[backend])
    xg = _by_group(x, num_groups)
    group_norm_fwd_kernel[(n * num_groups,)](
        xg.view(n * num_groups, -1), xg, _by_channel(weight, num_groups, mean),
        _by_channel(bias, num_groups, mean), _by_group(y, num_groups), mean, rstd,
        num_groups, c // num_groups, s, float(eps), BLOCK=cfg.block, BLOCK_C=cfg.block_c, BLOCK_S=cfg.block_s,
        HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, backend=backend, num_warps=cfg.num_warps)
    return y, mean, rstd


def _kernel_backward(dy, x, weight, bias, mean, rstd, num_groups, backend):
    n, c, s = x.shape
    dx = torch.empty((n, c, s), device=x.device, dtype=x.dtype)
    # the [N, C] partials of the weight's and the bias's gradients, in one buffer where both are asked for
    parts = torch.empty(((weight is not None) + (bias is not None), n, c), device=x.device, dtype=torch.float32)
    dw_parts = parts[0] if weight is not None else None
    db_parts = parts[-1] if bias is not None else None
    if x.numel():
        cfg = tiles(c // num_groups, s, BACKWARD_TILES)
        group_norm_bwd_kernel[(n * num_groups,)](
            _by_group(dy, num_groups), _by_group(x, num_groups),
            _by_channel(weight, num_groups, mean), mean, rstd, _by_group(dx, num_groups),
            _by_channel(dw_parts, num_groups, mean), _by_channel(db_parts, num_groups, mean), num_groups,
            c // num_groups, s,
            BLOCK_C=cfg.block_c, BLOCK_S=cfg.block_s, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
            backend=backend, num_warps=cfg.num_warps)
    return (dx,) + parameter_grads(parts, weight, bias, backend, x.numel() > 0)


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_problem(size, device):
    """(x [N, C, S], num_groups, weight, bias): groups of 3 channels x 1000 positions (several flat tiles), or
    a diffusion model's 32 groups of 16 channels x 4096 positions in bf16."""
    (n, c, s, groups), dtype = ((2, 6, 1000, 2), torch.float32) if size == "small" else \
        ((32, 512, 4096, 32), torch.bfloat16)
    x = torch.randn(n, c, s, device=device).add_(torch.randn(n, c, 1, device=device)).to(dtype)
    w = (torch.rand(c, device=device) + 0.5).to(dtype)
    b = torch.randn(c, device=device).to(dtype)
    return x, groups, w, b


@tle.example(group_norm_fwd_kernel)
def _fwd_example(device, size):
    x, groups, w, b = _example_problem(size, device)
    n, c, s = x.shape
    y = torch.full_like(x, float("nan"))
    mean, rstd = (torch.full((n, groups), float("nan"), device=device) for _ in range(2))
    cfg = tiles(c // groups, s, FORWARD_TILES["triton"])     # one launch for both lowerings
    xg = _by_group(x, groups)

    def ref():
        y_ref, mean_ref, rstd_ref = _torch_forward(x, w, b, groups, 1e-5)
        return {"y": y_ref, "mean": mean_ref, "rstd": rstd_ref}
    return tle.Launch(grid=(n * groups,), args=(xg.view(n * groups, -1), xg, _by_channel(w, groups, None),
                                                _by_channel(b, groups, None), _by_group(y, groups), mean, rstd,
                                                groups, c // groups, s, 1e-5),
                      kwargs=dict(BLOCK=cfg.block, BLOCK_C=cfg.block_c, BLOCK_S=cfg.block_s, HAS_WEIGHT=True,
                                  HAS_BIAS=True, num_warps=cfg.num_warps),
                      outputs={"y": y, "mean": mean, "rstd": rstd}, reference=ref,
                      bytes=2 * x.numel() * x.element_size(), label=f"{n}x{c}x{s} {str(x.dtype)[6:]}, {groups} groups")


@tle.example(group_norm_bwd_kernel)
def _bwd_example(device, size):
    x, groups, w, _ = _example_problem(size, device)
    n, c, s = x.shape
    dy = torch.randn(x.shape, device=device).to(x.dtype)
    _, mean, rstd = _torch_forward(x, None, None, groups, 1e-5)
    dx = torch.full_like(x, float("nan"))
    dw_parts, db_parts = (torch.full((n, c), float("nan"), device=device) for _ in range(2))
    cfg = tiles(c // groups, s, BACKWARD_TILES)

    def ref():
        dx_ref, _, _ = _torch_backward(dy, x, w, None, mean, rstd, groups)
        x_hat = ((_grouped(x.float(), groups) - mean[..., None]) * rstd[..., None]).reshape(x.shape)
        return {"dx": dx_ref, "dw_partials": (dy.float() * x_hat).sum(-1), "db_partials": dy.float().sum(-1)}
    args = (_by_group(dy, groups), _by_group(x, groups), _by_channel(w, groups, None), mean, rstd,
            _by_group(dx, groups), _by_channel(dw_parts, groups, None), _by_channel(db_parts, groups, None), groups,
            c // groups, s)
    return tle.Launch(grid=(n * groups,), args=args,
                      kwargs=dict(BLOCK_C=cfg.block_c, BLOCK_S=cfg.block_s, HAS_WEIGHT=True, HAS_BIAS=True,
                                  num_warps=cfg.num_warps),
                      outputs={"dx": dx, "dw_partials": dw_parts, "db_partials": db_parts}, reference=ref,
                      bytes=3 * x.numel() * x.element_size(), label=f"{n}x{c}x{s} {str(x.dtype)[6:]}, {groups} groups")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _dense(p):
    return p.contiguous() if p is not None else None


def _as_3d(t):
    """[N, C, *] -> [N, C, S], contiguous: what both implementations take (a copy for channels-last input)."""
    if t.dim() == 3 and t.is_contiguous():
        return t        # as it is: a reshape and a contiguous() of the same view cost the host a few us a call
    n, c = t.shape[:2]
    return t.reshape(n, c, math.prod(t.shape[2:])).contiguous()


def _by_groups(run, x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
               num_groups: int, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, mean, rstd = run(_as_3d(x), _dense(weight), _dense(bias), num_groups, eps)
    return reshaped(y, x.shape), mean, rstd


def _backward_by_groups(run, dy: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor],
                        bias: Optional[torch.Tensor], mean: torch.Tensor, rstd: torch.Tensor,
                        num_groups: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dw, db = run(_as_3d(dy), _as_3d(x), _dense(weight), _dense(bias), mean, rstd, num_groups)
    return reshaped(dx, x.shape), dw if dw is not None else x.new_empty(0), db if db is not None else x.new_empty(0)


def _stat_like(x, num_groups):
    return x.new_empty((x.shape[0], num_groups), dtype=torch_compute_dtype(x))


def _backward_fake(dy, x, weight, bias, mean, rstd, num_groups):
    return (x.new_empty(x.shape), weight.new_empty(weight.shape) if weight is not None else x.new_empty(0),
            bias.new_empty(bias.shape) if bias is not None else x.new_empty(0))


def _save(ctx, inputs, output):
    x, weight, bias, ctx.num_groups, _ = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, bias, mean, rstd)
    ctx.set_materialize_grads(False)     # no zeros made on the host for the statistics' unused gradients


def _grads(ctx, backward, dy, _dmean, _drstd):
    if dy is None:
        return ()
    x, weight, bias, mean, rstd = ctx.saved_tensors
    dx, dw, db = backward(dy, x, weight, bias, mean, rstd, ctx.num_groups)
    return dx, (dw if weight is not None else None), (db if bias is not None else None)


GROUP_NORM = Recipe("group_norm",
                    forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_by_groups,
                                  fake=lambda x, weight, bias, num_groups, eps: (
                                      x.new_empty(x.shape), _stat_like(x, num_groups), _stat_like(x, num_groups))),
                    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_by_groups,
                                   fake=_backward_fake),
                    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def _check_groups(input: torch.Tensor, num_groups) -> None:
    """torch's conditions on num_groups and the input's shape, each naming the argument."""
    if not isinstance(num_groups, int) or isinstance(num_groups, bool):
        raise tle.LaunchError(f"tle.ops.group_norm: 'num_groups' must be an int, got {type(num_groups).__name__}")
    if input.dim() < 2:
        raise tle.LaunchError(f"tle.ops.group_norm: 'input' has shape {list(input.shape)}; expected [N, C, *], at "
                              f"least 2 dimensions")
    if num_groups <= 0:
        raise tle.LaunchError(f"tle.ops.group_norm: 'num_groups' is {num_groups}; expected a positive number")
    if input.shape[1] % num_groups:
        raise tle.LaunchError(f"tle.ops.group_norm: 'input' has {input.shape[1]} channels (shape "
                              f"{list(input.shape)}), which num_groups={num_groups} does not divide")


def group_norm(input: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5, *, backend: str | None = None,
               fallback: str | None = None) -> torch.Tensor:
    """torch.nn.functional.group_norm on a tle backend: `input` [N, C, *] normalized over each group of
    C / num_groups consecutive channels and all its positions (biased variance, as torch), then scaled by
    `weight` and shifted by `bias` ([C] each) where given. The result has input's dtype and shape (contiguous)."""
    check_float(input, "input")
    _check_groups(input, num_groups)
    n, c = input.shape[:2]
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            check_float(p, name, device=input.device)
            if tuple(p.shape) != (c,):
                raise tle.LaunchError(f"tle.ops.group_norm: '{name}' has shape {list(p.shape)}; expected [{c}], one "
                                      f"value per channel of 'input' (shape {list(input.shape)})")
    s = math.prod(input.shape[2:])
    if n * (c // num_groups) * s == 1:      # torch's check, as its F.group_norm words it
        raise tle.LaunchError(f"tle.ops.group_norm: 'input' of shape {list(input.shape)} with "
                              f"num_groups={num_groups} has one value per group (torch: Expected more than 1 "
                              f"value per channel when training)")
    b = GROUP_NORM.resolve(input.device, backend, fallback)
    check_kernel_dtypes("group_norm", b, input=input, weight=weight, bias=bias)
    if b != "torch" and c // num_groups * s >= MAX_GROUP:
        raise tle.LaunchError(f"tle.ops.group_norm: a group of 'input' has {c // num_groups * s} elements; "
                              f"group_norm on {b} indexes a group with 32-bit offsets (fewer than 2^31)")
    y, _, _ = GROUP_NORM(input, weight, bias, num_groups, float(eps), backend=b)
    return y


class GroupNorm(torch.nn.Module):
    """torch.nn.GroupNorm on a tle backend (`backend=`, else TLE_BACKEND), with its constructor, defaults and
    parameters (weight ones, bias zeros)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True, backend: str | None = None, fallback: str | None = None):
        super().__init__()
        if not isinstance(num_groups, int) or isinstance(num_groups, bool) or num_groups <= 0:
            raise ValueError(f"tle.ops.GroupNorm: num_groups ({num_groups!r}) must be a positive int")
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.backend, self.fallback = backend, fallback
        add_affine_parameters(self, num_channels, affine, bias, device, dtype)

    def reset_parameters(self):
        reset_affine_parameters(self)

    def forward(self, input):
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps, backend=self.backend,
                          fallback=self.fallback)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}, backend={self.backend}")


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64. Not torch's own
    F.group_norm, whose CPU backward (torch 2.13) fails with a bias and no weight ("tensor does not have a
    device"); tests/cpu/test_ops_group_norm.py checks the two agree elsewhere."""
    n, c = input.shape[:2]
    xg = input.reshape(n, num_groups, c // num_groups * math.prod(input.shape[2:]))
    mean = xg.mean(-1, keepdim=True)
    var = (xg - mean).pow(2).mean(-1, keepdim=True)
    y = ((xg - mean) * torch.rsqrt(var + eps)).reshape(input.shape)
    per_channel = (c,) + (1,) * (input.dim() - 2)
    y = y * weight.reshape(per_channel) if weight is not None else y
    return y + bias.reshape(per_channel) if bias is not None else y


def samples(device, dtype):
    def t(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, device=device, dtype=torch.float32).mul(scale).add(shift).to(dtype)
    return [Sample((t(6, 12), 3, t(12, shift=1), t(12)), label="rank 2 [N, C], 3 groups"),
            Sample((t(2, 6, 33, shift=3), 2, t(6, shift=1)), label="rank 3, off-centre, weight only"),
            Sample((t(2, 8, 5, 7), 4, t(8, shift=1), t(8), 1e-3), label="rank 4, eps 1e-3"),
            Sample((t(2, 4, 2, 3, 2), 1, None, t(4)), label="rank 5, one group, bias only"),
            Sample((t(3, 6, 20),), dict(num_groups=6), label="a group a channel, no affine, keywords"),
            Sample((t(2, 4, 9), 2), dict(weight=t(4, shift=1), bias=t(4), eps=1e-4), label="affine as keywords"),
            Sample((t(0, 6, 4), 3, t(6), t(6)), label="no samples")]


def _bench_make(shape, dtype, device):
    n, c, s, groups = shape
    x = torch.randn(n, c, s, device=device, dtype=dtype)
    w = torch.rand(c, device=device, dtype=dtype) + 0.5
    b = torch.randn(c, device=device, dtype=dtype)
    return Sample((x, groups, w, b, 1e-5))


def _bench_bytes(sample, mode):
    x, _, w, b = sample.args[:4]
    # fwd: read x, write y; bwd: read dy and x, write dx (the parameters, their gradients and the statistics are
    # a rounding error)
    return (2 if mode == "fwd" else 3) * x.numel() * x.element_size() + (w.numel() + b.numel()) * w.element_size()


def _eager(sample):
    x, groups, w, b, eps = sample.args
    return lambda x=x, w=w, b=b: torch.nn.functional.group_norm(x, groups, w, b, eps)


def _liger(sample):
    from liger_kernel.ops.group_norm import LigerGroupNormFunction      # what LigerGroupNorm's forward calls
    x, groups, w, b, eps = sample.args
    if x.dtype == torch.float16:     # Liger's backward adds the parameters' gradients as bf16 or fp32 only
        return None
    return lambda x=x, w=w, b=b: LigerGroupNormFunction.apply(x, w, b, x.shape[1], groups, eps)


OPERATOR = Operator(
    "group_norm", fn=group_norm, reference=reference, samples=samples, grad_inputs=(0, 2, 3, "weight", "bias"),
    bench=BenchSpec(dry_shapes=[(2, 64, 256, 8), (4, 32, 64, 4)],
                    shapes=[(32, 512, 4096, 32), (16, 1024, 1024, 32), (16, 320, 4096, 32)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, peers={"liger": _liger},
                    shape_help="NxCxSPATIALxGROUPS"))
