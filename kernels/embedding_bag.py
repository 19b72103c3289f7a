"""EmbeddingBag: each bag's output row reduces the weight rows its indices pick, by sum, mean or max.

    out[b] = reduce(weight[i] * per_sample_weights[p] for position p, index i of bag b if i != padding_idx)
    bag b = input[offsets[b]:offsets[b + 1]]       (the last bag runs to the end of input; with
                                                    include_last_offset=True offsets holds one entry more)

`tle.ops.embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None)` takes
torch.nn.functional.embedding_bag's arguments with its meaning: 1-D input with 1-D offsets, or 2-D input of
equal bags (offsets None); entries equal to padding_idx count neither in a sum, a mean's count nor a max; an
empty bag (or one of padding only) gives zeros; per_sample_weights (mode "sum" only, weight's dtype, input's
shape) scale each gathered row and get their own gradient. Three of torch's arguments are refused by name:
max_norm (torch renormalizes weight's rows in place before the lookup: renormalize first, e.g. with
torch.embedding_renorm_), scale_grad_by_freq and sparse=True (the kernels write a dense weight gradient).

Keyword-only: `backward` chooses how the weight gradient is computed on the kernel backends: "sorted" (sum
and mean; deterministic, the default there) or "atomic" (every mode; the only one for max). The kernels and
their costs: kernels/embedding_bag_kernels.py. tle-bench measures the default as the operator and "atomic" as
the peers "tle <backend>, backward=atomic".

Checks: ranks, shapes and dtypes of every argument, padding_idx in [-num_embeddings, num_embeddings) as torch.
Where the tensors are on the CPU, also what torch's CPU kernel checks, which costs no device synchronization
there: offsets[0] == 0, offsets non-decreasing, offsets[-1] <= len(input), every index in range. On a GPU none
of these is checked (a check would synchronize with the device on every call; torch's CUDA kernel does not
check the offsets either). There the offsets must be non-decreasing; indices before offsets[0] belong to no
bag and a bag ends at len(input) at the latest, in the forward and the backwards alike; an index out of range
is undefined in the forward (Triton reads outside weight; TileLang's bounds predication reads zeros) and left
out of the sorted backward.

TileLang kernels are compiled for their shapes: every new number of indices or bags compiles the forward and
backward again (cached on disk after the first time)."""
from __future__ import annotations

from typing import Optional

import torch

import tle
from tle.checks import check_tensor
from tle.oplib import BenchSpec, Operator, Sample, check_float, check_kernel_dtypes
from tle.oplib.recipe import Recipe, Stage
from tle.oplib.rows import torch_compute_dtype
from tle.kernels import embedding_bag_kernels as kernels
from tle.kernels import embedding_bag_torch as torch_side

INDEX_DTYPES = (torch.int32, torch.int64)
MODES = ("sum", "mean", "max")
BACKWARDS = ("sorted", "atomic")


def default_backward(mode: str) -> str:
    return "atomic" if mode == "max" else "sorted"


# -- the torch backend (kernels/embedding_bag_torch.py) ---------------------------------------------------
def _torch_backward(dy, indices, offsets, per_sample_weights, aux, weight, num_weights, mode, padding_idx,
                    backward, need_weight_grad):
    dw = (torch_side.weight_grad(dy, indices, offsets, per_sample_weights, aux, num_weights, mode, padding_idx)
          if need_weight_grad else dy.new_empty(0))
    dpsw = (torch_side.per_sample_weights_grad(dy, weight, indices, offsets, padding_idx) if weight is not None
            else dy.new_empty(0))
    return dw, dpsw


# -- the kernel backends ------------------------------------------------------------------------------------
def _kernel_forward(weight, indices, offsets, per_sample_weights, mode, padding_idx, backend):
    return kernels.forward(weight, indices, offsets, per_sample_weights, mode, padding_idx, backend)


def _kernel_backward(dy, indices, offsets, per_sample_weights, aux, weight, num_weights, mode, padding_idx,
                     backward, need_weight_grad, backend):
    dw = (kernels.weight_grad(dy, indices, offsets, per_sample_weights, aux, num_weights, mode, padding_idx,
                              backward, backend) if need_weight_grad else dy.new_empty(0))
    if weight is None:
        return dw, dy.new_empty(0)
    return dw, kernels.per_sample_weights_grad(dy, weight, indices, offsets, padding_idx, backend)


# -- the operator's recipe: its custom ops and autograd ---------------------------------------------------
def _unit_stride_rows(weight):
    """weight with contiguous rows (the kernels take the row stride; a transposed weight is copied)."""
    return weight.contiguous() if weight is not None and weight.shape[1] > 1 and weight.stride(1) != 1 else weight


def _contiguous(run, weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                per_sample_weights: Optional[torch.Tensor], mode: str, padding_idx: int,
                backward: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(the bags' rows, what the backward needs of the forward: per bag 1 / max(count, 1) for mean, per bag and
    column the chosen row for max, nothing for sum); `backward` is the backward's choice, saved for it."""
    psw = per_sample_weights.contiguous() if per_sample_weights is not None else None
    return run(_unit_stride_rows(weight), indices.contiguous(), offsets.contiguous(), psw, mode, padding_idx)


def _backward_contiguous(run, dy: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                         per_sample_weights: Optional[torch.Tensor], aux: torch.Tensor, weight: Optional[torch.Tensor],
                         num_weights: int, mode: str, padding_idx: int, backward: str, need_weight_grad: bool
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """(dweight, or an empty tensor where not needed; dper_sample_weights where `weight` is given (it is saved
    only then), else an empty tensor)."""
    psw = per_sample_weights.contiguous() if per_sample_weights is not None else None
    return run(dy.contiguous(), indices.contiguous(), offsets.contiguous(), psw, aux, _unit_stride_rows(weight),
               num_weights, mode, padding_idx, backward, need_weight_grad)


def _forward_fake(weight, indices, offsets, per_sample_weights, mode, padding_idx, backward):
    n_bags, dim = offsets.shape[0], weight.shape[1]
    aux = {"max": lambda: weight.new_empty((n_bags, dim), dtype=torch.int32),
           "mean": lambda: weight.new_empty(n_bags, dtype=torch_compute_dtype(weight)),
           "sum": lambda: weight.new_empty(0, dtype=torch_compute_dtype(weight))}[mode]()
    return weight.new_empty((n_bags, dim)), aux


def _backward_fake(dy, indices, offsets, per_sample_weights, aux, weight, num_weights, mode, padding_idx,
                   backward, need_weight_grad):
    dw = dy.new_empty((num_weights, dy.shape[1])) if need_weight_grad else dy.new_empty(0)
    return dw, (weight.new_empty(indices.shape[0]) if weight is not None else dy.new_empty(0))


def _save(ctx, inputs, output):
    weight, indices, offsets, psw, ctx.mode, ctx.padding_idx, ctx.backward = inputs
    ctx.save_for_backward(indices, offsets, psw, output[1], weight if psw is not None else None)
    ctx.num_weights = weight.shape[0]
    ctx.set_materialize_grads(False)     # no zeros made on the host for the auxiliary output's unused gradient


def _grads(ctx, backward, dy, _daux):
    if dy is None:
        return ()
    indices, offsets, psw, aux, weight = ctx.saved_tensors
    need_dw = ctx.needs_input_grad[0]
    dw, dpsw = backward(dy, indices, offsets, psw, aux, weight if ctx.needs_input_grad[3] else None,
                        ctx.num_weights, ctx.mode, ctx.padding_idx, ctx.backward, need_dw)
    return (dw if need_dw else None, None, None, dpsw if ctx.needs_input_grad[3] else None)


EMBEDDING_BAG = Recipe(
    "embedding_bag",
    forward=Stage(torch=torch_side.forward, kernels=_kernel_forward, adapt=_contiguous, fake=_forward_fake),
    backward=Stage(torch=_torch_backward, kernels=_kernel_backward, adapt=_backward_contiguous, fake=_backward_fake),
    save=_save, grads=_grads)


# -- the public surface -------------------------------------------------------------------------------------
def _check_offsets_on_cpu(indices, offsets, num_weights):
    """What torch's CPU kernel checks, where it costs no device synchronization (CPU tensors)."""
    n = indices.shape[0]
    if offsets.shape[0]:
        if int(offsets[0]) != 0:
            raise tle.LaunchError(f"'offsets' must start at 0 (the first bag starts at the first index); "
                                  f"got offsets[0] = {int(offsets[0])}")
        if offsets.shape[0] > 1 and bool((offsets[1:] < offsets[:-1]).any()):
            raise tle.LaunchError("'offsets' must be non-decreasing")
        if int(offsets[-1]) > n:
            raise tle.LaunchError(f"'offsets' runs past the end of input: offsets[-1] = {int(offsets[-1])} "
                                  f"> len(input) = {n}")
    if n:
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= num_weights:
            bad = lo if lo < 0 else hi
            raise tle.LaunchError(f"'input' holds {bad}, outside the {num_weights} rows of weight "
                                  f"(valid: 0 .. {num_weights - 1})")


def _padding(padding_idx, num_weights: int) -> int:
    """torch's normalization: None -> -1 (no padding), a negative index counts from the end."""
    if padding_idx is None:
        return -1
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, int):
        raise tle.LaunchError(f"'padding_idx' must be an int or None, got {type(padding_idx).__name__}")
    if not -num_weights <= padding_idx < num_weights:
        raise tle.LaunchError(f"'padding_idx' must be within the {num_weights} rows of weight "
                              f"(-{num_weights} .. {num_weights - 1}); got {padding_idx}")
    return padding_idx + num_weights if padding_idx < 0 else padding_idx


def _refused(max_norm, scale_grad_by_freq, sparse):
    """The torch arguments the kernels do not honor, named (a message), or None."""
    if max_norm is not None:
        return ("'max_norm' is not taken: torch renormalizes weight's rows in place before the lookup; do that first "
                "(e.g. torch.embedding_renorm_(weight, input, max_norm, norm_type) under torch.no_grad())")
    if scale_grad_by_freq:
        return "'scale_grad_by_freq=True' is not taken: the weight gradient is not scaled by index frequency"
    if sparse:
        return "'sparse=True' is not taken: the weight gradient is a dense tensor"
    return None


def _check_mode(mode, backward, per_sample_weights):
    if mode not in MODES:
        raise tle.LaunchError(f"'mode' must be one of {', '.join(map(repr, MODES))}; got {mode!r}")
    if backward is not None and backward not in BACKWARDS:
        raise tle.LaunchError(f"'backward' must be one of {', '.join(map(repr, BACKWARDS))}; got {backward!r}")
    if mode == "max" and backward == "sorted":
        raise tle.LaunchError("'backward'='sorted' is for modes 'sum' and 'mean'; mode 'max' has the atomic "
                              "backward only")
    if per_sample_weights is not None and mode != "sum":
        raise tle.LaunchError(f"'per_sample_weights' is only taken with mode='sum' (as torch); got mode={mode!r}")


def _as_bags(input, offsets, per_sample_weights, include_last_offset):
    """(indices 1-D, the offset of each bag 1-D, per_sample_weights 1-D or None) from torch's two forms: 1-D
    input with offsets, or 2-D input of one bag per row (offsets None; include_last_offset is then moot). With
    include_last_offset, offsets' last entry closes the last bag: torch's kernels run the last bag to the end of
    input whatever it holds (its documentation has it equal len(input)), and so do these."""
    if input.dim() == 2:
        if offsets is not None:
            raise tle.LaunchError("'offsets' must be None with 2-D input (each row of input is a bag)")
        bags, size = input.shape
        if per_sample_weights is not None:
            check_tensor(per_sample_weights, "per_sample_weights", shape=input.shape)
            per_sample_weights = per_sample_weights.reshape(-1)
        offsets = torch.arange(bags, device=input.device, dtype=input.dtype) * size
        return input.reshape(-1), offsets, per_sample_weights
    if offsets is None:
        raise tle.LaunchError("'offsets' is required with 1-D input (2-D input holds one bag per row)")
    check_tensor(offsets, "offsets", dtypes=INDEX_DTYPES, rank=1, device=input.device)
    if per_sample_weights is not None:
        check_tensor(per_sample_weights, "per_sample_weights", shape=input.shape)
    if include_last_offset:
        if offsets.shape[0] == 0:
            raise tle.LaunchError("'offsets' must hold at least one entry with include_last_offset=True (its "
                                  "last entry closes the last bag)")
        offsets = offsets[:-1]
    return input, offsets, per_sample_weights


def embedding_bag(input: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor | None = None,
                  max_norm: float | None = None, norm_type: float = 2, scale_grad_by_freq: bool = False,
                  mode: str = "mean", sparse: bool = False, per_sample_weights: torch.Tensor | None = None,
                  include_last_offset: bool = False, padding_idx: int | None = None, *, backward: str | None = None,
                  backend: str | None = None, fallback: str | None = None) -> torch.Tensor:
    """torch.nn.functional.embedding_bag on a tle backend: [bags, weight.shape[1]], each row its bag's weight
    rows reduced by `mode` (see the module doc). `backward`: "sorted" (sum and mean; deterministic, their
    default) or "atomic" (max's only), how the weight gradient is computed on the kernel backends."""
    check_float(weight, "weight", rank=2)
    check_tensor(input, "input", dtypes=INDEX_DTYPES, rank=(1, 2), device=weight.device)
    refused = _refused(max_norm, scale_grad_by_freq, sparse)
    if refused:
        raise tle.LaunchError(f"tle.ops.embedding_bag: {refused}")
    _check_mode(mode, backward, per_sample_weights)
    if per_sample_weights is not None:
        check_tensor(per_sample_weights, "per_sample_weights", dtypes=(weight.dtype,), device=weight.device)
    num_weights = weight.shape[0]
    pad = _padding(padding_idx, num_weights)
    indices, offsets, psw = _as_bags(input, offsets, per_sample_weights, include_last_offset)
    if weight.device.type == "cpu" and not torch.compiler.is_compiling():
        # a traced graph holds no data-dependent branches (fullgraph compiles): unchecked there, as on CUDA
        _check_offsets_on_cpu(indices, offsets, num_weights)
    b = EMBEDDING_BAG.resolve(weight.device, backend, fallback)
    check_kernel_dtypes("embedding_bag", b, weight=weight)
    out, _ = EMBEDDING_BAG(weight, indices, offsets, psw, mode, pad, backward or default_backward(mode), backend=b)
    return out


class EmbeddingBag(torch.nn.Module):
    """torch.nn.EmbeddingBag on a tle backend (`backend=`, else TLE_BACKEND): torch's constructor and forward
    (input, offsets=None, per_sample_weights=None); max_norm, scale_grad_by_freq and sparse=True are refused by
    name (see tle.ops.embedding_bag)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                 _weight: torch.Tensor | None = None, include_last_offset: bool = False,
                 padding_idx: int | None = None, device=None, dtype=None, *, backward: str | None = None,
                 backend: str | None = None, fallback: str | None = None):
        super().__init__()
        refused = _refused(max_norm, scale_grad_by_freq, sparse)
        if refused:
            raise ValueError(f"tle.ops.EmbeddingBag: {refused}")
        try:
            _check_mode(mode, backward, None)
        except tle.LaunchError as e:
            raise ValueError(f"tle.ops.EmbeddingBag: {e}") from None
        self.num_embeddings, self.embedding_dim, self.mode = num_embeddings, embedding_dim, mode
        self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse = max_norm, norm_type, False, False
        self.include_last_offset = include_last_offset
        self.padding_idx = _padding(padding_idx, num_embeddings) if padding_idx is not None else None
        self.backward, self.backend, self.fallback = backward, backend, fallback
        if _weight is None:
            self.weight = torch.nn.Parameter(torch.empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(f"tle.ops.EmbeddingBag: '_weight' has shape {tuple(_weight.shape)}; expected "
                                 f"({num_embeddings}, {embedding_dim})")
            self.weight = torch.nn.Parameter(_weight)

    def reset_parameters(self):
        torch.nn.init.normal_(self.weight)
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].fill_(0)

    def forward(self, input, offsets=None, per_sample_weights=None):
        return embedding_bag(input, self.weight, offsets, mode=self.mode, per_sample_weights=per_sample_weights,
                             include_last_offset=self.include_last_offset, padding_idx=self.padding_idx,
                             backward=self.backward, backend=self.backend or None, fallback=self.fallback)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"
        if self.include_last_offset:
            s += ", include_last_offset=True"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s + f", backward={self.backward or default_backward(self.mode)!r}, backend={self.backend}"


# -- tests and benchmarks -----------------------------------------------------------------------------------
def reference(input, weight, offsets=None, *args, backward=None, **kwargs):
    """Plain differentiable torch (no custom op): the tests' ground truth, evaluated in fp64."""
    return torch.nn.functional.embedding_bag(input, weight, offsets, *args, **kwargs)


def samples(device, dtype):
    """Small cases; `dtype` applies to weight and per-sample weights (indices and offsets are integers)."""
    g = torch.Generator().manual_seed(0)

    def w(e, dim):
        return torch.randn(e, dim, generator=g).to(device=device, dtype=dtype)

    def idx(e, *shape, dtype=torch.int64):
        return torch.randint(0, e, shape, generator=g).to(device=device, dtype=dtype)

    def offs(*lengths, dtype=torch.int64, last=False):
        starts = [0]
        for n in lengths[:-1] if not last else lengths:
            starts.append(starts[-1] + n)
        return torch.tensor(starts, device=device, dtype=dtype)

    def psw(n):
        return torch.rand(n, generator=g).to(device=device, dtype=dtype) + 0.5

    repeated = torch.tensor([3, 3, 1, 3, 0, 1, 1, 3, 2], device=device)        # within and across bags
    padded = torch.tensor([4, 2, 4, 4, 6, 2, 4, 0, 4], device=device)          # bag 2 holds only padding
    return [Sample((idx(10, 5), w(10, 1), offs(2, 3)), label="1 column"),
            Sample((idx(13, 20), w(13, 7), offs(3, 0, 6, 1, 10)), label="7 columns, an empty bag"),
            Sample((repeated, w(5, 33), offs(3, 2, 4)), label="33 columns, repeated indices"),
            Sample((padded, w(9, 33), offs(3, 2, 2, 2)), dict(padding_idx=4), label="padding_idx, a padding-only bag"),
            Sample((padded, w(9, 33), offs(3, 2, 2, 2)), dict(padding_idx=-5), label="negative padding_idx"),
            Sample((idx(3, 8, dtype=torch.int32), w(3, 1000), offs(0, 3, 1, 4, dtype=torch.int32)),
                   dict(backward="atomic"), label="1000 columns, int32, atomic backward"),
            Sample((idx(6, 150), w(6, 20), offs(70, 0, 80, 0)), dict(padding_idx=0, backward="atomic"),
                   label="long bags, padding, atomic backward"),
            Sample((repeated, w(5, 33), offs(3, 2, 4)), dict(mode="sum"), label="sum"),
            Sample((padded, w(9, 40), offs(3, 2, 2, 2)), dict(mode="sum", padding_idx=4, backward="atomic"),
                   label="sum, padding, atomic backward"),
            Sample((padded, w(9, 17), offs(3, 2, 2, 2)), dict(mode="sum", per_sample_weights=psw(9), padding_idx=4),
                   label="sum, per-sample weights, padding"),
            Sample((idx(7, 4, 3), w(7, 24)), dict(mode="sum", per_sample_weights=psw(12).reshape(4, 3),
                                                  backward="atomic"),
                   label="2-D input, per-sample weights, atomic backward"),
            Sample((idx(8, 30), w(8, 300)), dict(offsets=offs(10, 0, 12, 8), mode="max"), label="max, an empty bag"),
            Sample((padded, w(9, 33), offs(3, 2, 2, 2)), dict(mode="max", padding_idx=4),
                   label="max, a padding-only bag"),
            Sample((idx(11, 12), w(11, 9), offs(5, 0, 4, last=True)), dict(include_last_offset=True, mode="mean"),
                   label="include_last_offset (3 indices past the last bag)"),
            Sample((idx(12, 5, 4), w(12, 16)), dict(mode="max"), label="2-D input, max"),
            Sample((idx(12, 0), w(12, 16), offs(0, 0, 0)), label="no indices: empty bags"),
            Sample((idx(12, 0), w(12, 16), offs()[:0]), label="no bags")]


MODE_HELP = "MODE: mean, sum, max, or psw (sum with per-sample weights)"


def _bench_make(shape, dtype, device):
    e, dim, bags, size, mode = shape
    if mode not in MODES + ("psw",):
        raise ValueError(f"embedding_bag shape {shape}: {MODE_HELP}; got {mode!r}")
    weight = torch.randn(e, dim, device=device, dtype=dtype)
    indices = torch.randint(0, e, (bags * size,), device=device)
    offsets = torch.arange(0, bags * size, size, device=device)
    if mode == "psw":
        return Sample((indices, weight, offsets), dict(mode="sum", per_sample_weights=torch.rand(
            bags * size, device=device, dtype=dtype)))
    return Sample((indices, weight, offsets), dict(mode=mode))


def _bench_bytes(sample, mode):
    """fwd: the gathered weight rows (one per index) read and the output written (and the per-sample weights
    read); bwd: dy read and the dense dweight written once (every row: the zeros of untouched rows are part of
    the result), and with per-sample weights the gathered rows read again for their gradient. Indices, offsets
    and the bookkeeping (inverse counts, chosen rows, the sort) are not counted."""
    indices, weight, offsets = sample.args
    row = weight.shape[1] * weight.element_size()
    psw = sample.kwargs.get("per_sample_weights")
    if mode == "fwd":
        return (indices.shape[0] + offsets.shape[0]) * row + (psw.numel() * psw.element_size() if psw is not None
                                                               else 0)
    return (offsets.shape[0] + weight.shape[0]) * row + (indices.shape[0] * row if psw is not None else 0)


def _eager(sample):
    return lambda *a, s=sample: torch.nn.functional.embedding_bag(*s.args, **s.kwargs)


def _tle_variant(backend, backward):
    """The atomic weight gradient of sum and mean, as a peer of its own (the forward is the same kernel)."""
    def make(sample):
        if sample.kwargs.get("mode") == "max":
            return None
        return lambda s=sample: embedding_bag(*s.args, **s.kwargs, backward=backward, backend=backend)
    return make


OPERATOR = Operator(
    "embedding_bag", fn=embedding_bag, reference=reference, samples=samples, grad_inputs=(1, "per_sample_weights"),
    bench=BenchSpec(dry_shapes=[(1024, 64, 32, 8, "mean"), (1024, 64, 32, 8, "max")],
                    shapes=[(1048576, 256, 65536, 32, "mean"), (1048576, 256, 65536, 32, "sum"),
                            (1048576, 256, 65536, 32, "psw"), (1048576, 256, 65536, 32, "max"),
                            (1048576, 64, 65536, 32, "mean"), (1048576, 128, 65536, 32, "mean"),
                            (1048576, 512, 65536, 32, "mean"), (1048576, 1024, 65536, 32, "mean")],
                    make=_bench_make, bytes=_bench_bytes, eager=_eager,
                    peers={f"tle {b}, backward=atomic": _tle_variant(b, "atomic")
                           for b in tle.oplib.backend.KERNEL_BACKENDS},
                    shape_help="NUM_EMBEDDINGSxDIMxBAGSxBAG_SIZExMODE (" + MODE_HELP + ")"))
