"""What grading one notebook produces: the rows of grades.csv and the details behind them.

Records are plain data (they are saved as JSON to resume a run) and hold nothing a student
must not see: a hidden check's message is replaced by its pass/fail summary before it gets here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class CheckRecord:
    name: str
    description: str
    status: str           # a grader.results.Status identifier
    message: str          # for a hidden check only the short pass/fail summary (CheckResult.shown_message)
    hidden: bool
    seconds: float = 0.0  # how long the check took (grading's own record: where a notebook's time goes)


@dataclass
class ExerciseGrade:
    """One row of grades.csv, with the checks behind it for results.json and feedback.html."""
    student: str
    chapter: str          # notebook stem, e.g. "01_tensors"
    exercise: str         # exercise id, e.g. "tensors.same_storage"
    score: float
    max_score: float
    status: str
    message: str          # one line an instructor can act on
    checks: list[CheckRecord] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict) -> "ExerciseGrade":
        d = dict(d)
        d["checks"] = [CheckRecord(**c) for c in d.get("checks", [])]
        return cls(**d)


@dataclass
class NotebookRecord:
    """The result of grading one student's notebook for one chapter (saved to resume a run)."""
    student: str
    chapter: str
    source: str           # the file graded, relative to the student's submission ("" when none was found)
    fingerprint: str      # hash of the notebook bytes and the grader: a re-run reuses a record that matches
    seconds: float        # wall time spent grading this notebook
    grades: list[ExerciseGrade] = field(default_factory=list)  # every exercise of the chapter, in its order
    graded_at: str = ""   # when it was graded, "2026-11-22 11:20 UTC" (kept with the record when a re-run reuses it)
    sandbox: str = ""     # how its kernel was isolated ("sandbox: bubblewrap ...", or "no sandbox: why")
    cells: str = ""       # which cells ran: "skipped 12 unchanged demonstration cells", or why every cell ran again
    phases: dict[str, float] = field(default_factory=dict)  # seconds starting kernels, running cells, running checks

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "NotebookRecord":
        d = dict(d)
        d["grades"] = [ExerciseGrade.from_dict(g) for g in d.get("grades", [])]
        return cls(**d)
