"""Render an exercise's results for a student: plain text for terminals, a compact HTML table for Jupyter.

Hidden checks show their name and pass/fail only; their messages never reach these renderers. The words
around a result and each check's description come through grader.language: English, unless the student
release was built translated (its messages stay as the checks wrote them).
"""
from __future__ import annotations

import html
import re

from grader import language
from grader.results import CheckResult, ExerciseResult

_MARK = {"passed": "✓", "not_implemented": "·"}
_COLOUR = {"passed": "#1a7f37", "not_implemented": "#6e7781", "failed": "#cf222e", "error": "#cf222e",
           "timeout": "#bc4c00"}
_LABEL = {"passed": "passed", "failed": "failed", "error": "error", "timeout": "timeout",
          "not_implemented": "not implemented yet", "missing": "missing"}


def _label(status: str) -> str:
    return language.label(status, _LABEL[status]) if status in _LABEL else status


def _kind(r: ExerciseResult) -> str:
    """'public checks' in the notebook, where hidden ones have not run: their points are not the grade."""
    return language.phrase("kind_checks" if any(c.hidden for c in r.checks) else "kind_public")


def points_words(r: ExerciseResult) -> str:
    """'1/2 points' when the hidden checks ran; in the notebook, where they did not, the points are the public
    checks' only, and say so: grading with the hidden ones may give less (2/4 public checks, then 0.57/2)."""
    name = "points" if any(c.hidden for c in r.checks) or not r.checks else "points_public"
    return language.phrase(name, score=f"{r.score:g}", points=f"{r.points:g}")


def _counted(r: ExerciseResult) -> str:
    if not r.checks:
        return language.phrase("no_checks")
    return language.phrase("counted", passed=sum(c.passed for c in r.checks), total=len(r.checks), kind=_kind(r))


def _headline(r: ExerciseResult) -> str:
    return language.phrase("headline", exercise=r.exercise, label=_label(r.status), counted=_counted(r),
                           points=points_words(r))


def _description(r: ExerciseResult, c: CheckResult) -> str:
    return language.description(r.exercise, c.name, c.description)


def _line(r: ExerciseResult, c: CheckResult) -> str:
    desc = _description(r, c) + (f" {language.phrase('hidden')}" if c.hidden else "")
    if c.passed:
        return desc
    return f"{desc}: {c.shown_message()}"


def render_text(r: ExerciseResult) -> str:
    lines = [_headline(r)]
    if r.status == "not_implemented":
        lines.append(f"  {language.phrase('write_it')}")
        return "\n".join(lines)
    if not r.checks:
        lines.append(f"  {r.message}")
    for c in r.checks:
        lines.append(f"  {_MARK.get(c.status, '✗')} {_line(r, c)}")
    return "\n".join(lines)


def _code_spans(text: str) -> str:
    """Escaped HTML of `text`, its `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def render_html(r: ExerciseResult) -> str:
    colour = _COLOUR.get(r.status, "#cf222e")
    passed = sum(c.passed for c in r.checks)
    counted = language.phrase("counted", passed=passed, total=len(r.checks), kind=_kind(r))
    head = (f'<div style="font-family:sans-serif;font-size:13px;border-left:4px solid {colour};'
            f'padding:2px 8px;margin:4px 0">'
            f'<b>{html.escape(r.exercise)}</b> '
            f'<span style="color:{colour};font-weight:bold">{html.escape(_label(r.status))}</span> '
            f'— {html.escape(counted)}, {html.escape(points_words(r))}')
    if r.status == "not_implemented":
        return head + f"<br>{_code_spans(language.phrase('write_it'))}</div>"
    if not r.checks:
        return head + f"<br>{html.escape(r.message)}</div>"
    rows = []
    for c in r.checks:
        col = _COLOUR.get(c.status, "#cf222e")
        desc = html.escape(_description(r, c)) + (f" <i>{html.escape(language.phrase('hidden'))}</i>"
                                                  if c.hidden else "")
        msg = "" if c.passed else html.escape(c.shown_message())
        rows.append(f'<tr><td style="color:{col};padding:0 6px">{_MARK.get(c.status, "✗")}</td>'
                    f'<td style="text-align:left;padding:0 6px">{desc}</td>'
                    f'<td style="text-align:left;padding:0 6px;color:{col}">{msg}</td></tr>')
    return head + '<table style="margin:2px 0">' + "".join(rows) + "</table></div>"
