"""Line maps of the compiler stages shown beside a kernel's source: each stage line is taken to the line of the
generated source it came from, by the locations the toolchain keeps in that stage, and from there to the kernel's
source line by the lowering's own line map (`Compiled.line_map`).

What each toolchain keeps:
- Triton TTGIR: an MLIR location on every op (`loc(#locN)` or inline), naming the generated file, its line and
  column; names, call sites (inlined @jit functions) and fused locations wrap those.
- Triton PTX: `.file` and `.loc` directives (left out only under TRITON_DISABLE_LINE_INFO=1); an instruction
  inlined from Triton's library carries the call site in the `.loc`'s comment.
- TileLang CUDA: the source that is compiled carries no locations. Asked (the pass config tl.emit_line_directives),
  TileLang writes a `#line` directive before each statement that has a span in the generated source; the map comes
  from the kernel lowered again with it (not compiled: what is built and launched does not change), used only where
  that text, less its directives, is the compiled CUDA source line for line. Statements TileLang makes without a
  span (a warp-specialized TMA producer, say) or from its own macros stay unmapped.
- TileLang PTX: nvcc's `.loc` directives (TileLang compiles with -lineinfo) name the lines of the CUDA source,
  mapped on through the CUDA map.

A map here is "locations": stage line -> the lines (of the file the stage came from) it came from, the most
specific first (an inlined call's own line before its call site); `source_lines` keeps the first of them that the
next map knows.
"""
from __future__ import annotations

import os
import re

from tle.explore.page import Pane

STAGES = {"triton": ("ttgir", "ptx"), "tilelang": ("cuda", "ptx")}

Locations = dict[int, tuple[int, ...]]


# -- composing -------------------------------------------------------------------------------------------------
def source_lines(locations: Locations, line_map: dict[int, int]) -> dict[int, int]:
    """Stage line -> source line: the first of the stage line's locations that `line_map` maps (a location the
    generated source does not map, such as the `def` line, is passed over for the next one)."""
    out = {}
    for line, places in locations.items():
        for place in places:
            if place in line_map:
                out[line] = line_map[place]
                break
    return out


def through(first: Locations, second: Locations) -> Locations:
    """Locations of a stage in a text that has locations of its own (PTX -> CUDA -> generated source)."""
    out = {}
    for line, places in first.items():
        chained = tuple(p for place in places for p in second.get(place, ()))
        if chained:
            out[line] = chained
    return out


def _named(paths) -> set[str]:
    # generated files are named by their content's digest: the name alone tells them apart, wherever they lie
    # (Triton's cache may hand back a stage compiled from an identical copy in another folder)
    return {os.path.basename(p) for p in paths if p}


# -- MLIR locations (Triton's TTIR/TTGIR) -------------------------------------------------------------------------
class _LocParser:
    """One MLIR location: `"file":L:C` (with an optional ` to ...` range), `"name"(loc)`, `callsite(loc at loc)`,
    `fused<...>[loc, ...]`, `#alias`, `unknown`. Nodes are tuples: ("file", path, line), ("name", child),
    ("callsite", callee, caller), ("fused", children), ("alias", name), ("unknown",)."""

    def __init__(self, text: str, pos: int):
        self.text, self.pos = text, pos

    def _ws(self):
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def _take(self, token: str) -> bool:
        self._ws()
        if self.text.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def _expect(self, token: str):
        if not self._take(token):
            raise ValueError(f"expected {token!r} at {self.pos}")

    def _int(self) -> int:
        self._ws()
        m = re.compile(r"\d+").match(self.text, self.pos)
        if not m:
            raise ValueError(f"expected a number at {self.pos}")
        self.pos = m.end()
        return int(m.group())

    def _string(self) -> str:
        self._expect('"')
        out = []
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == '"':
                self.pos += 1
                return "".join(out)
            if c == "\\" and self.pos + 1 < len(self.text):
                nxt = self.text[self.pos + 1]
                if re.fullmatch(r"[0-9A-Fa-f]{2}", self.text[self.pos + 1:self.pos + 3]):
                    out.append(chr(int(self.text[self.pos + 1:self.pos + 3], 16)))     # MLIR's \XX escape
                    self.pos += 3
                    continue
                out.append(nxt)
                self.pos += 2
                continue
            out.append(c)
            self.pos += 1
        raise ValueError("unterminated string")

    def _skip_angle(self):
        depth = 0
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == '"':
                self._string()
                continue
            self.pos += 1
            depth += (c == "<") - (c == ">")
            if depth == 0:
                return
        raise ValueError("unterminated <...>")

    def wrapped(self):
        """`loc(...)`."""
        self._expect("loc(")
        node = self.location()
        self._expect(")")
        return node

    def location(self):
        self._ws()
        if self._take("unknown"):
            return ("unknown",)
        if self._take("callsite("):
            callee = self.location()
            self._expect("at")
            caller = self.location()
            self._expect(")")
            return ("callsite", callee, caller)
        if self._take("fused"):
            self._ws()
            if self.text.startswith("<", self.pos):
                self._skip_angle()
            self._expect("[")
            children = [self.location()]
            while self._take(","):
                children.append(self.location())
            self._expect("]")
            return ("fused", tuple(children))
        if self._take("#"):
            m = re.compile(r"[\w.$-]+").match(self.text, self.pos)
            if not m:
                raise ValueError(f"expected an alias name at {self.pos}")
            self.pos = m.end()
            return ("alias", "#" + m.group())
        if self.text.startswith('"', self.pos):
            name = self._string()
            if self._take(":"):
                line = self._int()
                if self._take(":"):
                    self._int()
                if self._take("to"):            # a range: `to L:C` or `to :C`
                    self._ws()
                    if not self.text.startswith(":", self.pos):
                        self._int()
                    if self._take(":"):
                        self._int()
                return ("file", name, line)
            if self._take("("):
                child = self.location()
                self._expect(")")
                return ("name", child)
            return ("name", None)
        raise ValueError(f"unknown location at {self.pos}")


def parse_location(text: str):
    """The node of one `loc(...)` text (the whole text)."""
    p = _LocParser(text.strip(), 0)
    node = p.wrapped()
    if p.pos != len(p.text):
        raise ValueError("text after the location")
    return node


_ALIAS = re.compile(r"^(#[\w.$-]+)\s*=\s*(loc\(.*\))\s*$")


def _trailing_location(line: str):
    """The location an op line ends with (MLIR prints an op's own location last), else None."""
    text = line.rstrip()
    if not text.endswith(")"):
        return None
    start = text.rfind("loc(")
    while start >= 0:
        p = _LocParser(text, start)
        try:
            node = p.wrapped()
            if p.pos == len(text):
                return node
        except ValueError:
            pass
        start = text.rfind("loc(", 0, start)
    return None


class _Resolver:
    """Places of location nodes, through the module's aliases (`#locN = loc(...)`)."""

    def __init__(self, aliases: dict[str, object]):
        self.aliases = aliases
        self._open: set[str] = set()

    def places(self, node) -> list[tuple[str, int]]:
        """(file, line) of every file location in `node`, the most specific first: a call site's callee before
        its caller, a fused location's parts in order."""
        kind = node[0]
        if kind == "file":
            return [(node[1], node[2])]
        if kind == "name":
            return self.places(node[1]) if node[1] is not None else []
        if kind == "callsite":
            return self.places(node[1]) + self.places(node[2])
        if kind == "fused":
            return [p for child in node[1] for p in self.places(child)]
        if kind == "alias":
            name = node[1]
            if name not in self.aliases or name in self._open:    # undefined, or a cycle
                return []
            self._open.add(name)
            try:
                return self.places(self.aliases[name])
            finally:
                self._open.discard(name)
        return []


def _aliases(text: str) -> dict[str, object]:
    out = {}
    for line in text.splitlines():
        m = _ALIAS.match(line)
        if m:
            try:
                out[m.group(1)] = parse_location(m.group(2))
            except ValueError:
                continue
    return out


def _op_locations(text: str):
    """(line number, location node) of each op: the ops' own lines, and the first line of an op with regions,
    whose location is printed after its closing brace."""
    openers: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        body = line.strip()
        if not body or _ALIAS.match(line):
            continue
        node = _trailing_location(line)
        closes, opens = body.startswith("}"), body.endswith("{")
        if closes and not opens and openers:
            first = openers.pop()
            if node is not None:
                yield first, node
        elif opens and not closes:
            openers.append(number)
        if node is not None:
            yield number, node


def mlir_function_files(text: str) -> set[str]:
    """The files of the public functions' own locations: where the kernel was compiled from."""
    resolver = _Resolver(_aliases(text))
    lines = text.splitlines()
    files = set()
    for number, node in _op_locations(text):
        if re.match(r"\s*tt\.func\s+public\b", lines[number - 1]):
            places = resolver.places(node)
            if places:
                files.add(places[0][0])
    return files


def mlir_locations(text: str, files=()) -> Locations:
    """Op line -> its lines in the generated source: the file named by the public functions' locations
    (mlir_function_files), and any file named as `files`."""
    ours = _named(files) | _named(mlir_function_files(text))
    resolver = _Resolver(_aliases(text))
    out = {}
    for number, node in _op_locations(text):
        places = tuple(line for path, line in resolver.places(node) if os.path.basename(path) in ours)
        if places:
            out[number] = places
    return out


_OP = re.compile(r'^\s*(?:%[\w.$#:-]+(?:\s*,\s*%[\w.$#:-]+)*\s*=\s*)?"?([A-Za-z_][\w$]*\.[\w.$]+)')

# TTGIR ops that tell where the compiler put data and how it moved it: shared memory, cp.async (the loop
# software-pipelined), TMA, and the tensor-core instructions of Hopper (wgmma) and Blackwell (tcgen05)
NOTED_OPS = {
    "ttg.local_alloc": "shared memory",
    "ttg.async_copy_global_to_local": "cp.async, a software-pipelined load",
    "ttng.async_tma_copy_global_to_local": "TMA load",
    "ttng.async_tma_gather": "TMA gather",
    "ttng.async_tma_copy_local_to_global": "TMA store",
    "ttng.async_tma_reduce": "TMA reduction",
    "ttng.async_tma_scatter": "TMA scatter",
    "ttng.warp_group_dot": "wgmma",
    "ttng.tc_gen5_mma": "tcgen05 MMA",
    "ttng.tc_gen5_mma_scaled": "tcgen05 scaled MMA",
}


def mlir_noted_ops(text: str) -> dict[int, str]:
    """Op line -> the op's name, for the ops of NOTED_OPS."""
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        m = _OP.match(line)
        if m and m.group(1) in NOTED_OPS:
            out[number] = m.group(1)
    return out


# -- PTX .loc directives --------------------------------------------------------------------------------------
_PTX_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"((?:[^"\\]|\\.)*)"')
_PTX_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)([^/]*)(?://(.*))?$")
_INLINED_AT = re.compile(r"inlined_at\s+(\d+)\s+(\d+)\s+(\d+)")
_COMMENT_PLACE = re.compile(r"([^\s@\[\]]+):(\d+):(\d+)")
_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s")


def _braces(line: str) -> tuple[int, int]:
    """(lowest depth reached, depth change) of a line's braces, relative to its start; comments and string
    literals left out."""
    code = re.sub(r'"(?:[^"\\]|\\.)*"|/\*.*?\*/', "", line).split("//")[0]
    depth = low = 0
    for c in code:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            low = min(low, depth)
    return low, depth


def ptx_files(text: str) -> dict[int, str]:
    """`.file` index -> path."""
    return {int(m.group(1)): m.group(2) for m in map(_PTX_FILE.match, text.splitlines()) if m}


def ptx_entry_files(text: str) -> set[str]:
    """The files of each kernel entry's first `.loc` (the entry's own location): where it was compiled from."""
    files, out = ptx_files(text), set()
    in_entry = False
    for line in text.splitlines():
        if _ENTRY.match(line):
            in_entry = True
            continue
        m = _PTX_LOC.match(line)
        if in_entry and m:
            if int(m.group(1)) in files:
                out.add(files[int(m.group(1))])
            in_entry = False
    return out


def ptx_locations(text: str, files=()) -> Locations:
    """PTX line -> its lines in the file the kernel entries were compiled from (ptx_entry_files) or in `files`.
    A `.loc` holds for the lines after it, up to the next `.loc` or the end of its function. An instruction
    inlined from another file also gets its call site: nvcc writes `inlined_at F L C` (a call site in another
    inlined function is that one's `.loc` position, resolved as it was), Triton's LLVM the chain in the `.loc`'s
    comment (`// standard.py:191:40 @[ kernel.py:16:15 ]`)."""
    paths = ptx_files(text)
    ours = _named(files) | _named(ptx_entry_files(text))
    our_index = {i for i, p in paths.items() if os.path.basename(p) in ours}
    resolved: dict[tuple[int, int, int], tuple[int, ...]] = {}     # a .loc position -> its places
    out: Locations = {}
    depth, current = 0, ()
    for number, line in enumerate(text.splitlines(), 1):
        m = _PTX_LOC.match(line)
        if m and depth > 0:
            index, at, col = int(m.group(1)), int(m.group(2)), int(m.group(3))
            places = [at] if index in our_index and at > 0 else []
            inlined = _INLINED_AT.search(m.group(4))
            if inlined:
                f, l, c = (int(g) for g in inlined.groups())
                places += [l] if f in our_index else list(resolved.get((f, l, c), ()))
            elif m.group(5):
                chain = _COMMENT_PLACE.findall(m.group(5))[1:]       # the first is the .loc itself
                places += [int(l) for name, l, _ in chain if name in ours]
            current = tuple(dict.fromkeys(p for p in places if p > 0))
            resolved[(index, at, col)] = current
        low, change = _braces(line)
        if depth + low <= 0 < depth:            # the function's closing brace
            current = ()
        elif current and depth > 0 and line.strip():
            out[number] = current
        depth += change
    return out


# -- CUDA #line directives ------------------------------------------------------------------------------------
_LINE_DIRECTIVE = re.compile(r'^\s*#\s*line\s+(\d+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*$')


def cuda_locations(text: str, files) -> tuple[str, Locations]:
    """(the text without its `#line` directives, its line -> the directives' lines in `files`).

    TileLang writes a directive before a statement; the lines after it up to the next one belong to it, but not
    past the statement's end: a directive ends where the block holding it closes, or where a block opened after
    it (the statement's own: a loop, an if) closes again. A C compiler would count on from the directive line by
    line instead, which numbers a statement's second line as the next line of the generated source: not what
    TileLang means. Lines of code TileLang made without a span stay unmapped."""
    ours = _named(files)
    kept: list[str] = []
    out: Locations = {}
    active: list[tuple[int, str | None, int]] = []      # (depth where written, file, line), innermost last
    depth, path = 0, None
    for line in text.split("\n"):
        m = _LINE_DIRECTIVE.match(line)
        if m:
            path = m.group(2).replace('\\"', '"').replace("\\\\", "\\") if m.group(2) is not None else path
            active = [a for a in active if a[0] < depth]           # it replaces the one written at this depth
            active.append((depth, path, int(m.group(1))))
            continue
        kept.append(line)
        low, change = _braces(line)
        before, depth = depth, depth + change
        active = [a for a in active if before + low >= a[0]]       # the block holding it closes on this line
        if active and active[-1][1] is not None and os.path.basename(active[-1][1]) in ours:
            out[len(kept)] = (active[-1][2],)
        active = [a for a in active if not before > a[0] == depth]  # its statement's own block closed
    return "\n".join(kept), out


# -- the panes and notes of a lowering ---------------------------------------------------------------------------
def _triton_locations(lw, stage: str, text: str) -> Locations:
    if stage == "ttgir":
        return mlir_locations(text, [lw.compiled.path])
    return ptx_locations(text, [lw.compiled.path])


_NUMBERED = re.compile(r"\b([A-Za-z_]\w*?)_\d+\b")


def same_lines(a: str, b: str) -> bool:
    """Whether two CUDA texts are the same line for line, up to the numbers that end the names TileLang makes
    (workspace_3, i_6): it does not number them the same from one lowering of a kernel to the next."""
    lines_a, lines_b = a.split("\n"), b.split("\n")
    return len(lines_a) == len(lines_b) and all(
        x == y or _NUMBERED.sub(r"\1_", x) == _NUMBERED.sub(r"\1_", y) for x, y in zip(lines_a, lines_b))


def tilelang_cuda_locations(lw, cuda: str) -> Locations:
    """CUDA line -> generated-source lines, from TileLang's `#line` directives (the kernel lowered again with
    them); empty where this TileLang cannot write them, or where that text, less its directives, is not the
    compiled CUDA source `cuda` line for line (same_lines)."""
    try:
        annotated = lw.compiled.cuda_with_line_directives()
    except Exception:            # noqa: BLE001 - TileLang failing to lower again costs the map, not the pane
        return {}
    if not annotated:
        return {}
    kept, locations = cuda_locations(annotated, [lw.compiled.path])
    return locations if same_lines(kept, cuda) else {}


def backend_stage_panes(backend: str, lw) -> list[Pane]:
    """The stage panes of one backend's lowering (tle.jit.Lowered), each with its map to kernel source lines; a
    stage that cannot be built here is left out."""
    panes = []
    cuda: Locations | None = None
    for stage in STAGES.get(backend, ()):
        if stage not in lw.stages:
            continue
        try:
            text = lw.stage(stage)
        except Exception:            # noqa: BLE001 - a stage that cannot be built here is not shown
            continue
        if backend == "triton":
            locations = _triton_locations(lw, stage, text)
        elif stage == "cuda":
            locations = cuda = tilelang_cuda_locations(lw, text)
        else:
            if cuda is None:
                try:
                    cuda = tilelang_cuda_locations(lw, lw.stage("cuda"))
                except Exception:    # noqa: BLE001 - no CUDA source, no map through it
                    cuda = {}
            locations = through(ptx_locations(text), cuda)
        panes.append(Pane(f"{backend} {stage}", text, source_lines(locations, dict(lw.compiled.line_map)), backend))
    return panes


def stage_notes(lowered: dict, built: set[str]) -> dict[int, list[str]]:
    """Kernel source line -> what Triton's compiler did there, read from the TTGIR of each lowering that compiled
    here (`built`): shared memory, cp.async, TMA, wgmma (NOTED_OPS); each note once per line."""
    notes: dict[int, list[str]] = {}
    for backend, lw in lowered.items():
        if backend != "triton" or backend not in built or "ttgir" not in lw.stages:
            continue
        try:
            text = lw.stage("ttgir")
        except Exception:            # noqa: BLE001 - no TTGIR here, no notes from it
            continue
        lines = source_lines(mlir_locations(text, [lw.compiled.path]), dict(lw.compiled.line_map))
        for number, op in sorted(mlir_noted_ops(text).items()):
            if number in lines:
                note = f"triton ttgir: {op} ({NOTED_OPS[op]})"
                if note not in notes.setdefault(lines[number], []):
                    notes[lines[number]].append(note)
    return notes
