"""Late work: a due date, a penalty per day late with a cap, and when each student submitted.

Off unless `--late-penalty` is given. A chapter's score is multiplied by 1 - min(cap, days x rate), where
days late are counted up (a minute late is one day). When a student submitted comes from a times file
(`--submitted-at`, rows `student,time` or `student,chapter,time`, times in ISO 8601 with a UTC offset),
which needs `--due`; else from Canvas's late marker, which says "late" but not by how much, so it counts
as one day. A time in the file wins over Canvas's marker (a time before the due date waives it).
"""
from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from grader.autograde.instructor_csv import reading
from grader.chapters import NOTEBOOKS

DAY_SECONDS = 86_400


@dataclass(frozen=True)
class LatePolicy:
    rate: float                 # fraction of the score taken per day late, e.g. 0.10
    cap: float = 1.0            # the most that can be taken, e.g. 0.5
    due: datetime | None = None  # needed to count days from submission times


@dataclass(frozen=True)
class Lateness:
    """How late one chapter was, and what that costs."""
    days: int
    fraction: float             # of the chapter's score taken away
    from_canvas: bool           # counted from Canvas's marker (no time known), not from a time

    def short(self) -> str:
        """'2 days late, -20%': gradebook.csv's late cell."""
        return f"{self._days()} late, -{percent(self.fraction)}"

    def words(self) -> str:
        """'submitted 2 days late: −20%', as the student reads it."""
        how = " (Canvas marked it late; counted as 1 day)" if self.from_canvas else ""
        return f"submitted {self._days()} late{how}: −{percent(self.fraction)}"

    def _days(self) -> str:
        return "1 day" if self.days == 1 else f"{self.days} days"

    def apply(self, score: float) -> float:
        return round(score * (1 - self.fraction), 2) + 0.0


def percent(fraction: float) -> str:
    """0.1 -> '10%'."""
    return format(round(fraction * 100, 2), "g") + "%"


def parse_rate(text: str) -> float:
    """`10%/day` (or `10%`) -> 0.10; ValueError with a one-line reason otherwise."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*(?:/\s*day)?\s*", text)
    if not m or not 0 < float(m[1]) <= 100:
        raise ValueError(f"not a late penalty: {text!r} (try 10%/day)")
    return float(m[1]) / 100


def parse_cap(text: str) -> float:
    """`50%` -> 0.5: the most a late penalty may take."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*", text)
    if not m or not 0 <= float(m[1]) <= 100:
        raise ValueError(f"not a late cap: {text!r} (try 50%)")
    return float(m[1]) / 100


def parse_time(text: str) -> datetime:
    """An ISO 8601 time with a UTC offset (`2026-12-01T23:59+01:00`, `...Z`): a time without one is ambiguous."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"not a time: {text!r} (try 2026-12-01T23:59+01:00)") from None
    if when.tzinfo is None:
        raise ValueError(f"time {text!r} has no UTC offset (try {text.strip()}+01:00 or {text.strip()}Z)")
    return when


def days_late(submitted: datetime, due: datetime) -> int:
    """Whole days after `due`, counted up: a minute late is one day, on time is 0."""
    seconds = (submitted - due).total_seconds()
    return math.ceil(seconds / DAY_SECONDS) if seconds > 0 else 0


def lateness(policy: LatePolicy, submitted: datetime | None, canvas_late: bool) -> Lateness | None:
    """What `policy` makes of one chapter: from its submission time when known, else from Canvas's marker."""
    if submitted is not None and policy.due is not None:
        days, from_canvas = days_late(submitted, policy.due), False
    elif canvas_late:
        days, from_canvas = 1, True
    else:
        return None
    if days == 0:
        return None
    return Lateness(days, min(policy.cap, days * policy.rate), from_canvas)


def read_times(path: Path, resolve) -> dict[tuple[str, str | None], datetime]:
    """Submission times by (student, chapter or None for every chapter) from a CSV with columns `student,time`
    and optionally `chapter`. `resolve(name)` gives the student a name or Canvas id stands for, or None.
    Raises ValueError naming the file and row of the first bad row."""
    times: dict[tuple[str, str | None], datetime] = {}
    with reading(path) as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        if "student" not in columns or "time" not in columns or set(columns) - {"student", "chapter", "time"}:
            raise ValueError(f"{path}: the header must be student,time or student,chapter,time, "
                             f"not {','.join(columns) or 'empty'}")
        for row in reader:
            where = f"{path} row {reader.line_num}"
            if None in row or any(v is None for v in row.values()):
                raise ValueError(f"{where}: expected {len(columns)} fields")
            if not any(v.strip() for v in row.values()):
                continue
            student = resolve(row["student"].strip())
            if student is None:
                raise ValueError(f"{where}: unknown student {row['student'].strip()!r}")
            chapter = (row.get("chapter") or "").strip() or None
            if chapter is not None and chapter not in NOTEBOOKS:
                raise ValueError(f"{where}: unknown chapter {chapter!r}")
            try:
                when = parse_time(row["time"])
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
            if (student, chapter) in times:
                raise ValueError(f"{where}: a second time for {student}" + (f", {chapter}" if chapter else ""))
            times[student, chapter] = when
    return times
