"""Dropout and a residual add in one pass, the tail of a transformer sub-block.

    y = dropout(x, p) + residual = x * keep / (1 - p) + residual

`tle.ops.dropout_add(x, residual, p, training=True, seed=None, offset=0)`. The mask comes from the layer's
Philox 4x32-10 stream (kernels/philox.py): element e of the flattened tensor is kept iff its word
(word e mod 4 of Philox(counter = offset + e div 4, key = seed)) is >= round(p * 2^32). p = 0 keeps every
element and p = 1 drops every one (y = residual). The torch, Triton and TileLang backends draw the same bits
for the same (seed, offset), whatever the tiling; the backward regenerates the mask from them instead of
storing it: dx = dy * keep / (1 - p), dresidual = dy. training=False is a plain add.

seed=None takes the randomness from torch's default generator of x's device, so torch.manual_seed makes runs
repeatable and consecutive calls differ:
- CUDA: seed = the generator's initial_seed(); offset = its get_offset() // 4 (torch counts its Philox offset
  in 32-bit words, four per counter), and the generator's offset then moves past the counters used
  (set_offset, by 4 per counter, rounded up to a multiple of 4 as torch requires), so the counters never
  overlap those of torch's own random kernels before or after. Reading and moving the offset is refused
  inside CUDA-graph capture: pass an explicit seed there.
- CPU (and other devices): a 64-bit seed drawn from torch's CPU default generator (advancing it), offset 0.
Drawing the seed happens in Python, outside the custom op, so under torch.compile a call with seed=None
breaks the graph there; the op itself (tle::dropout_add) takes seed and offset as plain ints and is
deterministic, and a call with an explicit seed compiles into one graph.

The kernels see the flattened tensor as rows of 4 elements ([numel // 4, 4]), one Philox counter per row:
each program loads a [BLOCK_R, 4] box, runs Philox once per row and gives each column its word. A tensor
whose size is not a multiple of 4 has its last 1-3 elements done by a second launch of the same kernel on a
padded row of 4, at the counter that row has in the stream."""
from __future__ import annotations

import torch
import triton.language as tl

import tle
from tle.kernels.philox import split_u64, stream_words, stream_words_torch
from tle.examples import default_tolerance
from tle.oplib import BenchSpec, Operator, Sample, check_float, check_kernel_dtypes
from tle.oplib.arith import cdiv
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype

BLOCK_R = 1024            # rows of 4 elements per program: 4096 elements
NUM_WARPS = 8
MAX_NUMEL = 2**31 - 1     # the kernels index elements with int32
U64 = (1 << 64) - 1
# seed and offset change from call to call, the threshold with p: runtime values (TileLang compiles in the
# integer arguments it is not told to keep), so a kernel compiles once per shape
_RUNTIME_INTS = ("seed_lo", "seed_hi", "offset_lo", "offset_hi", "threshold")


@tle.jit(do_not_specialize=_RUNTIME_INTS)
def dropout_add_fwd_kernel(x_ptr, r_ptr, y_ptr, n_rows, seed_lo, seed_hi, offset_lo, offset_hi, threshold, scale,
                           BLOCK_R: tl.constexpr, DROPOUT: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, 4)
    mask = rows[:, None] < n_rows
    x = tl.load(x_ptr + rows[:, None] * 4 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + rows[:, None] * 4 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if DROPOUT:
        words = stream_words(rows, cols, seed_lo, seed_hi, offset_lo, offset_hi)
        x = tl.where(words.to(tl.int64) >= threshold, x * scale, 0.0)
    tl.store(y_ptr + rows[:, None] * 4 + cols[None, :], (x + r).to(y_ptr.dtype.element_ty), mask=mask)


@tle.jit(do_not_specialize=_RUNTIME_INTS)
def dropout_bwd_kernel(dy_ptr, dx_ptr, n_rows, seed_lo, seed_hi, offset_lo, offset_hi, threshold, scale,
                       BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, 4)
    mask = rows[:, None] < n_rows
    dy = tl.load(dy_ptr + rows[:, None] * 4 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    words = stream_words(rows, cols, seed_lo, seed_hi, offset_lo, offset_hi)
    dx = tl.where(words.to(tl.int64) >= threshold, dy * scale, 0.0)
    tl.store(dx_ptr + rows[:, None] * 4 + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


# -- the arithmetic shared by every backend -------------------------------------------------------------------
def threshold_of(p: float) -> int:
    """The smallest kept word: round(p * 2^32), so p = 0 keeps all (0) and p = 1 drops all (2^32)."""
    return min(max(round(p * 2.0**32), 0), 1 << 32)


def scale_of(p: float) -> float:
    return 1.0 / (1.0 - p) if p < 1.0 else 0.0


def keep_mask(numel: int, p: float, seed: int, offset: int, device=None) -> torch.Tensor:
    """The mask (bool, [numel]) that every backend draws for (p, seed, offset): the torch Philox."""
    return stream_words_torch(numel, seed, offset, device) >= threshold_of(p)


# -- the torch backend -------------------------------------------------------------------------------------
def _torch_forward(x, residual, p, seed, offset):
    ct = torch_compute_dtype(x)
    xf = x.to(ct)
    if p > 0.0:
        keep = keep_mask(x.numel(), p, seed, offset, x.device).reshape(x.shape)
        xf = torch.where(keep, xf * scale_of(p), torch.zeros((), dtype=ct, device=x.device))
    return (xf + residual.to(ct)).to(x.dtype)


def _torch_backward(dy, p, seed, offset):
    ct = torch_compute_dtype(dy)
    keep = keep_mask(dy.numel(), p, seed, offset, dy.device).reshape(dy.shape)
    return torch.where(keep, dy.to(ct) * scale_of(p), torch.zeros((), dtype=ct, device=dy.device)).to(dy.dtype)


# -- the kernel backends ------------------------------------------------------------------------------------
def _launch(kernel, tensors, n_rows, p, seed, offset, backend, **constexprs):
    seed_lo, seed_hi = split_u64(seed)
    offset_lo, offset_hi = split_u64(offset)
    kernel[(cdiv(n_rows, BLOCK_R),)](*tensors, n_rows, seed_lo, seed_hi, offset_lo, offset_hi,
                                           threshold_of(p), scale_of(p), BLOCK_R=BLOCK_R, backend=backend,
                                           num_warps=NUM_WARPS, **constexprs)


def _by_rows(kernel, inputs, out_dtype, p, seed, offset, backend, **constexprs):
    """Run `kernel` over flat contiguous `inputs` (and one output of their size): the first numel // 4 * 4
    elements as [rows, 4], the last numel % 4 in a zero-padded row of 4 at stream counter offset + rows."""
    numel = inputs[0].numel()
    out = torch.empty(numel, device=inputs[0].device, dtype=out_dtype)
    rows, tail = divmod(numel, 4)
    if rows:
        _launch(kernel, [t[:rows * 4].view(rows, 4) for t in inputs] + [out[:rows * 4].view(rows, 4)], rows, p,
                seed, offset, backend, **constexprs)
    if tail:
        padded = [t.new_zeros(1, 4) for t in inputs]
        for pad, t in zip(padded, inputs):
            pad[0, :tail] = t[rows * 4:]
        out_row = out.new_empty(1, 4)
        _launch(kernel, padded + [out_row], 1, p, seed, offset + rows, backend, **constexprs)
        out[rows * 4:] = out_row[0, :tail]
    return out


def _kernel_forward(x, residual, p, seed, offset, backend):
    flat = [x.contiguous().view(-1), residual.contiguous().view(-1)]
    return _by_rows(dropout_add_fwd_kernel, flat, x.dtype, p, seed, offset, backend,
                    DROPOUT=p > 0.0).reshape(x.shape)


def _kernel_backward(dy, p, seed, offset, backend):
    # dy is often an expanded tensor (the gradient of a sum): its elements are made real first
    return _by_rows(dropout_bwd_kernel, [dy.contiguous().view(-1)], dy.dtype, p, seed, offset,
                    backend).reshape(dy.shape)


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_size(size):
    # small: 2500 rows of 4 (three programs, the last one partial); large: the 32768 x 8192 activations
    return (2500, torch.float32) if size == "small" else (32768 * 8192 // 4, torch.bfloat16)


_EXAMPLE_SEED, _EXAMPLE_OFFSET, _EXAMPLE_P = 0x0123456789ABCDEF, (1 << 32) - 700, 0.1   # the offset's low word wraps


def _example_args(p=_EXAMPLE_P):
    seed_lo, seed_hi = split_u64(_EXAMPLE_SEED)
    offset_lo, offset_hi = split_u64(_EXAMPLE_OFFSET)
    return (seed_lo, seed_hi, offset_lo, offset_hi, threshold_of(p), scale_of(p))


@tle.example(dropout_add_fwd_kernel)
def _fwd_example(device, size):
    rows, dtype = _example_size(size)
    x, r = (torch.randn(rows, 4, device=device, dtype=dtype) for _ in range(2))
    y = torch.full_like(x, float("nan"))

    def ref():
        return {"y": _torch_forward(x, r, _EXAMPLE_P, _EXAMPLE_SEED, _EXAMPLE_OFFSET)}
    return tle.Launch(grid=(cdiv(rows, BLOCK_R),), args=(x, r, y, rows) + _example_args(),
                      kwargs=dict(BLOCK_R=BLOCK_R, DROPOUT=True, num_warps=NUM_WARPS),
                      outputs={"y": y}, reference=ref, bytes=3 * x.numel() * x.element_size(),
                      label=f"{rows * 4} {str(dtype)[6:]}")


@tle.example(dropout_bwd_kernel)
def _bwd_example(device, size):
    rows, dtype = _example_size(size)
    dy = torch.randn(rows, 4, device=device, dtype=dtype)
    dx = torch.full_like(dy, float("nan"))

    def ref():
        return {"dx": _torch_backward(dy, _EXAMPLE_P, _EXAMPLE_SEED, _EXAMPLE_OFFSET)}
    return tle.Launch(grid=(cdiv(rows, BLOCK_R),), args=(dy, dx, rows) + _example_args(),
                      kwargs=dict(BLOCK_R=BLOCK_R, num_warps=NUM_WARPS),
                      outputs={"dx": dx}, reference=ref, bytes=2 * dy.numel() * dy.element_size(),
                      label=f"{rows * 4} {str(dtype)[6:]}")


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
# seed and offset travel as int64 (the schema's int) holding their 64 unsigned bits; p = 0 means no dropout
def _unsigned(run, x: torch.Tensor, residual: torch.Tensor, p: float, seed: int, offset: int) -> torch.Tensor:
    return run(x, residual, p, seed & U64, offset & U64) if x.numel() else x.new_empty(x.shape)


def _backward_unsigned(run, dy: torch.Tensor, p: float, seed: int, offset: int) -> torch.Tensor:
    return run(dy, p, seed & U64, offset & U64) if dy.numel() else dy.new_empty(dy.shape)


def _save(ctx, inputs, y):
    _, _, ctx.p, ctx.seed, ctx.offset = inputs


def _grads(ctx, backward, dy):
    return (dy if ctx.p == 0.0 else backward(dy, ctx.p, ctx.seed, ctx.offset)), dy


DROPOUT_ADD = Recipe("dropout_add",
                     forward=Stage(torch=_torch_forward, kernels=_kernel_forward, adapt=_unsigned,
                                   fake=lambda x, *_: x.new_empty(x.shape)),
                     backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_unsigned,
                                    fake=lambda dy, *_: dy.new_empty(dy.shape)),
                     save=_save, grads=_grads)


# -- the randomness of seed=None ----------------------------------------------------------------------------
def _as_i64(v: int) -> int:
    v &= U64
    return v - (1 << 64) if v >= (1 << 63) else v


def draw_seed_offset(device: torch.device, counters: int, generator: torch.Generator | None = None) -> tuple[int, int]:
    """(seed, offset) from `generator` (None: torch's default generator of `device`), moved past `counters`
    Philox counters."""
    gen, on_cuda = generator, generator is not None and generator.device.type == "cuda"
    if gen is None and device.type == "cuda":
        gen = torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]
        on_cuda = True
    if on_cuda:
        words = gen.get_offset()
        gen.set_offset(words + 4 * counters)
        return gen.initial_seed(), words // 4
    seed = int(torch.randint(-2**63, 2**63 - 1, (), dtype=torch.int64, generator=gen))
    return seed & U64, 0


# -- the public surface -------------------------------------------------------------------------------------
def check_dropout_args(p, seed, offset, p_name: str = "p") -> None:
    """The checks of a dropout probability (named `p_name`) and of an optional seed and an offset."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise tle.LaunchError(f"'{p_name}' is the dropout probability, a number with 0 <= p <= 1; got {p!r}")
    for name, v in (("seed", seed), ("offset", offset)):
        if (v is not None or name == "offset") and (isinstance(v, bool) or not isinstance(v, int)):
            raise tle.LaunchError(f"'{name}' must be an int (taken modulo 2^64), got {type(v).__name__}")


def dropout_add(x: torch.Tensor, residual: torch.Tensor, p: float, training: bool = True,
                seed: int | None = None, offset: int = 0, *, backend: str | None = None,
                fallback: str | None = None) -> torch.Tensor:
    """dropout(x, p) + residual, the mask drawn from the Philox stream of (seed, offset); seed=None draws
    them from torch's default generator of x's device (see the module's docstring)."""
    check_float(x, "x")
    check_float(residual, "residual", device=x.device, shape=tuple(x.shape))
    if residual.dtype != x.dtype:
        raise tle.LaunchError(f"'residual' has dtype {residual.dtype}; expected x's dtype {x.dtype}")
    check_dropout_args(p, seed, offset)
    b = DROPOUT_ADD.resolve(x.device, backend, fallback)
    check_kernel_dtypes("dropout_add", b, x=x, residual=residual)
    if b != "torch" and x.numel() > MAX_NUMEL:
        raise tle.LaunchError(f"'x' has {x.numel()} elements; dropout_add on {b} indexes them with int32 "
                              f"(at most {MAX_NUMEL})")
    p = float(p)
    if not training or p == 0.0:
        return DROPOUT_ADD(x, residual, 0.0, 0, 0, backend=b)
    if seed is None:
        seed, offset = draw_seed_offset(x.device, (x.numel() + 3) // 4)
    return DROPOUT_ADD(x, residual, p, _as_i64(seed), _as_i64(offset), backend=b)


class DropoutAdd(torch.nn.Module):
    """dropout(x, p) + residual (tle.ops.dropout_add) in training mode, x + residual in eval mode."""

    def __init__(self, p: float, *, backend: str | None = None, fallback: str | None = None):
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p!r}")
        self.p = float(p)
        self.backend, self.fallback = backend, fallback

    def forward(self, x, residual):
        return dropout_add(x, residual, self.p, self.training, backend=self.backend, fallback=self.fallback)

    def extra_repr(self):
        return f"p={self.p}, backend={self.backend}"


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(x, residual, p, training=True, seed=None, offset=0):
    """Plain differentiable torch (no custom op), with the mask of the torch Philox: the tests' ground truth.
    Needs an explicit seed when it draws a mask."""
    if not training or p == 0.0:
        return x + residual
    if seed is None:
        raise ValueError("reference() reproduces a mask only from an explicit seed")
    keep = keep_mask(x.numel(), p, seed, offset, x.device).reshape(x.shape)
    return x * (keep.to(x.dtype) * scale_of(p)) + residual


def samples(device, dtype):
    def t(*shape):
        return torch.randn(*shape, device=device, dtype=torch.float32).to(dtype)
    return [Sample((t(5, 7), t(5, 7), 0.3), dict(seed=1234), label="35 elements, 7 columns"),
            Sample((t(2, 3, 33), t(2, 3, 33), 0.5), dict(seed=2**40 + 5, offset=7), label="rank 3, offset"),
            Sample((t(4, 1000), t(4, 1000), 0.1), dict(seed=987654321, offset=2**32 - 300),
                   label="1000 columns, the counter's low word wraps"),
            Sample((t(1), t(1), 0.2), dict(seed=2**64 - 1), label="one element, seed 2^64 - 1"),
            Sample((t(3, 8), t(3, 8), 0.0), dict(seed=5), label="p = 0"),
            Sample((t(3, 9), t(3, 9), 1.0), dict(seed=5), label="p = 1"),
            Sample((t(6, 33), t(6, 33), 0.5, False), label="training=False"),
            Sample((t(0, 16), t(0, 16), 0.5), dict(seed=1), label="empty")]


def _bench_make(shape, dtype, device):
    m, n = shape
    return Sample((torch.randn(m, n, device=device, dtype=dtype), torch.randn(m, n, device=device, dtype=dtype),
                   0.1), dict(seed=1234))


def _bench_bytes(sample, mode):
    x = sample.args[0]
    # fwd: read x and residual, write y; bwd: read dy, write dx (the residual's gradient is dy itself)
    return (3 if mode == "fwd" else 2) * x.numel() * x.element_size()


def _eager(sample):
    x, r, p = sample.args
    return lambda x=x, r=r: torch.nn.functional.dropout(x, p, training=True) + r


def _bench_check(sample, outputs, grads, upstream):
    """Every output element is residual (dropped) or x / (1 - p) + residual (kept), within the dtype's
    rounding; the kept share is within 5 sigma of 1 - p; dx is upstream / (1 - p) where kept and 0 where
    dropped, dresidual the upstream gradient."""
    x, r, p = sample.args[:3]
    xf, rf, y = x.detach().float(), r.detach().float(), outputs[0].float()
    kept_value = xf / (1 - p) + rf
    scale = max(kept_value.abs().max().item(), 1.0)
    tol = default_tolerance(torch.tensor([scale]), x.dtype)[0] + 1.6e-2 * kept_value.abs()
    err_kept, err_dropped = (y - kept_value).abs(), (y - rf).abs()
    kept = err_kept < err_dropped
    err = torch.where(kept, err_kept, err_dropped)
    assert bool((err <= tol).all()), f"an output is neither dropped nor kept: max error {err.max().item():.3g}"
    clear = (xf / (1 - p)).abs() > 4 * tol                 # elements whose two outcomes cannot be confused
    n = int(clear.sum())
    rate = float(kept[clear].float().mean()) if n else 1 - p
    sigma = (p * (1 - p) / max(n, 1)) ** 0.5
    assert abs(rate - (1 - p)) <= 5 * sigma + 1e-6, f"kept share {rate:.5f}, expected {1 - p} +- {5 * sigma:.5f}"
    worst = err.max().item()
    if grads:
        dy = upstream[0].float()
        dx_ref = torch.where(kept, dy / (1 - p), torch.zeros_like(dy))
        for name, g, ref in (("x", grads[0], dx_ref), ("residual", grads[1], dy)):
            if g is None:
                continue
            gerr = (g.float() - ref).abs()
            gtol = default_tolerance(ref, x.dtype)[0] + 1.6e-2 * ref.abs()
            ambiguous = ~clear if name == "x" else torch.zeros_like(clear)
            assert bool((gerr <= gtol)[~ambiguous].all()), f"gradient of {name}: max error {gerr.max().item():.3g}"
            worst = max(worst, gerr[~ambiguous].max().item() if gerr.numel() else 0.0)
    return worst


OPERATOR = Operator(
    "dropout_add", fn=dropout_add, reference=reference, samples=samples, grad_inputs=(0, 1),
    bench=BenchSpec(dry_shapes=[(64, 256), (32, 512)],
                    shapes=[(32768, 8192), (32768, 4096), (65536, 2048), (65536, 1024), (131072, 512)],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager, peers={}, shape_help="ROWSxCOLS",
                    check=_bench_check))
