"""Mutation testing for the compiler: inject one small change at a time into lowering/ and see whether
the CPU tests notice.

Run it from anywhere with the project's interpreter:

    .venv/bin/python tests/mutation.py --list                       # the mutants and how many of each kind
    .venv/bin/python tests/mutation.py --only access.py --limit 6   # a few of them
    .venv/bin/python tests/mutation.py --sample 50 --seed 1 --json out.json --markdown out.md
    .venv/bin/python tests/mutation.py                              # all of them (hours)
    .venv/bin/python tests/mutation.py --map m.json --with-goldens   # each mutant runs only the tests that run
                                                                    # its lines, forked from a test server

Targets: every .py file under lowering/tilelang/ and lowering/analysis/ (--paths to choose others), except
lowering/tilelang/interpreter/: that is the test oracle, not the lowering (--exclude to change).

Each mutant is one change, made with Python's `ast` and spliced into the file's text:

    comparison    < <-> <=, > <-> >=, == <-> !=, is <-> is not, in <-> not in
    off-by-one    an int literal (|n| <= 64) in a comparison, a subscript or slice, arithmetic or a call's
                  positional arguments (also as an element of a tuple or list there) nudged by +1 and -1;
                  ints elsewhere (module-level tables, defaults, keyword arguments) are left alone
    arithmetic    + <-> - (binary and augmented), except where an operand is plainly a string or list
    boolean       and <-> or, `not x` -> `x`, True <-> False
    string-token  a string that is a code token the generator emits or dispatches on, from TOKEN_SWAPS
                  ("max" <-> "min", "<" <-> "<=", "T.reduce_max" <-> "T.reduce_min", ...): a plain string
                  matches when it is the token (surrounding whitespace kept); an f-string piece matches
                  when it is the token, or, for dotted/underscored tokens such as T.max, holds it as a
                  whole word ("T.max(" does, "T.reduce_" does not); also the two value arms of an
                  f-string `T.if_then_else({c}, {a}, {b})` swapped
    dropped-mask  the test of an `if` or `x if c else y` that names something containing "mask" replaced
                  by True and by False; a call's `mask=...` keyword replaced by None
    transpose     transpose flags swapped or negated: call keywords named like trans*/transpose* swapped
                  pairwise, a flag variable (ta/tb, trans_a/trans_b, ...) read as its partner, a flag
                  whose name contains "trans" negated where it is used as a condition, and a tuple of two
                  flags swapped

Never mutated: docstrings and other bare strings, type annotations, imports, `__all__`, logging calls;
strings inside raise statements, assert messages and message-like calls (error, warn, notes, report,
print, exception constructors) are free text and take no string-token mutation.

Each worker owns a copy of the source tree (tle/, lowering/, kernels/, tests/, docs/, pyproject.toml,
setup.py, README.md) in a temporary folder, with its own TLE_CACHE_DIR, TRITON_CACHE_DIR, TILELANG_CACHE_DIR and
TMPDIR. A mutant is written into the copy, the test command runs there with the copy first on
PYTHONPATH (checked at start: tle, tle.lowering, tle.kernels and the targets must import from the
copy), and the pristine file is put back. Bytecode is not written, so a mutant of the same size and
second as the previous file can never run from a stale .pyc. The caches start empty; after the
baseline run every worker gets a copy of what it filled, and each worker keeps its caches across its
mutants: tle, Triton and TileLang key what they cache by the generated code itself, so a mutant that
changes the generated code compiles afresh and one that does not reuses the pristine result. Nothing is
read from or written to the user's own caches.

The test command (default: pytest tests/cpu -x -q -p no:cacheprovider -k "not golden" -m "not slow"; a
mutant runs a quick stage first, QUICK, and the whole command only if that passes; for a mutant under
lowering/tilelang/ the whole command leaves out the tests named for Triton, which never run that code)
runs once on the pristine copy first and must pass; then a canary mutant (every target made to raise
on import) must be caught, proving the tests run the copy's code. Golden files are left out by
default: they pin the generated text, so they catch any textual change; --with-goldens includes them.

With --map (docs/testing.md): a coverage map made first (tests/mutation_coverage.py; that run is the
baseline) says which tests run each line; a mutant runs only those, in a child forked from a test server
that imported everything once and patches the mutated functions in memory (tests/mutation_server.py), or,
for a change outside a function body or on a line that runs at import, in a new interpreter. --skip,
--reverse and --merge spread one campaign over several sittings or machines.

Statuses:
    killed    the tests failed (pytest exit code 1, or a crash)
    survived  the tests passed (exit code 0): no test notices this change
    timeout   the tests ran past --timeout (with --map: a test past five times its baseline time and half a
              minute); counted as killed, listed separately
    error     pytest exit codes 2-5 (interrupted, internal or usage error, no tests collected), or a test
              module that fails to import (a collection error, which pytest -x reports as exit code 1):
              e.g. the mutant breaks an import; counted as killed, listed separately

Kill rate = (killed + timeout + error) / total.
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass

from mutation_coverage import TestMap, merge
from mutation_server import NEEDS_FRESH_INTERPRETER, module_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TARGETS = ("lowering/tilelang", "lowering/analysis")
DEFAULT_EXCLUDED = ("lowering/tilelang/interpreter",)
# run before the whole test command (unless --no-quick or --pytest-args): the TileLang numerics and access
# plans of the kernels and corpus cases, which kill most mutants of the lowering in a few seconds
QUICK = ("tests/cpu/test_access_analysis.py", "tests/cpu/test_access_plans.py",
         "tests/cpu/test_syntax_corpus.py::test_tilelang_interpreter",
         "tests/cpu/test_kernels_interpreter.py::test_tilelang_lowering_matches_reference")
QUICK_GOLDENS = ("tests/cpu/test_golden.py",)    # under --with-goldens, first: they kill in seconds
# what the tests import or read (docs/lowering.md, setup.py among them)
COPIED = ("tle", "lowering", "kernels", "tests", "docs", "pyproject.toml", "setup.py", "README.md")
OPERATORS = ("comparison", "off-by-one", "arithmetic", "boolean", "string-token", "dropped-mask", "transpose",
             "known")
STATUSES = ("killed", "survived", "timeout", "error")
CACHE_VARS = ("TLE_CACHE_DIR", "TRITON_CACHE_DIR", "TILELANG_CACHE_DIR")
MAX_INT = 64

COMPARE_FLIPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                 ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}

# code tokens the generators emit or dispatch on -> what each may become
TOKEN_SWAPS = {
    "max": ("min",), "min": ("max",), "sum": ("max",),
    "argmax": ("argmin",), "argmin": ("argmax",),
    "maximum": ("minimum",), "minimum": ("maximum",),
    "T.max": ("T.min",), "T.min": ("T.max",),
    "reduce_max": ("reduce_min",), "reduce_min": ("reduce_max",), "reduce_sum": ("reduce_max",),
    "T.reduce_max": ("T.reduce_min",), "T.reduce_min": ("T.reduce_max",), "T.reduce_sum": ("T.reduce_max",),
    "transpose_A": ("transpose_B",), "transpose_B": ("transpose_A",),
    "transpose_A=True": ("transpose_B=True",), "transpose_B=True": ("transpose_A=True",),
    "<": ("<=",), "<=": ("<",), ">": (">=",), ">=": (">",), "==": ("!=",), "!=": ("==",),
    "&": ("|",), "|": ("&",), "+": ("-",), "-": ("+",),
    "lt": ("le",), "le": ("lt",), "gt": ("ge",), "ge": ("gt",), "eq": ("ne",), "ne": ("eq",),
    "add": ("sub",), "sub": ("add",), "and": ("or",), "or": ("and",),
}
# tokens looked for as whole words inside f-string pieces (the others only as a whole piece)
WORD_TOKENS = tuple(t for t in TOKEN_SWAPS if "." in t or "_" in t)

# calls whose string arguments are messages, not code (matched against the callee's dotted name)
FREE_TEXT_PARTS = {"error", "warn", "warning", "warnings", "notes", "note", "report", "print"}
FREE_TEXT_CALLEE = re.compile(r"(Error|Exception|Warning|Unsupported\w*|Unavailable)$")
LOGGING_NAMES = {"logging", "logger", "log", "_logger", "_log", "LOG", "LOGGER"}
TRANS_FLAG = re.compile(r"trans|^t[ab]$", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------------
# mutants
# ---------------------------------------------------------------------------------------------------
@dataclass
class Mutant:
    file: str            # relative to the project root
    line: int            # 1-based
    col: int             # 1-based
    operator: str
    original: str
    mutated: str
    start: int           # the text span the replacement goes over (character offsets)
    end: int
    replacement: str

    @property
    def folder(self) -> str:
        return os.path.dirname(self.file)

    def describe(self, full: bool = False) -> str:
        a, b = (self.original, self.mutated) if full else _shorten_pair(self.original, self.mutated)
        return f"{self.file}:{self.line}: `{a}` -> `{b}` ({self.operator})"

    def apply(self, text: str) -> str:
        return text[:self.start] + self.replacement + text[self.end:]

    def lines(self, text: str) -> range:
        """The lines the replaced text spans (1-based)."""
        first = text.count("\n", 0, self.start) + 1
        return range(first, text.count("\n", 0, self.end) + 2)


def _oneline(s: str) -> str:
    return re.sub(r"\s*\n\s*", " ", s.strip())


def _shorten_pair(a: str, b: str, width: int = 90, context: int = 30) -> tuple[str, str]:
    """Both strings cut to the part around where they differ, when they are long."""
    if len(a) <= width and len(b) <= width:
        return a, b
    p = 0
    while p < min(len(a), len(b)) and a[p] == b[p]:
        p += 1
    s = 0
    while s < min(len(a), len(b)) - p and a[-1 - s] == b[-1 - s]:
        s += 1

    def cut(x):
        lo, hi = max(0, p - context), min(len(x), len(x) - s + context)
        return ("..." if lo > 0 else "") + x[lo:hi] + ("..." if hi < len(x) else "")
    return cut(a), cut(b)


def _int_node(v: int) -> ast.expr:
    return ast.Constant(v) if v >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-v))


def _is_atom(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return not (isinstance(node.value, (int, float)) and not isinstance(node.value, bool) and node.value < 0)
    return isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.List, ast.Tuple, ast.Dict,
                             ast.Set, ast.JoinedStr))


def _quote_like(original: str, value: str) -> str:
    """A string literal for `value` in the quotes `original` was written with, where that is simple."""
    if original[:1] == '"' and not any(c in value for c in '"\\\n'):
        return f'"{value}"'
    return repr(value)


if hasattr(ast, "_Unparser"):
    class _SourceUnparser(ast._Unparser):
        """ast.unparse, except that nodes of the file are written as they are in its text (with
        parentheses added where the new context needs them)."""

        def __init__(self, source_of=lambda node: None, **kwargs):
            super().__init__(**kwargs)      # f-string parts are unparsed by fresh instances
            self._source_of = source_of

        def traverse(self, node):
            text = None if isinstance(node, list) else self._source_of(node)
            if text is None:
                return super().traverse(node)
            # unparse it plainly here and alone: parentheses here that it has not alone are the context's
            saved, self._source, source_of = self._source, [], self._source_of
            self._source_of = lambda n: None
            try:
                super().traverse(node)
            finally:
                in_context, self._source, self._source_of = "".join(self._source), saved, source_of
            self.write(f"({text})" if in_context == f"({ast.unparse(node)})" else text)
else:                                   # pragma: no cover - ast._Unparser is private
    _SourceUnparser = None


def _dotted(node: ast.AST) -> list[str]:
    """Names along an attribute chain: self.notes.append -> [self, notes, append]."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.extend(reversed(_dotted(node.func)))
    return list(reversed(parts))


def _names_in(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return out


def _flag_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _partner(name: str) -> str | None:
    """ta -> tb, trans_a -> trans_b, transpose_B -> transpose_A (None when there is no a/b suffix)."""
    m = re.match(r"^(.*?)([abAB])$", name)
    if not m or not TRANS_FLAG.search(name):
        return None
    swap = {"a": "b", "b": "a", "A": "B", "B": "A"}
    return m.group(1) + swap[m.group(2)]


def _stringy(node: ast.AST) -> bool:
    """Is this plainly a string or a list (so that + is concatenation)?"""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (str, bytes))
    if isinstance(node, (ast.JoinedStr, ast.List, ast.ListComp, ast.Tuple)):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        return _stringy(node.left) or _stringy(node.right)
    if isinstance(node, ast.Call):
        d = _dotted(node.func)
        return bool(d) and d[-1] in ("join", "format", "str", "repr", "list", "sorted", "upper", "lower")
    return False


class FileMutator:
    """Finds the mutants of one file."""

    def __init__(self, relpath: str, text: str):
        self.file = relpath
        self.text = text
        self.tree = ast.parse(text)
        self.parent: dict[int, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[id(child)] = node
        lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text)     # line ends as Python counts them
        self.line_start = [0]
        for ln in lines:
            self.line_start.append(self.line_start[-1] + len(ln))
        self.lines = lines
        self.skip: set[int] = set()        # no mutation at all
        self.free_text: set[int] = set()   # no string-token mutation
        self._mark_skipped()
        self._locals: dict[int, set[str]] = {}

    # -- where not to mutate ------------------------------------------------------------------------------
    def _mark(self, node: ast.AST | None, into: set[int]):
        if node is not None:
            into.update(id(n) for n in ast.walk(node))

    def _mark_skipped(self):
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self._mark(node, self.skip)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and \
                    isinstance(node.value.value, str):
                self._mark(node, self.skip)                      # docstrings and bare strings
            elif isinstance(node, ast.arg):
                self._mark(node.annotation, self.skip)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._mark(node.returns, self.skip)
            elif isinstance(node, ast.AnnAssign):
                self._mark(node.annotation, self.skip)
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                      for t in node.targets):
                self._mark(node, self.skip)
            elif isinstance(node, ast.Raise):
                self._mark(node, self.free_text)
            elif isinstance(node, ast.Assert):
                self._mark(node.msg, self.free_text)
            elif isinstance(node, ast.Call):
                parts = _dotted(node.func)
                if parts and (parts[0] in LOGGING_NAMES or "getLogger" in parts):
                    self._mark(node, self.skip)
                elif FREE_TEXT_PARTS & set(parts) or (parts and FREE_TEXT_CALLEE.search(parts[-1])):
                    self._mark(node, self.free_text)

    # -- positions -----------------------------------------------------------------------------------------
    def _offset(self, line: int, col_bytes: int) -> int:
        text = self.lines[line - 1]
        return self.line_start[line - 1] + len(text.encode()[:col_bytes].decode(errors="replace"))

    def _span(self, node: ast.AST) -> tuple[int, int]:
        return (self._offset(node.lineno, node.col_offset), self._offset(node.end_lineno, node.end_col_offset))

    def _outer_fstring(self, node: ast.AST) -> ast.JoinedStr | None:
        """The outermost f-string around `node` (or `node` itself): inside one, positions are unreliable."""
        found = node if isinstance(node, ast.JoinedStr) else None
        p = self.parent.get(id(node))
        while p is not None:
            if isinstance(p, ast.JoinedStr):
                found = p
            p = self.parent.get(id(p))
        return found

    def _swapped_copy(self, root: ast.AST, old: ast.AST, new: ast.AST) -> ast.AST:
        """A deep copy of `root` with `old` (a node inside it) replaced by `new`."""
        if root is old:
            return new
        parent = self.parent[id(old)]
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                try:
                    return copy.deepcopy(root)
                finally:
                    setattr(parent, field, old)
            if isinstance(value, list) and any(v is old for v in value):
                i = next(i for i, v in enumerate(value) if v is old)
                value[i] = new
                try:
                    return copy.deepcopy(root)
                finally:
                    value[i] = old
        raise AssertionError("node not found in its parent")

    @staticmethod
    def _parses_to(text: str, node: ast.AST) -> bool:
        try:
            if isinstance(node, ast.stmt):
                got = ast.parse(text).body
                return len(got) == 1 and ast.dump(got[0]) == ast.dump(node)
            return ast.dump(ast.parse(f"(\n{text}\n)", mode="eval").body) == ast.dump(node)
        except SyntaxError:
            return False

    def source_of(self, node: ast.AST) -> str | None:
        """The source text of a node of this file (None inside f-strings, where spans are unreliable)."""
        if id(node) not in self.parent or self._outer_fstring(self.parent[id(node)]) is not None:
            return None
        start, end = self._span(node)
        return self.text[start:end]

    def render(self, target: ast.AST, new: ast.AST) -> list[str]:
        """Candidate texts for `new`, best first: its unchanged parts as written, then plain ast.unparse."""
        out = []
        if isinstance(new, ast.Constant) and isinstance(new.value, str) and isinstance(target, ast.Constant):
            out.append(_quote_like(self.source_of(target) or "", new.value))
        elif _SourceUnparser is not None:
            out.append(_SourceUnparser(self.source_of).visit(new))
        out.append(ast.unparse(new))
        return out

    def make(self, target: ast.AST, new: ast.AST, operator: str) -> Mutant | None:
        """The mutant replacing `target` by `new` (None when its text cannot be placed exactly)."""
        if ast.dump(target) == ast.dump(new):
            return None
        fstring = self._outer_fstring(target)
        if fstring is None:
            start, end = self._span(target)
            if not self._parses_to(self.text[start:end], target):
                return None
            for text in self.render(target, new):
                replacement = text if isinstance(new, ast.stmt) or _is_atom(new) else f"({text})"
                if self._parses_to(replacement, new):
                    break
            else:
                return None
            original, mutated = _oneline(self.text[start:end]), _oneline(text)
        else:
            # positions inside an f-string are not exact on Python < 3.12: rewrite the whole f-string
            start, end = self._span(fstring)
            if not self._parses_to(self.text[start:end], fstring):
                return None
            new_fstring = self._swapped_copy(fstring, target, new)
            replacement = ast.unparse(new_fstring)
            if not self._parses_to(replacement, new_fstring):
                return None
            if isinstance(target, (ast.JoinedStr, ast.Constant)):
                original, mutated = _oneline(self.text[start:end]), replacement
            else:
                original, mutated = ast.unparse(target), ast.unparse(new)
        return Mutant(self.file, target.lineno, target.col_offset + 1, operator, original, mutated, start, end,
                      replacement)

    # -- operators: each yields (node to replace, replacement) ---------------------------------------------
    def comparison(self, node):
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                flip = COMPARE_FLIPS.get(type(op))
                if flip is not None:
                    ops = list(node.ops)
                    ops[i] = flip()
                    yield node, ast.Compare(node.left, ops, node.comparators)

    def off_by_one(self, node):
        if not (isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) <= MAX_INT):
            return
        target, value = node, node.value
        parent = self.parent.get(id(node))
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.USub):
            target, value = parent, -value
            parent = self.parent.get(id(parent))
        if self._int_context(target, parent):
            for delta in (1, -1):
                yield target, _int_node(value + delta)

    def _int_context(self, node, parent) -> bool:
        if isinstance(parent, (ast.Tuple, ast.List)):
            grand = self.parent.get(id(parent))
            return isinstance(grand, (ast.Compare, ast.Subscript, ast.Call)) and self._int_context(parent, grand)
        if isinstance(parent, (ast.Compare, ast.Slice, ast.BinOp)):
            return True
        if isinstance(parent, ast.Subscript):
            return parent.slice is node
        if isinstance(parent, ast.AugAssign):
            return parent.value is node
        if isinstance(parent, ast.Call):
            return any(a is node for a in parent.args)
        return False

    def arithmetic(self, node):
        swap = {ast.Add: ast.Sub, ast.Sub: ast.Add}
        if isinstance(node, ast.BinOp) and type(node.op) in swap and \
                not (_stringy(node.left) or _stringy(node.right)):
            yield node, ast.BinOp(node.left, swap[type(node.op)](), node.right)
        if isinstance(node, ast.AugAssign) and type(node.op) in swap and not _stringy(node.value):
            yield node, ast.AugAssign(node.target, swap[type(node.op)](), node.value)

    def boolean(self, node):
        if isinstance(node, ast.BoolOp):
            yield node, ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(), node.values)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, node.operand
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            yield node, ast.Constant(not node.value)

    def string_token(self, node):
        if id(node) in self.free_text:
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            s = node.value
            in_fstring = isinstance(self.parent.get(id(node)), ast.JoinedStr)
            core = s.strip()
            if core in TOKEN_SWAPS:
                lead, trail = s[:len(s) - len(s.lstrip())], s[len(s.rstrip()):]
                for new in TOKEN_SWAPS[core]:
                    yield node, ast.Constant(lead + new + trail)
            if in_fstring:
                for tok in WORD_TOKENS:
                    if tok == core:
                        continue
                    for m in re.finditer(rf"(?<![\w.]){re.escape(tok)}(?!\w)", s):
                        for new in TOKEN_SWAPS[tok]:
                            yield node, ast.Constant(s[:m.start()] + new + s[m.end():])
        elif isinstance(node, ast.JoinedStr):
            swapped = _swap_if_then_else_arms(node)
            if swapped is not None:
                yield node, swapped

    def dropped_mask(self, node):
        if isinstance(node, (ast.If, ast.IfExp)) and not isinstance(node.test, ast.Constant) and \
                any("mask" in n.lower() for n in _names_in(node.test)):
            yield node.test, ast.Constant(True)
            yield node.test, ast.Constant(False)
        elif isinstance(node, ast.keyword) and node.arg == "mask" and \
                not (isinstance(node.value, ast.Constant) and node.value.value is None):
            yield node.value, ast.Constant(None)

    def transpose(self, node):
        if isinstance(node, ast.Call):
            flags = [k for k in node.keywords if k.arg and TRANS_FLAG.search(k.arg)]
            if len(flags) >= 2:
                kws = [ast.keyword(k.arg, k.value) for k in node.keywords]
                i, j = node.keywords.index(flags[0]), node.keywords.index(flags[1])
                kws[i].value, kws[j].value = kws[j].value, kws[i].value
                yield node, ast.Call(node.func, node.args, kws)
        elif isinstance(node, ast.Tuple) and isinstance(node.ctx, ast.Load):
            idx = [i for i, e in enumerate(node.elts) if (n := _flag_name(e)) and TRANS_FLAG.search(n)]
            if len(idx) >= 2:
                elts = list(node.elts)
                elts[idx[0]], elts[idx[1]] = elts[idx[1]], elts[idx[0]]
                yield node, ast.Tuple(elts, ast.Load())
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            name = _flag_name(node)
            if not TRANS_FLAG.search(name):
                return
            partner = _partner(name)
            if isinstance(node, ast.Name) and partner and partner in self._local_names(node):
                yield node, ast.Name(partner, ast.Load())
            parent = self.parent.get(id(node))
            as_condition = (isinstance(parent, (ast.If, ast.IfExp, ast.While)) and parent.test is node) or \
                isinstance(parent, ast.BoolOp)
            if as_condition:
                yield node, ast.UnaryOp(ast.Not(), node)

    def _local_names(self, node: ast.AST) -> set[str]:
        """Names bound in the function around `node` (its arguments and assignment targets)."""
        p = self.parent.get(id(node))
        while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            p = self.parent.get(id(p))
        if id(p) not in self._locals:
            names = set()
            for n in ast.walk(p):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    names.add(n.id)
                elif isinstance(n, ast.arg):
                    names.add(n.arg)
            self._locals[id(p)] = names
        return self._locals[id(p)]

    def mutants(self) -> list[Mutant]:
        ops = {"comparison": self.comparison, "off-by-one": self.off_by_one, "arithmetic": self.arithmetic,
               "boolean": self.boolean, "string-token": self.string_token, "dropped-mask": self.dropped_mask,
               "transpose": self.transpose}
        out, seen = [], set()
        for node in ast.walk(self.tree):
            if id(node) in self.skip:
                continue
            for name, gen in ops.items():
                for target, new in gen(node):
                    m = self.make(target, new, name)
                    if m is None:
                        continue
                    key = (m.start, m.end, m.replacement)
                    if key not in seen:
                        seen.add(key)
                        out.append(m)
        out.sort(key=lambda m: (m.line, m.col, OPERATORS.index(m.operator), m.mutated))
        return out


def _swap_if_then_else_arms(node: ast.JoinedStr) -> ast.JoinedStr | None:
    """f"...T.if_then_else({c}, {a}, {b})..." -> the same with {a} and {b} exchanged."""
    v = node.values
    for i in range(len(v) - 5):
        if isinstance(v[i], ast.Constant) and str(v[i].value).endswith("T.if_then_else(") and \
                isinstance(v[i + 1], ast.FormattedValue) and _piece(v[i + 2]) == ", " and \
                isinstance(v[i + 3], ast.FormattedValue) and _piece(v[i + 4]) == ", " and \
                isinstance(v[i + 5], ast.FormattedValue) and i + 6 < len(v) and \
                str(_piece(v[i + 6])).startswith(")"):
            values = list(v)
            values[i + 3], values[i + 5] = values[i + 5], values[i + 3]
            return ast.JoinedStr(values)
    return None


def _piece(node):
    return node.value if isinstance(node, ast.Constant) else None


def target_files(paths, excluded=()) -> list[str]:
    out = []
    for p in paths:
        full = os.path.join(ROOT, p)
        if os.path.isfile(full):
            out.append(os.path.relpath(full, ROOT))
        elif os.path.isdir(full):
            for dirpath, dirnames, filenames in os.walk(full):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                out.extend(os.path.relpath(os.path.join(dirpath, f), ROOT) for f in sorted(filenames)
                           if f.endswith(".py"))
        else:
            sys.exit(f"mutation: no such file or folder: {p}")
    skip = tuple(os.path.normpath(e) + os.sep for e in excluded)
    return sorted(f for f in dict.fromkeys(out) if not (os.path.normpath(f) + os.sep).startswith(skip))


def find_mutants(files) -> tuple[list[Mutant], dict[str, str]]:
    mutants, texts = [], {}
    for f in files:
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            texts[f] = fh.read()
        mutants.extend(FileMutator(f, texts[f]).mutants())
    return mutants, texts


# realistic bugs, written out by hand, that the numeric tests (no goldens) must keep catching:
# (file, exact text, replacement, what the bug is); --known runs these instead of the generated mutants
KNOWN_BUGS = (
    ("lowering/triton/expressions.py", 'return f"tl.{o}({g.expr(x)}, {g.expr(y)})"',
     'return f"tl.maximum({g.expr(x)}, {g.expr(y)})"',
     "the Triton generator emits tl.maximum for tl.minimum"),
    ("lowering/transforms/fold.py", "return q if (a >= 0) == (b > 0) else -q", "return a // b",
     "constant folding floors // on signed integers (Python's rule, not Triton's)"),
    ("lowering/tilelang/expressions.py", 'return f"T.truncdiv({x}, {y})"', 'return f"T.floordiv({x}, {y})"',
     "the TileLang generator floors // on signed integers"),
    ("lowering/tilelang/memory.py",
     "    if mask is not None:\n        g.emit(f\"if {g.elem(mask, idx)}:\", indent + 1)",
     "    if False:\n        g.emit(f\"if {g.elem(mask, idx)}:\", indent + 1)",
     "the TileLang generator drops the mask of a T.Parallel store"),
    ("lowering/tilelang/reductions.py", 'g.emit(f"T.reduce_{kind}(',
     'g.emit(f"T.reduce_{\'max\' if kind == \'sum\' else kind}(',
     "the TileLang generator emits T.reduce_max for a sum"),
    ("lowering/analysis/access.py", "_max_over_tile(d_form, tile_shape) < 0:",
     "_max_over_tile(d_form, tile_shape) <= 0:",
     "the box planner takes a mask whose last element is false (offs < 127 over 128) as always true"),
)


def known_mutants() -> tuple[list[Mutant], dict[str, str]]:
    mutants, texts = [], {}
    for f, old, new, what in KNOWN_BUGS:
        if f not in texts:
            with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
                texts[f] = fh.read()
        text = texts[f]
        if text.count(old) != 1:
            sys.exit(f"mutation: the known bug `{what}` expects its text once in {f}, found it "
                     f"{text.count(old)} times: update KNOWN_BUGS")
        start = text.index(old)
        line = text.count("\n", 0, start) + 1
        mutants.append(Mutant(f, line, start - text.rfind("\n", 0, start), "known", what, _oneline(new),
                              start, start + len(old), new))
    return mutants, texts


# ---------------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------------
@dataclass
class Result:
    file: str
    line: int
    col: int
    operator: str
    original: str
    mutated: str
    status: str
    seconds: float
    failed_test: str | None
    description: str
    source: str = ""     # the mutated line as it read (stripped): --rerun finds it again after edits above it
    how: str = "fresh"   # fresh: a new interpreter; fork: the server, patched in memory; unrun: no test runs it
    tests: int | None = None    # with --map: how many tests were chosen for it


class Worker:
    """A pristine copy of the source tree, with its own caches, that mutants are run in one at a time."""

    def __init__(self, base: str, index: int, texts: dict[str, str]):
        self.dir = os.path.join(base, f"worker{index}")
        self.src = os.path.join(self.dir, "src")
        os.makedirs(self.dir)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info")
        for name in COPIED:
            s, d = os.path.join(ROOT, name), os.path.join(self.src, name)
            if os.path.isdir(s):
                shutil.copytree(s, d, ignore=ignore)
            elif os.path.exists(s):
                os.makedirs(self.src, exist_ok=True)
                shutil.copy2(s, d)
        for relpath, text in texts.items():     # the targets as the mutants were made from them
            self.write(relpath, text)
        self.env = self._environment()

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        root = os.path.realpath(ROOT)
        kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                if p and os.path.realpath(p) != root]
        # tests/ too: the coverage and selection plugin (-p mutation_coverage) and the test server import from it
        env["PYTHONPATH"] = os.pathsep.join([self.src, os.path.join(self.src, "tests")] + kept)
        env["TRITON_INTERPRET"] = "1"       # as tests/cpu/conftest.py sets it, before the server imports triton
        # one thread per worker: the workers share the cores, and a forked child inherits no thread pool
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
        for var in CACHE_VARS + ("TMPDIR",):
            env[var] = os.path.join(self.dir, var.lower())
            os.makedirs(env[var], exist_ok=True)
        env["PYTHONDONTWRITEBYTECODE"] = "1"     # never a stale .pyc for a mutant of the same size and mtime
        return env

    def run(self, cmd: list[str], timeout: float, running: set, env: dict | None = None
            ) -> tuple[int | None, float, str]:
        """(exit code or None on timeout, seconds, output)."""
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=self.src, env={**self.env, **(env or {})}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        running.add(proc)
        try:
            out, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            _kill(proc)
            out, _ = proc.communicate()
            rc = None
        finally:
            running.discard(proc)
        return rc, time.monotonic() - t0, out or ""

    def write(self, relpath: str, text: str):
        with open(os.path.join(self.src, relpath), "w", encoding="utf-8") as f:
            f.write(text)

    def targets_env(self, files: list[str]) -> dict[str, str]:
        return {"TLE_MUTATION_TARGETS": os.pathsep.join(os.path.join(self.src, f) for f in files)}

    def start_server(self, files: list[str]) -> dict[str, set[int]]:
        """Start tests/mutation_server.py in the copy; the target lines that ran while it imported."""
        self.server_log = open(os.path.join(self.dir, "server.log"), "w")
        self.server = subprocess.Popen([sys.executable, os.path.join("tests", "mutation_server.py")], cwd=self.src,
                                       env={**self.env, **self.targets_env(files)}, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=self.server_log, text=True)
        ready = self.server.stdout.readline()
        if not ready:
            sys.exit(f"mutation: the test server of {self.dir} did not start; see {self.server_log.name}")
        return {f: set(lines) for f, lines in json.loads(ready)["import_lines"].items()}

    def serve(self, request: dict) -> tuple[int | None, float, str]:
        """Run one request on the server: (exit code or None on timeout, seconds, output)."""
        request = {**request, "log": os.path.join(self.dir, "child.log")}
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        reply = self.server.stdout.readline()
        if not reply:
            if self.stopping:
                raise KeyboardInterrupt
            raise RuntimeError(f"the test server of {self.dir} stopped; see {self.server_log.name}")
        reply = json.loads(reply)
        with open(request["log"], errors="replace") as f:
            return reply["rc"], reply["seconds"], f.read()

    stopping = False

    def stop_server(self):
        self.stopping = True
        server = getattr(self, "server", None)
        if server is not None and server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()


def _kill(proc: subprocess.Popen):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def classify(rc: int | None, output: str = "") -> str:
    if rc is None or "MutantTimeout" in output:
        return "timeout"
    if rc == 0:
        return "survived"
    if 2 <= rc <= 5 or (rc == 1 and collection_error(output)):
        return "error"
    return "killed"


def collection_error(output: str) -> bool:
    """Did a test module fail to import? (With -x, pytest reports that as exit code 1, not 2.)"""
    first = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    return first is not None and first.group(0).startswith("ERROR") and "::" not in first.group(1)


def first_failure(output: str) -> str | None:
    m = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    return m.group(1) if m else None


ISOLATION_CHECK = r"""
import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = importlib.import_module(name).__file__
    except Exception as e:
        out[name] = "import failed: %s: %s" % (type(e).__name__, e)
print(json.dumps(out))
"""


def check_isolation(worker: Worker, files: list[str]):
    """Abort unless tle, tle.lowering, tle.kernels and the targets import from the worker's copy."""
    required = ["tle", "tle.lowering", "tle.kernels"]
    targets = [m for m in (module_name(f) for f in files) if m]
    proc = subprocess.run([sys.executable, "-c", ISOLATION_CHECK, *required, *targets], cwd=worker.src,
                          env=worker.env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"mutation: the isolation check failed:\n{proc.stdout}{proc.stderr}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    src = os.path.realpath(worker.src)
    for name, path in found.items():
        if path.startswith("import failed"):
            if name in required:
                sys.exit(f"mutation: {name}: {path}")
            print(f"mutation: warning: {name}: {path}", file=sys.stderr)
        elif not os.path.realpath(path).startswith(src + os.sep):
            sys.exit(f"mutation: {name} imports from {path}, not from the copy in {src}: mutants would not "
                     f"be what the tests run")


def canary_text(text: str) -> str:
    return text + '\nraise RuntimeError("mutation canary: this module was made to fail on import")\n'


class Campaign:
    def __init__(self, args, files: list[str], texts: dict[str, str]):
        self.args = args
        self.files = files
        self.texts = texts
        self.cmd = [sys.executable, "-m", "pytest", *pytest_args(args)]
        self.tilelang_cmd = [sys.executable, "-m", "pytest", *pytest_args(args, without_triton=True)]
        quick = (QUICK_GOLDENS if args.with_goldens else ()) + QUICK
        self.quick = [sys.executable, "-m", "pytest", *quick, "-x", "-q", "-p", "no:cacheprovider"] \
            if args.pytest_args is None and args.quick else None
        if self.quick:      # what the quick stage ran need not run again
            rest = [a for q in quick for a in ("--deselect", q)]
            self.cmd, self.tilelang_cmd = self.cmd + rest, self.tilelang_cmd + rest
        self.base = tempfile.mkdtemp(prefix="tle-mutation-", dir=args.workdir)
        self.workers: list[Worker] = []
        self.running: set = set()
        self.stop = threading.Event()
        self.baseline_seconds: float | None = None
        self.map: TestMap | None = None
        self.import_lines: dict[str, set[int]] = {}

    def prepare(self):
        log(f"copying the source tree for {self.args.jobs} worker(s) into {self.base}")
        self.workers = [Worker(self.base, i, self.texts) for i in range(self.args.jobs)]
        for w in self.workers:
            check_isolation(w, self.files)
        log("isolation checked: tle, tle.lowering, tle.kernels and the targets import from the copies")
        if self.args.map:
            self._prepare_map()
            return
        log("baseline: " + " ".join(shlex.quote(c) for c in (self.quick or []) + ["then"] * bool(self.quick)
                                     + self.cmd))
        rc, secs, out = 0, 0.0, ""
        if self.quick:
            rc, secs, out = self.workers[0].run(self.quick, self.args.timeout, self.running)
        if rc == 0:
            rc, more, out = self.workers[0].run(self.cmd, self.args.timeout, self.running)
            secs += more
        self.baseline_seconds = secs
        if rc != 0:
            sys.exit(f"mutation: the baseline run fails (exit code {rc}, {secs:.1f}s); fix it first:\n"
                     f"{out[-4000:]}")
        log(f"baseline passed in {secs:.1f}s (with empty caches)")
        self._share_caches()
        if self.args.canary:
            self._canary()

    def _share_caches(self):
        """Give every worker the caches the baseline filled: they hold only what the pristine tree
        generated, keyed by content, so a mutant that changes nothing compiled reuses them."""
        first = self.workers[0]
        for w in self.workers[1:]:
            for var in CACHE_VARS:
                shutil.copytree(first.env[var], w.env[var], dirs_exist_ok=True, symlinks=True)

    def _canary(self):
        """Every target made to raise on import must be caught: else the tests do not run the copy."""
        w = self.workers[0]
        try:
            for f in self.files:
                w.write(f, canary_text(self.texts[f]))
            rc, secs, out = w.run(self.cmd, self.args.timeout, self.running)
        finally:
            for f in self.files:
                w.write(f, self.texts[f])
        if classify(rc, out) == "survived":
            sys.exit("mutation: the canary (every target raising on import) survived: the tests do not run "
                     "the copy, or import none of the targets; pick other --paths or --pytest-args")
        log(f"canary (every target raising on import) caught: {classify(rc, out)} in {secs:.1f}s"
            + (f", first failure {first_failure(out)}" if first_failure(out) else ""))

    # --- with a coverage map: each mutant runs the tests that run its lines, in a forked test server ---
    def _prepare_map(self):
        """Load the map (or make it: that run is the baseline), then start a test server per worker."""
        if os.path.exists(self.args.map):
            self.map = TestMap.load(self.args.map)
            stale = self.map.stale(self.texts)
            if stale:
                sys.exit(f"mutation: {self.args.map} was made from other versions of {', '.join(stale[:5])}: "
                         f"make it again (remove it)")
            log(f"coverage map {self.args.map}: {len(self.map.tests)} tests")
            self.baseline_seconds = sum(self.map.seconds)
        else:
            self._make_map()
        for w in self.workers if not self.args.fresh else ():
            for f, lines in w.start_server(self.files).items():
                self.import_lines.setdefault(f, set()).update(lines)
        log(f"test servers started; {sum(map(len, self.import_lines.values()))} target lines ran at import")
        if self.args.canary:
            self._canary()

    def _shards(self) -> list[tuple[list[str], list[str]]]:
        """(test files, node ids or []) per worker: by file, or, given an earlier map (--shard-by), the tests
        collected now spread by their times there (the longest first, each to the least loaded worker; a test
        the earlier map lacks counts its median time)."""
        n = len(self.workers)
        if not self.args.shard_by:
            files = sorted(os.path.relpath(os.path.join(d, f), ROOT)
                           for d, _, fs in os.walk(os.path.join(ROOT, "tests", "cpu"))
                           for f in fs if f.startswith("test_") and f.endswith(".py"))
            return [(files[i::n], []) for i in range(n)]
        earlier = TestMap.load(self.args.shard_by)
        seconds = dict(zip(earlier.tests, earlier.seconds))
        typical = statistics.median(earlier.seconds) if earlier.seconds else 1.0
        collected = self._collect()
        loads, tests = [0.0] * n, [[] for _ in range(n)]
        for t in sorted(collected, key=lambda t: -seconds.get(t, typical)):
            k = loads.index(min(loads))
            loads[k] += seconds.get(t, typical)
            tests[k].append(t)
        return [(sorted({t.split("::")[0] for t in ts}), ts) for ts in tests if ts]

    def _collect(self) -> list[str]:
        """The node ids of tests/cpu -m 'not slow', collected in the first worker's copy."""
        cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "not slow",
               os.path.join("tests", "cpu")]
        rc, secs, text = self.workers[0].run(cmd, self.args.map_timeout, self.running)
        if rc != 0:
            sys.exit(f"mutation: collecting the tests failed (exit code {rc}):\n{text[-4000:]}")
        return [line.strip() for line in text.splitlines() if "::" in line and not line.startswith(" ")]

    def _make_map(self):
        """Run the whole suite (goldens included) under the line recorder, spread over the workers; every
        shard must pass: this is the baseline."""
        shards = self._shards()
        log(f"making the coverage map {self.args.map}: tests/cpu -m 'not slow' under the line recorder, "
            f"{len(shards)} shard(s)")

        def shard(i):
            w = self.workers[i]
            out = os.path.join(w.dir, "map.json")
            files, tests = shards[i]
            env = {**w.targets_env(self.files), "TLE_MUTATION_MAP": out}
            if tests:
                env["TLE_MUTATION_SELECT"] = os.path.join(w.dir, "shard.txt")
                with open(env["TLE_MUTATION_SELECT"], "w") as f:
                    f.write("\n".join(tests) + "\n")
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "mutation_coverage",
                   "-m", "not slow", *files]
            rc, secs, text = w.run(cmd, self.args.map_timeout, self.running, env=env)
            if rc not in (0, 1) or not os.path.exists(out):
                sys.exit(f"mutation: the baseline shard {i} did not finish (exit code {rc}, {secs:.0f}s):\n"
                         f"{text[-4000:]}")
            with open(out) as f:
                return json.load(f), secs

        with ThreadPoolExecutor(max_workers=len(shards)) as pool:
            parts = list(pool.map(shard, range(len(shards))))
        data = merge([p for p, _ in parts], self.texts)
        with open(self.args.map, "w") as f:
            json.dump(data, f)
        self.map = TestMap(data)
        self.baseline_seconds = max(secs for _, secs in parts)
        if self.map.failed:     # left out of every selection: the kill rate can only err low
            log(f"mutation: warning: {len(self.map.failed)} test(s) fail on the pristine tree and are never chosen: "
                + ", ".join(sorted(self.map.failed)[:10]))
        log(f"baseline passed in {self.baseline_seconds:.0f}s; coverage map written: {len(self.map.tests)} tests")

    def plan(self, m: Mutant) -> tuple[str, list[str]]:
        """How a mutant runs (fork, fresh or unrun) and its tests, in the order they run."""
        lines = m.lines(self.texts[m.file])
        if self.map.ran_at_collection(m.file, lines) or self.import_lines.get(m.file, set()) & set(lines):
            return "fresh", self.ordered(i for i in range(len(self.map.tests)) if self.map.passing[i])
        chosen = self.ordered(self.map.tests_for(m.file, lines))
        return ("unrun" if not chosen else "fresh" if self.args.fresh else "fork"), chosen

    def ordered(self, indices) -> list[str]:
        """Goldens first (with --with-goldens), then the quick stage's tests, then the fastest first."""
        def rank(i):
            n = self.map.tests[i]
            return (0 if "golden" in n.lower() else 1 if n.startswith(QUICK) else 2), self.map.seconds[i], i
        keep = [i for i in indices if self.args.with_goldens or "golden" not in self.map.tests[i].lower()]
        return [self.map.tests[i] for i in sorted(keep, key=rank)]

    def run_mapped(self, m: Mutant, w: Worker) -> tuple[str, int, int | None, float, str]:
        """(how, number of tests, exit code, seconds, output) for a mutant already written into `w`."""
        how, tests = self.plan(m)
        if how == "unrun":
            return how, 0, 0, 0.0, ""
        # a mutant that makes a test loop runs out: each test may take five times what it took (traced) in
        # the baseline, and half a minute; the whole run three times, and a minute
        took = {t: self.map.seconds[self.map.index[t]] for t in tests}
        limits = {t: 30 + 5 * s for t, s in took.items()}
        timeout = min(self.args.timeout, 60 + 3 * sum(took.values()))
        paths = list(dict.fromkeys(t.split("::")[0] for t in tests))
        args = ["-x", "-q", "-p", "no:cacheprovider"]
        if how == "fork":
            rc, secs, out = w.serve({"file": m.file, "pristine": self.texts[m.file],
                                     "mutant": m.apply(self.texts[m.file]), "paths": paths, "tests": tests,
                                     "args": args, "timeout": timeout, "limits": limits})
            if rc != NEEDS_FRESH_INTERPRETER:
                return how, len(tests), rc, secs, out
            how = "fresh"
        chosen = os.path.join(w.dir, "chosen.txt")
        with open(chosen, "w") as f:
            f.write("".join(f"{t}\t{limits[t]:.1f}\n" for t in tests))
        cmd = [sys.executable, "-m", "pytest", *args, "-p", "mutation_coverage", *paths]
        rc, secs, out = w.run(cmd, timeout + 30, self.running, env={"TLE_MUTATION_SELECT": chosen})
        return how, len(tests), rc, secs, out

    def run_one(self, m: Mutant, free: list[Worker], lock: threading.Lock) -> Result:
        with lock:
            w = free.pop()
        how, count = "fresh", None
        try:
            if self.stop.is_set():
                raise KeyboardInterrupt
            w.write(m.file, m.apply(self.texts[m.file]))
            if self.map is not None:
                try:
                    how, count, rc, secs, out = self.run_mapped(m, w)
                finally:
                    w.write(m.file, self.texts[m.file])
                return self.result(m, rc, secs, out, how, count)
            try:
                rc, secs, out = 0, 0.0, ""
                if self.quick:
                    # the tests that kill most mutants first: a mutant they kill is done in seconds
                    rc, secs, out = w.run(self.quick, self.args.timeout, self.running)
                if rc == 0:
                    cmd = self.tilelang_cmd if m.file.startswith("lowering/tilelang/") else self.cmd
                    rc, more, out = w.run(cmd, self.args.timeout, self.running)
                    secs += more
            finally:
                w.write(m.file, self.texts[m.file])
        finally:
            with lock:
                free.append(w)
        return self.result(m, rc, secs, out, how, count)

    def result(self, m: Mutant, rc, secs, out, how, count) -> Result:
        status = classify(rc, out)
        failed = first_failure(out) if status != "survived" else None
        return Result(m.file, m.line, m.col, m.operator, m.original, m.mutated, status, round(secs, 2), failed,
                      m.describe(full=True), source_line(self.texts[m.file], m.line), how, count)

    def run(self, mutants: list[Mutant]) -> list[Result]:
        done: list[tuple[int, Result]] = []
        free, lock = list(self.workers), threading.Lock()
        pool = ThreadPoolExecutor(max_workers=len(self.workers))
        futures = {pool.submit(self.run_one, m, free, lock): i for i, m in enumerate(mutants)}
        try:
            for fut in as_completed(futures):
                if fut.exception() is not None:
                    if isinstance(fut.exception(), KeyboardInterrupt):
                        continue
                    raise fut.exception()
                r, i = fut.result(), futures[fut]
                done.append((i, r))
                log(f"[{len(done)}/{len(mutants)}] {r.status:<8} {r.seconds:6.1f}s  {mutants[i].describe()}")
        except KeyboardInterrupt:
            log("interrupted: stopping the running tests; reporting what finished")
            self.stop.set()
            for fut in futures:
                fut.cancel()
            for proc in list(self.running):
                _kill(proc)
            for w in self.workers:
                w.stop_server()
        finally:
            pool.shutdown(wait=True)
        return [r for _, r in sorted(done, key=lambda ir: ir[0])]

    def cleanup(self):
        for w in self.workers:
            w.stop_server()
        if self.args.keep:
            log(f"kept the worker copies in {self.base}")
        else:
            shutil.rmtree(self.base, ignore_errors=True)


def pytest_args(args, without_triton: bool = False) -> list[str]:
    """The whole test command's arguments; `without_triton`: for a mutant of the TileLang backend, which no
    test of the Triton lowering runs, leave those tests out (they are the slowest)."""
    if args.pytest_args is not None:
        return shlex.split(args.pytest_args)
    out = ["tests/cpu", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow"]
    skip = ([] if args.with_goldens else ["golden"]) + (["triton"] if without_triton else [])
    if skip:
        out += ["-k", " and ".join(f"not {w}" for w in skip)]
    return out


def log(msg: str):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------
# reporting
# ---------------------------------------------------------------------------------------------------
def tally(results: list[Result], key) -> list[tuple[str, dict]]:
    """[(group, {total, killed, survived, timeout, error})] by folder or operator, then "all"."""
    groups: dict[str, dict] = {}
    for r in results:
        g = groups.setdefault(key(r), {s: 0 for s in ("total",) + STATUSES})
        g["total"] += 1
        g[r.status] += 1
    rank = {op: i for i, op in enumerate(OPERATORS)}
    rows = sorted(groups.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))
    if results:
        total = {s: sum(g[s] for _, g in rows) for s in ("total",) + STATUSES}
        rows.append(("all", total))
    return rows


def kill_rate(g: dict) -> str:
    if not g["total"]:
        return "-"
    return f"{100.0 * (g['killed'] + g['timeout'] + g['error']) / g['total']:.1f}%"


def text_table(title: str, rows) -> str:
    head = f"{title:<32} {'total':>6} {'killed':>7} {'survived':>9} {'timeout':>8} {'error':>6} {'kill rate':>10}"
    lines = [head, "-" * len(head)]
    for name, g in rows:
        lines.append(f"{name:<32} {g['total']:>6} {g['killed']:>7} {g['survived']:>9} {g['timeout']:>8} "
                     f"{g['error']:>6} {kill_rate(g):>10}")
    return "\n".join(lines)


def markdown_table(title: str, rows) -> str:
    lines = [f"| {title} | Mutants | Killed | Survived | Timeouts | Errors | Kill rate |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, g in rows:
        label = f"**{name}**" if name == "all" else f"`{name}`"
        lines.append(f"| {label} | {g['total']} | {g['killed']} | {g['survived']} | {g['timeout']} | "
                     f"{g['error']} | {kill_rate(g)} |")
    return "\n".join(lines)


def count_table(mutants: list[Mutant]) -> str:
    folders = sorted({m.folder for m in mutants})
    width = max([len("operator")] + [len(o) for o in OPERATORS])
    cols = [max(len(f), 5) for f in folders]
    head = f"{'operator':<{width}} " + " ".join(f"{f:>{c}}" for f, c in zip(folders, cols)) + f" {'total':>6}"
    lines = [head, "-" * len(head)]
    for op in OPERATORS + ("all",):
        sel = [m for m in mutants if op in ("all", m.operator)]
        lines.append(f"{op:<{width}} " + " ".join(f"{sum(m.folder == f for m in sel):>{c}}"
                                                  for f, c in zip(folders, cols)) + f" {len(sel):>6}")
    return "\n".join(lines)


def summary_text(results: list[Result]) -> str:
    parts = [text_table("folder", tally(results, lambda r: os.path.dirname(r.file))), "",
             text_table("operator", tally(results, lambda r: r.operator))]
    for status in ("survived", "timeout", "error"):
        sel = [r for r in results if r.status == status]
        if sel:
            parts += ["", f"{status} ({len(sel)}):"] + [f"  {_short(r)}" for r in sel]
    return "\n".join(parts)


def _short(r: Result) -> str:
    a, b = _shorten_pair(r.original, r.mutated)
    return f"{r.file}:{r.line}: `{a}` -> `{b}` ({r.operator})"


def how_counts(results: list[Result]) -> str:
    counts = {h: sum(r.how == h for r in results) for h in ("fork", "fresh", "unrun")}
    return ", ".join(f"{h} {n}" for h, n in counts.items() if n)


def write_markdown(path: str, results: list[Result], tests: str, selection: str):
    survivors = [r for r in results if r.status == "survived"]
    lines = [f"Mutants: {len(results)} ({selection}); tests: {tests}.", "",
             f"How they ran: {how_counts(results)} (fork: in the test server, patched in memory; fresh: in a new "
             f"interpreter; unrun: no test runs the line).", "",
             markdown_table("Folder", tally(results, lambda r: os.path.dirname(r.file))), "",
             markdown_table("Operator", tally(results, lambda r: r.operator)), "",
             f"Survivors ({len(survivors)}):", ""]
    lines += [f"- `{r.file}:{r.line}`: `{_md(a)}` -> `{_md(b)}` ({r.operator})"
              for r in survivors for a, b in [_shorten_pair(r.original, r.mutated)]]
    for status in ("timeout", "error"):
        sel = [r for r in results if r.status == status]
        if sel:
            lines += ["", f"{status.capitalize()}s ({len(sel)}, counted as killed):", ""]
            lines += [f"- `{r.file}:{r.line}` ({r.operator})" + (f": {r.failed_test}" if r.failed_test else "")
                      for r in sel]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _md(s: str) -> str:
    return s.replace("`", "'").replace("|", "\\|")


def tests_text(campaign: Campaign) -> str:
    if campaign.args.map:
        return (f"the tests of tests/cpu -m 'not slow' that run the mutated lines (coverage map "
                f"{os.path.basename(campaign.args.map)}, {len(campaign.map.tests)} tests"
                + (f", {len(campaign.map.failed)} failing on the pristine tree left out" if campaign.map.failed else "")
                + "), goldens "
                f"{'included' if campaign.args.with_goldens else 'left out'}")
    cmd = " ".join(shlex.quote(c) for c in campaign.cmd[1:])
    return f"`python {cmd}` (baseline {campaign.baseline_seconds:.0f}s)"


def write_json(path: str, results: list[Result], tests: str, selection: str, targets: list[str]):
    data = {"tests": tests, "targets": targets, "selection": selection,
            "summary": {"by_folder": dict(tally(results, lambda r: os.path.dirname(r.file))),
                        "by_operator": dict(tally(results, lambda r: r.operator))},
            "results": [asdict(r) for r in results]}
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Mutation testing of the compiler against the CPU tests.",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Statuses: killed, survived, timeout and error (see the module docstring).")
    p.add_argument("--paths", nargs="+", default=list(DEFAULT_TARGETS), metavar="PATH",
                   help="files or folders to mutate, relative to the project root (default: %(default)s)")
    p.add_argument("--exclude", nargs="*", default=list(DEFAULT_EXCLUDED), metavar="PATH",
                   help="folders or files under --paths left alone (default: %(default)s)")
    p.add_argument("--known", action="store_true",
                   help="run the hand-written realistic bugs of KNOWN_BUGS (any folder) instead of the generated "
                        "mutants")
    p.add_argument("--rerun", metavar="JSON", help="run again the mutants that survived in an earlier --json report")
    p.add_argument("--list", action="store_true", help="print the selected mutants and their counts, run nothing")
    p.add_argument("--only", action="append", metavar="SUBSTRING",
                   help="keep mutants whose description (file:line: `original` -> `mutated` (operator)) "
                        "contains this; repeatable (any matches)")
    p.add_argument("--operator", action="append", choices=OPERATORS, help="keep only these operators; repeatable")
    p.add_argument("--sample", type=int, metavar="K", help="run a random sample of K mutants (after --only)")
    p.add_argument("--seed", type=int, default=0, help="seed for --sample (default: %(default)s)")
    p.add_argument("--shuffle", action="store_true",
                   help="run the selection in a random order (--seed): interrupted (Ctrl-C or SIGTERM), what "
                        "finished is a random sample")
    p.add_argument("--limit", type=int, metavar="N", help="run at most the first N selected mutants")
    p.add_argument("--reverse", action="store_true",
                   help="run the selection last first (a second machine on the same shuffled campaign)")
    p.add_argument("--skip", action="append", metavar="JSON",
                   help="leave out the mutants an earlier --json report holds (a campaign continued; a row is found "
                        "again on its line's text after edits above it); repeatable")
    p.add_argument("--merge", nargs="+", metavar="JSON",
                   help="run nothing: merge these --json reports of one campaign and print (or write, with "
                        "--json/--markdown) the figures of the files as they are now (a row whose line changed is "
                        "left out)")
    p.add_argument("--jobs", type=int, default=2, help="mutants run in parallel (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per test run (default: %(default)s)")
    p.add_argument("--pytest-args", metavar="ARGS",
                   help='pytest arguments replacing the default '
                        '(tests/cpu -x -q -p no:cacheprovider -m "not slow" -k "not golden")')
    p.add_argument("--with-goldens", action="store_true", help="include the golden-file tests")
    p.add_argument("--map", metavar="JSON",
                   help="a coverage map (made first, as the baseline, where the file does not exist): each mutant "
                        "runs only the tests that run its lines, in a test server that imports once and patches "
                        "the mutant in memory (tests/mutation_server.py); a mutant of a line that runs at import "
                        "runs every test in a new interpreter")
    p.add_argument("--fresh", action="store_true",
                   help="with --map, run every mutant in a new interpreter instead of the test server (slower; "
                        "what the server's in-memory patching is checked against)")
    p.add_argument("--shard-by", metavar="JSON",
                   help="when making the map, spread the tests over the workers by the times of this earlier map")
    p.add_argument("--map-timeout", type=float, default=3600,
                   help="seconds for each shard of the run that makes the map (default: %(default)s)")
    p.add_argument("--no-quick", dest="quick", action="store_false",
                   help="run only the whole test command, without the quick first stage (QUICK)")
    p.add_argument("--no-canary", dest="canary", action="store_false",
                   help="skip the check that the targets, broken on purpose, are caught")
    p.add_argument("--json", metavar="PATH", help="write every result as JSON")
    p.add_argument("--markdown", metavar="PATH", help="write the figures and survivors as markdown")
    p.add_argument("--workdir", help="where the worker copies go (default: the system temp folder)")
    p.add_argument("--keep", action="store_true", help="keep the worker copies afterwards")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    return args


def source_line(text: str, line: int) -> str:
    lines = text.splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def match_rows(mutants: list[Mutant], rows: list[dict], texts: dict[str, str]) -> dict[int, list[dict]]:
    """id(mutant) -> the rows of earlier reports that are that mutant. A row that names its line's text
    (`source`) matches the mutant on the line with that text nearest its old number, so edits elsewhere in the
    file do not lose it; a row without one matches on its line number. A row whose line's text is gone (its
    code changed) matches nothing."""
    by_text: dict[tuple, list[Mutant]] = {}
    for m in mutants:
        key = (m.file, source_line(texts.get(m.file, ""), m.line), m.col, m.operator, _expression(m.mutated))
        by_text.setdefault(key, []).append(m)
    by_line = {(m.file, m.line, m.col, m.operator, _expression(m.mutated)): m for m in mutants}
    out: dict[int, list[dict]] = {}
    for r in rows:
        mutated = _expression(r["mutated"])
        if r.get("source"):
            found = by_text.get((r["file"], r["source"], r["col"], r["operator"], mutated), [])
            m = min(found, key=lambda m: abs(m.line - r["line"])) if found else None
        else:
            m = by_line.get((r["file"], r["line"], r["col"], r["operator"], mutated))
        if m is not None:
            out.setdefault(id(m), []).append(r)
    return out


def rerun_selection(mutants: list[Mutant], rows: list[dict], texts: dict[str, str]) -> list[Mutant]:
    """The mutants that survived in an earlier report's `rows` (matched as match_rows does)."""
    chosen = match_rows(mutants, [r for r in rows if r["status"] == "survived"], texts)
    return [m for m in mutants if id(m) in chosen]


def select(mutants: list[Mutant], args, texts: dict[str, str] | None = None) -> tuple[list[Mutant], str]:
    sel, notes = mutants, []
    if args.rerun:
        with open(args.rerun) as f:
            earlier = json.load(f)
        rows = earlier["results"] if isinstance(earlier, dict) else earlier
        sel = rerun_selection(sel, rows, texts or {})
        notes.append(f"the survivors of {os.path.basename(args.rerun)}")
    if args.only:
        sel = [m for m in sel if any(s in m.describe(full=True) for s in args.only)]
        notes.append("only " + ", ".join(args.only))
    if args.operator:
        sel = [m for m in sel if m.operator in args.operator]
        notes.append("operators " + ", ".join(args.operator))
    if args.sample is not None and args.sample < len(sel):
        keep = set(map(id, random.Random(args.seed).sample(sel, args.sample)))
        sel = [m for m in sel if id(m) in keep]
        notes.append(f"sample of {args.sample}, seed {args.seed}")
    if args.shuffle:      # an interrupted campaign is then a random sample of the selection
        sel = random.Random(args.seed).sample(sel, len(sel))
        notes.append(f"shuffled, seed {args.seed}")
    if args.skip:           # a campaign continued: what earlier reports hold is done
        rows = []
        for path in args.skip:
            with open(path) as f:
                rows += json.load(f)["results"]
        done = match_rows(sel, rows, texts or {})
        sel = [m for m in sel if id(m) not in done]
        notes.append("without the mutants of " + ", ".join(map(os.path.basename, args.skip)))
    if args.reverse:
        sel = sel[::-1]
        notes.append("reversed")
    if args.limit is not None:
        sel = sel[:args.limit]
        notes.append(f"limit {args.limit}")
    return sel, (f"{len(sel)} of {len(mutants)}: " + "; ".join(notes)) if notes else f"all {len(mutants)}"


def _identity(row: dict) -> tuple:
    return row["file"], row["line"], row["col"], row["operator"], _expression(row["mutated"])


def _expression(text: str) -> str:
    """`text` as the expression it parses to: Python versions print some (f-strings) differently. A text this
    Python cannot parse (an f-string in 3.12's syntax, read by 3.11) stays as it is."""
    try:
        return ast.dump(ast.parse(text, mode="eval"))
    except SyntaxError:
        return text


def merge_reports(paths: list[str], mutants: list[Mutant] | None = None,
                  texts: dict[str, str] | None = None) -> list[Result]:
    """The results of several reports of one campaign (continued, or run on several machines), each mutant
    once; a mutant two reports disagree on is reported and counted killed if either killed it. With `mutants`
    (those of the files as they are now, `texts`), each row counts for the mutant it matches (match_rows), at
    that mutant's line; a row that matches none is left out: its code has changed since."""
    rows = []
    for path in paths:
        with open(path) as f:
            rows += json.load(f)["results"]
    if mutants is not None:
        matched = match_rows(mutants, rows, texts or {})
        keyed = [(id(m), dict(r, line=m.line, source=source_line(texts[m.file], m.line), description=m.describe()))
                 for m in mutants for r in matched.get(id(m), [])]
        if len(keyed) < len(rows):
            log(f"mutation: {len(rows) - len(keyed)} row(s) match no mutant of the files as they are now "
                "(their lines changed) and are left out")
    else:
        keyed = [(_identity(r), r) for r in rows]
    merged: dict = {}
    for key, row in keyed:
        r = Result(**row)
        old = merged.get(key)
        if old is not None and (old.status == "survived") != (r.status == "survived"):
            log(f"mutation: the reports disagree on {r.description}: {old.status} ({old.how}) and "
                f"{r.status} ({r.how})")
        if old is None or old.status == "survived":
            merged[key] = r
    return list(merged.values())


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.known:
        mutants, texts = known_mutants()
        files = sorted(texts)
    else:
        files = target_files(args.paths, args.exclude)
        if not files:
            sys.exit("mutation: no .py files to mutate")
        mutants, texts = find_mutants(files)
    if args.merge:
        results = merge_reports(args.merge, mutants, texts)
        selection = f"{len(results)} of {len(mutants)}: merged from " + ", ".join(map(os.path.basename, args.merge))
        tests = "; ".join(dict.fromkeys(json.load(open(p)).get("tests", "") for p in args.merge))
        print(f"mutants: {len(results)} ({selection}); how they ran: {how_counts(results)}")
        print(summary_text(results))
        if args.json:
            write_json(args.json, results, tests, selection, files)
        if args.markdown:
            write_markdown(args.markdown, results, tests, selection)
        return 0
    chosen, selection = select(mutants, args, texts)
    if args.list:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)     # quiet when piped into head
        for i, m in enumerate(chosen, 1):
            print(f"{i:5}  {m.describe()}")
        print()
        print(f"{len(chosen)} mutants ({selection}) in {len(files)} files")
        print(count_table(chosen))
        return 0
    if not chosen:
        sys.exit("mutation: no mutants selected")
    # Ctrl-C, or SIGTERM (a campaign run in the background ignores SIGINT), stops the running tests and
    # reports what finished
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    campaign = Campaign(args, files, texts)
    try:
        campaign.prepare()
        log(f"running {len(chosen)} mutants ({selection}) on {args.jobs} worker(s); "
            f"about {campaign.baseline_seconds * len(chosen) / args.jobs / 60:.0f} min at the baseline's pace")
        results = campaign.run(chosen)
    finally:
        campaign.cleanup()
    print(f"baseline: {campaign.baseline_seconds:.1f}s; mutants: {len(results)} ({selection})")
    print(summary_text(results))
    if args.json:
        write_json(args.json, results, tests_text(campaign), selection, files)
    if args.markdown:
        write_markdown(args.markdown, results, tests_text(campaign), selection)
    return 0


if __name__ == "__main__":
    sys.exit(main())
