"""`make grade` on hazards of the exercises graded through scenarios and real processes (one shared run).

The verdicts come from the grading process: a notebook that patches torch.autograd.grad is caught
and its independent result reported; objects whose __del__ hangs or whose __getattr__ recurses, and a
backward that hangs, cost their own exercise only; a data-parallel run whose rank hangs ends as a
timeout with every process it started gone; two data-parallel students graded at once do not collide.
"""
from __future__ import annotations

import csv
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests import hazards_objects

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--timeout", "6", "--check-timeout", "10", "--notebook-timeout", "300", "--memory", "3G"]


# This grading run's temporary folder (its TMPDIR): every kernel's command line or environment names it, in
# the sandbox too (where a kernel inherits no variable of the grading command), and so do the processes a
# kernel starts (spawned ranks). Tests in other workers grade too; their folders differ.
# Made by the fixture below, which removes it: the other pytest workers import this module too.
RUN_TMP = Path(tempfile.gettempdir()) / f"object-hazards-{os.getpid()}-{secrets.token_hex(4)}"


def grade_processes() -> list[psutil.Process]:
    """This run's grading kernels and the processes they started, whoever their parent is now."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        kernel = any(name in cmd for name in ("launch.py", "template_main.py", "door.py"))  # forked kernels: template's
        if kernel or ("multiprocessing" in cmd and ("spawn_main" in cmd or "forkserver" in cmd)):
            try:
                if str(RUN_TMP) in cmd or str(RUN_TMP) in p.environ().get("PYTHONPATH", ""):
                    found.append(p)
            except psutil.Error:  # gone meanwhile
                pass
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("object-hazards")
    RUN_TMP.mkdir(mode=0o700)
    subs = hazards_objects.build(root / "submissions")
    out = root / "out"
    log = root / "stderr.txt"  # a file, not a pipe: nobody reads a pipe while the run goes on
    with open(log, "w", encoding="utf-8") as err:
        run = subprocess.Popen([sys.executable, "-m", "grader", "grade", str(subs), "--out", str(out), "--workers",
                                "2", *FAST], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                               env={**os.environ, "TMPDIR": str(RUN_TMP)})
    seen = 0  # the most of this run's processes seen at once while it ran: the marker does reach them
    deadline = time.monotonic() + 900
    while run.poll() is None and time.monotonic() < deadline:
        seen = max(seen, len(grade_processes()))
        time.sleep(0.5)
    run.wait(timeout=max(1.0, deadline - time.monotonic()))
    assert run.returncode == 0, log.read_text(encoding="utf-8")[-3000:]
    time.sleep(1)
    left = grade_processes()
    shutil.rmtree(RUN_TMP, ignore_errors=True)
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f)), left, seen


@pytest.mark.parametrize("student", list(hazards_objects.COHORT))
def test_each_exercise_ends_with_the_expected_status(graded, student):
    rows, *_ = graded
    want = hazards_objects.COHORT[student][1]
    mine = [r for r in rows if r["student"] == student]
    got = {r["exercise"].split(".", 1)[1]: r["status"] for r in mine if r["exercise"].split(".", 1)[1] in want}
    assert {r["status"] for r in mine if r["exercise"].split(".", 1)[1] not in want} <= {"missing"}
    detail = {r["exercise"]: r["message"] for r in rows if r["student"] == student
              and r["status"] != want.get(r["exercise"].split(".", 1)[1])}
    assert got == want, detail


def test_patching_autograd_is_named_with_the_independent_result(graded):
    rows, *_ = graded
    msg = {r["exercise"]: r["message"] for r in rows
           if r["student"] == "forward patches grad" and r["chapter"] == "05_autograd"}
    assert all("torch.autograd.grad" in m for m in msg.values()), msg
    assert "would have scored 2/2" in msg["autograd.gradient_norm_penalty"]


def test_hung_objects_and_runs_say_what_happened(graded):
    rows, *_ = graded
    msg = {(r["student"], r["exercise"].split(".")[1]): r["message"] for r in rows}
    assert "stopped after" in msg[("del hangs", "accumulate_step")]
    assert "RecursionError" in msg[("getattr recurses", "gradient_norm_penalty")]
    assert "stopped after" in msg[("backward hangs", "silu")]
    assert "stopped after 30 s" in msg[("ddp rank hangs", "ddp_train")]  # its declared 60 s, scaled by 10/20


def test_no_process_is_left_behind(graded):
    _, left, seen = graded
    assert seen >= 2  # two workers' kernels were found while grading ran
    assert not [p.info for p in left if p.is_running()]
