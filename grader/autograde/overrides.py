"""Manual overrides: an instructor's score for one student's exercise, with the reason the student reads.

They live in a CSV, `OUT/overrides.csv` unless `--overrides PATH` names another, with the header
`student,exercise,score,reason`, and are applied when the outputs are written, never to the grading
records in OUT/.state: a re-run, or a regrade after the grader changed, applies them again the same way.
A file with any bad row stops the run before anything is written, naming the row.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from grader.autograde.instructor_csv import reading

HEADER = ("student", "exercise", "score", "reason")
FILENAME = "overrides.csv"


@dataclass(frozen=True)
class Override:
    student: str      # as in grades.csv
    exercise: str     # exercise id, e.g. "tensors.views"
    score: float
    reason: str       # shown to the student
    row: int          # line in the file, for messages


def read_overrides(path: Path, resolve: Callable[[str], str | None],
                   points: Mapping[str, float]) -> dict[tuple[str, str], Override]:
    """Overrides by (student, exercise). `resolve(name)` gives the student a name (or Canvas id) stands for, or
    None; `points` holds every exercise graded in this run and its points. ValueError names the first bad row."""
    overrides: dict[tuple[str, str], Override] = {}
    with reading(path) as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != HEADER:
            raise ValueError(f"{path}: the header must be {','.join(HEADER)}, "
                             f"not {','.join(header) if header else 'empty'}")
        for fields in reader:
            where = f"{path} row {reader.line_num}"
            if not any(v.strip() for v in fields):
                continue
            if len(fields) != len(HEADER):
                raise ValueError(f"{where}: expected 4 fields (student,exercise,score,reason), got {len(fields)}")
            name, exercise, text, reason = (v.strip() for v in fields)
            student = resolve(name)
            if student is None:
                raise ValueError(f"{where}: unknown student {name!r} (write the name as in grades.csv, "
                                 "or a Canvas user id)")
            if exercise not in points:
                raise ValueError(f"{where}: unknown exercise {exercise!r} (not graded in this run; "
                                 "write the id as in grades.csv, e.g. tensors.same_storage)")
            try:
                score = float(text)
            except ValueError:
                raise ValueError(f"{where}: score {text!r} is not a number") from None
            if not (math.isfinite(score) and 0 <= score <= points[exercise]):
                raise ValueError(f"{where}: score {text} is outside 0..{points[exercise]:g} for {exercise}")
            if not reason:
                raise ValueError(f"{where}: no reason given (the student is shown it)")
            if (student, exercise) in overrides:
                raise ValueError(f"{where}: {student}, {exercise} is overridden twice "
                                 f"(also row {overrides[student, exercise].row})")
            overrides[student, exercise] = Override(student, exercise, score, reason, reader.line_num)
    return overrides
