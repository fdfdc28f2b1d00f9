"""Render an exercise's results for a student: plain text for terminals, a compact HTML table for Jupyter.

Hidden checks show their name and pass/fail only; their messages never reach these renderers.
"""
from __future__ import annotations

import html

from grader.results import CheckResult, ExerciseResult

_MARK = {"passed": "✓", "not_implemented": "·"}
_COLOUR = {"passed": "#1a7f37", "not_implemented": "#6e7781", "failed": "#cf222e", "error": "#cf222e",
           "timeout": "#bc4c00"}
_LABEL = {"passed": "passed", "failed": "failed", "error": "error", "timeout": "timeout",
          "not_implemented": "not implemented yet", "missing": "missing"}


def _kind(r: ExerciseResult) -> str:
    """'public checks' in the notebook, where hidden ones have not run: their points are not the grade."""
    return "checks" if any(c.hidden for c in r.checks) else "public checks"


def points_words(r: ExerciseResult) -> str:
    """'1/2 points' when the hidden checks ran; in the notebook, where they did not, the points are the public
    checks' only, and say so: grading with the hidden ones may give less (2/4 public checks, then 0.57/2)."""
    if any(c.hidden for c in r.checks) or not r.checks:
        return f"{r.score:g}/{r.points:g} points"
    return f"{r.score:g}/{r.points:g} points on public checks (grading adds hidden checks)"


def _headline(r: ExerciseResult) -> str:
    passed = sum(c.passed for c in r.checks)
    counted = f"{passed}/{len(r.checks)} {_kind(r)}" if r.checks else "no checks ran"
    return f"{r.exercise}: {_LABEL.get(r.status, r.status)} — {counted}, {points_words(r)}"


def _line(c: CheckResult) -> str:
    desc = c.description + (" (hidden)" if c.hidden else "")
    if c.passed:
        return desc
    return f"{desc}: {c.shown_message()}"


def render_text(r: ExerciseResult) -> str:
    lines = [_headline(r)]
    if r.status == "not_implemented":
        lines.append("  Replace `raise NotImplementedError` with your code, then run this cell again.")
        return "\n".join(lines)
    if not r.checks:
        lines.append(f"  {r.message}")
    for c in r.checks:
        lines.append(f"  {_MARK.get(c.status, '✗')} {_line(c)}")
    return "\n".join(lines)


def render_html(r: ExerciseResult) -> str:
    colour = _COLOUR.get(r.status, "#cf222e")
    head = (f'<div style="font-family:sans-serif;font-size:13px;border-left:4px solid {colour};'
            f'padding:2px 8px;margin:4px 0">'
            f'<b>{html.escape(r.exercise)}</b> '
            f'<span style="color:{colour};font-weight:bold">{html.escape(_LABEL.get(r.status, r.status))}</span> '
            f'— {sum(c.passed for c in r.checks)}/{len(r.checks)} {_kind(r)}, {html.escape(points_words(r))}')
    if r.status == "not_implemented":
        return head + "<br>Replace <code>raise NotImplementedError</code> with your code, then run this cell again.</div>"
    if not r.checks:
        return head + f"<br>{html.escape(r.message)}</div>"
    rows = []
    for c in r.checks:
        col = _COLOUR.get(c.status, "#cf222e")
        desc = html.escape(c.description) + (" <i>(hidden)</i>" if c.hidden else "")
        msg = "" if c.passed else html.escape(c.shown_message())
        rows.append(f'<tr><td style="color:{col};padding:0 6px">{_MARK.get(c.status, "✗")}</td>'
                    f'<td style="text-align:left;padding:0 6px">{desc}</td>'
                    f'<td style="text-align:left;padding:0 6px;color:{col}">{msg}</td></tr>')
    return head + '<table style="margin:2px 0">' + "".join(rows) + "</table></div>"
