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
