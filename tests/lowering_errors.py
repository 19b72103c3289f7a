"""The check that a bad kernel is a lowering error at its own line."""
import os

import pytest

import tle


def assert_lowering_error(kernel, args, words, backend="triton", **launch):
    """Lowering `kernel` for `args` raises a LoweringError located in the file that defines it, whose text has
    each of `words`."""
    with pytest.raises(tle.LoweringError) as e:
        kernel.lower(*args, grid=(1,), backend=backend, **launch)
    msg = str(e.value)
    assert f"{os.path.basename(kernel.fn.__code__.co_filename)}:" in msg, msg
    for w in words:
        assert w in msg, msg
