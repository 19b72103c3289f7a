"""Golden files: the IR text and the generated Triton and TileLang sources of every kernel at its small
example, and the TileLang source of every syntax-corpus case (golden/corpus/), compared exactly. The numeric
tests check what generated code computes; these pin how it does it (which accesses are bulk copies, what
is pipelined, what is kept in a buffer, how it reads), which no numeric test can see. Regenerate after an
intended change with TLE_UPDATE_GOLDEN=1 and review the diff it prints (pytest -s); never in CI, where a
regenerated golden would pass whatever the lowering now makes. A missing golden file fails: only a TileLang
backend that cannot run here skips its files.

The kernels' absolute file paths (which appear in generated headers) are replaced by their file names,
so the files do not depend on where the project lives.
"""
import difflib
import inspect
import os

import pytest

import tle

from kernel_cases import example_kernels, lower_example
from syntax_corpus import CASES

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
UPDATE = os.environ.get("TLE_UPDATE_GOLDEN", "") not in ("", "0")
KERNELS = example_kernels()
ARTIFACTS = {"ir": ("triton", "ir.txt"), "triton": ("triton", "triton.py"), "tilelang": ("tilelang", "tilelang.py"),
             "triton-report": ("triton", "triton.report.txt"), "tilelang-report": ("tilelang", "tilelang.report.txt")}


def normalize(text: str, kernel) -> str:
    folder = os.path.dirname(os.path.abspath(inspect.getsourcefile(kernel.fn)))
    return text.replace(folder + os.sep, "")


def report_text(lowered) -> str:
    """The lowering's notes and its access report (what `tle inspect` shows of each load, store, atomic
    and extension site): how each access was lowered, which no numeric test and no source diff names."""
    out = ["# notes"] + (list(lowered.notes) or ["none"]) + ["# accesses: line op kind: how"]
    out += [f"{line} {op} {kind}: {how}" for line, op, kind, how in lowered.compiled.access_report]
    return "\n".join(out) + "\n"


def artifact_text(lowered, artifact: str) -> str:
    if artifact == "ir":
        return lowered.ir + "\n"
    return report_text(lowered) if artifact.endswith("-report") else lowered.source


def update_refusal(env) -> str | None:
    """Why goldens may not be regenerated in this environment (None: they may)."""
    if env.get("CI", "").strip().lower() in ("true", "1"):
        return (f"TLE_UPDATE_GOLDEN is set but CI={env['CI']}: goldens are never regenerated in CI; "
                "regenerate them locally with TLE_UPDATE_GOLDEN=1, review the diff and commit them")
    return None


def golden_diff(path: str, old: str | None, new: str) -> str:
    """A unified diff from `old` (None: no file yet) to `new`, headed by a line saying when the file is new."""
    name = os.path.relpath(path)
    lines = difflib.unified_diff([] if old is None else old.splitlines(), new.splitlines(),
                                 "/dev/null" if old is None else f"a/{name}", f"b/{name}", lineterm="")
    body = "\n".join(lines) or f"{name}: only its line endings change"     # splitlines() hides those
    return (f"new golden file {name}\n" if old is None else "") + body + "\n"


def read_golden(path: str) -> str:
    if not os.path.exists(path):
        pytest.fail(f"missing golden file {os.path.relpath(path)}: create it with TLE_UPDATE_GOLDEN=1 "
                    "and review it", pytrace=False)
    with open(path) as f:
        return f.read()


def update_golden(path: str, text: str) -> str:
    """Write `text` to `path` unless it already holds it; the diff of what changed ("" if nothing did)."""
    old = read_golden(path) if os.path.exists(path) else None
    if old == text:
        return ""                       # not rewritten: an unchanged file keeps its time stamp
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return golden_diff(path, old, text)


def check_golden(path: str, text: str):
    refused = update_refusal(os.environ) if UPDATE else None
    if refused:
        pytest.fail(refused, pytrace=False)
    if UPDATE:
        print(update_golden(path, text), end="")          # pytest -s shows what changed
        return
    expected = read_golden(path)
    assert text == expected, f"{os.path.relpath(path)} differs (TLE_UPDATE_GOLDEN=1 regenerates it)"


def skip_without(backend: str):
    why = tle.available_backends().get(backend)
    if backend == "tilelang" and why is not None:        # the environment cannot lower it; files are not at fault
        pytest.skip(f"TileLang backend unavailable here ({why})")


@pytest.mark.parametrize("artifact", list(ARTIFACTS))
@pytest.mark.parametrize("name, kernel", KERNELS, ids=[n for n, _ in KERNELS])
def test_golden(name, kernel, artifact):
    backend, suffix = ARTIFACTS[artifact]
    skip_without(backend)
    lowered = lower_example(kernel, backend)
    text = normalize(artifact_text(lowered, artifact), kernel)
    check_golden(os.path.join(GOLDEN, f"{name}.{suffix}"), text)        # module.kernel: kernel names may repeat


@pytest.mark.parametrize("artifact", ["tilelang", "tilelang-report"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_corpus(name, artifact):
    skip_without("tilelang")
    kernel, make = CASES[name]
    lowered = lower_example(kernel, "tilelang", make("cpu"))
    suffix = ARTIFACTS[artifact][1]
    check_golden(os.path.join(GOLDEN, "corpus", f"{name}.{suffix}"), normalize(artifact_text(lowered, artifact), kernel))


# -- the policy above, on files of its own ------------------------------------------------------------------
@pytest.mark.parametrize("ci", ["true", "TRUE", "True", "1"])
def test_update_is_refused_in_ci(ci):
    assert "never regenerated in CI" in update_refusal({"CI": ci})


@pytest.mark.parametrize("env", [{}, {"CI": ""}, {"CI": "0"}, {"CI": "false"}])
def test_update_is_allowed_outside_ci(env):
    assert update_refusal(env) is None


def test_missing_golden_fails(tmp_path):
    with pytest.raises(pytest.fail.Exception, match=r"missing golden file .*nope\.py.*TLE_UPDATE_GOLDEN=1"):
        read_golden(str(tmp_path / "nope.py"))


def test_update_shows_its_diff_and_leaves_unchanged_files_alone(tmp_path):
    path = str(tmp_path / "k.py")
    diff = update_golden(path, "a = 1\nb = 2\n")
    assert diff.startswith("new golden file ") and "+a = 1\n+b = 2\n" in diff
    diff = update_golden(path, "a = 1\nb = 3\n")
    assert "-b = 2\n+b = 3\n" in diff and "new golden file" not in diff
    assert read_golden(path) == "a = 1\nb = 3\n"
    stamp = os.stat(path).st_mtime_ns
    assert update_golden(path, "a = 1\nb = 3\n") == ""
    assert os.stat(path).st_mtime_ns == stamp
