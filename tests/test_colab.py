"""The student release in Google Colab, simulated here: `python -m grader release --course-url URL`.

The simulation: a fresh venv (no pip, nothing installed) stands for Colab's Python; its pre-installed
packages (torch among them, but not the grader) are this test's own, put on its path by a .pth file, and
a stand-in `google.colab` package is all that tells it is Colab. The release is served from a file://
URL or a plain path. Run All of a solved notebook that reads ../data/ (03_memory) must install the grader
from that release, pass every check, and run on the venv's pre-installed torch.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest
import torch
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from grader import registry
from grader.course import specs
from grader.authoring import colab, release, student
from grader.autograde import tamper
from tests.test_release import answered_in_release

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "03_memory"  # the one chapter that reads ../data/ (data/tokens.bin)
MARK = "@@COLAB@@"


def env_without_repo() -> dict[str, str]:
    """This process's environment with nothing of the repo or of its venv on Python's path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


class Colab:
    """A fresh venv standing for Colab's Python, and the release built for `url`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.zip = root / "build" / "student.zip"
        self.url = self.zip.as_uri()
        assert release.main(["--out", str(root / "build" / "student"), "--course-url", self.url]) == 0
        venv = root / "colab-python"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        self.python = venv / "bin" / "python"
        self.site = Path(self.ask("import site; print(site.getsitepackages()[0])").strip())
        # Colab's pre-installed packages: this test's own, on the path (their .pth files, the repo's editable
        # grader among them, are not processed from there: the grader is not importable).
        mine = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
        (self.site / "colab-preinstalled.pth").write_text("".join(f"{p}\n" for p in mine))
        stand_in = self.site / "google" / "colab"  # `google` stays a namespace package, as in Colab
        stand_in.mkdir(parents=True)
        (stand_in / "__init__.py").write_text('"""Stand-in for Colab\'s google.colab: its presence is the test."""\n')
        self.kernels = root / "kernels"
        (self.kernels / "colab").mkdir(parents=True)
        (self.kernels / "colab" / "kernel.json").write_text(json.dumps(
            {"argv": [str(self.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
             "display_name": "Colab stand-in", "language": "python"}))

    def ask(self, code: str, cwd: Path | None = None) -> str:
        """Run `code` in the Colab stand-in's Python; its stdout."""
        done = subprocess.run([str(self.python), "-c", code], cwd=cwd or self.root, env=env_without_repo(),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def run_all(self, nb: nbformat.NotebookNode, cwd: Path) -> nbformat.NotebookNode:
        """Run every cell of `nb` in a kernel of the stand-in's Python started in `cwd`, as Colab's Run All."""
        km = KernelManager(kernel_name="colab", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(self.kernels)]),
                           transport="ipc", ip=str(self.root / "kernel"))  # private sockets, as selfcheck's
        client = NotebookClient(nb, km=km, timeout=300, allow_errors=True, record_timing=False,
                                resources={"metadata": {"path": str(cwd)}})
        try:
            client.execute(env=env_without_repo())
        finally:  # nbclient ends only a kernel it made itself: this one is ours to end
            km.shutdown_kernel(now=True)
        return nb


@pytest.fixture(scope="module")
def colab_env(tmp_path_factory) -> Colab:
    return Colab(tmp_path_factory.mktemp("colab"))


# Colab's torch, found, not imported (importing torch costs seconds); its version as torch.__version__ says it, with
# the local part (+cu130) that the package's metadata leaves out for PyPI's CUDA builds.
FIND_TORCH = r"""
import importlib.util, json, os, re
origin = importlib.util.find_spec("torch").origin
text = open(os.path.join(os.path.dirname(origin), "version.py"), encoding="utf-8").read()
version = re.search(r"__version__\s*(?::\s*str\s*)?=\s*['\"]([^'\"]+)", text).group(1)
print(json.dumps({"torch": origin, "version": version, "grader": importlib.util.find_spec("grader") is not None}))
"""


def test_run_all_in_colab_installs_the_grader_from_the_release_passes_and_keeps_colabs_torch(colab_env, tmp_path):
    before = json.loads(colab_env.ask(FIND_TORCH, cwd=tmp_path))
    assert not before["grader"]  # Colab has no grader: the set-up cell must bring it
    site_before = sorted(p.name for p in colab_env.site.iterdir())
    content = tmp_path / "content"  # Colab's working folder; the notebook is opened from elsewhere (GitHub)
    content.mkdir()
    release_nb = colab_env.root / "build" / "student" / "notebooks" / f"{CHAPTER}.ipynb"
    nb = answered_in_release(release_nb, ROOT / "solutions" / f"{CHAPTER}.ipynb")
    assert nb.cells[0].id == colab.CELL_ID
    nb.cells.append(nbformat.v4.new_code_cell(
        "import json as _json, os as _os, sys as _sys, torch as _torch, grader as _grader\n"
        f"print({MARK!r} + _json.dumps({{'torch': _torch.__file__, 'version': _torch.__version__,"
        " 'grader': _grader.__file__, 'cwd': _os.getcwd(), 'python': _sys.executable,"
        f" 'results': [r.to_dict() for r in _grader.run_namespace(globals(), chapter='memory', hidden=False)]}}))"))
    colab_env.run_all(nb, content)

    errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(nb.cells) for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors[:3]
    course = content / colab.TOP_FOLDER
    said = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert said == f"Colab: the course's grader and data in {course}; Colab's own torch {before['version']}\n"
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    ran = json.loads(text.split(MARK, 1)[1])
    # The grader came from the release at the URL; the torch that ran is the one Colab had (catches a
    # setup that pip-installs the release with its pinned torch, or runs the repo's own grader).
    assert Path(ran["grader"]) == course / "grader" / "__init__.py"
    assert (ran["torch"], ran["version"]) == (before["torch"], before["version"])
    assert Path(ran["python"]) == colab_env.python
    assert Path(ran["cwd"]) == course / "notebooks" and (course / "data" / "tokens.bin").is_file()
    results = ran["results"]
    assert [r["exercise"] for r in results] == [e.id for e in registry.load().of("memory")]
    assert all(r["status"] == "passed" for r in results), [(r["exercise"], r["message"]) for r in results]
    shown = [o["data"]["text/plain"] for c in nb.cells if c.cell_type == "code" and c.source.startswith("grader.check(")
             for o in c.outputs if "data" in o]  # what the student saw under each exercise
    assert len(shown) == len(results) and all("✓" in s and "✗" not in s for s in shown), shown
    # Nothing installed into Colab's Python but the one .pth that keeps the grader on its path.
    assert sorted(p.name for p in colab_env.site.iterdir()) == sorted(site_before + ["resource-accounting.pth"])
    assert (colab_env.site / "resource-accounting.pth").read_text() == f"{course}\n"
    # ... for good: a new process (after Restart, or one the grader starts) finds it from anywhere.
    found = colab_env.ask("import importlib.util; print(importlib.util.find_spec('grader').origin)", cwd=tmp_path)
    assert Path(found.strip()) == course / "grader" / "__init__.py"


def test_the_cell_takes_a_path_in_the_colab_session_and_a_second_run_downloads_nothing(colab_env, tmp_path):
    """A release built with a plain path (`student.zip` uploaded to /content); Run All twice in one kernel."""
    content = tmp_path / "content"
    content.mkdir()
    shutil.copy(colab_env.zip, content / "student.zip")
    source = colab.setup_cell("student.zip").source
    said = colab_env.ask(f"import os\nexec({source!r})\n(os.getcwd() and os.remove('../../student.zip'))\n"
                         f"exec({source!r})\nprint(os.getcwd())", cwd=content)
    course = content / colab.TOP_FOLDER
    line = f"Colab: the course's grader and data in {course}; Colab's own torch {torch.__version__}"
    assert said.splitlines() == [line, line, str(course / "notebooks")]  # the zip was gone for the second run
    assert sorted(p.name for p in content.iterdir()) == [colab.TOP_FOLDER]  # no half-unpacked folder left


def test_the_cell_does_nothing_outside_colab(tmp_path):
    """Here (no google.colab): no output, no download, no folder change, nothing written."""
    source = colab.setup_cell((tmp_path / "missing.zip").as_uri()).source
    done = subprocess.run([sys.executable, "-c", f"import os, sys\ncwd, path = os.getcwd(), list(sys.path)\nexec({source!r})\n"
                           "assert os.getcwd() == cwd and sys.path == path and 'grader' not in sys.modules"],
                          cwd=tmp_path, env=env_without_repo(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_cell_is_not_tampering_and_holds_no_marker():
    """Grading scans every cell: the set-up cell (sys.path, os.chdir, subprocess) must not look like tampering."""
    cell = colab.setup_cell("https://github.com/org/course/releases/download/v1/student.zip")
    assert tamper.scan([cell.source], [1]) == []
    compile(cell.source, "<colab-setup>", "exec")


def test_without_a_url_the_build_is_unchanged_and_with_one_only_the_first_cell_is_added():
    path = ROOT / "solutions" / "01_tensors.ipynb"
    plain = nbformat.reads(student.render(path), as_version=4)
    assert student.render(path) == student.render(path, None) == (ROOT / "notebooks" / path.name).read_text()
    added = nbformat.reads(student.render(path, "https://example.org/course.zip"), as_version=4)
    assert added.cells[0].id == colab.CELL_ID and added.cells[1:] == plain.cells
    with pytest.raises(ValueError):
        colab.setup_cell("  ")


@pytest.mark.parametrize("url, link", [
    ("https://github.com/org/course/releases/download/v1.2/student.zip",
     "https://colab.research.google.com/github/org/course/blob/v1.2/notebooks/03_memory.ipynb"),
    ("https://github.com/org/course/raw/main/student.zip",
     "https://colab.research.google.com/github/org/course/blob/main/notebooks/03_memory.ipynb"),
    ("https://raw.githubusercontent.com/org/course/v2/fall/student.zip",
     "https://colab.research.google.com/github/org/course/blob/v2/fall/notebooks/03_memory.ipynb"),
    ("https://example.org/course/student.zip", None),  # Colab opens notebooks by address from GitHub only
    ("file:///srv/student.zip", None),
    ("student.zip", None),
])
def test_colab_badges_only_where_colab_can_open_the_notebook(url, link):
    assert colab.colab_link(url, "03_memory.ipynb") == link
    section = colab.readme_section(url, ["03_memory.ipynb"])
    assert (link is not None) == ("colab-badge.svg" in section)
    assert (link or "File → Upload notebook") in section


def test_without_a_url_the_readme_promises_no_address(tmp_path):
    section = colab.readme_section(None, ["03_memory.ipynb"])
    assert "://" not in section and "colab-badge" not in section and "no Colab set-up cell" in section
    readme = (ROOT / "release" / "README.md").read_text(encoding="utf-8")
    assert readme.count(release.README_COLAB) == 1  # where the route goes


@pytest.mark.parametrize("name, sms", [("Tesla T4", 40), ("NVIDIA L4", 58), ("NVIDIA A100-SXM4-40GB", 108),
                                       ("NVIDIA A100-SXM4-80GB", 108)])
def test_colabs_gpus_have_their_peaks(name, sms):
    """The names and SM counts torch reports on Colab's T4, L4 and A100 runtimes resolve to a datasheet peak."""
    for dtype in (torch.float32, torch.float16):
        assert specs.peak_flops(name, dtype, sm_count=sms), (name, dtype)


def test_colabs_python_is_allowed():
    """Colab runs Python 3.12 (2025-26): requires-python must admit it."""
    from packaging.specifiers import SpecifierSet

    text = (ROOT / "pyproject.toml").read_text()
    spec = SpecifierSet(text.split("requires-python = ", 1)[1].splitlines()[0].strip('"'))
    assert "3.12" in spec and "3.13" in spec
