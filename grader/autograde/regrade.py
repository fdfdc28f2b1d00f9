"""Regrading some students or exercises after a fix (`grade --students NAME,... --exercises ID,...`).

An instructor who changed a check, or a student's notebook, regrades just what the change touches: the
selected students' notebooks (for --exercises, the notebooks of the chapters those exercises are in) are run
again whatever OUT/.state holds, and every other record is kept exactly as it is there, even when the grader
changed since (a plain run would regrade it). With --exercises, only the selected exercises' grades of a
regraded notebook are replaced; its other exercises keep their earlier grades.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, replace

from grader.autograde.records import NotebookRecord
from grader.chapters import key
from grader.registry import Registry


@dataclass(frozen=True)
class Selection:
    """What to regrade: these students (empty: all) and these exercise ids (empty: all)."""
    students: frozenset[str] = frozenset()
    exercises: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, students: str | None, exercises: str | None) -> "Selection | None":
        """From the two comma-separated options; None when neither was given (a plain run)."""
        if students is None and exercises is None:
            return None
        split = lambda text: frozenset(p.strip() for p in (text or "").split(",") if p.strip())  # noqa: E731
        selection = cls(split(students), split(exercises))
        if not selection.students and not selection.exercises:
            raise ValueError("--students and --exercises need at least one name")
        return selection

    def check(self, students: Sequence[str], chapters: Sequence[str], course: Registry) -> None:
        """ValueError naming each student or exercise that is not in this run (before any output is written)."""
        unknown = sorted(self.students - set(students))
        if unknown:
            shown = ", ".join(sorted(students)[:8]) + (", ..." if len(students) > 8 else "")
            raise ValueError(f"--students: no submission from {', '.join(map(repr, unknown))} (students: {shown})")
        ids = {e.id for c in chapters for e in course.of(key(c))}
        unknown = sorted(self.exercises - ids)
        if unknown:
            raise ValueError(f"--exercises: {', '.join(map(repr, unknown))} is not an exercise of the chapters graded "
                             f"({', '.join(chapters)}); ids look like tensors.same_storage")

    def chosen(self, student: str, chapter: str, course: Registry) -> bool:
        """Whether this student's notebook for this chapter is graded again."""
        if self.students and student not in self.students:
            return False
        return not self.exercises or any(e.id in self.exercises for e in course.of(key(chapter)))

    def keep(self, student: str, chapter: str, old: NotebookRecord | None, course: Registry,
             previous: dict[tuple[str, str], NotebookRecord | None]) -> NotebookRecord | None:
        """The record to keep as it is, or None to grade the notebook: selected (its old record noted in
        `previous` for `merge`), or outside the selection with no record to keep (a plain run would grade it)."""
        if self.chosen(student, chapter, course):
            previous[student, chapter] = old
            return None
        return old

    def merge(self, old: NotebookRecord | None, new: NotebookRecord) -> NotebookRecord:
        """The record to keep after regrading: with --exercises, the old one with just those grades replaced
        (and its fingerprint, so that a plain run still knows the rest is stale); else the new one."""
        if not self.exercises or old is None:
            return new
        fresh = {g.exercise: g for g in new.grades if g.exercise in self.exercises}
        return replace(old, grades=[fresh.get(g.exercise, g) for g in old.grades], graded_at=new.graded_at)

    def describe(self) -> str:
        """One line for the run's notes."""
        parts = []
        if self.students:
            parts.append("students " + ", ".join(sorted(self.students)))
        if self.exercises:
            parts.append("exercises " + ", ".join(sorted(self.exercises)))
        return "regraded only " + "; ".join(parts) + "; every other record kept from the earlier run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--students` and `--exercises`, in a group of their own."""
    group = parser.add_argument_group("Regrading after a fix (every other record is kept as it is in OUT/.state)")
    group.add_argument("--students", metavar="NAME[,NAME]",
                       help="regrade only these students (names as in grades.csv)")
    group.add_argument("--exercises", metavar="ID[,ID]",
                       help="regrade only these exercises, e.g. tensors.same_storage (their chapters' notebooks "
                            "run again; the other exercises keep their grades)")


def from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Selection | None:
    """The selection the options ask for; an empty one exits through parser.error (status 2)."""
    try:
        return Selection.parse(args.students, args.exercises)
    except ValueError as e:
        parser.error(str(e))
