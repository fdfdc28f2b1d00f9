"""Write the class report: OUT/class.json (classstats.py's figures) and OUT/class.html, the page to read them.

The page is one self-contained file (inline CSS, plots embedded as PNG, no script, no link out), every text
from a record escaped, readable on a phone. Drawing the plots takes a second, so the page carries a digest of
its figures and of this renderer, and a run whose figures did not change leaves it untouched.
"""
from __future__ import annotations

import hashlib
import html
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from grader.autograde import charts
from grader.autograde.classstats import class_figures
from grader.autograde.records import NotebookRecord
from grader.autograde.report import write_atomic

if TYPE_CHECKING:
    from grader.autograde.adjust import Adjustments

_RENDERERS = (Path(__file__), Path(charts.__file__))
_DIGEST = '<meta name="class-report-digest" content="{}">'

_CSS = """*{box-sizing:border-box}
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:60rem;margin:0 auto;padding:1rem;color:#1f2328}
h1{font-size:1.5rem;margin:.5rem 0}h2{font-size:1.25rem;margin:2rem 0 .5rem;border-bottom:1px solid #d0d7de}
h3{font-size:1.05rem;margin:1.25rem 0 .25rem}h4{font-size:.95rem;margin:.75rem 0 .25rem;overflow-wrap:anywhere}
p,li,td,th,dd,dt,summary{overflow-wrap:anywhere}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.9em}
img{max-width:100%;height:auto;display:block}
table{border-collapse:collapse;width:100%;table-layout:fixed;font-size:.9rem;margin:.5rem 0}
th,td{border-bottom:1px solid #d0d7de;padding:.25rem .35rem;text-align:left;vertical-align:top}
th{font-weight:600}td.n,th.n{text-align:right;width:5.5rem}
nav ul{padding-left:1.2rem;margin:.25rem 0}.meta,.note{color:#57606a;font-size:.9rem}
.flag{border-left:4px solid #bc4c00;background:#fff8f0;padding:.4rem .7rem;margin:.5rem 0}
ol.groups{margin:.25rem 0 .75rem;padding-left:1.4rem;font-size:.9rem}ol.groups li{margin:.15rem 0}
.example{color:#57606a}.count{font-weight:600}
dl.stats{display:grid;grid-template-columns:repeat(auto-fill,minmax(7.5rem,1fr));gap:.25rem .75rem;margin:.5rem 0}
dl.stats div{margin:0}dl.stats dt{color:#57606a;font-size:.8rem}dl.stats dd{margin:0;font-weight:600}"""


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def _stats(items: Sequence[tuple[str, object]]) -> str:
    e = html.escape
    return ('<dl class="stats">' + "".join(f"<div><dt>{e(k)}</dt><dd>{e(str(v))}</dd></div>" for k, v in items)
            + "</dl>")


def _unfair_section(figures: dict) -> list[str]:
    e = html.escape
    body = ['<section id="unfair"><h2>Checks that may be unfair</h2>',
            f'<p class="note">{e(figures["definitions"]["may be unfair"])}: reread its wording and its inputs. '
            "Hidden checks are often failed alone on purpose (edge cases); look at the public ones first.</p>"]
    if not figures["may_be_unfair"]:
        body.append("<p>None: no check is failed alone by that many students.</p>")
    for c in figures["may_be_unfair"]:
        body.append(f'<div class="flag"><b><code>{e(c["exercise"])}</code> · {e(c["description"])}</b>'
                    + (" (hidden)" if c["hidden"] else "")
                    + f'<br>{c["failed_alone"]} of {c["attempting"]} attempting students fail only this check '
                      f'({c["failed"]} fail it in all).</div>')
    body.append("</section>")
    return body


def _chapters_section(figures: dict) -> list[str]:
    e = html.escape
    body = ['<section id="chapters"><h2>Chapters</h2>',
            f'<p class="note">{e(figures["definitions"]["chapter scores"])}.</p>']
    for c in figures["chapters"]:
        s = c["scores"]
        png = charts.score_histogram(c["histogram"]["edges"], c["histogram"]["counts"], c["chapter"])
        body += [f'<h3>{e(c["title"])}</h3>',
                 _stats([("submitted", f'{c["submitted"]} of {c["students"]}'), ("late", c["late"]),
                         ("points", f'{c["max_score"]:g}'), ("median", f'{s["median"]:g}'),
                         ("quartiles", f'{s["q1"]:g} – {s["q3"]:g}'), ("mean", f'{s["mean"]:g}')]),
                 f'<img src="{charts.data_uri(png)}" width="640" height="260" '
                 f'alt="histogram of {e(c["chapter"])} scores of the {c["submitted"]} students who submitted">']
    body.append("</section>")
    return body


def _exercises_section(figures: dict) -> list[str]:
    e = html.escape
    body = ['<section id="exercises"><h2>Exercises</h2>',
            '<p class="note">Each bar is the whole class: the share of students per status.</p>']
    chapters = {c["chapter"]: c["title"] for c in figures["chapters"]}
    for chapter, title in chapters.items():
        mine = [x for x in figures["exercises"] if x["chapter"] == chapter]
        if not mine:
            continue
        names = [x["exercise"].partition(".")[2] or x["exercise"] for x in mine]
        png = charts.status_mix(names, [x["statuses"] for x in mine])
        rows = "".join(
            f'<tr><td><code>{e(n)}</code></td><td class="n">{x["mean_score"]:g} / {x["max_score"]:g}</td>'
            f'<td class="n">{_pct(x["passed_share"])}</td><td class="n">{_pct(x["not_attempted_share"])}</td>'
            f'<td>{e(", ".join(f"{k} {v}" for k, v in x["statuses"].items()))}</td></tr>'
            for n, x in zip(names, mine))
        body += [f"<h3>{e(title)}</h3>",
                 f'<img src="{charts.data_uri(png)}" alt="status of each exercise of {e(chapter)}, '
                 'as shares of the class">',
                 '<table><thead><tr><th>exercise</th><th class="n">mean</th><th class="n">passed</th>'
                 f'<th class="n">not tried</th><th>statuses</th></tr></thead><tbody>{rows}</tbody></table>']
    body.append("</section>")
    return body


def _checks_section(figures: dict) -> list[str]:
    e = html.escape
    body = ['<section id="checks"><h2>Checks and the most common failures</h2>',
            f'<p class="note">Share: {e(figures["definitions"]["failed share"])}. Groups: '
            f'{e(figures["definitions"]["failure groups"])}. Checks nobody failed are left out.</p>']
    exercise = None
    for c in sorted((c for c in figures["checks"] if c["failed"]), key=lambda c: (
            [x["exercise"] for x in figures["exercises"]].index(c["exercise"]), -c["failed_share"], c["check"])):
        if c["exercise"] != exercise:
            exercise = c["exercise"]
            body.append(f"<h3><code>{e(exercise)}</code></h3>")
        body.append(f'<h4>{e(c["description"])}{" (hidden)" if c["hidden"] else ""}: failed by '
                    f'{c["failed"]} of {c["attempting"]} ({_pct(c["failed_share"])})</h4>')
        groups = "".join(f'<li><span class="count">{g["count"]}×</span> {e(g["pattern"])}'
                         + (f'<br><span class="example">e.g. {e(g["example"])}</span>'
                            if g["example"] != g["pattern"] else "") + "</li>"
                         for g in c["failures"])
        body.append(f'<ol class="groups">{groups}</ol>')
    if exercise is None:
        body.append("<p>No check failed.</p>")
    body.append("</section>")
    return body


def _run_section(figures: dict) -> list[str]:
    e = html.escape
    run = figures["run"]
    span = f'{run["graded_from"]} to {run["graded_to"]}' if run["graded_from"] else "—"
    body = ['<section id="run"><h2>The run</h2>',
            _stats([("students", figures["students"]), ("notebooks graded", run["notebooks_graded"]),
                    ("kernel time", f'{run["kernel_seconds"]:g} s'), ("graded", span)]),
            f'<p>Isolation this run: {e(run["sandbox"] or "not recorded")}.</p>']
    if run["isolation"]:
        body.append("<p>Records by isolation:</p><ul>" + "".join(
            f"<li>{count} · {e(how)}</li>" for how, count in run["isolation"].items()) + "</ul>")
    body.append(f'<p>Notebooks graded without their unchanged demonstration cells: '
                f'{run.get("demonstrations_skipped", 0)} of {run["notebooks_graded"]}.</p>')
    again = run.get("graded_again_with_every_cell") or []
    if again:
        body.append("<p>Graded again with every cell:</p><ul>" + "".join(f"<li>{e(a)}</li>" for a in again) + "</ul>")
    body.append("<p>Skipped or noted:</p><ul>" + "".join(f"<li>{e(n)}</li>" for n in run["notes"]) + "</ul>"
                if run["notes"] else "<p>Nothing was skipped.</p>")
    body.append("</section>")
    return body


def class_html(figures: dict, digest: str = "") -> str:
    """The class report page for class.json's figures."""
    e = html.escape
    chapters = ", ".join(c["chapter"] for c in figures["chapters"])
    body = ["<header><h1>Class report</h1>",
            f'<p class="meta">{figures["students"]} students · {len(figures["chapters"])} chapters '
            f'({e(chapters)}) · {figures["run"]["notebooks_graded"]} notebooks graded</p>',
            '<nav><ul><li><a href="#unfair">Checks that may be unfair</a></li><li><a href="#chapters">Chapters'
            '</a></li><li><a href="#exercises">Exercises</a></li><li><a href="#checks">Checks and the most common '
            'failures</a></li><li><a href="#run">The run</a></li></ul></nav></header>',
            *_unfair_section(figures), *_chapters_section(figures), *_exercises_section(figures),
            *_checks_section(figures), *_run_section(figures)]
    head = ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            + (_DIGEST.format(digest) + "\n" if digest else "")
            + f"<title>Class report</title>\n<style>\n{_CSS}\n</style>\n</head>\n<body>\n")
    return head + "\n".join(body) + "\n</body>\n</html>\n"


def _digest(text: str) -> str:
    h = hashlib.sha256(text.encode("utf-8"))
    for path in _RENDERERS:
        h.update(path.read_bytes())
    return h.hexdigest()


def _page_digest(page: Path) -> str | None:
    try:
        with open(page, encoding="utf-8") as f:
            head = f.read(2000)
    except (OSError, UnicodeDecodeError):
        return None
    start = head.find('name="class-report-digest" content="')
    return head[start:].split('content="', 1)[1].split('"', 1)[0] if start >= 0 else None


def write_class_report(out: Path, records: Iterable[NotebookRecord], students: Sequence[str],
                       chapters: Sequence[str], adjust: Adjustments | None = None, notes: Sequence[str] = (),
                       sandbox: str = "") -> list[Path]:
    """Write OUT/class.json and OUT/class.html; the files that changed. Paths inside OUT are written from OUT
    ("OUT/overrides.csv"), so the same class graded into a moved or copied folder gives the same files."""
    notes = [n.replace(f"{out}{os.sep}", "OUT/") for n in notes]
    figures = class_figures(records, students, chapters, adjust, notes, sandbox)
    text = json.dumps(figures, ensure_ascii=False, indent=1) + "\n"
    written = [out / "class.json"] if write_atomic(out / "class.json", text) else []
    digest = _digest(text)
    if _page_digest(out / "class.html") != digest:
        write_atomic(out / "class.html", class_html(figures, digest))
        written.append(out / "class.html")
    return written
