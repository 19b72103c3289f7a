"""The `tle` command: bad input is one line on stderr and exit status 2; show and compare work on the
kernels' example launches."""
import os
import subprocess
import sys

import pytest

from tle.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADD = os.path.join(ROOT, "kernels", "vector_add.py") + "::add_kernel"
MATMUL = os.path.join(ROOT, "kernels", "matmul.py") + "::matmul_kernel"


@pytest.mark.parametrize("argv", [
    ["show", "kernels/vector_add.py"],                          # no ::
    ["show", "no/such/file.py::k"],
    ["show", ADD.replace("add_kernel", "no_such_kernel")],
    ["show", ADD.replace("add_kernel", "reference")],          # exists, but not a tle kernel
    ["show", ADD, "--backend", "no-such-backend"],
    ["show", ADD, "--stage", "no-such-stage"],
    ["show", ADD, "--size", "huge"],
    ["compare", ADD, "nonsense"],
    ["frobnicate"],
    [],
])
def test_bad_input_is_one_line_and_status_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tle: error: ") and err.count("\n") == 1, err


def test_kernel_without_example(tmp_path, capsys):
    f = tmp_path / "k.py"
    f.write_text("import tle\nimport triton.language as tl\n\n@tle.jit\ndef k(x_ptr):\n    pass\n")
    assert main(["show", f"{f}::k"]) == 2
    assert "no example launch" in capsys.readouterr().err


@pytest.mark.parametrize("stage, words", [("ir", "kernel add_kernel("), ("source", "@triton.jit"),
                                          ("ttir", "tt.func")])
def test_show_stages(stage, words, capsys):
    assert main(["show", ADD, "--backend", "triton", "--stage", stage]) == 0
    assert words in capsys.readouterr().out


def test_show_large_size_costs_nothing(capsys):
    # 8192^3 would be 400 MB of inputs: the example is built on the meta device
    assert main(["show", MATMUL, "--size", "large", "--stage", "ir"]) == 0
    assert "BLOCK_M=128" in capsys.readouterr().out


@pytest.mark.slow
def test_compare_runs_both_lowerings_in_interpreters(capsys):
    rc = main(["compare", ADD])
    out = capsys.readouterr().out
    assert "=== tile IR" in out and "triton lowering" in out and "memory accesses" in out
    assert "triton     PASS" in out and "tilelang   compiled to ptx, not run on a GPU" in out
    assert "tilelang   PASS" in out and "(interpreter of TileLang programs, CPU)" in out
    assert rc == 0


@pytest.mark.slow
def test_compare_as_a_command_sets_up_the_interpreter(tmp_path):
    # started without TRITON_INTERPRET: the command must arrange for Triton's interpreter itself
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    p = subprocess.run([sys.executable, "-m", "tle.cli", "compare", ADD, "--size", "small"], env=env,
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert "triton     PASS" in p.stdout and p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
