"""What a grading kernel can see and reach: a student's world, not the instructor's machine.

Two layers, chosen once per grading run (`--sandbox auto|on|off`):

* **The public grader.** The kernel imports `grader` from a copy of what the student release ships
  (no `hidden/`, `authoring/` or `autograde/`), compiled once per run, first on its `PYTHONPATH`. The
  hidden checks and references live only in the grading process; a notebook's `import grader.hidden`
  fails as it does on the student's own machine.
* **The sandbox** (`bwrap`, Debian's `bubblewrap`: unprivileged user namespaces, so it works for an
  instructor who is not root, and as root in a container). The kernel gets a new root holding a
  read-only view of the system (`/usr`, the libraries, a few files of `/etc`), of the Python
  installation and its packages (never a folder that holds the course's `grader` sources), the public
  grader, one writable folder: the notebook's own (its copy of the student's folder, the chapter's
  data, a fresh `$HOME`, the kernel's sockets and the bridge's files), and the GPU's device files where
  there is a GPU (a notebook graded there runs on it, as the checks that count its GPUs expect). No `$HOME`
  of the instructor, no course repository, no other submission, no network (a new network namespace with
  only loopback), a private `/tmp`, a new PID namespace: when the kernel dies, everything it started dies
  with it.

Where bubblewrap cannot run (not installed, or namespaces refused, as in many Docker containers), the
Gradescope autograder falls back to running the kernel as an unprivileged user (`kernel_user`) that
cannot read the hidden checks or the results; `make grade` with `--sandbox auto` runs without a sandbox
and says so in its output and in every student's record.
"""
from __future__ import annotations

import compileall
import functools
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MODES = ("auto", "on", "off")
GRADER_DIR = Path(__file__).resolve().parents[1]
LAUNCH = Path(__file__).with_name("launch.py")
PRIVATE_PACKAGES = ("hidden", "authoring", "autograde")  # grader/ subpackages that stay with the course staff
# The files of /etc a Python kernel needs (dynamic linker, users, time zone, fonts, TLS roots): not the rest.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group", "nsswitch.conf",
       "hosts", "host.conf", "fonts", "ssl", "ca-certificates", "alternatives", "mime.types", "matplotlibrc")
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the kernel's environment keeps of the grading process's (the rest, tokens included, stays outside): the
# locale, and which GPUs the instructor lent the run, so the kernel sees the GPUs the grading process counts.
KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TERM",
            "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
# A GPU's device files (NVIDIA's; AMD's for a ROCm build of torch): the sandbox's own /dev has none of them.
GPU_DEVICES = ("nvidia*", "kfd", "dri")


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

    @property
    def sandboxed(self) -> bool:
        return self.kind != "none"

    def describe(self) -> str:
        """One line for a student's record: how the kernel that graded the notebook was isolated."""
        if self.kind == "bwrap":
            return "sandbox: bubblewrap (own files only, no network, no home folder)"
        if self.kind == "user":
            return f"sandbox: unprivileged kernel user {self.user!r}"
        return f"no sandbox: {self.note}" if self.note else "no sandbox"


def bwrap_program() -> str:
    """The bubblewrap to use: `GRADER_BWRAP` when set (a test names a missing one to stand for a machine without)."""
    return os.environ.get("GRADER_BWRAP", "bwrap")


def bwrap_problem(bwrap: str | None = None) -> str:
    """Why bubblewrap cannot sandbox a kernel on this machine, or "" when it can (tried for real, once)."""
    bwrap = bwrap or bwrap_program()
    return _bwrap_problem(shutil.which(bwrap) or bwrap)


@functools.lru_cache(maxsize=None)
def _bwrap_problem(path: str) -> str:
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        return f"bubblewrap ({Path(path).name}) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
        run = subprocess.run([path, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
                              "--dev", "/dev", "--tmpfs", "/tmp", "true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap could not start ({type(e).__name__}: {e})"
    if run.returncode != 0:
        why = " ".join(run.stderr.split())[:160] or f"exit status {run.returncode}"
        return f"bubblewrap cannot create namespaces here ({why})"
    return ""


def build_public(folder: Path) -> Path:
    """The student release's `grader` package (and the launcher) under `folder`, compiled once; returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    package = folder / "grader"
    shutil.copytree(GRADER_DIR, package, ignore=_public_only)
    shutil.copy2(LAUNCH, folder / "launch.py")
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
    base = dict(public=str(public), launch=str(public / "launch.py"), bwrap=bwrap)
    problem = bwrap_problem(bwrap) if mode != "off" else "--sandbox off"
    if not problem:
        return Isolation(kind="bwrap", **base)
    if mode == "on":
        raise SandboxUnavailable(f"--sandbox on, but {problem}")
    if kernel_user:
        try:
            pwd.getpwnam(kernel_user)
        except KeyError:
            raise SandboxUnavailable(f"no user {kernel_user!r} to run the kernels as") from None
        if os.geteuid() != 0:
            raise SandboxUnavailable(f"running kernels as {kernel_user!r} needs the grader to start as root")
        return Isolation(kind="user", user=kernel_user, note=problem, **base)
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


def gpu_devices(dev: Path = Path("/dev")) -> list[str]:
    """This machine's GPU device files (none on a machine without a GPU)."""
    return sorted(str(p) for pattern in GPU_DEVICES for p in dev.glob(pattern))


def bwrap_argv(iso: Isolation, folder: Path, cwd: Path, devices: list[str] | None = None) -> list[str]:
    """The bubblewrap command line that runs a kernel with `folder` (the notebook's own) as its only writable place,
    and the GPU's `devices` (this machine's when None) usable in its otherwise minimal /dev."""
    argv = [shutil.which(iso.bwrap) or iso.bwrap, "--unshare-all", "--die-with-parent", "--new-session",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--ro-bind-try", "/sys", "/sys"]
    for device in gpu_devices() if devices is None else devices:
        argv += ["--dev-bind-try", device, device]
    for top in SYSTEM:
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for name in ETC:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for root in _python_roots():
        argv += ["--ro-bind", str(root), str(root)]
        shadow = root / "grader"
        if (shadow / "__init__.py").is_file():  # a non-editable install: its grader holds the hidden checks
            argv += ["--ro-bind", str(Path(iso.public) / "grader"), str(shadow)]
    argv += ["--ro-bind", iso.public, iso.public, "--bind", str(folder), str(folder), "--chdir", str(cwd)]
    return argv


def kernel_env(iso: Isolation, inherited: dict[str, str], ours: dict[str, str], home: Path) -> dict[str, str]:
    """The kernel's environment: `ours` (the grader's settings) over what it inherits, the public grader first on
    the path; with a sandbox it inherits only the locale and PATH (no tokens, no `$HOME`, no other setting)."""
    if iso.sandboxed:
        env = {k: v for k, v in inherited.items() if k in KEEP_ENV}
        env.update(ours)
        env.update({"HOME": str(home), "TMPDIR": "/tmp", "GRADER_SANDBOX": iso.kind, "PYTHONNOUSERSITE": "1",
                    "MPLCONFIGDIR": str(home / ".config" / "matplotlib"), "XDG_CACHE_HOME": str(home / ".cache")})
    else:
        env = {**inherited, **ours}
    env["PYTHONPATH"] = iso.public
    env["GRADER_PUBLIC"] = "1"   # launch.py drops an editable install's finder for the course's grader
    return env


def prepare_home(home: Path) -> None:
    """A fresh `$HOME` for the kernel, with matplotlib's font list copied in (rebuilding it costs seconds)."""
    (home / ".config" / "matplotlib").mkdir(parents=True, exist_ok=True)
    for font_list in _font_lists():
        shutil.copy2(font_list, home / ".config" / "matplotlib" / font_list.name)


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
    """With a kernel user: hand the notebook's folder to that user (the kernel writes there, nowhere else)."""
    if iso.kind != "user":
        return
    entry = pwd.getpwnam(iso.user)
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def user_ids(iso: Isolation) -> tuple[int, int] | None:
    """(uid, gid) the kernel drops to, with a kernel user."""
    if iso.kind != "user":
        return None
    entry = pwd.getpwnam(iso.user)
    return entry.pw_uid, entry.pw_gid


def public_tree(root: Path | None = None) -> Path:
    """A fresh public grader under `root` (a new temporary folder when None)."""
    folder = Path(tempfile.mkdtemp(prefix="grader-public-", dir=root))
    folder.chmod(0o755)
    return build_public(folder / "lib")
