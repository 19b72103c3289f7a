"""tl.cumprod, and tl.associative_scan / tl.reduce with the kernel's own combine function, on both backends.

TileLang 0.1.15 has no scan or reduction taking a combine function; the TileLang lowering writes a log-step
scan and a tree reduction over shared buffers (lowering/tilelang/combines.py). Every case runs on Triton (its
interpreter here) and on TileLang (the interpreter of TileLang programs), against torch: cumulative products,
a running maximum with its index, a linear recurrence (a combine of two tiles that does not commute),
"keep the first" (associative, not commutative: a swapped operand shows), products, argmax/argmin-style
reductions with ties, 1-D, 2-D along either axis, 3-D, forward and reverse, fp32 and integers. The same cases
run on the GPU in tests/gpu/test_tilelang_combines_gpu.py; below, the TileLang lowerings are also compiled
to CUDA and PTX for sm_90a."""
import re

import pytest
import torch
import triton
import triton.language as tl

import tle
from tle.examples import compare_outputs
from tle.lowering.errors import LoweringError
from tilelang_oracle import needs_tilelang, run_on

BACKENDS = ("triton", "tilelang")


# -- combine functions ---------------------------------------------------------------------------------------
@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b)


@triton.jit
def _running_max(a, ia, b, ib):
    """(the larger value, its index), the earlier index on a tie."""
    take = b > a
    return tl.where(take, b, a), tl.where(take, ib, ia)


# Triton reduces in an order of its own (a thread's elements, then across lanes and warps, the operands of
# a step in either order), so a combine function given to tl.reduce commutes: ties go to the smaller index,
# as in Triton's own argmax and argmin
@triton.jit
def _max_first_index(a, ia, b, ib):
    take = (b > a) | ((b == a) & (ib < ia))
    return tl.where(take, b, a), tl.where(take, ib, ia)


@triton.jit
def _min_first_index(a, ia, b, ib):
    take = (b < a) | ((b == a) & (ib < ia))
    return tl.where(take, b, a), tl.where(take, ib, ia)


@triton.jit
def _larger(a, b):
    """The larger of the two, written as a select (not tl.maximum, which TileLang reduces with T.reduce_max)."""
    return tl.where(a > b, a, b)


@tle.jit
def _affine(a1, b1, a2, b2):
    """The step h -> a1 * h + b1, then h -> a2 * h + b2: scanned, h = a * h_prev + b."""
    return a1 * a2, b1 * a2 + b2


@triton.jit
def _first(a, b):
    """Associative and not commutative: a scan keeps the element the scan starts from."""
    return a


@triton.jit
def _larger_by_branch(a, b):
    if a > b:
        r = a
    else:
        r = b
    return r


# -- kernels -------------------------------------------------------------------------------------------------
@tle.jit
def cumprods(x_ptr, fwd_ptr, rev_ptr, down_ptr, back_ptr, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R * C)
    x = tl.load(x_ptr + offs)
    tl.store(fwd_ptr + offs, tl.cumprod(x, 0))
    tl.store(rev_ptr + offs, tl.cumprod(x, 0, reverse=True))
    t = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x2 = tl.load(x_ptr + t)
    tl.store(down_ptr + t, tl.cumprod(x2, 0))
    tl.store(back_ptr + t, tl.cumprod(x2, 1, reverse=True))


@tle.jit
def scans_1d(x_ptr, a_ptr, m_ptr, i_ptr, h_ptr, f_ptr, b_ptr, BLOCK: tl.constexpr, REVERSE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    m, i = tl.associative_scan((x, tl.arange(0, BLOCK)), 0, _running_max, reverse=REVERSE)
    tl.store(m_ptr + offs, m)
    tl.store(i_ptr + offs, i)
    _, h = tl.associative_scan((tl.load(a_ptr + offs), x), 0, _affine, reverse=REVERSE)
    tl.store(h_ptr + offs, h)
    tl.store(f_ptr + offs, tl.associative_scan(x, 0, _first, reverse=REVERSE))
    tl.store(b_ptr + offs, tl.associative_scan(x, 0, _larger_by_branch, reverse=REVERSE))


@tle.jit
def scans_2d(x_ptr, a_ptr, m_ptr, i_ptr, h_ptr, f_ptr, R: tl.constexpr, C: tl.constexpr, AXIS: tl.constexpr,
             REVERSE: tl.constexpr):
    rows, cols = tl.arange(0, R)[:, None], tl.arange(0, C)[None, :]
    t = rows * C + cols
    x, a = tl.load(x_ptr + t), tl.load(a_ptr + t)
    along = t // C if AXIS == 0 else t % C          # each element's index along the scanned axis
    m, i = tl.associative_scan((x, along), AXIS, _running_max, reverse=REVERSE)
    tl.store(m_ptr + t, m)
    tl.store(i_ptr + t, i)
    _, h = tl.associative_scan((a, x), AXIS, _affine, reverse=REVERSE)
    tl.store(h_ptr + t, h)
    tl.store(f_ptr + t, tl.associative_scan(x, AXIS, _first, reverse=REVERSE))


@tle.jit
def reduces_2d(x_ptr, p_ptr, mx_ptr, arg_ptr, f_ptr, keep_ptr, whole_ptr, whole_keep_ptr, scaled_ptr,
               R: tl.constexpr, C: tl.constexpr, AXIS: tl.constexpr):
    t = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + t)
    along = t // C if AXIS == 0 else t % C
    OUT: tl.constexpr = C if AXIS == 0 else R
    out = tl.arange(0, OUT)
    tl.store(p_ptr + out, tl.reduce(x, AXIS, _mul))
    mx, arg = tl.reduce((x, along), AXIS, _max_first_index)
    tl.store(mx_ptr + out, mx)
    tl.store(arg_ptr + out, arg)
    tl.store(f_ptr + out, tl.reduce(x, AXIS, _larger))
    kept = out[None, :] if AXIS == 0 else out[:, None]
    tl.store(keep_ptr + kept, tl.reduce(x * 0.5, AXIS, _mul, keep_dims=True))
    tl.store(whole_ptr, tl.reduce(x, None, _mul))
    tl.store(whole_keep_ptr + tl.zeros((1, 1), tl.int32), tl.reduce(x, None, _larger, keep_dims=True))
    tl.store(scaled_ptr + t, x * tl.reduce(x, AXIS, _larger, keep_dims=True))    # the kept axis broadcast


@tle.jit
def int_reduces(x8_ptr, x_ptr, s_ptr, p_ptr, mn_ptr, arg_ptr, cp_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x8, x = tl.load(x8_ptr + offs), tl.load(x_ptr + offs)
    tl.store(s_ptr, tl.reduce(x8, 0, _add))               # an int8 sum: wraps as int8 arithmetic does
    tl.store(p_ptr, tl.reduce(x, 0, _mul))
    mn, arg = tl.reduce((x, offs), 0, _min_first_index)
    tl.store(mn_ptr, mn)
    tl.store(arg_ptr, arg)
    tl.store(cp_ptr + offs, tl.cumprod(x, 0, reverse=True))


@tle.jit
def scans_3d(x_ptr, cs_ptr, cp_ptr, p_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    t = (tl.arange(0, A)[:, None, None] * (B * C) + tl.arange(0, B)[None, :, None] * C +
         tl.arange(0, C)[None, None, :])
    x = tl.load(x_ptr + t)
    tl.store(cs_ptr + t, tl.cumsum(x, 1))
    tl.store(cp_ptr + t, tl.associative_scan(x, 2, _mul, reverse=True))
    t2 = tl.arange(0, B)[:, None] * C + tl.arange(0, C)[None, :]
    tl.store(p_ptr + t2, tl.reduce(x, 0, _mul))


@tle.jit
def scan_in_loop(x_ptr, y_ptr, t_ptr, n, BLOCK: tl.constexpr):
    """A scan and a reduction in a loop, their results carried: the shared buffers are written again at
    every iteration."""
    offs = tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs)
    total = tl.load(t_ptr)
    for _ in range(n):
        acc = tl.associative_scan(acc * 0.5 + 0.5, 0, _mul, reverse=True)
        total = total + tl.reduce(acc, 0, _mul)
    tl.store(y_ptr + offs, acc)
    tl.store(t_ptr, total)


# -- torch references ---------------------------------------------------------------------------------------
def _flipped(fn, x, dim, reverse):
    """fn(x, dim) computed from the end of `dim` when `reverse`."""
    return fn(x.flip(dim), dim).flip(dim) if reverse else fn(x, dim)


def _running_max_reference(x, dim, reverse):
    """(values, indices along dim) of the running maximum, the first index of the maximum in scan order
    (the inputs have no ties)."""
    if not reverse:
        r = x.cummax(dim)
        return r.values, r.indices.int()
    r = x.flip(dim).cummax(dim)
    return r.values.flip(dim), (x.shape[dim] - 1 - r.indices.flip(dim)).int()


def _recurrence_reference(a, b, dim, reverse):
    """h = a * h_prev + b along `dim`, from the end of the axis when `reverse`."""
    h, prev = torch.empty_like(b), torch.zeros_like(b.select(dim, 0))
    steps = range(b.shape[dim] - 1, -1, -1) if reverse else range(b.shape[dim])
    for j in steps:
        prev = a.select(dim, j) * prev + b.select(dim, j)
        h.select(dim, j).copy_(prev)
    return h


def _first_reference(x, dim, reverse):
    return x.select(dim, -1 if reverse else 0).unsqueeze(dim).expand_as(x)


def _wrapped(v, bits):
    """int64 values wrapped to signed integers of `bits` bits, as integer arithmetic on the GPU wraps."""
    half = 1 << (bits - 1)
    return ((v + half) % (2 * half) - half).to({8: torch.int8, 32: torch.int32}[bits])


def _int32_cumprod(x, dim, reverse):
    """The cumulative product of int32 `x` along `dim`, wrapping around at every step as int32 does."""
    out, prev = torch.empty_like(x), torch.ones_like(x.select(dim, 0), dtype=torch.int64)
    for j in (range(x.shape[dim] - 1, -1, -1) if reverse else range(x.shape[dim])):
        prev = _wrapped(prev * x.select(dim, j).long(), 32).long()
        out.select(dim, j).copy_(prev)
    return out


def _odd_factors(n, g):
    """int32 values, mostly 1 and -1, some 3 and 5 (ties for argmin; products that overflow)."""
    return torch.tensor([1, -1, 3, 1, 1, -1, 1, 5], dtype=torch.int32)[torch.randint(0, 8, (n,), generator=g)]


def _empty(shape, dtype, device):
    """An output no lane has written: NaN, or the dtype's minimum for integers."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.full(shape, torch.iinfo(dtype).min, dtype=dtype, device=device)


# -- cases: name -> (kernel, make(device, **sizes) -> tle.Launch); references in float64 -------------------------
def _cumprods(dtype):
    def make(device, R=8, C=8):
        g = torch.Generator().manual_seed(1)
        if dtype == torch.int32:      # odd factors: the products wrap around and never become 0
            x = _odd_factors(R * C, g)
        else:
            x = 1.0 + 0.05 * torch.randn(R * C, generator=g)
        x = x.to(device)
        out = {k: _empty((R * C,), dtype, device) for k in ("fwd", "rev", "down", "back")}

        def reference():
            if dtype == torch.int32:
                x2, cumprod = x.view(R, C), _int32_cumprod
            else:
                x2, cumprod = x.view(R, C).double(), lambda t, dim, reverse: _flipped(torch.cumprod, t, dim, reverse)
            ref = {"fwd": cumprod(x2.reshape(-1), 0, False), "rev": cumprod(x2.reshape(-1), 0, True),
                   "down": cumprod(x2, 0, False).reshape(-1), "back": cumprod(x2, 1, True).reshape(-1)}
            return {k: v.to(dtype) for k, v in ref.items()}
        return tle.Launch(grid=(1,), args=(x, *out.values()), kwargs=dict(R=R, C=C), outputs=out,
                          reference=reference)
    return cumprods, make


def _scans_1d(reverse):
    def make(device, BLOCK=32, programs=2):
        g = torch.Generator().manual_seed(2)
        x, a = torch.randn(programs * BLOCK, generator=g), torch.rand(programs * BLOCK, generator=g) * 0.5 + 0.5
        x, a = x.to(device), a.to(device)
        out = dict(m=_empty(x.shape, torch.float32, device), i=_empty(x.shape, torch.int32, device),
                   h=_empty(x.shape, torch.float32, device), f=_empty(x.shape, torch.float32, device),
                   b=_empty(x.shape, torch.float32, device))

        def reference():
            xr, ar = x.view(programs, BLOCK).double(), a.view(programs, BLOCK).double()
            m, i = _running_max_reference(xr, 1, reverse)
            return {"m": m.reshape(-1), "i": i.reshape(-1), "h": _recurrence_reference(ar, xr, 1, reverse).reshape(-1),
                    "f": _first_reference(xr, 1, reverse).reshape(-1), "b": m.reshape(-1)}
        return tle.Launch(grid=(programs,), args=(x, a, *out.values()), kwargs=dict(BLOCK=BLOCK, REVERSE=reverse),
                          outputs=out, reference=reference)
    return scans_1d, make


def _scans_2d(axis, reverse):
    def make(device, R=8, C=16):
        g = torch.Generator().manual_seed(3)
        x, a = torch.randn(R * C, generator=g), torch.rand(R * C, generator=g) * 0.5 + 0.5
        x, a = x.to(device), a.to(device)
        out = dict(m=_empty((R * C,), torch.float32, device), i=_empty((R * C,), torch.int32, device),
                   h=_empty((R * C,), torch.float32, device), f=_empty((R * C,), torch.float32, device))

        def reference():
            x2, a2 = x.view(R, C).double(), a.view(R, C).double()
            m, i = _running_max_reference(x2, axis, reverse)
            return {"m": m.reshape(-1), "i": i.reshape(-1),
                    "h": _recurrence_reference(a2, x2, axis, reverse).reshape(-1),
                    "f": _first_reference(x2, axis, reverse).reshape(-1)}
        return tle.Launch(grid=(1,), args=(x, a, *out.values()), kwargs=dict(R=R, C=C, AXIS=axis, REVERSE=reverse),
                          outputs=out, reference=reference)
    return scans_2d, make


def _reduces_2d(axis):
    def make(device, R=8, C=16):
        g = torch.Generator().manual_seed(4)
        # ties: the maximum appears more than once on most rows and columns
        x = (torch.randint(0, 4, (R * C,), generator=g).float() / 64 + 0.96875).to(device)
        n = C if axis == 0 else R
        out = dict(p=_empty((n,), torch.float32, device), mx=_empty((n,), torch.float32, device),
                   arg=_empty((n,), torch.int32, device), f=_empty((n,), torch.float32, device),
                   keep=_empty((n,), torch.float32, device), whole=_empty((1,), torch.float32, device),
                   whole_keep=_empty((1,), torch.float32, device), scaled=_empty((R * C,), torch.float32, device))

        def reference():
            x2 = x.view(R, C).double()
            return {"p": x2.prod(axis), "mx": x2.amax(axis), "arg": x2.argmax(axis).int(), "f": x2.amax(axis),
                    "keep": (x2 * 0.5).prod(axis), "whole": x2.prod().reshape(1), "whole_keep": x2.amax().reshape(1),
                    "scaled": (x2 * x2.amax(axis, keepdim=True)).reshape(-1)}
        return tle.Launch(grid=(1,), args=(x, *out.values()), kwargs=dict(R=R, C=C, AXIS=axis), outputs=out,
                          reference=reference)
    return reduces_2d, make


def _int_reduces(device, BLOCK=64):
    g = torch.Generator().manual_seed(5)
    x8 = torch.randint(-128, 128, (BLOCK,), generator=g, dtype=torch.int8).to(device)
    x = _odd_factors(BLOCK, g).to(device)
    out = dict(s=_empty((1,), torch.int8, device), p=_empty((1,), torch.int32, device),
               mn=_empty((1,), torch.int32, device), arg=_empty((1,), torch.int32, device),
               cp=_empty((BLOCK,), torch.int32, device))

    def reference():
        cp = _int32_cumprod(x, 0, False)
        return {"s": _wrapped(x8.long().sum(), 8).reshape(1), "p": cp[-1:], "mn": x.min().reshape(1),
                "arg": x.argmin().int().reshape(1), "cp": _int32_cumprod(x, 0, True)}
    return tle.Launch(grid=(1,), args=(x8, x, *out.values()), kwargs=dict(BLOCK=BLOCK), outputs=out,
                      reference=reference)


def _scans_3d(device, A=2, B=4, C=8):
    g = torch.Generator().manual_seed(6)
    x = (1.0 + 0.1 * torch.randn(A * B * C, generator=g)).to(device)
    out = dict(cs=_empty((A * B * C,), torch.float32, device), cp=_empty((A * B * C,), torch.float32, device),
               p=_empty((B * C,), torch.float32, device))

    def reference():
        x3 = x.view(A, B, C).double()
        return {"cs": x3.cumsum(1).reshape(-1), "cp": x3.flip(2).cumprod(2).flip(2).reshape(-1),
                "p": x3.prod(0).reshape(-1)}
    return tle.Launch(grid=(1,), args=(x, *out.values()), kwargs=dict(A=A, B=B, C=C), outputs=out,
                      reference=reference)


def _scan_in_loop(device, BLOCK=32, n=3):
    g = torch.Generator().manual_seed(7)
    x = torch.rand(BLOCK, generator=g).to(device)
    y, total = _empty((BLOCK,), torch.float32, device), torch.full((1,), 0.25, device=device)

    def reference():
        acc, tot = x.double(), torch.full((1,), 0.25, dtype=torch.float64, device=x.device)
        for _ in range(n):
            acc = (acc * 0.5 + 0.5).flip(0).cumprod(0).flip(0)
            tot = tot + acc.prod()
        return {"y": acc, "total": tot}
    return tle.Launch(grid=(1,), args=(x, y, total, n), kwargs=dict(BLOCK=BLOCK), outputs={"y": y, "total": total},
                      reference=reference)


CASES = {
    "cumprod_fp32": _cumprods(torch.float32),
    "cumprod_int32": _cumprods(torch.int32),
    **{f"scan_1d_{'reverse' if r else 'forward'}": _scans_1d(r) for r in (False, True)},
    **{f"scan_2d_axis{a}_{'reverse' if r else 'forward'}": _scans_2d(a, r) for a in (0, 1) for r in (False, True)},
    **{f"reduce_2d_axis{a}": _reduces_2d(a) for a in (0, 1)},
    "int_reduces": (int_reduces, _int_reduces),
    "scans_3d": (scans_3d, _scans_3d),
    "scan_in_loop": (scan_in_loop, _scan_in_loop),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_combines_against_torch(name, backend):
    kernel, make = CASES[name]
    launch = make("cpu")
    run_on(backend, kernel, launch.grid, *launch.args, **launch.kwargs)
    compare_outputs(launch)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["reduce_2d_axis0", "scan_2d_axis0_reverse"])
def test_an_axis_of_one_element(name, backend):
    """Scanned or reduced along an axis of extent 1: no step, the element itself."""
    kernel, make = CASES[name]
    launch = make("cpu", R=1, C=16)
    run_on(backend, kernel, launch.grid, *launch.args, **launch.kwargs)
    compare_outputs(launch)


# -- what the TileLang lowering writes ---------------------------------------------------------------------------
def _source(name, **sizes):
    kernel, make = CASES[name]
    launch = make("cpu", **sizes)
    return kernel.lower(*launch.args, grid=launch.grid, backend="tilelang", **launch.kwargs).source


@needs_tilelang
def test_cumprod_is_a_log_step_scan_over_two_shared_buffers():
    src = _source("cumprod_fp32", R=2, C=4)
    assert "T.cumsum" not in src
    # step d: element i >= d is combine(element i - d, element i), the first d are copied; the two buffers
    # swap roles at each step, the last one written holding the result
    assert re.search(r"for i0 in T\.Parallel\(8\):\n\s+cumprod_tmp\[i0\] = x\[i0\]\n"
                     r"\s+for i0 in T\.Parallel\(8\):\n\s+if i0 >= 1:\n\s+cumprod\[i0\] = "
                     r"\(cumprod_tmp\[i0 - 1\] \* cumprod_tmp\[i0\]\)\n\s+else:\n\s+cumprod\[i0\] = cumprod_tmp\[i0\]\n"
                     r"\s+for i0 in T\.Parallel\(8\):\n\s+if i0 >= 2:\n\s+cumprod_tmp\[i0\] = "
                     r"\(cumprod\[i0 - 2\] \* cumprod\[i0\]\)\n\s+else:\n\s+cumprod_tmp\[i0\] = cumprod\[i0\]\n"
                     r"\s+for i0 in T\.Parallel\(8\):\n\s+if i0 >= 4:\n\s+cumprod\[i0\] = "
                     r"\(cumprod_tmp\[i0 - 4\] \* cumprod_tmp\[i0\]\)\n\s+else:\n\s+cumprod\[i0\] = "
                     r"cumprod_tmp\[i0\]\n\s+T\.copy\(cumprod, fwd_ptr\[0:8\]\)", src), src
    # reverse: element i < n - d is combine(element i + d, element i), the last d are copied
    assert re.search(r"if i0 < 6:\n\s+(\w+)\[i0\] = \((\w+)\[i0 \+ 2\] \* \2\[i0\]\)\n\s+else:\n"
                     r"\s+\1\[i0\] = \2\[i0\]\n", src), src
    # 2-D, along the first axis, and along the second from its end
    assert re.search(r"if i0 >= 1:\n\s+(\w+)\[i0, i1\] = \((\w+)\[i0 - 1, i1\] \* \2\[i0, i1\]\)\n", src), src
    assert re.search(r"if i1 < 3:\n\s+(\w+)\[i0, i1\] = \((\w+)\[i0, i1 \+ 1\] \* \2\[i0, i1\]\)\n", src), src


@needs_tilelang
def test_a_combine_function_is_written_through_the_expression_rules():
    src = _source("scan_1d_forward", BLOCK=4, programs=1)
    # a value the combine function uses twice is a let, computed once per element; two tiles, one loop
    assert re.search(r"for i0 in T\.Parallel\(4\):\n\s+m\[i0\] = x\[i0\]\n\s+i\[i0\] = i0\n"
                     r"\s+for i0 in T\.Parallel\(4\):\n\s+if i0 >= 1:\n\s+take = \(m\[i0\] > m\[i0 - 1\]\)\n"
                     r"\s+m_tmp\[i0\] = T\.if_then_else\(take, m\[i0\], m\[i0 - 1\]\)\n"
                     r"\s+i_tmp\[i0\] = T\.if_then_else\(take, i\[i0\], i\[i0 - 1\]\)\n\s+else:\n"
                     r"\s+m_tmp\[i0\] = m\[i0\]\n\s+i_tmp\[i0\] = i\[i0\]\n", src), src
    # the recurrence reads both operands of the step before
    assert re.search(r"h_tmp\[i0\] = \(\(h\[i0 - 1\] \* (\w+)\[i0\]\) \+ h\[i0\]\)", src), src
    # a runtime branch of the combine function is a select
    assert re.search(r"= T\.if_then_else\(\((\w+)\[i0 - 1\] > \1\[i0\]\), \1\[i0 - 1\], \1\[i0\]\)", src), src


@needs_tilelang
def test_a_reduction_combines_neighbours_level_by_level():
    src = _source("reduce_2d_axis1", R=2, C=4)
    assert "T.reduce_" not in src
    assert re.search(r"for i0, i1 in T\.Parallel\(2, 2\):\n\s+(\w+)_2\[i0, i1\] = \((\w+)\[i0, 2 \* i1\] \* "
                     r"\2\[i0, 2 \* i1 \+ 1\]\)\n\s+for i0 in T\.Parallel\(2\):\n\s+\1\[i0\] = \(\1_2\[i0, 0\] \* "
                     r"\1_2\[i0, 1\]\)\n", src), src
    src0 = _source("reduce_2d_axis0", R=4, C=2)
    assert re.search(r"\w+_2\[i0, i1\] = \((\w+)\[2 \* i0, i1\] \* \1\[2 \* i0 \+ 1, i1\]\)", src0), src0


@tle.jit
def plain_combines(x_ptr, c_ptr, m_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(c_ptr + offs, tl.associative_scan(x, 0, _add))
    tl.store(m_ptr, tl.reduce(x, 0, _maximum))


@needs_tilelang
def test_plain_sums_and_maxima_keep_tilelangs_own_operations():
    x = torch.randn(32)
    src = plain_combines.lower(x, x, x, BLOCK=32, grid=(1,), backend="tilelang").source
    assert "T.cumsum(" in src and "T.reduce_max(" in src and "_tmp" not in src
    for backend in BACKENDS:
        c, m = torch.full((32,), float("nan")), torch.full((1,), float("nan"))
        run_on(backend, plain_combines, (1,), x, c, m, BLOCK=32)
        torch.testing.assert_close(c, x.cumsum(0))
        torch.testing.assert_close(m, x.max().reshape(1))


@triton.jit
def _looped_max(a, b):
    r = a
    for _ in range(2):
        r = tl.maximum(r, b)
    return r


@tle.jit
def scan_with(x_ptr, y_ptr, COMBINE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.associative_scan(tl.load(x_ptr + offs), 0, COMBINE))


@needs_tilelang
def test_a_combine_function_with_a_loop_is_refused_at_the_call():
    x = torch.empty(16)
    with pytest.raises(LoweringError, match=r"test_tilelang_combines\.py:\d+: \[tilelang\] .*cannot express "
                                            r"tl\.associative_scan: its combine function '_looped_max' has a loop"):
        scan_with.lower(x, x, COMBINE=_looped_max, BLOCK=16, grid=(1,), backend="tilelang")


# -- TileLang's own compiler accepts what is generated (no GPU needed) ------------------------------------------
@pytest.mark.slow
@needs_tilelang
@pytest.mark.parametrize("name", ["cumprod_fp32", "cumprod_int32", "scan_1d_reverse", "scan_2d_axis0_forward",
                                  "scan_2d_axis1_reverse", "reduce_2d_axis0", "reduce_2d_axis1", "int_reduces",
                                  "scans_3d", "scan_in_loop"])
def test_tilelang_compiles_the_combines_for_sm_90a(name):
    kernel, make = CASES[name]
    launch = make("cpu")
    lowered = kernel.lower(*launch.args, grid=launch.grid, backend="tilelang", **launch.kwargs)
    assert "__global__" in lowered.stage("cuda")
    ptx = lowered.stage("ptx")
    assert ".entry" in ptx and "sm_90" in ptx


@pytest.mark.slow
@needs_tilelang
def test_large_tiles_compile_with_aligned_vector_accesses():
    """1024 elements on 128 threads: TileLang vectorizes the steps' shifted reads only where the shift keeps
    them aligned (a shift by 1 is read element by element), the step's condition then holding for the
    whole vector."""
    kernel, make = CASES["cumprod_fp32"]
    launch = make("cpu", R=32, C=32)
    lowered = kernel.lower(*launch.args, grid=launch.grid, backend="tilelang", **launch.kwargs)
    cuda = lowered.stage("cuda")
    shifted = re.findall(r"\*\(float(\d)\*\)\(\(\(float\*\)\w+\) \+ \(.*\) [-+] (\d+)\)\)", cuda)
    assert shifted, cuda
    for width, shift in shifted:
        assert int(shift) % int(width) == 0, (width, shift)
    assert ".entry" in lowered.stage("ptx")
