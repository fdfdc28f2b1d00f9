"""Generate the student notebooks (notebooks/) from the solution notebooks (solutions/).

`python -m grader student [--solutions DIR] [--out DIR] [--check]`; `--check` writes nothing and
exits 1 when OUT is not exactly what generation would produce (the test suite runs it).
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from grader import demonstrations
from grader.authoring.colab import setup_cell
from grader.authoring.markers import MarkerError, find_forbidden, strip_code, strip_markdown

SOLUTION_ONLY_TAG = "solution-only"
# Notebook metadata that changes from run to run or machine to machine; kernelspec and
# language_info stay so the student notebook opens on the right kernel.
VOLATILE_METADATA = ("widgets", "papermill", "execution", "vscode", "colab")


def _where(path: Path | str, index: int, cell: NotebookNode) -> str:
    return f"{path}: cell {index} (id {cell.get('id', '?')})"


def student_cell(cell: NotebookNode, where: str) -> NotebookNode:
    """Student copy of one cell: blocks stripped, outputs and execution count cleared."""
    new = copy.deepcopy(cell)
    if new.cell_type == "code":
        new.source = strip_code(new.source, where)
        new.outputs = []
        new.execution_count = None
    elif new.cell_type == "markdown":
        new.source = strip_markdown(new.source, where)
    return new


def _is_solution_only(cell: NotebookNode) -> bool:
    return SOLUTION_ONLY_TAG in cell.get("metadata", {}).get("tags", [])


def student_notebook(nb: NotebookNode, path: Path | str = "<notebook>",
                     course_url: str | None = None) -> NotebookNode:
    """Student copy of a whole notebook; `path` only names it in error messages. With `course_url` (where
    the release is published) it starts with the Colab set-up cell (grader.authoring.colab)."""
    new = copy.deepcopy(nb)
    new.cells = [student_cell(cell, _where(path, i, cell))
                 for i, cell in enumerate(nb.cells) if not _is_solution_only(cell)]
    demonstrations.mark(new.cells)  # what grading may skip while the student leaves it unchanged
    if course_url:
        new.cells.insert(0, setup_cell(course_url))
    for key in VOLATILE_METADATA:
        new.metadata.pop(key, None)
    return new


def render(path: Path, course_url: str | None = None) -> str:
    """Exact text of the student notebook for solution notebook `path` (what Jupyter would write)."""
    nb = nbformat.read(path, as_version=4)
    student = student_notebook(nb, path, course_url)
    try:
        nbformat.validate(student)
    except nbformat.ValidationError as e:
        raise ValueError(f"{path}: the student notebook is not valid nbformat: {e.message}") from e
    text = nbformat.writes(student)
    if not text.endswith("\n"):
        text += "\n"
    leftovers = find_forbidden(text)
    if leftovers:
        shown = "; ".join(f"line {n}: {line}" for n, line in leftovers[:5])
        raise MarkerError(f"{path}: marker text left in the student notebook "
                          f"(a stray or malformed marker?): {shown}")
    return text


def expected(solutions: Path, course_url: str | None = None) -> dict[str, str]:
    """File name -> text for every notebook generation would write from `solutions`."""
    if not solutions.is_dir():
        raise FileNotFoundError(f"no solutions folder at {solutions}")
    return {p.name: render(p, course_url) for p in sorted(solutions.glob("*.ipynb"))}


def _existing(out: Path) -> list[Path]:
    return sorted(out.glob("*.ipynb")) if out.is_dir() else []


def differences(solutions: Path, out: Path) -> list[str]:
    """One line per file of `out` that differs from, is missing from or is stale against generation."""
    want = expected(solutions)
    problems = [f"stale: {p} (no {solutions / p.name})" for p in _existing(out) if p.name not in want]
    for name, text in want.items():
        target = out / name
        if not target.is_file():
            problems.append(f"missing: {target}")
        elif target.read_bytes() != text.encode("utf-8"):
            problems.append(f"differs: {target} (regenerate with `python -m grader student`)")
    return sorted(problems, key=lambda line: line.split(": ", 1)[1])


def generate(solutions: Path, out: Path, course_url: str | None = None) -> list[str]:
    """Write every student notebook into `out`, delete stale ones; return one line per file."""
    want = expected(solutions, course_url)  # render everything first: a marker error writes nothing
    out.mkdir(parents=True, exist_ok=True)
    report = []
    for stale in _existing(out):
        if stale.name not in want:
            stale.unlink()
            report.append(f"removed stale {stale} (no {solutions / stale.name})")
    for name, text in want.items():
        target = out / name
        data = text.encode("utf-8")
        if target.is_file() and target.read_bytes() == data:
            report.append(f"up to date {target}")
        else:
            target.write_bytes(data)
            report.append(f"wrote {target}")
    return report


def main(argv: list[str] | None = None) -> int:
    """CLI entry: generate (or with --check, verify) OUT from DIR."""
    parser = argparse.ArgumentParser(prog="python -m grader student", description=__doc__.splitlines()[0])
    parser.add_argument("--solutions", type=Path, default=Path("solutions"), help="default: solutions")
    parser.add_argument("--out", type=Path, default=Path("notebooks"), help="default: notebooks")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if OUT is out of date")
    args = parser.parse_args(argv)
    if args.solutions.resolve() == args.out.resolve():
        print("error: --out must not be the solutions folder", file=sys.stderr)
        return 2
    try:
        if args.check:
            problems = differences(args.solutions, args.out)
            for line in problems:
                print(line)
            if not problems:
                print(f"{args.out} is up to date with {args.solutions}")
            return 1 if problems else 0
        for line in generate(args.solutions, args.out):
            print(line)
    except (ValueError, FileNotFoundError) as e:  # MarkerError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
