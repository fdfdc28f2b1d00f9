"""`python -m grader gradescope-run`: grade one Gradescope submission into its results.json.

Run by the autograder zip's `run_autograder` (see grader/authoring/gradescope.py) inside Gradescope's
container, once per submission. The submission folder is graded as a class of one student, with the
same pipeline and limits as `make grade`; the student's results.json becomes Gradescope's, with a
summary for the student on top. Whatever happens, a results.json is written: a submission the grader
cannot handle scores 0 with a message saying why, never an autograder error page.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from grader import chapters as chapter_names
from grader.autograde.cohort import default_workers, grade_cohort
from grader.autograde.kernel import Limits
from grader.autograde.report import write_atomic

STUDENT = "submission"


def results_for(submission: Path, chapters: list[str], limits: Limits, console: Console) -> dict:
    """Gradescope's results for one submission folder (graded in a scratch copy: the submission is never written)."""
    with tempfile.TemporaryDirectory(prefix="gradescope-") as tmp:
        subs = Path(tmp) / "submissions"
        shutil.copytree(submission, subs / STUDENT, symlinks=True)
        out = Path(tmp) / "out"
        grade_cohort(subs, out, max(1, min(2, default_workers())), limits, chapters, console)
        results = json.loads((out / STUDENT / "results.json").read_text(encoding="utf-8"))
    tests = results.get("tests", [])
    score = results.get("score", 0)
    max_score = round(sum(t["max_score"] for t in tests), 2)
    graded = sorted({t["extra_data"]["chapter"] for t in tests if t["extra_data"]["status"] not in ("missing", "invalid")})
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
        results = results_for(args.submission, chapters, Limits(threads=1), console)
    except Exception as e:  # the autograder must always leave a results.json behind
        results = {"score": 0.0, "output": f"The autograder could not grade this submission ({type(e).__name__}: "
                                           f"{e}). Please tell your instructor.", "tests": [],
                   "stdout_visibility": "hidden"}
    results["execution_time"] = round(time.monotonic() - start, 1)
    write_atomic(args.results, json.dumps(results, ensure_ascii=False, indent=2) + "\n")
    console.print(f"wrote {args.results}: {results['score']} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
