"""What a grading kernel can see and reach: a student's world, not the instructor's machine.

Two layers, chosen once per grading run (`--sandbox auto|on|off`):

* **The public grader.** The kernel imports `grader` from a copy of what the student release ships
  (no `hidden/`, `authoring/` or `autograde/`), compiled once per run, first on its `PYTHONPATH`. The
  hidden checks and references live only in the grading process; a notebook's `import grader.hidden`
  fails as it does on the student's own machine.
* **The sandbox** (`bwrap`, Debian's `bubblewrap`). The kernel gets a new root holding a read-only view of
  the system (`/usr`, the libraries, a few files of `/etc`, its own `/etc/passwd`), of the Python installation
  and its packages (never a folder that holds the course's `grader` sources) and of the public grader, and
  three size-limited in-memory folders it may write: its own folder (the notebook's files, the chapter's
  data and a fresh `$HOME`, copied in from a read-only stage when it starts), `/tmp` and `/dev/shm`. The
  only folder it shares with the grading process is the exchange folder (the kernel's sockets and the
  bridge's files), which the grading process watches. No `$HOME` of the instructor, no course repository,
  no other submission, no network (a new network namespace with only loopback), a new PID namespace (when
  the kernel dies, everything it started dies with it), and no GPU's device file.

Who the kernel is. Started by root (Gradescope, CI, containers), bubblewrap makes no user namespace: the
kernel keeps only the right to change its user, and launch.py uses it before any notebook code runs, to
become a host uid of its own (HOST_UID_BASE + the grading worker's pid: no account, no files, no
capabilities, its own process count). Started by an instructor who is not root, bubblewrap maps that
instructor's uid to uid 1000 in a new user namespace, with no capabilities and no further namespaces. In
both, a seccomp filter (confine.py) refuses mount, namespaces, ptrace, kernel keys, modules and BPF, and
resource limits cap processes, file sizes and memory. As root, a grading worker's kernels may instead be
forked from the kernel template into the sandbox bubblewrap made (template.py): the same namespaces, root
and steps, without importing torch again.

Where bubblewrap cannot run (not installed, or namespaces refused, as in many Docker containers), the
Gradescope autograder falls back to running the kernel as an unprivileged user (`kernel_user`) that
cannot read the hidden checks or the results; `make grade` with `--sandbox auto` runs without a sandbox
and says so in its output and in every student's record.
"""
from __future__ import annotations

import compileall
import ctypes.util
import functools
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.autograde import integrity

MODES = ("auto", "on", "off")
GRADER_DIR = Path(__file__).resolve().parents[1]
LAUNCH = Path(__file__).with_name("launch.py")
# Copied beside the launcher, run before any grader import: its confinement steps, the kernel template that forks
# a grading worker's kernels (template.py), and the door that holds a forked kernel's sandbox open.
BESIDE_LAUNCH = tuple(Path(__file__).with_name(name) for name in ("confine.py", "template_main.py", "door.py"))
PRIVATE_PACKAGES = ("hidden", "authoring", "autograde")  # grader/ subpackages that stay with the course staff
# The files of /etc a Python kernel needs (dynamic linker, time zone, fonts, TLS roots): not the rest. Its
# passwd and group are the sandbox's own (stage_identity), naming no user of this machine.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf",
       "hosts", "host.conf", "fonts", "ssl", "ca-certificates", "alternatives", "mime.types", "matplotlibrc")
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the kernel's environment keeps of the grading process's (the rest, tokens included, stays outside): the
# locale. No GPU reaches a kernel: the sandbox's /dev has no GPU device file (checks judge devices on simulated
# ones, so a grade never depends on the grading machine's GPU; with the files bound, a notebook could undo the
# launcher's CUDA_VISIBLE_DEVICES="" before CUDA starts and use the machine's GPU).
KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
SANDBOX_UID = 1000                # the kernel's uid and gid as an unprivileged bubblewrap maps them ("student")
HOST_UID_BASE = 1_900_000_000     # as root: the kernel's host uid is this plus its grading worker's pid
EXCHANGE = "grader"               # the one folder of the notebook's that the grading process reads and writes
STAGE = "/grader-stage"           # where the sandbox sees the notebook's starting files, read-only
# The kernel's file space (--disk) split between its folder, /tmp and /dev/shm: each an in-memory file system.
SHARES = {"folder": 0.5, "/tmp": 0.25, "/dev/shm": 0.25}


class SandboxUnavailable(RuntimeError):
    """`--sandbox on` was asked for and bubblewrap cannot run here; the message says why."""


@dataclass(frozen=True)
class Isolation:
    """How every kernel of one grading run is isolated (plain data: it is sent to the worker processes)."""
    public: str                 # folder whose `grader` is the public package (first on the kernel's PYTHONPATH)
    launch: str                 # the kernel launcher (a copy beside the public package)
    kind: str = "none"          # "bwrap", "user" (an unprivileged kernel user) or "none"
    bwrap: str = "bwrap"
    user: str = ""              # with kind "user": the account the kernel runs as
    note: str = ""              # why there is no sandbox, when there is none: one line for the output and records
    root: bool = False          # the grader runs as root: with bwrap, each kernel drops to a host uid of its own
    seccomp: str = ""           # libseccomp, which the launcher loads to filter system calls ("" where there is none)

    @property
    def sandboxed(self) -> bool:
        return self.kind != "none"

    def describe(self) -> str:
        """One line for a student's record: how the kernel that graded the notebook was isolated."""
        if self.kind == "bwrap":
            return "sandbox: bubblewrap (own files only, no network, no home folder, unprivileged user)"
        if self.kind == "user":
            return f"sandbox: unprivileged kernel user {self.user!r}"
        return f"no sandbox: {self.note}" if self.note else "no sandbox"


def bwrap_program() -> str:
    """The bubblewrap to use: `GRADER_BWRAP` when set (a test names a missing one to stand for a machine without)."""
    return os.environ.get("GRADER_BWRAP", "bwrap")


def bwrap_problem(bwrap: str | None = None) -> str:
    """Why bubblewrap cannot sandbox a kernel on this machine, or "" when it can (tried for real, once, with the
    options grading uses)."""
    bwrap = bwrap or bwrap_program()
    return _bwrap_problem(shutil.which(bwrap) or bwrap, os.geteuid() == 0)


@functools.lru_cache(maxsize=None)
def _bwrap_problem(path: str, root: bool) -> str:
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        return f"bubblewrap ({Path(path).name}) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    argv = [path, *_identity(root), "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
            "--size", str(2**20), "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--perms", "0777",
            "--size", str(2**20), "--tmpfs", "/tmp", "true"]
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap could not start ({type(e).__name__}: {e})"
    if run.returncode != 0:
        why = " ".join(run.stderr.split())[:160] or f"exit status {run.returncode}"
        if "Unknown option" in why:
            return f"this bubblewrap is too old for grading ({why}; version 0.8 or newer is needed)"
        return f"bubblewrap cannot create namespaces here ({why})"
    return ""


def _identity(root: bool) -> list[str]:
    """The namespaces and rights of a sandbox. As root: no user namespace (one owned by root would let its
    root remount the read-only views), every capability dropped but changing user, which launch.py uses and
    loses at once. Otherwise: a user namespace mapping the grader's uid to SANDBOX_UID, none nested in it."""
    spaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if root:
        return [*spaces, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return [*spaces, "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns"]


def seccomp_library() -> str:
    """libseccomp's name for the kernel's launcher to load, "" where this machine has none (no syscall filter)."""
    return ctypes.util.find_library("seccomp") or ""


def build_public(folder: Path) -> Path:
    """The student release's `grader` package (and the launcher) under `folder`, compiled once; returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    package = folder / "grader"
    shutil.copytree(GRADER_DIR, package, ignore=_public_only)
    for path in (LAUNCH, *BESIDE_LAUNCH):
        shutil.copy2(path, folder / path.name)
    compileall.compile_dir(package, quiet=1, workers=1)  # kernels cannot write bytecode into a read-only view
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # readable by an unprivileged kernel user
    return folder


def _public_only(directory: str, names: list[str]) -> set[str]:
    skipped = {n for n in names if n in ("__pycache__", ".ipynb_checkpoints") or n.endswith(".pyc")}
    if Path(directory).resolve() == GRADER_DIR:
        skipped |= {n for n in names if n in PRIVATE_PACKAGES}
    return skipped


def choose(mode: str, public: Path, bwrap: str | None = None, kernel_user: str = "") -> Isolation:
    """The isolation for `--sandbox MODE` (and, without bubblewrap, an unprivileged `kernel_user` if named)."""
    if mode not in MODES:
        raise ValueError(f"--sandbox must be one of {', '.join(MODES)}, not {mode!r}")
    bwrap = bwrap or bwrap_program()
    root = os.geteuid() == 0
    base = dict(public=str(public), launch=str(public / "launch.py"), bwrap=bwrap, seccomp=seccomp_library())
    problem = bwrap_problem(bwrap) if mode != "off" else "--sandbox off"
    if not problem:
        return Isolation(kind="bwrap", root=root, **base)
    if mode == "on":
        raise SandboxUnavailable(f"--sandbox on, but {problem}")
    if kernel_user:
        try:
            pwd.getpwnam(kernel_user)
        except KeyError:
            raise SandboxUnavailable(f"no user {kernel_user!r} to run the kernels as") from None
        if not root:
            raise SandboxUnavailable(f"running kernels as {kernel_user!r} needs the grader to start as root")
        entry = pwd.getpwnam(kernel_user)
        open_to_it = integrity.Watch(integrity.start(), (str(GRADER_DIR), str(public))).writable_by(entry.pw_uid,
                                                                                                   entry.pw_gid)
        if open_to_it:
            more = f" and {len(open_to_it) - 3} more" if len(open_to_it) > 3 else ""
            raise SandboxUnavailable(f"the kernel user {kernel_user!r} could write {', '.join(open_to_it[:3])}{more}, "
                                     "which the grading process runs: make them writable by root only")
        return Isolation(kind="user", user=kernel_user, note=problem, root=root, **base)
    return Isolation(kind="none", note=f"{problem}; notebooks ran with this user's files and network", **base)


def _python_roots() -> list[Path]:
    """Folders the interpreter and its packages live in, without any that holds the course's grader sources."""
    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.base_exec_prefix),
             Path(os.path.realpath(sys.executable)).parent.parent}
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            roots.add(Path(entry).resolve())
    keep = []
    for root in sorted(roots, key=lambda p: len(p.parts)):
        if any(root.is_relative_to(k) for k in keep):
            continue
        if (root / "grader" / "__init__.py").is_file() and (root / "grader").resolve() == GRADER_DIR:
            continue  # the course repository itself (an editable install): never shown
        keep.append(root)
    return keep


def file_space(disk: int) -> dict[str, int]:
    """Bytes of each in-memory file system a sandboxed kernel writes to, out of its `disk` budget."""
    return {place: max(2**20, int(disk * share)) for place, share in SHARES.items()}


def bwrap_argv(iso: Isolation, folder: Path, cwd: Path, disk: int = 2**30) -> list[str]:
    """The bubblewrap command line that runs a kernel with `folder` (the notebook's own) as a size-limited
    in-memory folder holding a copy of its starting files (launch.py copies them from STAGE), its exchange
    folder `folder/EXCHANGE` shared with the grading process, and a minimal, read-only /dev (no GPU).
    `cwd` is where the kernel starts (launch.py moves there)."""
    space = file_space(disk)
    argv = [shutil.which(iso.bwrap) or iso.bwrap, *_identity(iso.root), "--die-with-parent", "--new-session",
            "--proc", "/proc", "--dev", "/dev", *_tmpfs("/dev/shm", space["/dev/shm"], "1777")]
    argv += ["--remount-ro", "/dev", *_tmpfs("/tmp", space["/tmp"], "1777"), "--ro-bind-try", "/sys", "/sys"]
    made: set[str] = {"/", "/tmp", "/dev", "/sys", "/proc"}
    for top in SYSTEM:
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    made |= set(SYSTEM)
    for name in ETC:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for name in ("passwd", "group"):
        argv += ["--ro-bind", str(folder / "etc" / name), f"/etc/{name}"]
    for root in _python_roots():
        argv += [*_parents(root, made), "--ro-bind", str(root), str(root)]
        shadow = root / "grader"
        if (shadow / "__init__.py").is_file():  # a non-editable install: its grader holds the hidden checks
            argv += ["--ro-bind", str(Path(iso.public) / "grader"), str(shadow)]
    argv += [*_parents(Path(iso.public), made), "--ro-bind", iso.public, iso.public, "--ro-bind", str(folder), STAGE,
             *_parents(folder, made), *_tmpfs(str(folder), space["folder"], "0777"),
             "--bind", str(folder / EXCHANGE), str(folder / EXCHANGE), "--remount-ro", "/", "--chdir", str(folder)]
    return argv


def _tmpfs(where: str, size: int, mode: str) -> list[str]:
    return ["--perms", mode, "--size", str(size), "--tmpfs", where]


def _parents(path: Path, made: set[str]) -> list[str]:
    """Folders above `path` made searchable by everyone (bubblewrap would make them 0700, closed to a kernel that
    dropped root, where the machine keeps Python under /root), each made once."""
    argv = []
    for parent in reversed(path.parents):
        if str(parent) not in made:
            made.add(str(parent))
            argv += ["--perms", "0755", "--dir", str(parent)]
    return argv


def stage_identity(folder: Path, uid: int) -> None:
    """The sandbox's /etc/passwd and /etc/group: the kernel's own uid as "student", and root; no user of this
    machine (their names and homes are none of a notebook's business)."""
    etc = folder / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                f"student:x:{uid}:{uid}:student:{folder / 'home'}:/bin/sh\n"
                                "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    (etc / "group").write_text(f"root:x:0:\nstudent:x:{uid}:\nnogroup:x:65534:\n")
    for path in (etc, etc / "passwd", etc / "group"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def kernel_env(iso: Isolation, inherited: dict[str, str], ours: dict[str, str], home: Path) -> dict[str, str]:
    """The kernel's environment: `ours` (the grader's settings) over what it inherits, the public grader first on
    the path; with a sandbox it inherits only the locale and PATH (no tokens, no `$HOME`, no other setting)."""
    if iso.sandboxed:
        env = {k: v for k, v in inherited.items() if k in KEEP_ENV}
        env.update(ours)
        env.update({"HOME": str(home), "TMPDIR": "/tmp", "GRADER_SANDBOX": iso.kind, "PYTHONNOUSERSITE": "1",
                    "USER": "student", "LOGNAME": "student",
                    "MPLCONFIGDIR": str(matplotlib_folder(home)), "XDG_CACHE_HOME": str(home / ".cache")})
    else:
        # No private /tmp: its temporary files go in its own folder (home's parent), removed with it. In this machine's
        # /tmp, each chapter-10 notebook left its working folder and multiprocessing's behind.
        env = {**inherited, **ours, "TMPDIR": str(private_tmp(home.parent))}
    env["IPYTHONDIR"] = str(home / ".ipython")  # never the instructor's profile (startup files run in every kernel)
    if iso.seccomp:
        env["GRADER_SECCOMP"] = iso.seccomp
    env["PYTHONPATH"] = iso.public
    env["GRADER_PUBLIC"] = "1"   # launch.py drops an editable install's finder for the course's grader
    return env


def private_tmp(folder: Path) -> Path:
    """The temporary folder of a kernel without a sandbox, in its notebook's folder (made by Launcher.manager)."""
    return folder / "tmp"


def matplotlib_folder(home: Path) -> Path:
    """matplotlib's config and cache folder (MPLCONFIGDIR) in a kernel's home."""
    return home / ".config" / "matplotlib"


def prepare_home(home: Path) -> None:
    """A fresh `$HOME` for the kernel, with matplotlib's font list copied in (rebuilding it costs seconds)."""
    matplotlib_folder(home).mkdir(parents=True, exist_ok=True)
    for font_list in _font_lists():
        shutil.copy2(font_list, matplotlib_folder(home) / font_list.name)


@functools.lru_cache(maxsize=1)
def _font_lists() -> tuple[Path, ...]:
    try:
        import matplotlib
        from matplotlib import font_manager  # noqa: F401  (builds the font list here once, if it must)
        cache = Path(matplotlib.get_cachedir())
    except Exception:
        return ()
    return tuple(sorted(cache.glob("fontlist-*.json")))


def own_folder(folder: Path, iso: Isolation) -> None:
    """With a kernel uid: hand `folder` to it (the kernel writes there, and in its in-memory folders, nowhere else)."""
    ids = user_ids(iso)
    if ids is None:
        return
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, *ids, follow_symlinks=False)


def user_ids(iso: Isolation) -> tuple[int, int] | None:
    """(uid, gid) on this machine that the kernel drops to before any notebook code runs: the kernel user's, or,
    sandboxed by root, one of its own (HOST_UID_BASE + this worker's pid: one kernel per worker at a time).
    None when the kernel stays the grader's user (no sandbox, or an unprivileged bubblewrap's user namespace)."""
    if iso.kind == "user":
        entry = pwd.getpwnam(iso.user)
        return entry.pw_uid, entry.pw_gid
    if iso.kind == "bwrap" and iso.root:
        uid = HOST_UID_BASE + os.getpid()
        return uid, uid
    return None


def sandbox_uid(iso: Isolation) -> int:
    """The kernel's uid as the kernel itself sees it (its /etc/passwd names it "student")."""
    ids = user_ids(iso)
    return ids[0] if ids is not None else SANDBOX_UID


def public_tree(root: Path | None = None) -> Path:
    """A fresh public grader under `root` (a new temporary folder when None)."""
    folder = Path(tempfile.mkdtemp(prefix="grader-public-", dir=root))
    folder.chmod(0o755)
    return build_public(folder / "lib")
