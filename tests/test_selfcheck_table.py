"""`python -m grader test`'s table: what a student reads about each exercise before handing in.

A half-right answer shows its public checks, its points on them (said to be the public checks' only), and under
the table which check to fix first, how many points it costs and its message; a kernel's own stderr (the
profiler's "USDT: ... profiler_start" lines in chapter 09) never lands between the tables.
"""
from __future__ import annotations

import nbformat

from grader import selfcheck
from grader.runner import run_exercise
from tests.test_tensors_answers import element_offset_loop


def broken_offset(x, index):
    return x.storage_offset() + index[0] * x.stride(0) + index[1] * x.stride()[1] + index[2]


def notebook_check(*results) -> selfcheck.NotebookCheck:
    return selfcheck.NotebookCheck(path=selfcheck.Path("01_tensors.ipynb"), chapter="tensors", seconds=3.0,
                                   exercises=[r.to_dict() for r in results])


def test_the_table_names_the_check_the_points_and_the_first_message(capsys, monkeypatch):
    """Catches the table's bare "your code raised an error": the check, the points lost and the message with
    the inputs follow it; and catches points that do not say they count the public checks only."""
    monkeypatch.setenv("COLUMNS", "200")
    raised = run_exercise("tensors.element_offset", broken_offset)
    good = run_exercise("tensors.element_offset", element_offset_loop)
    stub = run_exercise("tensors.same_storage", lambda x, y: (_ for _ in ()).throw(NotImplementedError))
    assert raised.status == "error" and good.status == "passed" and stub.status == "not_implemented"
    selfcheck._report([notebook_check(raised, good, stub)])
    out = capsys.readouterr().out
    assert "points on public checks only: grading adds hidden checks" in out
    assert f"{raised.score:g}/{raised.points:g}" in out and f"{good.points:g}/{good.points:g}" in out
    first = next(c for c in raised.checks if not c.passed)
    [line] = [line for line in out.splitlines() if line.startswith("  element_offset:")]
    assert line.startswith(f"  element_offset: your code raised an error in the check \"{first.description}\" "
                           f"(-{raised.points - raised.score:g} points): IndexError"), line
    assert "called with (" in line
    assert not [line for line in out.splitlines() if line.startswith("  same_storage:")]  # nothing to fix yet


def test_a_kernels_own_stderr_does_not_reach_the_terminal(tmp_path, capfd):
    """Catches the profiler's USDT lines printed into the table: the kernel writes them to its file descriptor 2,
    which the self-check's kernel no longer shares with the terminal."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\nos.write(2, b'USDT:2026 SyncActivityProfilerHandler.cpp:52] profiler_start\\n')\nprint('ran')")])
    path = tmp_path / "01_tensors.ipynb"
    nbformat.write(nb, path)
    result = selfcheck.run_notebook(path, timeout=120, save=tmp_path / "ran")
    assert result.problem == "", result.problem
    ran = nbformat.read(tmp_path / "ran" / path.name, as_version=4)
    assert "ran" in "".join(o.get("text", "") for o in ran.cells[0].outputs)
    captured = capfd.readouterr()
    assert "USDT" not in captured.out + captured.err


def test_problems_is_empty_when_everything_passes():
    good = run_exercise("tensors.element_offset", element_offset_loop)
    assert selfcheck.problems([good.to_dict()]) == []
