"""The answer tests' one way to say what catches a wrong answer.

Each wrong answer names the check that must fail it (public or hidden) and, where it matters, words of that
check's message: deleting or weakening the check turns its answers red. A wrong answer's own code may raise
(`status=ERROR`, the message then points into the answer); a check that crashes on it is never "caught".
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from grader import registry
from grader.results import ERROR, FAILED, PASSED, ExerciseResult, Status
from grader.runner import run_exercise

MAX_MESSAGE = 600  # a failure's message is one readable paragraph, never a traceback
_FRAME = re.compile(r"\(in .+, line \d+")  # how an error's message points into the code that raised it


@dataclass(frozen=True)
class Wrong:
    """A plausible wrong answer (or a shortcut) to `exercise` and the check that must fail it."""

    exercise: str            # the exercise's name within its chapter, e.g. "element_offset"
    answer: Any              # the student's object, or a tuple of them in the order of the exercise's needs
    check: str               # the check that must fail it
    says: str = ""           # words that check's message must hold
    status: Status = FAILED  # ERROR where the answer's own code raises

    @property
    def objs(self) -> tuple[Any, ...]:
        return self.answer if isinstance(self.answer, tuple) else (self.answer,)


def ids(wrongs: Iterable[Wrong]) -> list[str]:
    """Test ids that say which exercise and which check, numbered only where two share both."""
    seen: dict[str, int] = {}
    out = []
    for w in wrongs:
        key = f"{w.exercise}-{w.check}"
        seen[key] = seen.get(key, 0) + 1
        out.append(key if seen[key] == 1 else f"{key}-{seen[key]}")
    return out


def failures(result: ExerciseResult) -> dict[str, str]:
    """Each check that did not pass, with its status and message: what an assertion shows."""
    return {c.name: f"[{c.status}] {c.message}" for c in result.checks if not c.passed}


def assert_caught(chapter: str, wrong: Wrong, *, public_only: bool = False) -> ExerciseResult:
    """`wrong` scores less than full marks, its named check fails it with a readable message (a public check
    is one a student running the notebook sees), and no check, public or hidden, crashes on it."""
    ex = registry.load(hidden=True).get(f"{chapter}.{wrong.exercise}")
    named = {c.name: c for c in ex.checks}
    assert wrong.check in named, f"{ex.id} has no check {wrong.check!r}; its checks: {sorted(named)}"
    assert not (public_only and named[wrong.check].hidden), f"{wrong.check} is hidden; this answer must fail a public check"
    result = run_exercise(ex.id, *wrong.objs, hidden=True)
    got = {c.name: c for c in result.checks}
    assert result.status != PASSED and result.score < result.points, (result.status, result.score)
    check = got[wrong.check]
    assert check.status == wrong.status, f"{wrong.check} ended {check.status}, expected {wrong.status}: {failures(result)}"
    assert wrong.says in check.message, f"{wrong.check}'s message lacks {wrong.says!r}: {check.message}"
    for c in result.checks:
        if not c.passed:
            assert c.message and "Traceback" not in c.message and len(c.message) < MAX_MESSAGE, (c.name, c.message)
        if c.status == ERROR:  # any check: an error must come from the answer, never from the check itself
            assert _from_the_answer(c.message, wrong.objs), f"{c.name} crashed on this answer: {c.message}"
    return result


def _from_the_answer(message: str, objs: tuple[Any, ...]) -> bool:
    """Whether an error's message points into the answer's code, or names the answer (a call with the wrong
    arguments, an object torch refuses to use): not an error of the check's own making."""
    names = {getattr(o, "__name__", "") for o in objs} | {type(o).__name__ for o in objs if not callable(o)}
    return bool(_FRAME.search(message)) or any(n and n != "<lambda>" and n in message for n in names)


def assert_passes(chapter: str, exercise: str, *objs: Any, hidden: bool = True) -> ExerciseResult:
    """A correct answer, however written, passes every public and (unless `hidden` is False) hidden check."""
    result = run_exercise(f"{chapter}.{exercise}", *objs, hidden=hidden)
    assert result.status == PASSED, failures(result)
    return result


def passes_without_forbid(monkeypatch, chapter: str, exercise: str, *objs: Any, hidden: bool = True,
                          dropping: Callable[[str], bool] = lambda name: True) -> ExerciseResult:
    """The shortcut really does the whole job: with the exercise's forbidden calls allowed (those `dropping`
    selects), it passes every check (the public ones only where `hidden` is False: a shortcut that cannot
    meet a hidden check's sizes still does the public job), so only the forbid list stops it."""
    ex = registry.load(hidden=True).get(f"{chapter}.{exercise}")
    monkeypatch.setattr(ex, "forbid", tuple(name for name in ex.forbid if not dropping(name)))
    return assert_passes(chapter, exercise, *objs, hidden=hidden)
