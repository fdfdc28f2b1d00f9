"""The tripwire around every graded notebook (grader/autograde/integrity.py): a change to anything the grading
process runs stops the run, naming the notebook; what other processes legitimately write does not."""
from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.autograde import integrity
from tests import hazards

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A folder on sys.path holding one module, imported, and a watch that began after that."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "grader_watch_probe.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    importlib.import_module("grader_watch_probe")
    watch = integrity.Watch(integrity.start(), (str(tmp_path / "trees"),))
    time.sleep(0.05)  # what the tests change, they change a clock tick or more after the run began
    yield folder, watch
    sys.modules.pop("grader_watch_probe", None)


def test_nothing_changed_is_nothing_reported(tree):
    _, watch = tree
    assert watch.changed() == []
    assert not watch.clean  # a worker's first notebook is checked before it too
    watch.check("found after grading nobody")
    assert watch.clean  # this check stands for the check before the worker's next notebook


def test_a_clean_watch_still_catches_the_next_change(tree):
    """A worker skips the check before a notebook when the one after its last notebook was clean: the change made
    after that is caught by the next check, with the notebook named."""
    folder, watch = tree
    watch.check("found after grading Al/01_tensors")
    (folder / "grader_watch_probe.py").write_text("VALUE = 2\n")
    with pytest.raises(integrity.Changed, match="found after grading Bo/01_tensors"):
        watch.check("found after grading Bo/01_tensors")
    assert not watch.clean


def test_an_imported_module_written_to_is_reported_with_the_notebook(tree):
    folder, watch = tree
    with open(folder / "grader_watch_probe.py", "a") as f:
        f.write("# a kernel was here\n")
    assert watch.changed() == [str(folder / "grader_watch_probe.py")]
    with pytest.raises(integrity.Changed, match="found after grading Bo/01_tensors"):
        watch.check("found after grading Bo/01_tensors")


@pytest.mark.parametrize("name", ["sitecustomize.py", "usercustomize.py", "anything.pth", "torch.py"])
def test_code_python_would_run_next_time_is_reported(tree, name):
    """Start-up files, and a module that would shadow one the grader imports, in a folder on the path."""
    folder, watch = tree
    (folder / name).write_text("# planted\n")
    assert str(folder / name) in watch.changed()


def test_bytecode_under_a_name_python_does_not_write_is_a_file_like_any_other(tmp_path):
    """pytest writes an assertion-rewritten module's bytecode as NAME.cpython-311-pytest-9.2.0.pyc: a run that found
    one in the grader's tree stopped with "expected only 2 or 3 dots"; it is watched as a file without a source."""
    cache = tmp_path / "trees" / "__pycache__"
    cache.mkdir(parents=True)
    (cache / "memory.cpython-311-pytest-9.2.0.pyc").write_bytes(b"there before the run began")
    time.sleep(0.05)
    watch = integrity.Watch(integrity.start(), (str(tmp_path / "trees"),))
    time.sleep(0.05)
    assert watch.changed() == []
    (cache / "gpu.cpython-311-pytest-9.2.0.pyc").write_bytes(b"written during the run")
    assert watch.changed() == [str(cache / "gpu.cpython-311-pytest-9.2.0.pyc")]


def test_a_new_file_in_a_watched_tree_is_reported(tree, tmp_path):
    """The grader package and the public copy: every file, new ones included."""
    _, watch = tree
    (tmp_path / "trees" / "grader").mkdir(parents=True)
    (tmp_path / "trees" / "grader" / "__init__.py").write_text("")
    assert watch.changed() == [str(tmp_path / "trees" / "grader" / "__init__.py")]


def test_bytecode_another_process_compiled_is_accepted_and_forged_bytecode_is_not(tree):
    """An import elsewhere writes the module's bytecode after the run began: the compiled form of its unchanged
    source passes; bytecode holding other code under the same header is reported."""
    folder, watch = tree
    source = folder / "grader_watch_probe.py"
    subprocess.run([sys.executable, "-c", "import grader_watch_probe"], cwd=folder, check=True,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
    cached = Path(importlib.util.cache_from_source(str(source)))
    assert cached.is_file()
    sys.modules["grader_watch_probe"].__cached__ = str(cached)
    assert watch.changed() == []
    forged = compile("VALUE = 2\nimport os\n", str(source), "exec")
    header = cached.read_bytes()[:16]
    import marshal
    cached.write_bytes(header + marshal.dumps(forged))
    assert watch.changed() == [str(cached)]


def test_what_a_kernel_user_could_write_is_found(tree, tmp_path):
    """For the kernel-user fallback: a watched file open to others (or to that user) is named."""
    folder, watch = tree
    assert watch.writable_by(1_900_000_999, 1_900_000_999) == []
    (folder / "grader_watch_probe.py").chmod(0o666)
    assert watch.writable_by(1_900_000_999, 1_900_000_999) == [str(folder / "grader_watch_probe.py")]


def test_a_notebook_that_writes_the_public_grader_stops_the_run_and_is_named(tmp_path):
    """Without a sandbox a notebook can write the public grader every later kernel imports (a classmate's
    included): the run stops at once, exit status 2, naming the notebook; its record is not kept."""
    nb = hazards.exercises_only()
    nb.cells.append(hazards.nbformat.v4.new_code_cell(
        "import grader\nwith open(grader.__file__, 'a') as f:\n    f.write('\\n# changed by a notebook\\n')\n"))
    hazards.write(nb, tmp_path / "class" / "Mallory" / "01_tensors.ipynb")
    run = subprocess.run([sys.executable, "-m", "grader", "grade", str(tmp_path / "class"), "--out",
                          str(tmp_path / "out"), "--workers", "1", "--sandbox", "off", "--check-timeout", "5"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 2, run.stderr[-2000:]
    said = " ".join(run.stderr.split())
    assert "grading stopped:" in said and "found after grading Mallory/01_tensors" in said, said
    assert "grader/__init__.py changed during the grading run" in said
    assert not (tmp_path / "out" / ".state" / "Mallory" / "01_tensors.json").exists()
