"""A generated class of 60 students as grading records (no kernel runs): solved, blank, half-solved, hazardous,
and common mistakes, over chapters 01 and 02 with their real exercises and checks.

Built to exercise every figure of the class report: scores spread over the histogram, every status, failure
messages that differ only in their numbers and names (one mistake, many inputs), a check that many students
fail while passing every other check of its exercise (`UNFAIR`), manual overrides and late chapters.
"""
from __future__ import annotations

import random

from grader import chapters, registry
from grader.autograde.adjust import Adjustments
from grader.autograde.late import Lateness
from grader.autograde.overrides import Override
from grader.autograde.records import CheckRecord, ExerciseGrade, NotebookRecord
from grader.results import ExerciseResult, CheckResult

CHAPTERS = ["01_tensors", "02_dtypes"]
KINDS = ["solved", "blank", "half", "hazard", "mistakes"]
UNFAIR = ("tensors.element_offset", "negative_index")  # the check "mistakes" students fail alone
HAZARDS = ["timeout", "memory", "crashed", "tampered", "error", "missing", "invalid"]
EVIL = "<img src=x onerror=alert(1)>"


def _record(student: str, chapter: str, grades: list[ExerciseGrade], source: str = "") -> NotebookRecord:
    return NotebookRecord(student, chapter, source or f"{chapter}.ipynb", "f", 12.5, grades, "2026-11-22 11:20 UTC",
                          "sandbox: bubblewrap (test)")


def _grade(student: str, chapter: str, ex, statuses: dict[str, tuple[str, str]]) -> ExerciseGrade:
    """The grade an exercise gets when its checks end as `statuses` says (check name -> status, message)."""
    checks = [CheckResult(c.name, c.description, *statuses.get(c.name, ("passed", "")), c.hidden, c.weight)
              for c in ex.checks]
    result = ExerciseResult(ex.id, ex.points, checks)
    return ExerciseGrade(student, chapter, ex.id, result.score, ex.points, result.status, result.message,
                         [CheckRecord(c.name, c.description, c.status, c.message, c.hidden) for c in checks])


def _whole(student: str, chapter: str, exercises, status: str, message: str) -> list[ExerciseGrade]:
    return [ExerciseGrade(student, chapter, ex.id, 0.0, ex.points, status, message) for ex in exercises]


def generate(n: int = 60, seed: int = 7) -> tuple[list[NotebookRecord], list[str], Adjustments]:
    """The records, the students (one of them with no notebook at all) and the instructor's adjustments."""
    rng = random.Random(seed)
    course = registry.load(hidden=True)
    students = [f"student {i:02d}" for i in range(n - 2)] + [EVIL, "=cmd|' /C calc'!A0"]
    records = []
    for i, student in enumerate(students):
        kind = KINDS[i % len(KINDS)]
        for chapter in CHAPTERS:
            exercises = course.of(chapters.key(chapter))
            if kind == "hazard" and (hazard := HAZARDS[(i // len(KINDS)) % len(HAZARDS)]) in ("missing", "invalid"):
                message = "no notebook for " + chapter if hazard == "missing" else "not valid JSON (line 1)"
                records.append(_record(student, chapter, _whole(student, chapter, exercises, hazard, message),
                                       "" if hazard == "missing" else f"{chapter}.ipynb"))
                continue
            grades = []
            for j, ex in enumerate(exercises):
                names = [c.name for c in ex.checks]
                if kind == "solved" or (kind == "half" and j < len(exercises) // 2):
                    statuses = {}
                elif kind in ("blank", "half"):
                    statuses = {c: ("not_implemented", "not implemented yet") for c in names}
                elif kind == "hazard":
                    first = rng.randrange(max(1, len(names) - 1))  # the last check is hit too: never one alone
                    message = {"timeout": "stopped after 20 s (an infinite loop, or far too slow)",
                               "memory": "ran out of memory (the limit is 4 GiB)",
                               "crashed": "the kernel died (killed by signal 9)",
                               "error": f"IndexError: tuple index out of range (in helper, line {rng.randrange(2, 30)}: "
                                        f"return idx[{rng.randrange(3, 9)}]); called with (tuple ({rng.randrange(9)}, 1))"
                                        if i % 2 else f"ValueError: {EVIL}",
                               "tampered": ""}[hazard]
                    statuses = {c: ("failed", "a hidden check failed") for c in (names[0], names[-1])} \
                        if hazard == "tampered" else \
                        {c: (hazard if k >= first else "passed",
                             message if k == first else f"not run: an earlier check of this exercise ended with {hazard}")
                         for k, c in enumerate(names)}
                else:  # "mistakes": the unfair check alone, or a wrong shape with numbers that vary
                    if (ex.id, UNFAIR[1]) == UNFAIR:
                        statuses = {UNFAIR[1]: ("failed", f"element_offset(x, ({-rng.randrange(1, 4)}, 0)) returned "
                                                          f"{rng.randrange(-20, -1)}; expected {rng.randrange(1, 20)}")}
                    else:
                        a, b = rng.randrange(2, 9), rng.randrange(2, 9)
                        wrong = ("failed", f"{ex.name}(x) has shape ({a}, {b}), expected ({b}, {a})")
                        statuses = {names[0]: wrong, names[-1]: wrong}  # never one check alone
                grade = _grade(student, chapter, ex, statuses)
                if kind == "hazard" and hazard == "tampered":
                    grade = ExerciseGrade(student, chapter, ex.id, 0.0, ex.points, "tampered",
                                          "the notebook replaced torch.equal. Score withheld", grade.checks)
                grades.append(grade)
            records.append(_record(student, chapter, grades))
    adjust = Adjustments(
        overrides={("student 03", "tensors.same_storage"): Override("student 03", "tensors.same_storage", 1.5,
                                                                    "graded by hand", 2)},
        late={("student 00", "01_tensors"): Lateness(2, 0.2, False), ("student 05", "02_dtypes"): Lateness(1, 0.1, True)},
        late_on=True)
    return records, students, adjust
