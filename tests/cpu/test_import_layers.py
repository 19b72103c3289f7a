"""The project's modules import each other without circles: each imports only what stands below it
(docs/architecture.md, "Layers"). Read from the source with `ast`, imports inside functions included (a
lazy import is still a dependency, only hidden)."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = (("tle", "tle"), ("lowering", "tle.lowering"), ("kernels", "tle.kernels"))


def _modules() -> dict[str, str]:
    """Module name -> file, for every module of the installed packages (tle, tle.lowering, tle.kernels)."""
    found = {}
    for folder, package in PACKAGES:
        base = os.path.join(ROOT, folder)
        for dirpath, _, files in os.walk(base):
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), base)[:-3].replace(os.sep, ".")
                    rel = rel.removesuffix("__init__").rstrip(".")
                    found[package + ("." + rel if rel else "")] = os.path.join(dirpath, f)
    return found


def _imported(module: str, path: str, node, modules) -> list[str]:
    """The project modules an import statement needs: `from p import name` needs p itself only where a name
    is not a submodule of p (a package's __init__ re-exporting a name is a dependency on that __init__)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            parts = module.split(".")
            base = parts if path.endswith("__init__.py") else parts[:-1]
            base = base[:len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module
        subs = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in modules]
        names = subs + ([source] if len(subs) < len(node.names) else [])
    out = []
    for name in names:
        while name and name not in modules:           # a name inside a module: that module
            name = name.rpartition(".")[0]
        if name and name != module:
            out.append(name)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        graph[module] = {t for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                         for t in _imported(module, path, node, modules)}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph()
    found = circles(graph)
    detail = "\n".join(" <-> ".join(c) + "\n    " + "; ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a])
                                                            if b in c) for c in found)
    assert not found, f"import circles:\n{detail}"


def test_the_graph_sees_lazy_imports_and_package_reexports():
    """The reader of the graph: an import inside a function is an edge, and so is a name a package's
    __init__ re-exports; a module taken from a package (`from p import m`) is an edge to m alone."""
    graph = import_graph()
    assert "tle.lowering.tilelang.interpreter" in graph["tle.lowering.tilelang.backend"]     # inside a method
    assert "tle.lowering.frontend.jit_functions" in graph["tle.lowering.frontend.combine"]
    assert "tle.lowering.ir.types" in graph["tle.lowering.ir"] and "tle.lowering.ir" not in graph[
        "tle.lowering.ir.builder"]                                                   # `from . import ops`
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_compiler_never_imports_the_runtime():
    graph = import_graph()
    wrong = sorted(f"{m} -> {t}" for m, ts in graph.items() if m.startswith("tle.lowering")
                   for t in ts if not t.startswith("tle.lowering"))
    assert not wrong, wrong
