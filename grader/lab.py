"""`python -m grader lab` and `python -m grader test`: the course's set-up and commands, with or without make.

Most students have no `make` (Windows) or no POSIX shell, so the Makefiles only call these. Run by any
Python 3.11+ from the course folder (`py -m grader lab` on Windows, `python3 -m grader lab` elsewhere):

* outside the course's venv it makes `.venv/` (once), installs the pinned `requirements.txt` and the grader
  into it (again only when those files change), and runs the same command again with the venv's Python;
* inside it, in an active conda environment, or with `--no-venv` (a Python with the packages installed) it
  registers the course kernel if it is missing and starts JupyterLab on `notebooks/` offering that kernel
  alone (`lab`), or runs every notebook and shows where each exercise stands (`test`, the same as
  `python -m grader selfcheck`).

This module imports nothing beyond the standard library at its top, because the Python that runs it first
has none of the course's packages yet.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

KERNEL = "resource-accounting"
DISPLAY_NAME = "Python (resource accounting)"
STAMP = ".grader-setup"  # in the venv: the fingerprint of the requirements it was installed from
MIN_PYTHON = (3, 11)


class SetupError(RuntimeError):
    """The course environment cannot be set up; the message says what to do."""


def course_root() -> Path:
    """The folder holding the `grader` package, `requirements.txt` and `notebooks/`."""
    return Path(__file__).resolve().parents[1]


def venv_python(venv: Path) -> Path:
    """Where a venv keeps its Python: `Scripts\\python.exe` on Windows, `bin/python` elsewhere."""
    if os.name == "nt":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def running_in(venv: Path) -> bool:
    """Whether this interpreter is the venv's own (then there is nothing to set up, only to start)."""
    return _same(Path(sys.prefix), venv)


def in_conda_env() -> bool:
    """An active conda environment other than base: the student chose it for the course, so use it as it is."""
    prefix = os.environ.get("CONDA_PREFIX", "")
    return bool(prefix) and (Path(sys.prefix) / "conda-meta").is_dir() and _same(Path(prefix), Path(sys.prefix)) \
        and os.environ.get("CONDA_DEFAULT_ENV", "base") != "base"


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def missing_packages() -> list[str]:
    """The course's packages this Python lacks (a conda env or --no-venv Python must have them already)."""
    import importlib.util

    return [name for name in ("torch", "jupyterlab", "ipykernel", "nbclient", "rich", "einops")
            if importlib.util.find_spec(name) is None]


def fingerprint(root: Path) -> str:
    """A hash of what an install depends on: re-installing is needed exactly when it changes."""
    digest = hashlib.sha256()
    for name in ("requirements.txt", "pyproject.toml"):
        path = root / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"") + b"\0")
    return digest.hexdigest()


def _run(cmd: list[str], what: str) -> None:
    print(f"{what}: {' '.join(cmd)}", flush=True)
    done = subprocess.run(cmd)
    if done.returncode != 0:
        raise SetupError(f"{what} failed (exit status {done.returncode}); the output above says why")


def one_kernel_config(venv: Path) -> Path:
    """Jupyter server settings inside the course venv: its kernel is the only one any JupyterLab started from
    the venv offers (`.venv/bin/jupyter lab` too), and the default. Notebook runners (nbclient) do not read them."""
    import json

    path = venv / "etc" / "jupyter" / "jupyter_server_config.json"  # read by every server; its config.d is not
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    config.setdefault("KernelSpecManager", {})["allowed_kernelspecs"] = [KERNEL]
    config.setdefault("MultiKernelManager", {})["default_kernel_name"] = KERNEL
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    return path


# JupyterLab's defaults for the course, as overrides of its settings' defaults (a student's own choice still
# wins): no "Would you like to get notified about official Jupyter news?" pop-up over the first cells.
LAB_DEFAULTS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


def quiet_lab(prefix: Path) -> Path | None:
    """Write the course's JupyterLab defaults into `prefix` (the venv or conda environment that runs the lab);
    None where it may not write there (the user's own settings are left alone)."""
    import json

    folder = prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.d"
    path = folder / f"{KERNEL}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(LAB_DEFAULTS, indent=1) + "\n", encoding="utf-8")
    except OSError:
        return None
    return path


def lazy_bytecode() -> list[str]:
    """pip's flag to leave bytecode to the first import: compiling all of torch at install is half of the set-up's
    time, and a student's kernel then compiles, once, the few modules it imports. Not where Python is told to
    write no bytecode (PYTHONDONTWRITEBYTECODE): there every import would compile them again."""
    return [] if os.environ.get("PYTHONDONTWRITEBYTECODE") else ["--no-compile"]


def ensure_venv(root: Path, venv: Path) -> Path:
    """Create `venv` and install the course into it unless its stamp says that was done; return its Python."""
    if sys.version_info < MIN_PYTHON:
        raise SetupError(f"Python {'.'.join(map(str, MIN_PYTHON))} or newer is needed, this is "
                         f"{sys.version.split()[0]}; run this command with a newer Python")
    if not (root / "requirements.txt").is_file():
        raise SetupError(f"{root} has no requirements.txt: run this from the course folder")
    python = venv_python(venv)
    if not python.is_file():
        _run([sys.executable, "-m", "venv", str(venv)], f"creating {venv}")
    one_kernel_config(venv)
    quiet_lab(venv)
    stamp = venv / STAMP
    want = fingerprint(root)
    if stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == want:
        return python
    _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *lazy_bytecode(),
          "-r", str(root / "requirements.txt"), "-e", str(root)], "installing the course's packages")
    _run([str(python), "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL,
          "--display-name", DISPLAY_NAME], "registering the course kernel")
    stamp.write_text(want + "\n", encoding="utf-8")
    print(f"set up {venv} with kernel '{KERNEL}'", flush=True)
    return python


def kernel_home() -> Path:
    """Where this Python's course kernel is registered: its own prefix when it may write there (a venv, a
    conda environment), else the user's Jupyter folder."""
    if os.access(sys.prefix, os.W_OK):
        return Path(sys.prefix) / "share" / "jupyter"
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir())


def ensure_kernel() -> Path:
    """Register the course kernel for this interpreter unless it already runs this very Python; return the
    Jupyter data folder that holds it (JupyterLab is pointed there first, so no other course kernel wins)."""
    import json

    home = kernel_home()
    spec = home / "kernels" / KERNEL / "kernel.json"
    try:
        argv = json.loads(spec.read_text(encoding="utf-8")).get("argv") or [""]
        if os.path.abspath(argv[0]) == os.path.abspath(sys.executable):  # not resolved: a venv's python is a link
            return home
    except (OSError, ValueError, AttributeError):
        pass
    where = "--sys-prefix" if home == Path(sys.prefix) / "share" / "jupyter" else "--user"
    _run([sys.executable, "-m", "ipykernel", "install", where, "--name", KERNEL, "--display-name", DISPLAY_NAME],
         "registering the course kernel")
    return home


def lab_env(home: Path) -> dict[str, str]:
    """JupyterLab's environment: `home` searched first for kernels (before a course kernel of another Python
    registered for the user), and no PYTHONPATH leaking another checkout of the grader into the kernel."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(home), os.environ.get("JUPYTER_PATH", "")) if p)
    return env


def lab_command(root: Path, ip: str, port: int, browser: bool, extra: list[str]) -> list[str]:
    """The JupyterLab command line: notebooks/ as its folder, the course kernel the only one offered."""
    cmd = [sys.executable, "-m", "jupyter", "lab", f"--notebook-dir={root / 'notebooks'}",
           f"--ServerApp.ip={ip}", f"--ServerApp.port={port}",
           # The venv also holds ipykernel's own "Python 3" kernel; offering it would invite the wrong choice.
           f"--KernelSpecManager.allowed_kernelspecs={KERNEL}", f"--MultiKernelManager.default_kernel_name={KERNEL}"]
    if not browser:
        cmd.append("--no-browser")
    if getattr(os, "geteuid", lambda: 1)() == 0:
        cmd.append("--allow-root")  # Jupyter refuses to run as root unless told; containers often are root
    return cmd + extra


def _call(cmd: list[str], **kwargs: object) -> int:
    """Run a child to its end. Ctrl-C reaches it too (same console), so wait for it to shut down cleanly
    (JupyterLab stops its kernels) instead of killing it as subprocess.call would."""
    child = subprocess.Popen(cmd, **kwargs)  # type: ignore[call-overload]
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            continue


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--venv", type=Path, default=None, help="the course venv (default: .venv in the course folder)")
    parser.add_argument("--no-venv", action="store_true",
                        help="use this Python as it is (conda, or packages already installed): no venv, no install")
    return parser


def _outer(args: argparse.Namespace, root: Path, command: str, argv: list[str]) -> int | None:
    """Set up the venv and run `command` again in it; None when this Python is the one to run it."""
    venv = args.venv if args.venv is not None else root / ".venv"
    if args.no_venv or running_in(venv) or (args.venv is None and in_conda_env()):
        missing = missing_packages()
        if missing:
            print(f"error: this Python ({sys.executable}) lacks {', '.join(missing)}: install the course's packages "
                  f"into it (`python -m pip install -r requirements.txt -e .` in {root}), or run this command "
                  "with a Python outside any environment to have .venv made for you", file=sys.stderr)
            return 2
        return None
    try:
        python = ensure_venv(root, venv)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if getattr(args, "setup_only", False):
        return 0
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return _call([str(python), "-m", "grader", command, *argv], env=env)


def main_lab(argv: list[str] | None = None) -> int:
    """`python -m grader lab`: set up what is missing, then open JupyterLab on notebooks/ with the course kernel."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser("python -m grader lab", main_lab.__doc__.split(":", 1)[1].strip())
    parser.add_argument("--ip", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8888, help="port (default 8888; the next free one if taken)")
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser (print the address)")
    parser.add_argument("--setup-only", action="store_true", help="set up the venv and the kernel, start nothing")
    args, extra = parser.parse_known_args(argv)
    root = course_root()
    outer = _outer(args, root, "lab", argv)
    if outer is not None:
        return outer
    try:
        home = ensure_kernel()
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    quiet_lab(Path(sys.prefix))
    if args.setup_only:
        return 0
    return _call(lab_command(root, args.ip, args.port, not args.no_browser, extra), cwd=root, env=lab_env(home))


def main_test(argv: list[str] | None = None) -> int:
    """`python -m grader test [NOTEBOOK ...]`: set up what is missing, then run every notebook and show each exercise."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser("python -m grader test", main_test.__doc__.split(":", 1)[1].strip())
    parser.epilog = "Other arguments (NOTEBOOK ..., --json, --save, --timeout) are python -m grader selfcheck's."
    args, rest = parser.parse_known_args(argv)
    root = course_root()
    outer = _outer(args, root, "test", argv)
    if outer is not None:
        return outer
    from grader import selfcheck

    named = argparse.ArgumentParser(add_help=False)
    named.add_argument("notebooks", nargs="*")
    for option in ("--json", "--save", "--timeout"):
        named.add_argument(option)
    if not named.parse_known_args(rest)[0].notebooks and not Path("notebooks").is_dir():
        rest = [*rest, str(root / "notebooks")]  # the course's notebooks, wherever the command was started
    return selfcheck.main(rest)


__all__ = ["main_lab", "main_test", "ensure_venv", "ensure_kernel", "lab_command", "course_root", "venv_python",
           "fingerprint", "one_kernel_config", "quiet_lab", "kernel_home", "lab_env", "in_conda_env", "missing_packages", "KERNEL", "DISPLAY_NAME", "SetupError"]
