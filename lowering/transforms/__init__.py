"""IR-to-IR rewrites a backend may run before code generation."""
from .induction import rewrite_inductions  # noqa: F401
