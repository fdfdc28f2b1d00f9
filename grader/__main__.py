"""`python -m grader <command>`: lab, test, grade, mfu, student, release, demo, execute, gradescope, gradescope-run, selfcheck."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("lab", help="set up what is missing, then open JupyterLab on the notebooks", add_help=False)
    sub.add_parser("test", help="set up what is missing, then run every notebook and show each exercise",
                   add_help=False)
    sub.add_parser("grade", help="grade a folder of submissions into grades.csv and per-student reports",
                   add_help=False)
    sub.add_parser("mfu", help="time matmuls per dtype on this device and report MFU", add_help=False)
    sub.add_parser("student", help="generate notebooks/ from solutions/", add_help=False)
    sub.add_parser("release", help="build the student release (no solutions, no hidden checks)", add_help=False)
    sub.add_parser("demo", help="regenerate the demo cohort in demo/submissions from solutions/", add_help=False)
    sub.add_parser("execute", help="run solution notebooks and save them with their outputs", add_help=False)
    sub.add_parser("gradescope", help="build Gradescope's autograder zip (dist/autograder.zip)", add_help=False)
    sub.add_parser("gradescope-run", help="grade one Gradescope submission (run by the autograder zip)",
                   add_help=False)
    sub.add_parser("selfcheck", help="run your notebooks and show where each exercise stands", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command in ("lab", "test"):  # first, and importing only the standard library: no venv exists yet
        from grader import lab

        return lab.main_lab(rest) if args.command == "lab" else lab.main_test(rest)
    if args.command == "mfu":
        from grader.mfu import main as run
    elif args.command == "selfcheck":
        from grader.selfcheck import main as run
    elif args.command in ("grade", "gradescope-run"):
        try:
            if args.command == "grade":
                from grader.autograde.cli import main as run
            else:
                from grader.autograde.gradescope import main as run
        except ModuleNotFoundError:
            print("`grade` is for instructors: the student release does not include the grader", file=sys.stderr)
            return 2
    else:
        try:
            if args.command == "student":
                from grader.authoring.student import main as run
            elif args.command == "demo":
                from grader.authoring.demo import main as run
            elif args.command == "execute":
                from grader.authoring.execute import main as run
            elif args.command == "gradescope":
                from grader.authoring.gradescope import main as run
            else:
                from grader.authoring.release import main as run
        except ModuleNotFoundError:
            print(f"`{args.command}` is for course authors: the student release does not include it",
                  file=sys.stderr)
            return 2
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
