"""`make grade` on the demo cohort's solved and untouched students, every chapter: the solutions get full
marks under grading (kernel, bridge, scenarios, hidden checks) and the untouched student notebooks get
not_implemented for every exercise. The half-solved zip (every exercise of it is solved by one student
here and untouched by the other) is graded in tests/test_grading.py, cut to chapter 01."""
from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader import chapters, registry

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "submissions"
GRADED = ("Ada Lovelace", "Ben Bitdiddle")


@pytest.fixture(scope="module")
def demo_grades(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("demo-grades")
    cohort = tmp_path_factory.mktemp("demo-cohort")
    for student in GRADED:
        shutil.copytree(DEMO / student, cohort / student)
    run = subprocess.run([sys.executable, "-m", "grader", "grade", str(cohort), "--out", str(out), "--workers", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def graded_chapters() -> list[str]:
    return [s for s in chapters.NOTEBOOKS if (ROOT / "solutions" / f"{s}.ipynb").exists()]


def test_every_chapter_is_in_the_demo(demo_grades):
    assert {r["chapter"] for r in demo_grades} == set(graded_chapters())
    assert sorted(p.name for p in DEMO.iterdir()) == ["Ada Lovelace", "Ben Bitdiddle", "Chloé Dubois.zip"]
    for student in GRADED:
        mine = [r["exercise"] for r in demo_grades if r["student"] == student]
        assert mine == [e.id for s in graded_chapters() for e in registry.load().of(chapters.key(s))]


def test_solutions_get_full_marks_under_grading(demo_grades):
    wrong = {r["exercise"]: (r["status"], r["message"]) for r in demo_grades
             if r["student"] == "Ada Lovelace" and (r["status"] != "passed" or r["score"] != r["max_score"])}
    assert not wrong


def test_untouched_notebooks_are_not_implemented_under_grading(demo_grades):
    wrong = {r["exercise"]: (r["status"], r["message"]) for r in demo_grades
             if r["student"] == "Ben Bitdiddle" and (r["status"] != "not_implemented" or float(r["score"]) != 0)}
    assert not wrong
