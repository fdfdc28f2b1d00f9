"""The `%%needs` magic: a cell that uses an unwritten exercise prints one skip line, in one wording whatever
the reason (a stub function, a missing name, a class with one method still a stub)."""
from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from grader import needs

ONE_WORDING = "Skipped: this cell uses {}, not written yet. Run it again once {} written."


@pytest.fixture(scope="module")
def shell() -> Iterator[InteractiveShell]:
    """An IPython shell in this process. Creating one makes its namespace module `sys.modules["__main__"]`, an
    object without `__spec__`: left there, every later test in the process that starts a forkserver failed
    (multiprocessing reads `__main__.__spec__`; tests/test_regrade.py after this file, on one pytest worker)."""
    main = sys.modules["__main__"]
    sh = InteractiveShell.instance()
    needs.register(sh)
    yield sh
    InteractiveShell.clear_instance()
    sys.modules["__main__"] = main


def skip_line(shell: InteractiveShell, capsys, setup: str, cell: str) -> str:
    """What `%%needs` printed for `cell` after `setup` ran (the namespace is fresh for each call)."""
    shell.user_ns.clear()
    shell.run_cell(setup, store_history=False).raise_error()
    capsys.readouterr()
    result = shell.run_cell(cell, store_history=False)
    result.raise_error()
    return capsys.readouterr().out.strip()


STUB = "def f(x):\n    raise NotImplementedError\n"
PARTLY_WRITTEN = ("class AdaGrad:\n    def __init__(self):\n        self.groups = [1]\n"
                  "    def step(self):\n        for group in self.groups:\n"
                  "            raise NotImplementedError('the update')\n"
                  "def g(x):\n    return x\n")


def test_a_stub_is_skipped_with_the_wording(shell, capsys):
    assert skip_line(shell, capsys, STUB, "%%needs f\nprint(f(1))") == ONE_WORDING.format("`f`", "it is")


def test_a_missing_name_reads_the_same(shell, capsys):
    out = skip_line(shell, capsys, STUB, "%%needs f nothing_here\nprint(1)")
    assert out == ONE_WORDING.format("`f`, `nothing_here`", "they are")


def test_a_partly_written_class_reads_the_same_and_is_named(shell, capsys):
    """step() raises inside its loop: not a stub by its body (no top-level raise), so the cell runs and raises;
    the skip line names the class that raised, in the same words as for a stub."""
    out = skip_line(shell, capsys, PARTLY_WRITTEN, "%%needs g AdaGrad\nprint(g(1))\nAdaGrad().step()")
    assert out.splitlines() == ["1", ONE_WORDING.format("`AdaGrad`", "it is")]


def test_a_written_cell_runs_and_its_errors_show(shell, capsys):
    shell.user_ns.clear()
    shell.run_cell("def h(x):\n    return x + 1\n", store_history=False)
    result = shell.run_cell("%%needs h\nprint(h(1))\n1 / 0", store_history=False)
    assert "2" in capsys.readouterr().out and isinstance(result.error_in_exec, ZeroDivisionError)


def test_raised_by_falls_back_to_every_name():
    try:
        raise NotImplementedError
    except NotImplementedError as e:
        assert needs.raised_by(["a", "b"], {}, e) == ["a", "b"]
