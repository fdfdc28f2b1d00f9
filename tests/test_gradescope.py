"""The Gradescope autograder zip, run as Gradescope would run it: its own `run_autograder`, in a folder tree
shaped like Gradescope's container (root from AUTOGRADER_ROOT), on a solved, a blank, a hostile and a
damaged submission. Each results.json must follow Gradescope's documented format and say what happened.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import jsonschema
import nbformat
import psutil
import pytest

from grader import registry
from grader.autograde.gradescope import KERNEL_USER
from grader.autograde.sandbox import bwrap_problem
from tests import hazards
from tests import hazards_sandbox as cheats

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "01_tensors"

# Gradescope's results.json, as documented in its autograder specification (gradescope-autograders.readthedocs.io,
# "Autograder Specifications", Output format): every field it lists, and no other.
VISIBILITY = {"enum": ["hidden", "after_due_date", "after_published", "visible"]}
FORMAT = {"enum": ["text", "html", "simple_format", "md", "ansi"]}
RESULTS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "score": {"type": "number"},
        "execution_time": {"type": "number"},
        "output": {"type": "string"},
        "output_format": FORMAT,
        "test_output_format": FORMAT,
        "test_name_format": FORMAT,
        "visibility": VISIBILITY,
        "stdout_visibility": VISIBILITY,
        "extra_data": {"type": "object"},
        "tests": {"type": "array", "items": {
            "type": "object",
            "additionalProperties": False,
            "required": ["score", "max_score", "name"],
            "properties": {
                "score": {"type": "number"},
                "max_score": {"type": "number"},
                "status": {"enum": ["passed", "failed"]},
                "name": {"type": "string"},
                "name_format": FORMAT,
                "number": {"type": "string"},
                "output": {"type": "string"},
                "output_format": FORMAT,
                "tags": {"type": "array", "items": {"type": "string"}},
                "visibility": VISIBILITY,
                "extra_data": {"type": "object"},
            }}},
        "leaderboard": {"type": "array"},
    },
}


@pytest.fixture(scope="module")
def autograder(tmp_path_factory) -> Path:
    """dist/autograder.zip for chapter 01, built by the command and extracted where Gradescope puts it."""
    root = tmp_path_factory.mktemp("gradescope")
    zpath = root / "autograder.zip"
    built = subprocess.run([sys.executable, "-m", "grader", "gradescope", "--out", str(zpath), "--chapters", CHAPTER],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    with zipfile.ZipFile(zpath) as z:
        names = z.namelist()
        assert {"setup.sh", "run_autograder", "requirements.txt"} <= set(names)  # at the zip's root
        assert any(n.startswith("grader/hidden/") for n in names) and not any("authoring" in n for n in names)
        assert (z.getinfo("run_autograder").external_attr >> 16) & stat.S_IXUSR
        z.extractall(root / "source")
    return root / "source"


def submit(autograder: Path, tmp_path: Path, files: dict[str, bytes], fresh: bool = True,
           env: dict[str, str] | None = None) -> dict:
    """Lay out /autograder as Gradescope does (`fresh`: copy the source in; else it is there), run the zip's
    run_autograder there, return results.json."""
    root = tmp_path / "autograder"
    if fresh:
        shutil.copytree(autograder, root / "source")
    (root / "submission").mkdir(parents=True)
    for name, data in files.items():
        (root / "submission" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / name).write_bytes(data)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "GRADER_PYTHON": sys.executable, **(env or {})}
    env.pop("PYTHONPATH", None)
    run = subprocess.run(["bash", str(root / "source" / "run_autograder")], cwd=root, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    jsonschema.validate(results, RESULTS_SCHEMA)
    return results


def notebook_bytes(nb: nbformat.NotebookNode) -> bytes:
    return nbformat.writes(nb).encode()


def points() -> float:
    return sum(e.points for e in registry.load().of("tensors"))


def test_a_solved_submission_scores_full_marks(autograder, tmp_path):
    r = submit(autograder, tmp_path, {"01_tensors.ipynb": notebook_bytes(hazards.exercises_only())})
    assert r["score"] == points() and len(r["tests"]) == len(registry.load().of("tensors"))
    assert all(t["status"] == "passed" and t["score"] == t["max_score"] for t in r["tests"])
    assert r["output"].startswith(f"{points():g} of {points():g} points") and "01_tensors.ipynb" in r["output"]
    assert r["stdout_visibility"] == "hidden"


def test_a_blank_submission_scores_zero_and_says_not_implemented(autograder, tmp_path):
    r = submit(autograder, tmp_path, {"work/01_tensors (2).ipynb": (ROOT / "notebooks" / "01_tensors.ipynb").read_bytes()})
    assert r["score"] == 0 and all(t["status"] == "failed" for t in r["tests"])
    assert all(t["output"].startswith("Not implemented yet.") for t in r["tests"])


def test_a_hostile_submission_is_graded_not_obeyed(autograder, tmp_path):
    """The hazard notebooks: one patches the grader and lies about results; the score stays 0."""
    folder = tmp_path / "hazard"
    hazards.patched_grader(folder)
    r = submit(autograder, tmp_path, {"01_tensors.ipynb": (folder / "01_tensors.ipynb").read_bytes()})
    assert r["score"] == 0
    assert {t["extra_data"]["status"] for t in r["tests"]} == {"tampered"}
    assert all("Tampering detected" in t["output"] for t in r["tests"])
    for t in r["tests"]:  # hidden checks' inputs are never shown
        for line in t["output"].splitlines():
            if "(hidden)" in line:
                assert line.endswith("(hidden)") or line.endswith(": a hidden check failed"), line


def test_a_damaged_submission_scores_zero_with_a_reason(autograder, tmp_path):
    text = notebook_bytes(hazards.exercises_only())
    r = submit(autograder, tmp_path, {"01_tensors.ipynb": text[: len(text) // 2]})
    assert r["score"] == 0 and {t["extra_data"]["status"] for t in r["tests"]} == {"invalid"}
    assert "damaged or cut short" in r["tests"][0]["output"]
    assert "Not graded (no readable notebook found): 01_tensors.ipynb" in r["output"]


def test_a_submission_is_graded_without_the_class_report_nobody_reads(tmp_path, monkeypatch):
    """Gradescope grades one student in a folder it throws away: no class.html drawn there (about a second of
    matplotlib per submission). Caught: results_for leaving class_report at its default."""
    import io

    from rich.console import Console

    from grader.autograde import gradescope
    from grader.autograde.kernel import Limits

    seen = []
    real = gradescope.grade_cohort

    def grade_cohort(submissions, out, *args, **kwargs):
        summary = real(submissions, out, *args, **kwargs)
        seen.append(((out / "grades.csv").is_file(), (out / "class.html").exists()))
        return summary

    monkeypatch.setattr(gradescope, "grade_cohort", grade_cohort)
    (tmp_path / "submission").mkdir()
    results = gradescope.results_for(tmp_path / "submission", [CHAPTER], Limits(), Console(file=io.StringIO()))
    assert seen == [(True, False)] and results["score"] == 0


def test_an_empty_submission_still_gets_a_results_file(autograder, tmp_path):
    r = submit(autograder, tmp_path, {"notes.txt": b"I forgot the notebook"})
    assert r["score"] == 0 and {t["extra_data"]["status"] for t in r["tests"]} == {"missing"}
    assert "Submit the notebooks with their names" in r["output"]


# ---------------------------------------------------------------- dishonest submissions under the autograder

def cheating_submission(root: Path, token: str, walk: bool) -> dict[str, bytes]:
    """Chapter 01 with two exercises blank, plus cells that try to take them from the autograder's source (its
    hidden checks, solutions an instructor left in it) and to forge results.json, now and after grading."""
    source = root / "source"
    (source / "solutions").mkdir(exist_ok=True)  # a target as if the zip carried them: it does not, see build()
    hazards.write(hazards.solved(), source / "solutions" / "01_tensors.ipynb")
    t = cheats.Targets(repo=source, classmate=root / "nobody.ipynb", home=root, port=9, secret="-", token=token)
    nb = cheats.blank(hazards.exercises_only())
    for code in (cheats.solution_hunter(t, walk), cheats.hidden_importer(t),
                 cheats.results_forger(root / "results" / "results.json", token), cheats.remounter(t)):
        nb.cells.append(nbformat.v4.new_code_cell(code))
    return {"01_tensors.ipynb": notebook_bytes(nb)}


@pytest.fixture
def machine():
    """What a remounting cheat would change on this machine (tests/hazards_sandbox.remounter): checked after the
    autograder ran, and put back if it did change (so nothing that runs next is affected)."""
    modules = {m: Path(__import__(m).__file__).read_bytes() for m in cheats.IMPORTED_BY_THE_GRADER}
    state: dict = {}
    yield state
    token = state.get("token", "")
    planted = [p for place in cheats.planted_places() for p in (place / f"{token}.pth", place / f"{token}.py",
                                                                place / "sitecustomize.py", place / "usercustomize.py")
               if token and p.is_file() and token in p.read_text(errors="replace")]
    changed = [m for m, text in modules.items() if Path(__import__(m).__file__).read_bytes() != text]
    for path in planted:
        path.unlink()
    for m in changed:
        Path(__import__(m).__file__).write_bytes(modules[m])
    assert planted == [] and changed == [], (planted, changed)


def assert_graded_on_its_own_code(r: dict, token: str) -> None:
    """The honest exercises score, the blank ones do not, and the forged results never replace the grader's."""
    by_id = {t["extra_data"]["exercise"].partition(".")[2]: t for t in r["tests"]}
    assert {e: t["extra_data"]["status"] for e, t in by_id.items()} == cheats.EXPECTED
    points_by = {e.id.partition(".")[2]: e.points for e in registry.load().of("tensors")}
    assert r["score"] == sum(points_by[e] for e in cheats.HONEST)
    assert token not in json.dumps(r)


def settled_results(root: Path, token: str) -> dict:
    """results.json once a forger's delayed write (8 s) would have landed, if anything of it survived."""
    time.sleep(9)
    assert not [p for p in psutil.process_iter(["cmdline"]) if token in " ".join(p.info["cmdline"] or [])]
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))


@pytest.mark.skipif(bool(bwrap_problem()), reason="bubblewrap cannot run here: the fallback test covers this machine")
def test_cheats_under_the_autograder_in_the_sandbox_score_only_their_own_code(autograder, tmp_path, machine):
    """As root, as on Gradescope: the remounting cheat writes nothing on the machine (checked by `machine`)."""
    token = machine["token"] = "forged-" + secrets.token_hex(6)
    root = tmp_path / "autograder"
    shutil.copytree(autograder, root / "source")
    files = cheating_submission(root, token, walk=True)
    r = submit(autograder, tmp_path, files, fresh=False)
    assert_graded_on_its_own_code(r, token)
    assert_graded_on_its_own_code(settled_results(root, token), token)


@pytest.fixture
def world_readable_root():
    """An autograder root anyone may enter (pytest's own folders are root's only, which would hide the very
    files the fallback must lock away itself), and the kernel user able to run this machine's Python."""
    if os.geteuid() != 0:
        pytest.skip("the kernel-user fallback needs the autograder to run as root, as on Gradescope")
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", KERNEL_USER],
                   capture_output=True)
    base = Path(tempfile.mkdtemp(prefix="gradescope-fallback-"))
    base.chmod(0o755)
    # The course repository is not in Gradescope's image; here it is, world-readable: hide its solutions
    # for the length of the test as the image would (the sandbox test above needs no such help).
    solutions = ROOT / "solutions"
    mode = solutions.stat().st_mode
    solutions.chmod(0o700)
    try:
        with cheats.python_reachable_by(KERNEL_USER):
            yield base
    finally:
        solutions.chmod(stat.S_IMODE(mode))
        shutil.rmtree(base, ignore_errors=True)


def test_without_bubblewrap_the_kernel_runs_as_an_unprivileged_user_and_cheats_still_fail(autograder,
                                                                                        world_readable_root, machine):
    root = world_readable_root / "autograder"
    shutil.copytree(autograder, root / "source")
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    token = machine["token"] = "forged-" + secrets.token_hex(6)
    files = cheating_submission(root, token, walk=False)
    r = submit(autograder, world_readable_root, files, fresh=False, env={"GRADER_BWRAP": "/nonexistent/bwrap"})
    assert_graded_on_its_own_code(r, token)
    assert_graded_on_its_own_code(settled_results(root, token), token)
    for private in (root / "source", root / "source" / "grader" / "hidden", root / "results"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o700, private
