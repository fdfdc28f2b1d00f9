"""The demo cohort `make grade` grades when given no submissions: three synthetic students made from solutions/.

- Ada Lovelace: every exercise solved; her file renamed the way a learning platform renames a re-upload.
- Ben Bitdiddle: the student notebook as handed out, nothing solved.
- Chloé Dubois: half the exercises solved, submitted as a zip with the notebook in a subfolder.
Generated, never edited: `python -m grader demo` rewrites it, `--check` fails if it is out of date.
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

from grader.authoring.student import _is_solution_only, student_notebook
from grader.authoring.zipped import zip_bytes
from grader.chapters import chapter_of

OUT = Path("demo/submissions")
_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "<!-- BEGIN SOLUTION -->", "<!-- END SOLUTION -->")


def _unmarked(source: str) -> str:
    """A student's answer: the solution without the authoring markers."""
    return "\n".join(line for line in source.split("\n") if line.strip() not in _MARKERS)


def answered(solution: nbformat.NotebookNode, fraction: float) -> nbformat.NotebookNode:
    """The student notebook with the first `fraction` of its answer cells filled in from the solution."""
    kept = [c for c in solution.cells if not _is_solution_only(c)]
    nb = student_notebook(solution)
    answer_cells = [i for i, (s, c) in enumerate(zip(kept, nb.cells)) if s.source != c.source]
    for i in answer_cells[: round(len(answer_cells) * fraction)]:
        nb.cells[i] = copy.deepcopy(nb.cells[i])
        nb.cells[i].source = _unmarked(kept[i].source)
    return nb


def _text(nb: nbformat.NotebookNode) -> bytes:
    text = nbformat.writes(nb)
    return (text if text.endswith("\n") else text + "\n").encode("utf-8")


def expected(solutions: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every demo file."""
    files: dict[str, bytes] = {}
    chloe: dict[str, bytes] = {}
    for path in sorted(p for p in solutions.glob("*.ipynb") if chapter_of(p.name)):
        sol = nbformat.read(path, as_version=4)
        files[f"Ada Lovelace/{path.stem} (1).ipynb"] = _text(answered(sol, 1.0))
        files[f"Ben Bitdiddle/{path.name}"] = _text(answered(sol, 0.0))
        chloe[f"chapters/{path.name}"] = _text(answered(sol, 0.5))
    files["Chloé Dubois.zip"] = zip_bytes(chloe)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader demo", description=__doc__.splitlines()[0])
    parser.add_argument("--solutions", type=Path, default=Path("solutions"))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="fail if the demo cohort is not what generation makes")
    args = parser.parse_args(argv)
    want = expected(args.solutions)
    have = {p.relative_to(args.out).as_posix(): p.read_bytes() for p in args.out.rglob("*") if p.is_file()} \
        if args.out.is_dir() else {}
    if args.check:
        stale = sorted(set(want) ^ set(have) | {k for k in want if k in have and want[k] != have[k]})
        if stale:
            print(f"{args.out} is out of date ({', '.join(stale)}); run `python -m grader demo`", file=sys.stderr)
            return 1
        return 0
    for name in set(have) - set(want):
        (args.out / name).unlink()
    for name, data in want.items():
        path = args.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if have.get(name) != data:
            path.write_bytes(data)
    print(f"wrote {len(want)} files to {args.out}")
    return 0
