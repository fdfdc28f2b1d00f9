"""How a grading kernel is started: its environment, its folders, and the command line (the course's Python with
the grading launcher, inside the sandbox when there is one), whatever kernel the notebook's metadata names."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from traitlets import default

from grader.autograde import sandbox
from grader.autograde.diskwatch import EXCHANGE_BYTES, EXCHANGE_ENTRIES, FOLDER_ENTRIES
from grader.autograde.ready import ReadyClient
from grader.autograde.sandbox import Isolation
from grader.autograde.template import TEMPLATE

_LAUNCH = str(Path(__file__).with_name("launch.py"))  # by path: see launch.py
# A Unix socket's path holds at most 107 bytes (sun_path); the kernel binds its folder for the sockets plus
# "/kernel-1" to "/kernel-5" (jupyter_client numbers ipc "ports" from 1). Past this, ZMQ fails: "File name too long".
SOCKET_PATH_MAX = 107

# torch's (and OpenMP's, MKL's, OpenBLAS's) threads in every grading kernel, whatever the cores and --workers: a
# matrix product's rounding depends on how many threads share it (docs/measurements.md), so a grade would depend
# on the grading machine and the worker count at a check's tolerance; and one thread per kernel is what lets
# grading scale with workers up to the cores. The hidden checks compute expected values with one thread too
# (cohort._worker_init).
KERNEL_THREADS = 1

# The limit on processes and threads is the kernel user's, and the next notebook's kernel, started ahead, waits as
# that user with ipykernel set up: 12 threads (measured, ipykernel 7.4). They are not this notebook's, so its
# limit (--processes) is raised by them.
WAITING_KERNEL_THREADS = 12


def scratch_base() -> str:
    """Where a grading run puts its notebooks' folders: the temporary folder, unless its path is too long for the
    kernels' Unix sockets, which live 5 folders down (a test's TMPDIR can be); then /tmp."""
    base = tempfile.gettempdir()
    if len(base) + 52 + len("/kernel-9") <= SOCKET_PATH_MAX:
        return base
    if os.path.isdir("/tmp") and os.access("/tmp", os.W_OK | os.X_OK):
        return "/tmp"
    raise RuntimeError(f"the temporary folder {base!r} is too long a path for the grading kernels' sockets "
                       f"and /tmp is not writable: set TMPDIR to a short folder")


class GradingKernelManager(AsyncKernelManager):
    """Always the course's interpreter with the grading launcher, never the kernel a notebook asks for (inside
    the sandbox's command line when there is one)."""

    launch_argv: list[str] = [sys.executable, _LAUNCH]
    owner: tuple[int, int] | None = None   # a kernel user must be able to read its connection file

    @default("client_factory")
    def _client_factory_default(self) -> type:
        return ReadyClient  # ready without waiting 0.2 s for IOPub to fall silent (ready.py)

    @property
    def kernel_spec(self) -> KernelSpec:  # type: ignore[override]
        return KernelSpec(argv=[*self.launch_argv, "-f", "{connection_file}"],
                          display_name="grading", language="python", metadata={})

    def write_connection_file(self, **kwargs: Any) -> None:  # noqa: D102
        super().write_connection_file(**kwargs)
        if self.owner is not None:
            os.chown(self.connection_file, *self.owner)


class Launcher:
    """Everything a start of one notebook's kernel needs, made anew for each (re)start where it must be."""

    def __init__(self, limits: Any, isolation: Isolation | None, folder: Path, cwd: Path, token: str) -> None:
        self.limits, self.isolation, self.folder, self.cwd, self.token = limits, isolation, folder, cwd, token
        self.home = folder / "home"
        self.ipc = ""
        self._prepared = False
        self.fork = True     # fork the kernel from the template where it can be (False after the template failed)
        self.forked = False  # this start's kernel is forked from the template (manager decides)

    def env(self) -> dict[str, str]:
        n = str(KERNEL_THREADS)
        ours = {
            "CUDA_VISIBLE_DEVICES": "",        # grades must not depend on the grading machine having a GPU
            "GRADER_GRADING": "1",             # grader.check in the notebook only says the grader runs the checks
            "GRADER_MEMORY_LIMIT": str(self.limits.address_space),
            "GRADER_PROCESSES": str(self.limits.processes + WAITING_KERNEL_THREADS), "GRADER_FILE_SIZE": str(self.limits.files),
            "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n,
            "GRADER_NOTEBOOK": self.token,
        }
        if self.isolation is None:
            return {**os.environ, **ours}
        ids = sandbox.user_ids(self.isolation)
        if ids is not None:
            ours["GRADER_KERNEL_UID"], ours["GRADER_KERNEL_GID"] = str(ids[0]), str(ids[1])
        if self.isolation.kind == "bwrap":
            ours.update(GRADER_STAGE=sandbox.STAGE, GRADER_FOLDER=str(self.folder), GRADER_CWD=str(self.cwd))
        return sandbox.kernel_env(self.isolation, dict(os.environ), ours, self.home)

    def private_dir(self, prefix: str) -> Path:
        """A new folder for the grader's files in the notebook's exchange folder (the kernel can reach it there)."""
        exchange = self.folder / sandbox.EXCHANGE
        exchange.mkdir(exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=exchange))
        if self.isolation is not None:
            sandbox.own_folder(exchange, self.isolation)
        return path

    def manager(self) -> GradingKernelManager:
        """A kernel manager for one start, with fresh sockets (nothing the notebook left in the old ones)."""
        iso = self.isolation
        if iso is None:
            # Unix sockets in a private folder: no TCP port, nothing another user on the machine can reach.
            self.ipc = tempfile.mkdtemp(prefix="grader-ipc-", dir=scratch_base())
            return GradingKernelManager(transport="ipc", ip=self._socket_path())
        if not self._prepared:
            sandbox.prepare_home(self.home)
            if not iso.sandboxed:
                sandbox.private_tmp(self.folder).mkdir(exist_ok=True)
            if iso.kind == "bwrap":
                sandbox.stage_identity(self.folder, sandbox.sandbox_uid(iso))
            sandbox.own_folder(self.folder, iso)
            self._prepared = True
        self.ipc = str(self.private_dir("ipc-"))
        km = GradingKernelManager(transport="ipc", ip=self._socket_path(),
                                  connection_file=os.path.join(self.ipc, "connection.json"))
        prefix = sandbox.bwrap_argv(iso, self.folder, self.cwd, disk=self.limits.files) if iso.kind == "bwrap" else []
        self.forked = self.fork and TEMPLATE.usable(iso)
        if self.forked:  # the kernel is forked into the sandbox from the template; its door holds it open
            km.launch_argv = [*prefix, sys.executable, "-I", "-S", str(Path(iso.launch).with_name("door.py"))]
        else:
            km.launch_argv = [*prefix, sys.executable, iso.launch]
        km.owner = sandbox.user_ids(iso)
        return km

    def _socket_path(self) -> str:
        """The prefix of the kernel's socket files; too long a path fails here, by name, not inside ZMQ."""
        path = os.path.join(self.ipc, "kernel")
        if len(path) + len("-9") > SOCKET_PATH_MAX:
            raise RuntimeError(f"the kernel's socket folder {self.ipc!r} is too long a path for a Unix socket "
                               f"(at most {SOCKET_PATH_MAX} bytes): grade from a shorter temporary folder (TMPDIR)")
        return path

    def fifo(self, name: str) -> str:
        """A FIFO in this start's sockets folder, the kernel's to open: the one it writes each finished request's
        number to, or the one a kernel started ahead waits on."""
        path = os.path.join(self.ipc, name)
        os.mkfifo(path, 0o600)
        ids = sandbox.user_ids(self.isolation) if self.isolation is not None else None
        if ids is not None:
            os.chown(path, *ids)
        return path

    def watched(self) -> tuple[Path, int, int] | None:
        """The folder on this machine's disk the kernel may write, with the bytes and entries it may put there
        (None: no folder to watch). Sandboxed, only its exchange folder (the rest is in size-limited memory);
        otherwise its whole folder, which then holds its files."""
        if self.isolation is None:
            return None
        if self.isolation.kind == "bwrap":
            return self.folder / sandbox.EXCHANGE, EXCHANGE_BYTES, EXCHANGE_ENTRIES
        return self.folder, self.limits.files, FOLDER_ENTRIES
