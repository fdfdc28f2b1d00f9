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
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from grader.autograde.records import CheckRecord, ExerciseGrade, NotebookRecord
from grader.chapters import NOTEBOOKS

GRADES_HEADER = ("student", "chapter", "exercise", "score", "max_score", "status", "message")
SCORING_NOTE = ("Each exercise scores its points times the weighted fraction of its checks that passed; "
                "an exercise marked tampered, missing or invalid scores 0.")
# Colours as in the notebook (grader/feedback.py); the class is picked here, never taken from a record.
_CSS = """body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#1f2328}
table{border-collapse:collapse;width:100%;margin:0 0 1.5em}
th,td{border-bottom:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
td.score{white-space:nowrap}
ul.checks{list-style:none;margin:0;padding:0 0 0 1.5em;font-size:90%}
.note{color:#57606a}
.ok{color:#1a7f37}.bad{color:#cf222e}.warn{color:#bc4c00}.muted{color:#6e7781}"""
_TONE = {"passed": "ok", "timeout": "warn", "not_implemented": "muted"}


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


def _csv(rows: Iterable[Sequence[object]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def grades_csv(records: Iterable[NotebookRecord]) -> str:
    """One row per student and exercise: the table an instructor filters and sorts."""
    rows = [GRADES_HEADER]
    for r in _sorted(records):
        rows += [(g.student, g.chapter, g.exercise, _num(g.score), _num(g.max_score), g.status, g.message)
                 for g in r.grades]
    return _csv(rows)


def gradebook_csv(records: Iterable[NotebookRecord], students: Sequence[str], chapters: Sequence[str]) -> str:
    """One row per student, a score per chapter: what goes into the course's gradebook.

    Every listed student gets a row, and max_total counts each chapter's full marks, so a student
    without a notebook scores 0 out of the same total as everyone else.
    """
    listed = set(students)
    scores: dict[tuple[str, str], float] = {}
    chapter_max = dict.fromkeys(chapters, 0.0)
    for r in records:
        if r.student not in listed or r.chapter not in chapter_max:
            raise ValueError(f"record for {r.student!r}, {r.chapter!r}: not among the students and chapters listed")
        scores[r.student, r.chapter] = scores.get((r.student, r.chapter), 0.0) + sum(g.score for g in r.grades)
        chapter_max[r.chapter] = max(chapter_max[r.chapter], sum(g.max_score for g in r.grades))
    max_total = _num(sum(_round(m) for m in chapter_max.values()))
    rows: list[Sequence[object]] = [("student", *chapters, "total", "max_total")]
    for s in sorted(listed, key=_student_key):
        cells = [_round(scores.get((s, c), 0.0)) for c in chapters]
        rows.append((s, *map(_num, cells), _num(sum(cells)), max_total))
    return _csv(rows)


def _check_line(c: CheckRecord) -> str:
    """'✓ description' or '✗ description: message'; a hidden check's message is already only a summary."""
    desc = c.description + (" (hidden)" if c.hidden else "")
    if c.status == "passed":
        return f"✓ {desc}"
    return f"✗ {desc}: {c.message}" if c.message else f"✗ {desc}"


def _test_name(g: ExerciseGrade) -> str:
    """'01_tensors · same_storage': the exercise id without its chapter prefix."""
    return f"{g.chapter} · {g.exercise.partition('.')[2] or g.exercise}"


def results_json(student: str, records: Sequence[NotebookRecord]) -> str:
    """The student's results in Gradescope's autograder format (results.json)."""
    records = _sorted(records)  # a fixed order also fixes the float sums
    grades = [g for r in records for g in r.grades]
    score = _round(sum(g.score for g in grades))
    max_score = _round(sum(g.max_score for g in grades))
    passed = sum(g.status == "passed" for g in grades)
    tests = [{
        "name": _test_name(g),
        "score": _round(g.score),
        "max_score": _round(g.max_score),
        "status": "passed" if g.status == "passed" else "failed",
        "output": "\n".join([f"{g.status}: {g.message}", *map(_check_line, g.checks)]),
        "visibility": "visible",
        "extra_data": {"status": g.status, "chapter": g.chapter, "exercise": g.exercise},
    } for g in grades]
    result = {
        "score": score,
        "execution_time": round(sum(r.seconds for r in records), 1),
        "output": f"{student}: {_num(score)}/{_num(max_score)} points; {passed}/{len(grades)} exercises passed.",
        "tests": tests,
    }
    return json.dumps(result, ensure_ascii=False, indent=2, sort_keys=False) + "\n"


def _exercise_rows(g: ExerciseGrade) -> list[str]:
    e = html.escape
    rows = [f'<tr><td>{e(g.exercise)}</td><td class="{_TONE.get(g.status, "bad")}">{e(g.status)}</td>'
            f'<td class="score">{_num(g.score)} / {_num(g.max_score)}</td><td>{e(g.message)}</td></tr>']
    if g.checks:
        items = []
        for c in g.checks:
            tone = _TONE.get(c.status, "bad")
            mark = "✓" if c.status == "passed" else "✗"
            hidden = " <i>(hidden)</i>" if c.hidden else ""
            msg = f': <span class="{tone}">{e(c.message)}</span>' if c.status != "passed" and c.message else ""
            items.append(f'<li><span class="{tone}">{mark}</span> {e(c.description)}{hidden}{msg}</li>')
        rows.append(f'<tr><td colspan="4"><ul class="checks">{"".join(items)}</ul></td></tr>')
    return rows


def feedback_html(student: str, records: Sequence[NotebookRecord]) -> str:
    """A self-contained page for the student (inline CSS, no scripts or links); every record text is escaped."""
    e = html.escape
    records = _sorted(records)
    total = sum(g.score for r in records for g in r.grades)
    max_total = sum(g.max_score for r in records for g in r.grades)
    body = [f"<h1>{e(student)}</h1>",
            f"<p>Total: <b>{_num(total)} / {_num(max_total)}</b> points</p>",
            f'<p class="note">{e(SCORING_NOTE)}</p>']
    if not records:
        body.append("<p>No notebooks were graded.</p>")
    for r in records:
        score, max_score = sum(g.score for g in r.grades), sum(g.max_score for g in r.grades)
        body += [f"<h2>{e(r.chapter)} — {_num(score)} / {_num(max_score)}</h2>", "<table>",
                 "<tr><th>Exercise</th><th>Status</th><th>Score</th><th>Message</th></tr>",
                 *(row for g in r.grades for row in _exercise_rows(g)), "</table>"]
    head = (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>Feedback: {e(student)}</title>\n<style>\n{_CSS}\n</style>\n</head>\n<body>\n")
    return head + "\n".join(body) + "\n</body>\n</html>\n"


def write_student(out: Path, student: str, records: Sequence[NotebookRecord]) -> None:
    """Write OUT/<student>/results.json and feedback.html."""
    folder = student_dir(out, student)
    write_atomic(folder / "results.json", results_json(student, records))
    write_atomic(folder / "feedback.html", feedback_html(student, records))


def write_cohort(out: Path, records: Iterable[NotebookRecord], students: Sequence[str],
                 chapters: Sequence[str]) -> None:
    """Write OUT/grades.csv and OUT/gradebook.csv."""
    records = list(records)
    write_atomic(out / "grades.csv", grades_csv(records))
    write_atomic(out / "gradebook.csv", gradebook_csv(records, students, chapters))
