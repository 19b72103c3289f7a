"""The pages of `tle compare --html` and `tle explore` in a real browser: Debian's chromium driven by Playwright
(never a browser download). Clicking a kernel line highlights, in every pane, exactly the lines its line map gives;
a generated line's tooltip names its source line. On the served page, an edit with an error shows it at its line,
and fixing it lowers the panes anew. With TLE_EXPLORE_SCREENSHOTS naming a folder (docs/images), the tests write
compare_html.png and explore.png there."""
import inspect
import os
import shutil
import threading

import pytest

from kernel_cases import example_kernels, lower_example
from tle.explore import html_page, panes_of
from tle.explore.page import notes_of
from tle.explore.server import ExploreServer
from tle.explore.session import Session
from tilelang_oracle import needs_tilelang

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if os.environ.get("TLE_REQUIRE_BROWSER"):                 # .ci/run sets it: there, these tests must run
    from playwright import sync_api
    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"TLE_REQUIRE_BROWSER is set and there is no chromium at {CHROMIUM}")
else:
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    if not os.path.exists(CHROMIUM):
        pytest.skip("no chromium (Debian's package; .ci/run installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@needs_tilelang
@pytest.mark.parametrize("name", ["examples.vector_add.add_kernel", "examples.matmul.matmul_kernel"])
def test_clicking_a_kernel_line_highlights_what_it_became(browser, tmp_path, name):
    kernel = dict(example_kernels())[name]
    lowered = {b: lower_example(kernel, b) for b in ("triton", "tilelang")}
    path = inspect.getsourcefile(kernel.fn)
    lines, first = inspect.getsourcelines(kernel.fn)
    panes = panes_of(lowered)
    page_file = tmp_path / "page.html"
    page_file.write_text(html_page(name, os.path.basename(path), open(path).read(), panes, notes_of(lowered),
                                   kernel_lines=(first, first + len(lines) - 1)))
    page = browser.new_page()
    page.goto(page_file.as_uri())
    store = first + next(i for i, line in enumerate(lines) if "tl.store(" in line)
    page.click(f'section[data-pane="source"] .ln[data-line="{store}"]')
    for i, pane in enumerate(panes):
        shown = page.eval_on_selector_all(f'section[data-pane="pane{i}"] .ln.hl',
                                          "rows => rows.map(r => Number(r.dataset.line))")
        assert shown == sorted(n for n, src in pane.line_map.items() if src == store), pane.title
        assert shown, f"{pane.title}: nothing highlighted for line {store}"
    assert page.eval_on_selector_all('section[data-pane="source"] .ln.hl', "rows => rows.length") == 1
    shots = os.environ.get("TLE_EXPLORE_SCREENSHOTS")
    if shots and name.endswith("add_kernel"):
        page.set_viewport_size({"width": 1600, "height": 700})
        page.screenshot(path=os.path.join(shots, "compare_html.png"))
    generated = page.query_selector(f'section[data-pane="pane1"] .ln[data-src="{store}"]')
    assert generated.get_attribute("title") == f"from {os.path.basename(path)}:{store}"
    load = first + next(i for i, line in enumerate(lines) if "tl.load(" in line)
    page.click(f'section[data-pane="source"] .ln[data-line="{load}"]')      # another line: the first is cleared
    assert page.eval_on_selector_all(".ln.hl[data-src]", "rows => [...new Set(rows.map(r => r.dataset.src))]") \
        == [str(load)]
    page.close()


# -- the served page (tle explore) --------------------------------------------------------------------------
def _highlighted(page, key: str) -> list[int]:
    return page.eval_on_selector_all(f'section[data-pane="{key}"] .ln.hl',
                                     "rows => rows.map(r => Number(r.dataset.line))")


def _click_and_wait(page, button: str, version: int) -> None:
    """Press a button of the page's tools and wait for its answer (the page counts them in data-version)."""
    page.click(button)
    page.wait_for_selector(f'body[data-version="{version}"]', timeout=600_000)


def _pane_text(page, key: str) -> str:
    return page.inner_text(f'section[data-pane="{key}"] .body')


@needs_tilelang
@pytest.mark.parametrize("name, stages, broken, fixed", [
    ("vector_add:add_kernel", True, ("< n_elements", "< n_elementz"), ("x + y, mask", "x * y + x, mask")),
    ("matmul:matmul_kernel", False, ("acc = tl.dot(a, b, acc)", "acc = tl.dott(a, b, acc)"),
     ("offs_k = tl.arange(0, BLOCK_K)", "offs_k = tl.arange(0, BLOCK_K) + 0")),
])
def test_the_served_page_links_lines_shows_errors_at_their_line_and_lowers_edits(browser, tmp_path, name, stages,
                                                                                broken, fixed):
    module, kernel_name = name.split(":")
    path = tmp_path / f"{module}.py"
    shutil.copy(os.path.join(ROOT, "kernels", "examples", f"{module}.py"), path)
    session = Session(str(path), kernel_name, "small", on_gpu=False)
    server = ExploreServer(session, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        text = path.read_text()
        lowered, errors = session.lowerings(session.load(text))
        assert not errors
        panes = panes_of(lowered) + (session.compiled_stages(lowered)[0] if stages else [])
        page = browser.new_page(viewport={"width": 1600, "height": 800})
        page.goto(server.url + ("" if stages else "&stages=0"))
        assert page.eval_on_selector_all("section.pane h2", "hs => hs.length") == len(panes) + 1
        store = next(i for i, line in enumerate(text.splitlines(), 1) if "tl.store(" in line)
        page.click(f'section[data-pane="source"] .ln[data-line="{store}"]')
        for i, pane in enumerate(panes):
            expected = sorted(n for n, src in pane.line_map.items() if src == store)
            assert _highlighted(page, f"pane{i}") == expected, pane.title
            if "source" in pane.title or pane.title == "tile IR":
                assert expected, f"{pane.title}: nothing for line {store}"
        if stages:                               # the compiler stages keep locations: some line of each is lit
            assert all(_highlighted(page, f"pane{i}") for i, p in enumerate(panes) if p.title.startswith("triton"))
        shots = os.environ.get("TLE_EXPLORE_SCREENSHOTS")
        if shots and module == "vector_add":
            page.set_viewport_size({"width": 2560, "height": 900})     # wide enough for the stage panes too
            page.screenshot(path=os.path.join(shots, "explore.png"))
            page.set_viewport_size({"width": 1600, "height": 800})

        # an error, shown at its line
        wrong = next(i for i, line in enumerate(text.splitlines(), 1) if broken[0] in line)
        page.click("#edit")
        before = _pane_text(page, "pane0")              # the tile IR of the file as it is
        page.fill("#editor", text.replace(*broken))
        _click_and_wait(page, "#lower", 1)
        assert page.get_attribute("body", "data-state") == "error"
        assert page.eval_on_selector_all('section[data-pane="source"] .ln.error',
                                         "rows => rows.map(r => Number(r.dataset.line))") == [wrong]
        message = page.inner_text(f'section[data-pane="source"] .errmsg[data-line="{wrong}"]')
        assert broken[1].split("(")[0].split()[-1].split(".")[-1] in message
        assert page.eval_on_selector_all("section.pane", "s => s.length") == 1      # no lowering to show

        # fixed (and changed): the panes come back, lowered from the edit
        page.fill("#editor", text.replace(*fixed))
        _click_and_wait(page, "#lower", 2)
        assert page.get_attribute("body", "data-state") == "lowered"
        assert page.eval_on_selector_all(".ln.error", "rows => rows.length") == 0
        assert page.eval_on_selector_all("section.pane", "s => s.length") == len(panes) + 1
        assert _pane_text(page, "pane0") != before        # the tile IR of the edit
        page.click(f'section[data-pane="source"] .ln[data-line="{store}"]')
        assert _highlighted(page, "pane1")                  # the new panes link lines as the first ones did
        assert path.read_text() == text                      # nothing written to the file
        if module == "vector_add":
            page.select_option("#diffbackend", "tilelang")          # the diff view: two launch configurations
            page.fill("#diffb", "BLOCK_SIZE=256")
            _click_and_wait(page, "#diff", 3)
            added = page.eval_on_selector_all('section[data-pane="diff"] .d-add', "rows => rows.map(r => r.innerText)")
            assert any("256" in row for row in added[1:]), added
            _click_and_wait(page, "#run", 4)
            assert page.eval_on_selector_all("#results tr[data-backend]", "rows => rows.map(r => r.className)") \
                == ["fail", "fail"]                          # x * y + x is not the reference's x + y
        page.close()
    finally:
        server.shutdown()
        server.server_close()
        session.close()
