"""A cohort of real notebooks built from the chapter 01 solution, one student per hazard.

Each entry: student name -> (how the submission is written, the status each exercise must end with).
Exercises in order: same_storage, element_offset, broadcast_shape, attention_scores, split_heads, merge_heads.
Hazards about what a cell does when it runs keep the chapter's demonstrations (a demonstration that calls a
looping exercise is the cell that times out); hazards about the file or its checks get the exercises alone.
"""
from __future__ import annotations

import ast
import json
import re
import zipfile
from pathlib import Path

import nbformat

from grader import demonstrations

ROOT = Path(__file__).resolve().parents[1]
STUDENT = ROOT / "notebooks" / "01_tensors.ipynb"
EXERCISES = ["same_storage", "element_offset", "broadcast_shape", "attention_scores", "split_heads", "merge_heads"]
ALL_PASS = {e: "passed" for e in EXERCISES}


def solved(stem: str = "01_tensors") -> nbformat.NotebookNode:
    """The solution as a student may hand it in: no solution-only cells, no outputs, and without its
    "Measure it" sections (timing sweeps that only cost grading time here: the demo cohort's grading runs
    the whole notebooks). Every exercise and its check cell stay."""
    nb = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    kept, measuring = [], False
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("## "):
            measuring = bool(re.match(r"## \d+\. Measure it", cell.source))
        if measuring or "solution-only" in cell.get("metadata", {}).get("tags", []):
            assert "grader.check(" not in cell.source, f"{stem}: an exercise inside a measure-it section"
            continue
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        kept.append(cell)
    nb.cells = kept
    demonstrations.mark(nb.cells)  # tagged as `make student` tags a student's copy: grading skips what it may
    return nb


def exercises_only(stem: str = "01_tensors") -> nbformat.NotebookNode:
    """solved(stem) less the chapter's demonstrations, for hazards that are about the file or the grading of the
    exercises, not about what a cell does when it runs. Kept: every cell that imports, defines or writes a file
    the exercises use, and every check cell."""
    nb = solved(stem)
    nb.cells = [c for c in nb.cells if c.cell_type == "markdown" or _defines(c.source)]
    return nb


def _defines(source: str) -> bool:
    if source.startswith("%%writefile ") or "grader.check(" in source:
        return True
    if source.lstrip().startswith("%"):  # %%needs: a demonstration of a finished exercise
        return False
    kept = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    return any(isinstance(node, kept) for node in ast.parse(source).body)


def replace_def(nb: nbformat.NotebookNode, name: str, body: str) -> nbformat.NotebookNode:
    """The notebook with the cell defining `name` replaced by `body` (a whole new definition)."""
    for cell in nb.cells:
        if cell.cell_type == "code" and re.search(rf"^def {name}\(", cell.source, re.M):
            cell.source = body
            return nb
    raise KeyError(name)


def insert(nb: nbformat.NotebookNode, source: str, before_def: str | None = None) -> nbformat.NotebookNode:
    """Add a code cell (before the cell defining `before_def`, else at the end)."""
    cell = nbformat.v4.new_code_cell(source)
    index = len(nb.cells)
    if before_def:
        index = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and f"def {before_def}(" in c.source)
    nb.cells.insert(index, cell)
    return nb


def write(nb: nbformat.NotebookNode, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


# ---------------------------------------------------------------- one builder per hazard

def infinite_loop(d: Path) -> None:
    nb = replace_def(solved(), "element_offset", "def element_offset(x, index):\n    while True:\n        pass\n")
    # This one ignores the interrupt, so the kernel must be killed and the notebook replayed.
    nb = replace_def(nb, "broadcast_shape", "import time\n\ndef broadcast_shape(a, b):\n    while True:\n"
                     "        try:\n            time.sleep(0.05)\n        except BaseException:\n            pass\n")
    write(nb, d / "01_tensors.ipynb")


def os_exit(d: Path) -> None:
    write(insert(solved(), "import os\nos._exit(1)", before_def="element_offset"), d / "01_tensors.ipynb")


def memory_blowup(d: Path) -> None:
    nb = replace_def(solved(), "attention_scores", "import torch\n\ndef attention_scores(q, k):\n"
                     "    hoard = torch.ones(2**36)  # 256 GiB\n    return q @ k.transpose(-1, -2)\n")
    write(insert(nb, "big = bytearray(2**40)"), d / "01_tensors.ipynb")


def system_exit(d: Path) -> None:
    nb = replace_def(solved(), "split_heads", "import sys\n\ndef split_heads(x, num_heads):\n    sys.exit(3)\n")
    nb = insert(nb, "raise SystemExit('bye')", before_def="element_offset")
    write(insert(nb, "exit()", before_def="broadcast_shape"), d / "01_tensors.ipynb")


def patched_grader(d: Path) -> None:
    nb = replace_def(solved(), "same_storage", "def same_storage(x, y):\n    return True\n")
    write(insert(nb, "import grader, grader.runner\n"
                     "grader.check = lambda *a, **k: print('all checks passed')\n"
                     "grader.runner.run_exercise = lambda *a, **k: None\n", before_def="same_storage"),
          d / "01_tensors.ipynb")


def patched_allclose(d: Path) -> None:
    nb = replace_def(solved(), "attention_scores", "import torch\n\ndef attention_scores(q, k):\n"
                     "    return torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype)\n")
    write(insert(nb, "import torch\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"
                     "setattr(torch.Tensor, '__eq__', lambda self, other: True)", before_def="same_storage"),
          d / "01_tensors.ipynb")


def suppressed_tracebacks(d: Path) -> None:
    nb = replace_def(solved(), "merge_heads", "def merge_heads(x):\n    raise RuntimeError('broken')\n")
    write(insert(nb, "ip = get_ipython()\nip.showtraceback = lambda *a, **k: None\n"
                     "ip._showtraceback = lambda *a, **k: None", before_def="same_storage"), d / "01_tensors.ipynb")


FAKE_RESULTS = json.dumps({"score": 12, "tests": [{"name": "all", "score": 12, "max_score": 12, "status": "passed"}]})


def fake_results(d: Path) -> None:
    nb = nbformat.read(STUDENT, as_version=4)  # nothing solved
    write(insert(nb, "import pathlib\n"
                     f"for folder in ['.', '..', '../..']:\n"
                     f"    p = pathlib.Path(folder)\n"
                     f"    (p / 'results.json').write_text({FAKE_RESULTS!r})\n"
                     "    (p / 'grades.csv').write_text('student,chapter,exercise,score,max_score,status,message\\n')\n"
                     "    (p / 'gradebook.csv').write_text('student,01_tensors,total,max_total\\n')\n",
                 before_def="same_storage"), d / "01_tensors.ipynb")


def truncated_json(d: Path) -> None:
    text = nbformat.writes(exercises_only())
    d.mkdir(parents=True)
    (d / "01_tensors.ipynb").write_text(text[: len(text) // 2], encoding="utf-8")


def old_nbformat(d: Path) -> None:
    nb3 = nbformat.convert(exercises_only(), 3)
    d.mkdir(parents=True)
    (d / "01_tensors.ipynb").write_text(nbformat.writes(nb3, version=3), encoding="utf-8")


def wrong_kernel(d: Path) -> None:
    nb = exercises_only()
    nb.metadata["kernelspec"] = {"name": "julia-1.9", "display_name": "Julia 1.9", "language": "julia"}
    nb.metadata["language_info"] = {"name": "julia"}
    nb.metadata["odd"] = {"nested": [1, {"x": None}]}
    write(nb, d / "01_tensors.ipynb")


def huge_output(d: Path) -> None:
    write(insert(exercises_only(), "print('x' * 50_000_000)\nfor i in range(20000):\n    print(i)",
                 before_def="element_offset"),
          d / "01_tensors.ipynb")


def deleted_check_cells(d: Path) -> None:
    nb = exercises_only()
    nb.cells = [c for c in nb.cells if "grader.check(" not in c.source]
    write(nb, d / "01_tensors.ipynb")


def duplicate_ids(d: Path) -> None:
    text = json.dumps({**json.loads(nbformat.writes(exercises_only())), "nbformat_minor": 5})
    data = json.loads(text)
    for cell in data["cells"]:
        cell["id"] = "same-id"
    d.mkdir(parents=True)
    (d / "01_tensors.ipynb").write_text(json.dumps(data), encoding="utf-8")


def stderr_warnings(d: Path) -> None:
    nb = insert(solved(), "import sys, warnings\nwarnings.warn('a warning')\nprint('to stderr', file=sys.stderr)",
                before_def="same_storage")
    nb = replace_def(nb, "merge_heads", "import warnings, sys\n\ndef merge_heads(x):\n"
                     "    warnings.warn('merging')\n    print('noise', file=sys.stderr)\n"
                     "    *lead, h, s, d = x.shape\n    return x.transpose(-3, -2).reshape(*lead, s, h * d)\n")
    write(nb, d / "01_tensors.ipynb")


def renamed(d: Path) -> None:
    write(exercises_only(), d / "jdoe_01_tensors-2.ipynb")


def zipped(d: Path) -> None:
    d.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(d.parent / f"{d.name}.zip", "w") as z:
        z.writestr("work/week1/01_tensors (1).ipynb", nbformat.writes(exercises_only()))
        z.writestr("__MACOSX/work/._01_tensors.ipynb", "junk")


def unicode_name(d: Path) -> None:
    write(exercises_only(), d / "01_tensors.ipynb")


def control_solved(d: Path) -> None:
    write(exercises_only(), d / "01_tensors.ipynb")


def control_wrong(d: Path) -> None:
    nb = replace_def(exercises_only(), "same_storage",
                     "def same_storage(x, y):\n    return x.data_ptr() == y.data_ptr()\n")
    nb = replace_def(nb, "split_heads", "def split_heads(x, num_heads):\n    *lead, s, w = x.shape\n"
                     "    return x.reshape(*lead, num_heads, s, w // num_heads)\n")
    write(nb, d / "01_tensors.ipynb")


def tampered(**overrides: str) -> dict[str, str]:
    return {e: overrides.get(e, "tampered") for e in EXERCISES}


COHORT = {
    "infinite loop": (infinite_loop, {**ALL_PASS, "element_offset": "timeout", "broadcast_shape": "timeout"}),
    "os exit": (os_exit, ALL_PASS),
    "memory blowup": (memory_blowup, {**ALL_PASS, "attention_scores": "memory"}),
    "system exit": (system_exit, {**ALL_PASS, "split_heads": "error"}),
    "patched grader": (patched_grader, tampered()),
    "patched allclose": (patched_allclose, tampered()),
    "suppressed tracebacks": (suppressed_tracebacks, tampered()),
    "fake results": (fake_results, {e: "not_implemented" for e in EXERCISES}),
    "truncated json": (truncated_json, {e: "invalid" for e in EXERCISES}),
    "old nbformat": (old_nbformat, ALL_PASS),
    "wrong kernel": (wrong_kernel, ALL_PASS),
    "huge output": (huge_output, ALL_PASS),
    "deleted check cells": (deleted_check_cells, ALL_PASS),
    "duplicate ids": (duplicate_ids, ALL_PASS),
    "stderr warnings": (stderr_warnings, ALL_PASS),
    "renamed file": (renamed, ALL_PASS),
    "zipped": (zipped, ALL_PASS),
    "Zoë Ñúñez 学生": (unicode_name, ALL_PASS),
    "control solved": (control_solved, ALL_PASS),
    "control wrong": (control_wrong, {**ALL_PASS, "same_storage": "failed", "split_heads": "failed"}),
}


def build(root: Path) -> Path:
    """Write the whole cohort under `root` and return it."""
    for student, (make, _) in COHORT.items():
        make(root / student)
    return root

