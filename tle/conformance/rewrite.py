"""Source rewriting for conformance runs: only import lines and kernel decorators change, each in place, so that
every other line of the file keeps its number (a failure points at the file's own line).

    source = rewrite(text, modules={"triton.experimental.tle": "tle"}, jit="tle.jit")

`modules` maps a dotted module prefix to its replacement (the longest prefix wins; a submodule keeps its tail:
triton.experimental.tle.raw.mlir -> tle.raw.mlir). Decorators that name Triton's jit (`@triton.jit`,
`@triton.jit(...)`, or a `jit` imported from triton) become `jit`, reached through a module alias that the
rewrite adds to the file's first import line."""
from __future__ import annotations

import ast

ALIAS = "_tle_conformance_jit"


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


def _jit_names(tree: ast.AST) -> set[str]:
    """Names bound to Triton's jit by `from triton import jit [as name]`."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "triton" and node.level == 0:
            out |= {a.asname or a.name for a in node.names if a.name == "jit"}
    return out


def _is_triton_jit(expr: ast.AST, jit_names: set[str]) -> bool:
    target = expr.func if isinstance(expr, ast.Call) else expr
    if isinstance(target, ast.Attribute):
        return target.attr == "jit" and isinstance(target.value, ast.Name) and target.value.id == "triton"
    return isinstance(target, ast.Name) and target.id in jit_names


def rewrite(text: str, modules: dict[str, str], jit: str) -> str:
    """`text` with its imports of `modules` and its Triton jit decorators rewritten (see the module doc)."""
    tree = ast.parse(text)
    jit_names = _jit_names(tree)
    imports = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))),
                     key=lambda n: (n.lineno, n.col_offset))
    edits = {}          # first line -> (last line, column, new text of the statement)
    for node in imports:
        if _imports_mapped(node, modules):
            edits[node.lineno] = (node.end_lineno, node.col_offset, _import_text(node, modules))
    decorated = False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                if _is_triton_jit(d, jit_names):
                    call = ast.get_source_segment(text, d)
                    rest = call[len(ast.get_source_segment(text, d.func)):] if isinstance(d, ast.Call) else ""
                    edits[d.lineno] = (d.end_lineno, d.col_offset, f"{ALIAS}.{jit.rsplit('.', 1)[-1]}{rest}")
                    decorated = True
    if decorated:
        if not imports:
            raise ValueError("a file with a jit decorator and no import line: nowhere to import the jit")
        head = imports[0]
        last, col, new = edits.get(head.lineno, (head.end_lineno, head.col_offset,
                                                 ast.get_source_segment(text, head)))
        edits[head.lineno] = (last, col, f"{new}; import {jit.rsplit('.', 1)[0]} as {ALIAS}")
    lines = text.splitlines(keepends=True)
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
