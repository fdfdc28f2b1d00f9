"""`make grade` on the demo cohort, every chapter: the solutions get full marks under grading (kernel,
bridge, scenarios, hidden checks), the untouched student notebooks get not_implemented for every
exercise, and a half-solved zip gets exactly its solved half."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from grader import chapters, registry

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "submissions"


@pytest.fixture(scope="module")
def demo_grades(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("demo-grades")
    run = subprocess.run([sys.executable, "-m", "grader", "grade", str(DEMO), "--out", str(out), "--workers", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def graded_chapters() -> list[str]:
    return [s for s in chapters.NOTEBOOKS if (ROOT / "solutions" / f"{s}.ipynb").exists()]


def test_every_chapter_is_in_the_demo(demo_grades):
    assert {r["chapter"] for r in demo_grades} == set(graded_chapters())
    for student in ("Ada Lovelace", "Ben Bitdiddle", "Chloé Dubois"):
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


def test_half_solved_gets_its_solved_half(demo_grades):
    statuses = {r["status"] for r in demo_grades if r["student"] == "Chloé Dubois"}
    assert statuses <= {"passed", "not_implemented"} and statuses == {"passed", "not_implemented"}
