"""The class report's figures (OUT/class.json): where a class struggles, computed from the grading records.

Every figure is a pure function of the records and the instructor's adjustments (overrides count, as in
grades.csv; late penalties do not change a score here, they are counted), so a re-run over the same records
gives the same bytes. What each figure counts is written into class.json beside it (`definitions`).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from grader.autograde.failures import common_failures
from grader.autograde.records import ExerciseGrade, NotebookRecord
from grader.chapters import NOTEBOOKS, title
from grader.results import Status

if TYPE_CHECKING:
    from grader.autograde.adjust import Adjustments

NOT_ATTEMPTED = (Status.NOT_IMPLEMENTED, Status.MISSING, Status.INVALID)
NOT_HANDED_IN = (Status.MISSING, Status.INVALID)
PROBLEMS = (Status.FAILED, Status.ERROR, Status.TIMEOUT, Status.MEMORY, Status.CRASHED, Status.TAMPERED)
BINS = 10
# A check is flagged as possibly unfair when at least this many attempting students, and this share of them,
# fail it while passing every other check of the exercise.
UNFAIR_MIN_STUDENTS = 3
UNFAIR_MIN_SHARE = 0.1

DEFINITIONS = {
    "score": "an exercise's score as in grades.csv (after manual overrides); a chapter's is the sum of its "
             "exercises'; late penalties are not taken off here",
    "submitted": "students with at least one exercise of the chapter neither missing nor invalid",
    "chapter scores": "median, quartiles (linear interpolation) and histogram over the students who submitted; "
                      f"{BINS} bins of equal width from 0 to the chapter's points, the last one including full marks",
    "late": "students whose chapter the late policy counts as late",
    "not attempted": "status " + ", ".join(s.value for s in NOT_ATTEMPTED),
    "attempting": "students whose exercise is not " + ", ".join(s.value for s in NOT_ATTEMPTED)
                  + " and that have the check's result",
    "failed share": "of the attempting students, those whose check did not pass",
    "failure groups": "messages grouped after masking numbers, quoted names and pointers into the student's "
                      "code; the five largest groups, each with one message as it was",
    "may be unfair": f"a check that at least {UNFAIR_MIN_STUDENTS} attempting students, and at least "
                     f"{UNFAIR_MIN_SHARE:.0%} of them, fail while passing every other check of the exercise",
}


def _r(x: float, digits: int = 2) -> float:
    return round(x, digits) + 0.0


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between closest ranks (numpy's default, statistics' inclusive)."""
    if not sorted_values:
        return 0.0
    pos = q * (len(sorted_values) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def histogram(scores: Iterable[float], max_score: float, bins: int = BINS) -> dict:
    """Counts in `bins` equal bins over [0, max_score]; full marks go in the last bin."""
    counts = [0] * bins
    for s in scores:
        i = int(s * bins / max_score + 1e-9) if max_score > 0 else 0
        counts[min(max(i, 0), bins - 1)] += 1
    return {"edges": [_r(max_score * i / bins) for i in range(bins + 1)], "counts": counts}


def _score(g: ExerciseGrade, adjust: Adjustments | None) -> float:
    return g.score if adjust is None else adjust.score(g)


def _chapter_figures(chapter: str, grades: list[ExerciseGrade], students: Sequence[str],
                     adjust: Adjustments | None) -> dict:
    by_student: dict[str, list[ExerciseGrade]] = {}
    for g in grades:
        by_student.setdefault(g.student, []).append(g)
    max_score = max((sum(g.max_score for g in gs) for gs in by_student.values()), default=0.0)
    submitted = sorted(s for s, gs in by_student.items() if any(g.status not in NOT_HANDED_IN for g in gs))
    scores = sorted(_r(sum(_score(g, adjust) for g in by_student[s])) for s in submitted)
    late = sum(1 for s in students if adjust is not None and adjust.lateness(s, chapter) is not None)
    return {
        "chapter": chapter, "title": title(chapter), "max_score": _r(max_score), "students": len(students),
        "submitted": len(submitted), "late": late,
        "scores": {"mean": _r(sum(scores) / len(scores)) if scores else 0.0,
                   "min": scores[0] if scores else 0.0, "q1": _r(quantile(scores, 0.25)),
                   "median": _r(quantile(scores, 0.5)), "q3": _r(quantile(scores, 0.75)),
                   "max": scores[-1] if scores else 0.0},
        "histogram": histogram(scores, max_score),
    }


def _exercise_figures(grades: list[ExerciseGrade], adjust: Adjustments | None) -> dict:
    n = len(grades)
    statuses = Counter(g.status for g in grades)
    return {
        "exercise": grades[0].exercise, "chapter": grades[0].chapter, "max_score": _r(grades[0].max_score),
        "students": n,
        "mean_score": _r(sum(_score(g, adjust) for g in grades) / n),
        "passed_share": _r(statuses[Status.PASSED] / n, 4),
        "not_attempted_share": _r(sum(statuses[s] for s in NOT_ATTEMPTED) / n, 4),
        "statuses": {s.value: statuses[s.value] for s in Status if statuses[s.value]}
                    | {s: c for s, c in sorted(statuses.items()) if Status.of(s) is None},
    }


def _check_figures(grades: list[ExerciseGrade]) -> list[dict]:
    """Per check of one exercise: attempting, failed, the common failures, and failed-while-passing-the-rest."""
    attempted = [g for g in grades if g.status not in NOT_ATTEMPTED and g.checks]
    names: list[str] = []
    described: dict[str, tuple[str, bool]] = {}
    for g in attempted:
        for c in g.checks:
            if c.name not in described:
                names.append(c.name)
                described[c.name] = (c.description, c.hidden)
    figures = []
    for name in names:
        results = [(g, next((c for c in g.checks if c.name == name), None)) for g in attempted]
        results = [(g, c) for g, c in results if c is not None]
        failing = [(g, c) for g, c in results if c.status != Status.PASSED]
        alone = sum(1 for g, c in failing
                    if all(o.status == Status.PASSED for o in g.checks if o.name != name) and len(g.checks) > 1)
        description, hidden = described[name]
        figures.append({
            "check": name, "description": description, "hidden": hidden,
            "attempting": len(results), "failed": len(failing),
            "failed_share": _r(len(failing) / len(results), 4) if results else 0.0,
            "failed_alone": alone,
            "failures": [f.to_dict() for f in common_failures(c.message or c.status for _, c in failing)],
        })
    return figures


def may_be_unfair(check: dict) -> bool:
    """Failed by many who pass every other check of the exercise: its wording (or its inputs) may be at fault."""
    return (check["failed_alone"] >= UNFAIR_MIN_STUDENTS
            and check["failed_alone"] >= UNFAIR_MIN_SHARE * check["attempting"])


def _run_figures(records: list[NotebookRecord], notes: Sequence[str], sandbox: str) -> dict:
    graded = [r for r in records if r.source]
    when = sorted(r.graded_at for r in graded if r.graded_at)
    isolation = Counter(r.sandbox or "not recorded" for r in graded)
    return {
        "notebooks_graded": len(graded),
        "kernel_seconds": _r(sum(r.seconds for r in graded), 1),
        "graded_from": when[0] if when else "", "graded_to": when[-1] if when else "",
        "sandbox": sandbox,
        "isolation": dict(sorted(isolation.items())),
        "demonstrations_skipped": sum(r.cells.startswith("skipped") for r in graded),
        "graded_again_with_every_cell": sorted(f"{r.student}/{r.chapter}: {r.cells.split(': ', 1)[-1]}"
                                               for r in graded if r.cells.startswith("graded again")),
        "notes": list(notes),
    }


def class_figures(records: Iterable[NotebookRecord], students: Sequence[str], chapters: Sequence[str],
                  adjust: Adjustments | None = None, notes: Sequence[str] = (), sandbox: str = "") -> dict:
    """Everything class.json holds: per chapter, exercise and check, the checks that may be unfair, the run."""
    listed = set(students)
    records = sorted((r for r in records if r.student in listed and r.chapter in chapters),
                     key=lambda r: (r.student.casefold(), r.student, NOTEBOOKS.index(r.chapter)
                                    if r.chapter in NOTEBOOKS else len(NOTEBOOKS), r.chapter))
    order = sorted(chapters, key=lambda c: NOTEBOOKS.index(c) if c in NOTEBOOKS else len(NOTEBOOKS))
    by_chapter: dict[str, list[ExerciseGrade]] = {c: [] for c in order}
    by_exercise: dict[str, list[ExerciseGrade]] = {}
    for r in records:
        for g in r.grades:
            by_chapter[r.chapter].append(g)
    for c in order:  # exercises in the chapter's order, as each record lists them
        for g in by_chapter[c]:
            by_exercise.setdefault(g.exercise, []).append(g)
    exercises, checks = [], []
    for exercise, grades in by_exercise.items():
        exercises.append(_exercise_figures(grades, adjust))
        for figure in _check_figures(grades):
            checks.append({"exercise": exercise, "chapter": grades[0].chapter, **figure})
    unfair = [{k: c[k] for k in ("exercise", "check", "description", "hidden", "failed_alone", "failed", "attempting")}
              for c in checks if may_be_unfair(c)]
    unfair.sort(key=lambda c: (-c["failed_alone"], c["exercise"], c["check"]))
    return {
        "students": len(listed),
        "chapters": [_chapter_figures(c, by_chapter[c], sorted(listed), adjust) for c in order],
        "exercises": exercises,
        "checks": checks,
        "may_be_unfair": unfair,
        "run": _run_figures(records, notes, sandbox),
        "definitions": DEFINITIONS,
    }
