"""The class report (OUT/class.json and class.html) of a generated 60-student class, built from records.

Every chapter and exercise figure in class.json is computed again here, independently, from the grades.csv and
gradebook.csv that report.py writes for the same records; the per-check figures (grades.csv has no checks) from
the records themselves. The page: every section, every plot, every student-controlled text escaped, and written
once (a second run with the same figures leaves it untouched).
"""
from __future__ import annotations

import base64
import csv
import json
import statistics
from collections import Counter, defaultdict

import pytest

from grader.autograde import classstats
from grader.autograde.classpage import class_html, write_class_report
from grader.autograde.failures import common_failures, mask
from grader.autograde.report import write_cohort
from tests.class_cohort import CHAPTERS, EVIL, UNFAIR, generate

NOT_ATTEMPTED = {"not_implemented", "missing", "invalid"}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("class")
    records, students, adjust = generate()
    write_cohort(out, records, students, CHAPTERS, adjust)
    assert write_class_report(out, records, students, CHAPTERS, adjust, ["ignored x.txt: not a notebook"],
                              "sandbox: bubblewrap (test)") == [out / "class.json", out / "class.html"]
    return out, records, students, adjust


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def quartiles(xs):
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def test_chapter_figures_equal_what_grades_csv_says(written):
    """Catches a chapter figure computed over the wrong students (non-submitters among the quartiles), a late
    count that is not the gradebook's, a histogram bin off by one at a bin's edge, a median of the wrong kind."""
    out, *_ = written
    figures = json.loads((out / "class.json").read_text(encoding="utf-8"))
    rows = read_csv(out / "grades.csv")
    book = read_csv(out / "gradebook.csv")
    assert figures["students"] == len(book) == 60
    for chapter, got in zip(CHAPTERS, figures["chapters"]):
        mine = [r for r in rows if r["chapter"] == chapter]
        by_student = defaultdict(list)
        for r in mine:
            by_student[r["student"]].append(r)
        submitted = [s for s, rs in by_student.items() if any(r["status"] not in ("missing", "invalid") for r in rs)]
        scores = sorted(round(sum(float(r["score"]) for r in by_student[s]), 2) for s in submitted)
        max_score = max(sum(float(r["max_score"]) for r in rs) for rs in by_student.values())
        q1, median, q3 = quartiles(scores)
        counts = [0] * 10
        for s in scores:
            counts[min(9, int(round(s / max_score * 10, 9)))] += 1
        assert got["chapter"] == chapter and got["students"] == 60
        assert got["submitted"] == len(submitted) and 0 < got["submitted"] < 60
        assert got["late"] == sum(1 for b in book if b[f"{chapter} late"]) >= 1
        assert got["max_score"] == pytest.approx(max_score)
        assert got["scores"]["median"] == pytest.approx(median, abs=0.005)
        assert got["scores"]["q1"] == pytest.approx(q1, abs=0.005)
        assert got["scores"]["q3"] == pytest.approx(q3, abs=0.005)
        assert got["scores"]["mean"] == pytest.approx(statistics.fmean(scores), abs=0.005)
        assert (got["scores"]["min"], got["scores"]["max"]) == (scores[0], scores[-1])
        assert got["histogram"]["counts"] == counts and sum(counts) == len(submitted)
        assert got["histogram"]["edges"][0] == 0 and got["histogram"]["edges"][-1] == pytest.approx(max_score)


def test_exercise_figures_equal_what_grades_csv_says(written):
    """Catches a mean that skips the students who did not try, a share of the wrong whole, a status mix missing
    a status (every one of failed, error, timeout, memory, crashed and tampered is in this class)."""
    out, *_ = written
    figures = json.loads((out / "class.json").read_text(encoding="utf-8"))
    rows = read_csv(out / "grades.csv")
    order = list(dict.fromkeys(r["exercise"] for r in sorted(rows, key=lambda r: CHAPTERS.index(r["chapter"]))))
    assert [x["exercise"] for x in figures["exercises"]] == order
    seen = Counter()
    for got in figures["exercises"]:
        mine = [r for r in rows if r["exercise"] == got["exercise"]]
        statuses = Counter(r["status"] for r in mine)
        seen.update(statuses)
        assert got["students"] == len(mine) == 60
        assert got["mean_score"] == pytest.approx(statistics.fmean(float(r["score"]) for r in mine), abs=0.005)
        assert got["passed_share"] == pytest.approx(statuses["passed"] / len(mine), abs=5e-5)
        assert got["not_attempted_share"] == pytest.approx(sum(statuses[s] for s in NOT_ATTEMPTED) / len(mine),
                                                           abs=5e-5)
        assert got["statuses"] == dict(statuses)
    assert {"failed", "error", "timeout", "memory", "crashed", "tampered", "missing", "invalid"} <= set(seen)


def test_check_figures_and_the_check_that_may_be_unfair(written):
    """Catches a failed share over the wrong students (the unwritten ones), a failure count that misses a
    status, and the unfair-check rule flagging checks failed together with others, or missing the one check
    that twelve students fail while passing the rest of element_offset."""
    out, records, *_ = written
    figures = json.loads((out / "class.json").read_text(encoding="utf-8"))
    grades = [g for r in records for g in r.grades]
    for got in figures["checks"]:
        attempting = [g for g in grades if g.exercise == got["exercise"] and g.status not in NOT_ATTEMPTED
                      and any(c.name == got["check"] for c in g.checks)]
        failed = [g for g in attempting if next(c for c in g.checks if c.name == got["check"]).status != "passed"]
        alone = [g for g in failed if len(g.checks) > 1
                 and all(c.status == "passed" for c in g.checks if c.name != got["check"])]
        assert (got["attempting"], got["failed"], got["failed_alone"]) == (len(attempting), len(failed), len(alone))
        assert sum(f["count"] for f in got["failures"]) <= len(failed)
    unfair = [(c["exercise"], c["check"]) for c in figures["may_be_unfair"]]
    assert unfair == [UNFAIR]
    [flag] = figures["may_be_unfair"]
    assert flag["failed_alone"] == 12 and flag["failed"] > flag["failed_alone"]


def test_the_most_common_failures_are_grouped_by_their_masked_message(written):
    """Catches grouping by the raw message: each of the mistake students' wrong shapes has other numbers, so
    without masking no group would hold more than a few of them."""
    out, records, *_ = written
    figures = json.loads((out / "class.json").read_text(encoding="utf-8"))
    check = next(c for c in figures["checks"] if (c["exercise"], c["check"]) == UNFAIR)
    top = check["failures"][0]
    assert top["pattern"] == "element_offset(x, (#, #)) returned #; expected #" and top["count"] == 12
    assert mask(top["example"]) == top["pattern"]
    shapes = [c for c in figures["checks"] if c["failures"] and "has shape" in c["failures"][0]["pattern"]]
    assert shapes and all(c["failures"][0]["count"] == 12 for c in shapes)
    assert mask("IndexError: tuple index out of range (in helper, line 7: return idx[3]); called with (tuple (2, 1))") \
        == mask("IndexError: tuple index out of range (in f, line 12: x = y[0] | in g, line 3: z); called with (tuple (5, 1))")
    groups = common_failures([f"got {i}" for i in range(9)] + ["'a' is not defined", "'b' is not defined"] + list("xyzwv"))
    assert [(g.pattern, g.count) for g in groups[:2]] == [("got #", 9), ("'…' is not defined", 2)] and len(groups) == 5


def test_the_run_is_described_from_the_records(written):
    out, records, *_ = written
    run = json.loads((out / "class.json").read_text(encoding="utf-8"))["run"]
    graded = [r for r in records if r.source]
    assert run["notebooks_graded"] == len(graded) and run["kernel_seconds"] == pytest.approx(12.5 * len(graded))
    assert run["isolation"] == {"sandbox: bubblewrap (test)": len(graded)}
    assert run["notes"] == ["ignored x.txt: not a notebook"] and run["sandbox"] == "sandbox: bubblewrap (test)"


def test_the_page_has_every_section_its_plots_and_escapes_what_students_wrote(written):
    """Catches a section left out, a plot not embedded (a file beside the page, or a script), and a student's
    error message (`<img src=x onerror=...>`) reaching the page as markup."""
    out, *_ = written
    page = (out / "class.html").read_text(encoding="utf-8")
    for section in ("unfair", "chapters", "exercises", "checks", "run"):
        assert f'<section id="{section}">' in page
    assert "<script" not in page and EVIL not in page and "&lt;img src=x onerror=alert(#)&gt;" in page
    images = page.split('<img src="data:image/png;base64,')[1:]
    assert len(images) == 2 * len(CHAPTERS)
    for image in images:
        assert base64.b64decode(image.split('"', 1)[0])[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.count('alt="histogram of ') == len(CHAPTERS) and "negative indices count from the end" in page


def test_a_second_run_with_the_same_figures_rewrites_nothing(written):
    """Catches a page drawn again each run (a second of matplotlib, and a changed file for every re-run)."""
    out, records, students, adjust = written
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.glob("class.*")}
    assert write_class_report(out, records, students, CHAPTERS, adjust, ["ignored x.txt: not a notebook"],
                              "sandbox: bubblewrap (test)") == []
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.glob("class.*")} == before
    figures = json.loads((out / "class.json").read_text(encoding="utf-8"))
    assert class_html(figures) == class_html(figures)  # the plots draw the same bytes


def test_an_empty_class_still_gets_a_report(tmp_path):
    written = write_class_report(tmp_path, [], [], [])
    assert written and "No check failed" in (tmp_path / "class.html").read_text(encoding="utf-8")
    assert json.loads((tmp_path / "class.json").read_text(encoding="utf-8"))["students"] == 0
    assert classstats.quantile([], 0.5) == 0.0
