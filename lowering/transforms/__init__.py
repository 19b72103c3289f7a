"""IR-to-IR rewrites a backend may run before code generation."""
from .fold import fold_constants  # noqa: F401
from .induction import rewrite_inductions  # noqa: F401
from .guard import bound_guarded_loops, hoist_guarded_loads  # noqa: F401
from .async_loads import pipeline_async_loads  # noqa: F401
from .buffers import drop_overwritten_buffer_carries  # noqa: F401
from .dot_acc import fold_dot_accumulators  # noqa: F401
from .descriptors import expand_descriptors  # noqa: F401
