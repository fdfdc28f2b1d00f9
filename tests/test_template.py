"""Kernels forked from the kernel template (grader/autograde/template.py) are as confined as kernels started
through launch.py: the same sandbox, namespaces, user, syscall filter and limits, before any notebook code runs;
and where the template cannot serve, kernels start through launch.py and grading goes on.

Run as root with bubblewrap (as CI, Gradescope and containers grade); each test skips, saying why, elsewhere.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import psutil
import pytest

from grader.autograde import sandbox, template
from grader.autograde.kernel import Limits, NotebookKernel
from grader.autograde.launcher import Launcher

ROOT = Path(__file__).resolve().parents[1]
NAMESPACES = ("mnt", "pid", "net", "ipc", "uts", "cgroup", "user")

# What a kernel sees of itself and of the machine, written to its exchange folder (the one the grader reads).
PROBE = r"""
import json, os, socket
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1).close()
    ssh = "reached"
except OSError as e:
    ssh = type(e).__name__
try:
    os.mkdir("/usr/escape")
    usr = "written"
except OSError as e:
    usr = type(e).__name__
out = {"uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid(), "cwd": os.getcwd(),
       "seccomp": status["Seccomp"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
       "cap_eff": status["CapEff"].strip(), "cap_prm": status["CapPrm"].strip(),
       "init": open("/proc/1/cmdline", "rb").read().split(b"\0")[0].decode(),
       "repository": os.path.exists(%(repo)r), "interfaces": sorted(n for _, n in socket.if_nameindex()),
       "ssh": ssh, "usr": usr, "hash": hash("seed"), "threads": os.environ.get("OMP_NUM_THREADS"),
       "torch_threads": __import__("torch").get_num_threads(),
       "env_token": os.environ.get("GRADER_NOTEBOOK"), "parent_pid": os.environ.get("JPY_PARENT_PID"),
       "limits": [__import__("resource").getrlimit(r) for r in (6, 1, 9)],  # NPROC, FSIZE, AS
       "files": sorted(os.listdir(".")), "nice": os.nice(0), "dynamo": "torch._dynamo" in __import__("sys").modules}
import io, matplotlib, matplotlib.pyplot as plt
from matplotlib import font_manager
png = io.BytesIO()
plt.figure(figsize=(2, 1)).savefig(png, format="png")
home = os.environ["HOME"] + "/"
out.update(mpl_folders=[d.startswith(home) for d in (matplotlib.get_configdir(), matplotlib.get_cachedir())],
           mpl_backend=matplotlib.get_backend(), mpl_settings=repr(sorted(matplotlib.rcParams.items())),
           mpl_fonts=len(font_manager.fontManager.ttflist), mpl_png=png.getvalue()[:8].hex())
open("../grader/probe.json", "w").write(json.dumps(out))
"""


def root_with_bubblewrap() -> None:
    if os.geteuid() != 0:
        pytest.skip("the template forks kernels only for a grader running as root")
    problem = sandbox.bwrap_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture
def isolation(tmp_path):
    root_with_bubblewrap()
    return sandbox.choose("on", sandbox.public_tree(tmp_path))


@contextlib.contextmanager
def attached(isolation, dynamo: bool = True):
    """The run's template started for `isolation` (as grade_cohort starts it) and this process attached to it (as
    a grading worker is), done with its imports; ended on leaving."""
    env = Launcher(Limits(), isolation, Path("/"), Path("/"), "").env()
    scratch = tempfile.mkdtemp(prefix="grader-", dir="/tmp")
    with template.serving(isolation, env, scratch, wanted=True, dynamo=dynamo) as path:
        template.TEMPLATE.attach(path, isolation, env)
        assert template.TEMPLATE.ready(wait=120)
        yield template.TEMPLATE
        template.TEMPLATE.give_up()
    os.rmdir(scratch)


@pytest.fixture
def forking(isolation):
    """attached(isolation) for the test."""
    with attached(isolation) as served:
        yield served


def templates() -> list[psutil.Process]:
    """This process's template processes (children of the grading process, which this test process is)."""
    found = []
    for p in psutil.Process().children():
        try:
            if "template_main.py" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:  # a zombie of an earlier kernel's sandbox
            pass
    return found


_TOPS: list[Path] = []  # the folders notebook_top made under /tmp, removed after the module's last test


@pytest.fixture(scope="module", autouse=True)
def _remove_tops():
    yield
    for top in _TOPS:
        shutil.rmtree(top, ignore_errors=True)


def notebook_top() -> Path:
    """A folder under /tmp (short: a kernel's socket paths must fit) that a kernel user can pass through."""
    top = Path(tempfile.mkdtemp(prefix="nb-", dir="/tmp"))
    top.chmod(0o711)
    _TOPS.append(top)
    return top


def probe(isolation, ahead: bool = False, fork: bool = True) -> tuple[dict, NotebookKernel, dict[str, int],
                                                                       dict[str, int]]:
    """Start a kernel for a notebook folder holding one file, run PROBE in it; what it saw, the kernel, and the
    namespaces (as seen from here) of the kernel and of the sandbox (bubblewrap's first process)."""
    top = notebook_top()
    folder = top / "run"
    (folder / "notebooks").mkdir(parents=True)
    (folder / "notebooks" / "data.txt").write_text("the notebook's file\n")
    kernel = NotebookKernel([], folder / "notebooks", Limits(), isolation=isolation, folder=folder)
    kernel.launcher.fork = fork
    try:
        kernel.launch(ahead=ahead)
        kernel.go()
        kernel.connect()
        outcome = kernel.execute(PROBE % {"repo": str(ROOT / "solutions")}, 60)
        assert outcome.status == "ok", outcome
        first = psutil.Process(kernel.processes.launched().pid).children()[0]  # bubblewrap's first process
        spaces = {pid: {name: os.stat(f"/proc/{pid}/ns/{name}").st_ino for name in NAMESPACES}
                  for pid in (kernel.kernel_pid(), first.pid)}
        seen = json.loads((folder / "grader" / "probe.json").read_text())
        door = kernel.processes._door  # bubblewrap's init's child, which holds a forked kernel's sandbox open
        seen["door_uid"] = psutil.Process(door).uids().real if door is not None else None
        return seen, kernel, spaces[kernel.kernel_pid()], spaces[first.pid]
    finally:
        kernel.close()


def test_a_forked_kernel_is_confined_as_a_launched_one(isolation, forking):
    """Catches a forked kernel that misses a namespace, keeps root or a capability, skips the seccomp filter or a
    limit, sees this machine's files or network, or differs from a launched kernel in what a notebook sees (matplotlib
    included: imported by the template, with the template's folders remembered, it would look outside its home)."""
    launched, kernel, _, _ = probe(isolation, fork=False)
    assert not kernel.launcher.forked
    for ahead in (False, True):  # a notebook graded at once, and one started ahead of its notebook
        forked, kernel, spaces, sandbox_spaces = probe(isolation, ahead=ahead)
        assert kernel.launcher.forked
        assert forked["init"].endswith("bwrap") and forked["pid"] != 1
        assert spaces == sandbox_spaces  # every namespace is the sandbox's, none is this machine's (but user)
        mine = {name: os.stat(f"/proc/self/ns/{name}").st_ino for name in NAMESPACES}
        assert [n for n in NAMESPACES if spaces[n] == mine[n]] == ["user"]  # as root, bubblewrap makes no user ns
        for key in ("uid", "gid", "seccomp", "no_new_privs", "cap_eff", "cap_prm", "repository", "interfaces",
                    "ssh", "usr", "hash", "threads", "torch_threads", "parent_pid", "files", "nice", "mpl_folders", "mpl_backend",
                    "mpl_settings", "mpl_fonts", "mpl_png"):
            assert forked[key] == launched[key], (key, forked[key], launched[key])
        assert forked["uid"] == sandbox.HOST_UID_BASE + os.getpid()
        assert forked["seccomp"] == "2" and forked["no_new_privs"] == "1"
        assert int(forked["cap_eff"], 16) == 0 and int(forked["cap_prm"], 16) == 0
        assert forked["repository"] is False and forked["interfaces"] == ["lo"] and forked["ssh"] != "reached"
        assert forked["usr"] in ("OSError", "PermissionError") and forked["files"] == ["data.txt"]
        assert forked["parent_pid"] is None and forked["env_token"]
        assert forked["torch_threads"] == 1  # whatever the cores: a product's rounding depends on its threads
        # matplotlib, imported by the template: its folders are the kernel's own home, as a launched kernel's are
        assert forked["mpl_folders"] == [True, True] and forked["mpl_backend"] == "Agg" and forked["mpl_fonts"] > 0
        assert forked["mpl_png"] == b"\x89PNG\r\n\x1a\n".hex()
        assert forked["door_uid"] == 65534  # the door that holds the sandbox open keeps no rights while it waits
        assert forked["limits"][:2] == launched["limits"][:2]  # processes, file size
        assert forked["limits"][2][0] > 0  # the memory cap, from what the kernel had mapped at its start
        assert forked["dynamo"] is True  # imported by this template, for chapters whose kernels import it


def test_a_run_of_chapters_whose_kernels_need_no_dynamo_starts_a_template_without_it(isolation):
    """Catches a template that imports torch._dynamo for a run of chapter 01 or 10 alone (a CPU-second that no kernel
    of theirs uses), or leaves it out where another chapter's kernels need it (each would import it again)."""
    from grader.autograde.cohort import kernel_dynamo

    assert not kernel_dynamo({"01_tensors"}) and not kernel_dynamo({"01_tensors", "10_ddp"})
    assert kernel_dynamo({"01_tensors", "02_dtypes"}) and kernel_dynamo({"08_checkpointing"})
    assert kernel_dynamo({"11_a_chapter_not_measured"})  # a new chapter gets it until measured
    with attached(isolation, dynamo=False):
        forked, kernel, _, _ = probe(isolation)
        assert kernel.launcher.forked and forked["dynamo"] is False


# What a kernel holds of the grader once set up, and whether a `%%needs` cell of the notebook ran.
GRADER_SEEN = r"""
import json, sys
mods = {n: getattr(m, "__file__", None) for n, m in sys.modules.items() if n.split(".")[0] == "grader"}
open("../grader/seen.json", "w").write(json.dumps({"modules": mods, "ran": globals().get("RAN")}))
"""


@pytest.mark.parametrize("fork", [True, False])
def test_set_up_kernels_hold_the_public_grader_alone_and_run_needs_cells(isolation, forking, fork):
    """Catches a template that imports `grader` from anywhere but the public copy (the course's sources and their
    hidden checks in every kernel's memory), or imports it without `%%needs` then being registered in the kernel's
    shell (the template has no shell: the bridge's set-up registers it); a launched kernel is the same."""
    from grader.autograde.bridge import grading_kernel

    top = notebook_top()
    (top / "run" / "notebooks").mkdir(parents=True)
    cells = ["def twice(x):\n    return 2 * x\n", "%%needs twice\nRAN = twice(21)\n"]
    kernel = NotebookKernel(cells, top / "run" / "notebooks", Limits(), isolation=isolation, folder=top / "run")
    kernel.launcher.fork = fork
    kernel.launch(ahead=True)  # as a grading worker starts its next notebook's kernel
    with grading_kernel(cells, kernel.cwd, Limits(), isolation=isolation, ahead=kernel) as bridge:
        assert bridge.kernel.launcher.forked is fork
        assert bridge.kernel.execute(GRADER_SEEN, 60).status == "ok"
        seen = json.loads((top / "run" / "grader" / "seen.json").read_text())
    public = os.path.join(isolation.public, "grader", "")
    assert seen["ran"] == 42
    assert "grader.exercises" in seen["modules"] and "grader.runner" in seen["modules"]
    assert all((f or "").startswith(public) for f in seen["modules"].values()), seen["modules"]
    assert not [n for n in seen["modules"] if n.split(".")[1:2] in (["hidden"], ["autograde"], ["authoring"])]


def test_a_template_that_would_hold_grader_modules_from_elsewhere_refuses_to_serve(tmp_path):
    """Catches the check in template_main.import_public passing modules of the course's own `grader` (an editable
    install's finder left in place would bring them)."""
    spec = importlib.util.spec_from_file_location("template_main", ROOT / "grader" / "autograde" / "template_main.py")
    template_main = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(template_main)  # by path, as the template runs; not left in sys.modules
    public = sandbox.build_public(tmp_path / "lib")
    with pytest.raises(SystemExit, match="outside the public grader"):
        template_main.import_public(["grader.exercises"], str(public))  # this process's grader: the course's


def test_a_template_that_fails_leaves_kernels_to_launch_py(isolation, forking, tmp_path, monkeypatch):
    """Catches a template failure that stops grading: a kernel whose fork fails starts through launch.py instead
    (and so do this worker's later ones). A kernel that comes before the template is ready waits for it (catches
    the imports done twice), but no longer than READY_SECONDS (catches a stuck template that stalls grading)."""
    path = forking.path
    for p in templates():
        p.kill()  # the template is gone: its connection answers nothing
        p.wait()
    seen, kernel, _, _ = probe(isolation)
    assert not kernel.launcher.forked and not kernel.launcher.fork and forking.path is None
    assert seen["init"].endswith("bwrap") and seen["seccomp"] == "2"
    env = Launcher(Limits(), isolation, Path("/"), Path("/"), "").env()
    with template.serving(isolation, env, str(tmp_path), wanted=True) as fresh:
        forking.attach(fresh, isolation, env)
        assert not forking.ready()  # just started: its imports take seconds
        seen, kernel, _, _ = probe(isolation)
        assert kernel.launcher.forked and seen["seccomp"] == "2"  # the kernel waited for them, then forked
        forking.give_up()
    assert path != fresh
    monkeypatch.setattr(template, "READY_SECONDS", 0.2)  # shorter than any template's imports: as if stuck in them
    with template.serving(isolation, env, str(tmp_path), wanted=True) as stuck:
        forking.attach(stuck, isolation, env)
        seen, kernel, _, _ = probe(isolation)
        assert not kernel.launcher.forked and seen["seccomp"] == "2" and forking.path is None


def test_a_run_that_needs_no_template_starts_none(isolation, tmp_path):
    """Catches a template started where kernels cannot fork into their sandbox (not root, no bubblewrap), or
    kernels cannot fork into their sandbox (not root, no bubblewrap)."""
    env = Launcher(Limits(), isolation, Path("/"), Path("/"), "").env()
    with template.serving(isolation, env, str(tmp_path), wanted=False) as path:
        assert path is None
    unprivileged = sandbox.Isolation(**{**isolation.__dict__, "root": False})
    with template.serving(unprivileged, env, str(tmp_path), wanted=True) as path:
        assert path is None


def test_the_template_leaves_no_process_behind(isolation, tmp_path):
    """Catches a template, or a child of it waiting on a kernel, that outlives the run."""
    env = Launcher(Limits(), isolation, Path("/"), Path("/"), "").env()
    with template.serving(isolation, env, str(tmp_path), wanted=True) as path:
        template.TEMPLATE.attach(path, isolation, env)
        assert template.TEMPLATE.ready(wait=120)
        seen, kernel, _, _ = probe(isolation)
        assert kernel.launcher.forked
        (server,) = templates()
        children = server.children(recursive=True)
        template.TEMPLATE.give_up()
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert alive == []
    assert not path.exists() and list(tmp_path.glob("template-*")) == []
