"""Find each student's chapter notebooks in a folder of class submissions.

A submission is `SUBMISSIONS/<student>/` or `SUBMISSIONS/<student>.zip`, with notebooks at any
depth. Learning platforms rename files (`01_tensors (1).ipynb`, `jdoe_01_tensors.ipynb`, ...), so
a notebook is matched to a chapter by the words in its name rather than by its exact name.
Zips are unpacked (safely: no zip-slip, no zip bombs) into fresh folders under a scratch folder,
whole, because notebooks may read data files that sit next to them.
"""
from __future__ import annotations

import os
import shutil
import stat
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from grader.chapters import NOTEBOOKS, chapter_of

MAX_MEMBERS = 2000          # entries in one zip; more is refused, not truncated
MAX_BYTES = 512 * 2**20     # uncompressed total of the members a zip would unpack
MAX_LISTED = 8              # names shown in one message before "and N more"


@dataclass
class Found:
    chapter: str            # notebook stem, e.g. "01_tensors"
    path: Path | None       # the notebook to grade; None when missing or ambiguous
    source: str             # its path relative to the submission (posix, "" when none)
    folder: Path | None     # the folder holding it: a scratch copy of it becomes the kernel's working folder
    message: str            # why path is None, one line an instructor can act on; "" otherwise


@dataclass
class Submission:
    student: str
    notebooks: list[str]    # relative posix paths of every .ipynb found, sorted
    problem: str = ""       # non-empty when the submission cannot be read at all; then every chapter is "invalid"
    _files: dict[str, Path] = field(default_factory=dict, repr=False)   # relative path -> file on disk

    def find(self, chapter: str) -> Found:
        """The one notebook to grade for `chapter`, or why there is none (so a grade can say what to fix)."""
        if self.problem:
            return Found(chapter, None, "", None, self.problem)
        candidates = [n for n in self.notebooks if chapter_of(n) == chapter]
        if len(candidates) == 1:
            path = self._files[candidates[0]]
            return Found(chapter, path, candidates[0], path.parent, "")
        if candidates:
            message = (f"{len(candidates)} notebooks look like {chapter}: {_listing(candidates)}; "
                       "keep one and grade again")
        else:
            found = f"found: {_listing(self.notebooks)}" if self.notebooks else "found no notebooks"
            message = f"no notebook for {chapter}; {found}"
        return Found(chapter, None, "", None, message)

    def chapters(self) -> list[str]:
        """Chapters with at least one candidate notebook, in course order (to know what was attempted)."""
        matched = {chapter_of(n) for n in self.notebooks}
        return [c for c in NOTEBOOKS if c in matched]


def collect(submissions: Path, scratch: Path) -> tuple[list[Submission], list[str]]:
    """Submissions sorted by student name (casefold, then name), plus warnings about ignored entries. Zips are extracted under `scratch`."""
    submissions = Path(submissions)
    if not submissions.exists():
        raise FileNotFoundError(f"submissions folder {submissions} does not exist")
    if not submissions.is_dir():
        raise NotADirectoryError(
            f"{submissions} is not a folder; expected a folder holding one folder or .zip per student")
    files: dict[str, list[tuple[str, Path]]] = {}
    problems: dict[str, str] = {}
    warnings: list[str] = []
    for entry in sorted(submissions.iterdir()):
        name = _nfc(entry.name)
        if _skipped(name) or entry.is_symlink():
            why = "a symbolic link" if entry.is_symlink() else "hidden or system file"
            warnings.append(f"ignored {name}: {why}")
        elif entry.is_dir():
            files.setdefault(name, []).extend(_walk(entry, ""))
        elif entry.is_file() and name.casefold().endswith(".zip"):
            student = name[:-len(".zip")]
            files.setdefault(student, [])
            dest = _fresh_folder(scratch)
            if problem := _extract(entry, dest):
                problems[student] = problem
            else:
                files[student].extend(_walk(dest, name + "/"))
        else:
            warnings.append(f"ignored {name}: not a folder or a .zip file")
    result = [Submission(student, sorted(rel for rel, _ in found), problems.get(student, ""), dict(found))
              for student, found in files.items()]
    return sorted(result, key=lambda s: (s.student.casefold(), s.student)), warnings


def _nfc(text: str) -> str:
    """One spelling per name: macOS writes NFD, most other systems NFC."""
    return unicodedata.normalize("NFC", text)


def _skipped(name: str) -> bool:
    """Hidden entries (`.ipynb_checkpoints`, `.DS_Store`, `._x`, `..`) and macOS metadata: not the student's work."""
    return name.startswith(".") or name == "__MACOSX"


def _listing(names: list[str]) -> str:
    """A short, deterministic list of names for a one-line message."""
    more = len(names) - MAX_LISTED
    return ", ".join(names[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "")


def _walk(root: Path, prefix: str) -> list[tuple[str, Path]]:
    """Every regular .ipynb under `root`, as (prefix + relative posix path, path); links are not followed."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):     # os.walk does not descend into linked folders
        dirnames[:] = [d for d in dirnames if not _skipped(d)]
        for name in filenames:
            path = Path(dirpath, name)
            if (not _skipped(name) and name.casefold().endswith(".ipynb")
                    and stat.S_ISREG(path.lstat().st_mode)):
                found.append((prefix + _nfc(path.relative_to(root).as_posix()), path))
    return found


def _fresh_folder(scratch: Path) -> Path:
    """A new, empty folder under `scratch`, named by a counter: student names may be anything."""
    scratch.mkdir(parents=True, exist_ok=True)
    i = 1
    while True:
        folder = scratch / f"zip-{i:04d}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            i += 1


def _member_parts(info: zipfile.ZipInfo) -> list[str] | None:
    """The path parts to extract a member to, or None for folders, links, absolute or escaping paths, metadata."""
    name = info.filename.replace("\\", "/")     # zips made on Windows may use backslashes
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if (not parts or name.startswith("/") or name.endswith("/")
            or stat.S_ISLNK(info.external_attr >> 16) or any(_skipped(p) for p in parts)):
        return None
    return parts


def _extract(archive: Path, dest: Path, max_members: int | None = None, max_bytes: int | None = None) -> str:
    """Unpack every allowed member of `archive` into `dest`; return why the zip cannot be used, or "".

    The caps default to one student's (MAX_MEMBERS, MAX_BYTES); a whole class's download passes larger ones.
    """
    max_members = MAX_MEMBERS if max_members is None else max_members
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            if len(infos) > max_members:
                return (f"zip has {len(infos)} entries, more than the {max_members} allowed; "
                        "remove unneeded files and submit again")
            members = [(info, parts) for info in infos if (parts := _member_parts(info))]
            size = sum(info.file_size for info, _ in members)   # zipfile never unpacks more than a member declares
            if size > max_bytes:
                return (f"zip unpacks to {size / 2**20:.1f} MiB, more than the {max_bytes // 2**20} MiB allowed; "
                        "remove unneeded files and submit again")
            for info, parts in members:
                target = dest.joinpath(*parts)
                if not target.resolve().is_relative_to(dest.resolve()):    # e.g. a Windows drive `C:`
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError, ValueError, zlib.error) as e:
        detail = e.strerror if isinstance(e, OSError) and e.strerror else str(e)   # no scratch paths in messages
        return f"not a readable zip file ({detail})"
    return ""
