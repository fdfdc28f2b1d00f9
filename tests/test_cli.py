"""`python -m grader`: one table of commands, and a missing module said for what it is (issue 14 §5)."""
from __future__ import annotations

import pytest

import grader.__main__ as cli


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
