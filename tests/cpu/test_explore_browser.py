"""The page of `tle compare --html` in a real browser: Debian's chromium driven by Playwright (never a browser
download). Clicking a kernel line highlights, in every pane, exactly the lines its line map gives; a generated
line's tooltip names its source line."""
import inspect
import os
import shutil

import pytest

from kernel_cases import example_kernels, lower_example
from tle.explore import html_page, panes_of
from tle.explore.page import notes_of
from tilelang_oracle import needs_tilelang

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
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
    shot = os.environ.get("TLE_EXPLORE_SCREENSHOT")       # docs/images/compare_html.png is made so
    if shot and name.endswith("add_kernel"):
        page.set_viewport_size({"width": 1600, "height": 700})
        page.screenshot(path=shot)
    generated = page.query_selector(f'section[data-pane="pane1"] .ln[data-src="{store}"]')
    assert generated.get_attribute("title") == f"from {os.path.basename(path)}:{store}"
    load = first + next(i for i, line in enumerate(lines) if "tl.load(" in line)
    page.click(f'section[data-pane="source"] .ln[data-line="{load}"]')      # another line: the first is cleared
    assert page.eval_on_selector_all(".ln.hl[data-src]", "rows => [...new Set(rows.map(r => r.dataset.src))]") \
        == [str(load)]
    page.close()
