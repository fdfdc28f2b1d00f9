"""`python -m grader grade SUBMISSIONS --out OUT`: grade a class's notebooks into four output files."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from rich.console import Console

from grader.autograde import adjust, integrity, regrade
from grader.autograde.canvas import is_download_zip
from grader.autograde.cohort import Shard, Summary, default_workers, grade_cohort
from grader.autograde.kernel import GiB, Limits
from grader.autograde.sandbox import MODES, SandboxUnavailable

DEMO = Path(__file__).resolve().parents[2] / "demo" / "submissions"


def parse_size(text: str) -> int:
    """`4G`, `512M`, `1.5GiB` or a number of bytes."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kKmMgG]?)(i?[bB])?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 4G or 512M)")
    return int(float(m.group(1)) * {"": 1, "k": 2**10, "m": 2**20, "g": GiB}[m.group(2).lower()])


def main(argv: list[str] | None = None) -> int:
    d = Limits()
    parser = argparse.ArgumentParser(prog="python -m grader grade", description=__doc__)
    parser.add_argument("submissions", nargs="?", type=Path,
                        help="folder of <student>/ folders and <student>.zip files, or Canvas's download (default: the demo cohort)")
    parser.add_argument("--out", type=Path, required=True, help="folder for grades.csv, gradebook.csv and per-student files")
    parser.add_argument("--workers", type=int, default=default_workers(), help="notebooks graded at once (default: cores)")
    parser.add_argument("--timeout", type=float, default=d.cell_timeout, help=f"seconds per notebook cell ({d.cell_timeout:g})")
    parser.add_argument("--check-timeout", type=float, default=d.check_timeout, help=f"seconds per check ({d.check_timeout:g}); checks that declare a longer need are scaled alike")
    parser.add_argument("--notebook-timeout", type=float, default=d.notebook_timeout,
                        help=f"seconds per notebook, cells and checks together ({d.notebook_timeout:g})")
    parser.add_argument("--memory", type=parse_size, default=d.memory,
                        help="memory a kernel may use beyond its own start-up, its files included (4G)")
    parser.add_argument("--disk", type=parse_size, default=None,
                        help="of --memory, what its files may take: its folder, /tmp and /dev/shm, held in memory "
                             "(default: a quarter)")
    parser.add_argument("--processes", type=int, default=d.processes,
                        help=f"processes and threads a kernel and all it starts may have at once ({d.processes})")
    parser.add_argument("--shard", default=None, metavar="I/N",
                        help="grade only the I-th of N shards of the class (a stable share of the students; needs "
                             "--seed); join the shards' OUT folders with `python -m grader merge`")
    parser.add_argument("--whole-notebooks", action="store_true",
                        help="run every cell, the chapter's unchanged demonstration cells too (slower; the same grades)")
    parser.add_argument("--seed", default=None,
                        help="the secret the hidden checks draw their inputs with, to replay a run (default: the "
                             "one OUT/.state/seed recorded, else a new one)")
    parser.add_argument("--chapters", help="comma-separated notebook stems (default: every chapter submitted)")
    parser.add_argument("--sandbox", choices=MODES, default="auto",
                        help="run each kernel in a bubblewrap sandbox: auto (where it works, else warn), on (or refuse), off")
    parser.add_argument("--kernel-user", default="",
                        help="without a sandbox, run the kernels as this unprivileged user (the grader must start as root)")
    parser.add_argument("--similarity", action="store_true",
                        help="also compare the students' code per exercise: similarity.html and similarity.csv")
    adjust.add_arguments(parser)
    regrade.add_arguments(parser)
    args = parser.parse_args(argv)
    options = adjust.from_args(parser, args)
    selection = regrade.from_args(parser, args)

    submissions = args.submissions or DEMO
    console = Console(stderr=True)
    try:
        usable = submissions.is_dir() or is_download_zip(submissions)
        why = "is not a folder of submissions (or a .zip of Canvas's download)"
    except OSError as e:
        usable, why = False, f"cannot be read ({e.strerror})"
    if not usable:
        console.print(f"[red]grading could not run:[/] {submissions} {why}", soft_wrap=True)
        return 2
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        probe = args.out / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        console.print(f"[red]grading could not run:[/] cannot write to {args.out} ({e.strerror})", soft_wrap=True)
        return 2
    workers = max(1, args.workers)
    if args.disk is not None and args.disk >= args.memory:
        console.print(f"[red]grading could not run:[/] --disk must be less than --memory", soft_wrap=True)
        return 2
    limits = Limits(cell_timeout=args.timeout, check_timeout=args.check_timeout,
                    notebook_timeout=args.notebook_timeout, memory=args.memory,
                    disk=args.disk, processes=max(16, args.processes))
    chapters = [c.strip() for c in args.chapters.split(",")] if args.chapters else None
    try:
        shard = Shard.parse(args.shard) if args.shard else None
        summary = grade_cohort(submissions, args.out, workers, limits, chapters, console, args.sandbox,
                               args.kernel_user, options, selection, args.seed, args.whole_notebooks, shard)
    except (ValueError, SandboxUnavailable) as e:
        console.print(f"[red]grading could not run:[/] {e}", soft_wrap=True)
        return 2
    except integrity.Changed as e:
        console.print(f"[red]grading stopped:[/] {e}", soft_wrap=True)
        return 2
    for w in summary.warnings:
        console.print(f"[yellow]note:[/] {w}", soft_wrap=True)
    if summary.sandbox.startswith("no sandbox"):
        console.print(f"[yellow]warning:[/] {summary.sandbox}", soft_wrap=True)
    console.print(closing_line(summary, args.out), soft_wrap=True)
    if args.similarity:
        from grader.autograde.similarity_cli import run_similarity

        console.print(run_similarity(submissions, args.out, chapters, options.canvas).line(args.out), soft_wrap=True)
    return 0


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def closing_line(summary: Summary, out: Path) -> str:
    """What the run did, exactly: students, notebooks run or reused, and the files it actually (re)wrote."""
    head = (f"graded {_count(summary.students, 'student')} ({_count(summary.notebooks, 'notebook')} run, "
            f"{summary.reused} kept from an earlier run) in {summary.seconds:.1f} s")
    if not summary.written:
        return f"{head}; every output in {out} was already up to date"
    top = sorted(p.name for p in summary.written if p.parent == out)
    per_student = len(summary.written) - len(top)
    parts = top + ([_count(per_student, "per-student file")] if per_student else [])
    listed = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    return f"{head}; wrote {listed} in {out}"
