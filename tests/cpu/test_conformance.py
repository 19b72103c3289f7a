"""python -m tle.conformance: the rewrite of import lines and decorators (line numbers kept), and a run of a small
suite laid out as FlagTree's (written here) on both backends on the CPU: the table, the summary, failures named."""
import json
import textwrap

import pytest

from tle.conformance import flagtree
from tle.conformance.__main__ import main
from tle.conformance.rewrite import ALIAS, rewrite

MODULES, DECORATORS = flagtree.MODULES, flagtree.DECORATORS


def test_imports_map_onto_the_projects_modules_and_keep_every_line_number():
    src = textwrap.dedent('''\
        """doc"""
        import pytest
        import triton.language as tl
        from triton.experimental.tle.language.gpu import (pipeline,
                                                          alloc)
        import triton.experimental.tle.language.gpu as tleg
        from triton.experimental.tle.raw import dialect, Input
        import triton.experimental.tle.raw.mlir as m
        LINE = 9
        ''')
    out = rewrite(src, MODULES, DECORATORS)
    lines = out.splitlines()
    assert len(lines) == len(src.splitlines()) and lines[8] == "LINE = 9"
    assert lines[1:3] == ["import pytest", "import triton.language as tl"]
    assert lines[3] == "from tle.gpu import pipeline, alloc" and lines[4] == ""
    assert lines[5:8] == ["import tle.gpu as tleg", "from tle.raw import dialect, Input", "import tle.raw.mlir as m"]
    assert ALIAS not in out            # no kernel: nothing to import for one


def test_triton_jit_and_autotune_decorators_become_the_projects():
    src = textwrap.dedent('''\
        import triton
        from triton import jit as J, autotune

        @triton.autotune(configs=[], key=[])
        @triton.jit
        def a(x):
            pass

        @triton.jit(do_not_specialize=["n"])
        def b(x, n):
            pass

        class C:
            @J
            def c(self):
                pass

        @autotune(  # the fastest of
                  configs=[],
                  key=["n"])
        @triton.heuristics({})
        @J
        def d(n):
            pass
        ''')
    out = rewrite(src, MODULES, DECORATORS).splitlines()
    assert out[0] == f"import tle as {ALIAS}; import triton"
    assert out[3] == f"@{ALIAS}.autotune(configs=[], key=[])"     # compiles its configs side by side
    assert out[4] == f"@{ALIAS}.jit" and out[8] == f'@{ALIAS}.jit(do_not_specialize=["n"])'
    assert out[13] == f"    @{ALIAS}.jit"
    assert out[17:23] == [f"@{ALIAS}.autotune(  # the fastest of", "          configs=[],", '          key=["n"])',
                          "@triton.heuristics({})", f"@{ALIAS}.jit", "def d(n):"]


def test_mapped_decorators_live_in_one_module():
    with pytest.raises(ValueError, match="one module"):
        rewrite("import triton\n", MODULES, {"jit": "tle.jit", "autotune": "other.autotune"})


def test_an_import_without_as_is_refused_with_its_line():
    with pytest.raises(ValueError, match="line 2: 'import triton.experimental.tle'"):
        rewrite("import torch\nimport triton.experimental.tle\n", MODULES, DECORATORS)


KERNEL = '''\
import torch
import triton
import triton.language as tl
import triton.experimental.tle.language as tle


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 64),)](x, y, out, x.numel(), BLOCK=64)
    return out
'''

TESTS = KERNEL + '''

def test_add():
    x, y = torch.randn(100, device="cuda"), torch.randn(100, device="cuda")
    torch.testing.assert_close(add(x, y), x + y)


def test_add_wrong():
    x = torch.ones(100, device="cuda")
    assert add(x, x).sum().item() == 3.0, "deliberately wrong"


def test_missing_api():
    from triton.experimental.tle.language.gpu import no_such_thing  # noqa: F401
'''

TUTORIAL = KERNEL + '''
DEVICE = triton.runtime.driver.active.get_active_torch_device()

if __name__ == "__main__":
    x = torch.randn(300, device=DEVICE)
    torch.testing.assert_close(add(x, x), 2 * x)
'''

BROKEN_TUTORIAL = '''\
import torch

if __name__ == "__main__":
    x = torch.zeros(3)
    raise RuntimeError("tutorial failed at its line 5")
'''


def _suite(root):
    (root / "test" / "tle" / "unit").mkdir(parents=True)
    (root / "tutorials" / "tle" / "raw").mkdir(parents=True)
    (root / "test" / "tle" / "unit" / "test_add.py").write_text(TESTS)
    (root / "test" / "tle" / "unit" / "helpers.py").write_text("# not a test file\n")
    (root / "tutorials" / "tle" / "01-add.py").write_text(TUTORIAL)
    (root / "tutorials" / "tle" / "raw" / "02-broken.py").write_text(BROKEN_TUTORIAL)
    return root


def test_a_suite_on_both_backends_on_the_cpu(tmp_path, capsys):
    root = _suite(tmp_path / "python")
    before = {p: p.read_text() for p in root.rglob("*.py")}
    assert flagtree.discover(str(root)) == [("test/tle/unit/test_add.py", "pytest"),
                                           ("tutorials/tle/01-add.py", "script"),
                                           ("tutorials/tle/raw/02-broken.py", "script")]
    code = main(["flagtree", str(root), "--device", "cpu", "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert {p: p.read_text() for p in root.rglob("*.py")} == before        # the suite itself is never written
    record = json.loads((tmp_path / "r.json").read_text())
    by_file = {f["path"]: f["checks"] for f in record["files"]}
    for backend in ("triton", "tilelang"):
        tests = {c["check"]: c for c in by_file["test/tle/unit/test_add.py"][backend]}
        assert tests["test_add"]["outcome"] == "pass", tests["test_add"]
        wrong = tests["test_add_wrong"]
        assert wrong["outcome"] == "fail" and "deliberately wrong" in wrong["detail"]
        assert tests["test_missing_api"]["outcome"] == "fail" and "no_such_thing" in tests["test_missing_api"]["detail"]
        assert by_file["tutorials/tle/01-add.py"][backend] == [{"check": "(script)", "outcome": "pass", "detail": ""}]
        broken = by_file["tutorials/tle/raw/02-broken.py"][backend][0]
        assert broken["outcome"] == "fail" and broken["detail"] == (
            "RuntimeError: tutorial failed at its line 5 (line 5)")
    assert "| test_add | pass | pass |  |" in out
    assert "## tutorials/tle/raw/02-broken.py (script)" in out
    assert out.rstrip().endswith("3 files; triton: 2 of 5 checks pass; tilelang: 2 of 5 checks pass")


def test_usage_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["flagtree", str(tmp_path / "nowhere")])
    assert e.value.code == 2 and "is not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["flagtree", str(tmp_path), "--device", "cpu"])
    assert e.value.code == 2 and "no FlagTree TLE tests or tutorials" in capsys.readouterr().err
    root = _suite(tmp_path / "python")
    with pytest.raises(SystemExit) as e:
        main(["flagtree", str(root), "--backends", "cuda"])
    assert e.value.code == 2 and "unknown backend 'cuda'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["flagtree", str(root), "--only", "nothing-like-it"])
    assert e.value.code == 2 and "no file of the suite matches" in capsys.readouterr().err
