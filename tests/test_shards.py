"""A class graded in shards on several machines (`grade --shard i/n`) and joined (`merge`) gives the outputs of
one run: grades.csv and gradebook.csv byte for byte."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from grader.autograde.cohort import Shard
from tests import hazards

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--timeout", "30", "--check-timeout", "5", "--notebook-timeout", "300", "--workers", "2", "--seed", "same"]
STUDENTS = ("Ada", "Ben", "Chloé", "Dmitri")


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory) -> Path:
    """Four students of chapter 01: solved, blank, half solved, and one without a notebook."""
    root = tmp_path_factory.mktemp("shards") / "class"
    hazards.write(hazards.exercises_only(), root / "Ada" / "01_tensors.ipynb")
    hazards.write(hazards.exercises_only(), root / "Chloé" / "01_tensors.ipynb")
    nb = hazards.exercises_only()
    for name, args in (("element_offset", "x, index"), ("broadcast_shape", "a, b")):
        hazards.replace_def(nb, name, f"def {name}({args}):\n    raise NotImplementedError\n")
    hazards.write(nb, root / "Ben" / "01_tensors.ipynb")
    (root / "Dmitri").mkdir()
    (root / "Dmitri" / "notes.txt").write_text("no notebook")
    return root


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_every_student_is_in_exactly_one_shard(count):
    names = [f"student {i}" for i in range(200)] + list(STUDENTS)
    for name in names:
        assert sum(Shard(i, count).holds(name) for i in range(1, count + 1)) == 1


def test_split_then_merge_equals_one_run(class_folder, tmp_path):
    """Caught: a merge that drops a shard's students, orders them otherwise, or grades chapters only some shards
    saw (Dmitri has no notebook: his row comes from the class, not from his shard)."""
    # Where this run's kernels live (short: the sockets' paths must fit), none left once it is done.
    scratch = Path(tempfile.mkdtemp(prefix="shards-", dir="/tmp"))
    one = run("grade", str(class_folder), "--out", str(tmp_path / "one"), *FAST, env={"TMPDIR": str(scratch)})
    assert one.returncode == 0, one.stderr[-2000:]
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if any(str(scratch) in part for part in p.info["cmdline"] or [])]
    shutil.rmtree(scratch, ignore_errors=True)
    assert left == []  # the kernel each worker started ahead for a next notebook that never came is ended too
    outs = []
    for i in (1, 2):
        shard = run("grade", str(class_folder), "--out", str(tmp_path / f"shard{i}"), *FAST, "--shard", f"{i}/2")
        assert shard.returncode == 0, shard.stderr[-2000:]
        outs.append(str(tmp_path / f"shard{i}"))
    held = {s for s in STUDENTS if Shard(1, 2).holds(s)}
    assert 0 < len(held) < len(STUDENTS)  # both shards graded someone: the names were chosen so
    # A missing shard is refused, nothing merged (here, where shards are graded already).
    partial = run("merge", outs[0], "--out", str(tmp_path / "m"), "--submissions", str(class_folder))
    assert partial.returncode == 2 and "each of 1..2 once" in partial.stderr
    assert not (tmp_path / "m" / "grades.csv").exists()
    merged = run("merge", *outs, "--out", str(tmp_path / "merged"), "--submissions", str(class_folder))
    assert merged.returncode == 0, merged.stderr[-2000:]
    for name in ("grades.csv", "gradebook.csv"):
        assert (tmp_path / "merged" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    assert {p.name for p in (tmp_path / "merged").iterdir() if p.is_dir()} >= set(STUDENTS)


def test_shards_that_are_not_one_class_cut_one_way_are_refused(class_folder, tmp_path):
    """A shard run without --seed, a shard out of range: exit 2 before grading (a missing shard at the merge:
    test_split_then_merge_equals_one_run)."""
    no_seed = run("grade", str(class_folder), "--out", str(tmp_path / "x"), "--shard", "1/2")
    assert no_seed.returncode == 2 and "--shard needs --seed" in no_seed.stderr
    bad = run("grade", str(class_folder), "--out", str(tmp_path / "x"), "--shard", "3/2", "--seed", "s")
    assert bad.returncode == 2 and "between 1 and n" in bad.stderr
