"""`python -m grader merge OUT_1 ... OUT_n --out OUT --submissions SUBMISSIONS`: join the shards of one class.

Each shard (`grade --shard i/n --seed S`, on any machine of a scheduler) graded the students whose names hash to
it and left their records in OUT_i/.state. The merge checks that the shards are one class cut one way (the same
students, chapters and seed, every shard there once, every record present), then writes OUT as one run over the
whole class would: the records, grades.csv and gradebook.csv byte for byte, every student's files, the class
report; Canvas, manual overrides and late work are applied here, from SUBMISSIONS and the options `grade` takes.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from rich.console import Console

from grader import registry
from grader.autograde import adjust as adjust_options
from grader.autograde import report
from grader.autograde.canvas import collect_submissions
from grader.autograde.classpage import write_class_report
from grader.autograde.cohort import SHARD_FILE, Shard, plan, state_path, unread_record
from grader.autograde.records import NotebookRecord


class NotOneClass(ValueError):
    """The OUT folders are not the shards of one grading: the message says what does not fit."""


def read_shards(outs: list[Path]) -> tuple[dict, list[tuple[Path, Shard]]]:
    """What the shards graded (the class, its chapters, the seed) and each OUT folder's shard; NotOneClass if
    they are not the shards of one run, each there once."""
    shards = []
    for out in outs:
        try:
            shards.append((out, json.loads((out / ".state" / SHARD_FILE).read_text(encoding="utf-8"))))
        except (OSError, ValueError) as e:
            raise NotOneClass(f"{out} holds no shard of a grading run ({SHARD_FILE}: {e})") from None
    first, count = shards[0][1], shards[0][1]["shard"][1]
    for out, meta in shards:
        for key in ("class", "chapters", "seed"):
            if meta[key] != first[key]:
                raise NotOneClass(f"{out} graded another {key} than {shards[0][0]}: not shards of one run")
        if meta["shard"][1] != count:
            raise NotOneClass(f"{out} is shard {meta['shard'][0]}/{meta['shard'][1]}, the others are of {count}")
    indices = sorted(meta["shard"][0] for _, meta in shards)
    if indices != list(range(1, count + 1)):
        raise NotOneClass(f"the shards given are {indices} of {count}: each of 1..{count} once")
    return first, [(out, Shard(*meta["shard"])) for out, meta in shards]


def _graded(shards: list[tuple[Path, Shard]], student: str, chapter: str) -> NotebookRecord:
    """The record of a notebook the student's shard graded."""
    out, shard = next((o, s) for o, s in shards if s.holds(student))
    try:
        return NotebookRecord.from_dict(json.loads(state_path(out, student, chapter).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError):
        raise NotOneClass(f"{out} has no record of {student}/{chapter}: did shard {shard.index} finish? "
                          "(grade it again: it resumes)") from None


def merge(outs: list[Path], out: Path, submissions: Path, options: adjust_options.Options) -> list[Path]:
    """Write OUT from the shards; the files written. A notebook's record comes from its shard; a missing or
    unreadable one is decided from SUBMISSIONS, as one run decides it."""
    meta, shards = read_shards(outs)
    students, chapters = meta["class"], meta["chapters"]
    course = registry.load(hidden=True)
    with tempfile.TemporaryDirectory(prefix="grader-merge-") as scratch:
        found = collect_submissions(submissions, Path(scratch) / "zips", options.canvas)
        if [s.student for s in found.submissions] != students:
            raise NotOneClass(f"{submissions} is not the class the shards graded")
        adjust, notes = adjust_options.prepare(options, found, chapters, out, course)
        records = {(t.student, t.chapter): unread_record(t, course) if t.path is None else
                   _graded(shards, t.student, t.chapter) for t in plan(found.submissions, chapters, "")}
    written: set[Path] = set()
    report.write_atomic(out / ".state" / "seed", meta["seed"] + "\n")
    for (student, chapter), record in records.items():
        if record.source:
            report.write_atomic(state_path(out, student, chapter),
                                json.dumps(record.to_dict(), ensure_ascii=False, indent=1, sort_keys=True) + "\n")
    for student in students:
        mine = [r for (s, _), r in records.items() if s == student]
        written.update(report.write_student(out, student, mine, adjust))
    written.update(report.write_cohort(out, records.values(), students, chapters, adjust))
    isolation = next((r.sandbox for r in records.values() if r.sandbox), "")
    written.update(write_class_report(out, records.values(), students, chapters, adjust,
                                      [*found.warnings, *notes, f"merged from {len(outs)} shards"], isolation))
    return sorted(written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader merge", description=__doc__.splitlines()[0])
    parser.add_argument("shards", nargs="+", type=Path, help="the OUT folder of every shard (grade --shard i/n)")
    parser.add_argument("--out", type=Path, required=True, help="where the class's outputs go")
    parser.add_argument("--submissions", type=Path, required=True, help="the submissions the shards graded")
    adjust_options.add_arguments(parser)
    args = parser.parse_args(argv)
    options = adjust_options.from_args(parser, args)
    console = Console(stderr=True)
    try:
        written = merge(args.shards, args.out, args.submissions, options)
    except ValueError as e:
        console.print(f"[red]merge could not run:[/] {e}", soft_wrap=True)
        return 2
    console.print(f"merged {len(args.shards)} shards into {args.out}: wrote {len(written)} files", soft_wrap=True)
    return 0
