"""The student release as a student gets it: dist/student.zip alone, unzipped and installed in a fresh venv.

There, every untouched notebook runs top to bottom (as "Run All" does) with each check reporting
"not implemented yet", a solved notebook passes its checks, nothing in it holds a solution or a
hidden check, and the instructor's grader grades notebooks completed in it.
"""
from __future__ import annotations

import ast
import calendar
import csv
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader import chapters, lab, registry
from grader.authoring.markers import find_forbidden
from grader.authoring.release import TOP_FOLDER
from tests.conftest import student_env
from tests.test_lab import TOKEN, assert_course_kernel_alone, free_port, serve

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def solution_blocks() -> list[list[str]]:
    """Every solution block (the lines between the markers), as its substantial stripped lines."""
    blocks: list[list[str]] = []
    for path in SOLUTIONS:
        for cell in nbformat.read(path, as_version=4).cells:
            current: list[str] | None = None
            for line in cell.source.splitlines():
                if line.strip() == BEGIN:
                    current = []
                elif line.strip() == END:
                    if current:
                        blocks.append(current)
                    current = None
                elif current is not None and line.strip() and not line.strip().startswith("#"):
                    current.append(line.strip())
    return blocks


def leaked(blocks: list[list[str]], text: str) -> list[str]:
    """Solution blocks whose lines appear in `text` as a run: 4 consecutive lines (a whole block if shorter).

    A single generic line (`return x`, `device = torch.device(device)`) is no leak; a run of a body is."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    joined = "\n".join(lines)
    found = []
    for block in blocks:
        size = min(4, len(block))
        if size < 2 and len(block[0]) < 40:
            continue  # a one-line body that short is too generic to tell apart
        for i in range(len(block) - size + 1):
            if "\n".join(block[i:i + size]) in joined:
                found.append(" / ".join(block[i:i + size])[:120])
                break
    return found


def hidden_check_blocks() -> list[list[str]]:
    """The body of every hidden check (below its docstring), as its substantial stripped lines."""
    blocks = []
    for path in (ROOT / "grader" / "hidden").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Attribute) and d.attr == "hidden" or
                    isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "hidden"
                    for d in node.decorator_list):
                body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body
                lines = [line.strip() for stmt in body for line in ast.get_source_segment(source, stmt).splitlines()
                         if line.strip() and not line.strip().startswith("#")]
                if lines:
                    blocks.append(lines)
    return blocks


def test_the_zip_holds_no_solution_no_hidden_check_and_nothing_to_rebuild_them(student_release):
    with zipfile.ZipFile(student_release.zip) as z:
        names = z.namelist()
        texts = {n: z.read(n).decode("utf-8", "replace") for n in names}
    top = {n.split("/")[1] for n in names}
    assert {n.split("/")[0] for n in names} == {TOP_FOLDER}
    assert {"notebooks", "grader", "data", "README.md", "Makefile", "requirements.txt", "environment.yml",
            "pyproject.toml"} <= top
    assert not top & {"solutions", "tests", "demo", "docs", "benchmarks", "release", ".ci", ".git"}
    for private in ("grader/hidden/", "grader/authoring/", "grader/autograde/"):
        assert not any(private in n for n in names), private
    assert not any(find_forbidden(t) for n, t in texts.items() if n.endswith((".py", ".ipynb")))
    # The checks and scenarios must hold no solution; the course's own tools (grader/course/bench.py's CUDA-event
    # timer, say) are what chapters teach with, and are shipped on purpose.
    code = {n: t for n, t in texts.items() if n.endswith(".py") and ("/grader/exercises/" in n or "/grader/scenarios/" in n)}
    code.update({n: "\n".join(c.source for c in nbformat.reads(t, as_version=4).cells)
                 for n, t in texts.items() if n.endswith(".ipynb")})
    blocks = solution_blocks()
    assert blocks
    found = [(hit, n) for n, t in code.items() for hit in leaked(blocks, t)]
    assert not found, found[:5]
    hidden = hidden_check_blocks()
    assert hidden
    found = [(hit, n) for n, t in code.items() for hit in leaked(hidden, t)]
    assert not found, found[:5]
    readme = texts[f"{TOP_FOLDER}/README.md"]
    assert "make lab" in readme and "hand in" in readme.lower()
    # The route without make comes first, for Windows (py, .venv\Scripts) and for conda.
    assert readme.index("py -m grader lab") < readme.index("make lab")
    assert ".venv\\Scripts\\python" in readme and "conda activate" in readme


def test_the_zip_is_named_for_the_course_and_dated_by_its_last_commit(student_release):
    """The fixture builds into .../student: the top folder is the course's, not --out's (catches
    `release/` inside release.zip), and every file carries the commit's date, not a fixed 2026-01-01
    (which JupyterLab shows as months old)."""
    assert student_release.folder.name == TOP_FOLDER != student_release.zip.stem
    with zipfile.ZipFile(student_release.zip) as z:
        dates = {info.date_time for info in z.infolist()}
    assert len(dates) == 1
    dated = calendar.timegm((*dates.pop(), 0, 0, 0))
    noted = student_release.zip.parent.parent / "commit-epoch"  # by the fixture, with git, before the build
    if not noted.is_file():
        pytest.skip("not a git checkout: the release is dated by its newest file")
    assert 0 <= int(noted.read_text()) - dated < 2  # a zip keeps even seconds


def test_untouched_notebooks_run_to_the_end_with_every_check_not_implemented(student_release, tmp_path):
    done = student_release.run("-m", "grader", "selfcheck", "notebooks", "--json", str(tmp_path / "r.json"),
                               "--save", str(tmp_path / "ran"))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "r.json").read_text())
    assert [Path(r["notebook"]).name for r in results] == [p.name for p in SOLUTIONS]
    for r in results:
        assert r["problem"] == "" and r["cell_errors"] == [], (r["notebook"], r["problem"], r["cell_errors"])
        expected = [e.id for e in registry.load().of(r["chapter"])]
        assert [e["exercise"] for e in r["exercises"]] == expected
        for e in r["exercises"]:
            assert e["status"] == "not_implemented", (e["exercise"], e["message"])
            assert e["checks"] and all(c["message"] == "not implemented yet" for c in e["checks"])
            assert not any(c["hidden"] for c in e["checks"])
    for path in sorted((tmp_path / "ran").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            if cell.source.startswith("%%needs"):
                text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
                assert text.startswith("Skipped: this cell uses") and text.count("\n") == 1, (path.name, text)
                assert all(o.output_type == "stream" for o in cell.outputs), (path.name, "a waiting cell drew")
            elif cell.source.startswith("grader.check("):
                shown = json.dumps([o.get("data", {}) for o in cell.outputs])
                assert "not implemented yet" in shown, (path.name, cell.source)
    assert "0 of" in done.stdout and "not implemented yet" in done.stdout


def answered_in_release(release_notebook: Path, solution: Path) -> nbformat.NotebookNode:
    """The release's notebook with every exercise cell filled in from the solution (matched by cell id)."""
    from grader.authoring.demo import _unmarked

    nb = nbformat.read(release_notebook, as_version=4)
    answers = {c.id: c.source for c in nbformat.read(solution, as_version=4).cells if BEGIN in c.source}
    for cell in nb.cells:
        if cell.get("id") in answers:
            cell.source = _unmarked(answers[cell.id])
    return nb


def test_python_m_grader_test_passes_a_solved_notebook_without_make(student_release, tmp_path):
    """`python -m grader test` from a Python outside the venv (the student's first one) and no make on PATH:
    it runs in the release's venv, passes a solved notebook, and ends with advice no terminal breaks."""
    stem = "06_modules"  # a chapter whose demonstrations run in seconds: what is tested is the command
    release_nb = student_release.folder / "notebooks" / f"{stem}.ipynb"
    solved = student_release.folder / "notebooks" / "solved" / f"{stem}.ipynb"
    solved.parent.mkdir()
    try:
        nbformat.write(answered_in_release(release_nb, ROOT / "solutions" / f"{stem}.ipynb"), solved)
        done = subprocess.run([sys.executable, "-m", "grader", "test", str(solved), "--json", str(tmp_path / "r.json")],
                              cwd=student_release.folder, env=student_env(tmp_path), capture_output=True, text=True,
                              timeout=1200)
    finally:
        shutil.rmtree(solved.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "installing" not in done.stdout  # the venv the fixture set up is reused, not reinstalled
    [r] = json.loads((tmp_path / "r.json").read_text())
    assert r["cell_errors"] == [] and r["exercises"]
    assert all(e["status"] == "passed" for e in r["exercises"]), [(e["exercise"], e["message"]) for e in r["exercises"]]
    n = len(r["exercises"])
    closing = done.stdout.rstrip("\n").splitlines()[-3:]
    assert closing[0] == f"{n} of {n} exercises pass their public checks."
    assert " ".join(closing) == (f"{n} of {n} exercises pass their public checks. Grading adds hidden checks: "
                                 "make your code right in general, not only for the examples.")
    assert all(len(line) < 80 for line in closing), closing


def test_python_m_grader_lab_serves_the_release_with_the_course_kernel_alone(student_release, tmp_path):
    """`python -m grader lab --no-browser` from the student's first Python, no make on PATH: JupyterLab on the
    release's notebooks, run by the venv, with its kernel the only one offered."""
    port = free_port()
    specs = serve([sys.executable, "-m", "grader", "lab", "--no-browser", "--port", str(port),
                   f"--IdentityProvider.token={TOKEN}"], port, student_release.folder, env=student_env(tmp_path))
    assert_course_kernel_alone(specs, student_release.folder / "notebooks")
    assert specs["kernelspecs"][lab.KERNEL]["spec"]["argv"][0] == str(student_release.python)
    # Started some other way (the venv's own `jupyter lab`, as an IDE would), it offers the same one kernel.
    port = free_port()
    specs = serve([str(student_release.python.parent / "jupyter"), "lab", "--no-browser", f"--ServerApp.port={port}",
                   f"--IdentityProvider.token={TOKEN}", "--notebook-dir=notebooks", "--allow-root"], port,
                  student_release.folder, env=student_env(tmp_path))
    assert_course_kernel_alone(specs, student_release.folder / "notebooks")


def test_the_instructor_grades_notebooks_completed_in_the_release(student_release, tmp_path):
    subs = tmp_path / "submissions"
    (subs / "Student One").mkdir(parents=True)
    chosen = ["01_tensors"]
    for stem in chosen:
        nbformat.write(answered_in_release(student_release.folder / "notebooks" / f"{stem}.ipynb",
                                           ROOT / "solutions" / f"{stem}.ipynb"), subs / "Student One" / f"{stem}.ipynb")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "grader", "grade", str(subs), "--out", str(out), "--workers", "1",
                          "--chapters", ",".join(chosen)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "grades.csv", encoding="utf-8")))
    assert rows and all(r["status"] == "passed" and r["score"] == r["max_score"] for r in rows), rows
    assert {r["chapter"] for r in rows} == set(chosen)
    assert len(rows) == sum(len(registry.load().of(chapters.key(s))) for s in chosen)
