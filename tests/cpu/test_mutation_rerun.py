"""tests/mutation.py --rerun finds an earlier report's survivors again after the file changed above them."""
from mutation import FileMutator, rerun_selection, source_line

BEFORE = "def f(x):\n    return x < 3\n"
AFTER = "import os\n\n\ndef f(x):\n    return x < 3\n"


def _row(m, text, with_source=True):
    return {"file": m.file, "line": m.line, "col": m.col, "operator": m.operator, "mutated": m.mutated,
            "status": "survived", "source": source_line(text, m.line) if with_source else ""}


def test_rerun_follows_the_line_text():
    old = FileMutator("lowering/x.py", BEFORE).mutants()
    new = FileMutator("lowering/x.py", AFTER).mutants()
    flip = next(m for m in old if m.mutated == "x <= 3")
    picked = rerun_selection(new, [_row(flip, BEFORE)], {"lowering/x.py": AFTER})
    assert [(m.line, m.mutated) for m in picked] == [(5, "x <= 3")]


def test_rerun_without_line_text_matches_the_line_number_only():
    old = FileMutator("lowering/x.py", BEFORE).mutants()
    new = FileMutator("lowering/x.py", AFTER).mutants()
    flip = next(m for m in old if m.mutated == "x <= 3")
    assert rerun_selection(new, [_row(flip, BEFORE, with_source=False)], {"lowering/x.py": AFTER}) == []
    assert rerun_selection(old, [_row(flip, BEFORE, with_source=False)], {"lowering/x.py": BEFORE}) == [flip]


def test_killed_rows_are_not_rerun():
    old = FileMutator("lowering/x.py", BEFORE).mutants()
    row = dict(_row(old[0], BEFORE), status="killed")
    assert rerun_selection(old, [row], {"lowering/x.py": BEFORE}) == []
