"""Exceptions users see. Lowering errors come from tle.lowering; launch-time input errors are here."""
from tle.lowering.errors import CompilerUnavailable, LoweringError, UnsupportedConstruct  # noqa: F401


class LaunchError(ValueError):
    """Bad input at launch: names the argument and what was expected."""


class BackendUnavailable(RuntimeError):
    """An unknown backend, or one that cannot run here; lists the available ones."""


class AutotuneError(RuntimeError):
    """Autotuning found no config that runs: lists each config and why it failed."""
