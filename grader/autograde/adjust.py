"""What an instructor's decisions change in the outputs: manual overrides, late penalties, canvas.csv.

The grading records stay exactly as graded; these are applied each time the outputs are written (report.py
asks an `Adjustments` for each exercise's and chapter's score), so a re-run, or a regrade, gives the same
files. Everything is read and checked by `prepare`, before the first output is written: a bad overrides or
times file stops the run with nothing changed.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.registry import Registry
from grader.autograde import late as late_mod
from grader.autograde.canvas import CanvasStudent, Collected
from grader.autograde.late import LatePolicy, Lateness
from grader.autograde.overrides import FILENAME, Override, read_overrides
from grader.autograde.records import ExerciseGrade
from grader.autograde.report import from_spreadsheet
from grader.chapters import key

CANVAS_COLUMNS = ("chapters", "total")
TOTAL_COLUMN = "Notebooks"      # canvas.csv's column in `total` mode unless --canvas-assignment names it


@dataclass
class Options:
    """The instructor's choices from the command line; with the defaults, the outputs are what they always were."""
    canvas: bool | None = None                  # read SUBMISSIONS as Canvas's download; None: when it looks like one
    canvas_columns: str | None = None           # "chapters" or "total"; setting it writes canvas.csv for any input
    canvas_assignments: tuple[str, ...] = ()    # canvas.csv column names: "NAME" (total) or "CHAPTER=NAME"
    overrides: Path | None = None               # None: OUT/overrides.csv when it exists
    late: LatePolicy | None = None
    submitted_at: Path | None = None            # submission times, `student,time` or `student,chapter,time`

    def __post_init__(self) -> None:
        """Times mean nothing without a policy and a due date to count days from."""
        if self.submitted_at is not None and (self.late is None or self.late.due is None):
            raise ValueError("--submitted-at needs --late-penalty and --due: days late are counted from the due date")


@dataclass(frozen=True)
class CanvasExport:
    """How to write canvas.csv."""
    columns: str                                # "chapters" or "total"
    headers: dict[str, str]                     # chapter (or "total") -> column name
    people: dict[str, CanvasStudent]            # student -> Canvas identity (empty for a folder of student folders)


@dataclass
class Adjustments:
    """What report.py asks for each score it writes: overrides by exercise, late penalties by chapter."""
    overrides: dict[tuple[str, str], Override] = field(default_factory=dict)    # by (student, exercise id)
    late: dict[tuple[str, str], Lateness] = field(default_factory=dict)         # by (student, chapter)
    late_on: bool = False                       # a late policy is set: gradebook.csv gets a late column per chapter
    canvas: CanvasExport | None = None

    def override(self, g: ExerciseGrade) -> Override | None:
        return self.overrides.get((g.student, g.exercise))

    def score(self, g: ExerciseGrade) -> float:
        """The exercise's score after any override (before any late penalty, which is per chapter)."""
        o = self.override(g)
        return g.score if o is None else o.score

    def lateness(self, student: str, chapter: str) -> Lateness | None:
        return self.late.get((student, chapter))

    def chapter_score(self, student: str, chapter: str, raw: float) -> float:
        """A chapter's score after its late penalty."""
        lateness = self.lateness(student, chapter)
        return raw if lateness is None else lateness.apply(raw)


def prepare(options: Options, collected: Collected, chapters: list[str], out: Path,
            course: Registry) -> tuple[Adjustments | None, list[str]]:
    """The adjustments for this run and a note on each, or (None, []) when there are none; ValueError with a
    one-line reason for any bad option, file or row."""
    students = [s.student for s in collected.submissions]
    people = collected.canvas or {}
    resolve = _resolver(students, people)
    notes: list[str] = []
    adjust = Adjustments()

    path = options.overrides or (out / FILENAME if (out / FILENAME).is_file() else None)
    if path is not None:
        points = {e.id: e.points for c in chapters for e in course.of(key(c))}
        adjust.overrides = read_overrides(path, resolve, points)
        notes.append(f"applied {len(adjust.overrides)} manual override(s) from {path}")

    if options.late is not None:
        policy = options.late
        times = late_mod.read_times(options.submitted_at, resolve) if options.submitted_at else {}
        for sub in collected.submissions:
            s = sub.student
            for c in chapters:
                if sub.find(c).path is None:
                    continue        # nothing submitted for this chapter: nothing was late
                submitted = times.get((s, c), times.get((s, None)))
                if (lateness := late_mod.lateness(policy, submitted, s in people and people[s].late)) is not None:
                    adjust.late[s, c] = lateness
        adjust.late_on = True
        notes.append(f"late policy {late_mod.percent(policy.rate)} a day, at most {late_mod.percent(policy.cap)}"
                     + (f", due {policy.due.isoformat()}" if policy.due else ", from Canvas's late marker only")
                     + f": {len({s for s, _ in adjust.late})} student(s) late")

    if collected.canvas is not None or options.canvas_columns is not None:
        columns = options.canvas_columns or "chapters"
        adjust.canvas = CanvasExport(columns, _headers(columns, options.canvas_assignments, chapters), people)
    elif options.canvas_assignments:
        raise ValueError("--canvas-assignment names canvas.csv's columns: give --canvas-columns too, "
                         "or grade a Canvas download")

    if not (adjust.overrides or adjust.late_on or adjust.canvas or path):
        return None, notes
    return adjust, notes


def _resolver(students: list[str], people: dict[str, CanvasStudent]) -> Callable[[str], str | None]:
    """A student as written in an instructor's file: their name as in grades.csv, or their Canvas user id."""
    names = set(students)
    by_id = {p.user_id: p.student for p in people.values()}

    def resolve(name: str) -> str | None:
        name = from_spreadsheet(name)
        return name if name in names else by_id.get(name)
    return resolve


def _headers(columns: str, named: tuple[str, ...], chapters: list[str]) -> dict[str, str]:
    """canvas.csv's column names: the chapter stems (or TOTAL_COLUMN), unless --canvas-assignment names them,
    e.g. `Notebook 1 (4567)`: Canvas matches a column to an assignment by the id in parentheses, else by title."""
    if columns not in CANVAS_COLUMNS:
        raise ValueError(f"--canvas-columns must be one of {', '.join(CANVAS_COLUMNS)}, not {columns!r}")
    if columns == "total":
        if len(named) > 1:
            raise ValueError("--canvas-columns total writes one column: give --canvas-assignment once")
        return {"total": named[0] if named else TOTAL_COLUMN}
    headers = {c: c for c in chapters}
    seen: set[str] = set()
    for item in named:
        chapter, sep, name = item.partition("=")
        chapter, name = chapter.strip(), name.strip()
        if not sep or not name:
            raise ValueError(f"--canvas-assignment {item!r}: with --canvas-columns chapters, write CHAPTER=NAME")
        if chapter not in headers:
            raise ValueError(f"--canvas-assignment {item!r}: {chapter!r} is not a chapter graded in this run "
                             f"({', '.join(chapters)})")
        if chapter in seen:
            raise ValueError(f"--canvas-assignment names {chapter} twice")
        seen.add(chapter)
        headers[chapter] = name
    return headers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The instructor's options of `python -m grader grade`, in a group of their own."""
    group = parser.add_argument_group("Canvas, manual overrides and late work (all off by default)")
    group.add_argument("--canvas", action="store_const", const=True, default=None,
                       help="read SUBMISSIONS as Canvas's \"Download submissions\" zip or folder "
                            "(default: when every file is named like one)")
    group.add_argument("--canvas-columns", choices=CANVAS_COLUMNS,
                       help="write canvas.csv for Canvas's gradebook import with a column per chapter or one total "
                            "(default: chapters, written for a Canvas download)")
    group.add_argument("--canvas-assignment", action="append", default=[], metavar="[CHAPTER=]NAME",
                       help="name a canvas.csv column after a Canvas assignment, e.g. '01_tensors=Tensors (4567)'; "
                            "with --canvas-columns total, just the name")
    group.add_argument("--overrides", type=Path, metavar="CSV",
                       help=f"manual overrides, student,exercise,score,reason (default: OUT/{FILENAME} when it exists)")
    group.add_argument("--late-penalty", type=_arg(late_mod.parse_rate), metavar="RATE",
                       help="take this much of a late chapter's score per day late, e.g. 10%%/day")
    group.add_argument("--late-cap", type=_arg(late_mod.parse_cap), metavar="PCT",
                       help="the most a late penalty takes, e.g. 50%% (default 100%%)")
    group.add_argument("--due", type=_arg(late_mod.parse_time), metavar="TIME",
                       help="the due date, e.g. 2026-12-01T23:59+01:00 (needed with --submitted-at)")
    group.add_argument("--submitted-at", type=Path, metavar="CSV",
                       help="submission times, student,time or student,chapter,time (wins over Canvas's late marker)")


def from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Options:
    """Options from parsed arguments; a combination that means nothing exits through parser.error (status 2)."""
    policy = None
    if args.late_penalty is not None:
        policy = LatePolicy(args.late_penalty, 1.0 if args.late_cap is None else args.late_cap, args.due)
    else:
        for flag, value in (("--due", args.due), ("--late-cap", args.late_cap)):
            if value is not None:
                parser.error(f"{flag} needs --late-penalty (late work is off without a penalty)")
    try:
        return Options(canvas=args.canvas, canvas_columns=args.canvas_columns,
                       canvas_assignments=tuple(args.canvas_assignment), overrides=args.overrides, late=policy,
                       submitted_at=args.submitted_at)
    except ValueError as e:
        parser.error(str(e))


def _arg(parse):
    """An argparse type from a parser that raises ValueError with a one-line reason."""
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = parse.__name__
    return convert
