"""What the tests and tle-bench know of an operator: one `Operator` record per operator module.

    OPERATOR = Operator("rms_norm", fn=rms_norm, reference=reference, samples=samples,
                        grad_inputs=(0, 1, 3), bench=BenchSpec(...))

The tests run `fn` on every backend over `samples(device, dtype)` against `reference` (plain torch,
differentiable, evaluated in fp64), forward and backward; tle-bench times `fn` beside the peers of `bench`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class Sample:
    """One call of an operator: positional arguments and keywords (no `backend`)."""
    args: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""

    def get(self, key):
        """The input at `key`: a position in args or a keyword name (None where absent)."""
        if isinstance(key, str):
            return self.kwargs.get(key)
        return self.args[key] if key < len(self.args) else None

    def replaced(self, values: dict) -> "Sample":
        """This call with the inputs at the keys of `values` (positions or keyword names) swapped."""
        return Sample(tuple(values.get(i, a) for i, a in enumerate(self.args)),
                      {k: values.get(k, v) for k, v in self.kwargs.items()}, self.label)


@dataclass(frozen=True)
class Sweep:
    """One size of a shape taken over several values, the others held (`tle-bench --sweep`: a table and a plot
    against it). axis: its name as the page writes it ("T"); base: the shape held; index: the swept size's
    position in it; sizes: the values it takes, ascending."""
    axis: str
    base: tuple
    index: int
    sizes: tuple

    def __post_init__(self):
        if not 0 <= self.index < len(self.base):
            raise ValueError(f"Sweep index {self.index} is outside the shape {self.base}")
        if not self.sizes or list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError(f"Sweep sizes {self.sizes} must be distinct and ascending")

    def shapes(self) -> list[tuple]:
        return [self.base[:self.index] + (size,) + self.base[self.index + 1:] for size in self.sizes]

    def held(self) -> str:
        """The shape with the swept size named, e.g. "1xTx32x128"."""
        return "x".join(self.axis if i == self.index else str(v) for i, v in enumerate(self.base))


@dataclass
class BenchSpec:
    """How tle-bench measures an operator.

    shapes: the default problem shapes (tuples of ints), the first being the headline one;
    make: (shape, dtype, device) -> Sample, inputs allocated once, outside the timed region;
    eager: (sample) -> a callable running what a torch user would write (the anchor of the ratios),
        differentiable; torch.compile of it is the second peer;
    bytes: (sample, mode) -> bytes moved by the operator in that mode ("fwd" or "bwd"), each tensor read
        or written once, for TB/s (a memory-bound operator; the copy of as many bytes is its ceiling);
    flops: (sample, mode) -> floating-point operations of the operator in that mode, for TFLOP/s (a
        compute-bound operator, whose bytes say little); given, it is measured in TFLOP/s and bytes may be
        None; one of the two is needed;
    peers: extra peers, name -> (sample) -> callable or None where that peer lacks the case; each raises
        ImportError where its package is not installed;
    check: None (the default: every implementation's outputs, and in bwd/full modes its gradients, are
        compared with `eager` evaluated on the inputs cast to fp32, tolerances scaled by dtype), or the
        operator's own check, for operators whose forward is random (dropout) and so matches no reference
        bit for bit: (sample, outputs, grads, upstream) -> the largest error it measured (a float, or None),
        raising AssertionError with a message saying what is wrong. sample: the inputs as benchmarked (in
        bwd/full modes its grad inputs are leaves requiring grad); outputs: the implementation's forward
        outputs (a tuple); grads: the gradients of the grad inputs present (a tuple, empty in fwd mode; None
        where the implementation gives none); upstream: the upstream gradients used (one per output, None
        for an output that takes none). Its docstring's first line is the error criterion the benchmark page
        states;
    sweep: None, or a Sweep of one size: `tle-bench --sweep` measures its shapes, and the page adds a table and
        a plot against that size;
    dry_shapes: small shapes of the same form, what `tle-bench --device cpu` runs by default (a dry run of the
        loop on a machine without a GPU, Triton in its interpreter): seconds, not the GPU shapes' minutes."""
    shapes: list[tuple]
    make: Callable
    eager: Callable
    bytes: Callable | None = None
    flops: Callable | None = None
    peers: dict[str, Callable] = field(default_factory=dict)
    shape_help: str = ""          # how a shape string reads, e.g. "ROWSxCOLS"
    check: Callable | None = None
    sweep: Sweep | None = None
    dry_shapes: list[tuple] = field(default_factory=list)

    def __post_init__(self):
        if self.bytes is None and self.flops is None:
            raise ValueError("a BenchSpec counts bytes (for TB/s) or flops (for TFLOP/s): give one")


@dataclass
class Operator:
    name: str
    fn: Callable                         # tle.ops.<name>: the public function, taking backend=
    reference: Callable                  # same arguments, plain differentiable torch (no backend)
    samples: Callable                    # (device, dtype) -> list[Sample]: small cases for the tests
    grad_inputs: tuple = ()              # positions in Sample.args (or keyword names) of the inputs it differentiates
    forward_only: str = ""               # why there is no backward, if there is none
    bench: BenchSpec | None = None
    dtypes: tuple = (torch.float32, torch.float16, torch.bfloat16)
    # dtype -> (atol as a fraction of the reference's largest magnitude, rtol) where the operator's kernels round
    # more than tle.examples.TOLERANCES allows for (fp32 products in TF32, intermediates kept in the dtype)
    tolerances: dict = field(default_factory=dict)

    def grad_keys(self, sample: Sample) -> list:
        """The grad inputs present in `sample` as floating tensors: positions or keyword names."""
        return [k for k in self.grad_inputs
                if isinstance(sample.get(k), torch.Tensor) and sample.get(k).is_floating_point()]
