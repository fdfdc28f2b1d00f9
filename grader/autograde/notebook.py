"""Grade one student's notebook for one chapter: run it in its own kernel, then run every check here.

The steps, each its own function: read the notebook (or say why it is invalid), copy its folder to
scratch, run its cells, look up the names each exercise needs, run the public and hidden checks
against the student's functions through the bridge, and turn the results into grades.
"""
from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from grader import chapters, demonstrations
from grader.autograde import sandbox, tamper, warm
from grader.autograde.bridge import Bridge, KernelDidNotStart, RemoteFunction, grading_kernel
from grader.autograde.kernel import Ended, Limits, NotebookKernel, Outcome
from grader.autograde.records import CheckRecord, ExerciseGrade, NotebookRecord
from grader.autograde.sandbox import Isolation
from grader.registry import Check, Exercise, Registry
from grader.results import (CRASHED, INVALID, MISSING, PASSED, TAMPERED, TIMEOUT, CheckResult, ExerciseResult)
from grader.runner import run_check

REPO = Path(__file__).resolve().parents[2]
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


class InvalidNotebook(Exception):
    """The file is not a notebook the grader can read; the message says why, in one line."""


@dataclass(frozen=True)
class Cells:
    """A notebook's non-empty code cells: their sources, their positions (from 1, as Jupyter counts) and which
    of them are unchanged demonstrations (grader/demonstrations.py) that grading may skip."""
    sources: list[str]
    numbers: list[int]
    skippable: list[bool]

    def without_demonstrations(self) -> "Cells":
        """The cells grading runs by default: every cell but the unchanged demonstrations."""
        keep = [i for i, skip in enumerate(self.skippable) if not skip]
        return Cells([self.sources[i] for i in keep], [self.numbers[i] for i in keep], [False] * len(keep))

    def skipped(self) -> list[str]:
        return [s for s, skip in zip(self.sources, self.skippable) if skip]


def read_cells(path: Path) -> Cells:
    """The code cells, from any nbformat version; InvalidNotebook says why a file is not one."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InvalidNotebook(f"not a text file (byte {e.start} is not UTF-8)") from None
    except OSError as e:
        raise InvalidNotebook(f"cannot be read ({e.strerror})") from None
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidNotebook(f"not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}): "
                              "the file is damaged or cut short") from None
    try:
        nb = nbformat.reads(text, as_version=4, capture_validation_error={})
        cells = list(nb.cells)
    except Exception as e:
        raise InvalidNotebook(f"JSON, but not a Jupyter notebook ({type(e).__name__}: {str(e)[:120]})") from None
    sources, numbers, skippable = [], [], []
    for n, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if source.strip():
            sources.append(source)
            numbers.append(n)
            skippable.append(demonstrations.is_marked(cell))
    return Cells(sources, numbers, skippable)


def scratch_copy(folder: Path, scratch: Path) -> Path:
    """The notebook's folder copied under `scratch/notebooks`, with the course's data/ beside it as in the repo:
    the student's world while graded (a sandboxed kernel can reach nothing else)."""
    work = scratch / "notebooks"
    shutil.copytree(folder, work, symlinks=True, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__MACOSX", ".git"))
    if (REPO / "data").is_dir():
        shutil.copytree(REPO / "data", scratch / "data", symlinks=True)
    return work


def _clean(message: str, scratch: Path) -> str:
    """One deterministic line: no scratch paths, no memory addresses, no newlines."""
    message = message.replace(str(scratch), "<folder>")
    message = _ADDRESS.sub("0x…", message)
    return " ".join(message.split())[:400]


def _defining_cell(name: str, sources: list[str], numbers: list[int], kernel: NotebookKernel) -> str:
    """What went wrong in the cell that should have defined `name`, if anything did."""
    pattern = re.compile(rf"^\s*(def\s+{re.escape(name)}\b|{re.escape(name)}\s*=)", re.M)
    for i, source in enumerate(sources):
        if pattern.search(source):
            out = kernel.outcomes.get(i, Outcome(Ended.SKIPPED))
            if out.status == "error":
                return f"cell {numbers[i]} raised {out.ename}: {out.evalue}"
            if out.status == "dead":
                return f"the kernel died in cell {numbers[i]}"
            if out.status in ("timeout", "skipped"):
                return f"cell {numbers[i]} did not finish ({out.evalue or 'cell time limit'})"
    return ""


def check_limit(declared: float | None, limits: Limits) -> float:
    """Seconds a check may take: --check-timeout, or for a check that declares a longer need (a multi-process
    run), its declared limit scaled the same way (--check-timeout 5 gives a check declaring 30 s 7.5 s)."""
    if declared is None:
        return limits.check_timeout
    return declared * limits.check_timeout / Limits().check_timeout


def run_exercise_checks(ex: Exercise, bridge: Bridge, limits: Limits, course: Registry, salt: str = "",
                        checks: list[Check] | None = None, stop: tuple[str, str] | None = None) -> list[CheckResult]:
    """`checks` of `ex` (every one when None) on the student's functions; after a time-out or a crash (or a
    `stop` carried from an earlier phase) the rest are not run. Hidden checks draw their inputs with `salt`."""
    objs = tuple(RemoteFunction(bridge, name, ex) for name in ex.needs)
    results: list[CheckResult] = []
    for check in course.checks(ex) if checks is None else checks:
        if stop is None and bridge.kernel.gave_up:
            stop = (CRASHED, bridge.kernel.gave_up)
        if stop is not None:
            results.append(CheckResult(check.name, check.description, stop[0], stop[1], check.hidden, check.weight))
            continue
        limit = check_limit(check.timeout, limits)
        bridge.limit, bridge.deadline = limit, time.monotonic() + limit
        bridge.salt = salt if check.hidden else ""
        r = run_check(ex, check, objs, timeout=None, salt=salt)
        results.append(r)
        if r.status in (TIMEOUT, CRASHED):
            stop = (r.status, f"not run: an earlier check of this exercise ended with {r.status}")
    bridge.deadline, bridge.salt = None, ""
    return results


def run_in_phases(exercises: list[Exercise], bridge: Bridge, limits: Limits, course: Registry,
                  salt: str) -> dict[str, ExerciseResult]:
    """Every public check of every exercise, then every hidden one: a public check's message reaches the
    student, so it runs before the student's code has been handed any hidden input (which could otherwise
    come back inside that message). The notebook's replacements of the grader are looked for after each phase."""
    public = {ex.id: run_exercise_checks(ex, bridge, limits, course, salt, ex.public_checks()) for ex in exercises}
    bridge.probe()
    results = {}
    for ex in exercises:
        hidden = [c for c in course.checks(ex) if c.hidden]
        stopped = next(((r.status, f"not run: an earlier check of this exercise ended with {r.status}")
                        for r in public[ex.id] if r.status in (TIMEOUT, CRASHED)), None)
        done = {r.name: r for r in public[ex.id] + run_exercise_checks(ex, bridge, limits, course, salt, hidden,
                                                                        stopped)}
        results[ex.id] = ExerciseResult(ex.id, ex.points, [done[c.name] for c in course.checks(ex)])
    bridge.probe(after_hidden=True)
    return results


def _grade(student: str, chapter: str, ex: Exercise, result: ExerciseResult, scratch: Path) -> ExerciseGrade:
    checks = [CheckRecord(c.name, c.description, c.status, _clean(c.shown_message(), scratch), c.hidden, c.seconds)
              for c in result.checks]
    return ExerciseGrade(student, chapter, ex.id, result.score, ex.points, result.status,
                         _clean(result.message, scratch), checks)


def whole_notebook(student: str, chapter: str, status: str, message: str, course: Registry) -> list[ExerciseGrade]:
    """The same status for every exercise of a chapter (missing notebook, unreadable file, dead kernel)."""
    return [ExerciseGrade(student, chapter, ex.id, 0.0, ex.points, status, message)
            for ex in course.of(chapters.key(chapter))]


def _checks(student: str, chapter: str, exercises: list[Exercise], bridge: Bridge, sources: list[str],
            numbers: list[int], limits: Limits, scratch: Path, course: Registry, salt: str) -> list[ExerciseGrade]:
    """Every exercise's checks on the kernel that ran the notebook; a kernel that gave up gets one more life."""
    kernel = bridge.kernel
    if kernel.gave_up:
        kernel.revive()
    kinds = bridge.names(sorted({n for ex in exercises for n in ex.needs}))
    absent_grades: dict[str, ExerciseGrade] = {}
    for ex in exercises:
        absent = [n for n in ex.needs if kinds.get(n, "missing") == "missing"]
        if absent:
            why = "; ".join(filter(None, (_defining_cell(n, sources, numbers, kernel) for n in absent)))
            status = CRASHED if "kernel died" in why else MISSING
            message = f"the notebook defines no {', '.join(absent)}" + (f" ({why})" if why else "")
            absent_grades[ex.id] = ExerciseGrade(student, chapter, ex.id, 0.0, ex.points, status,
                                                 _clean(message, scratch))
    graded = run_in_phases([ex for ex in exercises if ex.id not in absent_grades], bridge, limits, course, salt)
    return [absent_grades[ex.id] if ex.id in absent_grades else _grade(student, chapter, ex, graded[ex.id], scratch)
            for ex in exercises]


@dataclass
class Graded:
    """One notebook's grades, and how its cells were run: `note` says what was skipped, or why it was graded
    again with every cell; `phases` the seconds spent starting kernels, running cells and running checks."""
    grades: list[ExerciseGrade]
    note: str = ""
    phases: dict[str, float] = field(default_factory=dict)


_UNDEFINED = re.compile(r"name '(\w+)' is not defined")


def needs_every_cell(grades: list[ExerciseGrade], cells: Cells) -> str:
    """Why grades got without the demonstrations cannot stand ("" when they can): an exercise missing, or a
    check failing on a name that only a skipped cell defines."""
    skipped = "\n".join(cells.skipped())
    for g in grades:
        texts = [g.message] + [c.message for c in g.checks]
        if g.status == MISSING:
            return f"{g.exercise} is missing"
        for name in (n for t in texts for n in _UNDEFINED.findall(t)):
            if re.search(rf"\b{re.escape(name)}\b", skipped):
                return f"{g.exercise} needs {name}, which only a skipped cell defines"
    return ""


def grade_notebook(student: str, chapter: str, path: Path, folder: Path, scratch: Path,
                   limits: Limits, course: Registry, isolation: Isolation | None = None,
                   salt: str = "", whole: bool = False) -> Graded:
    """Grades for every exercise of `chapter` from the notebook at `path` (run in a copy of `folder`); the
    hidden checks' inputs are drawn with the run's secret `salt`. Unchanged demonstration cells are skipped
    unless `whole`; if that leaves an exercise ungradable, the notebook is graded again with every cell."""
    try:
        cells = read_cells(path)
    except InvalidNotebook as e:
        return Graded(whole_notebook(student, chapter, INVALID, f"{path.name} is {e}", course))
    skipping = not whole and any(cells.skippable)
    phases: dict[str, float] = {}
    grades = _grade_cells(student, chapter, cells.without_demonstrations() if skipping else cells, folder,
                          scratch / "run", limits, course, isolation, salt, phases)
    if not skipping:
        return Graded(grades, phases=phases)
    why = needs_every_cell(grades, cells)
    if not why:
        return Graded(grades, f"skipped {sum(cells.skippable)} unchanged demonstration cells", phases)
    grades = _grade_cells(student, chapter, cells, folder, scratch / "again", limits, course, isolation, salt, phases)
    return Graded(grades, f"graded again with every cell: {why}", phases)


def _grade_cells(student: str, chapter: str, cells: Cells, folder: Path, scratch: Path, limits: Limits,
                 course: Registry, isolation: Isolation | None, salt: str,
                 phases: dict[str, float]) -> list[ExerciseGrade]:
    """One kernel runs `cells` and every check; tampering found on the way withholds the scores."""
    sources, numbers = cells.sources, cells.numbers
    exercises = course.of(chapters.key(chapter))
    tampered = tamper.scan(sources, numbers)
    taken = warm.AHEAD.take(limits, isolation)  # a kernel started ahead for this notebook, in a folder of its own
    ahead, top = taken if taken is not None else (None, None)
    scratch = Path(ahead.folder) if ahead is not None else scratch
    scratch.mkdir(parents=True, exist_ok=True)
    scratch.parent.chmod(scratch.parent.stat().st_mode | 0o011)  # a kernel user passes through to its own folder
    cwd = scratch_copy(folder, scratch)
    if ahead is not None and isolation is not None:
        sandbox.own_folder(scratch, isolation)  # the files came after the kernel: theirs too
    try:
        with grading_kernel(sources, cwd, limits, isolation=isolation, folder=scratch, phases=phases,
                            ahead=ahead, forbidden=course.forbidden(chapters.key(chapter))) as bridge:
            checking = time.monotonic()
            grades = _checks(student, chapter, exercises, bridge, sources, numbers, limits, scratch, course, salt)
            phases["checks"] = phases.get("checks", 0.0) + time.monotonic() - checking
            tampered_by_calls = set(bridge.tampered)
            tampered_in_hidden = bridge.tampered_in_hidden
    except KernelDidNotStart as e:  # still a recorded status
        return whole_notebook(student, chapter, CRASHED, str(e), course)
    finally:
        if top is not None:
            shutil.rmtree(top, ignore_errors=True)
    named = {t.split(" replaces ", 1)[1] for t in tampered}
    tampered += [f"the notebook replaced {name}" for name in sorted(tampered_by_calls - named)]
    if tampered_in_hidden:
        tampered.append("the notebook replaced the grader's objects while its hidden checks ran")
    if tampered:
        grades = [g if g.status == MISSING else _withheld(g, tampered, scratch) for g in grades]
    return grades


def _withheld(g: ExerciseGrade, tampered: list[str], scratch: Path) -> ExerciseGrade:
    """Tampering scores 0 and says so, with what the checks found on their own for the instructor to weigh."""
    passed = sum(c.status == PASSED for c in g.checks)
    what = "; ".join(tampered[:3]) + (f"; and {len(tampered) - 3} more" if len(tampered) > 3 else "")
    message = (f"{what}. Score withheld; graded outside the notebook it would have "
               f"scored {g.score:g}/{g.max_score:g} ({passed}/{len(g.checks)} checks passed)")
    return ExerciseGrade(g.student, g.chapter, g.exercise, 0.0, g.max_score, TAMPERED, _clean(message, scratch), g.checks)


def grade(student: str, chapter: str, path: Path | None, folder: Path | None, scratch: Path, limits: Limits,
          course: Registry, source: str = "", fingerprint: str = "", missing_message: str = "",
          isolation: Isolation | None = None, salt: str = "", whole: bool = False) -> NotebookRecord:
    """A NotebookRecord for one student and chapter, timed; never raises for anything the notebook does."""
    start = time.monotonic()
    if path is None or folder is None:
        graded = Graded(whole_notebook(student, chapter, MISSING, missing_message or f"no notebook for {chapter}",
                                       course))
    else:
        graded = grade_notebook(student, chapter, path, folder, scratch, limits, course, isolation, salt, whole)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    how = isolation.describe() if isolation is not None and path is not None else ""
    return NotebookRecord(student, chapter, source, fingerprint, round(time.monotonic() - start, 1), graded.grades,
                          when, how, graded.note, {k: round(v, 2) for k, v in graded.phases.items()})
