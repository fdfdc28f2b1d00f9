"""The Gradescope autograder zip, run as Gradescope would run it: its own `run_autograder`, in a folder tree
shaped like Gradescope's container (root from AUTOGRADER_ROOT), on a solved, a blank, a hostile and a
damaged submission. Each results.json must follow Gradescope's documented format and say what happened.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import nbformat
import pytest

from grader import registry
from tests import hazards

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


def submit(autograder: Path, tmp_path: Path, files: dict[str, bytes]) -> dict:
    """Lay out /autograder as Gradescope does, run the zip's run_autograder there, return results.json."""
    root = tmp_path / "autograder"
    shutil.copytree(autograder, root / "source")
    (root / "submission").mkdir(parents=True)
    for name, data in files.items():
        (root / "submission" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / name).write_bytes(data)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "GRADER_PYTHON": sys.executable}
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
    return sum(e.points for e in registry.all_exercises("tensors"))


def test_a_solved_submission_scores_full_marks(autograder, tmp_path):
    r = submit(autograder, tmp_path, {"01_tensors.ipynb": notebook_bytes(hazards.solved())})
    assert r["score"] == points() and len(r["tests"]) == len(registry.all_exercises("tensors"))
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
    text = notebook_bytes(hazards.solved())
    r = submit(autograder, tmp_path, {"01_tensors.ipynb": text[: len(text) // 2]})
    assert r["score"] == 0 and {t["extra_data"]["status"] for t in r["tests"]} == {"invalid"}
    assert "damaged or cut short" in r["tests"][0]["output"]
    assert "Not graded (no readable notebook found): 01_tensors.ipynb" in r["output"]


def test_an_empty_submission_still_gets_a_results_file(autograder, tmp_path):
    r = submit(autograder, tmp_path, {"notes.txt": b"I forgot the notebook"})
    assert r["score"] == 0 and {t["extra_data"]["status"] for t in r["tests"]} == {"missing"}
    assert "Submit the notebooks with their names" in r["output"]
