"""The grading outputs: exact CSVs, Gradescope's results.json, an escaped feedback page, byte-for-byte repeatable."""
import json
import os
import random
import re

import pytest

from grader.autograde.records import CheckRecord, ExerciseGrade, NotebookRecord
from grader.autograde.report import (
    feedback_html, gradebook_csv, grades_csv, results_json, student_dir, write_atomic, write_cohort,
    write_student)

EVIL = "<script>alert(1)</script>"
STUDENTS = ["alice", "Zoë Ñúñez", EVIL, "Bob"]          # Bob has no records
CHAPTERS = ["01_tensors", "02_dtypes"]


def check(name, status="passed", message="", hidden=False):
    return CheckRecord(name=name, description=f"{name} works", status=status, message=message, hidden=hidden)


def record(student, chapter, grades, seconds=1.25):
    return NotebookRecord(student=student, chapter=chapter, source=f"{chapter}.ipynb", fingerprint="f",
                          seconds=seconds, grades=[ExerciseGrade(student, chapter, *g) for g in grades])


def cohort():
    """Three students over two chapters, listed out of order, with every kind of outcome."""
    return [
        record("alice", "02_dtypes", [
            ("dtypes.bytes", 0, 2, "tampered", "the notebook patches torch.equal", [])]),
        record("alice", "01_tensors", [
            ("tensors.same_storage", 2, 2, "passed", "all 2 checks passed",
             [check("shares"), check("secret_pass", message="SECRET-PASS", hidden=True)]),
            ("tensors.views", 1.5, 3, "failed", "1/3 checks passed; first problem: shape",
             [check("shape", "failed", "expected (2, 3), got (3, 2)"), check("dtype"),
              check("secret", "failed", "a hidden check failed", hidden=True)])]),
        record("Zoë Ñúñez", "01_tensors", [
            ("tensors.same_storage", 0, 2, "missing", "no notebook for 01_tensors", []),
            ("tensors.views", 0, 3, "missing", "no notebook for 01_tensors", [])], seconds=0),
        record("Zoë Ñúñez", "02_dtypes", [
            ("dtypes.bytes", 2, 2, "passed", "all 1 checks passed", [check("bytes")])]),
        record(EVIL, "01_tensors", [
            ("tensors.same_storage", 1, 2, "failed", "<script>alert(2)</script>",
             [check("shares", "failed", "<b>got</b> & <i>lost</i>"), check("other")]),
            ("tensors.views", 3, 3, "passed", "all 1 checks passed", [check("shape")])]),
    ]


def by_student(records, student):
    return [r for r in records if r.student == student]


def test_grades_csv_exact_for_a_small_case():
    records = [record("b", "02_dtypes", [("dtypes.bytes", 2, 2, "passed", "all 1 checks passed", [])]),
               record("b", "01_tensors", [("tensors.views", 1.5, 3, "failed", 'said "no", twice', []),
                                          ("tensors.same_storage", 1 / 3, 2.0, "failed", "x", [])]),
               record("A", "01_tensors", [("tensors.views", 0, 3, "tampered", "patched", [])])]
    assert grades_csv(records) == (
        "student,chapter,exercise,score,max_score,status,message\n"
        "A,01_tensors,tensors.views,0,3,tampered,patched\n"
        'b,01_tensors,tensors.views,1.5,3,failed,"said ""no"", twice"\n'
        "b,01_tensors,tensors.same_storage,0.33,2,failed,x\n"
        "b,02_dtypes,dtypes.bytes,2,2,passed,all 1 checks passed\n")


def test_gradebook_totals_and_a_row_for_every_student():
    lines = gradebook_csv(cohort(), STUDENTS, CHAPTERS).splitlines()
    assert lines == [
        "student,01_tensors,02_dtypes,total,max_total",
        f"{EVIL},4,0,4,7",
        "alice,3.5,0,3.5,7",
        "Bob,0,0,0,7",
        "Zoë Ñúñez,0,2,2,7",
    ]


def test_gradebook_rejects_records_outside_the_listed_students_and_chapters():
    with pytest.raises(ValueError, match="carol"):
        gradebook_csv([record("carol", "01_tensors", [])], STUDENTS, CHAPTERS)
    with pytest.raises(ValueError, match="03_memory"):
        gradebook_csv([record("alice", "03_memory", [])], STUDENTS, CHAPTERS)


def test_results_json_is_gradescope_format():
    records = by_student(cohort(), "alice")
    result = json.loads(results_json("alice", records))
    assert list(result) == ["score", "execution_time", "output", "tests"]
    assert result["score"] == 3.5 and result["execution_time"] == 2.5
    assert result["output"] == "alice: 3.5/7 points; 1/3 exercises passed."
    assert [t["name"] for t in result["tests"]] == [
        "01_tensors · same_storage", "01_tensors · views", "02_dtypes · bytes"]
    for t in result["tests"]:
        assert set(t) == {"name", "score", "max_score", "status", "output", "visibility", "extra_data"}
        assert t["status"] in ("passed", "failed") and t["visibility"] == "visible"
    assert [t["extra_data"] for t in result["tests"]] == [
        {"status": "passed", "chapter": "01_tensors", "exercise": "tensors.same_storage"},
        {"status": "failed", "chapter": "01_tensors", "exercise": "tensors.views"},
        {"status": "tampered", "chapter": "02_dtypes", "exercise": "dtypes.bytes"}]
    assert result["tests"][2]["status"] == "failed" and result["tests"][2]["score"] == 0
    assert result["tests"][1]["output"] == (
        "Failed. 1 of 3 checks passed.\n"
        "✗ shape works: expected (2, 3), got (3, 2)\n"
        "✓ dtype works\n"
        "✗ secret works (hidden): a hidden check failed")


def test_hidden_checks_show_no_more_than_the_record_holds():
    records = by_student(cohort(), "alice")
    text = results_json("alice", records)
    assert "✓ secret_pass works (hidden)" in json.loads(text)["tests"][0]["output"].splitlines()
    for page in (text, feedback_html("alice", records)):
        assert "SECRET-PASS" not in page          # a passed check's message is never shown
        assert page.count("a hidden check failed") == 1


def test_results_json_text_is_utf8_with_a_trailing_newline():
    text = results_json("Zoë Ñúñez", by_student(cohort(), "Zoë Ñúñez"))
    assert "Zoë Ñúñez" in text and "\\u" not in text and text.endswith("}\n")
    assert text.startswith('{\n  "score": 2.0,')


def test_feedback_html_is_escaped_and_self_contained():
    records = cohort()
    records.append(record(EVIL, "02_dtypes", [("dtypes.bytes", 0, 2, "tampered", "<script>alert(2)</script>", [])]))
    page = feedback_html(EVIL, by_student(records, EVIL))
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert "&lt;b&gt;got&lt;/b&gt; &amp; &lt;i&gt;lost&lt;/i&gt;" in page
    assert not any(s in page for s in ("src=", "@import", "url(", "http"))
    assert page.count("href=") == page.count('href="#ex-')  # links within the page only (What to fix)
    assert "4 / 5" in page
    for student in ("alice", "Zoë Ñúñez", EVIL):
        page = feedback_html(student, by_student(records, student))
        assert "missing, invalid or tampered scores 0" in page
        for g in (g for r in by_student(records, student) for g in r.grades):
            assert f"<code>{g.exercise.partition('.')[2]}</code>" in page
    alice = feedback_html("alice", by_student(records, "alice"))
    assert 'secret works <span class="hidden">(hidden check)</span>' in alice and "✓" in alice and "✗" in alice
    assert "No notebooks were graded" in feedback_html("Bob", [])


def test_feedback_html_reads_as_words_for_a_student_on_any_screen():
    records = cohort()
    records[1].graded_at = "2026-11-22 11:20 UTC"
    page = feedback_html("alice", by_student(records, "alice"))
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    # Words and titles, not identifiers.
    for raw in ("tensors.same_storage", "not_implemented", ">tampered<", ">failed<", "01_tensors —"):
        assert raw not in page
    assert "Chapter 01 · Tensors: storage, views and einops" in page and "Exercise 1 · <code>same_storage</code>" in page
    assert "Tampering detected" in page and ">Failed<" in page and "1 of 3 checks passed." in page
    # Which file was graded, and when.
    assert "Graded file: <code>01_tensors.ipynb</code> · graded 2026-11-22 11:20 UTC" in page
    # The first failure is said twice: at the top, under "What to fix", and in its check list; never a third time
    # in a message column.
    assert page.count("expected (2, 3), got (3, 2)") == 2
    zoe = by_student(records, "Zoë Ñúñez")
    zoe[0].source = ""
    missing = feedback_html("Zoë Ñúñez", zoe)
    assert "No notebook for this chapter was found" in missing and "no notebook for 01_tensors" in missing
    stub = record("x", "01_tensors", [("tensors.views", 0, 3, "not_implemented", "not implemented yet",
                                       [check("shape", "not_implemented", "not implemented yet")])])
    page = feedback_html("x", [stub])
    assert "Not implemented yet" in page and "Not written yet" in page and "<ul" not in page


def test_student_dir_stays_one_folder_under_out(tmp_path):
    assert student_dir(tmp_path, "Zoë Ñúñez") == tmp_path / "Zoë Ñúñez"
    for name in (".", "..", "", "../up", "a/b", "nul\0byte", "/abs"):
        d = student_dir(tmp_path, name)
        assert d.parent == tmp_path and d.name not in (".", "..", "") and "/" not in d.name
    assert student_dir(tmp_path, "..") == tmp_path / "_"


def test_write_atomic_skips_identical_bytes_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "deep" / "er" / "f.txt"
    assert write_atomic(path, "héllo\n") is True
    os.utime(path, ns=(10**18, 10**18))
    assert write_atomic(path, "héllo\n") is False
    assert path.stat().st_mtime_ns == 10**18
    assert write_atomic(path, "changed\n") is True and path.read_text(encoding="utf-8") == "changed\n"
    assert os.listdir(path.parent) == ["f.txt"]


def write_all(out, records, students):
    write_cohort(out, records, students, CHAPTERS)
    for s in students:
        write_student(out, s, by_student(records, s))


def snapshot(out):
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_outputs_are_byte_identical_across_runs_and_input_orders(tmp_path):
    write_all(tmp_path / "a", cohort(), STUDENTS)
    first = snapshot(tmp_path / "a")
    assert set(first) == {"grades.csv", "gradebook.csv"} | {
        f"{d}/{f}" for d in ("alice", "Zoë Ñúñez", "<script>alert(1)<_script>", "Bob")
        for f in ("results.json", "feedback.html")}

    rng = random.Random(0)
    records, students = cohort(), list(STUDENTS)
    rng.shuffle(records)
    rng.shuffle(students)
    write_all(tmp_path / "b", records, students)
    assert snapshot(tmp_path / "b") == first

    for p in (tmp_path / "a").rglob("*"):
        if p.is_file():
            os.utime(p, ns=(10**18, 10**18))
    write_all(tmp_path / "a", cohort(), STUDENTS)
    assert snapshot(tmp_path / "a") == first
    assert all(p.stat().st_mtime_ns == 10**18 for p in (tmp_path / "a").rglob("*") if p.is_file())


def test_every_status_is_declared_once_with_its_words_and_a_styled_tone():
    """One Status type: a status read back from a saved record (a plain string) is its member, and every tone
    has a colour in the page's CSS (a new status with no tone or words would show as a raw identifier)."""
    from grader.autograde.report import _CSS
    from grader.results import Status
    for status in Status:
        assert status.words and status.words != status.value
        assert f".{status.tone}{{" in _CSS
        assert Status.of(json.loads(json.dumps(status))) is status
    assert Status.of("no-such-status") is None
    assert {s.value for s in Status if s.scores_zero} == {"missing", "invalid", "tampered"}


def test_feedback_opens_with_what_to_fix_and_folds_what_passed():
    """Catches the page that opened on every card with no summary: "What to fix" comes first, lists each exercise
    not at full marks with its status, the points it lost and its first problem, links each to its card (an id
    that exists), says the unwritten ones per chapter, and folds the passed exercises into <details>."""
    records = cohort()
    records.append(record("alice", "02_dtypes", [
        ("dtypes.bits", 0, 2, "not_implemented", "not implemented yet", [check("b", "not_implemented")]),
        ("dtypes.round", 0, 1, "error", "0/1 checks passed", [check("r", "error", "IndexError: <oops>")])]))
    page = feedback_html("alice", by_student(records, "alice"))
    fix = page.split('<section class="fix" id="what-to-fix">', 1)[1].split("</section>", 1)[0]
    assert page.index("What to fix") < page.index("<h2>Chapter 01")
    assert "4 exercises not at full marks: 6.5 points to gain" in fix
    assert "<code>views</code></a> · <span class=\"bad\">Failed</span> · <span class=\"lost\">−1.5 points</span>" in fix
    assert "shape works: expected (2, 3), got (3, 2)" in fix  # the first check that did not pass, and why
    assert "r works: IndexError: &lt;oops&gt;" in fix and "<oops>" not in page
    assert "<b>Not written yet</b> in Chapter 02 · Floating-point formats and mixed precision: " in fix
    for target in re.findall(r'href="#([^"]+)"', fix):
        assert page.count(f'id="{target}"') == 1, target
    assert '<details class="exercise" id="ex-tensors-same_storage">' in page  # passed: folded
    assert '<article class="exercise" id="ex-tensors-views">' in page  # lost points: open
    done = record("b", "01_tensors", [("tensors.views", 3, 3, "passed", "all 1 checks passed", [check("shape")])])
    assert "Nothing: every exercise has full marks." in feedback_html("b", [done])


# ---------------------------------------------------------------- spreadsheet formulas (OWASP's CSV injection)

@pytest.mark.parametrize("name", ['=HYPERLINK("evil.example","click")', "@SUM(1+1)", "+1+1", "-2+3", "\tTAB",
                                  "=1"])
def test_a_student_named_like_a_formula_is_text_in_every_csv_and_reads_back(name):
    """Caught: a folder name written as it is into grades.csv and gradebook.csv, which a spreadsheet runs."""
    import csv
    import io

    from grader.autograde.report import FORMULA_START, from_spreadsheet
    record = NotebookRecord(name, "01_tensors", "01_tensors.ipynb", "f", 1.0,
                            [ExerciseGrade(name, "01_tensors", "tensors.same_storage", 1.5, 2, "failed", "-1 is wrong")])
    for text in (grades_csv([record]), gradebook_csv([record], [name], ["01_tensors"])):
        rows = list(csv.reader(io.StringIO(text, newline="")))
        cells = [c for row in rows[1:] for c in row]
        assert not [c for c in cells if c.startswith(FORMULA_START) and not re.fullmatch(r"[+-]?[\d.]+", c)], cells
        assert rows[1][0] == "'" + name and from_spreadsheet(rows[1][0]) == name
    assert "'-1 is wrong" in grades_csv([record])


def test_a_carriage_return_in_a_name_neither_splits_a_row_nor_starts_a_formula():
    """Caught: Python's csv module leaves a lone CR unquoted, and a spreadsheet then reads two rows."""
    import csv
    import io
    name = "\r=cmd|' /C calc'!A0"
    record = NotebookRecord(name, "01_tensors", "01_tensors.ipynb", "f", 1.0,
                            [ExerciseGrade(name, "01_tensors", "tensors.same_storage", 2, 2, "passed", "ok")])
    rows = list(csv.reader(io.StringIO(grades_csv([record]), newline="")))
    assert len(rows) == 2 and rows[1][0].startswith("'") and rows[1][2] == "tensors.same_storage"


def test_numbers_stay_numbers_and_plain_names_stay_as_they_are():
    from grader.autograde.report import spreadsheet_text
    assert [spreadsheet_text(c) for c in ("-0.5", "+2", "1e-3", 3, -1.5, "Ada", "O'Brien")] == \
        ["-0.5", "+2", "1e-3", 3, -1.5, "Ada", "O'Brien"]
