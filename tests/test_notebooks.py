"""Every chapter, in real kernels.

Each solution notebook is executed once, by nbval (`make test` runs it over solutions/): its last cell,
left out of the student notebook, asserts that every exercise passes every public and hidden check
there, so the solutions are checked in the notebook without a second run. Here each *student*
notebook runs top to bottom as "Run All" would (no errors allowed): cells that use unwritten
exercises say so in one line, and every exercise reports not_implemented. The same under `make grade`
is tested on the demo cohort (tests/test_demo_grading.py).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from grader import registry

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
MARK = "@@GRADES@@"


def chapter_of(path: Path) -> str:
    return path.stem.split("_", 1)[1]


def test_there_are_chapters():
    assert SOLUTIONS, "no solution notebooks found"


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_every_exercise_is_checked_once_in_its_notebook(path):
    nb = nbformat.read(path, as_version=4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    called = re.findall(r'grader\.check\(\s*"([^"]+)"', source)
    expected = [e.id for e in registry.all_exercises(chapter_of(path))]
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


def run_student(path: Path) -> tuple[nbformat.NotebookNode, dict[str, dict]]:
    """Run a student notebook top to bottom as "Run All" does (stop at the first error), then grade it."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import json as _json, grader as _grader\n"
        f"print({MARK!r} + _json.dumps([r.to_dict() for r in "
        f"_grader.run_namespace(globals(), chapter={chapter_of(path)!r}, hidden=True)]))"))
    client = NotebookClient(nb, kernel_name="python3", timeout=600, allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    assert MARK in text, f"grading cell printed no results: {nb.cells[-1].outputs}"
    return nb, {r["exercise"]: r for r in json.loads(text.split(MARK, 1)[1])}


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_untouched_student_notebook_runs_to_the_end(path):
    student = ROOT / "notebooks" / path.name
    assert student.exists(), "run `make student`"
    nb, results = run_student(student)
    errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert not errors
    waiting = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%needs")]
    for cell in waiting:
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert text.startswith("⏸ Skipped: this cell uses") and text.count("\n") == 1, text
        assert not any(o.output_type == "display_data" for o in cell.outputs), "a waiting cell drew something"
    checks = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("grader.check(")]
    for cell in checks:
        shown = json.dumps([o.get("data", {}) for o in cell.outputs])
        assert "not implemented yet" in shown, cell.source
    assert results
    assert {k: r["status"] for k, r in results.items()} == {k: "not_implemented" for k in results}
    assert all(r["score"] == 0 for r in results.values())
