"""GPU tests: skipped as a whole where there is no CUDA device."""
import os

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def _skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA device"
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        # tests/cpu sets it for the interpreter; compiled Triton kernels need it unset
        return "TRITON_INTERPRET is set (tests/cpu sets it): run tests/gpu on its own"
    return None


def pytest_collection_modifyitems(config, items):
    why = _skip_reason()
    if why is None:
        return
    mark = pytest.mark.skipif(True, reason=why)
    for item in items:
        if str(item.fspath).startswith(HERE + os.sep):
            item.add_marker(mark)
