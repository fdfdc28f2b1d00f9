"""`python -m grader <command>`: lab, test, grade, merge, mfu, student, release, translate, demo, execute,
gradescope, gradescope-run, similarity, selfcheck."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from typing import Callable, NoReturn

# command: (what it does, the module whose main() runs it, who it is for where the student release leaves it out)
COMMANDS: dict[str, tuple[str, str, str | None]] = {
    "lab": ("set up what is missing, then open JupyterLab on the notebooks", "grader.lab", None),
    "test": ("set up what is missing, then run every notebook and show each exercise", "grader.lab", None),
    "grade": ("grade a folder of submissions into grades.csv and per-student reports", "grader.autograde.cli",
              "instructors"),
    "mfu": ("time matmuls per dtype on this device and report MFU", "grader.course.mfu", None),
    "student": ("generate notebooks/ from solutions/", "grader.authoring.student", "course authors"),
    "release": ("build the student release (no solutions, no hidden checks)", "grader.authoring.release",
                "course authors"),
    "translate": ("list, check and write the translations of the student release (translations/LANG/)",
                  "grader.authoring.i18n.cli", "course authors"),
    "demo": ("regenerate the demo cohort in demo/submissions from solutions/", "grader.authoring.demo", "course authors"),
    "execute": ("run solution notebooks and save them with their outputs", "grader.authoring.execute", "course authors"),
    "gradescope": ("build Gradescope's autograder zip (dist/autograder.zip)", "grader.authoring.gradescope",
                   "course authors"),
    "gradescope-run": ("grade one Gradescope submission (run by the autograder zip)", "grader.autograde.gradescope",
                       "instructors"),
    "merge": ("join the OUT folders of a class graded in shards (grade --shard i/n) into one",
              "grader.autograde.merge", "instructors"),
    "similarity": ("list pairs of students whose code for an exercise is similar (similarity.html)",
                   "grader.autograde.similarity_cli", "instructors"),
    "selfcheck": ("run your notebooks and show where each exercise stands", "grader.selfcheck", None),
}


def _entry(command: str) -> Callable[[list[str]], int] | None:
    """The command's main(); None (having said why) when the student release leaves its module out. Any other
    missing module (a dependency, a module of the grader that should be there) is raised as the error it is."""
    _, module, audience = COMMANDS[command]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        ours = e.name is not None and (module == e.name or module.startswith(e.name + "."))
        if audience is None or not ours or e.name == "grader":
            raise
        print(f"`{command}` is for {audience}: the student release does not include it", file=sys.stderr)
        return None
    if command == "lab":  # lab and test import only the standard library: no venv may exist yet
        return mod.main_lab
    return mod.main_test if command == "test" else mod.main


def available() -> dict[str, tuple[str, str, str | None]]:
    """The commands this install can run: the student release leaves the instructors' and authors' modules out,
    so its --help lists only what it has (looked up without importing them)."""
    def present(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is not there
            return False
    return {name: entry for name, entry in COMMANDS.items() if entry[2] is None or present(entry[1])}


def main(argv: list[str] | None = None) -> int:
    shown = available()
    parser = argparse.ArgumentParser(prog="python -m grader", description=f"The course's commands: {', '.join(shown)}.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, _, _) in COMMANDS.items():  # every one is parsed, to say why it is not there
        sub.add_parser(name, add_help=False, **({"help": help_text} if name in shown else {}))
    args, rest = parser.parse_known_args(argv)
    run = _entry(args.command)
    return 2 if run is None else run(rest)


def finish(code: int | None) -> NoReturn:
    """End the process as Python's shutdown would (threads joined, atexit functions run, output flushed), without
    then tearing down every imported object one by one: 0.6 CPU-seconds per command once torch is imported, a
    quarter of a `grade` that has nothing left to grade. Nothing here leaves a file open for writing."""
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]  # as Python's shutdown begins: wait for non-daemon threads
    atexit._run_exitfuncs()  # temporary folders removed, child processes joined, logging flushed
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`... | head`), a closed stream: nothing more can be said
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    finish(main())
