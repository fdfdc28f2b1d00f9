"""The loader fails loudly where the course's checks and its chapters disagree (issue 14: a misnamed hidden
module used to drop every hidden check of its chapter, and no test failed).

Each test grades nothing: it copies the `grader` package, breaks one thing the way an author might, and loads
the registry from that copy, which must stop with a RegistryError that names the problem. The loads run in one
interpreter kept for the module (torch imported once, 2 s of CPU a load), which forgets every `grader` module
before each load: each load imports the whole package again from its copy.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# One load per line of stdin (a package copy's folder); one JSON line back per load: the exit status a fresh
# `python -c "from grader import registry; ..."` would have, what it would print, and its traceback.
LOADER = """
import importlib, json, os, sys, traceback
import torch  # what every load imports first, once
for line in sys.stdin:
    root = line.strip()
    for name in [n for n in sys.modules if n == "grader" or n.startswith("grader.")]:
        del sys.modules[name]
    sys.path[0] = root
    os.chdir(root)
    importlib.invalidate_caches()  # files a test wrote since the last load
    try:
        from grader import registry
        answer = {"returncode": 0, "stdout": str(len(registry.load(hidden=True).exercises)), "stderr": ""}
    except Exception:
        answer = {"returncode": 1, "stdout": "", "stderr": traceback.format_exc()}
    print(json.dumps(answer), flush=True)
"""


_LOADER: list[subprocess.Popen] = []  # the module's loading interpreter, while its tests run


@pytest.fixture(scope="module", autouse=True)
def loader():
    """The module's loading interpreter: nothing of the repository on its path but the copy each load names."""
    process = subprocess.Popen([sys.executable, "-c", LOADER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env={"PATH": "/usr/bin:/bin"}, cwd="/")
    _LOADER.append(process)
    yield process
    _LOADER.remove(process)
    process.stdin.close()
    process.wait(timeout=60)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    # With its bytecode (copied with the sources' times, so still valid): each load then compiles only what a test
    # changed, not the whole package again.
    shutil.copytree(ROOT / "grader", tmp_path / "grader")
    return tmp_path


def load(root: Path) -> subprocess.CompletedProcess:
    """The registry loaded from the package copy in `root`, as a fresh interpreter would load it."""
    [process] = _LOADER
    process.stdin.write(f"{root}\n")
    process.stdin.flush()
    answer = json.loads(process.stdout.readline())
    return subprocess.CompletedProcess(["load", str(root)], answer["returncode"], answer["stdout"], answer["stderr"])


def test_the_course_as_it_is_loads(package: Path) -> None:
    run = load(package)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) > 0


def test_a_misnamed_hidden_module_is_an_error_not_a_chapter_without_hidden_checks(package: Path) -> None:
    (package / "grader/hidden/memory.py").rename(package / "grader/hidden/memroy.py")
    run = load(package)
    assert run.returncode != 0 and "RegistryError" in run.stderr
    assert "chapter 03_memory has no module grader.hidden.memory" in run.stderr


def test_a_missing_public_module_is_an_error(package: Path) -> None:
    (package / "grader/exercises/dtypes.py").unlink()
    run = load(package)
    assert "chapter 02_dtypes has no module grader.exercises.dtypes" in run.stderr


def test_an_exercise_id_that_names_no_chapter_is_an_error(package: Path) -> None:
    with open(package / "grader/exercises/tensors.py", "a") as f:
        f.write('\nTYPO = exercise("tensor.typo", points=1)\n')
    run = load(package)
    assert "tensor.typo (declared in grader.exercises.tensors) names no chapter" in run.stderr


def test_an_exercise_without_a_hidden_check_is_an_error(package: Path) -> None:
    with open(package / "grader/exercises/tensors.py", "a") as f:
        f.write('\nEXTRA = exercise("tensors.extra", points=1)\n')
    run = load(package)
    assert "tensors.extra has no hidden check" in run.stderr


def test_a_chapter_that_declares_nothing_is_an_error(package: Path) -> None:
    (package / "grader/exercises/gpu.py").write_text('"""nothing yet"""\n')
    (package / "grader/hidden/gpu.py").write_text('"""nothing yet"""\n')
    run = load(package)
    assert "chapter 09_gpu declares no exercise" in run.stderr


def declare_chapter(package: Path, stem: str, title: str) -> None:
    """Step one of the README's recipe: the chapter's one declaration."""
    chapters = package / "grader/chapters.py"
    text = chapters.read_text()
    last = '    Chapter("10_ddp", "Data-parallel training"),\n'
    assert last in text
    chapters.write_text(text.replace(last, last + f"    Chapter({stem!r}, {title!r}),\n"))


def test_a_new_chapter_names_each_part_it_still_lacks(package: Path) -> None:
    """Following "Adding a chapter": after each step the loader names the next missing part, until it loads."""
    declare_chapter(package, "11_pipeline", "Pipeline parallelism")
    assert "chapter 11_pipeline has no module grader.exercises.pipeline" in load(package).stderr
    (package / "grader/exercises/pipeline.py").write_text(
        'from grader.registry import exercise\n\nSTAGES = exercise("pipeline.stages", points=1)\n\n\n'
        '@STAGES.check\ndef splits_evenly(stages):\n    """4 layers in 2 stages: 2 each"""\n')
    assert "chapter 11_pipeline has no module grader.hidden.pipeline" in load(package).stderr
    (package / "grader/hidden/pipeline.py").write_text('"""nothing yet"""\n')
    assert "pipeline.stages has no hidden check" in load(package).stderr
    (package / "grader/hidden/pipeline.py").write_text(
        'from grader.exercises.pipeline import STAGES\n\n\n'
        '@STAGES.hidden\ndef uneven(stages):\n    """5 layers in 2 stages"""\n')
    run = load(package)
    assert run.returncode == 0, run.stderr


def test_grading_refuses_to_start_without_a_chapters_hidden_checks(package: Path, tmp_path: Path) -> None:
    """`python -m grader grade` stops before grading anyone, naming the missing module (never a public-only grade)."""
    (package / "grader/hidden/tensors.py").rename(package / "grader/hidden/tensor.py")
    subs = tmp_path / "subs" / "Ada"
    subs.mkdir(parents=True)
    (subs / "01_tensors.ipynb").write_text((ROOT / "notebooks/01_tensors.ipynb").read_text())
    run = subprocess.run([sys.executable, "-m", "grader", "grade", str(subs.parent), "--out", str(tmp_path / "out"),
                          "--sandbox", "off"], cwd=package, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(package), "HOME": str(tmp_path)})
    assert run.returncode != 0
    assert "chapter 01_tensors has no module grader.hidden.tensors" in run.stderr, run.stderr[-2000:]
    assert not (tmp_path / "out" / "grades.csv").exists()


def test_a_checks_line_is_its_docstrings_whole_first_paragraph() -> None:
    """Caught: a description cut at the docstring's first line break ("9.9 gives 9.9e11, 10.1 the")."""
    from grader.registry import Exercise
    ex = Exercise("any.thing", 1, ("thing",))

    def wraps():
        """peak 1e12 FLOP/s and bandwidth 1e11 B/s: 9.9 gives 9.9e11, 10.1 the
        peak

        Details a student does not need."""
    ex._add(wraps, hidden=False, weight=1.0, timeout=None)
    assert ex.checks[0].description == "peak 1e12 FLOP/s and bandwidth 1e11 B/s: 9.9 gives 9.9e11, 10.1 the peak"
