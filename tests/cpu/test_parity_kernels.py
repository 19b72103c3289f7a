"""The kernels of the Triton parity benchmark (tests/parity_kernels.py) on the CPU, at their small shapes: the
plain text under triton.jit and the Triton lowering in Triton's interpreter, the TileLang lowering in the
interpreter of TileLang programs, each against the torch reference; and a dry run of the benchmark's runner
(python -m tle.benchmark.parity --device cpu)."""
import json
import math

import pytest
import torch
import triton.language as tl

import tle
from parity_kernels import CASES
from tle.benchmark import parity, plot
from tle.cli import poison
from tle.examples import compare_outputs
from tilelang_oracle import interpret_launch

# constructs tle does not lower yet: (case, backend) -> the LoweringError it raises today (none at present;
# an entry makes the case's test an xfail that fails once the construct lowers)
UNSUPPORTED: dict = {}

# Triton lowerings that Triton's compiler rejects (the interpreter runs them): case -> why (none at present)
TRITON_COMPILE_FAILS: dict = {}

PARAMS = [(c, s) for c in CASES for s in c.cpu_shapes]
IDS = [f"{c.name}-{'x'.join(map(str, s[0]))}" for c, s in PARAMS]


def on(backend):
    """The (case, shape) parameters, each marked xfail (strict) where `backend` cannot lower the case yet."""
    out = []
    for (case, shape), ident in zip(PARAMS, IDS):
        why = UNSUPPORTED.get((case.name, backend))
        marks = [pytest.mark.xfail(raises=tle.LoweringError, strict=True, reason=why)] if why else []
        out.append(pytest.param(case, shape, id=ident, marks=marks))
    return out


def check_written_and_close(launch):
    ref = launch.reference()
    for name, out in launch.outputs.items():
        left = int((out.isnan() & ~ref[name].isnan()).sum())
        assert left == 0, f"output '{name}': {left} of {out.numel()} elements never written"
    errors = compare_outputs(launch)
    assert all(math.isfinite(e) for e in errors.values()), errors


def test_every_case_is_plain_triton_text():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert {"vector_add", "softmax", "layer_norm", "matmul", "matmul_block_ptr", "attention",
            "attention_causal"} <= set(names)
    for case in CASES:
        assert parity.is_plain_text(case.kernel), case.name
        assert 3 <= len(case.shapes) <= 5 and case.cpu_shapes, case.name


@pytest.mark.parametrize("case, shape", [pytest.param(c, s, id=i) for (c, s), i in zip(PARAMS, IDS)])
def test_plain_triton_matches_reference(case, shape):
    """The text itself, under triton.jit(kernel.fn): the baseline of the benchmark is right."""
    launch = case.launch(shape, "cpu")
    poison(launch)
    case.plain_kernel()[launch.grid](*launch.args, **launch.kwargs)
    check_written_and_close(launch)


@pytest.mark.parametrize("case, shape", on("triton"))
def test_triton_lowering_matches_reference(case, shape):
    launch = case.launch(shape, "cpu")
    poison(launch)
    case.kernel[launch.grid](*launch.args, backend="triton", **launch.kwargs)
    check_written_and_close(launch)


@pytest.mark.skipif(tle.available_backends().get("tilelang") is not None, reason="TileLang backend unavailable")
@pytest.mark.parametrize("case, shape", on("tilelang"))
def test_tilelang_lowering_matches_reference(case, shape):
    launch = case.launch(shape, "cpu")
    poison(launch)
    interpret_launch(case.kernel, launch)
    check_written_and_close(launch)


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.name, marks=[pytest.mark.xfail(raises=RuntimeError, strict=True,
                                                        reason=TRITON_COMPILE_FAILS[c.name])]
                 if c.name in TRITON_COMPILE_FAILS else []) for c in CASES])
def test_triton_lowering_compiles_at_the_first_gpu_shape(case):
    """Triton's compiler (to ttgir, for sm_90) takes the Triton lowering at the smallest benchmark shape: the
    interpreter runs texts the compiler rejects (a loop-carried value whose type changes)."""
    launch = case.launch(case.shapes[0], "meta")
    lowered = case.kernel.lower(*launch.args, grid=launch.grid, backend="triton", **launch.kwargs)
    assert "tt.func" in lowered.stage("ttgir")


def test_plain_kernel_is_triton_jit_of_the_same_function():
    """triton.jit(kernel.fn) compiles the text from its `def` line: the `@tle.jit` line above it is dropped
    (checked with the JITFunction a GPU run builds; here Triton's jit builds interpreted functions)."""
    from triton.runtime.jit import JITFunction
    for case in CASES:
        plain = case.plain_kernel()
        assert plain.fn is case.kernel.fn
        jf = JITFunction(case.kernel.fn)
        assert jf.src.startswith(f"def {case.kernel.__name__}("), case.name
        assert "tle" not in jf.src, case.name
        assert jf.parse().body[0].name == case.kernel.__name__


# -- the runner ------------------------------------------------------------------------------------------------
HAND_WRITTEN = "# Triton parity\n\nIntro, by hand.\n\n## Sparse-MLA forward\n\nKept as it is.\n"


def test_runner_dry_run(tmp_path, capsys):
    page = tmp_path / parity.PAGE
    page.write_text(HAND_WRITTEN)
    argv = ["--device", "cpu", "--kernels", "vector_add,kernels.vector_add", "--out", str(tmp_path)]
    assert parity.main(argv) == 0
    printed = capsys.readouterr().out
    assert "## vector_add (tests/parity_kernels.py:add_kernel)" in printed
    assert "## kernels.vector_add (kernels/examples/vector_add.py:add_kernel)" in printed

    recs = json.loads((tmp_path / parity.JSON).read_text())
    cells = {(r["kernel"], r["impl"]): r for r in recs}
    assert set(cells) == {(k, i) for k in ("vector_add", "kernels.vector_add") for i in parity.IMPLS}
    assert all(r["status"] == "ok" and r["ms"] > 0 and r["gpu"] == "cpu" for r in recs), recs
    assert all(r["ratio"] is None for r in recs)               # no ratios from interpreters

    text = page.read_text()
    assert text.startswith(HAND_WRITTEN.rstrip("\n"))         # the hand-written part is kept
    assert text.count(parity.BEGIN_MARK) == 1 and text.count(parity.END) == 1
    assert "### vector_add (tests/parity_kernels.py:add_kernel)" in text
    if plot.available():
        assert (tmp_path / parity.PLOT).stat().st_size > 0

    # a second run of one case replaces its records where they stood, keeps the others and the page's text
    assert parity.main(["--device", "cpu", "--kernels", "vector_add", "--backends", "triton",
                        "--out", str(tmp_path)]) == 0
    again = json.loads((tmp_path / parity.JSON).read_text())
    assert [(r["kernel"], r["impl"]) for r in again] == [(r["kernel"], r["impl"]) for r in recs]
    text = page.read_text()
    assert text.startswith(HAND_WRITTEN.rstrip("\n")) and text.count(parity.BEGIN_MARK) == 1


def test_runner_reports_a_lowering_error_in_its_cell(tmp_path, capsys):
    """A case that does not lower shows the error's first line in its cell; the run goes on (exit 1)."""
    @tle.jit
    def bad_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        for i in tl.range(0, n, 1, not_an_option=3):
            tl.store(out_ptr + offs, tl.load(x_ptr + offs))

    def make(shape, device):
        x = torch.randn(16)
        out = torch.empty(16)
        return tle.Launch(grid=(1,), args=(x, out, 1), kwargs=dict(BLOCK=16), outputs={"out": out},
                          reference=lambda: {"out": x}, bytes=128, label="16 fp32")

    case = parity.Case("bad", bad_kernel, make, shapes=[None], cpu_shapes=[None])
    result = parity.measure(case, None, torch.device("cpu"), ["triton", "tilelang"], rounds=1)
    for impl in ("triton", "tilelang"):
        cell = result.cells[impl]
        assert cell.status == "error" and cell.note.startswith("LoweringError: "), cell
        assert "\n" not in cell.note
    lines = parity.table_lines([result], ["triton", "tilelang"])
    assert "LoweringError: " in lines[-1]


def test_error_cells_name_the_error():
    assert parity.first_line(tle.LoweringError("k.py:3: not supported\nmore")) == "LoweringError: k.py:3: not supported"

    class CompilationError(Exception):
        pass
    e = CompilationError("at 18:4:\n    m_i = 0.0\n    ^\nAssertionError('Loop-carried variable m_i ...')")
    assert parity.first_line(e) == "CompilationError: at 18:4: AssertionError('Loop-carried variable m_i ...')"
    assert parity.first_line(ValueError("")) == "ValueError"


def test_write_page_replaces_only_the_generated_section(tmp_path):
    path = tmp_path / "page.md"
    path.write_text(HAND_WRITTEN + "\n" + parity.BEGIN + "\nold\n" + parity.END + "\n\n## After\n\nKept too.\n")
    parity.write_page(str(path), parity.BEGIN + "\nnew\n" + parity.END + "\n")
    text = path.read_text()
    assert "old" not in text and "\nnew\n" in text
    assert text.startswith(HAND_WRITTEN) and text.endswith("## After\n\nKept too.\n")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul_block_ptr", "matmul_descriptor"])
@pytest.mark.parametrize("at", [1, 3], ids=["128x128_tiles", "128x256_tiles"])
def test_tilelang_lowering_of_the_block_matmuls_compiles_at_gpu_shapes(name, at):
    """TileLang compiles (to CUDA, for sm_90a) the boxes these kernels copy, whose starts may be 64-bit block
    offsets, at the launch configurations the GPU benchmark times (pipelined 4 and 3 deep)."""
    case = next(c for c in CASES if c.name == name)
    launch = case.launch(case.shapes[at], "meta")
    lowered = case.kernel.lower(*launch.args, grid=launch.grid, backend="tilelang", **launch.kwargs)
    assert "T.Pipelined" in lowered.source
    assert "__global__" in lowered.stage("cuda")
