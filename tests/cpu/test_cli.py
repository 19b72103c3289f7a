"""The `tle` command: bad input is one line on stderr and exit status 2; `tle` alone lists the commands; show
and compare work on the kernels' example launches; compare compiles every lowering for its target, prints the
full sources only with --verbose, ends with a summary table, and exits nonzero when anything failed."""
import os
import subprocess
import sys

import pytest

from tle.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADD = os.path.join(ROOT, "kernels", "examples", "vector_add.py") + "::add_kernel"
MATMUL = os.path.join(ROOT, "kernels", "examples", "matmul.py") + "::matmul_kernel"


@pytest.mark.parametrize("argv", [
    ["show", "kernels/examples/vector_add.py"],                          # no ::
    ["show", "no/such/file.py::k"],
    ["show", ADD.replace("add_kernel", "no_such_kernel")],
    ["show", ADD.replace("add_kernel", "reference")],          # exists, but not a tle kernel
    ["show", ADD, "--backend", "no-such-backend"],
    ["show", ADD, "--stage", "no-such-stage"],
    ["show", ADD, "--size", "huge"],
    ["compare", ADD, "nonsense"],
    ["frobnicate"],
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


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"]])
def test_no_command_lists_the_commands(argv, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out
    commands = [ln.split()[0] for ln in out.split("commands:\n")[1].split("\n\n")[0].splitlines()]
    assert commands == ["show", "compare", "explore"], out
    for ln in out.split("commands:\n")[1].split("\n\n")[0].splitlines():
        assert len(ln.split(None, 1)) == 2          # each with its one-line description


def summary(out: str) -> dict:
    """The summary table of `tle compare`: {(kernel, backend): {column: cell}}."""
    lines = out.split("=== summary ")[1].splitlines()[1:]
    header = lines[0]
    cols = ["kernel", "backend", "lowered", "compiled", "checked", "time"]
    starts = [header.index(c) for c in cols]
    rows, kernel = {}, None
    for ln in lines[1:]:
        if not ln.strip() or ln.startswith(("checked:", "no GPU", "time:", "(")):
            break
        cells = [ln[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        kernel = cells[0] or kernel
        rows[(kernel, cells[1])] = dict(zip(cols[2:], cells[2:]))
    return rows


@pytest.mark.slow
def test_compare_compiles_runs_both_lowerings_and_summarizes(capsys):
    rc = main(["compare", ADD])
    out = capsys.readouterr().out
    # by default: the notes and the summary, not the IR, the sources or the access classes
    assert "--- notes" in out and "triton: none" in out
    for verbose_only in ("=== tile IR", "@triton.jit", "@T.prim_func", "memory accesses", "--- run:"):
        assert verbose_only not in out, verbose_only
    rows = summary(out)
    assert rows[(ADD, "triton")] == {"lowered": "yes", "compiled": "ptx sm_90a", "checked": "0", "time": "-"}
    assert rows[(ADD, "tilelang")] == {"lowered": "yes", "compiled": "cuda sm_90a", "checked": "0", "time": "-"}
    assert "triton in the Triton interpreter, tilelang in the interpreter of TileLang programs" in out
    assert out.rstrip().endswith("all lowerings, compiles and checks passed")
    assert rc == 0


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--verbose", "-v", "--side-by-side"])
def test_compare_verbose_prints_ir_sources_and_accesses(flag, capsys):
    rc = main(["compare", ADD, flag])
    out = capsys.readouterr().out
    assert "=== tile IR" in out and "kernel add_kernel(" in out
    assert "@triton.jit" in out and "@T.prim_func" in out
    assert "memory accesses" in out and "box: tl.load" in out
    assert "triton     ptx sm_90a, PASS" in out and "(Triton interpreter, CPU)" in out
    assert "tilelang   cuda sm_90a, PASS" in out and "(interpreter of TileLang programs, CPU)" in out
    assert summary(out)[(ADD, "triton")]["checked"] == "0"
    assert rc == 0


@pytest.mark.slow
def test_compare_fails_when_the_ptx_compile_fails(monkeypatch, capsys):
    # a kernel ptxas rejects must never pass: the compile step raises as Triton's does then
    from tle.lowering.triton.backend import TritonCompiled
    real_stage = TritonCompiled.stage

    def stage(self, name):
        if name == "ptx":
            raise RuntimeError("compiling the Triton stages failed:\nptxas fatal   : Unresolved extern function 'f'")
        return real_stage(self, name)
    monkeypatch.setattr(TritonCompiled, "stage", stage)
    rc = main(["compare", ADD])
    out = capsys.readouterr().out
    assert "--- triton compile to ptx sm_90a FAILED" in out and "ptxas fatal" in out
    rows = summary(out)
    assert rows[(ADD, "triton")] == {"lowered": "yes", "compiled": "error", "checked": "not run", "time": "-"}
    assert rows[(ADD, "tilelang")]["compiled"] == "cuda sm_90a" and rows[(ADD, "tilelang")]["checked"] == "0"
    assert "passed" not in out.splitlines()[-1] and "FAILED" in out.splitlines()[-1]
    assert rc == 1


WRONG = """
import torch
import triton.language as tl
import tle


@tle.jit
def twice(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


@tle.example(twice)
def _(device, size):
    x = torch.ones(300, device=device)
    out = torch.empty_like(x)
    return tle.Launch(grid=(3,), args=(x, out, 300), kwargs=dict(BLOCK=128), outputs={"out": out},
                      reference=lambda: {"out": x * 3.0})
"""


@pytest.mark.slow
def test_compare_fails_when_a_check_fails(tmp_path, capsys):
    f = tmp_path / "wrong.py"
    f.write_text(WRONG)
    target = f"{f}::twice"
    assert main(["compare", target]) == 1
    out = capsys.readouterr().out
    assert "--- triton run (Triton interpreter) FAILED" in out
    rows = summary(out)
    for b in ("triton", "tilelang"):
        assert rows[(target, b)]["checked"] == "FAIL (max err 1)", rows


def test_compare_no_run_lowers_only(capsys):
    assert main(["compare", ADD, "--no-run"]) == 0
    out = capsys.readouterr().out
    rows = summary(out)
    assert rows[(ADD, "triton")] == {"lowered": "yes", "compiled": "-", "checked": "not run", "time": "-"}
    assert "@triton.jit" not in out and out.rstrip().endswith("all lowerings passed")


@pytest.mark.slow
def test_compare_as_a_command_sets_up_the_interpreter(tmp_path):
    # started without TRITON_INTERPRET: the command must arrange for Triton's interpreter itself
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    p = subprocess.run([sys.executable, "-m", "tle.cli", "compare", ADD, "--size", "small"], env=env,
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert "all lowerings, compiles and checks passed" in p.stdout and p.returncode == 0, \
        p.stdout[-3000:] + p.stderr[-3000:]
    assert summary(p.stdout)[(ADD, "triton")]["compiled"] == "ptx sm_90a"
