"""TileLang's tile operators (T.copy, T.fill/T.clear, T.gemm, T.reduce_*, T.cumsum), as the interpreter runs
them: whole regions at once, for the whole block. (Element atomics are in memory.py.)

- T.copy pairs the two regions' extents that are not 1, in order, and converts to the destination's
  dtype; the global side is predicated as TileLang predicates it (reads outside give zero, writes
  outside are skipped); an index outside a shared or fragment buffer is an error.
- T.gemm computes C (+)= op(A) @ op(B) in float64 and rounds once to C's dtype: products of bf16, fp16
  and int8 operands are exact, only the final rounding differs from the tensor cores' fp32 sums.
  fp32 operands are read as tf32, as the tensor cores read them (TileLang has no fp32 product): the low 13
  of their 23 mantissa bits dropped, which truncates toward zero (an H200's mma.sync and wgmma fed fp32 bits,
  as TileLang's code feeds them, with no cvt.rna).
- T.reduce_max/min ignore NaN as CUDA's fmaxf/fminf do; sums accumulate in float64.
- T.cumsum (on shared buffers) accumulates floats in float64 and integers in int64, wrapped to the dtype when
  written.
"""
from __future__ import annotations

import torch

from . import dtypes
from .errors import Unsupported
from .memory import GLOBAL

_REDUCERS = ("sum", "max", "min", "abssum", "absmax")
_NEGATIVE = ("TileLang reads an index it can prove negative from the end of the tensor, as Python does, and "
             "predicates one it cannot prove; which applies depends on its analysis, not on the program alone")


class Region:
    """A compiled `T.region(buf[mins], access, *extents)` argument."""

    def __init__(self, info, mins, extents):
        self.info, self.mins, self.extents = info, mins, extents

    def indices(self, fr):
        """Index tensors for every element of the region, laid out over the region's non-unit extents."""
        rank = len(self.shape())
        out, k = [], 0
        for m, e in zip(self.mins, self.extents):
            base = m(fr)
            if base.dim():
                raise Unsupported(f"a region of {self.info.name} that starts at a lane-dependent index")
            if self.info.scope == GLOBAL and int(base) < 0:
                raise Unsupported(f"a region of {self.info.name} that starts at the negative index {int(base)}: "
                                  f"{_NEGATIVE}")
            if e == 1:
                out.append(base)
                continue
            shape = [1] * rank
            shape[k] = e
            out.append((base.to(torch.int64) + torch.arange(e)).reshape(shape))
            k += 1
        return out

    def shape(self) -> list[int]:
        return [e for e in self.extents if e != 1]


def compile_region(node, expr, buffer) -> Region:
    name = node.op.name if type(node).__name__ == "Call" else None
    if name != "tl.region":
        raise Unsupported(f"a tile operand of the form {node}")
    load, extents = node.args[0], node.args[2:]
    if type(load).__name__ != "BufferLoad":
        raise Unsupported(f"a region of {load}")
    ext = []
    for e in extents:
        if type(e).__name__ != "IntImm":
            raise Unsupported(f"a region of {load.buffer.name} with a dynamic extent ({e})")
        ext.append(int(e.value))
    info = buffer(load.buffer)
    if len(ext) != len(info.shape):
        raise Unsupported(f"a region of {info.name} with {len(ext)} extents for rank {len(info.shape)}")
    return Region(info, [expr(i) for i in load.indices], ext)


def _uniform_context(fr, what: str):
    if fr.in_parallel:
        raise Unsupported(f"{what} inside T.Parallel")
    if fr.mask is not None and fr.mask.dim():
        raise Unsupported(f"{what} under a thread-dependent condition")


class _Lanes:
    """Run a tile op over its own element grid: the frame's lanes become the region's shape."""

    def __init__(self, fr, shape):
        self.fr, self.shape = fr, tuple(shape)

    def __enter__(self):
        self.saved = self.fr.lanes, self.fr.mask, self.fr.in_tile_op
        self.fr.lanes, self.fr.mask, self.fr.in_tile_op = self.shape, None, True
        return self.fr

    def __exit__(self, *exc):
        self.fr.lanes, self.fr.mask, self.fr.in_tile_op = self.saved


def read(fr, region: Region, predicated: bool = False) -> torch.Tensor:
    shape = region.shape()
    with _Lanes(fr, shape):
        v = fr.memory.load(region.info, region.indices(fr), fr, predicated)
    return v.expand(shape) if v.shape != tuple(shape) else v


def write(fr, region: Region, value: torch.Tensor, predicated: bool = False):
    shape = region.shape()
    with _Lanes(fr, shape):
        fr.memory.store(region.info, region.indices(fr),
                        dtypes.cast(value, region.info.dtype), fr, predicated)


def copy(src: Region, dst: Region):
    def run(fr):
        _uniform_context(fr, "T.copy")
        if src.shape() != dst.shape():
            raise Unsupported(f"T.copy from a {src.extents} region of {src.info.name} to a {dst.extents} "
                              f"region of {dst.info.name} (the extents that are not 1 must match)")
        write(fr, dst, read(fr, src, predicated=True), predicated=True)
    return run


def atomic_add(src: Region, dst: Region):
    """T.atomic_add of a region: each element of `src` added atomically into `dst`'s; elements outside a global
    tensor are dropped (the TMA reduction's bounds, as a T.copy's)."""
    def run(fr):
        _uniform_context(fr, "T.atomic_add of a region")
        if src.shape() != dst.shape():
            raise Unsupported(f"T.atomic_add of a {src.extents} region of {src.info.name} into a {dst.extents} "
                              f"region of {dst.info.name} (the extents that are not 1 must match)")
        value = read(fr, src)
        with _Lanes(fr, dst.shape()):
            fr.memory.atomic(dst.info, dst.indices(fr), value, "add", fr, predicated=True)
    return run


def fill(dst: Region, value):
    def run(fr):
        _uniform_context(fr, "T.fill")
        v = value(fr)
        if v.dim():
            raise Unsupported("T.fill with a lane-dependent value")
        write(fr, dst, v.expand(dst.shape()), predicated=dst.info.scope == GLOBAL)
    return run


def _matrix(fr, region: Region, what: str) -> torch.Tensor:
    if any(e != 1 for e in region.extents[:-2]):
        raise Unsupported(f"T.gemm operand {what} ({region.info.name}) with more than two non-unit axes")
    v = read(fr, region)
    return v.reshape(region.extents[-2], region.extents[-1])


def _tf32(v: torch.Tensor) -> torch.Tensor:
    """fp32 values as a tf32 product reads them: the low 13 mantissa bits cleared (toward zero)."""
    return (v.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def gemm(a: Region, b: Region, c: Region, trans_a: bool, trans_b: bool, m: int, n: int, k: int, clear: bool):
    def run(fr):
        _uniform_context(fr, "T.gemm")
        x, y = _matrix(fr, a, "A"), _matrix(fr, b, "B")
        x, y = (x.t() if trans_a else x), (y.t() if trans_b else y)
        if x.shape != (m, k) or y.shape != (k, n) or (c.extents[-2], c.extents[-1]) != (m, n):
            raise Unsupported(f"T.gemm of {tuple(x.shape)} by {tuple(y.shape)} into {c.extents} "
                              f"(M={m}, N={n}, K={k})")
        if dtypes.name(a.info.dtype) == "float32":
            x = _tf32(x)
        if dtypes.name(b.info.dtype) == "float32":
            y = _tf32(y)
        product = x.double() @ y.double()
        if not clear:
            product = _matrix(fr, c, "C").double() + product
        write(fr, c, product.reshape(c.shape()))
    return run


def issue_product(run, waits: bool):
    """A product issued by the threads running: at once (T.gemm, after the products in flight), or left in flight
    until they wait for it (T.wgmma_gemm; wait_products)."""
    def issue(fr):
        if waits:
            _finish_products(fr, 0)
            run(fr)
        else:
            fr.products_in_flight.append(run)
    return issue


def wait_products(newer: int):
    """T.wait_wgmma(newer): the products in flight but the `newer` issued last run now."""
    return lambda fr: _finish_products(fr, newer)


def _finish_products(fr, newer: int):
    flight = fr.products_in_flight
    while len(flight) > newer:
        flight.pop(0)(fr)


def reduce(src: Region, dst: Region, kind: str, dim: int, clear: bool):
    if kind not in _REDUCERS:
        raise Unsupported(f"T.reduce of kind '{kind}'")

    def run(fr):
        _uniform_context(fr, f"T.reduce_{kind}")
        x = read(fr, src).reshape(src.extents)
        if dtypes.is_float(src.info.dtype):
            x = x.double()
        if kind.startswith("abs"):
            x = x.abs()
        if kind.endswith("sum"):
            out = x.sum(dim)
        else:
            out = _nan_ignoring(x, dim, kind.endswith("max"))
        if not clear:
            old = read(fr, dst).reshape(out.shape).to(out.dtype)
            out = out + old if kind.endswith("sum") else (torch.fmax if kind.endswith("max") else torch.fmin)(out, old)
        want = dst.shape()
        if out.numel() != max(1, torch.Size(want).numel()):
            raise Unsupported(f"T.reduce of {src.extents} along {dim} into {dst.extents}")
        write(fr, dst, out.reshape(want))
    return run


def cumsum(src: Region, dst: Region, dim: int, reverse: bool):
    """T.cumsum: inclusive prefix sums along `dim` (when `reverse`, suffix sums: from the end of the axis)."""
    def run(fr):
        _uniform_context(fr, "T.cumsum")
        if src.extents != dst.extents:
            raise Unsupported(f"T.cumsum from a {src.extents} region of {src.info.name} into a {dst.extents} region")
        x = read(fr, src).reshape(src.extents)
        x = x.double() if dtypes.is_float(src.info.dtype) else x.to(torch.int64)
        out = x.flip(dim).cumsum(dim).flip(dim) if reverse else x.cumsum(dim)
        write(fr, dst, out.reshape(dst.shape()))
    return run


def _nan_ignoring(x: torch.Tensor, dim: int, is_max: bool) -> torch.Tensor:
    if not x.is_floating_point():
        return x.amax(dim) if is_max else x.amin(dim)
    nan = torch.isnan(x)
    fill = float("-inf") if is_max else float("inf")
    out = torch.where(nan, fill, x)
    out = out.amax(dim) if is_max else out.amin(dim)
    return torch.where(nan.all(dim), float("nan"), out)

