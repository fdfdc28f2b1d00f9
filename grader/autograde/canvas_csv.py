"""canvas.csv: the grades as Canvas's gradebook import reads them (Grades → Import).

What Canvas's importer (app/models/gradebook_importer.rb) expects: a header row whose first cells are
`Student` and `ID`, the student columns ending with `Section` (here `Student,ID,SIS User ID,SIS Login ID,
Section`), then one column per assignment, where `Title (assignment id)` updates that assignment, a plain
title the assignment of that title, and any other title creates a new assignment; a row whose first cell
says `Points Possible` gives each column's points. Each row is matched to a student by `ID` (Canvas's user
id), else by SIS User ID or SIS Login ID, else by name. Rows from Canvas's download carry the ID from its
file names; rows from student folders carry only the folder's name, for Canvas to match by name.
Scores are after manual overrides and late penalties, like gradebook.csv.
"""
from __future__ import annotations

from collections.abc import Sequence

from grader.autograde.adjust import Adjustments
from grader.autograde.records import NotebookRecord
from grader.autograde.report import _csv, _num, _round, _student_key, chapter_scores

HEADER = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
POINTS_ROW = "Points Possible"


def canvas_csv(records: Sequence[NotebookRecord], students: Sequence[str], chapters: Sequence[str],
               adjust: Adjustments) -> str:
    """One row per student: a column per chapter, or one total, as `adjust.canvas` says."""
    export = adjust.canvas
    if export is None:
        raise ValueError("canvas.csv needs adjust.canvas")
    raw, chapter_max = chapter_scores(records, students, chapters, adjust)
    total = export.columns == "total"
    if total:
        headers = [export.headers["total"]]
        points = [_num(sum(_round(m) for m in chapter_max.values()))]
    else:
        headers = [export.headers[c] for c in chapters]
        points = [_num(chapter_max[c]) for c in chapters]
    rows: list[Sequence[object]] = [(*HEADER, *headers), (POINTS_ROW, "", "", "", "", *points)]
    for s in sorted(set(students), key=_student_key):
        cells = [_round(adjust.chapter_score(s, c, raw[s, c])) for c in chapters]
        person = export.people.get(s)
        name, user_id = (person.name or s, person.user_id) if person else (s, "")
        rows.append((name, user_id, "", "", "", *([_num(sum(cells))] if total else map(_num, cells))))
    return _csv(rows)
