"""`make grade` on the demo cohort's solved student, every chapter: the solutions get full marks under grading
(kernel, sandbox, bridge, scenarios, hidden checks). The untouched notebooks' stubs end as not_implemented under
every public and hidden check of every chapter, checked here in-process: their grading path (a stub's
NotImplementedError raised in the kernel) is the same for every chapter and runs end to end for chapter 01 in
tests/test_grading.py (the killed run grades the demo's untouched student), tests/test_gradescope.py and
tests/test_browser.py, and their Run All in the student's kernel in tests/test_release.py. The half-solved zip
is graded in tests/test_grading.py, cut to chapter 01.

The solved student is graded with workers started as on a machine whose torch is built with CUDA: from a
forkserver (every other grading test forks them, as on a CPU build). A forked worker's CUDA calls fail, which
on an H200 graded the solution's Adam accumulation step as an error."""
from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

import pytest

from grader import chapters, registry, runner
from grader.results import NOT_IMPLEMENTED
from tests.test_lab import solution_namespace

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "submissions"
from tests.conftest import DEMO_GRADED as GRADED  # the demo_out fixture (conftest) grades them


@pytest.fixture(scope="module")
def demo_grades(demo_out) -> list[dict]:
    with open(demo_out / "grades.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_make_grade_writes_the_class_report(demo_out, demo_grades):
    """The class report from a real run (every chapter, kernels, sandbox): class.json's figures agree with
    grades.csv (its own tests check every figure on a generated class), and class.html is one page with a
    histogram and a status chart per chapter."""
    figures = json.loads((demo_out / "class.json").read_text(encoding="utf-8"))
    assert [c["chapter"] for c in figures["chapters"]] == graded_chapters()
    assert [x["exercise"] for x in figures["exercises"]] == list(dict.fromkeys(r["exercise"] for r in demo_grades))
    for x in figures["exercises"]:
        mine = [r for r in demo_grades if r["exercise"] == x["exercise"]]
        statuses = {s: sum(r["status"] == s for r in mine) for s in {r["status"] for r in mine}}
        assert x["students"] == len(mine) and x["statuses"] == statuses
        assert x["passed_share"] == statuses.get("passed", 0) / len(mine)
    for c in figures["chapters"]:
        scores = sorted(round(sum(float(r["score"]) for r in demo_grades
                                  if r["chapter"] == c["chapter"] and r["student"] == s), 2) for s in GRADED)
        assert c["submitted"] == len(GRADED) and sum(c["histogram"]["counts"]) == len(GRADED)
        assert c["scores"]["median"] == pytest.approx(statistics.median(scores))
    assert figures["run"]["notebooks_graded"] == len(GRADED) * len(graded_chapters())
    page = (demo_out / "class.html").read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == 2 * len(graded_chapters())


def test_workers_fork_from_a_forkserver_where_torch_has_cuda(monkeypatch):
    """The fixture above grades as a CUDA build would; this is where that choice is made (a CUDA build is
    simulated: this machine's torch has none). Forking them there is what errored on the H200."""
    import torch
    from grader.autograde import cohort

    linux = sys.platform == "linux"
    assert cohort.start_method() == ("spawn" if not linux else "forkserver" if torch.backends.cuda.is_built()
                                     else "fork")
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    assert cohort.start_method() == ("forkserver" if linux else "spawn")


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


@pytest.mark.parametrize("stem", graded_chapters())
def test_untouched_notebooks_are_not_implemented_under_every_check(stem, tmp_path, monkeypatch):
    """Ben's notebook, the student release's as handed out: each stub ends not_implemented, scoring 0, under every
    public and hidden check (a check that crashed or failed on a stub would say so here)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace = solution_namespace(DEMO / "Ben Bitdiddle" / f"{stem}.ipynb", tmp_path)
    results = runner.run_namespace(namespace, chapter=chapters.key(stem), hidden=True)
    assert [r.exercise for r in results] == [e.id for e in registry.load().of(chapters.key(stem))]
    wrong = {r.exercise: (r.status, [f"{c.name}: {c.status}" for c in r.checks if c.status != NOT_IMPLEMENTED])
             for r in results if r.status != NOT_IMPLEMENTED or r.score != 0 or not r.checks
             or any(c.status != NOT_IMPLEMENTED for c in r.checks)}
    assert not wrong
