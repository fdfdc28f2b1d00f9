"""`python -m grader similarity SUBMISSIONS --out OUT`: which students' code for an exercise is similar.

Reads the submissions as grading does (folders, zips, Canvas's download), takes each student's code for each
exercise (studentcode.py), compares every pair per exercise (similarity.py) and writes similarity.html and
similarity.csv (similarity_report.py). Runs no student code. `python -m grader grade --similarity` does the
same after grading.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader import registry
from grader.autograde.canvas import collect_submissions, is_download_zip
from grader.autograde.cohort import graded_chapters
from grader.autograde.similarity import MIN_SHARED, THRESHOLD, similar_pairs
from grader.autograde.similarity_report import ExerciseSimilarity, write_similarity
from grader.autograde.studentcode import RELEASE, code_cells, exercise_code, release_code
from grader.chapters import key


@dataclass
class SimilarityRun:
    """What a run compared and wrote."""
    students: int = 0
    exercises: list[ExerciseSimilarity] = field(default_factory=list)
    seconds: float = 0.0
    written: list[Path] = field(default_factory=list)

    def line(self, out: Path) -> str:
        pairs = sum(len(r.pairs) for r in self.exercises)
        wrote = (f"wrote {' and '.join(p.name for p in self.written)} in {out}" if self.written
                 else f"{out}'s similarity files were already up to date")
        return (f"compared {self.students} students over {len(self.exercises)} exercises in {self.seconds:.1f} s: "
                f"{pairs} similar pair{'s' if pairs != 1 else ''}; {wrote}")


def run_similarity(submissions: Path, out: Path, chapters: list[str] | None = None, canvas: bool | None = None,
                   threshold: float = THRESHOLD, min_shared: int = MIN_SHARED, release: Path = RELEASE,
                   exercises: list[str] | None = None) -> SimilarityRun:
    """Compare every pair of students per exercise and write the two files; ValueError for an unknown chapter or
    exercise (before anything is written)."""
    start = time.monotonic()
    course = registry.load()
    run = SimilarityRun()
    with tempfile.TemporaryDirectory(prefix="similarity-") as scratch:
        found = collect_submissions(submissions, Path(scratch), canvas)
        chosen = graded_chapters(found.submissions, chapters, course)
        wanted = [e for c in chosen for e in course.of(key(c))]
        if exercises:
            unknown = sorted(set(exercises) - {e.id for e in wanted})
            if unknown:
                raise ValueError(f"unknown exercise(s) {', '.join(unknown)} in the chapters compared "
                                 f"({', '.join(chosen)})")
            wanted = [e for e in wanted if e.id in exercises]
        run.students = len(found.submissions)
        for chapter in chosen:
            cells = {}
            for sub in found.submissions:
                path = sub.find(chapter).path
                cells[sub.student] = code_cells(path) if path is not None else []
            given = release_code(chapter, release)
            for ex in (e for e in wanted if e.id.startswith(key(chapter) + ".")):
                codes = {student: exercise_code(c, ex) for student, c in cells.items()}
                pairs, own = similar_pairs(ex.id, codes, given, threshold, min_shared)
                run.exercises.append(ExerciseSimilarity(ex.id, len(codes), own, pairs))
    run.written = write_similarity(out, run.exercises, threshold, min_shared)
    run.seconds = round(time.monotonic() - start, 1)
    return run


def _share(text: str) -> float:
    value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"not a share between 0 and 1 (or 1% and 100%): {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader similarity", description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path, help="folder of <student>/ folders and zips, or Canvas's download")
    parser.add_argument("--out", type=Path, required=True, help="folder for similarity.html and similarity.csv")
    parser.add_argument("--chapters", help="comma-separated notebook stems (default: every chapter submitted)")
    parser.add_argument("--exercises", help="comma-separated exercise ids (default: every exercise)")
    parser.add_argument("--threshold", type=_share, default=THRESHOLD,
                        help=f"share of a student's own code that must be shared to list a pair ({THRESHOLD:g})")
    parser.add_argument("--min-tokens", type=int, default=MIN_SHARED,
                        help=f"tokens a pair must share at least ({MIN_SHARED})")
    parser.add_argument("--canvas", action="store_const", const=True, default=None,
                        help="read SUBMISSIONS as Canvas's download (default: when every file is named like one)")
    args = parser.parse_args(argv)
    if not (args.submissions.is_dir() or is_download_zip(args.submissions)):
        print(f"similarity could not run: {args.submissions} is not a folder of submissions "
              "(or a .zip of Canvas's download)", file=sys.stderr)
        return 2
    try:
        chapters = [c.strip() for c in args.chapters.split(",")] if args.chapters else None
        exercises = [x.strip() for x in args.exercises.split(",")] if args.exercises else None
        run = run_similarity(args.submissions, args.out, chapters, args.canvas, args.threshold, args.min_tokens,
                             exercises=exercises)
    except (ValueError, OSError) as e:
        print(f"similarity could not run: {e}", file=sys.stderr)
        return 2
    print(run.line(args.out), file=sys.stderr)
    return 0
