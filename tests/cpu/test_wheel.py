"""A regular (non-editable) install: the wheel holds every package of the tree, and the README's main job runs
from it in a fresh virtual environment, the TileLang rows through the interpreter the wheel carries."""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = {"tle": "tle", "lowering": "tle/lowering", "kernels": "tle/kernels"}   # tree folder -> installed path
MAIN_JOB = ("kernels/examples/vector_add.py::add_kernel", "kernels/softmax.py::softmax_kernel",
            "kernels/rms_norm.py::rms_norm_fwd_kernel", "kernels/examples/matmul.py::matmul_kernel")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    """The wheel, built from a copy of what setup.py reads (a build in the tree would leave build/ behind, and
    a later build would take stale files from it)."""
    tree, out = tmp_path_factory.mktemp("tree"), tmp_path_factory.mktemp("dist")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("setup.py", "pyproject.toml", "README.md", *FOLDERS):
        source = os.path.join(ROOT, name)
        (shutil.copytree if os.path.isdir(source) else shutil.copy2)(source, tree / name, **(
            {"ignore": ignore} if os.path.isdir(source) else {}))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(tree)], check=True, capture_output=True, text=True)
    (path,) = out.glob("tle-*.whl")
    return str(path)


def _tree_modules() -> set[str]:
    """Every .py file of the three folders, as the path it has once installed."""
    found = set()
    for folder, installed in FOLDERS.items():
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            rel = os.path.relpath(dirpath, os.path.join(ROOT, folder))
            for f in files:
                if f.endswith(".py"):
                    found.add(os.path.normpath(os.path.join(installed, rel, f)))
    return found


def test_the_wheel_holds_every_module_of_the_tree(wheel):
    with zipfile.ZipFile(wheel) as z:
        held = {n for n in z.namelist() if n.endswith(".py")}
    missing = _tree_modules() - held
    assert not missing, f"left out of the wheel: {sorted(missing)}"
    assert "tle/lowering/tilelang/interpreter/program.py" in held


def test_the_main_job_runs_from_the_wheel_in_a_fresh_environment(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # the dependencies (torch, triton, tilelang, ...) from this environment, as plain path entries: its .pth
    # files, the editable install of this tree among them, are not read from there
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    with open(os.path.join(site, "dependencies.pth"), "w") as f:
        f.write("\n".join(sorted(deps)) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", site,
                    wheel], check=True, capture_output=True, text=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    where = subprocess.run([str(python), "-c", "import tle; print(tle.__file__)"], cwd=tmp_path, env=env,
                           check=True, capture_output=True, text=True).stdout.strip()
    assert where.startswith(site), where
    p = subprocess.run([str(python), "-m", "tle.cli", "compare", *(os.path.join(ROOT, k) for k in MAIN_JOB)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    tilelang_rows = [ln for ln in p.stdout.splitlines() if re.search(r"\stilelang\s+yes\s", ln)]
    assert len(tilelang_rows) == len(MAIN_JOB) and all(re.search(r"\s\d\S*\s+-$", r) for r in tilelang_rows), \
        p.stdout[-3000:]
    assert "tilelang in the interpreter of TileLang programs" in p.stdout
