"""Finding students' notebooks in a folder of submissions: folders, zips, renamed files, bad zips."""
import os
import stat
import unicodedata
import zipfile
from pathlib import Path

import pytest

from grader.autograde import collect as collect_module
from grader.autograde.collect import collect

NB = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def write(path: Path, text: str = NB) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_zip(path: Path, members: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path


def only(submissions: Path, scratch: Path):
    subs, _ = collect(submissions, scratch)
    assert len(subs) == 1
    return subs[0]


def test_plain_folders(tmp_path):
    subs_dir = tmp_path / "subs"
    for student in ("ada", "bob"):
        write(subs_dir / student / "01_tensors.ipynb")
        write(subs_dir / student / "02_dtypes.ipynb")
    subs, warnings = collect(subs_dir, tmp_path / "scratch")
    assert [s.student for s in subs] == ["ada", "bob"] and warnings == []
    ada = subs[0]
    assert ada.notebooks == ["01_tensors.ipynb", "02_dtypes.ipynb"] and ada.problem == ""
    assert ada.chapters() == ["01_tensors", "02_dtypes"]
    found = ada.find("02_dtypes")
    assert found.path == subs_dir / "ada" / "02_dtypes.ipynb"
    assert (found.chapter, found.source, found.folder, found.message) == (
        "02_dtypes", "02_dtypes.ipynb", subs_dir / "ada", "")
    missing = ada.find("03_memory")
    assert (missing.path, missing.source, missing.folder) == (None, "", None)
    assert missing.message == "no notebook for 03_memory; found: 01_tensors.ipynb, 02_dtypes.ipynb"


@pytest.mark.parametrize("name", [
    "01_tensors.ipynb", "01_tensors (1).ipynb", "01_tensors-2.ipynb", "Ada Lovelace - 01_tensors.ipynb",
    "jdoe_01_tensors.ipynb", "01-Tensors.ipynb", "1_tensors.ipynb", "tensors_v2.ipynb", "01_TENSORS.IPYNB",
])
def test_renamed_notebooks_are_found(tmp_path, name):
    path = write(tmp_path / "subs" / "ada" / name)
    sub = only(tmp_path / "subs", tmp_path / "scratch")
    assert sub.chapters() == ["01_tensors"]
    assert sub.find("01_tensors").path == path and sub.find("01_tensors").source == name


def test_two_candidates_are_ambiguous(tmp_path):
    write(tmp_path / "subs" / "ada" / "01_tensors.ipynb")
    write(tmp_path / "subs" / "ada" / "01_tensors (1).ipynb")
    found = only(tmp_path / "subs", tmp_path / "scratch").find("01_tensors")
    assert found.path is None and found.folder is None and found.source == ""
    assert found.message == ("2 notebooks look like 01_tensors: 01_tensors (1).ipynb, 01_tensors.ipynb; "
                             "keep one and grade again")


def test_another_chapters_number_does_not_match(tmp_path):
    write(tmp_path / "subs" / "ada" / "02_tensors.ipynb")
    write(tmp_path / "subs" / "ada" / "09_gpu_10_ddp.ipynb")     # names two chapters: neither
    sub = only(tmp_path / "subs", tmp_path / "scratch")
    assert sub.chapters() == []
    assert sub.find("01_tensors").message == (
        "no notebook for 01_tensors; found: 02_tensors.ipynb, 09_gpu_10_ddp.ipynb")
    assert sub.find("09_gpu").path is None


def test_nested_folders(tmp_path):
    path = write(tmp_path / "subs" / "ada" / "week 1" / "hw" / "03_memory.ipynb")
    found = only(tmp_path / "subs", tmp_path / "scratch").find("03_memory")
    assert found.path == path and found.source == "week 1/hw/03_memory.ipynb" and found.folder == path.parent


def test_checkpoints_metadata_hidden_and_links_are_skipped(tmp_path):
    ada = tmp_path / "subs" / "ada"
    real = write(ada / "01_tensors.ipynb")
    write(ada / ".ipynb_checkpoints" / "01_tensors-checkpoint.ipynb")
    write(ada / "__MACOSX" / "._01_tensors.ipynb")
    write(ada / "._02_dtypes.ipynb")
    write(ada / ".git" / "03_memory.ipynb")
    outside = write(tmp_path / "elsewhere" / "04_flops.ipynb")
    os.symlink(outside, ada / "04_flops.ipynb")
    os.symlink(outside.parent, ada / "linked")
    sub = only(tmp_path / "subs", tmp_path / "scratch")
    assert sub.notebooks == ["01_tensors.ipynb"]
    assert sub.find("01_tensors").path == real


def test_zip_with_nested_notebooks_and_data(tmp_path):
    make_zip(tmp_path / "subs" / "ada.zip", {
        "ada/hw/01_tensors.ipynb": NB, "ada/hw/data.csv": "1,2\n", "ada/notes/README.md": "hi",
        "__MACOSX/ada/hw/._01_tensors.ipynb": "junk", "ada/.ipynb_checkpoints/01_tensors-checkpoint.ipynb": NB,
    })
    scratch = tmp_path / "scratch"
    sub = only(tmp_path / "subs", scratch)
    assert sub.student == "ada" and sub.problem == ""
    assert sub.notebooks == ["ada.zip/ada/hw/01_tensors.ipynb"]
    found = sub.find("01_tensors")
    assert found.source == "ada.zip/ada/hw/01_tensors.ipynb"
    assert found.path.is_relative_to(scratch) and found.path.read_text() == NB
    assert (found.folder / "data.csv").read_text() == "1,2\n"
    assert not list(scratch.rglob("__MACOSX")) and not list(scratch.rglob(".ipynb_checkpoints"))


def test_folder_and_zip_are_both_candidates(tmp_path):
    write(tmp_path / "subs" / "ada" / "01_tensors.ipynb")
    write(tmp_path / "subs" / "ada" / "02_dtypes.ipynb")
    make_zip(tmp_path / "subs" / "ada.zip", {"01_tensors.ipynb": NB})
    sub = only(tmp_path / "subs", tmp_path / "scratch")
    assert sub.notebooks == ["01_tensors.ipynb", "02_dtypes.ipynb", "ada.zip/01_tensors.ipynb"]
    assert sub.find("01_tensors").message == (
        "2 notebooks look like 01_tensors: 01_tensors.ipynb, ada.zip/01_tensors.ipynb; keep one and grade again")
    assert sub.find("02_dtypes").path == tmp_path / "subs" / "ada" / "02_dtypes.ipynb"


def test_zip_slip_and_links_stay_inside_scratch(tmp_path):
    zpath = tmp_path / "subs" / "ada.zip"
    zpath.parent.mkdir(parents=True)
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("../evil.ipynb", NB)
        zf.writestr("ok/../../evil2.ipynb", NB)
        zf.writestr("/abs_evil.ipynb", NB)
        zf.writestr("..\\win_evil.ipynb", NB)
        link = zipfile.ZipInfo("01_tensors.ipynb")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
        zf.writestr("02_dtypes.ipynb", NB)
    scratch = tmp_path / "work" / "scratch"
    sub = only(tmp_path / "subs", scratch)
    assert sub.problem == "" and sub.notebooks == ["ada.zip/02_dtypes.ipynb"]
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert written == {"subs/ada.zip", "work/scratch/zip-0001/02_dtypes.ipynb"}


def test_corrupt_zip_is_a_problem(tmp_path):
    write(tmp_path / "subs" / "ada.zip", "this is not a zip")
    sub = only(tmp_path / "subs", tmp_path / "scratch")
    assert sub.student == "ada" and sub.notebooks == []
    assert sub.problem == "not a readable zip file (File is not a zip file)"
    found = sub.find("01_tensors")
    assert found.path is None and found.message == sub.problem


def test_zip_over_member_cap_is_a_problem(tmp_path):
    make_zip(tmp_path / "subs" / "ada.zip",
             {"01_tensors.ipynb": NB, **{f"data/{i}.txt": "" for i in range(collect_module.MAX_MEMBERS)}})
    scratch = tmp_path / "scratch"
    sub = only(tmp_path / "subs", scratch)
    assert sub.problem == ("zip has 2001 entries, more than the 2000 allowed; "
                           "remove unneeded files and submit again")
    assert sub.find("01_tensors").message == sub.problem
    assert not [p for p in scratch.rglob("*") if p.is_file()]


def test_zip_over_size_cap_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(collect_module, "MAX_BYTES", 2**20)
    make_zip(tmp_path / "subs" / "ada.zip", {"01_tensors.ipynb": NB, "big.bin": "\0" * (2 * 2**20)})
    scratch = tmp_path / "scratch"
    sub = only(tmp_path / "subs", scratch)
    assert sub.problem == ("zip unpacks to 2.0 MiB, more than the 1 MiB allowed; "
                           "remove unneeded files and submit again")
    assert not [p for p in scratch.rglob("*") if p.is_file()]
    assert str(tmp_path) not in sub.problem


@pytest.mark.parametrize("form", ["NFC", "NFD"])
def test_unicode_student_names_are_nfc(tmp_path, form):
    name = unicodedata.normalize(form, "Zoë Ñúñez")
    write(tmp_path / "subs" / name / unicodedata.normalize(form, "Zoë - 01_tensors.ipynb"))
    make_zip(tmp_path / "subs" / unicodedata.normalize(form, "Émile Zola.zip"), {"05_autograd.ipynb": NB})
    subs, _ = collect(tmp_path / "subs", tmp_path / "scratch")
    assert [s.student for s in subs] == ["Zoë Ñúñez", "Émile Zola"]     # casefolded code points: z < é
    assert all(unicodedata.is_normalized("NFC", s.student) for s in subs)
    assert subs[0].notebooks == [unicodedata.normalize("NFC", "Zoë - 01_tensors.ipynb")]
    assert subs[0].find("01_tensors").path is not None
    assert subs[1].find("05_autograd").source == "Émile Zola.zip/05_autograd.ipynb"


def test_loose_and_hidden_entries_are_ignored_with_warnings(tmp_path):
    subs_dir = tmp_path / "subs"
    write(subs_dir / "ada" / "01_tensors.ipynb")
    write(subs_dir / "notes.txt", "x")
    write(subs_dir / "01_tensors.ipynb")
    write(subs_dir / ".DS_Store", "x")
    write(subs_dir / "__MACOSX" / "ada" / "._01_tensors.ipynb")
    os.symlink(subs_dir / "ada", subs_dir / "bob")
    subs, warnings = collect(subs_dir, tmp_path / "scratch")
    assert [s.student for s in subs] == ["ada"]
    assert warnings == [
        "ignored .DS_Store: hidden or system file",
        "ignored 01_tensors.ipynb: not a folder or a .zip file",
        "ignored __MACOSX: hidden or system file",
        "ignored bob: a symbolic link",
        "ignored notes.txt: not a folder or a .zip file",
    ]


def test_students_sorted_casefold_then_name(tmp_path):
    for student in ("bob", "ada", "Ada", "Carl"):
        write(tmp_path / "subs" / student / "01_tensors.ipynb")
    make_zip(tmp_path / "subs" / "Bea.zip", {"01_tensors.ipynb": NB})
    subs, _ = collect(tmp_path / "subs", tmp_path / "scratch")
    assert [s.student for s in subs] == ["Ada", "ada", "Bea", "bob", "Carl"]


def test_empty_student_and_long_lists(tmp_path):
    write(tmp_path / "subs" / "empty" / "readme.txt", "x")
    for i in range(12):
        write(tmp_path / "subs" / "many" / f"scratch_{i:02d}.ipynb")
    empty, many = collect(tmp_path / "subs", tmp_path / "scratch")[0]
    assert empty.notebooks == [] and empty.chapters() == []
    assert empty.find("01_tensors").message == "no notebook for 01_tensors; found no notebooks"
    listed = ", ".join(f"scratch_{i:02d}.ipynb" for i in range(8))
    assert many.find("01_tensors").message == f"no notebook for 01_tensors; found: {listed} and 4 more"


def test_missing_or_non_folder_submissions_raise(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        collect(tmp_path / "nope", tmp_path / "scratch")
    with pytest.raises(NotADirectoryError, match="is not a folder"):
        collect(write(tmp_path / "subs.zip", "x"), tmp_path / "scratch")


@pytest.mark.parametrize("name, chapter", [
    ("jdoe-01-tensors.ipynb", "01_tensors"), ("Ada Lovelace/01_tensors (1).ipynb", "01_tensors"),
    ("TENSORS.IPYNB", "01_tensors"), ("hw\\03_memory.ipynb", "03_memory"), ("02_tensors.ipynb", None),
    ("tensors_and_dtypes.ipynb", None), ("notes.ipynb", None),
])
def test_one_rule_names_a_notebooks_chapter(name, chapter):
    """grader.chapters.chapter_of is the rule grading, the self-check and the tests share: a renamed upload
    still names its chapter; a file naming two chapters, or a chapter under another's number, names none."""
    from pathlib import Path

    from grader import chapters, selfcheck
    from grader.chapters import chapter_of
    assert chapter_of(name) == chapter
    # the student's own self-check sees the same chapter (it used to miss `jdoe-01-tensors.ipynb`)
    assert selfcheck.chapter_of(Path(name.replace("\\", "/"))) == (chapters.key(chapter) if chapter else None)


def test_reading_notebooks_builds_no_iri_grammar():
    """Every grading run and grader command reads notebooks with nbformat, whose jsonschema imports rfc3987_syntax
    where it is installed (jupyter-events brings it): a Lark grammar built on import, a CPU-second per process.
    grader/__init__.py keeps it out; catches that line dropped, or moved below an import of nbformat."""
    import subprocess
    import sys

    probe = ("import sys, grader.autograde.cohort, nbformat, jsonschema\n"
             "nbformat.validate(nbformat.reads(sys.argv[1], as_version=4))\n"
             "print(sorted(m for m in ('lark', 'rfc3987_syntax') if sys.modules.get(m)))")
    done = subprocess.run([sys.executable, "-c", probe, NB], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
