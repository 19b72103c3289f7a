"""The kernels under kernels/ (installed as tle.kernels) that declare an example launch."""
import importlib
import pkgutil

import tle
import tle.kernels
from tle.cli import meta_copy


def example_kernels() -> list[tuple[str, "tle.Kernel"]]:
    """(module.kernel, kernel) for every tle.Kernel with an example, found by importing tle.kernels.* and
    tle.kernels.examples.* (module: the path below tle.kernels, e.g. "examples.matmul")."""
    found, seen = [], set()
    modules = pkgutil.walk_packages(tle.kernels.__path__, "tle.kernels.")
    for info in sorted((m for m in modules if not m.ispkg), key=lambda m: m.name):
        mod = importlib.import_module(info.name)
        for name, obj in sorted(vars(mod).items()):
            if isinstance(obj, tle.Kernel) and getattr(obj, "example", None) and id(obj) not in seen:
                seen.add(id(obj))
                found.append((f"{info.name.removeprefix('tle.kernels.')}.{name}", obj))
    return found



def lower_example(kernel, backend: str, launch=None, **overrides):
    """Lower `kernel` for `launch` (default: its small CPU example) on meta copies of the arguments: the
    lowering sees shapes, strides and dtypes, never data. `overrides` replace launch keywords."""
    launch = launch or kernel.example("cpu", "small")
    return kernel.lower(*[meta_copy(a) for a in launch.args], grid=launch.grid, backend=backend,
                        **{**launch.kwargs, **overrides})
