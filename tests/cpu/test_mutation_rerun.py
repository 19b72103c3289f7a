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


def _report(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text(__import__("json").dumps({"results": rows}))
    return str(path)


def _result_row(m, text, status):
    return dict(_row(m, text), status=status, original=m.original, seconds=1.0, failed_test=None,
                description=m.describe(), how="fork", tests=1)


def test_a_merge_counts_each_row_for_the_mutant_of_the_files_as_they_are_now(tmp_path):
    """Reports made before a line was added above a function count for its mutants at their new lines,
    once each (a kill wins); a row whose line's text is gone is left out."""
    from mutation import merge_reports
    old = FileMutator("lowering/x.py", BEFORE).mutants()
    flip = next(m for m in old if m.mutated == "x <= 3")
    now_text = AFTER + "\n\ndef g(y):\n    return y > 1\n"
    now = FileMutator("lowering/x.py", now_text).mutants()
    gone = dict(_result_row(flip, BEFORE, "killed"), source="return x < 4")
    first = _report(tmp_path, "one.json", [_result_row(flip, BEFORE, "survived"), gone])
    second = _report(tmp_path, "two.json", [_result_row(flip, BEFORE, "killed")])
    merged = merge_reports([first, second], now, {"lowering/x.py": now_text})
    assert [(r.line, r.mutated, r.status, r.source) for r in merged] == [(5, "x <= 3", "killed", "return x < 3")]
    assert merged[0].description.startswith("lowering/x.py:5: ")


def test_skipped_mutants_are_found_again_after_the_file_changed_above_them(tmp_path):
    """--skip leaves out what an earlier report holds, matched on the line's text as --rerun matches it."""
    import argparse
    from mutation import select
    old = FileMutator("lowering/x.py", BEFORE).mutants()
    now = FileMutator("lowering/x.py", AFTER).mutants()
    flip = next(m for m in old if m.mutated == "x <= 3")
    report = _report(tmp_path, "done.json", [_result_row(flip, BEFORE, "killed")])
    args = argparse.Namespace(rerun=None, only=None, operator=None, sample=None, shuffle=False, skip=[report],
                              reverse=False, limit=None, seed=0)
    chosen, _ = select(now, args, {"lowering/x.py": AFTER})
    assert len(chosen) == len(now) - 1 and all(m.mutated != "x <= 3" for m in chosen)
