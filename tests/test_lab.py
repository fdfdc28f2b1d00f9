"""The student's path on any platform.

`make lab` (which only calls `python -m grader lab`) serves JupyterLab on notebooks/ offering the course kernel
alone (checked over its REST API). Without what only POSIX has (SIGALRM and setitimer, `resource`, `fork`,
/proc, /dev/shm, mincore), every exercise's public checks still pass on the solutions, in this process and in
a notebook run end to end. The release's own set-up without make is tested in tests/test_release.py.
"""
from __future__ import annotations

import ast
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

import grader
from grader import lab, registry, selfcheck

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "course-test-token"
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, r.read()


def serve(cmd: list[str], port: int, cwd: Path, env: dict[str, str] | None = None, wait: float = 120) -> dict:
    """Start `cmd` (a JupyterLab launcher), return /api/kernelspecs once it answers, and stop it again."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.time() + wait
        while time.time() < deadline and proc.poll() is None:
            try:
                specs = json.loads(get(port, "/api/kernelspecs")[1])
                specs["contents"] = json.loads(get(port, "/api/contents")[1])
                specs["lab_page"] = get(port, "/lab")
                return specs
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"JupyterLab did not answer: {proc.stdout.read1().decode() if proc.poll() is not None else ''}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def assert_course_kernel_alone(specs: dict, notebooks: Path) -> None:
    """The launcher offers one kernel, the course's (catches ipykernel's own "Python 3" offered beside it)."""
    assert set(specs["kernelspecs"]) == {lab.KERNEL}, sorted(specs["kernelspecs"])
    assert specs["default"] == lab.KERNEL
    assert specs["kernelspecs"][lab.KERNEL]["spec"]["display_name"] == lab.DISPLAY_NAME
    assert {c["name"] for c in specs["contents"]["content"]} >= {p.name for p in notebooks.glob("*.ipynb")}
    status, page = specs["lab_page"]
    assert status == 200 and b"JupyterLab" in page


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_serves_notebooks_with_the_course_kernel_alone():
    port = free_port()
    specs = serve(["make", "-s", "lab", f"LAB_PORT={port}",
                   f"LAB_FLAGS=--no-browser --IdentityProvider.token={TOKEN}"], port, ROOT)
    assert_course_kernel_alone(specs, ROOT / "notebooks")


def test_lab_command_offers_one_kernel_and_needs_no_shell():
    cmd = lab.lab_command(ROOT, "127.0.0.1", 8888, browser=False, extra=["--x"])
    assert cmd[:4] == [sys.executable, "-m", "jupyter", "lab"] and cmd[-1] == "--x"
    assert f"--KernelSpecManager.allowed_kernelspecs={lab.KERNEL}" in cmd
    assert f"--MultiKernelManager.default_kernel_name={lab.KERNEL}" in cmd
    assert lab.venv_python(Path("v")).parts[-2:] in (("bin", "python"), ("Scripts", "python.exe"))


def test_the_course_lab_says_no_to_jupyters_news_question(tmp_path):
    """Catches the "Would you like to get notified about official Jupyter news?" pop-up over a new student's
    cells: the course's defaults answer it, under the name and values this JupyterLab's schema declares (a
    renamed setting would be ignored silently). tests/test_browser.py sees no toast in a real lab."""
    path = lab.quiet_lab(tmp_path)
    assert path == tmp_path / "share" / "jupyter" / "lab" / "settings" / "overrides.d" / f"{lab.KERNEL}.json"
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written == lab.LAB_DEFAULTS
    schemas = Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"
    for name, values in written.items():
        package, plugin = name.rsplit(":", 1)
        schema = json.loads((schemas / package / f"{plugin}.json").read_text(encoding="utf-8"))["properties"]
        assert values["fetchNews"] in [o["const"] for o in schema["fetchNews"]["oneOf"]] and values["fetchNews"] != "none"
        assert schema["checkForUpdates"]["type"] == "boolean"
    from jupyterlab_server.settings_utils import _get_overrides

    overrides, error = _get_overrides(str(tmp_path / "share" / "jupyter" / "lab" / "settings"))
    assert not error and overrides[name]["fetchNews"] == "false"


def test_the_setup_fingerprint_follows_the_requirements(tmp_path):
    """A changed requirements.txt reinstalls (catches a stamp that only says "done once")."""
    (tmp_path / "requirements.txt").write_text("torch==2.13.0\n")
    first = lab.fingerprint(tmp_path)
    assert lab.fingerprint(tmp_path) == first
    (tmp_path / "requirements.txt").write_text("torch==2.13.0\nnumpy\n")
    assert lab.fingerprint(tmp_path) != first


def test_a_bare_python_gets_help_not_a_traceback(tmp_path):
    """`python -m grader lab --help` imports only the standard library first: a Python without torch can
    run it (catches `import grader` pulling torch in before the venv exists)."""
    code = ("import sys; sys.modules['torch'] = None; sys.modules['numpy'] = None; sys.argv = ['grader', 'lab', "
            "'--help']\nimport runpy\ntry:\n    runpy.run_module('grader', run_name='__main__')\n"
            "except SystemExit as e:\n    sys.exit(e.code)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--no-browser" in done.stdout and "--setup-only" in done.stdout


def test_a_bare_python_says_why_the_course_library_is_missing():
    """`import grader` without torch imports, and `grader.bench` then names what is missing: catches the course
    library's import in grader/__init__.py leaving the try that lets a bare Python run `python -m grader lab`."""
    code = ("import sys; sys.modules['torch'] = None; sys.modules['numpy'] = None\nimport grader\n"
            "try:\n    grader.bench\nexcept ImportError as e:\n    print(e)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "grader.bench needs " in done.stdout and "python -m grader lab" in done.stdout, done.stdout


# ---------------------------------------------------------------- without what only POSIX has

def remove_posix(patch) -> list[str]:
    """Take from this process what Windows lacks, through a pytest MonkeyPatch `patch`; return what was taken.

    SIGALRM and setitimer (the runner's time limit), `resource`, `fork`, and the files /proc, /sys and /dev/shm
    (reading or finding them fails as on Windows: no /proc/self/smaps, no /proc/cpuinfo), and mincore."""
    import builtins
    import io
    import os
    import pathlib
    import signal
    import sys

    taken = []
    for module, names in ((signal, ("SIGALRM", "alarm", "setitimer", "getitimer", "ITIMER_REAL")),
                          (os, ("fork", "forkpty"))):
        for name in names:
            if hasattr(module, name):
                patch.delattr(module, name)
                taken.append(f"{module.__name__}.{name}")
    patch.setitem(sys.modules, "resource", None)  # `import resource` raises ImportError
    taken.append("resource")
    posix_only = ("/proc", "/sys", "/dev/shm")

    def gone(path) -> bool:
        try:
            text = os.fspath(path)
        except TypeError:
            return False
        return isinstance(text, str) and any(text == p or text.startswith(p + "/") for p in posix_only)

    real_open, real_exists, real_is_dir = builtins.open, pathlib.Path.exists, pathlib.Path.is_dir

    def open_(file, *args, **kwargs):
        if gone(file):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(file))
        return real_open(file, *args, **kwargs)

    patch.setattr(builtins, "open", open_)
    patch.setattr(io, "open", open_)
    patch.setattr(pathlib.Path, "exists", lambda self, *a, **k: False if gone(self) else real_exists(self, *a, **k))
    patch.setattr(pathlib.Path, "is_dir", lambda self, *a, **k: False if gone(self) else real_is_dir(self, *a, **k))
    taken += list(posix_only)
    from grader.course import pagecache
    from grader.scenarios import memory

    for probe in (memory, pagecache):  # what their import finds on Windows: no mincore in the C library
        patch.setattr(probe, "_mincore", None)
    taken.append("mincore")
    return taken


def solution_namespace(path: Path, folder: Path) -> dict:
    """The solution's imports, functions and classes (no demonstrations, no measurements), as a notebook
    defines them; `%%writefile` cells are written into `folder` (cwd) for the processes that import them."""
    namespace: dict = {"__name__": "__main__"}
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        if cell.source.startswith("%%writefile "):
            head, _, body = cell.source.partition("\n")
            (folder / head.split()[1]).write_text(body + "\n", encoding="utf-8")
            continue
        if cell.source.lstrip().startswith("%"):
            continue
        tree = ast.parse(cell.source)
        exec(compile(ast.Module([s for s in tree.body if isinstance(s, keep)], []), str(path), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_public_checks_pass_on_the_solutions_without_posix(path, monkeypatch, tmp_path):
    """The checks' time limit, the memmap check's page counts and the rank processes each have a fallback;
    without one, a check raises here (AttributeError on signal.setitimer, a fork that is not there...)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace = solution_namespace(path, tmp_path)
    taken = remove_posix(monkeypatch)
    import signal as sig

    assert "signal.setitimer" in taken and not hasattr(sig, "setitimer") and not Path("/dev/shm").is_dir()
    chapter = path.stem.split("_", 1)[1]
    results = grader.run_namespace(namespace, chapter=chapter, hidden=False)
    assert [r.exercise for r in results] == [e.id for e in registry.load().of(chapter)]
    failed = [(r.exercise, r.status, [c.message for c in r.checks if c.status != "passed"][:2])
              for r in results if r.status != "passed"]
    assert not failed, failed


PRELUDE = """\
import os as _os, sys as _sys
_os.chdir({solutions!r})  # where the notebook runs: it reads ../data/
_sys.path.insert(0, {tests!r})
from _pytest.monkeypatch import MonkeyPatch as _MonkeyPatch
from test_lab import remove_posix as _remove_posix
print("without:", ", ".join(_remove_posix(_MonkeyPatch())))
"""


@pytest.mark.parametrize("stem", ["08_checkpointing"])
def test_notebooks_run_to_the_end_without_posix(stem, tmp_path):
    """08 renames across /dev/shm and times checks: without POSIX it runs to its last cell in a kernel and
    every public check passes (as `python -m grader test` runs it). One notebook: the in-process test above
    covers every chapter's checks, and a kernel costs half a minute."""
    nb = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PRELUDE.format(solutions=str(ROOT / "solutions"),
                                                                tests=str(ROOT / "tests"))))
    copy = tmp_path / f"{stem}.ipynb"
    nbformat.write(nb, copy)
    result = selfcheck.run_notebook(copy, timeout=300, save=tmp_path / "ran")
    assert result.problem == "" and result.cell_errors == [], (result.problem, result.cell_errors)
    ran = nbformat.read(tmp_path / "ran" / copy.name, as_version=4)
    said = "".join(o.get("text", "") for o in ran.cells[0].outputs)
    assert "signal.setitimer" in said and "/dev/shm" in said and "mincore" in said, said
    assert result.exercises and all(e["status"] == "passed" for e in result.exercises), \
        [(e["exercise"], e["message"]) for e in result.exercises]
    if stem == "08_checkpointing":  # the cell that needs /dev/shm says in one line what it skipped
        shown = "".join(o.get("text", "") for c in ran.cells if c.cell_type == "code" for o in c.outputs)
        assert "skipped: this machine has no second writable filesystem at /dev/shm" in shown


def test_remove_posix_can_run_in_a_kernel():
    """The prelude imports remove_posix by name from this file: it must use nothing of the test's globals."""
    names = {n.id for n in ast.walk(ast.parse(inspect.getsource(remove_posix))) if isinstance(n, ast.Name)}
    assert not names & {"ROOT", "grader", "lab", "selfcheck", "registry", "nbformat"}


def test_notebooks_run_over_tcp_where_there_are_no_unix_sockets(monkeypatch, tmp_path):
    """`python -m grader test` on Windows: zmq has no ipc transport there, so the kernel talks over localhost TCP
    (catches a client that always asks for Unix sockets)."""
    monkeypatch.setattr(selfcheck, "unix_sockets", lambda: False)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    client = selfcheck.client_for(nb, tmp_path, timeout=60, allow_errors=False)
    assert client.km.transport == "tcp"
    client.execute()
    assert nb.cells[0].outputs[0]["text"] == "42\n"
