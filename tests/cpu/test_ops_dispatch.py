"""The two ways an operator call reaches its implementation (tle/oplib/dispatch.py): a plain eager call runs it
through an autograd.Function of its own, anything that observes calls (a dispatch or function mode, a tensor
subclass, the profiler, torch.compile) goes through the torch.library op. Both must give the same results."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from op_cases import OPS, as_tuple
from tle.ops import OPERATORS


class PassThrough(TorchDispatchMode):
    """A dispatch mode that changes nothing and records the tle:: ops it sees."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "tle":
            self.seen.append(func._opname)
        return func(*args, **(kwargs or {}))


def _forward_backward(op, sample, backend):
    """Outputs and input gradients of one call, with every floating output's gradient seeded by ones."""
    call = sample.replaced({k: sample.get(k).detach().requires_grad_() for k in op.grad_keys(sample)})
    outs = as_tuple(op.fn(*call.args, backend=backend, **call.kwargs))
    leaves = [call.get(k) for k in op.grad_keys(sample)]
    diff = [o for o in outs if o.requires_grad]
    grads = torch.autograd.grad(diff, leaves, [torch.ones_like(o) for o in diff]) if diff else ()
    return [o.detach() for o in outs], list(grads), outs


def _first_sample_with_grads(name):
    torch.manual_seed(0)
    op = OPERATORS[name]
    # fp32 where the kernels take it; the attention kernels take fp16/bf16 (Triton's interpreter runs fp16)
    samples = op.samples("cpu", torch.float32 if torch.float32 in op.dtypes else op.dtypes[0])
    return op, next((s for s in samples if op.grad_keys(s) and all(
        s.get(k).numel() for k in op.grad_keys(s))), samples[0])


# an operator built on another's custom op: the op it runs
RUNS_OP = {"scaled_dot_product_attention": "flash_attention"}
VIEWS = ("TransposeBackward0", "SqueezeBackward1", "AliasBackward0")


def _op_node(out):
    """The autograd node of the op behind `out`, through the views the operator returns (SDPA's layout)."""
    node = out.grad_fn
    while type(node).__name__ in VIEWS:
        node = node.next_functions[0][0]
    return node


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("name", OPS)
def test_plain_eager_call_matches_the_custom_op(name, backend):
    op, sample = _first_sample_with_grads(name)
    eager_outs, eager_grads, outs = _forward_backward(op, sample, backend)
    with PassThrough() as mode:
        op_outs, op_grads, _ = _forward_backward(op, sample, backend)
    assert mode.seen[0] == RUNS_OP.get(name, name), mode.seen          # the mode saw the custom op
    if any(o.requires_grad for o in outs):
        assert all(type(_op_node(o)).__name__.startswith("Eager_") for o in outs if o.requires_grad)
    assert len(eager_outs + eager_grads) == len(op_outs + op_grads)
    for a, b in zip(eager_outs + eager_grads, op_outs + op_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def _path(x, w):
    """Which way tle.ops.rms_norm went for these inputs: 'eager' (the autograd.Function) or 'op'."""
    y = OPERATORS["rms_norm"].fn(x, x.shape[-1:], w, backend="torch")
    node = y.grad_fn
    while type(node).__name__ == "AliasBackward0":      # a subclass's __torch_function__ re-wraps its results
        node = node.next_functions[0][0]
    name = type(node).__name__
    assert name.startswith(("Eager_", "GeneratedBackwardFor_")), name
    return "eager" if name.startswith("Eager_") else "op"


class Subclass(torch.Tensor):
    pass


def test_the_op_is_used_whenever_something_observes_the_call():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8)
    assert _path(x, w) == "eager"
    with PassThrough() as mode:
        assert _path(x, w) == "op"
    assert mode.seen == ["rms_norm"]
    with torch.device("cpu"):                       # a torch function mode
        assert _path(x, w) == "op"
    assert _path(x.detach().as_subclass(Subclass).requires_grad_(), w) == "op"
    with torch.profiler.profile() as prof:
        assert _path(x, w) == "op"
    assert any(e.name == "tle::rms_norm" for e in prof.events())
    assert _path(torch.nn.Parameter(x.detach()), w) == "eager"


def test_second_order_gradients_are_refused_on_both_paths():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8)
    for observed in (False, True):
        mode = PassThrough() if observed else None
        if mode:
            mode.__enter__()
        try:
            y = OPERATORS["rms_norm"].fn(x, x.shape[-1:], w, backend="torch")
            (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
            with pytest.raises(RuntimeError, match="no autograd formula"):
                torch.autograd.grad(g.sum(), x)
        finally:
            if mode:
                mode.__exit__(None, None, None)
