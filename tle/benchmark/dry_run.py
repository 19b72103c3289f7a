"""`tle-bench --device cpu`: a dry run, with Triton in its interpreter, which Triton reads from TRITON_INTERPRET
when it is imported: a command started without it starts again with it."""
from __future__ import annotations

import os
import sys

from tle.lowering.triton.backend import interpret_mode


def restart_in_triton_interpreter(argv: list[str]) -> None:
    """Replace this process by `python -m tle.benchmark argv` with TRITON_INTERPRET=1, unless it is set."""
    if interpret_mode():
        return
    print("tle-bench: --device cpu: starting again with TRITON_INTERPRET=1 (Triton runs in its interpreter)",
          file=sys.stderr, flush=True)
    os.execve(sys.executable, [sys.executable, "-m", "tle.benchmark", *argv], {**os.environ, "TRITON_INTERPRET": "1"})
