"""Regrading after a fix: `grade --students NAME` and `--exercises ID` regrade just those, keep every other record.

OUT/.state is seeded with records "graded before the fix" (a fingerprint no run would reuse), so a plain run
would regrade all of them: a regrade that touched one of them, or that rewrote its file, shows up byte for byte.
Chapter 01 of the demo cohort; one notebook is run per regrade.
"""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from grader import registry
from grader.autograde.records import ExerciseGrade, NotebookRecord
from grader.autograde.report import student_dir
from tests.inprocess import run_grader

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "submissions"
STUDENTS = ("Ada Lovelace", "Ben Bitdiddle")
BEFORE = "graded before the fix"


def state(out: Path, student: str) -> Path:
    return student_dir(out / ".state", student) / "01_tensors.json"


def seed(out: Path, student: str) -> bytes:
    """A record of every chapter-01 exercise as `failed`, as an earlier grader left it; its bytes."""
    grades = [ExerciseGrade(student, "01_tensors", ex.id, 0.0, ex.points, "failed", BEFORE)
              for ex in registry.load().of("tensors")]
    record = NotebookRecord(student, "01_tensors", "01_tensors.ipynb", "an older grader", 1.0, grades,
                            "2026-11-01 10:00 UTC", "sandbox: test")
    path = state(out, student)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record.to_dict(), ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path.read_bytes()


@pytest.fixture
def cohort(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    for student in STUDENTS:
        (subs / student).mkdir(parents=True)
        [notebook] = (DEMO / student).glob("01_*.ipynb")
        shutil.copy(notebook, subs / student / "01_tensors.ipynb")
    seeded = {student: seed(out, student) for student in STUDENTS}
    return subs, out, seeded


def rows(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_students_regrades_one_student_and_keeps_every_other_record_byte_identical(cohort):
    """Catches a regrade that runs (or rewrites) another student's notebook: Ada's stale record stays as it was,
    though a plain run would regrade it; Ben's is graded again, and the class's files are written once."""
    subs, out, seeded = cohort
    run = run_grader("grade", str(subs), "--out", str(out), "--workers", "1", "--students", "Ben Bitdiddle",
                     forkserver=True)
    assert run.returncode == 0, run.stderr[-3000:]
    said = " ".join(run.stderr.split())
    assert "1 notebook run, 1 kept from an earlier run" in said and "regraded only students Ben Bitdiddle" in said
    assert state(out, "Ada Lovelace").read_bytes() == seeded["Ada Lovelace"]
    assert state(out, "Ben Bitdiddle").read_bytes() != seeded["Ben Bitdiddle"]
    ben = NotebookRecord.from_dict(json.loads(state(out, "Ben Bitdiddle").read_text(encoding="utf-8")))
    assert ben.fingerprint != "an older grader" and {g.status for g in ben.grades} == {"not_implemented"}
    graded = rows(out)
    assert {r["message"] for r in graded if r["student"] == "Ada Lovelace"} == {BEFORE}
    assert {r["status"] for r in graded if r["student"] == "Ben Bitdiddle"} == {"not_implemented"}
    assert (out / "class.json").is_file() and (out / "Ben Bitdiddle" / "feedback.html").is_file()


def test_exercises_regrades_one_exercise_and_keeps_the_rest_of_its_record(cohort):
    """Catches --exercises replacing the whole record: only same_storage's grade is new; the record keeps its
    other grades and the older fingerprint (a plain run still knows the rest is stale)."""
    subs, out, seeded = cohort
    run = run_grader("grade", str(subs), "--out", str(out), "--workers", "1", "--students", "Ada Lovelace",
                     "--exercises", "tensors.same_storage", "--similarity", forkserver=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "compared 2 students over 6 exercises" in " ".join(run.stderr.split())  # --similarity, after grading
    assert (out / "similarity.csv").read_text(encoding="utf-8").startswith("exercise,student_a,student_b,")
    assert state(out, "Ben Bitdiddle").read_bytes() == seeded["Ben Bitdiddle"]
    ada = NotebookRecord.from_dict(json.loads(state(out, "Ada Lovelace").read_text(encoding="utf-8")))
    assert ada.fingerprint == "an older grader"
    assert [(g.exercise, g.status) for g in ada.grades if g.status != "failed"] == [("tensors.same_storage", "passed")]
    assert all(g.message == BEFORE for g in ada.grades if g.exercise != "tensors.same_storage")


@pytest.mark.parametrize("flags, says", [
    (("--exercises", "nope"), "--exercises: 'nope' is not an exercise of the chapters graded"),
    (("--students", "Nobody"), "--students: no submission from 'Nobody'"),
    (("--exercises", "dtypes.bytes_of"), "is not an exercise of the chapters graded (01_tensors)"),
    (("--students", " , "), "need at least one name"),
])
def test_an_unknown_name_is_an_error_and_changes_nothing(cohort, flags, says):
    """Catches a typo that would regrade nothing, or everything, silently: exit status 2, the name said, no file
    in OUT written or changed."""
    subs, out, _ = cohort
    before = snapshot(out)
    run = run_grader("grade", str(subs), "--out", str(out), *flags)
    assert run.returncode == 2 and says in " ".join(run.stderr.split()), run.stderr
    assert snapshot(out) == before
