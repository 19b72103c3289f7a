"""Source rewriting for conformance runs: only import lines and kernel decorators change, each in place, so that
every other line of the file keeps its number (a failure points at the file's own line).

    source = rewrite(text, modules={"triton.experimental.tle": "tle"},
                     decorators={"jit": "tle.jit", "autotune": "tle.autotune"})

`modules` maps a dotted module prefix to its replacement (the longest prefix wins; a submodule keeps its tail:
triton.experimental.tle.raw.mlir -> tle.raw.mlir). Decorators that name one of Triton's `decorators`
(`@triton.jit`, `@triton.autotune(...)`, or a name imported from triton such as `jit`) become the mapped one,
reached through a module alias that the rewrite imports at the start of the file's first import line; only the
decorator's name changes, its arguments stay as written. Every mapped decorator lives in that one module."""
from __future__ import annotations

import ast

ALIAS = "_tle_conformance"


def map_module(name: str, modules: dict[str, str]) -> str:
    """`name` under the longest prefix of `modules` that it starts with (itself where none)."""
    for prefix in sorted(modules, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "."):
            return modules[prefix] + name[len(prefix):]
    return name


def _import_text(node: ast.AST, modules: dict[str, str]) -> str:
    names = ", ".join(a.name if a.asname is None else f"{a.name} as {a.asname}" for a in node.names)
    if isinstance(node, ast.Import):
        parts = []
        for a in node.names:
            target = map_module(a.name, modules)
            if a.asname is None and target != a.name:
                # `import a.b.c` binds `a`: the rewritten module is bound to the name the code uses
                raise ValueError(f"line {node.lineno}: 'import {a.name}' without 'as' cannot be rewritten in place")
            parts.append(target if a.asname is None else f"{target} as {a.asname}")
        return "import " + ", ".join(parts)
    return f"from {map_module(node.module, modules)} import {names}"       # absolute: see _imports_mapped


def _imported_names(tree: ast.AST, decorators) -> dict[str, str]:
    """Name -> Triton decorator, for names bound by `from triton import jit [as name]` (and the others)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "triton" and node.level == 0:
            out.update({a.asname or a.name: a.name for a in node.names if a.name in decorators})
    return out


def _triton_decorator(expr: ast.AST, decorators, imported: dict[str, str]) -> str | None:
    """Which of Triton's `decorators` `expr` names, if any."""
    target = expr.func if isinstance(expr, ast.Call) else expr
    if isinstance(target, ast.Attribute):
        if target.attr in decorators and isinstance(target.value, ast.Name) and target.value.id == "triton":
            return target.attr
        return None
    return imported.get(target.id) if isinstance(target, ast.Name) else None


def rewrite(text: str, modules: dict[str, str], decorators: dict[str, str]) -> str:
    """`text` with its imports of `modules` and its Triton `decorators` rewritten (see the module doc)."""
    module = {d.rsplit(".", 1)[0] for d in decorators.values()}
    if len(module) != 1:
        raise ValueError(f"the mapped decorators must live in one module, got {sorted(decorators.values())}")
    module = module.pop()
    tree = ast.parse(text)
    imported = _imported_names(tree, decorators)
    imports = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))),
                     key=lambda n: (n.lineno, n.col_offset))
    edits = {}          # first line -> (last line, column, new text of the statement)
    for node in imports:
        if _imports_mapped(node, modules):
            edits[node.lineno] = (node.end_lineno, node.col_offset, _import_text(node, modules))
    names = []          # (line, first and last byte of a decorator's name, the new name): the rest stays as written
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                name = _triton_decorator(d, decorators, imported)
                if name is not None:
                    f = d.func if isinstance(d, ast.Call) else d
                    names.append((f.lineno, f.col_offset, f.end_col_offset,
                                  f"{ALIAS}.{decorators[name].rsplit('.', 1)[-1]}"))
    lines = text.splitlines(keepends=True)
    for line, start, stop, new in sorted(names, reverse=True):
        raw = lines[line - 1].encode()          # the AST's columns count UTF-8 bytes
        lines[line - 1] = (raw[:start] + new.encode() + raw[stop:]).decode()
    if names:
        if not imports:
            raise ValueError("a file with a kernel decorator and no import line: nowhere to import it")
        head = imports[0]           # the module of the new names is imported on its first line, ahead of it
        alias = f"import {module} as {ALIAS}; "
        if head.lineno in edits:
            last, col, new = edits[head.lineno]
            edits[head.lineno] = (last, col, alias + new)
        else:
            at, col = head.lineno - 1, len(lines[head.lineno - 1].encode()[:head.col_offset].decode())
            lines[at] = lines[at][:col] + alias + lines[at][col:]
    for first in sorted(edits, reverse=True):
        last, col, new = edits[first]
        indent = lines[first - 1][:col]
        tail = lines[last - 1][len(lines[last - 1].rstrip("\r\n")):] or "\n"
        # the statement becomes one line and blank ones: the lines after it keep their numbers
        lines[first - 1:last] = [indent + new.replace("\n", " ") + tail] + ["\n"] * (last - first)
    return "".join(lines)


def _imports_mapped(node, modules) -> bool:
    """Does this import statement name a module that `modules` maps?"""
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and map_module(node.module or "", modules) != node.module
    return any(map_module(a.name, modules) != a.name for a in node.names)
