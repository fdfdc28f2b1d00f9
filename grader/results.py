"""Structured results of running checks: what grading and the notebook display are built on."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Statuses of one check and of an exercise. Memory and crashed come from grading in a separate
# kernel; missing, invalid and tampered are decided about a whole notebook.
PASSED, FAILED, ERROR, TIMEOUT, NOT_IMPLEMENTED, MISSING = (
    "passed", "failed", "error", "timeout", "not_implemented", "missing")
MEMORY, CRASHED, INVALID, TAMPERED = "memory", "crashed", "invalid", "tampered"


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
