"""Every chapter, in real kernels.

Each solution notebook is executed once, by nbval (`make test` runs it over solutions/): its last cell,
left out of the student notebook, asserts that every exercise passes every public and hidden check
there, so the solutions are checked in the notebook without a second run. The student notebooks run
top to bottom in the installed student release (tests/test_release.py), and both kinds are graded
under `make grade` in the demo cohort (tests/test_demo_grading.py).
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from grader import chapters, registry

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))


def chapter_of(path: Path) -> str:
    """The exercise-id prefix of a solution notebook, by the one rule the grader uses."""
    stem = chapters.chapter_of(path.name)
    assert stem is not None, f"{path.name} names no chapter"
    return chapters.key(stem)


def test_there_are_chapters():
    assert SOLUTIONS, "no solution notebooks found"


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_every_exercise_is_checked_once_in_its_notebook(path):
    nb = nbformat.read(path, as_version=4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    called = re.findall(r'grader\.check\(\s*"([^"]+)"', source)
    expected = [e.id for e in registry.load().of(chapter_of(path))]
    assert expected, f"no exercises registered for {chapter_of(path)}"
    assert sorted(called) == sorted(expected)
    assert called == expected, "checks should appear in the order the exercises are declared"


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solution_ends_by_asserting_every_check_passes(path):
    """nbval runs this cell with the rest: a solution that fails a hidden check fails `make test`."""
    nb = nbformat.read(path, as_version=4)
    last = nb.cells[-1]
    assert last.cell_type == "code" and "solution-only" in last.metadata.get("tags", [])
    assert f'assert_all_pass(globals(), "{chapter_of(path)}")' in last.source
    shown = "".join(o.get("text", "") for o in last.get("outputs", []))
    assert "exercises pass all" in shown, "re-run the solution notebook (python -m grader execute)"


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_no_cell_writes_to_a_fixed_path_outside_the_notebooks_own_folders(path):
    """Caught: a cell that saves a figure to "/tmp/ch10_step.png", which exists on no Windows machine and is left
    behind on every other; a chapter's files go in the folder it makes with tempfile.mkdtemp."""
    nb = nbformat.read(path, as_version=4)
    fixed = [line.strip() for c in nb.cells if c.cell_type == "code" for line in c.source.splitlines()
             if re.search(r"""["'](/tmp|/var/tmp|C:\\\\)""", line)]
    assert fixed == [], fixed
