"""Structured results of running checks: what grading and the notebook display are built on."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum


class Status(StrEnum):
    """How a check or an exercise ended: the identifier grades.csv keeps, the words a student reads, the tone
    it is shown in, whether its message sums up the checks, and whether it scores 0 whatever the checks say.

    A StrEnum, so a status read back from JSON as a plain string still compares equal to its member.
    """

    words: str
    tone: str
    from_checks: bool
    scores_zero: bool

    def __new__(cls, value: str, words: str, tone: str, from_checks: bool, scores_zero: bool) -> "Status":
        member = str.__new__(cls, value)
        member._value_ = value
        member.words, member.tone, member.from_checks, member.scores_zero = words, tone, from_checks, scores_zero
        return member

    PASSED = "passed", "Passed", "ok", True, False
    FAILED = "failed", "Failed", "bad", True, False
    ERROR = "error", "Your code raised an error", "bad", True, False
    TIMEOUT = "timeout", "Timed out", "warn", True, False
    MEMORY = "memory", "Out of memory", "warn", True, False              # grading only: a kernel's limit
    CRASHED = "crashed", "The kernel crashed", "bad", True, False        # grading only: the kernel died
    NOT_IMPLEMENTED = "not_implemented", "Not implemented yet", "muted", True, False
    MISSING = "missing", "Missing", "muted", False, True                 # decided about a whole notebook
    INVALID = "invalid", "Notebook unreadable", "bad", False, True
    TAMPERED = "tampered", "Tampering detected", "bad", False, True

    @classmethod
    def of(cls, value: str) -> "Status | None":
        """The member for an identifier read from a record, or None for one this grader does not know."""
        try:
            return cls(value)
        except ValueError:
            return None


PASSED, FAILED, ERROR, TIMEOUT, NOT_IMPLEMENTED, MISSING = (
    Status.PASSED, Status.FAILED, Status.ERROR, Status.TIMEOUT, Status.NOT_IMPLEMENTED, Status.MISSING)
MEMORY, CRASHED, INVALID, TAMPERED = Status.MEMORY, Status.CRASHED, Status.INVALID, Status.TAMPERED


@dataclass
class CheckResult:
    name: str
    description: str
    status: str
    message: str = ""
    hidden: bool = False
    weight: float = 1.0
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def shown_message(self) -> str:
        """What a student may read: a hidden check's message never leaves the grader."""
        if not self.hidden or self.passed:
            return self.message
        return {NOT_IMPLEMENTED: "not implemented yet", TIMEOUT: "took too long",
                MEMORY: "ran out of memory", CRASHED: "the kernel died"}.get(self.status, "a hidden check failed")


@dataclass
class ExerciseResult:
    exercise: str
    points: float
    checks: list[CheckResult] = field(default_factory=list)
    status: str = ""
    message: str = ""

    def __post_init__(self) -> None:
        if not self.status:
            self.status, self.message = summarize(self.checks)

    @property
    def score(self) -> float:
        """Points times the weighted fraction of checks passed, rounded to 0.01."""
        total = sum(c.weight for c in self.checks)
        if total == 0:
            return 0.0
        return round(self.points * sum(c.weight for c in self.checks if c.passed) / total, 2)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["score"] = self.score
        return d


def summarize(checks: list[CheckResult]) -> tuple[str, str]:
    """The exercise's status and a one-line message from its checks' statuses."""
    if not checks:
        return ERROR, "no checks ran"
    statuses = [c.status for c in checks]
    n, n_pass = len(checks), statuses.count(PASSED)
    if n_pass == n:
        return PASSED, f"all {n} checks passed"
    if statuses.count(NOT_IMPLEMENTED) == n:
        return NOT_IMPLEMENTED, "not implemented yet"
    first = next(c for c in checks if not c.passed)
    for status in (TIMEOUT, CRASHED, MEMORY, ERROR, FAILED, NOT_IMPLEMENTED):
        if status in statuses:
            break
    what = first.shown_message()
    return (FAILED if status == NOT_IMPLEMENTED else status,
            f"{n_pass}/{n} checks passed; first problem: {first.description}: {what}")
