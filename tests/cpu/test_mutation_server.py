"""tests/mutation.py with a coverage map: the line recorder, the map's test selection, the test server's
in-memory patching (and what it refuses), the forked run, and merging the reports of one campaign."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from mutation import Mutant, Result, classify, merge_reports
from mutation_coverage import LineRecorder, Selection, TestMap, digest, merge
from mutation_server import NEEDS_FRESH_INTERPRETER, changed_functions, module_name, patch, serve_one

PRISTINE = textwrap.dedent("""\
    LIMIT = 3


    def f(x, scale=2):
        return x + 1


    class C:
        def m(self, x):
            return x < LIMIT


    TABLE = {"f": f}
    """)


def _compile(text, name="<m>"):
    return compile(text, name, "exec", dont_inherit=True)


def _import(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module, os.path.realpath(path)


def test_changed_functions_names_the_function_or_method_a_mutant_changes():
    pairs = changed_functions(_compile(PRISTINE), _compile(PRISTINE.replace("x + 1", "x - 1")))
    assert [old.co_name for old, _ in pairs] == ["f"]
    pairs = changed_functions(_compile(PRISTINE), _compile(PRISTINE.replace("x < LIMIT", "x <= LIMIT")))
    assert [old.co_qualname for old, _ in pairs] == ["C.m"]
    assert changed_functions(_compile(PRISTINE), _compile(PRISTINE)) == []


@pytest.mark.parametrize("old, new", [("LIMIT = 3", "LIMIT = 4"),          # a module-level statement
                                      ("scale=2", "scale=3"),              # a default, evaluated at import
                                      ('{"f": f}', '{"g": f}')])
def test_changes_outside_function_bodies_are_not_patchable(old, new):
    assert changed_functions(_compile(PRISTINE), _compile(PRISTINE.replace(old, new))) is None


def test_patch_reaches_every_reference_to_the_function(tmp_path):
    module, path = _import(tmp_path, "mutation_patch_target", PRISTINE)
    try:
        assert patch(path, PRISTINE, PRISTINE.replace("x + 1", "x - 1"))
        assert module.f(5) == 4 and module.TABLE["f"](5) == 4      # the table holds the same function
        assert module.C().m(3) is False
        assert patch(path, PRISTINE, PRISTINE.replace("x < LIMIT", "x <= LIMIT"))
        assert module.C().m(3) is True
        assert not patch(path, PRISTINE, PRISTINE.replace("LIMIT = 3", "LIMIT = 4"))
    finally:
        sys.modules.pop("mutation_patch_target", None)


def test_line_recorder_records_only_the_target_lines_that_ran(tmp_path):
    module, path = _import(tmp_path, "mutation_recorder_target", PRISTINE)
    try:
        recorder = LineRecorder([path], str(tmp_path))
        recorder.start()
        module.f(1)
        ran = recorder.stop()
    finally:
        sys.modules.pop("mutation_recorder_target", None)
    line_of_f_body = PRISTINE.splitlines().index("    return x + 1") + 1
    assert ran == {"mutation_recorder_target.py": {line_of_f_body}}


def _map_part(tests, lines, collection=(), failed=()):
    return {"tests": [[t, 1.0] for t in tests], "lines": lines, "collection": {"a.py": list(collection)},
            "failed": list(failed)}


def test_the_map_chooses_the_tests_that_ran_a_line_and_never_a_failing_one():
    first = _map_part(["t::one", "t::two"], {"a.py": {"5": [0], "6": [0, 1]}}, collection=[1])
    second = _map_part(["u::three", "u::broken"], {"a.py": {"6": [0, 1]}, "b.py": {"2": [0]}},
                       failed=["u::broken"])
    m = TestMap(merge([first, second], {"a.py": "text a", "b.py": "text b"}))
    names = lambda indices: sorted(m.tests[i] for i in indices)    # noqa: E731
    assert names(m.tests_for("a.py", [5])) == ["t::one"]
    assert names(m.tests_for("a.py", range(5, 7))) == ["t::one", "t::two", "u::three"]   # not u::broken
    assert names(m.tests_for("b.py", [2])) == ["u::three"] and not m.tests_for("b.py", [3])
    assert m.ran_at_collection("a.py", [1, 2]) and not m.ran_at_collection("a.py", [5])
    assert m.stale({"a.py": "text a", "b.py": "text b"}) == []
    assert m.stale({"a.py": "text a, edited", "b.py": "text b"}) == ["a.py"]
    assert m.digests["a.py"] == digest("text a")


def test_mutant_lines_span_the_replaced_text():
    text = "a = 1\nb = (x and\n     y)\n"
    start = text.index("x and")
    m = Mutant("f.py", 2, 6, "boolean", "x and y", "x or y", start, text.index("y)") + 1, "x or y")
    assert list(m.lines(text)) == [2, 3]


def test_module_names_follow_the_package_mapping():
    assert module_name("lowering/tilelang/codegen.py") == "tle.lowering.tilelang.codegen"
    assert module_name("kernels/__init__.py") == "tle.kernels"
    assert module_name("tests/cpu/test_x.py") is None


def _pytest_choosing(tmp_path, test_file: str, test_text: str, chosen: str, *args):
    """pytest as a fresh run of a mutant starts it: `-p mutation_coverage`, the chosen node ids (and limits)
    in the file TLE_MUTATION_SELECT names."""
    (tmp_path / test_file).write_text(test_text)
    (tmp_path / "chosen.txt").write_text(chosen)
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "TLE_MUTATION_SELECT": str(tmp_path / "chosen.txt"),
           "PYTHONPATH": os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-p", "mutation_coverage",
                           "--rootdir", str(tmp_path), "-c", os.devnull, test_file],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def test_selection_runs_only_the_chosen_tests_in_their_order(tmp_path):
    proc = _pytest_choosing(tmp_path, "test_sel.py", "def test_a(): pass\n\n\ndef test_b(): pass\n\n\ndef test_c(): pass\n",
                            "test_sel.py::test_c\ntest_sel.py::test_a\n", "-v")
    ran = [line.split(" ")[0] for line in proc.stdout.splitlines() if " PASSED" in line]
    assert ran == ["test_sel.py::test_c", "test_sel.py::test_a"], proc.stdout + proc.stderr


def test_a_chosen_test_past_its_limit_fails_as_a_timeout(tmp_path):
    proc = _pytest_choosing(tmp_path, "test_slow.py", "import time\n\n\ndef test_slow():\n    time.sleep(50)\n",
                            "test_slow.py::test_slow\t0.5\n", "-q")
    assert proc.returncode == 1 and classify(proc.returncode, proc.stdout) == "timeout", proc.stdout


def test_a_forked_run_sees_the_patched_function(tmp_path):
    module_text = "def f(x):\n    return x + 1\n\n\nLIMIT = 3\n"
    _, path = _import(tmp_path, "mutation_fork_target", module_text)
    (tmp_path / "test_fork_target.py").write_text(
        "import mutation_fork_target as t\n\n\ndef test_f():\n    assert t.f(1) == 2\n\n\ndef test_other():\n    pass\n")
    request = {"file": path, "pristine": module_text, "paths": [str(tmp_path / "test_fork_target.py")],
               "tests": ["test_fork_target.py::test_f"], "timeout": 60, "log": str(tmp_path / "child.log"),
               "args": ["-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-c", os.devnull]}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert serve_one({**request, "mutant": module_text})["rc"] == 0
        assert serve_one({**request, "mutant": module_text.replace("x + 1", "x - 1")})["rc"] == 1
        assert "1 failed" in (tmp_path / "child.log").read_text()
        assert serve_one({**request, "mutant": module_text.replace("LIMIT = 3", "LIMIT = 4")})["rc"] \
            == NEEDS_FRESH_INTERPRETER
    finally:
        os.chdir(cwd)
        sys.modules.pop("mutation_fork_target", None)


def _report(tmp_path, name, statuses):
    rows = [{"file": "a.py", "line": i + 1, "col": 1, "operator": "comparison", "original": "<", "mutated": "<=",
             "status": s, "seconds": 1.0, "failed_test": None, "description": f"a.py:{i + 1}", "source": "",
             "how": "fork", "tests": 1} for i, s in enumerate(statuses)]
    path = tmp_path / name
    path.write_text(json.dumps({"results": rows}))
    return str(path)


def test_merged_reports_hold_each_mutant_once_and_keep_a_kill(tmp_path, capsys):
    first = _report(tmp_path, "one.json", ["killed", "survived", "survived"])
    second = _report(tmp_path, "two.json", ["killed", "killed"])
    merged = sorted(merge_reports([first, second]), key=lambda r: r.line)
    assert [r.status for r in merged] == ["killed", "killed", "survived"]
    assert all(isinstance(r, Result) for r in merged)
    assert "disagree on a.py:2" in capsys.readouterr().err


def test_shards_made_from_an_earlier_map_keep_the_tests_it_lacks(tmp_path):
    """--shard-by spreads the tests collected now by their earlier times: a test file or a test added since
    the earlier map is in a shard too (it once was left out of the map, and so never chose any mutant)."""
    import mutation

    cpu = tmp_path / "tests" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "test_old.py").write_text("def test_a():\n    pass\n\n\ndef test_added():\n    pass\n")
    (cpu / "test_new.py").write_text("def test_b():\n    pass\n")
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"tests": [["tests/cpu/test_old.py::test_a", 3.0]], "lines": {},
                                   "collection": {}}))

    class Copy:
        src = str(tmp_path)

        def run(self, cmd, timeout, running, env=None):
            done = subprocess.run(cmd, cwd=self.src, capture_output=True, text=True, timeout=timeout)
            return done.returncode, 0.0, done.stdout + done.stderr

    campaign = mutation.Campaign.__new__(mutation.Campaign)
    campaign.workers, campaign.running = [Copy(), Copy()], set()
    campaign.args = type("Args", (), {"shard_by": str(earlier), "map_timeout": 120})()
    shards = campaign._shards()
    tests = sorted(t for _, ts in shards for t in ts)
    assert tests == ["tests/cpu/test_new.py::test_b", "tests/cpu/test_old.py::test_a",
                     "tests/cpu/test_old.py::test_added"]
    assert len(shards) == 2 and all(files == sorted({t.split("::")[0] for t in ts}) for files, ts in shards)


def test_the_map_gives_each_test_the_lowering_lines_it_runs_alone(tmp_path):
    """Two tests lower one kernel with the same arguments: run alone (as a mutant's run may run the second),
    each lowers it, so the map lists both for the generator's lines, although in the whole run the second
    finds the first's lowering in the kernel's memory."""
    pytest.importorskip("tilelang")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    (tmp_path / "test_twice.py").write_text(textwrap.dedent("""\
        import torch
        import triton.language as tl
        import tle


        @tle.jit
        def copy_kernel(x_ptr, y_ptr):
            i = tl.arange(0, 16)
            tl.store(y_ptr + i, tl.load(x_ptr + i))


        def _lower():
            x = torch.zeros(16)
            return copy_kernel.lower(x, x, grid=(1,), backend="tilelang").source


        def test_first():
            assert "T.copy" in _lower()


        def test_second():
            assert "T.copy" in _lower()
        """))
    out = tmp_path / "map.json"
    tests_dir = os.path.join(root, "tests")
    env = {**os.environ, "TLE_MUTATION_MAP": str(out), "TLE_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([root, tests_dir, os.environ.get("PYTHONPATH", "")])}
    # the generator's file as the child imports it (a mutation worker's copy, or the tree)
    env["TLE_MUTATION_TARGETS"] = subprocess.run(
        [sys.executable, "-c", "import tle.lowering.tilelang.codegen as m; print(m.__file__)"], env=env,
        capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "mutation_coverage",
                           "--rootdir", str(tmp_path), "-c", os.devnull, "test_twice.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert [t for t, _ in data["tests"]] == ["test_twice.py::test_first", "test_twice.py::test_second"]
    (lines,) = data["lines"].values()            # codegen.py's, named from the run's root
    # the second runs the generator's lines as the first did (the module's own lines ran once, at import)
    second = {line for line, tests in lines.items() if 1 in tests}
    assert len(second) > 10 and all(0 in lines[line] for line in second)
