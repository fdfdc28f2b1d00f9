"""How much does grading cost over merely running the notebooks? A report for `make bench`.

A generated cohort of 10 students x every chapter that has a solution (solved, half solved or
blank, as real classes are), then three wall times: executing every notebook with plain nbclient
(one after another, the course kernel), `python -m grader grade` with 1 worker, and with 2.
Targets: grading <= 1.25x bare execution; 2 workers >= 1.7x faster than 1. Then the sandbox's cost: the
demo cohort graded with `--sandbox on` and `--sandbox off`, alternately, ROUNDS times each (the fastest of
each counts); target <= 1.05x. Reports, never gates.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.authoring.demo import answered  # noqa: E402

FRACTIONS = (1.0, 0.5, 1.0, 0.0, 1.0, 0.5, 1.0, 1.0, 0.5, 1.0)  # how much each of the 10 students solved
OVERHEAD_TARGET, SPEEDUP_TARGET, SANDBOX_TARGET = 1.25, 1.7, 1.05
ROUNDS = 2
DEMO = ROOT / "demo" / "submissions"


def build_cohort(root: Path) -> list[Path]:
    notebooks = []
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        solution = nbformat.read(path, as_version=4)
        for i, fraction in enumerate(FRACTIONS):
            target = root / f"student {i:02d}" / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(answered(solution, fraction), target)
            notebooks.append(target)
    return notebooks


def bare(notebooks: list[Path]) -> float:
    """nbclient with its defaults, as `jupyter execute` would run them, errors allowed (half-done notebooks)."""
    start = time.perf_counter()
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, kernel_name="resource-accounting", timeout=600, allow_errors=True,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def grading(cohort: Path, out: Path, workers: int, *flags: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grader", "grade", str(cohort), "--out", str(out),
                    "--workers", str(workers), *flags], cwd=ROOT, check=True, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def sandbox_cost(root: Path) -> None:
    """The demo cohort with and without the bubblewrap sandbox, alternately (a fresh OUT each time: no reuse)."""
    from grader.autograde.sandbox import bwrap_problem

    if problem := bwrap_problem():
        print(f"\nSandbox cost: skipped ({problem})")
        return
    times: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(ROUNDS):
        for mode in ("on", "off"):
            times[mode].append(grading(DEMO, root / f"sandbox-{mode}-{i}", 2, "--sandbox", mode))
    on, off = min(times["on"]), min(times["off"])
    print(f"\nSandbox cost: the demo cohort, --workers 2, fastest of {ROUNDS} runs each")
    print(f"  --sandbox off   {off:7.1f} s   (runs: {', '.join(f'{t:.1f}' for t in times['off'])})")
    print(f"  --sandbox on    {on:7.1f} s   (runs: {', '.join(f'{t:.1f}' for t in times['on'])})")
    ratio = on / off
    print(f"  sandbox / no sandbox       {ratio:5.2f}  (target <= {SANDBOX_TARGET})  "
          f"{'PASS' if ratio <= SANDBOX_TARGET else 'FAIL'}")
    same = (root / "sandbox-on-0" / "grades.csv").read_bytes() == (root / "sandbox-off-0" / "grades.csv").read_bytes()
    print(f"  grades.csv identical with and without the sandbox: {same}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox-only", action="store_true", help="measure only the sandbox's cost")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as tmp:
        root = Path(tmp)
        if args.sandbox_only:
            sandbox_cost(root)
            return 0
        notebooks = build_cohort(root / "cohort")
        chapters = len(notebooks) // len(FRACTIONS)
        print(f"\nGrading: {len(FRACTIONS)} students x {chapters} chapter(s) = {len(notebooks)} notebooks")
        t_bare = bare(notebooks)
        t_one = grading(root / "cohort", root / "out1", 1)
        t_two = grading(root / "cohort", root / "out2", 2)
        overhead, speedup = t_one / t_bare, t_one / t_two
        print(f"  bare nbclient execution, one after another  {t_bare:7.1f} s")
        print(f"  python -m grader grade --workers 1          {t_one:7.1f} s")
        print(f"  python -m grader grade --workers 2          {t_two:7.1f} s")
        print(f"  grading / bare execution   {overhead:5.2f}  (target <= {OVERHEAD_TARGET})  "
              f"{'PASS' if overhead <= OVERHEAD_TARGET else 'FAIL'}")
        print(f"  1 worker / 2 workers       {speedup:5.2f}  (target >= {SPEEDUP_TARGET})  "
              f"{'PASS' if speedup >= SPEEDUP_TARGET else 'FAIL'}")
        same = (root / "out1" / "grades.csv").read_bytes() == (root / "out2" / "grades.csv").read_bytes()
        print(f"  grades.csv identical with 1 and 2 workers: {same}")
        sandbox_cost(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
