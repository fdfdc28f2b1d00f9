"""Write the grading outputs: grades.csv, gradebook.csv and, per student, results.json and feedback.html.

Every file is a pure function of the records, so two runs over the same records give the same bytes,
and written atomically, so an interrupted run never leaves half a file and a resumed one leaves
finished files untouched.
"""
from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from grader.autograde.records import CheckRecord, ExerciseGrade, NotebookRecord
from grader.autograde.whattofix import CSS as FIX_CSS, anchor, what_to_fix
from grader.chapters import NOTEBOOKS
from grader.results import Status

if TYPE_CHECKING:   # adjust.py imports the records and collect.py, not this module; only the type is needed here
    from grader.autograde.adjust import Adjustments
    from grader.autograde.late import Lateness

GRADES_HEADER = ("student", "chapter", "exercise", "score", "max_score", "status", "message")
SCORING_NOTE = ("Each exercise scores its points times the weighted fraction of its checks that passed; "
                "an exercise marked " + " or ".join(", ".join(s.value for s in Status if s.scores_zero).rsplit(", ", 1))
                + " scores 0.")


def _words(status: str) -> str:
    """What a student reads for a status (an identifier this grader does not know is shown as is)."""
    known = Status.of(status)
    return known.words if known is not None else status


def _tone(status: str) -> str:
    known = Status.of(status)
    return known.tone if known is not None else "bad"


# Colours as in the notebook (grader/feedback.py); a class is picked here, never taken from a record.
_CSS = """*{box-sizing:border-box}
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:46rem;margin:0 auto;padding:1rem;color:#1f2328}
h1{font-size:1.5rem;margin:.5rem 0}h2{font-size:1.2rem;margin:2rem 0 .25rem;border-bottom:1px solid #d0d7de}
h3{font-size:1rem;margin:0;display:flex;flex-wrap:wrap;gap:.25rem .6rem;align-items:baseline}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.92em;overflow-wrap:anywhere}
.total{font-size:1.25rem;margin:.25rem 0}.meta,.note{color:#57606a;font-size:.9rem;margin:.25rem 0}
.exercise{border:1px solid #d0d7de;border-radius:6px;padding:.6rem .8rem;margin:.75rem 0}
.points{margin-left:auto;white-space:nowrap;font-weight:600}
.badge{font-size:.8rem;font-weight:600;border-radius:1rem;padding:0 .55rem;border:1px solid currentColor;white-space:nowrap}
.summary{margin:.35rem 0}
ul.checks{list-style:none;margin:.35rem 0 0;padding:0}ul.checks li{padding:.15rem 0 .15rem 1.4rem;text-indent:-1.4rem;overflow-wrap:anywhere}
.hidden{color:#57606a;font-style:italic}
details.exercise summary{cursor:pointer;list-style:none}details.exercise summary::-webkit-details-marker{display:none}
details.exercise summary h3::before{content:"▸";color:#57606a}details.exercise[open] summary h3::before{content:"▾"}
details.exercise:not([open]){padding:.35rem .8rem}footer{margin-top:2rem}
.ok{color:#1a7f37}.bad{color:#cf222e}.warn{color:#bc4c00}.muted{color:#6e7781}"""


def write_atomic(path: Path, text: str) -> bool:
    """Replace `path` with `text` in one step (temp file, fsync, os.replace); False when it already holds it.

    Skipping identical files keeps a resumed run from touching what it finished before, mtime included.
    """
    data = text.encode("utf-8")
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would hide the outputs from other tools
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def student_dir(out: Path, student: str) -> Path:
    """The student's output folder: their name, made safe to be exactly one folder under `out`."""
    name = student.replace("/", "_").replace("\0", "_")
    return out / ("_" if name in ("", ".", "..") else name)


def _student_key(name: str) -> tuple[str, str]:
    return name.casefold(), name


def _chapter_key(chapter: str) -> tuple[int, str]:
    """NOTEBOOKS order; a chapter not in it goes last rather than crash a report."""
    return (NOTEBOOKS.index(chapter) if chapter in NOTEBOOKS else len(NOTEBOOKS)), chapter


def _sorted(records: Iterable[NotebookRecord]) -> list[NotebookRecord]:
    return sorted(records, key=lambda r: (_student_key(r.student), _chapter_key(r.chapter)))


def _round(x: float) -> float:
    return round(x, 2) + 0.0  # + 0.0 turns -0.0 into 0.0


def _num(x: float) -> str:
    return format(_round(x), "g")


# A cell a spreadsheet would read as a formula (OWASP's CSV injection list); numbers stay numbers.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def spreadsheet_text(cell: object) -> object:
    """`cell` as a spreadsheet shows it: text that would start a formula (a student folder named
    `=HYPERLINK(...)`) gets a leading apostrophe, as OWASP recommends; numbers and other text are unchanged,
    but for a carriage return, which Python's csv module would leave unquoted, splitting the row: a line feed."""
    if not isinstance(cell, str):
        return cell
    if cell.startswith(FORMULA_START) and not _NUMBER.fullmatch(cell):
        cell = "'" + cell
    return cell.replace("\r\n", "\n").replace("\r", "\n")


def from_spreadsheet(text: str) -> str:
    """The apostrophe undone, for names an instructor copies from our CSVs into overrides or submission times."""
    return text[1:] if text.startswith("'") and text[1:].startswith(FORMULA_START) else text


def _csv(rows: Iterable[Sequence[object]]) -> str:
    """Every CSV this grader writes goes through here, so no cell of any of them can become a formula."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([spreadsheet_text(c) for c in row] for row in rows)
    return buf.getvalue()


def grades_csv(records: Iterable[NotebookRecord], adjust: Adjustments | None = None) -> str:
    """One row per student and exercise: the table an instructor filters and sorts.

    An overridden exercise keeps its graded status; its score is the instructor's and its message starts
    with `overridden from <graded score>: <reason>`. Late penalties are per chapter (gradebook.csv), not here.
    """
    rows = [GRADES_HEADER]
    for r in _sorted(records):
        rows += [(g.student, g.chapter, g.exercise, _num(g.score), _num(g.max_score), g.status, g.message)
                 if adjust is None or (o := adjust.override(g)) is None else
                 (g.student, g.chapter, g.exercise, _num(o.score), _num(g.max_score), g.status,
                  f"overridden from {_num(g.score)}: {o.reason}; graded: {g.message}")
                 for g in r.grades]
    return _csv(rows)


def chapter_scores(records: Iterable[NotebookRecord], students: Sequence[str], chapters: Sequence[str],
                   adjust: Adjustments | None = None) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
    """Every listed student's score per chapter, rounded (after overrides, before late penalties), and each
    chapter's full marks; ValueError for a record outside the students and chapters listed."""
    listed = set(students)
    scores: dict[tuple[str, str], float] = {}
    chapter_max = dict.fromkeys(chapters, 0.0)
    for r in records:
        if r.student not in listed or r.chapter not in chapter_max:
            raise ValueError(f"record for {r.student!r}, {r.chapter!r}: not among the students and chapters listed")
        earned = sum(g.score for g in r.grades) if adjust is None else sum(adjust.score(g) for g in r.grades)
        scores[r.student, r.chapter] = scores.get((r.student, r.chapter), 0.0) + earned
        chapter_max[r.chapter] = max(chapter_max[r.chapter], sum(g.max_score for g in r.grades))
    return {(s, c): _round(scores.get((s, c), 0.0)) for s in listed for c in chapters}, chapter_max


def gradebook_csv(records: Iterable[NotebookRecord], students: Sequence[str], chapters: Sequence[str],
                  adjust: Adjustments | None = None) -> str:
    """One row per student, a score per chapter: what goes into the course's gradebook.

    Every listed student gets a row, and max_total counts each chapter's full marks, so a student
    without a notebook scores 0 out of the same total as everyone else. With a late policy, each chapter's
    score is after its penalty, and a `<chapter> late` column per chapter says how late and what it cost.
    """
    raw, chapter_max = chapter_scores(records, students, chapters, adjust)
    max_total = _num(sum(_round(m) for m in chapter_max.values()))
    late_on = adjust is not None and adjust.late_on
    rows: list[Sequence[object]] = [("student", *chapters, "total", "max_total",
                                     *([f"{c} late" for c in chapters] if late_on else []))]
    for s in sorted(set(students), key=_student_key):
        cells = [raw[s, c] if adjust is None else _round(adjust.chapter_score(s, c, raw[s, c])) for c in chapters]
        notes = [_late_cell(adjust.lateness(s, c), raw[s, c]) for c in chapters] if late_on else []
        rows.append((s, *map(_num, cells), _num(sum(cells)), max_total, *notes))
    return _csv(rows)


def _late_cell(lateness: Lateness | None, raw: float) -> str:
    """'2 days late, -20% of 9.5', or '' when on time."""
    return "" if lateness is None else f"{lateness.short()} of {_num(raw)}"


def _check_line(c: CheckRecord) -> str:
    """'✓ description' or '✗ description: message'; a hidden check's message is already only a summary."""
    desc = c.description + (" (hidden)" if c.hidden else "")
    if c.status == Status.PASSED:
        return f"✓ {desc}"
    return f"✗ {desc}: {c.message}" if c.message else f"✗ {desc}"


def _test_name(g: ExerciseGrade) -> str:
    """'01_tensors · same_storage': the exercise id without its chapter prefix."""
    return f"{g.chapter} · {g.exercise.partition('.')[2] or g.exercise}"


def summary(g: ExerciseGrade) -> str:
    """One sentence for the exercise: how many checks passed, or, when no check could say, the grader's message."""
    if g.checks and (status := Status.of(g.status)) is not None and status.from_checks:
        passed = sum(c.status == Status.PASSED for c in g.checks)
        if g.status == Status.NOT_IMPLEMENTED:
            return "Not written yet: the function still raises NotImplementedError."
        return f"All {passed} checks passed." if passed == len(g.checks) else f"{passed} of {len(g.checks)} checks passed."
    return g.message


def results_json(student: str, records: Sequence[NotebookRecord], adjust: Adjustments | None = None) -> str:
    """The student's results in Gradescope's autograder format (results.json).

    An overridden exercise's test has the instructor's score and says why first; a late penalty lowers the
    top-level score (Gradescope shows it instead of the tests' sum) and the summary says what it took.
    """
    records = _sorted(records)  # a fixed order also fixes the float sums
    grades = [g for r in records for g in r.grades]
    score = _round(sum(g.score for g in grades))
    if adjust is not None:
        score = _round(sum(_adjusted_chapter(student, r, adjust)[1] for r in records))
    max_score = _round(sum(g.max_score for g in grades))
    passed = sum(g.status == Status.PASSED for g in grades)
    tests = [{
        "name": _test_name(g),
        "score": _round(g.score),
        "max_score": _round(g.max_score),
        "status": "passed" if g.status == Status.PASSED else "failed",
        "output": "\n".join([f"{_words(g.status)}. {summary(g)}", *map(_check_line, g.checks)]),
        "visibility": "visible",
        "extra_data": {"status": g.status, "chapter": g.chapter, "exercise": g.exercise},
    } for g in grades]
    if adjust is not None:
        for g, test in zip(grades, tests):
            if (o := adjust.override(g)) is not None:
                test.update(score=_round(o.score), status="passed" if o.score >= g.max_score else "failed",
                            output=f"{_override_words(g, o.reason)}\n{test['output']}")
                test["extra_data"]["override"] = {"graded_score": _round(g.score), "reason": o.reason}
    output = f"{student}: {_num(score)}/{_num(max_score)} points; {passed}/{len(grades)} exercises passed."
    if adjust is not None:
        for r in records:
            if (lateness := adjust.lateness(student, r.chapter)) is not None:
                raw, final = _adjusted_chapter(student, r, adjust)
                output += f" {r.chapter}: {lateness.words()} ({_num(raw)} → {_num(final)} points)."
    result = {
        "score": score,
        "execution_time": round(sum(r.seconds for r in records), 1),
        "output": output,
        "tests": tests,
    }
    return json.dumps(result, ensure_ascii=False, indent=2, sort_keys=False) + "\n"


def _adjusted_chapter(student: str, r: NotebookRecord, adjust: Adjustments) -> tuple[float, float]:
    """One record's score after overrides, and after its late penalty too."""
    raw = _round(sum(adjust.score(g) for g in r.grades))
    return raw, _round(adjust.chapter_score(student, r.chapter, raw))


def _override_words(g: ExerciseGrade, reason: str) -> str:
    """What the student reads about an overridden exercise."""
    return (f"Score set by your instructor: {reason} "
            f"(the grader gave {_num(g.score)} of {_num(g.max_score)}: {_words(g.status)}).")


def _exercise_html(g: ExerciseGrade, number: int, adjust: Adjustments | None = None) -> str:
    """One exercise's box; `number` is its place in the chapter (a record holds a chapter's grades in order)."""
    e = html.escape
    tone = _tone(g.status)
    name = g.exercise.partition(".")[2] or g.exercise
    o = adjust.override(g) if adjust is not None else None
    score = g.score if o is None else o.score
    done = g.status == Status.PASSED and score >= g.max_score  # collapsed: nothing to read unless one asks
    tag = "details" if done else "article"
    parts = [f'<{tag} class="exercise" id="{e(anchor(g))}">' + ("<summary>" if done else "")
             + f'<h3><span>Exercise {number} · <code>{e(name)}</code></span>'
             f'<span class="badge {tone}">{e(_words(g.status))}</span>'
             + ('<span class="badge muted">Score set by your instructor</span>' if o is not None else "")
             + f'<span class="points">{_num(score)} / {_num(g.max_score)}</span></h3>' + ("</summary>" if done else ""),
             *([f'<p class="summary warn">{e(_override_words(g, o.reason))}</p>'] if o is not None else []),
             f'<p class="summary">{e(summary(g))}</p>']
    if g.checks and g.status != Status.NOT_IMPLEMENTED:
        items = []
        for c in g.checks:
            ctone = _tone(c.status)
            mark = "✓" if c.status == Status.PASSED else "✗"
            hidden = ' <span class="hidden">(hidden check)</span>' if c.hidden else ""
            msg = f': <span class="{ctone}">{e(c.message)}</span>' if c.status != Status.PASSED and c.message else ""
            items.append(f'<li><span class="{ctone}">{mark}</span> {e(c.description)}{hidden}{msg}</li>')
        parts.append(f'<ul class="checks">{"".join(items)}</ul>')
    parts.append(f"</{tag}>")
    return "".join(parts)


def feedback_html(student: str, records: Sequence[NotebookRecord], adjust: Adjustments | None = None) -> str:
    """A self-contained page for the student (inline CSS, no scripts, no links out); every record text is escaped.

    Written to be read once on any screen: words instead of identifiers, each exercise's checks once,
    which file was graded and when; an overridden exercise says the instructor's reason, a late chapter
    what its lateness cost.
    """
    from grader.chapters import title

    e = html.escape
    records = _sorted(records)
    total = sum(g.score for r in records for g in r.grades)
    if adjust is not None:
        total = sum(_adjusted_chapter(student, r, adjust)[1] for r in records)
    max_total = sum(g.max_score for r in records for g in r.grades)
    body = [f"<header><h1>Feedback for {e(student)}</h1>",
            f'<p class="total">Total: <b>{_num(total)} of {_num(max_total)}</b> points</p></header>',
            what_to_fix(records, adjust)]
    if not records:
        body.append("<p>No notebooks were graded.</p>")
    for r in records:
        score, max_score = sum(g.score for g in r.grades), sum(g.max_score for g in r.grades)
        lateness = adjust.lateness(student, r.chapter) if adjust is not None else None
        if adjust is not None:
            raw, score = _adjusted_chapter(student, r, adjust)
        if r.source:
            when = f" · graded {e(r.graded_at)}" if r.graded_at else ""
            meta = f'<p class="meta">Graded file: <code>{e(r.source)}</code>{when}</p>'
        else:
            meta = '<p class="meta">No notebook for this chapter was found in the submission.</p>'
        if lateness is not None:
            words = lateness.words()
            meta += (f'<p class="note warn">{e(words[0].upper() + words[1:])} '
                     f"({_num(raw)} → {_num(score)} points).</p>")
        body += [f'<section><h2>{e(title(r.chapter))} — {_num(score)} / {_num(max_score)}</h2>', meta,
                 *(_exercise_html(g, i, adjust) for i, g in enumerate(r.grades, 1)), "</section>"]
    body.append(f'<footer><p class="note">{e(SCORING_NOTE)} Hidden checks are extra tests run only when grading: '
                "they say whether they passed, never their inputs. Passed exercises are folded: "
                "open one to see its checks.</p></footer>")
    head = ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>Feedback for {e(student)}</title>\n<style>\n{_CSS}\n{FIX_CSS}\n</style>\n</head>\n<body>\n")
    return head + "\n".join(body) + "\n</body>\n</html>\n"


def write_student(out: Path, student: str, records: Sequence[NotebookRecord],
                  adjust: Adjustments | None = None) -> list[Path]:
    """Write OUT/<student>/results.json and feedback.html; the files that changed."""
    folder = student_dir(out, student)
    files = {folder / "results.json": results_json(student, records, adjust),
             folder / "feedback.html": feedback_html(student, records, adjust)}
    return [path for path, text in files.items() if write_atomic(path, text)]


def write_cohort(out: Path, records: Iterable[NotebookRecord], students: Sequence[str],
                 chapters: Sequence[str], adjust: Adjustments | None = None) -> list[Path]:
    """Write OUT/grades.csv and OUT/gradebook.csv (and canvas.csv when `adjust` asks for it); the files that changed."""
    records = list(records)
    files = {out / "grades.csv": grades_csv(records, adjust),
             out / "gradebook.csv": gradebook_csv(records, students, chapters, adjust)}
    if adjust is not None and adjust.canvas is not None:
        from grader.autograde.canvas_csv import canvas_csv   # it builds on this module's tables

        files[out / "canvas.csv"] = canvas_csv(records, students, chapters, adjust)
    return [path for path, text in files.items() if write_atomic(path, text)]
