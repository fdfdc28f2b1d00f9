"""Fixtures shared by test files: the student release, built, unzipped and installed once per run.

`make test` runs the tests in two pytest-xdist workers, one test file per worker at a time (`--dist
loadfile`: a notebook's nbval cells and a file's module fixtures stay together). The release is
built once for both workers, under a file lock, in the folder they share."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

# One thread per process: `make test` runs more processes (workers, their kernels, rank processes) than there
# are cores, and a second OpenMP thread in each only spins waiting for a core another process holds. Set
# before torch (imported with grader below) starts its thread pool, and inherited by every process started.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Bytecode for the repository's own modules (gitignored __pycache__): an environment that sets
# PYTHONDONTWRITEBYTECODE makes each of the run's hundreds of Python processes compile grader/ from source again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

import pytest  # noqa: E402
from filelock import FileLock  # noqa: E402

from grader.authoring.release import TOP_FOLDER  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class StudentRelease:
    zip: Path       # dist/student.zip as built
    folder: Path    # what a student gets by unzipping it
    python: Path    # the release's own .venv, made by `python -m grader lab --setup-only` with no make on PATH

    def run(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        """`python args...` in the release's venv, from the release folder, with nothing of the repo on the path."""
        return subprocess.run([str(self.python), *args], cwd=self.folder, env=student_env(self.folder.parent),
                              capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def grading_bridge(tmp_path_factory) -> Iterator[Callable[..., object]]:
    """`grading_bridge(cells, cell_timeout=20, check_timeout=5, memory_gib=3)`: a grading kernel that has run
    `cells`, as `make grade` starts one; each kernel the module started is closed after its last test."""
    from grader import registry
    from grader.autograde.bridge import grading_kernel
    from grader.autograde.kernel import GiB, Limits

    with ExitStack() as stack:
        def start(cells: list[str], *, cell_timeout: float = 20, check_timeout: float = 5, memory_gib: float = 3):
            limits = Limits(cell_timeout=cell_timeout, check_timeout=check_timeout, memory=int(memory_gib * GiB))
            return stack.enter_context(grading_kernel(list(cells), tmp_path_factory.mktemp("kernel"), limits,
                                                      forbidden=registry.load().forbidden()))  # every chapter's
        yield start


@pytest.fixture(scope="session")
def student_release(tmp_path_factory, request) -> StudentRelease:
    """`python -m grader release`, its zip unzipped alone in a fresh folder, and set up there without make."""
    if not hasattr(request.config, "workerinput"):  # not an xdist worker: this process alone
        return build_release(tmp_path_factory.mktemp("student-release"))
    shared = tmp_path_factory.getbasetemp().parent  # the same folder for every worker of this run
    with FileLock(str(shared / "student-release.lock")):
        root = shared / "student-release"
        done = root / "built.ok"
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)  # what a worker that failed half way left
            release = build_release(root)
            done.touch()
            return release
    folder = root / "unzipped" / TOP_FOLDER
    return StudentRelease(root / "build" / "student.zip", folder, folder / ".venv" / "bin" / "python")


DEMO_GRADED = ("Ada Lovelace", "Chloé Dubois")  # the solved student, and the half-solved one's zip


@pytest.fixture(scope="session")
def demo_out(tmp_path_factory, request) -> Path:
    """`make grade` over the demo cohort's solved and half-solved students, every chapter, workers from a forkserver
    (as where torch is built with CUDA): graded once per run and shared by every worker (tests/test_demo_grading.py
    judges it; tests/test_gpu_grading.py compares a grading with a simulated GPU against it; tests/test_browser.py
    reads the half-solved student's feedback)."""
    from tests.inprocess import run_grader

    def build(out: Path) -> Path:
        cohort = out.parent / "demo-cohort"
        shutil.rmtree(cohort, ignore_errors=True)
        cohort.mkdir(parents=True)
        for student in DEMO_GRADED:
            folder = ROOT / "demo" / "submissions" / student
            if folder.is_dir():
                shutil.copytree(folder, cohort / student)
            else:
                shutil.copy(folder.with_name(student + ".zip"), cohort)
        run = run_grader("grade", str(cohort), "--out", str(out), "--workers", "2", forkserver=True)
        assert run.returncode == 0, run.stderr[-3000:]
        return out

    if not hasattr(request.config, "workerinput"):
        return build(tmp_path_factory.mktemp("demo") / "grades")
    shared = tmp_path_factory.getbasetemp().parent
    with FileLock(str(shared / "demo-grades.lock")):
        root = shared / "demo-grades"
        if not (root / "built.ok").exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            build(root / "grades")
            (root / "built.ok").touch()
    return root / "grades"


@dataclass
class TranslatedRelease:
    zip: Path       # dist/student-zh.zip as built
    folder: Path    # unzipped; it has no venv of its own: it runs in the English release's (translated_env)


@pytest.fixture(scope="session")
def zh_release(tmp_path_factory, request) -> TranslatedRelease:
    """`python -m grader release --lang zh`, its zip unzipped: built once per run, as student_release is."""
    def build(root: Path) -> TranslatedRelease:
        root.mkdir(parents=True, exist_ok=True)
        out = root / "build" / "student-zh"
        built = subprocess.run([sys.executable, "-m", "grader", "release", "--lang", "zh", "--out", str(out)],
                               cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert built.returncode == 0, built.stderr[-6000:]
        with zipfile.ZipFile(out.with_suffix(".zip")) as z:
            z.extractall(root / "unzipped")
        return TranslatedRelease(out.with_suffix(".zip"), root / "unzipped" / TOP_FOLDER)

    if not hasattr(request.config, "workerinput"):
        return build(tmp_path_factory.mktemp("zh-release"))
    shared = tmp_path_factory.getbasetemp().parent
    with FileLock(str(shared / "zh-release.lock")):
        root = shared / "zh-release"
        if not (root / "built.ok").exists():
            shutil.rmtree(root, ignore_errors=True)
            release = build(root)
            (root / "built.ok").touch()
            return release
    return TranslatedRelease(root / "build" / "student-zh.zip", root / "unzipped" / TOP_FOLDER)


def translated_env(release: TranslatedRelease, root: Path) -> dict[str, str]:
    """A student's environment (student_env) in which the English release's venv imports the translated release's
    grader: its folder first on Python's path, for the commands and the kernels they start. The two releases'
    code is the same; what differs is text and grader/lang.json, which the tests then see in the outputs."""
    env = student_env(root)
    env["PYTHONPATH"] = str(release.folder)
    return env


def student_env(root: Path) -> dict[str, str]:
    """A student's environment: nothing of the repo on Python's path, and no `make` on PATH (as on Windows):
    PATH is one empty folder, so every command is named by its full path."""
    bare = root / "bin-without-make"
    bare.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MAKEFLAGS", "MAKELEVEL")}
    env["PATH"] = str(bare)
    assert shutil.which("make", path=env["PATH"]) is None
    return env


def commit_epoch(root: Path) -> None:
    """Note when the repo's last commit was made, read with git before the build (what the release should be
    dated by, even if a commit lands while the tests run); nothing outside a git checkout."""
    given = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    done = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True)
    epoch = given or (done.stdout.strip() if done.returncode == 0 else "")
    if epoch:
        (root / "commit-epoch").write_text(epoch)


def build_release(root: Path) -> StudentRelease:
    root.mkdir(parents=True, exist_ok=True)
    commit_epoch(root)
    built = subprocess.run([sys.executable, "-m", "grader", "release", "--out", str(root / "build" / "student")],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    archive = root / "build" / "student.zip"
    with zipfile.ZipFile(archive) as z:
        z.extractall(root / "unzipped")
    folder = root / "unzipped" / TOP_FOLDER
    # The student's first command, with a plain Python (here the one running the tests) and no make.
    setup = subprocess.run([sys.executable, "-m", "grader", "lab", "--setup-only"], cwd=folder,
                           env=student_env(root), capture_output=True, text=True, timeout=1200)
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-2000:]
    return StudentRelease(archive, folder, folder / ".venv" / "bin" / "python")


# The files that take longest, handed out first and longest first, so that the workers of `make test` finish
# together: a file handed out last runs on alone (test_shards and test_template did, 50 s at the end of a run).
# `make test` passes --no-loadscope-reorder: xdist would otherwise hand out the files with the most tests first,
# whatever their time. Each file's seconds in `make test` at 09:47 UTC on 2026-11-28 (three workers, two
# cores): release 245 (first: the release it builds is what test_translations waits for), gradescope 99, grading
# 95, translations 89, browser 79, sandbox 78, grading_objects 54, initialization_answers 52, demo_grading 45,
# canvas 38, lab 37, gpu_answers 36, 04_flops 36, shards 32, 10_ddp 29, checkpointing_answers 28, 01_tensors 24,
# flops_answers 24, memory_answers 22, ddp_answers 21, bridge 21, regrade 20, template 20, then 18 s and less;
# the many short files after these fill the end evenly.
SLOW_FIRST = ["test_release.py", "test_gradescope.py", "test_grading.py", "test_translations.py", "test_browser.py",
              "test_sandbox.py", "test_grading_objects.py", "test_initialization_answers.py", "test_demo_grading.py",
              "test_canvas.py", "test_lab.py", "test_gpu_answers.py", "04_flops.ipynb", "test_shards.py",
              "10_ddp.ipynb", "test_checkpointing_answers.py", "01_tensors.ipynb", "test_flops_answers.py",
              "test_memory_answers.py", "test_ddp_answers.py", "test_bridge.py", "test_regrade.py", "test_template.py",
              "07_initialization.ipynb", "09_gpu.ipynb", "08_checkpointing.ipynb", "test_autograd_answers.py",
              "test_colab.py", "test_gpu_grading.py", "test_pool.py", "test_modules_answers.py"]


def _rank(item) -> int:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    if item.path.name in rank:
        return rank[item.path.name]
    return len(SLOW_FIRST) + (0 if item.path.suffix == ".ipynb" else 1)


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=_rank)  # stable: each file keeps its order
