"""Write OUT/similarity.csv and OUT/similarity.html: the pairs of students whose code for an exercise is similar.

The page shows each pair's two pieces of code side by side with the matching lines marked, and says "similar",
never that one took from the other: students who followed the same lecture write alike, and only the
instructor can tell.
One self-contained file (inline CSS, no script), every student's name and line of code escaped.
"""
from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.autograde import similarity
from grader.autograde.report import _csv, write_atomic
from grader.autograde.similarity import SimilarPair

HEADER = ("exercise", "student_a", "student_b", "similarity", "share_a", "share_b", "shared_tokens",
          "lines_a", "lines_b")
SHOWN = 100  # pairs per exercise on the page (the CSV lists every one)


@dataclass(frozen=True)
class ExerciseSimilarity:
    """One exercise's comparison: how many students wrote code of their own, and the pairs reported."""
    exercise: str
    students: int
    own_code: int
    pairs: list[SimilarPair]


def _ranges(lines: Sequence[tuple[int, int]]) -> str:
    return ";".join(f"{a}-{b}" if a != b else str(a) for a, b in lines)


def similarity_csv(results: Sequence[ExerciseSimilarity]) -> str:
    """A row per reported pair, most similar first within each exercise."""
    rows: list[Sequence[object]] = [HEADER]
    for r in results:
        rows += [(p.exercise, p.a, p.b, f"{p.similarity:.3f}", f"{p.share_a:.3f}", f"{p.share_b:.3f}",
                  p.shared_tokens, _ranges(p.lines_a), _ranges(p.lines_b)) for p in r.pairs]
    return _csv(rows)


_CSS = """*{box-sizing:border-box}
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:72rem;margin:0 auto;padding:1rem;color:#1f2328}
h1{font-size:1.5rem;margin:.5rem 0}h2{font-size:1.2rem;margin:2rem 0 .5rem;border-bottom:1px solid #d0d7de;overflow-wrap:anywhere}
h3{font-size:1rem;margin:1.25rem 0 .25rem;overflow-wrap:anywhere}p,li,td,th{overflow-wrap:anywhere}
.note{color:#57606a;font-size:.9rem}
table{border-collapse:collapse;width:100%;table-layout:fixed;font-size:.9rem}
th,td{border-bottom:1px solid #d0d7de;padding:.25rem .35rem;text-align:left}td.n,th.n{text-align:right;width:6rem}
.pair{display:grid;grid-template-columns:repeat(auto-fit,minmax(17rem,1fr));gap:.5rem;margin:.25rem 0 1rem}
.side{min-width:0;border:1px solid #d0d7de;border-radius:6px}
.side h4{margin:0;padding:.25rem .5rem;font-size:.9rem;background:#f6f8fa;border-bottom:1px solid #d0d7de;overflow-wrap:anywhere}
pre{margin:0;padding:.25rem 0;overflow-x:auto;font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,monospace}
pre span{display:block;padding:0 .5rem;white-space:pre}pre span.m{background:#fff1c2}
pre i{display:inline-block;width:2.2rem;color:#8c959f;font-style:normal;user-select:none}"""


def _code(code: str, lines: Sequence[tuple[int, int]]) -> str:
    marked = {n for a, b in lines for n in range(a, b + 1)}
    return "<pre>" + "".join(
        f'<span{" class=m" if n in marked else ""}><i>{n}</i>{html.escape(line)}</span>'
        for n, line in enumerate(code.split("\n"), 1)) + "</pre>"


def _pair(p: SimilarPair) -> str:
    e = html.escape
    return (f'<h3>{e(p.a)} and {e(p.b)}: {100 * p.similarity:.0f}% similar</h3>'
            f'<p class="note">{p.shared_tokens} tokens in common: {100 * p.share_a:.0f}% of {e(p.a)}\'s code, '
            f'{100 * p.share_b:.0f}% of {e(p.b)}\'s. Matching lines are marked.</p>'
            f'<div class="pair"><div class="side"><h4>{e(p.a)}</h4>{_code(p.code_a, p.lines_a)}</div>'
            f'<div class="side"><h4>{e(p.b)}</h4>{_code(p.code_b, p.lines_b)}</div></div>')


def similarity_html(results: Sequence[ExerciseSimilarity], threshold: float, min_shared: int) -> str:
    """The page: what was compared and how, a summary per exercise, then every reported pair side by side."""
    e = html.escape
    total = sum(len(r.pairs) for r in results)
    rows = "".join(f'<tr><td><a href="#{e(r.exercise)}"><code>{e(r.exercise)}</code></a></td>'
                   f'<td class="n">{r.own_code} of {r.students}</td><td class="n">{len(r.pairs)}</td></tr>'
                   for r in results)
    body = ["<header><h1>Similar code</h1>",
            f"<p>{total} pair{'s' if total != 1 else ''} of students whose code for an exercise is similar. "
            "Similar code proves nothing by itself: students taught the same way write alike, and a short exercise "
            "leaves little room to differ. Read the lines side by side and decide.</p>",
            f'<p class="note">How: each student\'s code for an exercise is the cells that define its functions; '
            "the release's own code is ignored, comments are dropped and every name counts as the same name, so "
            f"renaming and reordering do not hide anything. A pair is listed when it shares at least {min_shared} "
            f"tokens and that covers at least {100 * threshold:.0f}% of either student's own code "
            f"(copydetect's winnowing, MOSS's method, on runs of {similarity.NOISE} tokens).</p></header>",
            '<section><h2>Per exercise</h2><table><thead><tr><th>exercise</th><th class="n">own code</th>'
            f'<th class="n">pairs</th></tr></thead><tbody>{rows}</tbody></table></section>']
    for r in results:
        if not r.pairs:
            continue
        body.append(f'<section id="{e(r.exercise)}"><h2><code>{e(r.exercise)}</code></h2>')
        body += [_pair(p) for p in r.pairs[:SHOWN]]
        if len(r.pairs) > SHOWN:
            body.append(f'<p class="note">{len(r.pairs) - SHOWN} more pairs in similarity.csv.</p>')
        body.append("</section>")
    head = ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>Similar code</title>\n<style>\n{_CSS}\n</style>\n</head>\n<body>\n")
    return head + "\n".join(body) + "\n</body>\n</html>\n"


def write_similarity(out: Path, results: Sequence[ExerciseSimilarity], threshold: float,
                     min_shared: int) -> list[Path]:
    """Write OUT/similarity.csv and OUT/similarity.html; the files that changed."""
    files = {out / "similarity.csv": similarity_csv(results),
             out / "similarity.html": similarity_html(results, threshold, min_shared)}
    return [path for path, text in files.items() if write_atomic(path, text)]
