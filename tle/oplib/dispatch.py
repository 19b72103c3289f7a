"""How an operator call reaches its implementation (operators declare theirs with tle.oplib.recipe).

Every operator is a torch.library custom op (`tle::<name>`, with `register_fake` and `register_autograd`):
torch.compile, torch.export, FakeTensor, dispatch and function modes, functorch transforms, torch.jit
tracing and the profiler all see that op. A plain eager call (ordinary tensors, none of those active) runs
the same implementation and the same autograd formula through an `autograd.Function` of its own instead of
going through the dispatcher: the custom op's Python layers (its autograd wrapper, a redispatch, a
dynamo-disabled implementation wrapper) cost 50-60 us per call on an H200 host, as much as the GPU time of
a mid-sized operator.

    op = CustomOp("tle::softmax", impl, schema="(Tensor x, str backend) -> Tensor")
    op.register_fake(fake)
    op.register_autograd(backward, setup_context=setup_context)
    y = op(x, "triton")                 # the operator calls the object, not torch.ops.tle.softmax
"""
from __future__ import annotations

import torch

_C = torch._C
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def plain_eager(args) -> bool:
    """True when nothing but eager autograd could observe this call: not compiling, no dispatch or function
    mode, no functorch transform, no jit tracing, no profiler, and every tensor argument an ordinary tensor."""
    if (_C._len_torch_dispatch_stack() or _C._is_torch_function_mode_enabled() or _C._autograd._profiler_enabled()
            or _C._functorch.peek_interpreter_stack() is not None or _C._get_tracing_state() is not None):
        return False
    for a in args:
        if isinstance(a, torch.Tensor) and type(a) not in _PLAIN_TENSORS:
            return False
    return True


class CustomOp:
    """A torch.library custom op and the direct eager call of the same implementation (see the module doc)."""

    def __init__(self, qualname: str, impl, schema: str | None = None):
        self.impl = impl
        self.op_def = torch.library.custom_op(qualname, impl, mutates_args=(), schema=schema)
        namespace, name = qualname.split("::")
        self.overload = getattr(getattr(torch.ops, namespace), name).default   # what graphs and modes see
        self._function = None                        # the eager autograd.Function, once there is a formula

    def register_fake(self, fn):
        return self.op_def.register_fake(fn)

    def register_autograd(self, backward, *, setup_context):
        self.op_def.register_autograd(backward, setup_context=setup_context)
        self._function = _eager_function(self.overload.__name__, self.impl, backward, setup_context)

    def __call__(self, *args):
        if torch.compiler.is_compiling() or not plain_eager(args):     # compiling first: dynamo folds it
            return self.overload(*args)
        if _C.is_grad_enabled() and _C._any_requires_grad(*args):
            if self._function is None:           # no formula: the op raises where it is differentiated
                return self.overload(*args)
            return self._function.apply(*args)
        return self.impl(*args)


def _eager_function(name: str, impl, backward, setup_context):
    """An autograd.Function doing what the custom op's autograd wrapper does: forward without grad, the
    registered setup_context on (inputs, output), the registered backward."""
    def forward(ctx, *args):
        out = impl(*args)
        ctx.direct_eager_call = True         # the op's outputs went to the operator's own Python function only
        setup_context(ctx, args, out)
        return out

    return type(f"Eager_{name.replace('.', '_')}", (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


def last_use_of_saved(ctx, tensors) -> bool:
    """True when this backward is the last use of what its forward saved, so that the backward may overwrite
    those tensors: the op was called eagerly through its operator (its outputs went to tle.ops' own function,
    not to a caller of torch.ops.tle.*), the backward releases the graph (no retain_graph: autograd frees the
    saved tensors when the node returns), runs without create_graph and nothing but eager autograd watches
    (`tensors`: the backward's tensor arguments). A retained graph, create_graph, compiling, modes and direct
    op calls give False (the backward makes new tensors)."""
    keep_graph = getattr(_C._autograd, "_get_current_graph_task_keep_graph", None)
    return (getattr(ctx, "direct_eager_call", False) and keep_graph is not None and not _C.is_grad_enabled()
            and plain_eager(tensors) and not keep_graph())
