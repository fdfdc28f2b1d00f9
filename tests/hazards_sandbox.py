"""Dishonest notebooks that try to reach outside the student's world while graded (tests/test_sandbox.py).

Each is the chapter 01 solution with two exercises left unwritten (`element_offset`, `broadcast_shape`), so
its four honest exercises must still pass, plus one cell that tries to get the two others (or to do harm)
from outside: the solutions, the hidden checks, a classmate's notebook, the instructor's files and
environment, the network, a process that outlives the kernel. Each cheat is wrapped in `try` so that it
fails quietly, as a real one would. A cheat that *reaches* its target turns that into a grade we can see
(the two exercises written from what it found), and its target is checked directly by the test as well.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from tests import hazards

BLANKED = ("element_offset", "broadcast_shape")
HONEST = tuple(e for e in hazards.EXERCISES if e not in BLANKED)


@dataclass(frozen=True)
class Targets:
    """What the cheats aim at; the test checks each of these, not only the grades."""
    repo: Path          # the course repository (solutions/, grader/hidden/)
    classmate: Path     # another student's solved notebook in the same class
    home: Path          # the grading user's home folder (its .bashrc)
    port: int           # a TCP server on 127.0.0.1 started by the test
    secret: str         # a variable in the grading process's environment
    token: str          # names the files and processes the cheats create


def blank(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    for name in BLANKED:
        args = "x, index" if name == "element_offset" else "a, b"
        hazards.replace_def(nb, name, f"def {name}({args}):\n    raise NotImplementedError\n")
    return nb


# Run the code cells of a notebook (text) that define the blanked exercises: what every copying cheat does.
ADOPT = '''
def _adopt(text):
    import json
    for cell in json.loads(text)["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and ("def element_offset" in src or "def broadcast_shape" in src):
            exec(src, globals())
'''


def solution_hunter(t: Targets, walk: bool = True) -> str:
    """Look for solutions/01_tensors.ipynb above the grader package and the working folder, and where it is
    (`walk`: and anywhere on the file system the kernel can list)."""
    code = ADOPT + f'''
import os, pathlib, subprocess, grader
_places = [*pathlib.Path(grader.__file__).resolve().parents, *pathlib.Path.cwd().resolve().parents,
           pathlib.Path({str(t.repo)!r})]
for _p in _places:
    try:
        _adopt((_p / "solutions" / "01_tensors.ipynb").read_text())
        break
    except Exception:
        pass
try:  # the same through another program
    _adopt(subprocess.run(["cat", {str(t.repo / "solutions" / "01_tensors.ipynb")!r}], capture_output=True,
                          text=True, timeout=10).stdout)
except Exception:
    pass
'''
    return code + WALK if walk else code


WALK = '''
try:  # and by walking the whole file system
    for _root, _dirs, _files in os.walk("/"):
        _dirs[:] = [d for d in _dirs if d not in ("proc", "sys", "dev")]
        if "01_tensors.ipynb" in _files and _root.endswith("solutions"):
            _adopt(open(os.path.join(_root, "01_tensors.ipynb")).read())
            break
except Exception:
    pass
'''


def hidden_importer(t: Targets) -> str:
    """Import the hidden checks (and another chapter's hidden reference) every way a cheat might."""
    return f'''
import importlib, importlib.util, sys
def _reached():
    from grader.exercises.tensors import _broadcast_shapes
    global broadcast_shape, element_offset
    broadcast_shape = lambda a, b: tuple(_broadcast_shapes(a, b))
    element_offset = lambda x, index: x.storage_offset() + sum(i * s for i, s in zip(index, x.stride()))
try:
    import grader.hidden.tensors
    _reached()
except Exception:
    pass
try:
    from grader.hidden.ddp import reference_ring
    _reached()
except Exception:
    pass
try:
    _spec = importlib.util.spec_from_file_location("_h", {str(t.repo / "grader" / "hidden" / "tensors.py")!r})
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
    _reached()
except Exception:
    pass
try:
    sys.path.insert(0, {str(t.repo)!r})
    import grader.hidden
    _reached()
except Exception:
    pass
'''


def grader_reloader(t: Targets) -> str:
    """Forget the grader it was given and import it again from the course repository, hidden checks included."""
    return hidden_importer(t).replace("    import grader.hidden\n", """    for _m in [m for m in sys.modules if m == "grader" or m.startswith("grader.")]:
        sys.modules.pop(_m)
    importlib.invalidate_caches()
    import grader.hidden
""")


def classmate_copier(t: Targets) -> str:
    """Copy a classmate's notebook (by its path, and by searching around the working folder), then spoil it."""
    return ADOPT + f'''
import glob, os
for _path in [{str(t.classmate)!r}, *glob.glob("../../**/*.ipynb", recursive=True),
              *glob.glob("/tmp/**/*.ipynb", recursive=True)]:
    try:
        if os.path.abspath(_path) != os.path.abspath("01_tensors.ipynb"):
            _adopt(open(_path).read())
    except Exception:
        pass
try:
    with open({str(t.classmate)!r}, "a") as _f:
        _f.write("spoiled")
except Exception:
    pass
'''


def home_writer(t: Targets) -> str:
    """Write the grading user's ~/.bashrc and files in the course repository."""
    return f'''
import os
for _path in [os.path.expanduser("~/.bashrc"), {str(t.home / ".bashrc")!r},
              {str(t.repo / f"PWNED-{t.token}")!r}, {str(t.repo / "grader" / "hidden" / f"pwned_{t.token}.py")!r}]:
    try:
        with open(_path, "a") as _f:
            _f.write("echo {t.token}\\n")
    except Exception:
        pass
'''


def network_caller(t: Targets) -> str:
    """Open a TCP connection to the test's server on 127.0.0.1 (and to the outside world)."""
    return f'''
import socket
for _address in [("127.0.0.1", {t.port}), ("localhost", {t.port})]:
    try:
        with socket.create_connection(_address, timeout=2) as _s:
            _s.sendall(b"{t.token}")
    except Exception:
        pass
'''


def daemon_forker(t: Targets) -> str:
    """Start processes meant to outlive the kernel: a new session, and a double fork."""
    return f'''
import os, subprocess, sys
try:
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{t.token}"], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
except Exception:
    pass
try:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", "{t.token}-forked"])
        os._exit(0)
    os.wait()
except Exception:
    pass
'''


def secret_reader(t: Targets) -> str:
    """Read the grading process's environment; finding the secret spoils an honest answer (a visible signal)."""
    return f'''
import os
_found = any({t.secret!r} in v for v in os.environ.values())
for _pid in os.listdir("/proc"):
    try:
        _found = _found or {t.secret!r}.encode() in open(f"/proc/{{_pid}}/environ", "rb").read()
    except Exception:
        pass
if _found:
    def same_storage(a, b):
        return True
'''


def results_forger(results: Path, token: str) -> str:
    """Write Gradescope's results.json with full marks, now and from a process that waits for the grader to finish."""
    forged = '{"score": 1000, "output": "' + token + '", "tests": []}'
    return f'''
import os, subprocess, sys
_forged = {forged!r}
try:
    with open({str(results)!r}, "w") as _f:
        _f.write(_forged)
except Exception:
    pass
try:
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(8); open({str(results)!r}, 'w').write("
                      + repr(_forged) + ")", {token!r}], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
except Exception:
    pass
'''


@contextlib.contextmanager
def python_reachable_by(user: str):
    """Let an unprivileged `user` run the course's interpreter: traverse-only permission on the folders above it
    it cannot enter (this machine's Python lives under /root, mode 0700), taken away again after."""
    uid = pwd.getpwnam(user).pw_uid
    opened = [p for p in reversed(Path(os.path.realpath(sys.executable)).parents)
              if p.stat().st_uid != uid and not p.stat().st_mode & stat.S_IXOTH]
    for folder in opened:
        folder.chmod(folder.stat().st_mode | stat.S_IXOTH)
    try:
        yield
    finally:
        for folder in opened:
            folder.chmod(folder.stat().st_mode & ~stat.S_IXOTH)


# What a cheat must score when it reaches nothing: its honest exercises pass, the two it did not write are not written.
EXPECTED = {**{e: "passed" for e in HONEST}, **{e: "not_implemented" for e in BLANKED}}
# Replacing the grader's modules is detected: every exercise is `tampered` (its message still says what the
# checks found on their own: nothing for the two blank exercises).
TAMPERED = {e: "tampered" for e in hazards.EXERCISES}
CHEATS = {
    "solution hunter": (solution_hunter, EXPECTED), "hidden importer": (hidden_importer, EXPECTED),
    "grader reloader": (grader_reloader, TAMPERED), "classmate copier": (classmate_copier, EXPECTED),
    "home writer": (home_writer, EXPECTED), "network caller": (network_caller, EXPECTED),
    "daemon forker": (daemon_forker, EXPECTED), "secret reader": (secret_reader, EXPECTED),
}


def build(root: Path, t: Targets) -> Path:
    """A class: one student per cheat, and the classmate (solved, at `t.classmate` under `root`) they copy."""
    hazards.write(hazards.exercises_only(), t.classmate)
    for student, (cheat, _) in CHEATS.items():
        nb = blank(hazards.exercises_only())
        nb.cells.append(nbformat.v4.new_code_cell(cheat(t)))
        hazards.write(nb, root / student / "01_tensors.ipynb")
    return root
