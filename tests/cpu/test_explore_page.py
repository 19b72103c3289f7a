"""The self-contained page of tle/explore/page.py: what each line carries (its source line, its colour, the
notes), read back with the standard library's HTML parser; nothing outside the page is referenced."""
import inspect
from html.parser import HTMLParser

from kernel_cases import example_kernels, lower_example
from tle.explore import html_page, ir_line_map, panes_of
from tle.explore.page import main_html, note_lines, notes_of
from tilelang_oracle import needs_tilelang


class Lines(HTMLParser):
    """pane key -> [(line number, source line or None, has a note)] of the page's line rows."""

    def __init__(self):
        super().__init__()
        self.panes, self.pane, self.external = {}, None, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("link", "img", "iframe") or (tag == "script" and "src" in a):
            self.external.append(tag)
        if tag == "section":
            self.pane = a["data-pane"]
            self.panes[self.pane] = []
        elif tag == "div" and "data-line" in a:
            src = int(a["data-src"]) if "data-src" in a else None
            self.panes[self.pane].append((int(a["data-line"]), src, "data-note" in a))


def vector_add():
    kernel = dict(example_kernels())["examples.vector_add.add_kernel"]
    return kernel, {b: lower_example(kernel, b) for b in ("triton", "tilelang")}


@needs_tilelang
def test_every_pane_line_carries_its_source_line():
    kernel, lowered = vector_add()
    path = inspect.getsourcefile(kernel.fn)
    text = open(path).read()
    lines, first = inspect.getsourcelines(kernel.fn)
    panes = panes_of(lowered)
    page = html_page("add_kernel", "vector_add.py", text, panes, notes_of(lowered), ["launch: grid (1,)"],
                     kernel_lines=(first, first + len(lines) - 1))
    parsed = Lines()
    parsed.feed(page)
    assert not parsed.external and "http" not in page
    assert [p.title for p in panes] == ["tile IR", "triton source", "tilelang source"]
    source = parsed.panes["source"]
    assert len(source) == len(text.splitlines())
    assert [n for n, src, _ in source if src] == list(range(first, first + len(lines)))
    noted = {n for n, _, note in source if note}
    assert noted == {line for lw in lowered.values() for line, *_ in lw.compiled.access_report}
    for i, pane in enumerate(panes):
        rows = parsed.panes[f"pane{i}"]
        assert len(rows) == len(pane.text.splitlines())
        assert {n: src for n, src, _ in rows if src} == pane.line_map
        assert pane.line_map and set(pane.line_map.values()) <= set(range(first, first + len(lines)))


def test_the_ir_line_map_reads_the_printed_lines():
    text = "kernel k()\n{\n  %0 = const {value=1} : i32  # line 7\n  store %1, %0  # line 9\n}\n"
    assert ir_line_map(text) == {3: 7, 4: 9}


def test_text_is_escaped():
    page = html_page("a<b", "k.py", "x = a < b and c > d & e\n", [], kernel_lines=(1, 1))
    assert "a &lt; b and c &gt; d &amp; e" in page and "<title>a&lt;b</title>" in page


def test_notes_that_name_lines_are_placed_at_them():
    assert note_lines("line 12: loop pipelined with 3 stages") == [12]
    assert note_lines("lines 4, 9: eviction_policy: dropped") == [4, 9]
    assert note_lines("num_warps=3: not a power of two") == []


@needs_tilelang
def test_shared_buffers_and_pipelined_loops_are_noted_at_their_lines():
    kernel = dict(example_kernels())["examples.matmul.matmul_kernel"]
    lowered = {b: lower_example(kernel, b) for b in ("triton", "tilelang")}
    lines, first = inspect.getsourcelines(kernel.fn)
    at = {key: first + next(i for i, ln in enumerate(lines) if key in ln) for key in ("for k in", "a = tl.load")}
    notes = notes_of(lowered)
    loop = notes[at["for k in"]]
    assert any(n.startswith("triton: loop pipelined by Triton's compiler, num_stages=") for n in loop)
    assert any(n.startswith("tilelang: loop software-pipelined by TileLang") for n in loop)
    # the a tile (64x32 fp16 at the small example) goes through a shared buffer on TileLang
    assert "tilelang: shared memory: a 64x32 float16, 4096 bytes" in notes[at["a = tl.load"]]


def test_errors_are_shown_under_their_line():
    text = "def k(x):\n    y = x +\n    return y\n"
    page = main_html("k.py", text, [], errors={2: ["import: SyntaxError: invalid syntax"], 0: ["no line"]})
    assert page.index('<div class="errmsg" data-line="0">no line</div>') < page.index('data-line="1"')
    row = page.index('class="ln src mapped error" data-line="2"')
    assert page.index('<div class="errmsg" data-line="2">import: SyntaxError: invalid syntax</div>') > row
