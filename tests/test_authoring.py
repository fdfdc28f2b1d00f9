"""Student notebook generation and the release folder: stubs in, solutions and hidden tests out."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from grader import chapters, demonstrations, registry
from grader.authoring import release, student
from grader.authoring.markers import FORBIDDEN, MarkerError, strip_code, strip_markdown

REPO = Path(__file__).resolve().parents[1]

SOLUTION_CODE = '''\
import math


def flops(m: int, n: int) -> int:
    """FLOPs of a matrix-vector product."""
    ### BEGIN SOLUTION
    return 2 * m * n
    ### END SOLUTION


class Counter:
    def total(self) -> int:
        """Sum of the helper."""
        def helper(x: int) -> int:
            ### BEGIN SOLUTION   
            return x + 1
            ### END SOLUTION
        ### BEGIN SOLUTION
        return helper(1)
### END SOLUTION

AFTER = math.pi'''

STUDENT_CODE = '''\
import math


def flops(m: int, n: int) -> int:
    """FLOPs of a matrix-vector product."""
    raise NotImplementedError


class Counter:
    def total(self) -> int:
        """Sum of the helper."""
        def helper(x: int) -> int:
            raise NotImplementedError
        raise NotImplementedError

AFTER = math.pi'''

HIDDEN_CODE = """\
assert flops(1, 1) == 2
### BEGIN HIDDEN TESTS
assert flops(3, 4) == 24
### END HIDDEN TESTS
print("checked")
"""

MARKDOWN = """\
**Question.** Why is the matmul compute-bound?

<!-- BEGIN SOLUTION -->
Because its arithmetic intensity is high.
<!-- END SOLUTION -->
"""


def solution_notebook() -> nbformat.NotebookNode:
    """A small solution notebook with every feature the generator handles."""
    code = new_code_cell(SOLUTION_CODE, execution_count=3, metadata={"tags": ["exercise"]},
                         outputs=[new_output("stream", name="stdout", text="hi\n")])
    demo = new_code_cell("print(flops(2, 3))", metadata={"tags": ["solution-only"]})
    nb = new_notebook(cells=[new_markdown_cell("# Chapter"), code, new_code_cell(HIDDEN_CODE, execution_count=4),
                             demo, new_markdown_cell(MARKDOWN)])
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}, "widgets": {"state": {}}}
    return nb


def write_solutions(folder: Path, names: tuple[str, ...] = ("01_a.ipynb", "02_b.ipynb")) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        nbformat.write(solution_notebook(), folder / name)
    return folder


# --- cell transforms -------------------------------------------------------------------------

def test_solution_bodies_become_stubs_at_the_begin_indentation():
    assert strip_code(SOLUTION_CODE) == STUDENT_CODE


def test_student_code_compiles_and_stubs_raise():
    namespace: dict = {}
    exec(compile(strip_code(SOLUTION_CODE), "<student>", "exec"), namespace)
    with pytest.raises(NotImplementedError):
        namespace["flops"](2, 3)
    with pytest.raises(NotImplementedError):
        namespace["Counter"]().total()
    assert namespace["flops"].__doc__ == "FLOPs of a matrix-vector product."


def test_markdown_answer_replaced():
    assert strip_markdown(MARKDOWN) == ("**Question.** Why is the matmul compute-bound?\n\n"
                                        "YOUR ANSWER HERE\n")


def test_hidden_tests_removed_with_their_markers():
    assert strip_code(HIDDEN_CODE) == 'assert flops(1, 1) == 2\nprint("checked")\n'


def test_cell_without_markers_is_untouched():
    assert strip_code("x = 1\n\n") == "x = 1\n\n"
    assert strip_markdown("") == ""


@pytest.mark.parametrize("source, line, fragment", [
    ("x = 1\n### BEGIN SOLUTION\ny = 2", 2, "never closed"),
    ("x = 1\n### END SOLUTION", 2, "without a matching BEGIN"),
    ("### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n### END SOLUTION\n### END SOLUTION", 2, "inside the block"),
    ("### BEGIN SOLUTION\n### BEGIN HIDDEN TESTS\n### END HIDDEN TESTS\n### END SOLUTION", 2, "inside the block"),
    ("### BEGIN SOLUTION\nx = 1\n### END HIDDEN TESTS", 3, "closes"),
    ("### END HIDDEN TESTS", 1, "without a matching BEGIN"),
])
def test_unbalanced_code_markers_name_path_cell_and_line(source, line, fragment):
    nb = new_notebook(cells=[new_markdown_cell("intro"), new_code_cell(source)])
    nb.cells[1].id = "bad-cell"
    with pytest.raises(MarkerError) as err:
        student.student_notebook(nb, "solutions/ch.ipynb")
    message = str(err.value)
    for part in ("solutions/ch.ipynb", "cell 1", "bad-cell", f"line {line}", fragment):
        assert part in message


def test_unbalanced_markdown_marker():
    with pytest.raises(MarkerError, match="line 2.*never closed"):
        strip_markdown("Answer:\n<!-- BEGIN SOLUTION -->\nsecret")


@pytest.mark.parametrize("cell", [
    new_code_cell("x = 1  ### BEGIN SOLUTION\nsecret = 1"),  # not a whole line: not a marker
    new_markdown_cell("### BEGIN SOLUTION\nsecret\n### END SOLUTION"),  # code markers in markdown
])
def test_leftover_marker_text_is_caught_before_writing(tmp_path, cell):
    nbformat.write(new_notebook(cells=[cell]), tmp_path / "x.ipynb")
    with pytest.raises(MarkerError, match="marker text left"):
        student.render(tmp_path / "x.ipynb")


# --- notebooks -------------------------------------------------------------------------------

def test_student_notebook_keeps_ids_and_metadata_clears_outputs():
    nb = solution_notebook()
    out = student.student_notebook(nb, "x.ipynb")
    kept = [c for c in nb.cells if "solution-only" not in c.metadata.get("tags", [])]
    assert [c.id for c in out.cells] == [c.id for c in kept]
    # Kept, with a demonstration's tag and digest added (grader/demonstrations.py): nothing else of theirs changes.
    added = (demonstrations.TAG, demonstrations.DIGEST_KEY)
    def own(metadata):
        return {k: [t for t in v if t not in added] if k == "tags" else v for k, v in metadata.items()
                if k not in added and not (k == "tags" and set(v) <= set(added))}
    assert [own(c.metadata) for c in out.cells] == [own(c.metadata) for c in kept]
    assert any(demonstrations.TAG in c.metadata.get("tags", []) for c in out.cells)
    assert len(out.cells) == len(nb.cells) - 1
    assert all(c.outputs == [] and c.execution_count is None for c in out.cells if c.cell_type == "code")
    assert "widgets" not in out.metadata and out.metadata.kernelspec.name == "python3"
    assert nb.cells[1].outputs and nb.cells[1].execution_count == 3  # the input is not mutated


def test_a_demonstrations_own_helpers_are_skipped_and_what_the_exercises_use_runs():
    """Catches a rule that runs every cell defining a function (a timing helper measured in the same cell cost
    chapter 04's grading 0.8 s a notebook) or one that skips what an exercise needs: the exercise its check cell
    names, a helper it calls, the data it reads, the imports."""
    cells = ["import torch\nimport grader",
             "SCALE = 3.0",
             "def helper(x):\n    return x * SCALE",
             "def scaled(x):\n    return helper(x)",
             'grader.check("tensors.scaled", scaled)',
             "def host_clock(reps=7):\n    return sorted(torch.randn(8).tolist())[reps // 2]\n\nprint(host_clock())",
             "class Probe(torch.nn.Module):\n    pass\n\nprint(Probe())",
             "torch.manual_seed(0)\nprint(scaled(torch.ones(2)))"]
    # The check cell itself is skipped (grading runs the checks); what it reads, the exercise, runs.
    assert demonstrations.needed(cells) == [True, True, True, True, False, False, False, True]


@pytest.mark.parametrize("stem", chapters.NOTEBOOKS)
def test_every_exercise_is_defined_in_a_cell_grading_runs(stem):
    """Catches a demonstration mark on the cell that defines an exercise: grading would skip it, miss the name and
    grade the notebook again with every cell (the same grade, twice the time)."""
    out = student.student_notebook(nbformat.read(REPO / "solutions" / f"{stem}.ipynb", as_version=4), stem)
    runs = [c.source for c in out.cells if c.cell_type == "code" and not demonstrations.is_marked(c)]
    bound = set().union(*(demonstrations._Cell(source).binds for source in runs))
    names = {e.id.split(".", 1)[1] for e in registry.load().of(chapters.key(stem))}
    assert names and names <= bound, sorted(names - bound)


def test_collapsed_hint_cells_stay_collapsed_in_the_student_notebook():
    """A hint in a markdown cell with jupyter.source_hidden (JupyterLab shows it collapsed) reaches the student
    notebook collapsed and whole: the 02 round_to_bf16 hint, which gives most of the method away."""
    nb = nbformat.read(REPO / "solutions" / "02_dtypes.ipynb", as_version=4)
    out = student.student_notebook(nb, "02_dtypes.ipynb")
    hint = next(c for c in out.cells if c.id == "hint-round-to-bf16")
    assert hint.cell_type == "markdown" and hint.metadata["jupyter"]["source_hidden"] is True
    assert "0x7FFF" in hint.source and hint.source == next(c for c in nb.cells if c.id == hint.id).source
    exercise = out.cells[out.cells.index(hint) - 1]
    assert "Stuck?" in exercise.source and "0x7FFF" not in exercise.source  # the exercise text itself gives none


def test_generation_is_deterministic_and_written_as_jupyter_would(tmp_path):
    solutions = write_solutions(tmp_path / "solutions")
    out_a, out_b = tmp_path / "a", tmp_path / "b"
    assert student.main(["--solutions", str(solutions), "--out", str(out_a)]) == 0
    assert student.main(["--solutions", str(solutions), "--out", str(out_b)]) == 0
    for name in ("01_a.ipynb", "02_b.ipynb"):
        data = (out_a / name).read_bytes()
        assert data == (out_b / name).read_bytes()
        rewritten = io.StringIO()
        nbformat.write(nbformat.reads(data.decode(), as_version=4), rewritten)
        assert rewritten.getvalue().encode() == data
        text = data.decode()
        assert not any(marker in text for marker in FORBIDDEN)
        assert "return 2 * m * n" not in text and "flops(3, 4)" not in text and "print(flops(2, 3))" not in text


def test_check_detects_edits_stale_and_missing(tmp_path, capsys):
    solutions = write_solutions(tmp_path / "solutions")
    out = tmp_path / "notebooks"
    args = ["--solutions", str(solutions), "--out", str(out)]
    assert student.main(args + ["--check"]) == 1  # nothing generated yet
    assert student.main(args) == 0
    assert student.main(args + ["--check"]) == 0

    edited = out / "01_a.ipynb"
    edited.write_text(edited.read_text().replace("YOUR ANSWER HERE", "my answer"))
    capsys.readouterr()
    assert student.main(args + ["--check"]) == 1
    assert "differs" in capsys.readouterr().out
    assert student.main(args) == 0

    (out / "99_old.ipynb").write_text("{}")
    assert student.main(args + ["--check"]) == 1
    assert "stale" in capsys.readouterr().out
    assert student.main(args) == 0
    assert "removed stale" in capsys.readouterr().out and not (out / "99_old.ipynb").exists()

    (out / "02_b.ipynb").unlink()
    assert student.main(args + ["--check"]) == 1
    assert "missing" in capsys.readouterr().out
    assert student.main(args) == 0
    assert student.main(args + ["--check"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["01_a.ipynb", "02_b.ipynb"]


def test_check_writes_nothing(tmp_path):
    solutions = write_solutions(tmp_path / "solutions")
    assert student.main(["--solutions", str(solutions), "--out", str(tmp_path / "out"), "--check"]) == 1
    assert not (tmp_path / "out").exists()


def test_repo_notebooks_are_generated_from_solutions():
    """notebooks/ must be exactly what `python -m grader student` makes of solutions/."""
    args = ["--solutions", str(REPO / "solutions"), "--out", str(REPO / "notebooks"), "--check"]
    assert student.main(args) == 0, "run `python -m grader student` and commit notebooks/"


def test_demo_cohort_is_generated_from_solutions():
    """demo/submissions must be exactly what `python -m grader demo` makes of solutions/."""
    from grader.authoring import demo

    args = ["--solutions", str(REPO / "solutions"), "--out", str(REPO / "demo" / "submissions"), "--check"]
    assert demo.main(args) == 0, "run `python -m grader demo` (or `make demo`) and commit demo/"


def test_demo_students_solve_all_half_and_none(tmp_path):
    import nbformat

    from grader.authoring import demo

    sol = nbformat.read(REPO / "solutions" / "01_tensors.ipynb", as_version=4)
    stubs = [nbformat.writes(demo.answered(sol, f)).count("raise NotImplementedError") for f in (1.0, 0.5, 0.0)]
    assert stubs[0] < stubs[1] < stubs[2]
    assert "BEGIN SOLUTION" not in nbformat.writes(demo.answered(sol, 1.0))


# --- release ---------------------------------------------------------------------------------

def fake_repo(root: Path) -> Path:
    """The smallest repo build_release accepts, with every kind of thing it must leave out."""
    write_solutions(root / "solutions", ("01_a.ipynb",))
    for rel in ("grader/__init__.py", "grader/exercises/__init__.py", "grader/hidden/__init__.py",
                "grader/authoring/__init__.py", "grader/authoring/markers.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text('"""package"""\n')
    (root / "grader/authoring/markers.py").write_text('BEGIN = "### BEGIN SOLUTION"\n')
    (root / "grader/__pycache__").mkdir()
    (root / "grader/__pycache__/x.cpython-311.pyc").write_bytes(b"\0")
    for name in release.REQUIRED_FILES + ("Makefile",):
        (root / name).write_text(f"{name}\n")
    (root / "data").mkdir()
    (root / "data/sizes.csv").write_text("n\n1\n")
    return root


def repo_ready(repo: Path) -> bool:
    return (any((repo / "solutions").glob("*.ipynb"))
            and all((repo / name).is_file() for name in release.REQUIRED_FILES))


def assert_clean_release(out: Path) -> None:
    assert (out / "grader" / "__init__.py").is_file()
    assert not (out / "grader" / "hidden").exists() and not (out / "grader" / "authoring").exists()
    assert not (out / "grader" / "autograde").exists() and not (out / "demo").exists()
    assert not list(out.rglob("__pycache__")) and not list(out.rglob("*.pyc"))
    assert list((out / "notebooks").glob("*.ipynb"))
    assert not (out / "solutions").exists() and not (out / "tests").exists()
    assert release.scan(out) == []
    for path in [*(out / "notebooks").rglob("*"), *(out / "grader").rglob("*")]:
        if path.is_file():
            assert not any(m.encode() in path.read_bytes() for m in FORBIDDEN), path


def test_release_of_this_repo(tmp_path):
    """The real repo when it has solutions and the release files; a fake one until then."""
    out = tmp_path / "release"
    if repo_ready(REPO):
        assert release.main(["--out", str(out)]) == 0
        for name in release.REQUIRED_FILES:
            assert (out / name).is_file()
    else:
        release.build_release(fake_repo(tmp_path / "repo"), out)
    assert_clean_release(out)


def test_release_layout_and_rebuild(tmp_path):
    repo, out = fake_repo(tmp_path / "repo"), tmp_path / "out"
    written = release.build_release(repo, out)
    assert_clean_release(out)
    assert Path("notebooks/01_a.ipynb") in written and Path("data/sizes.csv") in written
    assert (out / "Makefile").is_file() and (out / "README.md").is_file()
    assert (out / "notebooks/01_a.ipynb").read_bytes() == student.render(repo / "solutions/01_a.ipynb").encode()
    (out / "leftover.txt").write_text("old")
    release.build_release(repo, out)  # outside the repo, but ours: no --force needed
    assert not (out / "leftover.txt").exists()


def test_release_refuses_marker_text_and_leaves_nothing(tmp_path):
    repo, out = fake_repo(tmp_path / "repo"), tmp_path / "out"
    (repo / "grader/notes.py").write_text("# ### END SOLUTION\n")
    with pytest.raises(MarkerError, match="notes.py:1"):
        release.build_release(repo, out)
    assert not out.exists()


def test_release_refuses_missing_required_file(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    (repo / "README.md").unlink()
    with pytest.raises(release.ReleaseError, match="README.md"):
        release.build_release(repo, tmp_path / "out")


def test_release_never_deletes_the_repo_or_a_strangers_folder(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    for bad in (repo, repo / "grader", repo / "solutions" / "x", tmp_path):
        with pytest.raises(release.ReleaseError):
            release.build_release(repo, bad)
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "thesis.tex").write_text("precious")
    with pytest.raises(release.ReleaseError, match="--force"):
        release.build_release(repo, stranger)
    assert (stranger / "thesis.tex").read_text() == "precious"
    release.build_release(repo, stranger, force=True)
    assert not (stranger / "thesis.tex").exists()
    release.build_release(repo, repo / "dist" / "student")  # inside the repo: fine
    assert (repo / "grader" / "__init__.py").is_file()


def test_release_grader_runs_public_checks_only(tmp_path):
    """In the release the public checks work and hidden ones are absent, even beside an editable install."""
    if not repo_ready(REPO):
        pytest.skip("the repo has no solutions yet")
    out = tmp_path / "release"
    assert release.main(["--out", str(out)]) == 0
    code = (
        "import grader, grader.registry as r\n"
        "assert grader.__file__.startswith(%r), grader.__file__\n"
        "assert r.hidden_available() is False\n"
        "res = grader.run_exercise('tensors.same_storage', lambda x, y: x is y)\n"
        "assert res.status == 'failed' and all(not c.hidden for c in res.checks), res\n"
        "try:\n"
        "    grader.run_exercise('tensors.same_storage', lambda x, y: x is y, hidden=True)\n"
        "except RuntimeError as e:\n"
        "    print('refused:', e)\n" % str(out))
    done = subprocess.run([sys.executable, "-c", code], cwd=out, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "refused: hidden checks are not part of the student release" in done.stdout


def test_a_zip_is_the_same_bytes_whatever_order_and_when_it_is_written(tmp_path):
    """zipped.zip_bytes, which the release, Gradescope's zip and the demo share: entries sorted by name, every one
    dated as asked (no earlier than 1980, a zip's first date), mode 755 only where asked; written through a
    temporary file, so the target is the zip or nothing."""
    import time
    import zipfile

    from grader.authoring import zipped

    members = {"b/run": b"#!/bin/sh\n", "a.txt": b"a" * 1000, "b/a.py": b"x = 1\n"}
    data = zipped.zip_bytes(members, zipped.zip_date(1780000000), executable=("b/run",))
    again = zipped.zip_bytes(dict(reversed(list(members.items()))), zipped.zip_date(1780000000), executable=("b/run",))
    assert data == again  # the order members are given in changes nothing
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        infos = z.infolist()
        assert [i.filename for i in infos] == ["a.txt", "b/a.py", "b/run"]
        assert {i.date_time for i in infos} == {time.gmtime(1780000000)[:6]}
        assert [i.external_attr >> 16 for i in infos] == [0o644, 0o644, 0o755]
        assert {i.filename: z.read(i) for i in infos} == members
    assert zipped.zip_date(0) == (1980, 1, 1, 0, 0, 0)
    target = zipped.write_zip(tmp_path / "out.zip", members)
    assert [p.name for p in tmp_path.iterdir()] == ["out.zip"]
    assert target.read_bytes() == zipped.zip_bytes(members) != data  # the course's own date, 2026-01-01
