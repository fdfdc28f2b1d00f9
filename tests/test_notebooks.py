"""Every chapter, in real kernels: each solution passes all its checks (public and hidden), each student
stub fails them, and every registered exercise is called in its notebook."""
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


def grade_in_kernel(path: Path, allow_errors: bool) -> dict[str, dict]:
    """Run the notebook top to bottom in a fresh kernel, then grade what it defined."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import json as _json, grader as _grader\n"
        f"print({MARK!r} + _json.dumps([r.to_dict() for r in "
        f"_grader.run_namespace(globals(), chapter={chapter_of(path)!r}, hidden=True)]))"))
    client = NotebookClient(nb, kernel_name="python3", timeout=600, allow_errors=allow_errors,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    assert MARK in text, f"grading cell printed no results: {nb.cells[-1].outputs}"
    return {r["exercise"]: r for r in json.loads(text.split(MARK, 1)[1])}


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
def test_solution_passes_every_check(path):
    results = grade_in_kernel(path, allow_errors=False)
    assert results
    failing = {k: [(c["name"], c["message"]) for c in r["checks"] if c["status"] != "passed"]
               for k, r in results.items() if r["status"] != "passed"}
    assert not failing
    assert all(r["score"] == r["points"] for r in results.values())


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_student_notebook_fails_every_check(path):
    student = ROOT / "notebooks" / path.name
    assert student.exists(), "run `make student`"
    results = grade_in_kernel(student, allow_errors=True)
    assert results
    assert {k: r["status"] for k, r in results.items()} == {k: "not_implemented" for k in results}
    assert all(r["score"] == 0 for r in results.values())
