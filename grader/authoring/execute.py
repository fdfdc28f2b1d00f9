"""Run solution notebooks top to bottom in a fresh course kernel and save them with their outputs.

`python -m grader execute solutions/02_dtypes.ipynb [...] [--kernel NAME] [--timeout S]`
Solutions are committed with their outputs (nbval compares them); this is how they are made. It prints
each notebook's run time, the figure the course promises (about a minute on a 2-core CPU).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import CellExecutionError

from grader.selfcheck import client_for


def execute(path: Path, kernel: str = "resource-accounting", timeout: int = 600) -> float:
    """Execute `path` in place (cwd: its folder); seconds taken. Raises CellExecutionError on a failing cell."""
    nb = nbformat.read(path, as_version=4)
    client = client_for(nb, path.parent, timeout, allow_errors=False, kernel_name=kernel)
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nb.metadata.pop("widgets", None)
    text = nbformat.writes(nb)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader execute", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--kernel", default="resource-accounting")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        try:
            seconds = execute(path, args.kernel, args.timeout)
        except CellExecutionError as e:
            print(f"{path}: a cell failed; nothing written\n{e}", file=sys.stderr)
            return 1
        print(f"{path}: ran in {seconds:.1f} s")
    return 0
