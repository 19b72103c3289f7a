"""A traced function's source: its AST, file and first line, and the names it assigns and declares constexpr."""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass

import triton.language as tl

from ..errors import LoweringError


@dataclass
class FunctionSource:
    fn: object
    tree: ast.FunctionDef
    file: str
    globals: dict


_SOURCE_CACHE: dict = {}


def function_source(fn) -> FunctionSource:
    key = fn
    if key in _SOURCE_CACHE:
        return _SOURCE_CACHE[key]
    try:
        lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as e:
        raise LoweringError(f"cannot read the source of {getattr(fn, '__name__', fn)}: {e}")
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise LoweringError(f"{fn} is not a function definition")
    g = dict(fn.__globals__)
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                g[name] = cell.cell_contents
            except ValueError:
                pass
    src = FunctionSource(fn, fdef, file, g)
    _SOURCE_CACHE[key] = src
    return src


def assigned_names(stmts) -> list[str]:
    """Names stored to anywhere in `stmts` (nested blocks included), in first-seen order."""
    seen = []
    for st in stmts:
        for node in ast.walk(st):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in seen:
                seen.append(node.id)
    return seen


def _is_constexpr_annotation(ann, g) -> bool:
    if ann is None:
        return False
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return "constexpr" in ann.value
    try:
        val = eval(compile(ast.Expression(ann), "<ann>", "eval"), g)
    except Exception:
        return "constexpr" in ast.unparse(ann)
    return val is tl.constexpr or getattr(val, "__name__", "") == "constexpr"


def constexpr_params(fn) -> list[str]:
    src = function_source(fn)
    return [a.arg for a in src.tree.args.args if _is_constexpr_annotation(a.annotation, src.globals)]
