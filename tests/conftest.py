"""Fixtures shared by test files: the student release, built, unzipped and installed once per session."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class StudentRelease:
    zip: Path       # dist/student.zip as built
    folder: Path    # what a student gets by unzipping it
    python: Path    # the release's own .venv, made by its `make setup`

    def run(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        """`python args...` in the release's venv, from the release folder, with nothing of the repo on the path."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        return subprocess.run([str(self.python), *args], cwd=self.folder, env=env, capture_output=True, text=True,
                              timeout=timeout)


@pytest.fixture(scope="session")
def student_release(tmp_path_factory) -> StudentRelease:
    """`python -m grader release`, its zip unzipped alone in a fresh folder, and `make setup` run there."""
    root = tmp_path_factory.mktemp("student-release")
    built = subprocess.run([sys.executable, "-m", "grader", "release", "--out", str(root / "build" / "student")],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    archive = root / "build" / "student.zip"
    with zipfile.ZipFile(archive) as z:
        z.extractall(root / "unzipped")
    folder = root / "unzipped" / "student"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MAKEFLAGS", "MAKELEVEL")}
    setup = subprocess.run(["make", "-s", "setup", f"PYTHON={sys.executable}"], cwd=folder, env=env,
                           capture_output=True, text=True, timeout=1200)
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-2000:]
    return StudentRelease(archive, folder, folder / ".venv" / "bin" / "python")
