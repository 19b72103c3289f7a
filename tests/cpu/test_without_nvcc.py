"""Without nvcc the TileLang backend still lowers, and its lowerings still run in the interpreter of TileLang
programs: `tle compare` checks them and says they were not compiled, and the CPU tests of the TileLang
lowering run rather than skip. Each check runs in a process whose PATH and CUDA_HOME hold no nvcc."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.slow


def _without_nvcc(tmp_path) -> dict:
    """This environment with every nvcc taken off PATH (the other programs of its folders stay reachable
    through links) and CUDA_HOME pointing at a folder with none."""
    links = tmp_path / "bin"
    links.mkdir()
    path = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.exists(os.path.join(folder, "nvcc")):
            path.append(folder)
            continue
        for name in os.listdir(folder):
            if name != "nvcc" and not (links / name).exists():
                (links / name).symlink_to(os.path.join(folder, name))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PATH"] = os.pathsep.join([str(links)] + path)
    env["CUDA_HOME"] = str(tmp_path / "no-cuda")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return env


def _run(args, env, timeout=900):
    return subprocess.run([sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_the_environment_has_no_nvcc(tmp_path):
    env = _without_nvcc(tmp_path)
    p = _run(["-c", "from tle.lowering.tilelang.backend import Backend; "
                    "print(Backend().unavailable_reason(), '|', Backend().compile_unavailable_reason())"], env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("None | no nvcc:"), p.stdout


def test_compare_checks_the_tilelang_lowering_without_compiling_it(tmp_path):
    p = _run(["-m", "tle.cli", "compare", "kernels/examples/vector_add.py::add_kernel"], _without_nvcc(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    row = next(ln for ln in p.stdout.splitlines() if re.match(r"\s*tilelang\s", ln))
    assert "not compiled: no nvcc" in row and re.search(r"\s\d\S*\s+-$", row), row   # checked, with an error
    triton = next(ln for ln in p.stdout.splitlines() if re.match(r"kernels/examples/vector_add.py::add_kernel\s+triton", ln))
    assert "ptx sm_90a" in triton
    assert "all lowerings and checks passed; some lowerings were not compiled" in p.stdout


def test_show_names_the_missing_compiler(tmp_path):
    env = _without_nvcc(tmp_path)
    p = _run(["-m", "tle.cli", "show", "kernels/examples/vector_add.py::add_kernel", "--backend", "tilelang"], env)
    assert p.returncode == 0 and "@T.prim_func" in p.stdout, p.stderr
    p = _run(["-m", "tle.cli", "show", "kernels/examples/vector_add.py::add_kernel", "--backend", "tilelang",
              "--stage", "cuda"], env)
    assert p.returncode == 1
    assert "tilelang could not produce stage 'cuda': CompilerUnavailable: [tilelang] cannot compile here: no nvcc" \
        in p.stderr


def test_the_tilelang_tests_run_without_nvcc(tmp_path):
    """Goldens, the interpreter's numbers and the operators through the interpreter: none skips; a test that
    compiles skips, naming the missing compiler."""
    p = _run(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
              "tests/cpu/test_golden.py::test_golden[softmax.softmax_kernel-tilelang]",
              "tests/cpu/test_golden.py::test_golden[softmax.softmax_kernel-tilelang-report]",
              "tests/cpu/test_kernels_interpreter.py::test_tilelang_lowering_matches_reference[softmax.softmax_kernel]",
              "tests/cpu/test_tilelang_compile.py::test_source_stage_and_unknown_stage",
              "tests/cpu/test_tilelang_compile.py::test_tilelang_compiles_to_cuda_and_ptx[examples.vector_add.add_kernel]"],
             _without_nvcc(tmp_path))
    summary = p.stdout.strip().splitlines()[-1]
    assert p.returncode == 0 and re.search(r"\b4 passed, 1 skipped\b", summary), p.stdout + p.stderr
    assert "needs the backend's compiler: [tilelang] cannot compile here: no nvcc" in p.stdout
