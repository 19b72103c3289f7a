import os
import sys

# the shared kernel corpus lives beside the test folders
sys.path.insert(0, os.path.dirname(__file__))


def pytest_configure(config):
    # here, not in tests/cpu: the GPU tests import CPU test modules whose tests carry the mark
    config.addinivalue_line("markers", "slow: compiles with nvcc or runs a subprocess (seconds per test); "
                                       "part of the default run")
