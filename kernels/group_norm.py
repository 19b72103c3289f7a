"""GroupNorm, as torch.nn.functional.group_norm: the channels of input [N, C, *] split into `num_groups`
groups of C / num_groups consecutive channels, each (sample, group) normalized over its channels and
spatial positions together (biased variance), then scaled and shifted per channel:

    y[n, c, s] = (x[n, c, s] - mean[n, g]) * rstd[n, g] * weight[c] + bias[c]     g: the group of channel c
    rstd[n, g] = rsqrt(mean over the group of (x - mean[n, g])^2 + eps)

`tle.ops.group_norm(input, num_groups, weight=None, bias=None, eps=1e-5)` takes torch's arguments;
`tle.ops.GroupNorm` is torch.nn.GroupNorm. The kernels see the input as [N, C, S] (the spatial dimensions
folded, contiguous), where the channels of one group are one contiguous run of C / num_groups * S elements.

Each group is split into chunks of about CHUNK elements (boxes of [channels, spatial] tiles of its run; a group of
fewer is one chunk), a program a chunk: thousands of short programs rather than one long one a group. `tiles`
chooses the tiles and chunks. Where a group is one chunk, each pass is one kernel: the second, which then takes its
chunk's statistics or sums itself (FUSED) before it writes.

Forward, two kernels: the first writes each chunk's count, mean and sum of squared deviations (each tile's exact
in registers, merged across tiles as Chan et al.: no E[x^2] - E[x]^2 cancellation on inputs far from zero); the
second merges its group's chunks the same way (a few values) and writes y for its chunk with each channel's
weight and bias. The mean and rstd of each group (fp32, [N, G]) are kept for the backward.

Backward, with x_hat = (x - mean) * rstd and g = dy * weight:
    dx = rstd * (g - mean over the group of g - x_hat * mean over the group of g * x_hat)
two kernels: the first adds up, per channel over its chunk's positions, dy * x_hat and dy (partials of the
weight's and bias's gradients, which column_sum adds up over the samples and chunks) and writes its chunk's
sums of g * x_hat and g; the second adds up its group's chunk sums into the two means and writes dx for its
chunk. The second kernel of each pass takes the chunks last to first, so that it starts on what the first
kernel read last, which may still be in L2."""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
import triton.language as tl

import tle
from tle.kernels.column_sum import column_sum
from tle.oplib import BenchSpec, Operator, Sample, check_float, check_kernel_dtypes
from tle.oplib.arith import cdiv, next_power_of_2
from tle.oplib.normalized_shape import add_affine_parameters, reset_affine_parameters
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype

TILE = 4096             # the elements a program loads a step
SPATIAL_TILE = 1024     # the widest spatial extent of a [channels, spatial] tile (wider ones waste more at the edge)
CHUNK = 8192            # about the elements of a group one program reads: larger groups split across programs
MAX_GROUP = 2 ** 31     # the kernels' offsets within a group are 32-bit


# A group is split into chunks: boxes of TILES_C x TILES_S tiles of [BLOCK_C, BLOCK_S] in its [channels,
# spatial] plane, `split` of them, numbered along the positions first (`chunks_s` along them). Program p
# takes chunk p % split of group row p // split, so consecutive programs read consecutive memory.
# The kernels take each tensor as views whose dimensions the tiles follow, so that TileLang copies every tile as
# a box: x, y, dy, dx as [N * G, C / G, S] (a group, its channels, their positions); weight and bias as
# [G, C / G]; the chunks' statistics and sums as [N * G, split]; the per-channel partial sums of the parameters'
# gradients as [chunks_s * N * G, C / G] (a row for each chunk along the positions of each group).
@tle.jit
def program_chunk(split, chunks_s, CHUNK_C: tl.constexpr, CHUNK_S: tl.constexpr, REVERSE: tl.constexpr):
    """(group row, chunk, the chunk's first channel, its first position) of this program; REVERSE takes the
    chunks last to first (those a previous pass read last may still be in L2)."""
    prog = tl.program_id(0)
    if REVERSE:
        prog = tl.num_programs(0) - 1 - prog
    chunk = prog % split
    return prog // split, chunk, (chunk // chunks_s) * CHUNK_C, (chunk % chunks_s) * CHUNK_S


@tle.jit
def channel_tile(pid, group_size, ch, ch_mask, s0, spatial, BLOCK_S: tl.constexpr):
    """(offsets, mask) of the tile of channels `ch` and positions s0 .. s0 + BLOCK_S of group `pid` (in the
    [N * G, C / G, S] view: a box)."""
    sp = s0 + tl.arange(0, BLOCK_S)
    offs = pid.to(tl.int64) * group_size + ch[:, None] * spatial + sp[None, :]
    return offs, ch_mask[:, None] & (sp < spatial)[None, :]


@tle.jit
def chunk_moments(x_ptr, pid, c_lo, s_lo, group_channels, spatial, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr,
                  TILES_C: tl.constexpr, TILES_S: tl.constexpr):
    """(count, mean, sum of squared deviations from that mean) of the chunk of group `pid` at (c_lo, s_lo)."""
    group_size = group_channels * spatial
    n = tl.zeros([], dtype=tl.float32)
    mean = tl.zeros([], dtype=tl.float32)
    m2 = tl.zeros([], dtype=tl.float32)
    for tc in range(TILES_C):
        c0 = c_lo + tc * BLOCK_C
        ch = c0 + tl.arange(0, BLOCK_C)
        ch_mask = ch < group_channels
        rows = tl.minimum(tl.maximum(group_channels - c0, 0), BLOCK_C)
        for ts in range(TILES_S):
            s0 = s_lo + ts * BLOCK_S
            offs, mask = channel_tile(pid, group_size, ch, ch_mask, s0, spatial, BLOCK_S)
            x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            # the tile's mean and squared deviations, exact (it is all in registers: no E[x^2] - E[x]^2
            # cancellation on inputs far from zero), merged into the chunk's (Chan et al.); the chunk's first
            # tile is never empty, so n_ab > 0
            n_t = (rows * tl.minimum(tl.maximum(spatial - s0, 0), BLOCK_S)).to(tl.float32)
            mean_t = tl.sum(tl.sum(x, axis=1), axis=0) / tl.maximum(n_t, 1.0)
            dev = tl.where(mask, x - mean_t, 0.0)
            n_ab = n + n_t
            delta = mean_t - mean
            mean += delta * (n_t / n_ab)
            m2 += tl.sum(tl.sum(dev * dev, axis=1), axis=0) + delta * delta * (n * (n_t / n_ab))
            n = n_ab
    return n, mean, m2


@tle.jit
def group_norm_stats_kernel(x_ptr, count_ptr, cmean_ptr, m2_ptr, group_channels, spatial, split, chunks_s,
                            BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr, TILES_C: tl.constexpr,
                            TILES_S: tl.constexpr):
    # count_ptr, cmean_ptr, m2_ptr: each chunk's count, mean and sum of squared deviations from that mean
    pid, chunk, c_lo, s_lo = program_chunk(split, chunks_s, TILES_C * BLOCK_C, TILES_S * BLOCK_S, False)
    n, mean, m2 = chunk_moments(x_ptr, pid, c_lo, s_lo, group_channels, spatial, BLOCK_C, BLOCK_S, TILES_C, TILES_S)
    tl.store(count_ptr + pid * split + chunk, n)
    tl.store(cmean_ptr + pid * split + chunk, mean)
    tl.store(m2_ptr + pid * split + chunk, m2)


@tle.jit
def group_norm_fwd_kernel(x_ptr, count_ptr, cmean_ptr, m2_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, groups,
                          group_channels, spatial, split, chunks_s, eps, BLOCK_SPLIT: tl.constexpr,
                          BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr, TILES_C: tl.constexpr,
                          TILES_S: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                          REVERSE: tl.constexpr, FUSED: tl.constexpr):
    # FUSED: the group is one chunk, whose statistics this kernel takes itself (group_norm_stats_kernel not run)
    pid, chunk, c_lo, s_lo = program_chunk(split, chunks_s, TILES_C * BLOCK_C, TILES_S * BLOCK_S, REVERSE)
    group_size = group_channels * spatial
    if FUSED:
        _, mean, m2 = chunk_moments(x_ptr, pid, c_lo, s_lo, group_channels, spatial, BLOCK_C, BLOCK_S, TILES_C,
                                    TILES_S)
        var = m2 / group_size
    else:
        # the group's statistics from its chunks' (Chan et al.): `split` values, which every chunk's program merges
        k = tl.arange(0, BLOCK_SPLIT)
        k_mask = k < split
        n_k = tl.load(count_ptr + pid * split + k, mask=k_mask, other=0.0)
        mean_k = tl.load(cmean_ptr + pid * split + k, mask=k_mask, other=0.0)
        m2_k = tl.load(m2_ptr + pid * split + k, mask=k_mask, other=0.0)
        mean = tl.sum(n_k * mean_k, axis=0) / group_size
        dev = mean_k - mean
        var = (tl.sum(m2_k, axis=0) + tl.sum(n_k * dev * dev, axis=0)) / group_size
    rstd = tl.rsqrt(var + eps)
    if chunk == 0:
        tl.store(mean_ptr + pid, mean)
        tl.store(rstd_ptr + pid, rstd)
    group = pid % groups
    for tc in range(TILES_C):
        ch = c_lo + tc * BLOCK_C + tl.arange(0, BLOCK_C)
        ch_mask = ch < group_channels
        scale = tl.zeros([BLOCK_C], dtype=tl.float32) + rstd
        if HAS_WEIGHT:
            scale = scale * tl.load(w_ptr + group * group_channels + ch, mask=ch_mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            shift = tl.load(b_ptr + group * group_channels + ch, mask=ch_mask, other=0.0).to(tl.float32)
        for ts in range(TILES_S):
            offs, mask = channel_tile(pid, group_size, ch, ch_mask, s_lo + ts * BLOCK_S, spatial, BLOCK_S)
            x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            y = (x - mean) * scale[:, None]
            if HAS_BIAS:
                y = y + shift[:, None]
            tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@tle.jit
def chunk_sums(dy_ptr, x_ptr, w_ptr, dw_ptr, db_ptr, pid, part, c_lo, s_lo, group, group_channels, spatial, mean,
               rstd, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr, TILES_C: tl.constexpr, TILES_S: tl.constexpr,
               HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """The sums of g * x_hat and of g (g = dy * weight) over the chunk of group `pid` at (c_lo, s_lo); writes per
    channel the sums over its positions of dy * x_hat and of dy (the parameters' gradients' partials) to row
    `part` of dw_ptr and db_ptr."""
    group_size = group_channels * spatial
    sum_gx = tl.zeros([BLOCK_C], dtype=tl.float32)
    sum_g = tl.zeros([BLOCK_C], dtype=tl.float32)
    for tc in range(TILES_C):
        ch = c_lo + tc * BLOCK_C + tl.arange(0, BLOCK_C)
        ch_mask = ch < group_channels
        acc_dyx = tl.zeros([BLOCK_C, BLOCK_S], dtype=tl.float32)
        acc_dy = tl.zeros([BLOCK_C, BLOCK_S], dtype=tl.float32)
        for ts in range(TILES_S):
            offs, mask = channel_tile(pid, group_size, ch, ch_mask, s_lo + ts * BLOCK_S, spatial, BLOCK_S)
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
            tl.store(dw_ptr + part * group_channels + ch, dyx, mask=ch_mask)
        else:
            sum_gx += dyx
            sum_g += dyc
        if HAS_BIAS:
            tl.store(db_ptr + part * group_channels + ch, dyc, mask=ch_mask)
    return tl.sum(sum_gx, axis=0), tl.sum(sum_g, axis=0)


@tle.jit
def group_norm_bwd_sums_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, gx_ptr, g_ptr, dw_ptr, db_ptr,
                               groups, group_channels, spatial, split, chunks_s, BLOCK_C: tl.constexpr,
                               BLOCK_S: tl.constexpr, TILES_C: tl.constexpr, TILES_S: tl.constexpr,
                               HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    # gx_ptr, g_ptr: each chunk's sums of g * x_hat and of g
    pid, chunk, c_lo, s_lo = program_chunk(split, chunks_s, TILES_C * BLOCK_C, TILES_S * BLOCK_S, False)
    part = (chunk % chunks_s) * (tl.num_programs(0) // split) + pid     # the row of the partials
    gx, g = chunk_sums(dy_ptr, x_ptr, w_ptr, dw_ptr, db_ptr, pid, part, c_lo, s_lo, pid % groups, group_channels,
                       spatial, tl.load(mean_ptr + pid), tl.load(rstd_ptr + pid), BLOCK_C, BLOCK_S, TILES_C, TILES_S,
                       HAS_WEIGHT, HAS_BIAS)
    tl.store(gx_ptr + pid * split + chunk, gx)
    tl.store(g_ptr + pid * split + chunk, g)


@tle.jit
def group_norm_bwd_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, gx_ptr, g_ptr, dw_ptr, db_ptr, dx_ptr, groups,
                          group_channels, spatial, split, chunks_s, BLOCK_SPLIT: tl.constexpr, BLOCK_C: tl.constexpr,
                          BLOCK_S: tl.constexpr, TILES_C: tl.constexpr, TILES_S: tl.constexpr,
                          HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, REVERSE: tl.constexpr,
                          FUSED: tl.constexpr):
    # FUSED: the group is one chunk, whose sums (and the parameters' partials) this kernel takes itself
    # (group_norm_bwd_sums_kernel not run)
    pid, chunk, c_lo, s_lo = program_chunk(split, chunks_s, TILES_C * BLOCK_C, TILES_S * BLOCK_S, REVERSE)
    group_size = group_channels * spatial
    group = pid % groups
    mean = tl.load(mean_ptr + pid)
    rstd = tl.load(rstd_ptr + pid)
    # the group's means of g * x_hat and of g, from its chunks' sums
    if FUSED:
        sum_gx, sum_g = chunk_sums(dy_ptr, x_ptr, w_ptr, dw_ptr, db_ptr, pid, pid, c_lo, s_lo, group, group_channels,
                                   spatial, mean, rstd, BLOCK_C, BLOCK_S, TILES_C, TILES_S, HAS_WEIGHT, HAS_BIAS)
    else:
        k = tl.arange(0, BLOCK_SPLIT)
        k_mask = k < split
        sum_gx = tl.sum(tl.load(gx_ptr + pid * split + k, mask=k_mask, other=0.0), axis=0)
        sum_g = tl.sum(tl.load(g_ptr + pid * split + k, mask=k_mask, other=0.0), axis=0)
    c_hat = sum_gx / group_size
    c_one = sum_g / group_size
    for tc in range(TILES_C):
        ch = c_lo + tc * BLOCK_C + tl.arange(0, BLOCK_C)
        ch_mask = ch < group_channels
        if HAS_WEIGHT:
            w = tl.load(w_ptr + group * group_channels + ch, mask=ch_mask, other=0.0).to(tl.float32)
        for ts in range(TILES_S):
            offs, mask = channel_tile(pid, group_size, ch, ch_mask, s_lo + ts * BLOCK_S, spatial, BLOCK_S)
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
    block_c: int        # a tile: channels by positions, at most TILE elements
    block_s: int
    tiles_c: int        # a chunk: tiles_c by tiles_s tiles, what one program reads of a group
    tiles_s: int
    num_warps: int
    reverse: bool       # the second kernel of each pass takes the chunks last to first


def tiles(group_channels: int, spatial: int) -> Tiles:
    """Tiles of at most TILE elements, no wider than the group's positions, of as many channels as divide the
    group's (no masked channel lanes); chunks of about CHUNK elements, along the positions first. A group of
    fewer elements is one chunk."""
    block_s = min(SPATIAL_TILE, next_power_of_2(spatial))
    block_c = min(group_channels & -group_channels, TILE // block_s)     # the largest power of 2 dividing it
    per_chunk = max(1, CHUNK // (block_c * block_s))
    tiles_s = min(per_chunk, cdiv(spatial, block_s))
    tiles_c = min(max(1, per_chunk // tiles_s), cdiv(group_channels, block_c))
    return Tiles(block_c, block_s, tiles_c, tiles_s, 8 if block_c * block_s >= 2048 else 4, True)


class Chunks(NamedTuple):
    """A group's split: the tiles, the chunks along the positions, the chunks in all."""
    cfg: Tiles
    chunks_s: int
    split: int

    @property
    def fused(self) -> bool:
        """A group of one chunk: each pass one kernel, the second, which takes the chunk's statistics or sums itself."""
        return self.split == 1

    def constexprs(self, merges=False):
        """The launch options of every kernel; BLOCK_SPLIT, REVERSE and FUSED too for the two that merge chunks."""
        c = self.cfg
        out = dict(BLOCK_C=c.block_c, BLOCK_S=c.block_s, TILES_C=c.tiles_c, TILES_S=c.tiles_s, num_warps=c.num_warps)
        # (reversed, for L2 to hold what a first kernel read last: there is none where fused)
        merge = dict(BLOCK_SPLIT=next_power_of_2(self.split), REVERSE=c.reverse and not self.fused, FUSED=self.fused)
        return out | merge if merges else out


def chunks(group_channels: int, spatial: int, cfg: Optional[Tiles] = None) -> Chunks:
    cfg = cfg or tiles(group_channels, spatial)
    chunks_s = cdiv(spatial, cfg.block_s * cfg.tiles_s)
    return Chunks(cfg, chunks_s, cdiv(group_channels, cfg.block_c * cfg.tiles_c) * chunks_s)


def _by_group(t, num_groups):
    """[N, C, S] (contiguous) -> [N * G, C / G, S]: the kernels' view of a tensor of the input's shape."""
    n, c, s = t.shape
    return t.view(n * num_groups, c // num_groups, s)


def _by_channel(p, num_groups, absent):
    """A parameter [C] as [G, C / G] rows of one group each; `absent` where there is none (a kernel then never
    reads it)."""
    return p.view(num_groups, -1) if p is not None else absent


def _kernel_forward(x, weight, bias, num_groups, eps, backend):
    n, c, s = x.shape
    y = torch.empty((n, c, s), device=x.device, dtype=x.dtype)
    mean = torch.full((n, num_groups), float("nan"), device=x.device)      # NaN: the statistics of empty groups
    rstd = torch.full((n, num_groups), float("nan"), device=x.device)
    if x.numel():
        ch, rows, xg = chunks(c // num_groups, s), n * num_groups, _by_group(x, num_groups)
        parts = [mean] * 3              # the chunks' count, mean, m2 (never read where fused)
        if not ch.fused:
            parts = torch.empty((3, rows, ch.split), device=x.device, dtype=torch.float32)
            group_norm_stats_kernel[(rows * ch.split,)](xg, *parts, c // num_groups, s, ch.split, ch.chunks_s,
                                                        backend=backend, **ch.constexprs())
        group_norm_fwd_kernel[(rows * ch.split,)](
            xg, *parts, _by_channel(weight, num_groups, mean), _by_channel(bias, num_groups, mean),
            _by_group(y, num_groups), mean, rstd, num_groups, c // num_groups, s, ch.split, ch.chunks_s, float(eps),
            HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, backend=backend, **ch.constexprs(merges=True))
    return y, mean, rstd


def _kernel_backward(dy, x, weight, bias, mean, rstd, num_groups, backend):
    n, c, s = x.shape
    dx = torch.empty((n, c, s), device=x.device, dtype=x.dtype)
    if not x.numel():
        return dx, _zeros_or_none(weight), _zeros_or_none(bias)
    ch, rows, gc = chunks(c // num_groups, s), n * num_groups, c // num_groups
    dw_parts, db_parts = ((torch.empty((ch.chunks_s * rows, gc), device=x.device, dtype=torch.float32)
                           if p is not None else None) for p in (weight, bias))
    dyg, xg = _by_group(dy, num_groups), _by_group(x, num_groups)
    w = _by_channel(weight, num_groups, mean)
    partials = (mean if dw_parts is None else dw_parts, mean if db_parts is None else db_parts)
    affine = dict(HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None)
    sums = [mean] * 2               # the chunks' sums of g * x_hat and of g (never read where fused)
    if not ch.fused:
        sums = torch.empty((2, rows, ch.split), device=x.device, dtype=torch.float32)
        group_norm_bwd_sums_kernel[(rows * ch.split,)](dyg, xg, w, mean, rstd, *sums, *partials, num_groups, gc, s,
                                                       ch.split, ch.chunks_s, backend=backend, **affine,
                                                       **ch.constexprs())
    group_norm_bwd_kernel[(rows * ch.split,)](
        dyg, xg, w, mean, rstd, *sums, *partials, _by_group(dx, num_groups), num_groups, gc, s, ch.split,
        ch.chunks_s, backend=backend, **affine, **ch.constexprs(merges=True))
    # the parameters' gradients: their partials' rows ([chunks along the positions] x [samples]) added up
    dw = column_sum(dw_parts.view(-1, c), weight.dtype, backend) if weight is not None else None
    db = column_sum(db_parts.view(-1, c), bias.dtype, backend) if bias is not None else None
    return dx, dw, db


def _zeros_or_none(p):
    return torch.zeros_like(p) if p is not None else None


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_problem(size, device):
    """(x [N, C, S], num_groups, weight, bias, chunks): groups of 3 channels x 1000 positions split in 4 chunks of
    [2, 512] with partial tiles in both dimensions, or a diffusion model's 32 groups of 16 channels x 4096
    positions in bf16, split as the operator does."""
    (n, c, s, groups), dtype = ((2, 6, 1000, 2), torch.float32) if size == "small" else \
        ((32, 512, 4096, 32), torch.bfloat16)
    x = torch.randn(n, c, s, device=device).add_(torch.randn(n, c, 1, device=device)).to(dtype)
    w = (torch.rand(c, device=device) + 0.5).to(dtype)
    b = torch.randn(c, device=device).to(dtype)
    cfg = Tiles(2, 256, 1, 2, 4, True) if size == "small" else None
    return x, groups, w, b, chunks(c // groups, s, cfg)


def _chunk_views(t, ch):
    """The chunks of each group of t [N * G, C / G, S] in the kernels' order: [N * G, channels, positions] slices."""
    cc, cs = ch.cfg.block_c * ch.cfg.tiles_c, ch.cfg.block_s * ch.cfg.tiles_s
    return [t[:, c0:c0 + cc, s0:s0 + cs] for c0 in range(0, t.shape[1], cc) for s0 in range(0, t.shape[2], cs)]


def _torch_chunk_stats(x, groups, ch):
    """What group_norm_stats_kernel writes, in torch: [3, N * G, split] (count, mean, squared deviations)."""
    parts = [v.float().flatten(1) for v in _chunk_views(_by_group(x, groups), ch)]
    means = [p.mean(1) for p in parts]
    return torch.stack([torch.stack([torch.full_like(m, p.shape[1]) for p, m in zip(parts, means)], 1),
                        torch.stack(means, 1),
                        torch.stack([(p - m[:, None]).pow(2).sum(1) for p, m in zip(parts, means)], 1)])


def _torch_chunk_sums(dy, x, w, mean, rstd, groups, ch):
    """What group_norm_bwd_sums_kernel writes, in torch: the chunks' sums of g * x_hat and of g [2, N * G, split],
    and per channel the sums of dy * x_hat and of dy over each chunk's positions [chunks_s * N * G, C / G]."""
    dyg = _by_group(dy, groups).float()
    x_hat = (_by_group(x, groups).float() - mean.reshape(-1, 1, 1)) * rstd.reshape(-1, 1, 1)
    g = dyg * _by_channel(w, groups, None).float().repeat(x.shape[0], 1)[..., None]
    sums = torch.stack([torch.stack([v.sum((1, 2)) for v in _chunk_views(t, ch)], 1) for t in (g * x_hat, g)])
    cs = ch.cfg.block_s * ch.cfg.tiles_s
    per_channel = [torch.cat([t[..., s0:s0 + cs].sum(-1) for s0 in range(0, x.shape[2], cs)])
                   for t in (dyg * x_hat, dyg)]
    return sums, *per_channel


def _example_label(x, groups):
    n, c, s = x.shape
    return f"{n}x{c}x{s} {str(x.dtype)[6:]}, {groups} groups"


@tle.example(group_norm_stats_kernel)
def _stats_example(device, size):
    x, groups, _, _, ch = _example_problem(size, device)
    n, c, s = x.shape
    parts = torch.full((3, n * groups, ch.split), float("nan"), device=device)
    return tle.Launch(grid=(n * groups * ch.split,), args=(_by_group(x, groups), *parts, c // groups, s, ch.split,
                                                          ch.chunks_s),
                      kwargs=ch.constexprs(), outputs={"count": parts[0], "mean": parts[1], "m2": parts[2]},
                      reference=lambda: dict(zip(("count", "mean", "m2"), _torch_chunk_stats(x, groups, ch))),
                      bytes=x.numel() * x.element_size(), label=_example_label(x, groups))


@tle.example(group_norm_fwd_kernel)
def _fwd_example(device, size):
    x, groups, w, b, ch = _example_problem(size, device)
    n, c, s = x.shape
    y = torch.full_like(x, float("nan"))
    mean, rstd = (torch.full((n, groups), float("nan"), device=device) for _ in range(2))

    def ref():
        y_ref, mean_ref, rstd_ref = _torch_forward(x, w, b, groups, 1e-5)
        return {"y": y_ref, "mean": mean_ref, "rstd": rstd_ref}
    return tle.Launch(grid=(n * groups * ch.split,),
                      args=(_by_group(x, groups), *_torch_chunk_stats(x, groups, ch), _by_channel(w, groups, None),
                            _by_channel(b, groups, None), _by_group(y, groups), mean, rstd, groups, c // groups, s,
                            ch.split, ch.chunks_s, 1e-5),
                      kwargs=dict(HAS_WEIGHT=True, HAS_BIAS=True, **ch.constexprs(merges=True)),
                      outputs={"y": y, "mean": mean, "rstd": rstd}, reference=ref,
                      bytes=2 * x.numel() * x.element_size(), label=_example_label(x, groups))


def _bwd_problem(size, device):
    x, groups, w, _, ch = _example_problem(size, device)
    _, mean, rstd = _torch_forward(x, None, None, groups, 1e-5)
    return x, groups, w, ch, torch.randn(x.shape, device=device).to(x.dtype), mean, rstd


@tle.example(group_norm_bwd_sums_kernel)
def _bwd_sums_example(device, size):
    x, groups, w, ch, dy, mean, rstd = _bwd_problem(size, device)
    n, c, s = x.shape
    sums = torch.full((2, n * groups, ch.split), float("nan"), device=device)
    dw_parts, db_parts = (torch.full((ch.chunks_s * n * groups, c // groups), float("nan"), device=device)
                          for _ in range(2))

    def ref():
        (gx, g), dw_ref, db_ref = _torch_chunk_sums(dy, x, w, mean, rstd, groups, ch)
        return {"gx": gx, "g": g, "dw_partials": dw_ref, "db_partials": db_ref}
    return tle.Launch(grid=(n * groups * ch.split,),
                      args=(_by_group(dy, groups), _by_group(x, groups), _by_channel(w, groups, None), mean, rstd,
                            *sums, dw_parts, db_parts, groups, c // groups, s, ch.split, ch.chunks_s),
                      kwargs=dict(HAS_WEIGHT=True, HAS_BIAS=True, **ch.constexprs()),
                      outputs={"gx": sums[0], "g": sums[1], "dw_partials": dw_parts, "db_partials": db_parts},
                      reference=ref,
                      bytes=2 * x.numel() * x.element_size(), label=_example_label(x, groups))


@tle.example(group_norm_bwd_kernel)
def _bwd_example(device, size):
    x, groups, w, ch, dy, mean, rstd = _bwd_problem(size, device)
    n, c, s = x.shape
    dx = torch.full_like(x, float("nan"))
    sums, _, _ = _torch_chunk_sums(dy, x, w, mean, rstd, groups, ch)
    return tle.Launch(grid=(n * groups * ch.split,),
                      args=(_by_group(dy, groups), _by_group(x, groups), _by_channel(w, groups, None), mean, rstd,
                            *sums, mean, mean, _by_group(dx, groups), groups, c // groups, s, ch.split, ch.chunks_s),
                      kwargs=dict(HAS_WEIGHT=True, HAS_BIAS=False, **ch.constexprs(merges=True)), outputs={"dx": dx},
                      reference=lambda: {"dx": _torch_backward(dy, x, w, None, mean, rstd, groups)[0]},
                      bytes=3 * x.numel() * x.element_size(), label=_example_label(x, groups))


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _dense(p):
    return p.contiguous() if p is not None else None


def _as_3d(t):
    """[N, C, *] -> [N, C, S], contiguous: what both implementations take (a copy for channels-last input)."""
    n, c = t.shape[:2]
    return t.reshape(n, c, math.prod(t.shape[2:])).contiguous()


def _by_groups(run, x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
               num_groups: int, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, mean, rstd = run(_as_3d(x), _dense(weight), _dense(bias), num_groups, eps)
    return y.reshape(x.shape), mean, rstd


def _backward_by_groups(run, dy: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor],
                        bias: Optional[torch.Tensor], mean: torch.Tensor, rstd: torch.Tensor,
                        num_groups: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dw, db = run(_as_3d(dy), _as_3d(x), _dense(weight), _dense(bias), mean, rstd, num_groups)
    return dx.reshape(x.shape), dw if dw is not None else x.new_empty(0), db if db is not None else x.new_empty(0)


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
