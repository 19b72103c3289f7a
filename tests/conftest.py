import os
import sys

import pytest

# the shared kernel corpus lives beside the test folders
sys.path.insert(0, os.path.dirname(__file__))


def pytest_configure(config):
    # here, not in tests/cpu: the GPU tests import CPU test modules whose tests carry the mark
    config.addinivalue_line("markers", "slow: compiles with nvcc or runs a subprocess (seconds per test); "
                                       "part of the default run")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A test that reaches a compiling stage where the backend's compiler is missing (TileLang without nvcc)
    is skipped, saying why; what runs before it (lowering, goldens, the interpreters) has run."""
    outcome = yield
    error = outcome.excinfo[1] if outcome.excinfo else None
    from tle.lowering.errors import CompilerUnavailable
    if isinstance(error, CompilerUnavailable):
        outcome.force_exception(pytest.skip.Exception(f"needs the backend's compiler: {error}", _use_item_location=True))


@pytest.fixture(autouse=True)
def launch_path_restored():
    """A test that leaves the launch path or the operators' backend check patched (the TileLang interpreter
    context, a capture) fails here, at its own teardown, instead of changing what later tests launch."""
    import tle.oplib.backend as op_backend
    from tle.jit import Kernel
    before = Kernel._launch, op_backend.kernel_unusable_reason
    yield
    after = Kernel._launch, op_backend.kernel_unusable_reason
    assert after == before, "the test left Kernel._launch or kernel_unusable_reason patched"
