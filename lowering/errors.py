"""Errors raised while lowering a kernel. Each names the kernel's file:line and, where it applies,
the construct and the backend that cannot express it."""
from __future__ import annotations


class LoweringError(Exception):
    def __init__(self, message: str, loc=None, backend: str | None = None, construct: str | None = None):
        self.message = message
        self.loc = loc
        self.backend = backend
        self.construct = construct
        Exception.__init__(self, self._format())     # not super(): a subclass may also be another library's error

    def _format(self) -> str:
        where = f"{self.loc}: " if self.loc is not None and getattr(self.loc, "line", 0) else ""
        who = f"[{self.backend}] " if self.backend else ""
        return f"{where}{who}{self.message}"


class UnsupportedConstruct(LoweringError):
    """A construct the named backend cannot express. Raised at lowering time, never at run time."""

    def __init__(self, construct: str, backend: str, loc=None, detail: str = ""):
        msg = f"backend '{backend}' cannot express {construct}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg, loc, backend, construct)


class CompilerUnavailable(RuntimeError):
    """A stage that compiles (or a launch) asked for where the backend's compiler is missing; lowering, the
    generated source and the interpreters do not need it."""

    def __init__(self, backend: str, why: str):
        self.backend = backend
        self.why = why
        super().__init__(f"[{backend}] cannot compile here: {why}")
