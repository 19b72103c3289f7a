"""FlagTree's TLE suite as this project runs it: where its tests and tutorials are in a checkout of FlagTree's
`python/` folder, and how their imports map onto the project's modules (FlagTree's
`triton.experimental.tle...` spellings; the project's `tle`, `tle.gpu`, `tle.raw`)."""
from __future__ import annotations

import os

# FlagTree's module -> the project's (longest prefix first; a submodule keeps its tail)
MODULES = {
    "triton.experimental.tle.language.gpu": "tle.gpu",
    "triton.experimental.tle.language.raw": "tle.raw",
    "triton.experimental.tle.language": "tle",
    "triton.experimental.tle.raw": "tle.raw",
    "triton.experimental.tle": "tle",
    # TLE-Raw functions are written with MLIR's Python bindings: the project's are tle.raw.mlir (the upstream
    # package's modules where installed, with the project's nvvm and tensor ops)
    "mlir.dialects": "tle.raw.mlir",
    "mlir": "tle.raw.mlir",
}
# Triton's kernel decorators -> the project's: tle.autotune lowers all its configs, then compiles them side by
# side (a TileLang build takes up to minutes), where Triton's autotuner would compile one config at a time
DECORATORS = {"jit": "tle.jit", "autotune": "tle.autotune"}

# what a checkout's python/ folder holds, relative to it: (folder, kind) where kind says how a file is run
SUITES = (("test/tle", "pytest"), ("tutorials/tle", "script"))


def discover(root: str) -> list[tuple[str, str]]:
    """(path relative to root, kind) of every test file (test_*.py) and tutorial (*.py) of FlagTree's TLE suite
    under `root`, a checkout's python/ folder, sorted."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root!r} is not a folder (give a checkout of FlagTree's python/ folder)")
    found = []
    for folder, kind in SUITES:
        base = os.path.join(root, folder)
        for dirpath, _, files in os.walk(base):
            for name in files:
                if not name.endswith(".py") or name.startswith("__"):
                    continue
                if kind == "pytest" and not name.startswith("test_"):
                    continue
                found.append((os.path.relpath(os.path.join(dirpath, name), root), kind))
    if not found:
        raise FileNotFoundError(f"no FlagTree TLE tests or tutorials under {root!r} (expected "
                                f"{' and '.join(f for f, _ in SUITES)} in a checkout's python/ folder)")
    return sorted(found)
