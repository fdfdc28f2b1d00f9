"""`python -m grader`: one table of commands, and a missing module said for what it is (issue 14 §5)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import grader.__main__ as cli

ROOT = Path(__file__).resolve().parents[1]


def missing(name: str):
    def import_module(module: str):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return import_module


def test_a_command_the_student_release_leaves_out_says_so(monkeypatch, capsys):
    monkeypatch.setattr(cli.importlib, "import_module", missing("grader.autograde"))
    assert cli.main(["grade", "subs"]) == 2
    assert "`grade` is for instructors: the student release does not include it" in capsys.readouterr().err
    monkeypatch.setattr(cli.importlib, "import_module", missing("grader.authoring"))
    assert cli.main(["release"]) == 2
    assert "is for course authors" in capsys.readouterr().err


def test_a_missing_dependency_is_not_blamed_on_the_release(monkeypatch):
    """Catches the old catch-all: psutil missing under `grade` used to read 'the release does not include it'."""
    monkeypatch.setattr(cli.importlib, "import_module", missing("psutil"))
    with pytest.raises(ModuleNotFoundError, match="psutil"):
        cli.main(["grade", "subs"])


def test_a_missing_module_of_the_student_path_is_an_error(monkeypatch):
    monkeypatch.setattr(cli.importlib, "import_module", missing("grader.course.mfu"))
    with pytest.raises(ModuleNotFoundError):
        cli.main(["mfu"])


def test_every_command_names_a_module_that_exists():
    import importlib.util
    for name, (help_text, module, _) in cli.COMMANDS.items():
        assert help_text and importlib.util.find_spec(module) is not None, name


def test_help_lists_only_the_commands_this_install_has(monkeypatch, capsys):
    """Catches the release's --help offering `grade`, `release`, `gradescope` and `similarity`, which it then
    refuses: a module the install lacks (the release leaves grader.autograde and grader.authoring out) hides
    its command from the list, and the command still says why when it is typed."""
    real = cli.importlib.util.find_spec

    def find_spec(name, *args):
        if name.startswith(("grader.autograde", "grader.authoring")):
            return None
        return real(name, *args)
    monkeypatch.setattr(cli.importlib.util, "find_spec", find_spec)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listed = capsys.readouterr().out
    for name, (help_text, module, audience) in cli.COMMANDS.items():
        left_out = module.startswith(("grader.autograde", "grader.authoring"))
        assert (help_text in " ".join(listed.split())) != left_out, name
        assert (f" {name} " in listed or f" {name}\n" in listed) != left_out, name
    monkeypatch.setattr(cli.importlib, "import_module", missing("grader.autograde"))
    assert cli.main(["similarity", "subs", "--out", "x"]) == 2
    assert "`similarity` is for instructors" in capsys.readouterr().err


FINISH = """
import atexit, sys, threading, time
from grader.__main__ import finish
def late():
    time.sleep(0.3)
    print("thread done", flush=True)
threading.Thread(target=late).start()
atexit.register(lambda: print("atexit ran", flush=True))
sys.stdout.write("x" * 200_000)  # more than a pipe holds: still buffered when finish is called
finish(3)
"""


def test_a_command_ends_with_its_code_its_whole_output_its_threads_and_atexit_functions_done():
    """`python -m grader` skips Python's teardown of every object (finish): caught, a finish that exits before a
    non-daemon thread ends, before the atexit functions (temporary folders, child processes) or with output unflushed."""
    done = subprocess.run([sys.executable, "-c", FINISH], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("x" * 200_000)
    assert done.stdout[200_000:] == "thread done\natexit ran\n"


def test_python_m_grader_ends_through_finish():
    """The module's last lines call finish with main's code (catches a return to sys.exit, or finish left unused)."""
    source = Path(cli.__file__).read_text(encoding="utf-8")
    assert source.rstrip().endswith('if __name__ == "__main__":\n    finish(main())')
