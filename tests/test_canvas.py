"""Canvas in and out, manual overrides and late work, through the real `python -m grader grade`.

One Canvas-shaped download (a flat zip, files named `<name>[_LATE]_<user id>_<file id>_<file>`) is graded
once; every other test copies that OUT and grades again with other options, which reuses the graded
records in OUT/.state (no notebook runs again), just as an instructor's re-run does.
"""
from __future__ import annotations

import argparse
import csv
import html
import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.autograde import adjust
from grader.autograde.canvas import parse_name
from grader.autograde.late import LatePolicy, days_late, lateness, parse_time
from grader.autograde.overrides import read_overrides
from tests import hazards
from tests.inprocess import run_grader

ROOT = Path(__file__).resolve().parents[1]
EX = "tensors."       # exercise ids as in grades.csv
# Canvas user id -> the student as every output names them, and their 01_tensors score as graded (of 12).
ADA, BEN, CHLOE, ALYSSA, LOUIS = ("lovelaceada (12345)", "bitdiddleben (23456)", "duboischloe (34567)",
                                  "hackeralyssa (45678)", "reasonerlouis (56789)")
GRADED = {ADA: "12", BEN: "12", CHLOE: "7", ALYSSA: "0", LOUIS: "12"}
IDS = {ADA: "12345", BEN: "23456", CHLOE: "34567", ALYSSA: "45678", LOUIS: "56789"}


def grade_args(submissions: Path, out: Path, *extra: str) -> list[str]:
    return ["grade", str(submissions), "--out", str(out), "--chapters", "01_tensors", "--workers", "1", *extra]


def grade(submissions: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *grade_args(submissions, out, *extra)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def grade_again(submissions: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """The same command in this process (tests/inprocess.py), for a run that grades no notebook: OUT already holds
    every record, or the run stops on its options first."""
    return run_grader(*grade_args(submissions, out, *extra))


def half_solved() -> nbformat.NotebookNode:
    """The solution with element_offset (3 points) and broadcast_shape (2) left unwritten: 7 of 12."""
    nb = hazards.exercises_only()
    for name, args in (("element_offset", "x, index"), ("broadcast_shape", "a, b")):
        hazards.replace_def(nb, name, f"def {name}({args}):\n    raise NotImplementedError\n")
    return nb


def canvas_download(path: Path) -> Path:
    """A class's "Download submissions" as Canvas writes it: one flat zip, every file renamed."""
    solved = nbformat.writes(hazards.exercises_only())
    half = nbformat.writes(half_solved())
    own_zip = io.BytesIO()
    with zipfile.ZipFile(own_zip, "w") as z:
        z.writestr("week1/01_tensors.ipynb", solved)
        z.writestr("__MACOSX/week1/._01_tensors.ipynb", "junk")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("lovelaceada_12345_67890_01_tensors.ipynb", solved)
        z.writestr("lovelaceada_12345_67891_notes.txt", "a second file of Ada's: same user id, same student")
        z.writestr("bitdiddleben_LATE_23456_78901_01_tensors.ipynb", solved)
        z.writestr("duboischloe_34567_89012_01_tensors-1.ipynb", half)          # uploaded a second time
        z.writestr("hackeralyssa_45678_text.html", "<p>my answers are in the text box</p>")   # a text entry
        z.writestr("reasonerlouis_56789_90123_work.zip", own_zip.getvalue())    # a zip of their own
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    """The download graded once, with no instructor options: its zip, its OUT, and what the run said."""
    root = tmp_path_factory.mktemp("canvas")
    download = canvas_download(root / "submissions.zip")
    run = grade(download, root / "out")
    assert run.returncode == 0, run.stderr[-3000:]
    return {"zip": download, "out": root / "out", "stderr": " ".join(run.stderr.split())}


def regrade(graded: dict, where: Path, *extra: str,
            overrides: str | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """Grade the download again into a copy of the graded OUT (with OUT/overrides.csv when given)."""
    out = where / "out"
    shutil.copytree(graded["out"], out)
    if overrides is not None:
        (out / "overrides.csv").write_text(overrides, encoding="utf-8")
    run = grade_again(graded["zip"], out, *extra)
    assert "0 notebooks run" in run.stderr or run.returncode != 0, run.stderr[-3000:]
    return run, out


def table(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def by_student(path: Path) -> dict[str, dict[str, str]]:
    """gradebook.csv as student -> column -> cell."""
    with open(path, newline="", encoding="utf-8") as f:
        return {row["student"]: row for row in csv.DictReader(f)}


def grades(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    """grades.csv as (student, exercise) -> row."""
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return {(row["student"], row["exercise"]): row for row in csv.DictReader(f)}


def canvas_rows(out: Path) -> dict[str, list[str]]:
    """canvas.csv's student rows by Canvas user id (its ID column)."""
    return {row[1]: row for row in table(out / "canvas.csv")[2:]}


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def results(out: Path, student: str) -> dict:
    return json.loads((out / student / "results.json").read_text(encoding="utf-8"))


def feedback(out: Path, student: str) -> str:
    return (out / student / "feedback.html").read_text(encoding="utf-8")


# ---------------------------------------------------------------- Canvas in

def test_canvas_names_are_parsed_as_canvas_writes_them():
    ada = parse_name("lovelaceada_12345_67890_01_tensors.ipynb")
    assert (ada.name, ada.user_id, ada.late, ada.original) == ("lovelaceada", "12345", False, "01_tensors.ipynb")
    for marker in ("LATE", "late"):
        ben = parse_name(f"bitdiddleben_{marker}_23456_78901_2024_01_tensors-1.ipynb")
        assert (ben.name, ben.user_id, ben.late, ben.original) == ("bitdiddleben", "23456", True,
                                                                   "2024_01_tensors-1.ipynb")
    text = parse_name("hackeralyssa_LATE_45678_text.html")
    assert (text.user_id, text.late, text.original) == ("45678", True, "")
    assert parse_name("reasonerlouis_56789_link.html").original == ""
    assert parse_name("01_tensors.ipynb") is None and parse_name("Ada Lovelace") is None


def test_canvas_download_is_grouped_by_user_id_and_each_student_graded(graded):
    out = graded["out"]
    assert {s: row["01_tensors"] for s, row in by_student(out / "gradebook.csv").items()} == GRADED
    rows = grades(out)
    assert {e: rows[CHLOE, EX + e]["status"] for e in hazards.EXERCISES} == {
        **hazards.ALL_PASS, "element_offset": "not_implemented", "broadcast_shape": "not_implemented"}
    assert rows[ALYSSA, EX + "same_storage"]["message"] == "no notebook for 01_tensors; found no notebooks"
    sources = {s: json.loads((out / ".state" / s / "01_tensors.json").read_text(encoding="utf-8"))["source"]
               for s in (ADA, CHLOE, LOUIS)}
    assert sources == {ADA: "01_tensors.ipynb", CHLOE: "01_tensors-1.ipynb", LOUIS: "work.zip/week1/01_tensors.ipynb"}
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [".state", BEN, CHLOE, ALYSSA, ADA, LOUIS]
    assert "5 students, 1 marked late by Canvas" in graded["stderr"]
    assert "ignored hackeralyssa_45678_text.html: a text or URL entry" in graded["stderr"]


# ---------------------------------------------------------------- canvas.csv out

def test_canvas_csv_has_what_canvas_gradebook_import_reads(graded):
    rows = table(graded["out"] / "canvas.csv")
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "01_tensors"]
    assert rows[1] == ["Points Possible", "", "", "", "", "12"]
    assert {r[1]: (r[0], r[5]) for r in rows[2:]} == {
        IDS[s]: (s.split(" ")[0], score) for s, score in GRADED.items()}
    assert all(r[2:5] == ["", "", ""] for r in rows[2:])


@pytest.mark.parametrize("flags, header", [
    (["--canvas-assignment", "01_tensors=Tensors (4567)"], "Tensors (4567)"),
    (["--canvas-columns", "total"], "Notebooks"),
    (["--canvas-columns", "total", "--canvas-assignment", "Notebooks 1-3 (999)"], "Notebooks 1-3 (999)"),
])
def test_canvas_csv_columns_per_chapter_or_one_total_named_after_an_assignment(graded, tmp_path, flags, header):
    run, out = regrade(graded, tmp_path, *flags)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = table(out / "canvas.csv")
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", header]
    assert rows[1][5] == "12" and {r[1]: r[5] for r in rows[2:]} == {IDS[s]: v for s, v in GRADED.items()}


def test_canvas_csv_for_student_folders_names_each_student_for_canvas_to_match(graded, tmp_path):
    subs = tmp_path / "subs"
    (subs / ADA).mkdir(parents=True)
    # as graded: its record is kept
    (subs / ADA / "01_tensors.ipynb").write_text(nbformat.writes(hazards.exercises_only()))
    shutil.copytree(graded["out"], tmp_path / "out")
    run = grade_again(subs, tmp_path / "out", "--canvas-columns", "total")
    assert run.returncode == 0 and "0 notebooks run" in run.stderr, run.stderr[-3000:]
    assert table(tmp_path / "out" / "canvas.csv") == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Notebooks"],
        ["Points Possible", "", "", "", "", "12"],
        [ADA, "", "", "", "", "12"]]


def test_a_canvas_assignment_for_no_graded_chapter_stops_the_run(graded, tmp_path):
    run, out = regrade(graded, tmp_path, "--canvas-assignment", "02_dtypes=Dtypes (1)")
    assert run.returncode == 2
    assert "--canvas-assignment '02_dtypes=Dtypes (1)': '02_dtypes' is not a chapter graded in this run" in run.stderr


# ---------------------------------------------------------------- manual overrides

OVERRIDES = ("student,exercise,score,reason\n"
             "23456,tensors.split_heads,1,copied from a classmate\n"
             'duboischloe (34567),tensors.element_offset,2.5,"right idea, <off by one>"\n')


@pytest.fixture(scope="module")
def overridden(graded, tmp_path_factory) -> Path:
    run, out = regrade(graded, tmp_path_factory.mktemp("overridden"), overrides=OVERRIDES)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "applied 2 manual override(s)" in " ".join(run.stderr.split())
    return out


def test_an_override_sets_the_score_everywhere_and_the_reason_reaches_the_student(overridden):
    out = overridden
    rows = grades(out)
    assert (rows[BEN, EX + "split_heads"]["score"], rows[BEN, EX + "split_heads"]["status"]) == ("1", "passed")
    assert rows[BEN, EX + "split_heads"]["message"] == ("overridden from 2: copied from a classmate; "
                                                        "graded: all 5 checks passed")
    assert rows[CHLOE, EX + "element_offset"]["score"] == "2.5"
    assert rows[CHLOE, EX + "element_offset"]["message"].startswith("overridden from 0: right idea, <off by one>")
    book = by_student(out / "gradebook.csv")
    assert {s: (r["01_tensors"], r["total"]) for s, r in book.items()} == {
        **{s: (v, v) for s, v in GRADED.items()}, BEN: ("11", "11"), CHLOE: ("9.5", "9.5")}
    assert {i: r[5] for i, r in canvas_rows(out).items()} == {
        **{IDS[s]: v for s, v in GRADED.items()}, "23456": "11", "34567": "9.5"}

    ben = results(out, BEN)
    test = next(t for t in ben["tests"] if t["extra_data"]["exercise"] == EX + "split_heads")
    assert (ben["score"], test["score"], test["status"]) == (11, 1, "failed")
    assert test["extra_data"]["override"] == {"graded_score": 2, "reason": "copied from a classmate"}
    assert test["output"].startswith("Score set by your instructor: copied from a classmate")
    page = feedback(out, CHLOE)
    assert html.escape("right idea, <off by one>") in page and "<off by one>" not in page
    assert "Score set by your instructor" in page and "<b>9.5 of 12</b>" in page
    assert "Score set by your instructor" not in feedback(out, ADA)


def test_overrides_never_touch_the_graded_records(graded, overridden):
    state = {k: v for k, v in snapshot(overridden).items() if k.startswith(".state/")}
    assert state == {k: v for k, v in snapshot(graded["out"]).items() if k.startswith(".state/")}


def test_overrides_are_kept_across_re_runs_and_a_new_file_is_applied_to_an_existing_out(graded, overridden, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(overridden, out)
    again = grade_again(graded["zip"], out)                # OUT/overrides.csv is read on every run
    assert again.returncode == 0 and "every output in" in again.stderr and "already up to date" in again.stderr
    assert by_student(out / "gradebook.csv")[BEN]["total"] == "11"

    (out / "overrides.csv").write_text("student,exercise,score,reason\n"
                                       "bitdiddleben (23456),tensors.merge_heads,0,no docstring\n", encoding="utf-8")
    changed = grade_again(graded["zip"], out)
    assert changed.returncode == 0 and "0 notebooks run" in changed.stderr, changed.stderr[-3000:]
    book = by_student(out / "gradebook.csv")
    assert (book[BEN]["total"], book[CHLOE]["total"]) == ("11", "7")       # Chloé's override is gone
    rows = grades(out)
    assert (rows[BEN, EX + "split_heads"]["score"], rows[BEN, EX + "merge_heads"]["score"]) == ("2", "0")
    assert "no docstring" in feedback(out, BEN) and "right idea" not in feedback(out, CHLOE)


@pytest.mark.parametrize("row, message", [
    ("nobody,tensors.split_heads,1,x", "overrides.csv row 4: unknown student 'nobody'"),
    ("23456,tensors.nope,1,x", "overrides.csv row 4: unknown exercise 'tensors.nope'"),
    ("23456,tensors.merge_heads,lots,x", "overrides.csv row 4: score 'lots' is not a number"),
])
def test_a_bad_override_stops_the_run_before_any_output_changes(graded, overridden, tmp_path, row, message):
    out = tmp_path / "out"
    shutil.copytree(overridden, out)               # an OUT with every output of an earlier run, overrides applied
    (out / "overrides.csv").write_text(OVERRIDES + row + "\n", encoding="utf-8")
    before = snapshot(out)
    run = grade_again(graded["zip"], out)
    assert run.returncode == 2, run.stderr[-3000:]
    assert message in " ".join(run.stderr.split())
    assert snapshot(out) == before


@pytest.mark.parametrize("row, message", [
    ("23456,tensors.merge_heads,3,x", "row 4: score 3 is outside 0..1 for tensors.merge_heads"),
    ("23456,tensors.merge_heads,-0.5,x", "row 4: score -0.5 is outside 0..1 for tensors.merge_heads"),
    ("23456,tensors.merge_heads,nan,x", "row 4: score nan is outside 0..1 for tensors.merge_heads"),
    ("23456,tensors.merge_heads,1,", "row 4: no reason given (the student is shown it)"),
    ("23456,tensors.merge_heads,1", "row 4: expected 4 fields (student,exercise,score,reason), got 3"),
    ("23456,tensors.split_heads,0,again", "row 4: bitdiddleben (23456), tensors.split_heads is overridden twice "
                                          "(also row 2)"),
])
def test_every_bad_override_row_is_named(tmp_path, row, message):
    (tmp_path / "overrides.csv").write_text(OVERRIDES + row + "\n", encoding="utf-8")
    students = {"23456": BEN, "34567": CHLOE}
    with pytest.raises(ValueError) as e:
        read_overrides(tmp_path / "overrides.csv", lambda name: students.get(name, name if "(" in name else None),
                       {EX + "split_heads": 2, EX + "element_offset": 3, EX + "merge_heads": 1})
    assert str(e.value) == f"{tmp_path / 'overrides.csv'} {message}"


def test_an_overrides_file_with_another_header_is_refused(tmp_path):
    (tmp_path / "o.csv").write_text("student,exercise,points\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the header must be student,exercise,score,reason, not student,exercise,"):
        read_overrides(tmp_path / "o.csv", lambda name: name, {})


# ---------------------------------------------------------------- late work

def test_late_work_is_off_by_default(graded):
    assert table(graded["out"] / "gradebook.csv")[0] == ["student", "01_tensors", "total", "max_total"]
    assert by_student(graded["out"] / "gradebook.csv")[BEN]["total"] == "12"   # Canvas marked Ben late
    assert "late" not in feedback(graded["out"], BEN).lower()


def test_canvas_late_marker_costs_one_day(graded, tmp_path):
    run, out = regrade(graded, tmp_path, "--late-penalty", "10%/day", "--late-cap", "30%")
    assert run.returncode == 0, run.stderr[-3000:]
    assert table(out / "gradebook.csv")[0] == ["student", "01_tensors", "total", "max_total", "01_tensors late"]
    book = by_student(out / "gradebook.csv")
    assert {s: (r["01_tensors"], r["01_tensors late"]) for s, r in book.items()} == {
        **{s: (v, "") for s, v in GRADED.items()}, BEN: ("10.8", "1 day late, -10% of 12")}
    assert canvas_rows(out)["23456"][5] == "10.8" and results(out, BEN)["score"] == 10.8
    assert ("Submitted 1 day late (Canvas marked it late; counted as 1 day): −10% (12 → 10.8 points)."
            in feedback(out, BEN))
    assert "late" not in feedback(out, ADA).lower()


TIMES = ("student,chapter,time\n"
         "12345,,2026-12-03T20:00+01:00\n"                 # 44 hours late: 2 days, -20%
         "bitdiddleben (23456),,2026-11-30T12:00+01:00\n"  # on time: waives Canvas's marker
         "34567,01_tensors,2026-12-01T22:59Z\n"             # the due time itself, in UTC: on time
         "56789,,2026-12-10T00:00Z\n")                      # 9 days: -90%, capped at 30%


def test_due_date_and_submission_times_with_a_cap(graded, tmp_path):
    (tmp_path / "times.csv").write_text(TIMES, encoding="utf-8")
    run, out = regrade(graded, tmp_path, "--due", "2026-12-01T23:59+01:00", "--late-penalty", "10%/day",
                       "--late-cap", "30%", "--submitted-at", str(tmp_path / "times.csv"))
    assert run.returncode == 0, run.stderr[-3000:]
    book = by_student(out / "gradebook.csv")
    assert {s: (r["01_tensors"], r["total"], r["01_tensors late"]) for s, r in book.items()} == {
        ADA: ("9.6", "9.6", "2 days late, -20% of 12"), BEN: ("12", "12", ""), CHLOE: ("7", "7", ""),
        ALYSSA: ("0", "0", ""), LOUIS: ("8.4", "8.4", "9 days late, -30% of 12")}
    assert {i: r[5] for i, r in canvas_rows(out).items()} == {
        "12345": "9.6", "23456": "12", "34567": "7", "45678": "0", "56789": "8.4"}
    assert "Submitted 2 days late: −20% (12 → 9.6 points)." in feedback(out, ADA)
    assert "<b>9.6 of 12</b>" in feedback(out, ADA) and "late" not in feedback(out, BEN).lower()
    assert "01_tensors: submitted 9 days late: −30% (12 → 8.4 points)." in results(out, LOUIS)["output"]


def test_late_penalty_applies_after_overrides(graded, overridden, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(overridden, out)
    run = grade_again(graded["zip"], out, "--late-penalty", "10%/day")
    assert run.returncode == 0, run.stderr[-3000:]
    assert by_student(out / "gradebook.csv")[BEN]["01_tensors late"] == "1 day late, -10% of 11"
    assert by_student(out / "gradebook.csv")[BEN]["total"] == "9.9"


def test_late_options_that_mean_nothing_stop_the_command(tmp_path):
    run = grade_again(tmp_path, tmp_path / "out", "--due", "2026-12-01T23:59+01:00")
    assert run.returncode == 2 and "--due needs --late-penalty" in run.stderr, run.stderr[-3000:]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, message", [
    (["--submitted-at", "times.csv", "--late-penalty", "10%/day"], "--submitted-at needs --late-penalty and --due"),
    (["--submitted-at", "times.csv", "--due", "2026-12-01T23:59Z"], "--due needs --late-penalty"),
    (["--late-cap", "50%"], "--late-cap needs --late-penalty"),
    (["--late-penalty", "10%/week"], "not a late penalty: '10%/week'"),
    (["--late-penalty", "10%", "--late-cap", "150%"], "not a late cap: '150%'"),
    (["--late-penalty", "10%", "--due", "2026-12-01T23:59"], "has no UTC offset"),
])
def test_late_options_that_mean_nothing_are_refused(capsys, flags, message):
    parser = argparse.ArgumentParser(prog="grade")
    adjust.add_arguments(parser)
    with pytest.raises(SystemExit) as e:
        adjust.from_args(parser, parser.parse_args(flags))
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_a_bad_submission_time_stops_the_run_before_any_output_changes(graded, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(graded["out"], out)
    (tmp_path / "times.csv").write_text("student,time\n12345,2026-12-03T20:00+01:00\nnobody,2026-12-03T20:00Z\n",
                                        encoding="utf-8")
    before = snapshot(out)
    run = grade_again(graded["zip"], out, "--due", "2026-12-01T23:59+01:00", "--late-penalty", "10%/day",
                      "--submitted-at", str(tmp_path / "times.csv"))
    assert run.returncode == 2 and "times.csv row 3: unknown student 'nobody'" in run.stderr, run.stderr[-3000:]
    assert snapshot(out) == before


def test_days_late_are_counted_up_and_capped():
    due = parse_time("2026-12-01T23:59+01:00")
    assert [days_late(parse_time(t), due) for t in
            ("2026-12-01T23:59+01:00", "2026-12-02T00:00+01:00", "2026-12-02T23:59+01:00", "2026-12-03T00:00+01:00")
            ] == [0, 1, 1, 2]
    policy = LatePolicy(0.25, 0.6, due)
    assert lateness(policy, parse_time("2026-12-05T12:00+01:00"), False).fraction == 0.6
    assert lateness(policy, parse_time("2026-12-01T12:00+01:00"), True) is None      # a time wins over the marker
    assert lateness(policy, None, True).days == 1 and lateness(policy, None, False) is None
