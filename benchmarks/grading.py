"""What grading a class costs, for `make bench`: worker-seconds per notebook, where they go, and how it scales.

1. The demo cohort (3 students x 10 chapters) graded with 1 worker, with every available worker count up to the
   cores (or those `--workers 1,4,16` names), and with `--whole-notebooks` (unless `--no-whole-notebooks`):
   notebooks per second (overall, and while grading: first notebook done to last, which leaves out the run's
   fixed start and class report, as a class of hundreds nearly does), the cores the machine kept busy,
   worker-seconds per notebook (the sum of the records' wall times over notebooks graded) by chapter, the share
   of kernel start, cells and checks, the speed-up per worker count (and while grading: reported, not judged),
   and whether grades.csv is the same every way.
   Targets: <= 3.2 worker-seconds per notebook on average; 2 workers >= 1.8x one worker. `--rounds N` times
   every count N times in turn and judges on the medians: a virtual machine's speed varies from one minute to
   the next (the share of the cores' time its host kept, "stolen", is printed where there is any).
   `--pinned` also times each count confined to as many cores as workers (sched_setaffinity), in the same
   rounds: the scaling of the design itself, apart from what a lone worker's run gains by starting the next
   kernel ahead on an idle core, which the unpinned speed-up (the target's) includes. Reported, not judged.
2. `--students N`: a generated class of N students (solved, half solved, blank and hazardous, in turn) instead,
   with worker-seconds per notebook by kind of student.
3. The sandbox's cost: the demo cohort with `--sandbox on` and `--sandbox off`, alternately; target <= 1.05x.
4. A check's round trip to a grading kernel: milliseconds of wall and of CPU (this process, the kernel) per call of
   a student's two-argument function, the unit a check's calls are made of (chapter 01's checks make about 500).
Reports, never gates.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import nbformat
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.authoring.demo import answered  # noqa: E402
from grader.autograde.cohort import default_workers  # noqa: E402  (the cores this process may run on)

DEMO = ROOT / "demo" / "submissions"
PER_NOTEBOOK_TARGET, SPEEDUP_TARGET, SANDBOX_TARGET = 3.2, 1.8, 1.05
SEED = "bench"  # the same hidden inputs in every run, so grades.csv can be compared byte for byte
# A hazardous student's extra cell, in turns: a loop the cell time limit stops, a kernel that exits, memory.
HAZARDS = ("while True:\n    pass\n", "import os\nos._exit(1)\n", "x = bytearray(64 * 2**30)\n")
# The kinds of a generated class's students, in turn. A hazardous student's loop runs to the cell limit (60 s)
# in each of its notebooks: "by kind" shows the others' seconds apart from it.
KINDS = ("solved", "half", "blank", "hazardous")


def build_class(root: Path, students: int) -> Path:
    """N students x every chapter: solved, half solved, blank and hazardous (solved plus one bad cell), in turn."""
    solutions = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    for i in range(students):
        kind = KINDS[i % len(KINDS)]
        for path in solutions:
            nb = answered(nbformat.read(path, as_version=4), {"half": 0.5, "blank": 0.0}.get(kind, 1.0))
            if kind == "hazardous":
                nb.cells.append(nbformat.v4.new_code_cell(HAZARDS[(i // 4) % len(HAZARDS)]))
            target = root / f"{kind} {i:03d}" / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, target)
    return root


BUSY: dict[Path, float] = {}  # OUT -> cores busy on average while it was graded (the whole machine's, psutil)
STOLEN: dict[Path, float] = {}  # OUT -> of that time, the share a virtual machine's host kept its cores (steal)
CORES: dict[Path, int] = {}  # OUT -> the cores its run could use


def grade(cohort: Path, out: Path, workers: int, *flags: str, cores: int | None = None) -> float:
    """Wall seconds of `python -m grader grade` into a fresh OUT (nothing reused); how many cores the machine kept
    busy meanwhile goes to BUSY (a speed-up short of the worker count with every core busy is the CPU's limit).
    `cores`: the run and every process it starts confined to that many of this process's cores."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cores is not None and not 0 < cores <= len(allowed):
        raise ValueError(f"cannot confine a run to {cores} cores: this process may run on {len(allowed)}")
    confine = (lambda: os.sched_setaffinity(0, allowed[:cores])) if cores is not None else None
    before, start = psutil.cpu_times(), time.perf_counter()
    subprocess.run([sys.executable, "-m", "grader", "grade", str(cohort), "--out", str(out), "--workers",
                    str(workers), "--seed", SEED, *flags], cwd=ROOT, check=True, stderr=subprocess.DEVNULL,
                   preexec_fn=confine)
    wall, after = time.perf_counter() - start, psutil.cpu_times()
    busy = sum(getattr(after, k, 0.0) - getattr(before, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq"))
    BUSY[out] = busy / wall
    CORES[out] = cores or len(allowed)
    STOLEN[out] = (getattr(after, "steal", 0.0) - getattr(before, "steal", 0.0)) / (wall * default_workers())
    return wall


def record_files(out: Path) -> list[tuple[Path, dict]]:
    """Every notebook record the run graded, with its file (missing notebooks have no kernel and no cost)."""
    found = [(p, json.loads(p.read_text(encoding="utf-8"))) for p in (out / ".state").rglob("*.json")
             if p.name not in ("shard.json",)]
    return [(p, r) for p, r in found if r.get("source")]


def records(out: Path) -> list[dict]:
    return [r for _, r in record_files(out)]


def steady(out: Path) -> float:
    """Notebooks per second while the run graded: from the first record written to the last (each written as its
    notebook is done), without the run's fixed start (imports, the kernel template, the workers) and its class
    report. What a class of hundreds sees, where those fixed seconds are spread over every notebook."""
    times = sorted(p.stat().st_mtime for p, _ in record_files(out))
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 0.0


def report(label: str, out: Path, wall: float) -> float:
    """Print one run's figures; the worker-seconds per notebook."""
    graded = records(out)
    per = sum(r["seconds"] for r in graded) / max(1, len(graded))
    phases = defaultdict(float)
    by_chapter = defaultdict(list)
    for r in graded:
        for k, v in r.get("phases", {}).items():
            phases[k] += v
        by_chapter[r["chapter"]].append(r["seconds"])
    total = sum(r["seconds"] for r in graded) or 1.0
    shares = ", ".join(f"{k} {100 * phases[k] / total:.0f}%" for k in ("start", "cells", "checks"))
    busy = f", {BUSY[out]:.2f} of {default_workers()} cores busy" if out in BUSY else ""
    if CORES.get(out, default_workers()) < default_workers():
        busy += f" (the run confined to {CORES[out]})"
    if STOLEN.get(out, 0.0) >= 0.005:
        busy += f" ({100 * STOLEN[out]:.0f}% of their time stolen by the host)"
    print(f"  {label:<28} {wall:7.1f} s wall, {len(graded) / wall:5.2f} notebooks/s ({steady(out):.2f} while "
          f"grading){busy}, "
          f"{per:5.2f} worker-s per notebook ({shares}; the rest: files, scratch, waiting)")
    print("    by chapter: " + ", ".join(f"{c[:2]} {sum(v) / len(v):.1f}" for c, v in sorted(by_chapter.items())))
    by_kind = defaultdict(list)  # a generated class's students are named for their kind (build_class)
    for r in graded:
        if (kind := r["student"].split(" ")[0]) in KINDS:
            by_kind[kind].append(r["seconds"])
    if by_kind:
        print("    by kind of student: " + ", ".join(f"{k} {sum(by_kind[k]) / len(by_kind[k]):.1f}"
                                                 for k in KINDS if k in by_kind))
    return per


def worker_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to the cores, and the core count itself."""
    return sorted({1, *(2**k for k in range(1, 8) if 2**k <= cores), cores})


def scaling(cohort: Path, root: Path, label: str, counts: list[int], whole: bool = True, rounds: int = 1,
            pinned: bool = False) -> None:
    """Grade COHORT with each worker count (and once whole): the figures, the speed-ups, and whether grades agree.
    `rounds` > 1: every count once per round, in turn, so that a slow spell of the machine (a virtual machine's
    host taking its cores: "stolen") falls on each alike; the targets are judged on the rounds' medians.
    `pinned`: each count also confined to as many cores as workers, in the same rounds (reported, not judged)."""
    print(f"\n{label}: --seed {SEED}, {default_workers()} cores" + (f", {rounds} rounds" if rounds > 1 else ""))
    modes = [None, "pinned"] if pinned else [None]  # "pinned": n workers on n cores (counts up to the cores)
    walls: dict[tuple[str | None, int], list[float]] = defaultdict(list)
    rates: dict[int, list[float]] = defaultdict(list)  # notebooks per second while grading (steady), unpinned
    per: dict[int, list[float]] = defaultdict(list)
    outs = []
    for r in range(rounds):
        for mode in modes:
            for n in counts:
                if mode == "pinned" and n > default_workers():
                    continue
                out = root / (f"{label}-{n}-{r}" + ("-pinned" if mode else ""))
                wall = grade(cohort, out, n, cores=n if mode else None)
                walls[(mode, n)].append(wall)
                where = f" on {n} core{'s' if n > 1 else ''}" if mode else ""
                seconds = report(f"--workers {n}{where}" + (f" (round {r + 1})" if rounds > 1 else ""), out, wall)
                if mode is None:
                    per[n].append(seconds)
                    rates[n].append(steady(out))
                outs.append(out)
    if whole:
        out = root / f"{label}-whole"
        report(f"--workers {counts[-1]} --whole-notebooks", out, grade(cohort, out, counts[-1], "--whole-notebooks"))
        outs.append(out)
    if 1 in per:
        one = statistics.median(per[1])
        print(f"  worker-seconds per notebook, 1 worker: {one:.2f}  (target <= {PER_NOTEBOOK_TARGET})  "
              f"{'PASS' if one <= PER_NOTEBOOK_TARGET else 'FAIL'}")
        for mode in modes:
            for n in counts[1:]:
                if (mode, n) not in walls:
                    continue
                ratios = [a / b for a, b in zip(walls[(mode, 1)], walls[(mode, n)])]
                speedup = statistics.median(ratios)
                each = f" (median of the rounds: {', '.join(f'{x:.2f}' for x in ratios)})" if rounds > 1 else ""
                if mode:
                    print(f"  speed-up with {n} workers on {n} cores, against 1 worker on 1 core: {speedup:.2f}x{each}")
                    continue
                target = (f"  (target >= {SPEEDUP_TARGET})  {'PASS' if speedup >= SPEEDUP_TARGET else 'FAIL'}"
                          if n == 2 else "")
                print(f"  speed-up with {n} workers: {speedup:.2f}x{each}{target}")
                while_grading = [b / a for a, b in zip(rates[1], rates[n]) if a]
                print(f"    while grading (first notebook done to last, the run's fixed start and class report left "
                      f"out): {statistics.median(while_grading):.2f}x (reported, not judged)")
    grades = {(o / "grades.csv").read_bytes() for o in outs}
    print(f"  grades.csv identical for every run above: {len(grades) == 1}")


def sandbox_cost(root: Path, rounds: int = 2) -> None:
    """The demo cohort with and without the bubblewrap sandbox, alternately (a fresh OUT each time)."""
    from grader.autograde.sandbox import bwrap_problem

    if problem := bwrap_problem():
        print(f"\nSandbox cost: skipped ({problem})")
        return
    times: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(rounds):
        for mode in ("on", "off"):
            times[mode].append(grade(DEMO, root / f"sandbox-{mode}-{i}", 2, "--sandbox", mode))
    on, off = min(times["on"]), min(times["off"])
    print(f"\nSandbox cost: the demo cohort, --workers 2, fastest of {rounds} runs each")
    print(f"  --sandbox off   {off:7.1f} s   (runs: {', '.join(f'{t:.1f}' for t in times['off'])})")
    print(f"  --sandbox on    {on:7.1f} s   (runs: {', '.join(f'{t:.1f}' for t in times['on'])})")
    ratio = on / off
    print(f"  sandbox / no sandbox       {ratio:5.2f}  (target <= {SANDBOX_TARGET})  "
          f"{'PASS' if ratio <= SANDBOX_TARGET else 'FAIL'}")
    same = (root / "sandbox-on-0" / "grades.csv").read_bytes() == (root / "sandbox-off-0" / "grades.csv").read_bytes()
    print(f"  grades.csv identical with and without the sandbox: {same}")


def round_trip(root: Path, calls: int = 300, rounds: int = 3) -> None:
    """Section 4: `calls` calls of `f(a, b)` through the bridge, `rounds` times (a kernel started as grading starts
    one, unsandboxed: the sandbox adds nothing per call)."""
    import torch

    from grader import registry
    from grader.autograde.bridge import grading_kernel
    from grader.autograde.kernel import GiB, Limits

    exercise = registry.load().get("tensors.same_storage")
    limits = Limits(cell_timeout=60, check_timeout=10, memory=3 * GiB)
    print(f"\na check's round trip to the kernel ({calls} calls of f(a, b) on two 3-element tensors, {rounds} rounds)")
    folder = root / "round-trip"
    folder.mkdir(parents=True, exist_ok=True)
    with grading_kernel(["def f(a, b):\n    return a + b\n"], folder, limits) as bridge:
        me, x = psutil.Process(), torch.ones(3)
        kernel = psutil.Process(bridge.kernel.kernel_pid())
        for _ in range(rounds):
            mine, theirs, start = sum(me.cpu_times()[:2]), sum(kernel.cpu_times()[:2]), time.perf_counter()
            for _ in range(calls):
                bridge.deadline = time.monotonic() + 10
                bridge.call("f", exercise, (x, x), {})
            wall = time.perf_counter() - start
            print(f"  {1e3 * wall / calls:5.2f} ms wall, CPU {1e3 * (sum(me.cpu_times()[:2]) - mine) / calls:5.2f} ms "
                  f"here and {1e3 * (sum(kernel.cpu_times()[:2]) - theirs) / calls:5.2f} ms in the kernel per call")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=0, help="grade a generated class of N students instead "
                                                                  "of the demo cohort")
    parser.add_argument("--sandbox-only", action="store_true", help="measure only the sandbox's cost")
    parser.add_argument("--no-sandbox-cost", action="store_true", help="skip the sandbox's cost")
    parser.add_argument("--workers", type=lambda s: sorted({int(n) for n in s.split(",")}),
                        help="the worker counts to time, e.g. 1,4,16 (default: 1, 2, 4, ... up to the cores)")
    parser.add_argument("--no-whole-notebooks", action="store_true",
                        help="skip the --whole-notebooks run that grades.csv is compared with")
    parser.add_argument("--rounds", type=int, default=1, help="time every worker count this many times, in turn; "
                                                              "judge the targets on the medians (a noisy machine)")
    parser.add_argument("--pinned", action="store_true", help="also time each worker count on as many cores as "
                                                              "workers, in the same rounds")
    args = parser.parse_args(argv)
    counts = args.workers or worker_counts(default_workers())
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as tmp:
        root = Path(tmp)
        if not args.sandbox_only:
            if args.students:
                scaling(build_class(root / "class", args.students), root, f"a class of {args.students}", counts,
                        not args.no_whole_notebooks, args.rounds, args.pinned)
            else:
                scaling(DEMO, root, "the demo cohort", counts, not args.no_whole_notebooks, args.rounds, args.pinned)
        if not args.no_sandbox_cost:
            sandbox_cost(root)
        round_trip(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
