"""The tle.raw.dialect functions of FlagTree's raw tutorials, read from a checkout of FlagTree's python/ folder
named by env TLE_FLAGTREE_PYTHON (never part of this project): each file's imports rewritten as the conformance
runner rewrites them, then only its import lines and dialect functions run."""
import ast
import os

from tle.conformance import flagtree
from tle.conformance.rewrite import rewrite


def raw_tutorials() -> str | None:
    """The folder of FlagTree's raw tutorials, None where no checkout is named."""
    root = os.environ.get("TLE_FLAGTREE_PYTHON")
    folder = os.path.join(root, "tutorials", "tle", "raw") if root else None
    return folder if folder and os.path.isdir(folder) else None


def dialect_functions(path: str) -> dict:
    """name -> tle.raw.dialect function, for every module-level function of `path` named edsl*."""
    with open(path) as f:
        text = rewrite(f.read(), flagtree.MODULES, flagtree.DECORATORS)
    tree = ast.parse(text)
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
            or (isinstance(n, ast.FunctionDef) and any("dialect" in ast.unparse(d) for d in n.decorator_list))]
    namespace = {"__name__": "flagtree_" + os.path.basename(path)[:-3].replace("-", "_")}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), namespace)
    return {k: v for k, v in namespace.items() if k.startswith("edsl")}
