"""`python -m grader selfcheck [NOTEBOOK ...]`: run your notebooks top to bottom and see where each exercise stands.

What a student runs before handing in (`make test` in the student release): every notebook is executed
in a fresh kernel, as "Restart Kernel and Run All" would, then the public checks of each exercise run
on what it defined. It prints a table per chapter (passed, failed, not implemented yet...) and says
which cells raised. Hidden checks are not part of the student release; the instructor's grading adds them.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader import chapters, language
from grader.results import Status

MARK = "@@SELFCHECK@@"
_STYLE = {"ok": "green", "bad": "red", "warn": "yellow", "muted": "dim"}  # a Status's tone, in the terminal


def _shown(status: str) -> str:
    """A status as the self-check's table shows it: the Status's own words, in its tone."""
    known = Status.of(status)
    if known is None:
        return status
    return f"[{_STYLE[known.tone]}]{_lowered(_words(known))}[/]"


def _words(status: Status) -> str:
    """The Status's words in the release's language (grader.language)."""
    return language.status_words(status.value, status.words)


def _lowered(words: str) -> str:
    return words[0].lower() + words[1:]


@dataclass
class NotebookCheck:
    """One notebook's run: the cells that raised, and each exercise's public-check result."""
    path: Path
    chapter: str
    seconds: float = 0.0
    cell_errors: list[str] = field(default_factory=list)   # "cell 12: ValueError: ..."
    exercises: list[dict] = field(default_factory=list)    # ExerciseResult.to_dict() of each exercise
    problem: str = ""                                       # why the notebook could not be run at all


def chapter_of(path: Path) -> str | None:
    """The chapter key of a notebook file, by the rule grading uses (`jdoe-01-tensors.ipynb` -> `tensors`)."""
    stem = chapters.chapter_of(path.name)
    return chapters.key(stem) if stem is not None else None


def unix_sockets() -> bool:
    """Whether kernels can talk over Unix sockets here (zmq's ipc transport: not on Windows)."""
    import os

    import zmq

    return os.name != "nt" and bool(zmq.has("ipc"))


def client_for(nb, folder: Path, timeout: int, allow_errors: bool, kernel_name: str = "python3"):
    """A NotebookClient whose kernel runs in `folder` and talks over private Unix sockets (no TCP port, and
    none of the kernel's warnings about unencrypted TCP); over TCP on localhost where there are none (Windows)."""
    import os
    import shutil
    import tempfile
    import weakref

    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    sockets = tempfile.mkdtemp(prefix="grader-ipc-")
    if unix_sockets():
        km = KernelManager(kernel_name=kernel_name, transport="ipc", ip=os.path.join(sockets, "kernel"))
    else:
        km = KernelManager(kernel_name=kernel_name, transport="tcp", ip="127.0.0.1")
    client = NotebookClient(nb, km=km, kernel_name=kernel_name, timeout=timeout, allow_errors=allow_errors,
                            record_timing=False, resources={"metadata": {"path": str(folder)}})
    client.owns_km = True  # so nbclient shuts the kernel down when it is done, as with a manager of its own
    weakref.finalize(client, shutil.rmtree, sockets, True)
    return client


def run_notebook(path: Path, timeout: int = 600, save: Path | None = None) -> NotebookCheck:
    """Execute `path` in a fresh kernel (cwd: its folder), then run the public checks of its chapter there."""
    import nbformat
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    chapter = chapter_of(path) or ""
    result = NotebookCheck(path, chapter)
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:
        result.problem = f"cannot be read as a notebook ({type(e).__name__})"
        return result
    nb.cells.append(nbformat.v4.new_code_cell(
        "import json as _json, grader as _grader\n"
        f"print({MARK!r} + _json.dumps([r.to_dict() for r in "
        f"_grader.run_namespace(globals(), chapter={chapter!r}, hidden=False)]))"))
    client = client_for(nb, path.parent, timeout, allow_errors=True)
    start = time.perf_counter()
    try:
        # The kernel's own stderr is C++ libraries' chatter (the profiler's "USDT: ... profiler_start" lines in
        # chapter 09), not the notebook's: cells' output comes over Jupyter's channels. It would land between
        # the tables.
        client.execute(stderr=subprocess.DEVNULL)
    except (CellTimeoutError, DeadKernelError) as e:
        result.problem = f"stopped: {type(e).__name__}"
    result.seconds = time.perf_counter() - start
    for i, cell in enumerate(nb.cells[:-1], 1):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                result.cell_errors.append(f"cell {i}: {out.get('ename')}: {str(out.get('evalue'))[:200]}")
    text = "".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []) if o.get("output_type") == "stream")
    if MARK in text:
        result.exercises = json.loads(text.split(MARK, 1)[1])
    elif not result.problem:
        result.problem = "the checks did not run"
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, save / path.name)
    return result


def _report(results: list[NotebookCheck]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for r in results:
        table = Table(title=f"{r.path.name} ({r.seconds:.0f} s)", title_justify="left", expand=False,
                      caption=language.phrase("table_caption"), caption_justify="left")
        for column in ("column_exercise", "column_checks", "column_points", "column_status"):
            table.add_column(language.phrase(column))
        for ex in r.exercises:
            checks = ex.get("checks", [])
            passed = sum(c["status"] == "passed" for c in checks)
            table.add_row(ex["exercise"].split(".", 1)[1], f"{passed}/{len(checks)}",
                          f"{ex.get('score', 0):g}/{ex.get('points', 0):g}", _shown(ex["status"]))
        console.print(table)
        for line in problems(r.exercises):
            console.print(f"  {line}", soft_wrap=True, markup=False, highlight=False)
        for line in r.cell_errors:
            console.print(f"  [red]{line}[/]", soft_wrap=True)
        if r.problem:
            console.print(f"  [red]{r.problem}[/]")
    done = sum(ex["status"] == "passed" for r in results for ex in r.exercises)
    total = sum(len(r.exercises) for r in results)
    for line in closing_lines(done, total):  # each line shorter than 80 columns: no terminal breaks a phrase
        console.print(line, soft_wrap=True)


def problems(exercises: list[dict]) -> list[str]:
    """For each exercise that was written but does not pass: its first failing check, the points it costs on the
    public checks, and that check's message (what a student fixes first)."""
    lines = []
    for ex in exercises:
        if ex["status"] in ("passed", "not_implemented"):
            continue
        name = ex["exercise"].split(".", 1)[1]
        checks = ex.get("checks", [])
        first = next((c for c in checks if c["status"] != "passed"), None)
        lost = f"{ex.get('points', 0) - ex.get('score', 0):g}"
        if first is None:
            lines.append(f"{name}: {ex.get('message', '')}")
            continue
        known = Status.of(first["status"])
        words = _words(known).lower() if known else first["status"].lower()
        message = first.get("message", "")
        message = message if len(message) <= 300 else message[:297] + "..."
        description = language.description(ex["exercise"], first.get("name", ""), first["description"])
        lines.append(language.phrase("first_problem", name=name, words=words, description=description, lost=lost,
                                     message=message))
    return lines


def closing_lines(done: int, total: int) -> list[str]:
    """The summary under the tables, one short line per thought."""
    return language.phrase("closing", done=done, total=total).split("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader selfcheck", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks or folders (default: notebooks/)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--save", type=Path, help="also save the executed notebooks in this folder")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (600)")
    args = parser.parse_args(argv)
    paths: list[Path] = []
    for p in args.notebooks or [Path("notebooks")]:
        paths += sorted(p.glob("*.ipynb")) if p.is_dir() else [p]
    paths = [p for p in paths if chapter_of(p)]
    if not paths:
        print("no chapter notebooks found (names like 01_tensors.ipynb or jdoe-01-tensors.ipynb)", file=sys.stderr)
        return 2
    results = [run_notebook(p, args.timeout, args.save) for p in paths]
    _report(results)
    if args.json:
        args.json.write_text(json.dumps([{"notebook": str(r.path), "chapter": r.chapter, "seconds": round(r.seconds, 1),
                                          "cell_errors": r.cell_errors, "problem": r.problem,
                                          "exercises": r.exercises} for r in results], indent=1) + "\n")
    return 0
