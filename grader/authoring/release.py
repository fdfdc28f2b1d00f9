"""Build the folder a class is handed: student notebooks, the grader without hidden checks or authoring.

`python -m grader release [--out DIR] [--force] [--course-url URL] [--lang LANG]` (default DIR: dist/student
under the repo root, dist/student-LANG for a translation), and a zip of it beside the folder (dist/student.zip)
whose top folder is always `resource-accounting/`, its files dated when the course's last commit was made. The
README and Makefile are the students' own, from release/. With --course-url (where the zip will be published)
every notebook starts with the Colab set-up cell, and the README's Colab route says how to open them there
(grader.authoring.colab). With --lang (zh) the markdown, the README and the words around each check are those of
translations/LANG/ (grader.authoring.i18n), which must be complete and current.
Every notebook and grader file written is scanned for solution markers; a hit deletes the folder and fails.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from grader.authoring import colab
from grader.authoring.i18n.localize import ENGLISH, localize
from grader.authoring.markers import MarkerError, find_forbidden
from grader.authoring.student import generate
from grader.authoring.zipped import write_zip, zip_date

REQUIRED_FILES = ("pyproject.toml", "requirements.txt", "environment.yml", "README.md")
OPTIONAL_FILES = ("Makefile",)
STUDENT_FILES = "release"  # the repo folder whose README.md and Makefile replace the repo's own in the release
OPTIONAL_DIRS = ("data",)
# grader/ subpackages that stay with the course staff.
PRIVATE_PACKAGES = ("hidden", "authoring", "autograde")
# Repo folders OUT may never be, contain or sit inside: it is deleted before every build.
PROTECTED = ("grader", "solutions", "notebooks", "data", "demo", "tests", "docs", ".git", ".ci", ".venv")
# Written into OUT so that a later build may delete it even outside the repo without --force.
SENTINEL = ".grader-release"
README_COLAB = "<!-- colab -->"  # the line of release/README.md that the Colab route replaces
# The zip's top folder, whatever --out is called: what a student unzips and then finds in their files.
TOP_FOLDER = colab.TOP_FOLDER


class ReleaseError(RuntimeError):
    """The release cannot be built safely; nothing is handed out."""


def repo_root() -> Path:
    """The repo this package lives in (parent of the `grader` folder)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file() or not (root / "solutions").is_dir():
        raise ReleaseError(f"{root} does not look like the course repo (is grader installed non-editable?)")
    return root


def _inside(path: Path, parent: Path) -> bool:
    return path == parent or path.is_relative_to(parent)


def check_out_dir(repo: Path, out: Path, force: bool = False) -> None:
    """Refuse to delete anything that is not a release folder: the repo, its sources, a stranger's folder."""
    repo_r, out_r = repo.resolve(), out.resolve()
    if _inside(repo_r, out_r):
        raise ReleaseError(f"--out {out} is the repo or contains it")
    for name in PROTECTED:
        if _inside(out_r, repo_r / name):
            raise ReleaseError(f"--out {out} is inside the repo's {name}/")
    if out_r.exists() and not out_r.is_dir():
        raise ReleaseError(f"--out {out} exists and is not a folder")
    if not out_r.exists() or not any(out_r.iterdir()):
        return
    if _inside(out_r, repo_r) or (out_r / SENTINEL).is_file() or force:
        return
    raise ReleaseError(f"--out {out} is a non-empty folder outside the repo that this command did "
                       f"not build; pass --force to replace it")


def _ignore_private(package: Path):
    """copytree filter: no caches, and none of grader's private subpackages."""
    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n in ("__pycache__", ".ipynb_checkpoints") or n.endswith(".pyc")}
        if Path(folder).resolve() == package:
            skipped |= {n for n in names if n in PRIVATE_PACKAGES}
        return skipped
    return ignore


def _write_readme(out: Path, course_url: str | None, colab_text: dict[str, str] | None = None) -> None:
    """Put the Colab route (for this course URL, or the lack of one; in `colab_text`'s language) where the
    README marks it."""
    readme = out / "README.md"
    text = readme.read_text(encoding="utf-8")
    notebooks = sorted(p.name for p in (out / "notebooks").glob("*.ipynb"))
    section = colab.readme_section(course_url, notebooks, colab_text).rstrip("\n")
    lines = [section if line.strip() == README_COLAB else line for line in text.split("\n")]
    readme.write_text("\n".join(lines), encoding="utf-8")


def _copy_sources(repo: Path, out: Path) -> None:
    missing = [name for name in REQUIRED_FILES if not (repo / name).is_file()]
    if missing:
        raise ReleaseError(f"the repo lacks {', '.join(missing)}, which the release needs")
    for name in REQUIRED_FILES + OPTIONAL_FILES:
        own = repo / STUDENT_FILES / name
        source = own if own.is_file() else repo / name
        if source.is_file():
            shutil.copy2(source, out / name)
    for name in OPTIONAL_DIRS:
        if (repo / name).is_dir():
            shutil.copytree(repo / name, out / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    package = (repo / "grader").resolve()
    shutil.copytree(package, out / "grader", ignore=_ignore_private(package))


def scan(out: Path) -> list[str]:
    """'file:line: text' for every line under notebooks/ and grader/ that holds marker text.

    Only code and notebooks can carry solution text; the README may name the markers to explain them.
    """
    files = sorted(p for d in ("notebooks", "grader") for p in (out / d).rglob("*") if p.is_file())
    return [f"{path}:{n}: {line[:120]}"
            for path in files
            for n, line in find_forbidden(path.read_bytes().decode("utf-8", "replace"))]


def build_release(repo: Path, out: Path, force: bool = False, course_url: str | None = None,
                  lang: str | None = None) -> list[Path]:
    """Delete and rebuild `out` from `repo` (with the Colab set-up cell when `course_url` is given, translated
    into `lang` when it is not English); return the files written, sorted."""
    check_out_dir(repo, out, force)
    if not any((repo / "solutions").glob("*.ipynb")):
        raise ReleaseError(f"no solution notebooks in {repo / 'solutions'}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    try:
        generate(repo / "solutions", out / "notebooks", course_url)
        _copy_sources(repo, out)
        colab_text = localize(repo, out, lang) if lang not in (None, ENGLISH) else None
        _write_readme(out, course_url, colab_text)
        leaks = scan(out)
        if leaks:
            raise MarkerError("solution or hidden-test marker text in the release:\n  " + "\n  ".join(leaks))
        written = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
        (out / SENTINEL).write_text("Built by `python -m grader release`; rebuilt from scratch each time.\n"
                                    + "".join(f"{p.as_posix()}\n" for p in written))
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # never leave a half-built or leaking release behind
        raise
    return written


def release_epoch(repo: Path) -> int:
    """The release's own date, in seconds since 1970: SOURCE_DATE_EPOCH when set (the reproducible-builds
    convention), else the time of the repo's last commit, else the newest source file (a repo without git)."""
    given = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if given:
        if not given.isdigit():
            raise ReleaseError(f"SOURCE_DATE_EPOCH must be whole seconds since 1970, got {given!r}")
        return int(given)
    try:
        done = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%ct"], capture_output=True,
                              text=True, timeout=60)
        if done.returncode == 0 and done.stdout.strip().isdigit():
            return int(done.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    sources = [p for d in ("solutions", "grader") for p in (repo / d).rglob("*") if p.is_file()]
    return int(max(p.stat().st_mtime for p in sources))


def zip_release(out: Path, epoch: int) -> Path:
    """`out` as a zip beside it (`student.zip` for `dist/student`) under the top folder TOP_FOLDER, every
    entry dated `epoch` (UTC), so the same release gives the same bytes."""
    members = {f"{TOP_FOLDER}/{path.relative_to(out).as_posix()}": path.read_bytes()
               for path in out.rglob("*") if path.is_file() and path.name != SENTINEL}
    return write_zip(out.with_suffix(".zip"), members, zip_date(epoch))


def main(argv: list[str] | None = None) -> int:
    """CLI entry: build the release folder, print what went in."""
    parser = argparse.ArgumentParser(prog="python -m grader release", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="default: dist/student under the repo root")
    parser.add_argument("--force", action="store_true",
                        help="replace OUT even if it is a non-empty folder outside the repo")
    parser.add_argument("--course-url", default=None,
                        help="where the zip will be published (https://, file:// or a path): every notebook gets "
                             "the Colab set-up cell, the README its Colab route (badges for a GitHub address, "
                             "where the release folder is what the repository holds at that tag)")
    parser.add_argument("--lang", default=ENGLISH,
                        help="the language of the notebooks' text, the README and the words around each check: en "
                             "(the source, default) or one with translations in translations/LANG/ (zh)")
    args = parser.parse_args(argv)
    lang = args.lang.strip()
    try:
        repo = repo_root()
        name = "student" if lang == ENGLISH else f"student-{lang}"
        out = args.out if args.out is not None else repo / "dist" / name
        epoch = release_epoch(repo)
        written = build_release(repo, out, args.force, (args.course_url or "").strip() or None, lang)
        archive = zip_release(out, epoch)
    except (ReleaseError, ValueError, FileNotFoundError) as e:  # MarkerError and TranslationError are ValueErrors
        print(f"error: {e}", file=sys.stderr)
        return 2
    notebooks = [p for p in written if p.parts[0] == "notebooks"]
    print(f"built {out} and {archive.name} ({TOP_FOLDER}/, dated {time.strftime('%Y-%m-%d', time.gmtime(epoch))}): "
          f"{len(written)} files, {len(notebooks)} notebooks" + ("" if lang == ENGLISH else f", in {lang}"))
    for p in notebooks:
        print(f"  {p.as_posix()}")
    return 0
