"""Golden files: the IR text and the generated Triton and TileLang sources of every kernel at its small
example, compared exactly. Regenerate after an intended change with TLE_UPDATE_GOLDEN=1 and review the diff.

The kernels' absolute file paths (which appear in generated headers) are replaced by their file names,
so the files do not depend on where the project lives.
"""
import inspect
import os

import pytest

import tle

from kernel_cases import example_kernels
from tle.cli import meta_copy

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
UPDATE = os.environ.get("TLE_UPDATE_GOLDEN", "") not in ("", "0")
KERNELS = example_kernels()
ARTIFACTS = {"ir": ("triton", "ir.txt"), "triton": ("triton", "triton.py"), "tilelang": ("tilelang", "tilelang.py")}


def normalize(text: str, kernel) -> str:
    folder = os.path.dirname(os.path.abspath(inspect.getsourcefile(kernel.fn)))
    return text.replace(folder + os.sep, "")


@pytest.mark.parametrize("artifact", list(ARTIFACTS))
@pytest.mark.parametrize("name, kernel", KERNELS, ids=[n for n, _ in KERNELS])
def test_golden(name, kernel, artifact):
    backend, suffix = ARTIFACTS[artifact]
    path = os.path.join(GOLDEN, f"{name}.{suffix}")        # module.kernel: kernel names may repeat
    why = tle.available_backends().get(backend)
    if backend == "tilelang" and why is not None:
        pytest.skip(f"TileLang backend unavailable here ({why})")
    if backend == "tilelang" and not UPDATE and not os.path.exists(path):
        pytest.skip(f"no TileLang golden file {os.path.relpath(path)} yet: once the TileLang backend "
                    f"lowers this kernel, create it with TLE_UPDATE_GOLDEN=1 and review it")
    launch = kernel.example("cpu", "small")
    lowered = kernel.lower(*[meta_copy(a) for a in launch.args], grid=launch.grid, backend=backend,
                           **launch.kwargs)
    text = normalize(lowered.ir + "\n" if artifact == "ir" else lowered.source, kernel)
    if UPDATE:
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return
    if not os.path.exists(path):
        pytest.fail(f"missing golden file {path}; create it with TLE_UPDATE_GOLDEN=1")
    with open(path) as f:
        expected = f.read()
    assert text == expected, f"{artifact} of {name} differs from {path} (TLE_UPDATE_GOLDEN=1 regenerates it)"
