"""`python -m grader gradescope-run`: grade one Gradescope submission into its results.json.

Run by the autograder zip's `run_autograder` (see grader/authoring/gradescope.py) inside Gradescope's
container, once per submission. The submission folder is graded as a class of one student, with the
same pipeline and limits as `make grade`; the student's results.json becomes Gradescope's, with a
summary for the student on top. Whatever happens, a results.json is written: a submission the grader
cannot handle scores 0 with a message saying why, never an autograder error page.

The kernel runs in the bubblewrap sandbox where the image can run it (setup.sh installs it); where it
cannot (Docker often refuses the namespaces), it runs as the unprivileged `KERNEL_USER`, and the hidden
checks and the results folder are first made unreadable to anyone but root.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
from rich.console import Console

from grader import chapters as chapter_names
from grader.autograde.cohort import SEED_FILE, default_workers, grade_cohort
from grader.autograde.kernel import Limits
from grader.autograde.report import write_atomic
from grader.autograde.sandbox import GRADER_DIR, bwrap_problem
from grader.results import Status

STUDENT = "submission"
KERNEL_USER = "grader-kernel"  # setup.sh creates it; made here too when missing


def kernel_user(results: Path) -> str:
    """Without a usable bubblewrap: the unprivileged user the kernels run as, after locking the autograder's
    source (hidden checks included) and the results away from it ("" with bubblewrap, or when not root)."""
    if not bwrap_problem() or os.geteuid() != 0:
        return ""
    try:
        pwd.getpwnam(KERNEL_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", KERNEL_USER],
                       check=True, capture_output=True)
    for private in (GRADER_DIR.parent, GRADER_DIR / "hidden", results.parent):
        private.mkdir(parents=True, exist_ok=True)
        os.chmod(private, 0o700)  # root's only: the kernel user can neither list nor read it
    return KERNEL_USER


def end_kernel_user(user: str) -> None:
    """Kill whatever the kernel user still runs (a daemon a notebook left behind) before the results are read."""
    if not user:
        return
    uid = pwd.getpwnam(user).pw_uid
    for proc in psutil.process_iter(["uids"]):
        if proc.info["uids"] is not None and uid in proc.info["uids"]:
            with contextlib.suppress(psutil.Error):
                proc.kill()


def results_for(submission: Path, chapters: list[str], limits: Limits, console: Console, user: str = "") -> dict:
    """Gradescope's results for one submission folder (graded in a scratch copy: the submission is never written)."""
    with tempfile.TemporaryDirectory(prefix="gradescope-") as tmp:
        subs = Path(tmp) / "submissions"
        shutil.copytree(submission, subs / STUDENT, symlinks=True)
        out = Path(tmp) / "out"
        summary = grade_cohort(subs, out, max(1, min(2, default_workers())), limits, chapters, console,
                               "auto", user, class_report=False)
        console.print(summary.sandbox)
        # For the instructor only (the log is hidden from the student): the secret this submission's hidden
        # checks drew their inputs with, to replay its grading (`python -m grader grade ... --seed`).
        console.print(f"hidden checks' seed: {(out / '.state' / SEED_FILE).read_text(encoding='ascii').strip()}")
        results = json.loads((out / STUDENT / "results.json").read_text(encoding="utf-8"))
    tests = results.get("tests", [])
    score = results.get("score", 0)
    max_score = round(sum(t["max_score"] for t in tests), 2)
    graded = sorted({t["extra_data"]["chapter"] for t in tests if t["extra_data"]["status"] not in (Status.MISSING, Status.INVALID)})
    missing = sorted({t["extra_data"]["chapter"] for t in tests} - set(graded))
    lines = [f"{score:g} of {max_score:g} points; {sum(t['status'] == 'passed' for t in tests)} of {len(tests)} "
             f"exercises passed."]
    if graded:
        lines.append("Graded: " + ", ".join(f"{c}.ipynb" for c in graded) + ".")
    if missing:
        lines.append("Not graded (no readable notebook found): " + ", ".join(f"{c}.ipynb" for c in missing) +
                     ". Submit the notebooks with their names, e.g. 01_tensors.ipynb.")
    lines.append("Each test below is one exercise; hidden checks say whether they passed, never their inputs.")
    results["output"] = "\n".join(lines)
    results["stdout_visibility"] = "hidden"  # the run's log is for the instructor
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader gradescope-run", description=__doc__.splitlines()[0])
    parser.add_argument("--submission", type=Path, required=True, help="the submission folder (/autograder/submission)")
    parser.add_argument("--results", type=Path, required=True, help="where results.json goes")
    parser.add_argument("--chapters", default="", help="comma-separated notebook stems this assignment grades")
    args = parser.parse_args(argv)
    start = time.monotonic()
    chapters = [c.strip() for c in args.chapters.split(",") if c.strip()] or list(chapter_names.NOTEBOOKS)
    console = Console(stderr=True)
    try:
        if not args.submission.is_dir():
            raise FileNotFoundError(f"no submission folder at {args.submission}")
        user = kernel_user(args.results)
        try:
            results = results_for(args.submission, chapters, Limits(), console, user)
        finally:
            end_kernel_user(user)
    except Exception as e:  # the autograder must always leave a results.json behind
        results = {"score": 0.0, "output": f"The autograder could not grade this submission ({type(e).__name__}: "
                                           f"{e}). Please tell your instructor.", "tests": [],
                   "stdout_visibility": "hidden"}
    results["execution_time"] = round(time.monotonic() - start, 1)
    write_atomic(args.results, json.dumps(results, ensure_ascii=False, indent=2) + "\n")
    console.print(f"wrote {args.results}: {results['score']} points")
    return 0
