"""The top of a student's feedback page: what to fix, before the cards of every exercise.

A half-solved student's page held some sixty cards, passed and unwritten alike, and no summary. This section
lists each exercise not at full marks, in the course's order: one line per exercise that was written but lost
points (its status, the points lost, its first problem), then the unwritten or missing ones of each chapter on
one line, every name a link to its card. Every text from a record is escaped.
"""
from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

from grader.autograde.records import ExerciseGrade, NotebookRecord
from grader.chapters import title
from grader.results import Status

if TYPE_CHECKING:
    from grader.autograde.adjust import Adjustments

UNWRITTEN = (Status.NOT_IMPLEMENTED, Status.MISSING)
MESSAGE_CHARS = 220  # the first problem as the list shows it; the card below has it whole

CSS = """.fix{border:1px solid #d0d7de;border-radius:6px;padding:.5rem .8rem;margin:.75rem 0}
.fix h2{margin:.1rem 0 .35rem;border:0;font-size:1.15rem}.fix ol{margin:.25rem 0;padding-left:1.3rem}
.fix li{margin:.35rem 0;overflow-wrap:anywhere}.fix .lost{font-weight:600;white-space:nowrap}
.fix .msg{display:block;color:#57606a;font-size:.9rem}.fix p{margin:.35rem 0;overflow-wrap:anywhere}"""


def anchor(g: ExerciseGrade) -> str:
    """The id of the exercise's card, which the list links to."""
    return "ex-" + g.exercise.replace(".", "-")


def _score(g: ExerciseGrade, adjust: Adjustments | None) -> float:
    return g.score if adjust is None else adjust.score(g)


def first_problem(g: ExerciseGrade) -> str:
    """What a student reads first: the first check that did not pass and its message, else the grade's message."""
    failing = next((c for c in g.checks if c.status != Status.PASSED), None)
    if failing is not None and g.status != Status.TAMPERED:
        text = f"{failing.description}: {failing.message}" if failing.message else failing.description
    else:
        text = g.message
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def _words(status: str) -> tuple[str, str]:
    known = Status.of(status)
    return (known.words, known.tone) if known is not None else (status, "bad")


def _lost(g: ExerciseGrade, adjust: Adjustments | None) -> str:
    return f"−{round(g.max_score - _score(g, adjust), 2) + 0.0:g}"


def what_to_fix(records: Sequence[NotebookRecord], adjust: Adjustments | None = None) -> str:
    """The "What to fix" section (records in the page's order), or a line saying there is nothing to fix."""
    e = html.escape
    todo = [g for r in records for g in r.grades if _score(g, adjust) < g.max_score - 1e-9]
    if not records:
        return ""
    if not todo:
        return ('<section class="fix" id="what-to-fix"><h2>What to fix</h2>'
                "<p>Nothing: every exercise has full marks.</p></section>")
    gain = sum(g.max_score - _score(g, adjust) for g in todo)
    written = [g for g in todo if g.status not in UNWRITTEN]
    items = []
    for g in written:
        words, tone = _words(g.status)
        name = g.exercise.partition(".")[2] or g.exercise
        items.append(f'<li><a href="#{e(anchor(g))}"><code>{e(name)}</code></a> · <span class="{tone}">{e(words)}'
                     f'</span> · <span class="lost">{_lost(g, adjust)} points</span>'
                     f'<span class="msg">{e(first_problem(g))}</span></li>')
    body = ['<section class="fix" id="what-to-fix"><h2>What to fix</h2>',
            f"<p>{len(todo)} exercise{'s' if len(todo) != 1 else ''} not at full marks: "
            f"{round(gain, 2) + 0.0:g} points to gain. Each name links to its details below.</p>"]
    if items:
        body.append(f'<ol>{"".join(items)}</ol>')
    for r in records:
        unwritten = [g for g in r.grades if g in todo and g.status in UNWRITTEN]
        if unwritten:
            links = ", ".join(f'<a href="#{e(anchor(g))}"><code>{e(g.exercise.partition(".")[2] or g.exercise)}'
                              f'</code></a> <span class="lost">({_lost(g, adjust)})</span>' for g in unwritten)
            what = "Not written yet" if all(g.status == Status.NOT_IMPLEMENTED for g in unwritten) else \
                "Not written yet or missing"
            body.append(f'<p><b>{e(what)}</b> in {e(title(r.chapter).split(":")[0])}: {links}</p>')
    body.append("</section>")
    return "".join(body)
