"""IR-to-IR rewrites a backend may run before code generation."""
from .fold import fold_constants  # noqa: F401
from .induction import rewrite_inductions  # noqa: F401
