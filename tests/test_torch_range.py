"""The grader declares ranges (pyproject.toml) so a student's own torch can stay; the lab installs exact pins
(requirements.txt) so every lab shows the solutions' outputs. Each pin must lie in its range, and every install
route must name the pins in the same pip call as the grader, or a range alone would pick the newest torch (on
Linux from PyPI a multi-GB CUDA build) instead of the pin.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from grader import lab
from grader.authoring import gradescope

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# The torch releases the course supports: the three before the pin through the newest on the index when the
# range was chosen (2.15). Narrowing the range below this drops students' torches; widening it past 2.15
# claims versions nobody ran.
SUPPORTED_TORCH = ("2.10.0", "2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0")


def ranges(requirements: list[str]) -> dict[str, Requirement]:
    return {canonicalize_name(r.name): r for r in map(Requirement, requirements)}


def pins(name: str) -> dict[str, Version]:
    """`package==version` lines of a requirements file (comments and blank lines skipped)."""
    found = {}
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([0-9][A-Za-z0-9.+]*)", line)
            assert match, f"{name}: {line!r} is not an exact pin (package==version): the lab installs exact versions"
            found[canonicalize_name(match[1])] = Version(match[2])
    return found


DECLARED = ranges(PYPROJECT["dependencies"])
DECLARED_TEST = ranges(PYPROJECT["optional-dependencies"]["test"])


def test_pyproject_declares_ranges_not_the_lab_pins():
    # catches pyproject.toml reading requirements.txt again (every student forced onto torch 2.13.0)
    assert "dependencies" not in PYPROJECT.get("dynamic", [])
    torch = DECLARED["torch"].specifier
    assert all(torch.contains(v) for v in SUPPORTED_TORCH), f"torch{torch} leaves out some of {SUPPORTED_TORCH}"
    assert not torch.contains("2.9.1") and not torch.contains("2.16.0"), f"torch{torch} claims untested releases"


@pytest.mark.parametrize("requirements, declared", [("requirements.txt", DECLARED),
                                                    ("requirements-test.txt", DECLARED_TEST)])
def test_every_pin_lies_in_its_declared_range(requirements, declared):
    # catches a pin bumped past its range (the lab would install what the grader says it does not support),
    # and a package pinned but not declared, or declared but not pinned (the lab would float it)
    pinned = pins(requirements)
    assert set(pinned) == set(declared), (f"{requirements} pins {sorted(set(pinned) - set(declared))} that "
                                          f"pyproject.toml does not declare, and misses {sorted(set(declared) - set(pinned))}")
    outside = {name: f"{v} not in {declared[name].specifier}" for name, v in pinned.items()
               if not declared[name].specifier.contains(v, prereleases=True)}
    assert not outside, f"{requirements}: pins outside pyproject.toml's ranges: {outside}"


def test_torch_pin_is_the_one_the_solutions_were_run_with():
    assert pins("requirements.txt")["torch"] == Version("2.13.0")


def test_make_installs_the_pins_with_the_grader():
    # catches `pip install -e .` alone (the range would pick the newest torch, not the pin)
    lines = [l for l in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines() if "pip install" in l]
    assert lines and all("-r requirements.txt" in l and "-e ." in l for l in lines), lines


def test_grader_lab_installs_the_pins_with_the_grader(tmp_path, monkeypatch):
    # `python -m grader lab` (and the student release's route, which uses it): one pip call with both
    calls = []
    monkeypatch.setattr(lab, "_run", lambda cmd, what: calls.append([str(c) for c in cmd]))
    lab.ensure_venv(ROOT, tmp_path / "venv")
    pip = [c for c in calls if c[1:4] == ["-m", "pip", "install"]]
    assert len(pip) == 1, calls
    cmd = pip[0]
    assert cmd[cmd.index("-r") + 1] == str(ROOT / "requirements.txt") and cmd[cmd.index("-e") + 1] == str(ROOT)


@pytest.mark.parametrize("no_bytecode, compiled_at_install", [("", False), ("1", True)])
def test_a_students_venv_leaves_bytecode_to_the_first_import(tmp_path, monkeypatch, no_bytecode, compiled_at_install):
    """Catches pip compiling all of torch at set-up (half its time), and `--no-compile` where Python writes no
    bytecode, whose every import would then compile from source."""
    calls = []
    monkeypatch.setattr(lab, "_run", lambda cmd, what: calls.append([str(c) for c in cmd]))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", no_bytecode)
    lab.ensure_venv(ROOT, tmp_path / "venv")
    [pip] = [c for c in calls if c[1:4] == ["-m", "pip", "install"]]
    assert ("--no-compile" not in pip) == compiled_at_install, pip


def test_make_compiles_the_venvs_bytecode_once_on_every_core():
    """Catches a Makefile venv left without bytecode: sandboxed grading kernels could not write it, and would compile
    every module they import from source, notebook after notebook."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "--no-compile" in text and "compileall -q -j 0" in text


def test_gradescope_installs_the_torch_pin_first():
    # torch from PyTorch's CPU index first, then the pins and the grader in one call
    lines = [l for l in gradescope.SETUP_SH.splitlines() if l.startswith("$PIP")]
    assert "^torch==" in lines[0] and "download.pytorch.org/whl/cpu" in lines[0]
    assert "-r /autograder/source/requirements.txt -e /autograder/source" in lines[1]


def test_conda_installs_the_pins_with_the_grader():
    yml = (ROOT / "environment.yml").read_text(encoding="utf-8")
    pip_section = yml.split("- pip:", 1)[1]
    assert "- -r requirements.txt" in pip_section and "- -e ." in pip_section


def test_a_forbidden_function_this_torch_lacks_is_skipped_not_a_crash():
    # catches a check that dies with AttributeError on a torch older or newer than the pin (a forbid list names
    # private helpers such as torch._refs._broadcast_shapes, which move between releases)
    import torch

    from grader import guard

    watching = guard.Guard(("torch._no_such_helper_in_any_release", "torch.utils._no_such_module.f",
                            "torch.broadcast_shapes"), lambda dotted: RuntimeError(f"refused {dotted}"))
    with pytest.raises(RuntimeError, match="refused torch.broadcast_shapes"):
        with watching:
            torch.broadcast_shapes((1,), (2,))
    assert torch.broadcast_shapes((1,), (2,)) == (2,)


def test_float8_overflow_matches_the_version_chapter_02_keys_on():
    # chapter 02 asserts 448 from torch 2.13 on and NaN before (2.11.0 and 2.12.1 gave NaN, 2.13.0 and 2.14.1 448):
    # a torch in the range that behaves otherwise fails here, before it fails in the notebook
    import math

    import nbformat
    import torch

    cells = nbformat.read(ROOT / "solutions" / "02_dtypes.ipynb", as_version=4).cells
    assert any("SATURATES = torch.__version__ >= (2, 13)" in c.source for c in cells)
    got = torch.tensor([1000.0]).to(torch.float8_e4m3fn).float().item()
    # a TorchVersion compares as a version; as strings, "2.9" would count as newer than "2.13"
    assert (got == 448.0) if torch.__version__ >= (2, 13) else math.isnan(got), (torch.__version__, got)
