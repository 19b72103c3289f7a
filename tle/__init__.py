"""tle: write a kernel once in Triton syntax plus the TLE extensions; lower it to Triton or TileLang."""
import os as _os

# tle.lowering and tle.kernels live in top-level folders of the source tree (lowering/, kernels/) and are
# installed under tle.* by pyproject's package-dir; on a bare source tree (PYTHONPATH=.) map them here.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isdir(_os.path.join(_root, "lowering")) and _root not in __path__:
    __path__.append(_root)

from tle.jit import Kernel, Lowered, jit  # noqa: E402,F401
from tle.language import load  # noqa: E402,F401
from tle.errors import (AutotuneError, BackendUnavailable, CompilerUnavailable, LaunchError,  # noqa: E402,F401
                        LoweringError, UnsupportedConstruct)
from tle.select import available_backends  # noqa: E402,F401
from tle.examples import Launch, example  # noqa: E402,F401
from tle import gpu, raw  # noqa: E402,F401
from tle.raw import call, hardware_constraint  # noqa: E402,F401
from tle.autotune import Config, autotune  # noqa: E402,F401
from tle.version import __version__  # noqa: E402,F401
