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
import re
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

from grader.autograde.report import FORMULA_START, from_spreadsheet
from grader.autograde.sandbox import bwrap_argv, bwrap_problem, choose, kernel_env, stage_identity
from grader.runner import run_exercise
from tests import hazards_sandbox as cheats

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--timeout", "30", "--check-timeout", "5", "--notebook-timeout", "300", "--memory", "3G"]
pytestmark = pytest.mark.skipif(bool(bwrap_problem()), reason=f"no sandbox on this machine: {bwrap_problem()}")


# Runs a command and prints, last, the largest resident memory any process under it reached (in KiB).
PEAK = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)")


def grade(submissions: Path, out: Path, *extra: str, env: dict | None = None, user: str = "",
          workers: int = 2) -> subprocess.CompletedProcess:
    """`python -m grader grade` in a subprocess; its stderr's last line is the peak memory of any process it ran."""
    command = [sys.executable, "-c", PEAK, sys.executable, "-m", "grader", "grade", str(submissions), "--out",
               str(out), "--workers", str(workers), *FAST, *extra]
    if user:
        command = ["runuser", "-u", user, "--", *command]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})})


def peak_kib(run: subprocess.CompletedProcess) -> int:
    return int(run.stderr.strip().splitlines()[-1])


def rows(out: Path) -> dict[str, dict[str, str]]:
    """student (as named, a spreadsheet's escape undone) -> exercise name -> status."""
    found: dict[str, dict[str, str]] = {}
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            found.setdefault(from_spreadsheet(r["student"]), {})[r["exercise"].split(".", 1)[1]] = r["status"]
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
    modules = {m: Path(__import__(m).__file__).read_bytes() for m in cheats.IMPORTED_BY_THE_GRADER}
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
    planted = [p for place in cheats.planted_places() for p in _planted(place, targets.token)]
    changed = [m for m, text in modules.items() if Path(__import__(m).__file__).read_bytes() != text]
    for path in planted:  # a sandbox that failed must not leave this machine changed for what runs next
        path.unlink()
    for m in changed:
        Path(__import__(m).__file__).write_bytes(modules[m])
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(out=root / "out", targets=targets, server=server, before=before, reached_repo=reached_repo,
                leftovers=leftovers, run=run, planted=planted, changed_modules=changed)


def _planted(place: Path, token: str) -> list[Path]:
    """Files in `place` a remounting cheat wrote (named after its token, or start-up files holding it)."""
    found = [place / f"{token}.pth", place / f"{token}.py"]
    found = [p for p in found if p.exists()]
    for name in ("sitecustomize.py", "usercustomize.py"):
        try:
            if token in (place / name).read_text(errors="replace"):
                found.append(place / name)
        except OSError:
            pass
    return found


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
    """Also caught: a kernel without a sandbox whose temporary files land in this machine's temporary folder and stay
    there (chapter 10's working folder, every notebook); they belong in the notebook's own folder, removed with it."""
    cohort = one_student(tmp_path, by_name_only=True)
    notebook = cohort / "Bo" / "01_tensors.ipynb"
    nb = cheats.nbformat.read(notebook, as_version=4)
    nb.cells.append(cheats.nbformat.v4.new_code_cell('import tempfile\nLEFT = tempfile.mkdtemp(prefix="left-by-bo-")'))
    cheats.nbformat.write(nb, notebook)
    machine_tmp = Path(tempfile.mkdtemp(prefix="machine-", dir="/tmp"))  # short: the grader's sockets go in it
    try:
        run = grade(cohort, tmp_path / "out", "--sandbox", "auto",
                    env={"GRADER_BWRAP": "/nonexistent/bwrap", "TMPDIR": str(machine_tmp)}, workers=1)
        left = sorted(p.name for p in machine_tmp.iterdir())
    finally:
        shutil.rmtree(machine_tmp, ignore_errors=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert left == [], left
    assert "warning: no sandbox: bubblewrap (bwrap) is not installed" in " ".join(run.stderr.split())
    record = json.loads(next((tmp_path / "out" / ".state").rglob("*.json")).read_text(encoding="utf-8"))
    assert record["sandbox"].startswith("no sandbox: bubblewrap (bwrap) is not installed")
    # Even with no sandbox the kernel imports the public grader: the hidden checks are not importable by name
    # (by file path they are: that is what the sandbox is for).
    assert rows(tmp_path / "out")["Bo"] == cheats.EXPECTED


# ---------------------------------------------------------------- a GPU machine

def test_no_gpu_reaches_the_kernel(tmp_path, monkeypatch):
    """Grades never depend on the grading machine's GPU (checks judge devices on simulated ones): the sandbox binds
    no device file of the machine's (a GPU's are character devices like the stand-in here), and the kernel's
    environment hides every GPU whatever the grading process's says. With NVIDIA's files bound, a notebook could
    set CUDA_VISIBLE_DEVICES itself before CUDA starts and use the GPU (the sandbox bound them until then)."""
    from grader.autograde.kernel import Limits
    from grader.autograde.launcher import Launcher

    stand_in = next((d for d in ("/dev/fuse", "/dev/kmsg", "/dev/loop-control") if Path(d).is_char_device()), None)
    if stand_in is None:
        pytest.skip("no character device here that a minimal /dev lacks")
    public, folder = tmp_path / "public", tmp_path / "notebook"
    public.mkdir()
    (folder / "grader").mkdir(parents=True)
    stage_identity(folder, 1000)
    iso = choose("on", public)
    argv = bwrap_argv(iso, folder, folder)
    assert not {"--dev-bind", "--dev-bind-try"} & set(argv)
    assert subprocess.run([*argv, "test", "-c", "/dev/null"]).returncode == 0
    assert subprocess.run([*argv, "test", "-e", stand_in]).returncode != 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    env = Launcher(Limits(), iso, folder, folder, "token").env()
    assert env["CUDA_VISIBLE_DEVICES"] == "" and "GITHUB_TOKEN" not in env
    assert "CUDA_VISIBLE_DEVICES" not in kernel_env(iso, {"CUDA_VISIBLE_DEVICES": "0"}, {}, folder)


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


# ---------------------------------------------------------------- the grader as root: issue "the sandbox holds"

def test_no_remount_reached_a_file_the_grading_process_runs(cheated):
    """The remounter and the saboteur tried the mount system call, the mount program and a new user namespace on
    every read-only view, then wrote code where Python would run it: none of it reached this machine's files (a
    kernel as root with capabilities wrote them all), and the run was not stopped by the grader's tripwire."""
    assert cheated["planted"] == [] and cheated["changed_modules"] == []
    assert "grading stopped" not in cheated["run"].stderr


def test_a_classmate_graded_after_the_saboteur_keeps_her_marks(cheated):
    """The saboteur appended a hook to the public grader every kernel imports; the classmate, graded after it
    in the same run (grading takes the largest notebooks first, and hers is smaller), still passes every check."""
    class_folder = cheated["targets"].classmate.parents[1]
    size = {s: (class_folder / s / "01_tensors.ipynb").stat().st_size for s in ("Ada", "saboteur")}
    assert size["Ada"] < size["saboteur"]
    assert set(rows(cheated["out"])["Ada"].values()) == {"passed"}


def public_calls_to_same_storage() -> int:
    """How many times the public checks of same_storage call it (what the leaker can have seen before its
    element_offset's public checks run, if no hidden check ran before them)."""
    calls = []

    def counting(a, b):
        calls.append(1)
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    run_exercise("tensors.same_storage", counting, hidden=False)
    return len(calls)


def test_hidden_inputs_never_reach_what_the_student_reads(cheated):
    """The leaker's element_offset raises the inputs its same_storage was called with. Every public check runs
    before any hidden one, so what it can show the student is the public checks' inputs and nothing more."""
    leaker = cheated["out"] / "leaker"
    shown = (leaker / "results.json").read_text(encoding="utf-8") + (leaker / "feedback.html").read_text(
        encoding="utf-8")
    counts = {int(n) for n in re.findall(r"LEAK calls=(\d+)", shown)}
    assert counts == {public_calls_to_same_storage()}, counts


def test_a_reply_bomb_fails_its_checks_without_stalling_or_swelling_the_grader(cheated):
    """Replies holding one large list a hundred (or a thousand) times are refused before they are built: each
    check fails saying so, the notebook takes seconds, and no process of the run grew past what a kernel uses
    (decoding one of them unbounded took 2.2 GB and 219 s)."""
    record = json.loads((cheated["out"] / ".state" / "reply bomber" / "01_tensors.json").read_text(encoding="utf-8"))
    assert record["seconds"] < 120
    messages = [g["message"] for g in record["grades"] if cheats.BOMBED[g["exercise"].partition(".")[2]] == "failed"]
    assert messages and all("far more than the exercise asks for" in m for m in messages), messages
    assert peak_kib(cheated["run"]) < 1_500_000


def test_student_names_never_become_spreadsheet_formulas(cheated):
    """Folders named like formulas are written so a spreadsheet shows them as text (a leading apostrophe);
    numbers stay numbers; the names read back as they were."""
    for name in ("grades.csv", "gradebook.csv"):
        with open(cheated["out"] / name, newline="", encoding="utf-8") as f:
            cells = [c for row in csv.reader(f) for c in row]
        formulas = [c for c in cells if c.startswith(FORMULA_START) and not re.fullmatch(r"[+-]?[\d.]+", c)]
        assert formulas == [], (name, formulas)
    assert set(cheats.FORMULA_NAMES) <= set(rows(cheated["out"]))


def test_a_check_that_runs_into_a_limit_says_which(cheated):
    """Filling its files or forking without end inside a check ends that check `memory`, naming the limit
    (in memory files: --disk, a quarter of --memory; processes and threads: --processes)."""
    with open(cheated["out"] / "grades.csv", newline="", encoding="utf-8") as f:
        said = {r["exercise"]: r["message"] for r in csv.DictReader(f) if r["student"] == "limits in a check"}
    assert "ran out of file space: 768 MiB of files in its folder, /tmp and /dev/shm" in said["tensors.same_storage"]
    assert "ran out of processes: 256 processes and threads at once" in said["tensors.merge_heads"]


def test_a_kernel_that_fills_the_folder_it_shares_with_the_grader_is_ended(tmp_path):
    """The exchange folder is the one place on this machine's disk a sandboxed kernel writes (replies, sockets):
    a notebook writing 800 MiB there is ended within a moment of passing its cap, with a message saying why, and
    the folder never held much more than the cap."""
    from grader.autograde.kernel import EXCHANGE_BYTES, Limits, NotebookKernel, disk_usage
    from grader.autograde.sandbox import public_tree
    scratch = tmp_path / "nb"
    (scratch / "notebooks").mkdir(parents=True)
    iso = choose("on", public_tree(tmp_path))
    peak = []
    fill = ("import os\nwith open('../grader/fill', 'wb') as f:\n    for _ in range(800):\n"
            "        f.write(b'\\0' * (1 << 20)); f.flush(); os.fsync(f.fileno())\n")
    kernel = NotebookKernel([fill], scratch / "notebooks", Limits(max_restarts=0), isolation=iso, folder=scratch)
    watcher = threading.Thread(target=lambda: [peak.append(disk_usage(scratch / "grader", 10_000)[0]) or
                                               __import__("time").sleep(0.05) for _ in range(200)], daemon=True)
    try:
        kernel.start()
        watcher.start()
        kernel.run_cells()
    finally:
        kernel.close()
    assert kernel.outcomes[0].status == "dead"
    assert "wrote" in kernel.outcomes[0].evalue and "MiB" in kernel.outcomes[0].evalue, kernel.outcomes[0]
    assert max(peak) < EXCHANGE_BYTES + 250 * 2**20, max(peak)
