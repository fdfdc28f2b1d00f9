"""`python -m grader grade` over a cohort of hazardous notebooks, in real kernels: one shared grading run.

Every hazard student's exercises must end with exactly the expected status, and the control
students' grades must be what they would be alone.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests import hazards
from tests.inprocess import run_grader

ROOT = Path(__file__).resolve().parents[1]
# Short limits keep the hazards quick; 5 s per check (not less) leaves room for a loaded machine: make test
# grades this cohort while another test file runs beside it, and on a GPU machine a 3 s limit once stopped a
# correct check.
FAST = ["--timeout", "10", "--check-timeout", "5", "--notebook-timeout", "300", "--memory", "3G"]


def grade_args(submissions: Path, out: Path, *extra: str, workers: int = 2) -> list[str]:
    return ["grade", str(submissions), "--out", str(out), "--workers", str(workers), *FAST, *extra]


def grade(submissions: Path, out: Path, *extra: str, workers: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *grade_args(submissions, out, *extra, workers=workers)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)


def grade_again(submissions: Path, out: Path) -> subprocess.CompletedProcess:
    """The same command in this process (tests/inprocess.py), for a run that grades no notebook."""
    return run_grader(*grade_args(submissions, out))


def rows(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("hazards")
    subs = hazards.build(root / "submissions")
    out = root / "out"
    run = grade(subs, out)
    assert run.returncode == 0, run.stderr[-3000:]
    return subs, out, run


@pytest.mark.parametrize("student", list(hazards.COHORT))
def test_each_exercise_ends_with_the_expected_status(graded, student):
    _, out, _ = graded
    got = {r["exercise"].split(".", 1)[1]: r["status"] for r in rows(out) if r["student"] == student}
    want = hazards.COHORT[student][1]
    detail = {r["exercise"]: r["message"] for r in rows(out) if r["student"] == student and r["status"] != want[
        r["exercise"].split(".", 1)[1]]}
    assert got == want, detail


def test_every_message_is_one_deterministic_line(graded):
    subs, out, _ = graded
    for r in rows(out):
        assert r["message"] and "\n" not in r["message"]
        assert str(subs) not in r["message"] and "/tmp" not in r["message"] and "0x7f" not in r["message"]


def test_scores_follow_statuses(graded):
    _, out, _ = graded
    for r in rows(out):
        score, max_score = float(r["score"]), float(r["max_score"])
        if r["status"] == "passed":
            assert score == max_score
        elif r["status"] in ("tampered", "missing", "invalid", "not_implemented"):
            assert score == 0
        else:
            assert score < max_score


def test_tampering_is_named_and_the_independent_result_reported(graded):
    _, out, _ = graded
    msg = {(r["student"], r["exercise"]): r["message"] for r in rows(out)}
    assert "grader.check" in msg[("patched grader", "tensors.same_storage")]
    assert "would have scored 1/2 (4/8 checks passed)" in msg[("patched grader", "tensors.same_storage")]
    assert "torch.allclose" in msg[("patched allclose", "tensors.attention_scores")]
    assert "would have scored 0/2" in msg[("patched allclose", "tensors.attention_scores")]
    assert "would have scored 3/3" in msg[("patched allclose", "tensors.element_offset")]
    assert "showtraceback" in msg[("suppressed tracebacks", "tensors.merge_heads")]
    assert "would have scored 0/1" in msg[("suppressed tracebacks", "tensors.merge_heads")]


def test_hazard_messages_say_what_happened(graded):
    _, out, _ = graded
    msg = {(r["student"], r["exercise"]): r["message"] for r in rows(out)}
    assert "stopped after 5 s" in msg[("infinite loop", "tensors.element_offset")]
    assert "out of memory" in msg[("memory blowup", "tensors.attention_scores")]
    assert "SystemExit" in msg[("system exit", "tensors.split_heads")]
    assert "not valid JSON" in msg[("truncated json", "tensors.same_storage")]
    assert "data_ptr" not in msg[("control wrong", "tensors.same_storage")]  # the check's words, not the code's


def test_fake_result_files_change_nothing(graded):
    subs, out, _ = graded
    students = {r["student"] for r in rows(out)}
    assert students == set(hazards.COHORT)
    assert not (subs / "results.json").exists() and not (subs / "fake results" / "results.json").exists()
    book = {r["student"]: r for r in csv.DictReader(open(out / "gradebook.csv", encoding="utf-8"))}
    assert book["fake results"]["total"] == "0"
    assert book["control solved"]["total"] == book["control solved"]["max_total"] == "12"
    assert book["control wrong"]["total"] not in ("0", "12")


def test_gradebook_and_student_files(graded):
    _, out, _ = graded
    header = open(out / "gradebook.csv", encoding="utf-8").readline().strip()
    assert header == "student,01_tensors,total,max_total"
    for student in hazards.COHORT:
        results = json.loads((out / student / "results.json").read_text(encoding="utf-8"))
        assert {"score", "execution_time", "tests"} <= set(results)
        assert {t["status"] for t in results["tests"]} <= {"passed", "failed"}
        html = (out / student / "feedback.html").read_text(encoding="utf-8")
        assert "same_storage" in html


def test_hidden_checks_show_pass_or_fail_only(graded):
    _, out, _ = graded
    text = (out / "control wrong" / "results.json").read_text(encoding="utf-8")
    data = json.loads(text)
    hidden_lines = [line for t in data["tests"] for line in t["output"].splitlines() if "(hidden)" in line]
    assert hidden_lines
    for line in hidden_lines:
        assert line.endswith("(hidden)") or line.endswith(": a hidden check failed"), line


def test_a_second_run_reuses_everything_and_changes_no_byte(graded):
    subs, out, _ = graded
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    run = grade_again(subs, out)
    assert run.returncode == 0
    assert "0 notebooks run" in " ".join(run.stderr.split()), run.stderr[-2000:]
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before


def test_grading_cannot_run_without_submissions_or_output(tmp_path):
    run = grade_again(tmp_path / "nowhere", tmp_path / "out")
    assert run.returncode == 2 and "not a folder" in run.stderr
    (tmp_path / "subs").mkdir()
    (tmp_path / "file").write_text("x")
    run = grade_again(tmp_path / "subs", tmp_path / "file" / "out")
    assert run.returncode == 2 and "cannot write" in run.stderr


def chapter_01_of_the_demo(folder: Path) -> Path:
    """The demo cohort cut to chapter 01 (three notebooks: solved, untouched, half solved), zip included."""
    demo = ROOT / "demo" / "submissions"
    for student in ("Ada Lovelace", "Ben Bitdiddle"):
        (folder / student).mkdir(parents=True)
        for nb in (demo / student).glob("01_*.ipynb"):
            shutil.copy(nb, folder / student / nb.name)
    with zipfile.ZipFile(demo / "Chloé Dubois.zip") as z, zipfile.ZipFile(folder / "Chloé Dubois.zip", "w") as cut:
        for name in z.namelist():
            if Path(name).name.startswith("01_"):
                cut.writestr(name, z.read(name))
    return folder


def test_a_killed_run_resumes_to_the_same_outputs(tmp_path):
    demo = chapter_01_of_the_demo(tmp_path / "cohort")
    reference = tmp_path / "reference"
    assert grade(demo, reference, workers=1).returncode == 0
    with open(reference / "grades.csv", newline="", encoding="utf-8") as f:
        graded = list(csv.DictReader(f))
    chloe = [r["status"] for r in graded if r["student"] == "Chloé Dubois"]
    # the untouched notebook end to end under grading (the other chapters' stubs: tests/test_demo_grading.py)
    assert {(r["status"], r["score"]) for r in graded if r["student"] == "Ben Bitdiddle"} == {("not_implemented", "0")}
    assert {r["status"] for r in graded if r["student"] == "Ada Lovelace"} == {"passed"}
    half = len(hazards.EXERCISES) // 2  # the half-solved zip: its first half of the exercises solved, exactly
    assert chloe == ["passed"] * half + ["not_implemented"] * (len(hazards.EXERCISES) - half), chloe
    # The demo's notebooks are generated ones: grading skipped their unchanged demonstration cells, and grading
    # them with every cell gives the same grades (issue 29: what grading skips must change no grade).
    cells = {json.loads(p.read_text(encoding="utf-8"))["cells"] for p in (reference / ".state").rglob("*.json")}
    assert cells and all(c.startswith("skipped") and "demonstration cells" in c for c in cells), cells
    # Chloé's half-solved notebook alone (a notebook's demonstrations are skipped or run the same way whoever wrote
    # it): what she passes needs the cells the analysis kept, what she left needs none.
    chloe_only, whole = tmp_path / "chloe", tmp_path / "whole"
    chloe_only.mkdir()
    shutil.copy(demo / "Chloé Dubois.zip", chloe_only)
    assert grade(chloe_only, whole, "--whole-notebooks", workers=1).returncode == 0
    assert rows(whole) == [r for r in graded if r["student"] == "Chloé Dubois"]
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "grader", *grade_args(demo, out, workers=1)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not list((out / ".state").rglob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {p.relative_to(out): p.read_bytes() for p in (out / ".state").rglob("*.json")}
    assert 0 < len(done_before) < 3
    run = grade(demo, out, workers=1)
    assert run.returncode == 0
    assert f"{3 - len(done_before)} notebooks run" in " ".join(run.stderr.split())
    for name in ("grades.csv", "gradebook.csv"):
        assert (out / name).read_bytes() == (reference / name).read_bytes()
    for rel, data in done_before.items():  # what was graded before the kill was kept as it was
        assert (out / rel).read_bytes() == data



def test_a_kernel_waiting_for_the_next_notebook_takes_none_of_this_ones_processes(tmp_path):
    """Catches the threads of the kernel started ahead for the next notebook counted in the running notebook's
    --processes: it runs as the same kernel user, with ipykernel set up (12 threads). Ada's chapter 10 starts a
    forkserver and two ranks while her chapter 01's kernel waits: at --processes 24 a check of hers ended in an
    error with those threads counted (and at 32), and passes with them left out."""
    from grader.autograde.sandbox import bwrap_problem

    if os.geteuid() != 0 or bwrap_problem():
        pytest.skip("the limit is a kernel user's: only a grader running as root with bubblewrap has one")
    ada = tmp_path / "cohort" / "Ada Lovelace"
    ada.mkdir(parents=True)
    for nb in (ROOT / "demo" / "submissions" / "Ada Lovelace").glob("*.ipynb"):
        if nb.name.startswith(("01_", "10_")):
            shutil.copy(nb, ada / nb.name)
    run = grade(tmp_path / "cohort", tmp_path / "out", "--processes", "24", workers=1)
    assert run.returncode == 0, run.stderr[-3000:]
    assert {(r["chapter"], r["status"]) for r in rows(tmp_path / "out")} == {("01_tensors", "passed"),
                                                                             ("10_ddp", "passed")}
