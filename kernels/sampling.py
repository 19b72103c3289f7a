"""Sampling a token per row of logits, with top-k, top-p and min-p filters, and the filter alone.

    tokens = tle.ops.sample(logits, temperature=0.7, top_k=50, top_p=0.9, seed=1234)      # int64 [B]
    masked = tle.ops.top_k_top_p_mask(logits, top_k=50, top_p=0.9)                          # logits' dtype

Both are forward-only: a token is not differentiable, and the mask passes the kept logits unchanged (their
gradient would be the upstream gradient where kept and zero elsewhere; differentiating the op raises).

Semantics (kernels/sampling_torch.py, which is also the "torch" backend): y = logits / temperature; the kept
set is {y >= tau}, tau the largest of the top-k threshold (the k-th largest value, ties kept), the top-p
threshold over the top-k set renormalized (the smallest set of largest values whose probability reaches top_p,
ties with its last value kept) and the min-p floor (probability at least min_p times the largest). A row's
token is drawn from softmax(y) restricted to the kept set, by inverse transform in column order with one
uniform from the layer's Philox stream (kernels/philox.py): row r takes element r of the stream of
(seed, offset), so every backend draws the same token for the same seed (up to the rounding of the fp32 sums
when the uniform falls within rounding of a boundary between two columns' shares). temperature 0 takes the
first column of the largest logit. top_k, top_p, min_p and temperature are numbers or one value per row
([B] tensors); a tensor's values are not checked on the host: top_k <= 0 or >= V, top_p >= 1, min_p <= 0
filter nothing there.

seed=None draws (seed, offset) from `generator`, or from torch's default generator of the logits' device, as
tle.ops.dropout_add does (the generator moves past the counters used); an explicit seed is repeatable and
compiles into one graph under torch.compile.

How (kernels/sampling_kernels.py): a threshold kernel, then a draw kernel, one program per row; the row is
never sorted. A pass takes the maximum and the softmax mass; each filter's threshold is bracketed by passes
that count and weigh the values at eight pivots at once, until at most CAP values lie in the bracket; one
pass gathers them, and CAP values sorted in registers give the threshold exactly. The token is drawn from the
gathered values when they hold the whole kept set (top-k, and top-p on peaked rows), else from one more pass
over the row, which stops at the token. Sorting the row (what torch does, O(V log V) work and several passes)
is what this avoids; FlashInfer's rejection sampling instead repeats passes a number of times that depends on
the data. The bracketing passes cost compute per value (eight compares, counts and masses), the gather a scan
per tile."""
from __future__ import annotations

import torch

import tle
from tle.kernels import sampling_torch
from tle.kernels.dropout_add import U64, _as_i64, draw_seed_offset
from tle.kernels.philox import split_u64
from tle.kernels.sampling_kernels import sample_draw_kernel, sample_threshold_kernel, top_k_top_p_mask_kernel
from tle.oplib import BenchSpec, Operator, Sample, check_float, check_kernel_dtypes
from tle.oplib.recipe import Recipe, Stage

CAP = 2048              # values a bracket may hold for the exact pick (sorted in registers)
LADDER = 8              # pivots a bracketing pass measures at once
ROUNDS = 24             # bracketing passes at most (a bracket narrows ninefold a pass)
# 16 warps and 2048-column bracketing tiles: 0.81 against 1.02 ms (8 warps, 1024) at 128x262144 top_p 0.9, and
# 0.84 against 0.92 with top_k 50 too (H200, Triton); 32 warps, 4096-column tiles or 16 pivots were slower
NUM_WARPS = 16


def _blocks(n_cols: int, cap: int | None = None) -> dict:
    """The kernels' tile sizes for rows of n_cols: 4096 columns a pass tile, 2048 in the bracketing passes (an
    [8, 2048] count and mass each), CAP scratch slots a row; fewer for short rows."""
    pow2 = max(1 << max(n_cols - 1, 1).bit_length(), 16)
    return dict(CAP=cap or min(CAP, pow2), BLOCK=min(4096, pow2), BLOCK_L=min(2048, pow2), F=LADDER, ROUNDS=ROUNDS)


def _draw_blocks(blocks: dict) -> dict:
    return dict(CAP=blocks["CAP"], BLOCK=blocks["BLOCK"])


def _scratch(rows: int, device, cap: int, make=torch.empty):
    return (make(rows, cap, device=device, dtype=torch.float32), make(rows, cap, device=device, dtype=torch.int32))


# -- the kernel backends ------------------------------------------------------------------------------------
def _kernel_sample(logits, inv_temp, top_k, top_p, min_p, seed, offset, backend):
    rows, n_cols = logits.shape
    out = torch.empty(rows, device=logits.device, dtype=torch.int64)
    blocks = _blocks(n_cols)
    vals, cols = _scratch(rows, logits.device, blocks["CAP"])
    stats = torch.empty(rows, 4, device=logits.device, dtype=torch.float32)
    sample_threshold_kernel[(rows,)](logits, inv_temp, top_k, top_p, min_p, vals, cols, stats, logits.stride(0),
                                     n_cols, backend=backend, num_warps=NUM_WARPS, **blocks)
    sample_draw_kernel[(rows,)](logits, inv_temp, vals, cols, stats, out, logits.stride(0), n_cols,
                                *split_u64(seed), *split_u64(offset), backend=backend, num_warps=NUM_WARPS,
                                **_draw_blocks(blocks))
    return out


def _kernel_mask(logits, top_k, top_p, backend):
    rows, n_cols = logits.shape
    out = torch.empty_like(logits)
    blocks = _blocks(n_cols)
    vals, cols = _scratch(rows, logits.device, blocks["CAP"])
    top_k_top_p_mask_kernel[(rows,)](logits, top_k, top_p, vals, cols, out, logits.stride(0), out.stride(0),
                                     n_cols, backend=backend, num_warps=NUM_WARPS, **blocks)
    return out


# -- example launches (tle show / compare, the kernel tests and goldens) -----------------------------------
def _example_rows(device, size):
    """small: 6 rows of 300 (past CAP = 64: the brackets narrow), each filter alone and together, a tie at the
    top under temperature 0; large: 128 rows of a 131072 vocabulary, bf16."""
    if size == "small":
        logits = torch.randn(6, 300, device=device) * 3
        logits[2, 10] = logits[2, 11] = logits[2].max() + 1
        inv_temp = torch.tensor([1.0, 2.0, 0.0, 0.5, 1.0, 1.0], device=device)
        top_k = torch.tensor([300, 5, 300, 40, 1, 200], device=device, dtype=torch.int32)
        top_p = torch.tensor([0.9, 1.0, 1.0, 0.5, 1.0, 0.99], device=device)
        min_p = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.05], device=device)
        return logits, inv_temp, top_k, top_p, min_p, 64
    rows = 128
    logits = (torch.randn(rows, 131072, device=device) * 4).to(torch.bfloat16)
    full = torch.ones(rows, device=device)
    top_k = torch.full((rows,), 50, device=device, dtype=torch.int32)
    return logits, full, top_k, full * 0.9, full * 0.0, CAP


_EXAMPLE_SEED, _EXAMPLE_OFFSET = 0x0123456789ABCDEF, 12345


@tle.example(sample_threshold_kernel)
def _threshold_example(device, size):
    logits, inv_temp, top_k, top_p, min_p, cap = _example_rows(device, size)
    rows, n_cols = logits.shape
    stats = torch.full((rows, 4), float("nan"), device=device)
    vals, cols = _scratch(rows, device, cap, torch.zeros)         # examples build the same inputs each time

    def ref():
        y, tau, top = _torch_kept(logits, inv_temp, top_k, top_p, min_p)
        return {"tau, max": torch.cat([tau, top], 1).float()}
    # the kept mass and the scratch's count follow from the bracket the kernel reached: its draws check them
    return tle.Launch(grid=(rows,), args=(logits, inv_temp, top_k, top_p, min_p, vals, cols, stats, logits.stride(0),
                                          n_cols),
                      kwargs=dict(num_warps=NUM_WARPS, **_blocks(n_cols, cap)), outputs={"tau, max": stats[:, :2]},
                      reference=ref, bytes=logits.numel() * logits.element_size(),
                      label=f"{rows}x{n_cols} {str(logits.dtype)[6:]}")


def _torch_kept(logits, inv_temp, top_k, top_p, min_p):
    """(y, tau, max) [B, V], [B, 1], [B, 1] as sampling_torch.sample computes them."""
    n_cols = logits.shape[1]
    greedy = inv_temp == 0
    y = sampling_torch.scaled(logits, torch.where(greedy, 1.0, inv_temp))
    top = y.max(-1, keepdim=True).values
    tau = sampling_torch.thresholds(y, torch.where(greedy, n_cols, top_k), torch.where(greedy, 1.0, top_p))
    min_p = torch.where(greedy, 1.0, min_p)[:, None]
    return y, torch.maximum(tau, torch.where(min_p > 0, top + torch.log(min_p), -torch.inf)), top


@tle.example(sample_draw_kernel)
def _draw_example(device, size):
    """Rows 0, 2 and 4 draw from a scratch holding their kept set; 1 and 3 from the row with the kept mass
    given, 5 with it to be summed."""
    logits, inv_temp, top_k, top_p, min_p, cap = _example_rows(device, size)
    rows, n_cols = logits.shape
    y, tau, top = _torch_kept(logits, inv_temp, top_k, top_p, min_p)
    kept = y >= tau
    vals, cols = _scratch(rows, device, cap, torch.zeros)         # examples build the same inputs each time
    stats = torch.stack([tau[:, 0], top[:, 0], torch.where(kept, torch.exp(y - top), 0).sum(-1),
                         torch.full((rows,), -1.0, device=device)], 1).float()
    for r in range(0, rows, 2):
        where = kept[r].nonzero()[:, 0]
        if len(where) <= cap:
            vals[r, :len(where)], cols[r, :len(where)] = y[r, where], where.int()
            stats[r, 3] = len(where)
    stats[rows - 1, 2] = -1.0
    out = torch.full((rows,), -1, device=device, dtype=torch.int64)
    words = split_u64(_EXAMPLE_SEED) + split_u64(_EXAMPLE_OFFSET)

    def ref():
        return {"out": sampling_torch.sample(logits, inv_temp, top_k, top_p, min_p, _EXAMPLE_SEED, _EXAMPLE_OFFSET)}
    return tle.Launch(grid=(rows,), args=(logits, inv_temp, vals, cols, stats, out, logits.stride(0), n_cols) + words,
                      kwargs=dict(num_warps=NUM_WARPS, **_draw_blocks(_blocks(n_cols, cap))), outputs={"out": out},
                      reference=ref, bytes=logits.numel() * logits.element_size(),
                      label=f"{rows}x{n_cols} {str(logits.dtype)[6:]}")


@tle.example(top_k_top_p_mask_kernel)
def _mask_example(device, size):
    logits, _, top_k, top_p, _, cap = _example_rows(device, size)
    rows, n_cols = logits.shape
    out = torch.full_like(logits, float("nan"))
    vals, cols = _scratch(rows, device, cap, torch.zeros)         # examples build the same inputs each time

    def ref():
        return {"out": sampling_torch.top_k_top_p_mask(logits, top_k, top_p)}
    return tle.Launch(grid=(rows,), args=(logits, top_k, top_p, vals, cols, out, logits.stride(0), out.stride(0),
                                          n_cols),
                      kwargs=dict(num_warps=NUM_WARPS, **_blocks(n_cols, cap)), outputs={"out": out}, reference=ref,
                      bytes=2 * logits.numel() * logits.element_size(),
                      label=f"{rows}x{n_cols} {str(logits.dtype)[6:]}")


# -- the operators' recipes: forward-only custom ops ---------------------------------------------------------
def _contiguous_rows(run, logits: torch.Tensor, *rest):
    return run(logits if logits.stride(-1) == 1 else logits.contiguous(), *rest)


def _sample_rows(run, logits: torch.Tensor, inv_temp: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                 min_p: torch.Tensor, seed: int, offset: int) -> torch.Tensor:
    if logits.shape[0] == 0:
        return torch.empty(0, device=logits.device, dtype=torch.int64)
    return _contiguous_rows(run, logits, inv_temp, top_k, top_p, min_p, seed & U64, offset & U64)


def _mask_rows(run, logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    if logits.shape[0] == 0:
        return logits.new_empty(logits.shape)
    return _contiguous_rows(run, logits, top_k, top_p)


SAMPLE = Recipe("sample", forward=Stage(
    torch=sampling_torch.sample, kernels=_kernel_sample, adapt=_sample_rows,
    fake=lambda logits, *_: logits.new_empty(logits.shape[0], dtype=torch.int64)))
TOP_K_TOP_P_MASK = Recipe("top_k_top_p_mask", forward=Stage(
    torch=sampling_torch.top_k_top_p_mask, kernels=_kernel_mask, adapt=_mask_rows,
    fake=lambda logits, *_: logits.new_empty(logits.shape)))


# -- the public surface -------------------------------------------------------------------------------------
def _per_row(value, name: str, rows: int, device, dtype, default, valid, what: str) -> torch.Tensor:
    """A number or a [rows] tensor on `device` as a [rows] tensor of `dtype` (None: `default`); a number is
    checked with `valid`."""
    if value is None:
        value = default
    if isinstance(value, torch.Tensor):
        if value.shape != (rows,):
            raise tle.LaunchError(f"'{name}' is one value per row: a tensor of shape ({rows},), got "
                                  f"{tuple(value.shape)}")
        if value.device != device:
            raise tle.LaunchError(f"'{name}' is on {value.device}; the logits are on {device}")
        kind_ok = value.is_floating_point() if dtype.is_floating_point else \
            not (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool)
        if not kind_ok:
            raise tle.LaunchError(f"'{name}' has dtype {value.dtype}; expected {what}")
        return value.to(dtype)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not valid(value):
        raise tle.LaunchError(f"'{name}' must be {what}, got {value!r}")
    return torch.full((rows,), value, device=device, dtype=dtype)


def _check_logits(logits, op: str):
    check_float(logits, "logits", rank=2)
    if logits.shape[1] == 0:
        raise tle.LaunchError(f"tle.ops.{op}: 'logits' has no columns (shape {tuple(logits.shape)})")
    if logits.shape[1] >= 2**31:
        raise tle.LaunchError(f"tle.ops.{op}: 'logits' has {logits.shape[1]} columns; at most 2^31 - 1")


def _sample_arguments(logits, temperature, top_k, top_p, min_p):
    """(inv_temp, top_k, top_p, min_p) as [B] tensors, the arguments checked."""
    _check_logits(logits, "sample")
    rows = logits.shape[0]
    device = logits.device
    temp = _per_row(temperature, "temperature", rows, device, torch.float32, 1.0,
                    lambda t: t >= 0 and t == t, "a number >= 0 (0: the largest logit) or a [B] tensor")
    inv_temp = torch.where(temp > 0, 1.0 / temp, torch.zeros((), device=device))
    k, p = _mask_arguments(logits, top_k, top_p)
    mp = _per_row(min_p, "min_p", rows, device, torch.float32, 0.0, lambda p: 0 <= p <= 1,
                  "a number in [0, 1] or a [B] tensor")
    return inv_temp, k, p, mp


def _mask_arguments(logits, top_k, top_p):
    """(top_k, top_p) as [B] tensors, checked."""
    rows, n_cols = logits.shape
    k = _per_row(top_k, "top_k", rows, logits.device, torch.int32, n_cols, lambda k: isinstance(k, int) and k >= 1,
                 "an int >= 1 or a [B] integer tensor")
    p = _per_row(top_p, "top_p", rows, logits.device, torch.float32, 1.0, lambda p: 0 < p <= 1,
                 "a number in (0, 1] or a [B] tensor")
    return k, p


def sample(logits: torch.Tensor, temperature=1.0, top_k=None, top_p=None, min_p=None, seed: int | None = None,
           generator: torch.Generator | None = None, *, backend: str | None = None,
           fallback: str | None = None) -> torch.Tensor:
    """A token per row of logits [B, V] (int64 [B]) drawn from softmax(logits / temperature) over the kept
    set of top_k, then top_p, and min_p (see the module's docstring); forward only."""
    inv_temp, k, p, mp = _sample_arguments(logits, temperature, top_k, top_p, min_p)
    if seed is not None and generator is not None:
        raise tle.LaunchError("pass 'seed' or 'generator', not both")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise tle.LaunchError(f"'seed' must be an int (taken modulo 2^64), got {type(seed).__name__}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise tle.LaunchError(f"'generator' must be a torch.Generator, got {type(generator).__name__}")
    b = SAMPLE.resolve(logits.device, backend, fallback)
    check_kernel_dtypes("sample", b, logits=logits)
    offset = 0
    if seed is None:
        seed, offset = draw_seed_offset(logits.device, (logits.shape[0] + 3) // 4, generator)
    return SAMPLE(logits, inv_temp, k, p, mp, _as_i64(seed), _as_i64(offset), backend=b)


def top_k_top_p_mask(logits: torch.Tensor, top_k=None, top_p=None, *, backend: str | None = None,
                     fallback: str | None = None) -> torch.Tensor:
    """logits [B, V] where kept by top_k, then top_p over the renormalized top-k set, -inf elsewhere (the
    logits' dtype); forward only (see the module's docstring)."""
    _check_logits(logits, "top_k_top_p_mask")
    k, p = _mask_arguments(logits, top_k, top_p)
    b = TOP_K_TOP_P_MASK.resolve(logits.device, backend, fallback)
    check_kernel_dtypes("top_k_top_p_mask", b, logits=logits)
    return TOP_K_TOP_P_MASK(logits, k, p, backend=b)


# -- tests and benchmarks -----------------------------------------------------------------------------------
def sample_reference(logits, temperature=1.0, top_k=None, top_p=None, min_p=None, seed=None, generator=None):
    """The tokens every backend draws, from torch alone (no custom op); needs an explicit seed."""
    if seed is None:
        raise ValueError("sample_reference() reproduces the tokens only from an explicit seed")
    return sampling_torch.sample(logits, *_sample_arguments(logits, temperature, top_k, top_p, min_p), seed & U64, 0)


def mask_reference(logits, top_k=None, top_p=None):
    _check_logits(logits, "top_k_top_p_mask")
    return sampling_torch.top_k_top_p_mask(logits, *_mask_arguments(logits, top_k, top_p))


def _logits(device, dtype, rows, cols, scale=3.0):
    return (torch.randn(rows, cols, device=device) * scale).to(dtype)


def sample_samples(device, dtype):
    rows = lambda *v: torch.tensor(v, device=device)                                       # noqa: E731
    tie = _logits(device, dtype, 3, 50)
    tie[:, 7] = tie[:, 9] = tie.max() + 1
    return [Sample((_logits(device, dtype, 4, 100),), dict(seed=1), label="no filter"),
            Sample((_logits(device, dtype, 4, 100), 0.8, 10), dict(seed=2), label="top_k 10"),
            Sample((_logits(device, dtype, 4, 3000), 1.0, None, 0.9), dict(seed=3), label="top_p 0.9, 3000 columns"),
            Sample((_logits(device, dtype, 3, 257), 1.3, 20, 0.7, 0.01), dict(seed=2**64 - 1),
                   label="top_k, top_p and min_p, seed 2^64 - 1"),
            Sample((_logits(device, dtype, 3, 64), rows(0.5, 1.0, 2.0), rows(1, 5, 64).int(), rows(0.3, 1.0, 0.95),
                    rows(0.0, 0.2, 0.0)), dict(seed=77), label="per-row tensors"),
            Sample((tie, 0.0), dict(seed=5), label="temperature 0, a tie at the top"),
            Sample((_logits(device, dtype, 1, 1), 1.0, 1, 0.5), dict(seed=6), label="one column"),
            Sample((_logits(device, dtype, 0, 10),), dict(seed=7), label="no rows")]


def mask_samples(device, dtype):
    return [Sample((_logits(device, dtype, 4, 100), 10), label="top_k 10"),
            Sample((_logits(device, dtype, 4, 3000), None, 0.9), label="top_p 0.9, 3000 columns"),
            Sample((_logits(device, dtype, 3, 257), 20, 0.7), label="top_k then top_p"),
            Sample((_logits(device, dtype, 3, 64), torch.tensor([1, 5, 64], device=device),
                    torch.tensor([0.3, 1.0, 0.95], device=device)), label="per-row tensors"),
            Sample((_logits(device, dtype, 0, 10), 3), label="no rows")]


def _filters(word: str) -> tuple:
    """(top_k, top_p) of a benchmark shape's filter word: "k50p90" is top_k 50 then top_p 0.90, "k50" and "p90"
    one of them."""
    import re
    m = re.fullmatch(r"(?:k(\d+))?(?:p(\d+))?", word)
    if not m or not word:
        raise ValueError(f"a filter word reads k<top_k>p<top_p in hundredths>, e.g. k50p90, k50, p90; got {word!r}")
    return (int(m[1]) if m[1] else None), (int(m[2]) / 100 if m[2] else None)


def _bench_make(shape, dtype, device):
    """shape (B, V, filters): logits randn * 4 (about the spread of a language model's logits)."""
    rows, cols, word = shape
    k, p = _filters(word)
    return Sample((_logits(device, dtype, rows, cols, scale=4.0), 1.0, k, p), dict(seed=1234))


def _bench_bytes(sample, mode):
    logits = sample.args[0]
    return logits.numel() * logits.element_size()


def _eager(sample):
    """What a torch user writes: sort, the top-k and top-p masks from the sorted row, softmax, multinomial."""
    logits, temperature, k, p = sample.args[:4]

    def run():
        y = logits.float() / temperature
        v, order = y.sort(dim=-1, descending=True)
        if k is not None:
            v = v.masked_fill(torch.arange(v.shape[-1], device=v.device) >= k, float("-inf"))
        if p is not None:
            probs = v.softmax(-1)
            v = v.masked_fill(probs.cumsum(-1) - probs >= p, float("-inf"))
        choice = torch.multinomial(v.softmax(-1), 1)
        return order.gather(-1, choice).squeeze(-1)
    return run


def _flashinfer(sample):
    import flashinfer.sampling as fs
    logits, temperature, k, p = sample.args[:4]
    y = logits.float() / temperature
    if k is not None and p is not None:
        return lambda: fs.top_k_top_p_sampling_from_logits(y, k, p, filter_apply_order="top_k_first")
    if k is not None:
        return lambda: fs.top_k_sampling_from_probs(torch.softmax(y, -1), k)
    if p is not None:
        return lambda: fs.top_p_sampling_from_probs(torch.softmax(y, -1), p)
    return lambda: fs.sampling_from_logits(y)


def _bench_check(sample, outputs, grads, upstream):
    """Every token lies in its row's kept set (the sort-based thresholds of kernels/sampling_torch.py)."""
    logits, temperature, k, p = sample.args[:4]
    inv_temp, kk, pp, _ = _sample_arguments(logits, temperature, k, p, None)
    y = sampling_torch.scaled(logits, inv_temp)
    tau = sampling_torch.thresholds(y, kk, pp)
    tokens = outputs[0]
    inside = y.gather(1, tokens[:, None]) >= tau
    assert bool(inside.all()), f"{int((~inside).sum())} of {tokens.numel()} tokens outside the kept set"
    return 0.0


SHAPES = [(128, 131072, "k50p90"), (128, 131072, "k50"), (128, 131072, "p90"), (128, 262144, "k50p90"),
          (128, 262144, "k50"), (128, 262144, "p90")]

OPERATOR = (
    Operator("sample", fn=sample, reference=sample_reference, samples=sample_samples,
             forward_only="a sampled token has no gradient",
             bench=BenchSpec(dry_shapes=[(2, 256, "k50p90"), (2, 256, "p90")],
                             shapes=SHAPES, make=_bench_make, bytes=_bench_bytes, eager=_eager,
                             peers={"flashinfer": _flashinfer}, shape_help="BxVxFILTERS (FILTERS: k<top_k>p<top_p in "
                             "hundredths>, e.g. k50p90, k50, p90)", check=_bench_check)),
    Operator("top_k_top_p_mask", fn=top_k_top_p_mask, reference=mask_reference, samples=mask_samples,
             forward_only="a filter: the kept logits pass unchanged, the rest become -inf; not differentiated"),
)
