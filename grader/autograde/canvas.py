"""Read SUBMISSIONS as Canvas's bulk "Download submissions": the zip itself, or the folder it unzips to.

Canvas puts every student's files side by side in one flat zip, each named
`<name>_<user id>_<file id>_<file name as uploaded>` (Canvas's lib/content_zipper.rb): `<name>` is the
student's sortable name lower-cased with everything but letters, digits and `_` removed (`lovelaceada`),
`LATE` follows it when Canvas counted the submission late (`lovelaceada_LATE_12345_...`; some Canvas
versions lower-case the whole prefix: `late`), the user id is the one Canvas's gradebook calls `ID`,
and a file uploaded again may end in `-1` (`01_tensors-1.ipynb`). Text and URL entries are `<name>_<user id>_text.html` / `_link.html`.

Files are grouped by user id, and each student's files are copied, under the names they uploaded, into
a folder of their own: a notebook's kernel then starts among that student's files only, and a chapter
is recognised from the uploaded name (`01_tensors-1.ipynb`) as in any other submission. A zip a student
uploaded is unpacked like a `<student>.zip` submission (same caps); the download itself gets a class's caps.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from grader.autograde.collect import Submission, _extract, _fresh_folder, _nfc, _skipped, _walk, collect

CLASS_MAX_MEMBERS = 20_000      # entries in a whole class's download (a student's own zip keeps collect's caps)
CLASS_MAX_BYTES = 4 * 2**30     # what a class's download may unpack to

_UPLOAD = re.compile(r"(?P<name>\w*?)_(?:(?P<late>late)_)?(?P<user>\d+)_(?P<file>\d+)_(?P<original>.+)",
                     re.IGNORECASE | re.DOTALL)
_ENTRY = re.compile(r"(?P<name>\w*?)_(?:(?P<late>late)_)?(?P<user>\d+)_(?:text|link)\.html", re.IGNORECASE)
PATTERN = "<name>_<user id>_<file id>_<file>"   # how notes describe the names, in one place


@dataclass(frozen=True)
class CanvasFile:
    """What Canvas's name for one file says."""
    name: str         # the login-style name Canvas wrote, e.g. "lovelaceada"
    user_id: str      # Canvas's user id: the `ID` column of its gradebook
    late: bool        # Canvas's late marker: submitted after the due date Canvas knew
    original: str     # the file name as the student uploaded it; "" for a text or URL entry


@dataclass(frozen=True)
class CanvasStudent:
    """A student of a Canvas download, with what Canvas's gradebook import matches on."""
    student: str      # the name every output uses: "lovelaceada (12345)"
    name: str
    user_id: str
    late: bool        # any of their files carried Canvas's late marker


@dataclass
class Collected:
    """What SUBMISSIONS holds, whichever its layout."""
    submissions: list[Submission]
    warnings: list[str]
    canvas: dict[str, CanvasStudent] | None = None   # by student, when SUBMISSIONS was read as Canvas's download


def parse_name(filename: str) -> CanvasFile | None:
    """The parts of a file name in Canvas's download, or None when it is not named that way."""
    name = _nfc(filename)
    if m := _UPLOAD.fullmatch(name):
        return CanvasFile(m["name"], m["user"], bool(m["late"]), m["original"])
    if m := _ENTRY.fullmatch(name):
        return CanvasFile(m["name"], m["user"], bool(m["late"]), "")
    return None


def is_download_zip(path: Path) -> bool:
    """A .zip file given as SUBMISSIONS: a whole class's download, to unpack before reading."""
    return path.is_file() and path.name.casefold().endswith(".zip")


def canvas_named(folder: Path) -> tuple[int, int]:
    """(visible entries of `folder`, how many of them are plain files named the way Canvas names them)."""
    entries = [e for e in folder.iterdir() if not _skipped(_nfc(e.name))]
    return len(entries), sum(e.is_file() and not e.is_symlink() and parse_name(e.name) is not None for e in entries)


def collect_submissions(submissions: Path, scratch: Path, canvas: bool | None = None) -> Collected:
    """Every student's notebooks from SUBMISSIONS: a folder of student folders and zips, or Canvas's download
    (detected when `canvas` is None, forced when True). Raises ValueError when a download zip cannot be read."""
    folder = submissions
    if is_download_zip(submissions):
        folder = _fresh_folder(scratch)
        if problem := _extract(submissions, folder, CLASS_MAX_MEMBERS, CLASS_MAX_BYTES):
            raise ValueError(f"{submissions} cannot be read: {problem}")
    entries, named = canvas_named(folder)
    detected = canvas is None and 0 < entries == named      # every visible entry, and at least one
    if not (canvas or detected):
        subs, warnings = collect(folder, scratch)
        if named:
            warnings.append(f"{named} of the {entries} entries in {submissions.name} are named like files of "
                            "Canvas's download: give --canvas to read it as one")
        return Collected(subs, warnings)
    found = collect_canvas(folder, scratch)
    why = "--canvas" if canvas else f"every file is named {PATTERN}"
    late = sum(s.late for s in (found.canvas or {}).values())
    found.warnings.insert(0, f"read {submissions.name} as Canvas's \"Download submissions\" ({why}): "
                             f"{len(found.submissions)} students, {late} marked late by Canvas")
    return found


def collect_canvas(folder: Path, scratch: Path) -> Collected:
    """Group a Canvas download's flat files by user id; each student's files go to a fresh folder under `scratch`."""
    by_user: dict[str, list[tuple[CanvasFile, Path]]] = {}
    warnings: list[str] = []
    for entry in sorted(folder.iterdir()):
        name = _nfc(entry.name)
        if _skipped(name) or entry.is_symlink():
            warnings.append(f"ignored {name}: {'a symbolic link' if entry.is_symlink() else 'hidden or system file'}")
        elif not entry.is_file() or (parsed := parse_name(name)) is None:
            warnings.append(f"ignored {name}: not named like a file of Canvas's download ({PATTERN})")
        else:
            by_user.setdefault(parsed.user_id, []).append((parsed, entry))
    subs: list[Submission] = []
    people: dict[str, CanvasStudent] = {}
    for user_id, entries in by_user.items():
        name = min(f.name for f, _ in entries)      # one download has one name per user; min() is deterministic
        student = f"{name} ({user_id})" if name else user_id
        found, problem = _gather(entries, _fresh_folder(scratch), scratch, warnings)
        subs.append(Submission(student, sorted(rel for rel, _ in found), problem, dict(found)))
        people[student] = CanvasStudent(student, name, user_id, any(f.late for f, _ in entries))
    subs.sort(key=lambda s: (s.student.casefold(), s.student))
    return Collected(subs, warnings, people)


def _gather(entries: list[tuple[CanvasFile, Path]], home: Path, scratch: Path,
            warnings: list[str]) -> tuple[list[tuple[str, Path]], str]:
    """Copy one student's files into `home` under their uploaded names; unpack their zips.
    Returns (relative path, file) for every notebook, and why their submission is unreadable ("" if it is not)."""
    found: list[tuple[str, Path]] = []
    problem = ""
    taken: set[str] = set()
    for f, path in sorted(entries, key=lambda e: e[1].name):
        if not f.original:
            warnings.append(f"ignored {path.name}: a text or URL entry, not a file")
            continue
        if _skipped(f.original):
            warnings.append(f"ignored {path.name}: hidden or system file")
            continue
        rel = f.original if f.original not in taken else _nfc(path.name)   # two uploads of one name: keep both
        taken.add(rel)
        if rel.casefold().endswith(".zip"):
            dest = _fresh_folder(scratch)
            if why := _extract(path, dest):
                problem = problem or f"{why} ({rel})"
            else:
                found.extend(_walk(dest, rel + "/"))
            continue
        target = home / rel
        shutil.copyfile(path, target)
        if rel.casefold().endswith(".ipynb"):
            found.append((rel, target))
    return found, problem
