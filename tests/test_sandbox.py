"""Grading dishonest notebooks in the real bubblewrap sandbox: each cheat in tests/hazards_sandbox.py must fail
to reach its target (checked at the target: the files, the server, the process table), and the same
notebooks' honest exercises must still score. Also: `--sandbox on|auto` without bubblewrap, and grading as
a user who is not root.
"""
from __future__ import annotations

import csv
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import psutil
import pytest

from grader.autograde.sandbox import bwrap_argv, bwrap_problem, choose, gpu_devices, kernel_env
from tests import hazards_sandbox as cheats

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--timeout", "30", "--check-timeout", "5", "--notebook-timeout", "300", "--memory", "3G"]
pytestmark = pytest.mark.skipif(bool(bwrap_problem()), reason=f"no sandbox on this machine: {bwrap_problem()}")


def grade(submissions: Path, out: Path, *extra: str, env: dict | None = None, user: str = "",
          workers: int = 2) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "grader", "grade", str(submissions), "--out", str(out), "--workers",
               str(workers), *FAST, *extra]
    if user:
        command = ["runuser", "-u", user, "--", *command]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})})


def rows(out: Path) -> dict[str, dict[str, str]]:
    """student -> exercise name -> status."""
    found: dict[str, dict[str, str]] = {}
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            found.setdefault(r["student"], {})[r["exercise"].split(".", 1)[1]] = r["status"]
    return found


class Listener:
    """A TCP server on 127.0.0.1 that counts the connections it accepts (the network cheat's target)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.accepted.append(conn.recv(100))
                except OSError:
                    self.accepted.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def processes_with(token: str) -> list[str]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(token in part for part in p.info["cmdline"] or []):
            found.append(" ".join(p.info["cmdline"]))
    return found


@pytest.fixture(scope="module")
def cheated(tmp_path_factory):
    """One grading run over the whole dishonest class, sandbox on; the targets as they were before it."""
    root = tmp_path_factory.mktemp("sandbox")
    home = root / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# the instructor's own\n")
    server = Listener()
    targets = cheats.Targets(repo=ROOT, classmate=root / "class" / "Ada" / "01_tensors.ipynb", home=home,
                             port=server.port, secret="grader-secret-" + secrets.token_hex(6),
                             token="grader-escape-" + secrets.token_hex(6))
    subs = cheats.build(root / "class", targets)
    before = targets.classmate.read_bytes()
    try:
        run = grade(subs, root / "out", "--sandbox", "on", env={"HOME": str(home), "GRADER_TEST_SECRET": targets.secret})
    finally:
        server.close()
        planted = [ROOT / f"PWNED-{targets.token}", ROOT / "grader" / "hidden" / f"pwned_{targets.token}.py"]
        reached_repo = [p for p in planted if p.exists()]
        for p in reached_repo:
            p.unlink()
        leftovers = processes_with(targets.token)
        for p in psutil.process_iter(["cmdline"]):  # never leave one behind, even when the test fails
            if any(targets.token in part for part in p.info["cmdline"] or []):
                p.kill()
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(out=root / "out", targets=targets, server=server, before=before, reached_repo=reached_repo,
                leftovers=leftovers, run=run)


@pytest.mark.parametrize("student", list(cheats.CHEATS))
def test_a_cheat_scores_what_its_own_code_earns(cheated, student):
    """A cheat that reached its target would have written the two blank exercises (or spoiled an honest one)."""
    assert rows(cheated["out"])[student] == cheats.CHEATS[student][1]
    if cheats.CHEATS[student][1] == cheats.TAMPERED:  # graded on their own, the blank exercises still earn nothing
        with open(cheated["out"] / "grades.csv", newline="", encoding="utf-8") as f:
            for r in csv.DictReader(f):
                if r["student"] == student and r["exercise"].split(".", 1)[1] in cheats.BLANKED:
                    assert "it would have scored 0/" in r["message"], r["message"]


def test_the_classmate_is_graded_on_her_own_notebook_which_nobody_could_change(cheated):
    assert set(rows(cheated["out"])["Ada"].values()) == {"passed"}
    assert cheated["targets"].classmate.read_bytes() == cheated["before"]


def test_the_instructors_home_and_repository_are_untouched(cheated):
    assert (cheated["targets"].home / ".bashrc").read_text() == "# the instructor's own\n"
    assert cheated["reached_repo"] == []


def test_no_connection_reached_the_server_on_loopback(cheated):
    assert cheated["server"].accepted == []


def test_no_process_outlived_its_kernel(cheated):
    assert cheated["leftovers"] == []


def test_every_record_says_the_kernel_was_sandboxed(cheated):
    records = list((cheated["out"] / ".state").rglob("*.json"))
    assert len(records) == len(cheats.CHEATS) + 1
    for path in records:
        assert json.loads(path.read_text(encoding="utf-8"))["sandbox"].startswith("sandbox: bubblewrap"), path
    assert "no sandbox" not in cheated["run"].stderr


def one_student(root: Path, by_name_only: bool = False) -> Path:
    """A class of one honest student who also tries to import the hidden checks (`by_name_only`: only with
    `import grader.hidden...`, the one way that fails without a sandbox too)."""
    t = cheats.Targets(ROOT, root / "x.ipynb", root, 9, "s", "grader-escape-" + secrets.token_hex(6))
    nb = cheats.blank(cheats.hazards.exercises_only())
    code = cheats.hidden_importer(t)
    if by_name_only:
        code = code.split("try:\n    _spec")[0]
    nb.cells.append(cheats.nbformat.v4.new_code_cell(code))
    cheats.hazards.write(nb, root / "class" / "Bo" / "01_tensors.ipynb")
    return root / "class"


def test_sandbox_on_refuses_to_grade_without_bubblewrap(tmp_path):
    run = grade(one_student(tmp_path), tmp_path / "out", "--sandbox", "on", env={"GRADER_BWRAP": "/nonexistent/bwrap"})
    assert run.returncode == 2
    assert "--sandbox on, but bubblewrap (bwrap) is not installed" in run.stderr
    assert not (tmp_path / "out" / "grades.csv").exists()


def test_sandbox_auto_without_bubblewrap_grades_and_warns_in_the_output_and_every_record(tmp_path):
    run = grade(one_student(tmp_path, by_name_only=True), tmp_path / "out", "--sandbox", "auto",
                env={"GRADER_BWRAP": "/nonexistent/bwrap"},
                workers=1)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "warning: no sandbox: bubblewrap (bwrap) is not installed" in " ".join(run.stderr.split())
    record = json.loads(next((tmp_path / "out" / ".state").rglob("*.json")).read_text(encoding="utf-8"))
    assert record["sandbox"].startswith("no sandbox: bubblewrap (bwrap) is not installed")
    # Even with no sandbox the kernel imports the public grader: the hidden checks are not importable by name
    # (by file path they are: that is what the sandbox is for).
    assert rows(tmp_path / "out")["Bo"] == cheats.EXPECTED


# ---------------------------------------------------------------- a GPU machine

def test_the_gpus_device_files_reach_the_kernel(tmp_path):
    """A notebook graded on a GPU machine runs on its GPU: the GPU's device files are bound into the sandbox's
    minimal /dev (on an H200, without them, the kernel saw no GPU and a correct try_gpu() answered cpu while the
    check counted one). This machine has none: files named as NVIDIA's and AMD's stand in for the search, and
    a character device the sandbox's /dev lacks stands in for the binding."""
    dev = tmp_path / "dev"
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm", "kfd", "null", "tty0"):
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).touch()
    (dev / "nvidia-caps").mkdir()
    (dev / "dri").mkdir()
    assert gpu_devices(dev) == [str(dev / n) for n in ("dri", "kfd", "nvidia-caps", "nvidia-uvm", "nvidia0",
                                                       "nvidiactl")]
    stand_in = next((d for d in ("/dev/fuse", "/dev/kmsg", "/dev/loop-control") if Path(d).is_char_device()), None)
    if stand_in is None:
        pytest.skip("no character device here that the sandbox's /dev lacks")
    public, folder = tmp_path / "public", tmp_path / "notebook"
    public.mkdir()
    folder.mkdir()
    iso = choose("on", public)
    probe = ["test", "-c", stand_in]
    assert subprocess.run(bwrap_argv(iso, folder, folder, devices=[stand_in]) + probe).returncode == 0
    assert subprocess.run(bwrap_argv(iso, folder, folder, devices=[]) + probe).returncode != 0
    # which GPUs the instructor lent the run reaches the kernel; nothing else of the grader's environment does
    env = kernel_env(iso, {"CUDA_VISIBLE_DEVICES": "1", "GITHUB_TOKEN": "secret"}, {}, folder)
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and "GITHUB_TOKEN" not in env


# ---------------------------------------------------------------- an instructor who is not root

UNPRIVILEGED = "grader-instructor"


@pytest.fixture
def instructor():
    """An unprivileged user who can run the course's interpreter: created when this test runs as root (with
    traverse-only permission added to the folders above the interpreter, and taken away after)."""
    if os.geteuid() != 0:
        pytest.skip("creating an unprivileged user needs root; run as that user to test it by hand")
    try:
        pwd.getpwnam(UNPRIVILEGED)
    except KeyError:
        made = subprocess.run(["useradd", "--create-home", UNPRIVILEGED], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"could not create a user: {made.stderr.strip()}")
    with cheats.python_reachable_by(UNPRIVILEGED):
        yield UNPRIVILEGED


def test_an_instructor_who_is_not_root_grades_in_the_sandbox(instructor):
    tmp_path = Path(tempfile.mkdtemp(prefix="grader-instructor-"))  # pytest's own folders are root's only
    tmp_path.chmod(0o777)
    try:
        instructor_grades(instructor, tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def instructor_grades(instructor: str, tmp_path: Path) -> None:
    subs = one_student(tmp_path)
    for path in [subs, *subs.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    run = grade(subs, tmp_path / "out", "--sandbox", "on", user=instructor, workers=1,
                env={"HOME": pwd.getpwnam(instructor).pw_dir, "TMPDIR": "/tmp"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert rows(tmp_path / "out")["Bo"] == cheats.EXPECTED
    record = json.loads(next((tmp_path / "out" / ".state").rglob("*.json")).read_text(encoding="utf-8"))
    assert record["sandbox"].startswith("sandbox: bubblewrap")
    assert (tmp_path / "out" / "grades.csv").stat().st_uid == pwd.getpwnam(instructor).pw_uid
