"""`tle compare --html FILE`: a page per kernel, written beside the usual summary; one kernel: FILE, several:
FILE's stem.KERNEL.html. The page holds the kernel's file, the tile IR and each backend's source, lines linked."""
import os
import re

from tle.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADD = os.path.join(ROOT, "kernels", "examples", "vector_add.py") + "::add_kernel"
SOFTMAX = os.path.join(ROOT, "kernels", "softmax.py") + "::softmax_kernel"


def test_one_kernel_one_page(tmp_path, capsys):
    page = tmp_path / "report.html"
    assert main(["compare", ADD, "--no-run", "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert f"page of add_kernel: {page}" in out
    text = page.read_text()
    titles = [t.strip() for t in re.findall(r'<section class="pane" data-pane="[^"]+"><h2>([^<]+)', text)]
    assert titles == ["kernel source", "tile IR", "triton source", "tilelang source"]   # --no-run: no stages
    assert "triton: lowered yes; compiled -; checked not run" in text
    assert 'data-src="18"' in text and "tl.store(out_ptr" in text      # the store line (vector_add.py:18)
    assert "tilelang: store (box) as T.copy from fragment" in text      # the access report, at its line


def test_several_kernels_one_page_each(tmp_path, capsys):
    page = tmp_path / "report.html"
    assert main(["compare", ADD, SOFTMAX, "--no-run", "--html", str(page)]) == 0
    assert not page.exists()
    for name in ("add_kernel", "softmax_kernel"):
        assert (tmp_path / f"report.{name}.html").read_text().count("<section") == 4
