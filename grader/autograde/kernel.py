"""One student notebook in a fresh, limited kernel: run its cells, survive what they do, replay after a crash.

The kernel is the course's Python (this interpreter) started through `grader/autograde/launch.py`,
which applies the memory limit, whatever kernel the notebook's metadata names. Given an `Isolation`
(sandbox.py), it imports the public grader only and runs inside the sandbox, with its sockets, its
connection file and the bridge's files in the notebook's own folder. Cells that kill
or hang the kernel are remembered and skipped when the kernel is restarted and the notebook
replayed, so the definitions in the other cells survive.
"""
from __future__ import annotations

import os
import secrets
import select
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from queue import Empty
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import psutil
from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync

from grader.autograde import sandbox
from grader.autograde.sandbox import Isolation

GiB = 2**30
_LAUNCH = str(Path(__file__).with_name("launch.py"))  # by path: see launch.py
REPLAY_SLOW_CELL = 2.0  # seconds a timed-out cell gets when the notebook is replayed


@dataclass(frozen=True)
class Limits:
    """What one notebook may use while graded (all configurable from the command line)."""
    cell_timeout: float = 60.0       # seconds per notebook cell
    check_timeout: float = 20.0      # seconds per check (all the calls one check makes)
    notebook_timeout: float = 600.0  # seconds for the whole notebook: cells, replays and checks
    memory: int = 4 * GiB            # memory the kernel may add to its start-up: address space plus its files
    threads: int = 1                 # torch / OpenMP threads in the kernel
    max_restarts: int = 4            # kernel restarts (each replays the notebook) before giving up
    disk: int | None = None          # its files (folder, /tmp, /dev/shm: in memory), out of `memory` (None: 1/4)
    processes: int = 256             # processes and threads the kernel and all it starts may have at once

    @property
    def files(self) -> int:
        """Bytes of files the notebook may write: in a sandbox they are held in memory, so they count in `memory`."""
        return self.disk if self.disk is not None else self.memory // 4

    @property
    def address_space(self) -> int:
        """What the kernel may add to its address space (RLIMIT_AS, launch.py): `memory` less its files."""
        return max(self.memory - self.files, self.memory // 4)


# The exchange folder (sandbox.EXCHANGE) is the one place on this machine's disk a sandboxed kernel writes: the
# bridge's replies (bridge.MAX_REPLY_BYTES) and the kernel's sockets. Past these it is ended.
EXCHANGE_BYTES = 96 * 2**20
EXCHANGE_ENTRIES = 256
FOLDER_ENTRIES = 10_000  # without a sandbox the kernel works in its folder on disk: its files, capped as a whole
WATCH_EVERY = 0.25  # seconds between two looks at what the kernel wrote


def _exe(p: psutil.Process) -> str:
    try:
        return p.exe()
    except psutil.Error:
        return ""


def _children(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.children()
    except psutil.Error:
        return []


def _kill(processes: list[psutil.Process]) -> None:
    for p in processes:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(processes, timeout=5)


@dataclass
class Outcome:
    """How one execution ended: ok, error (with the exception's name and text), timeout or dead."""
    status: str
    ename: str = ""
    evalue: str = ""


class _GradingKernelManager(AsyncKernelManager):
    """Always the course's interpreter with the grading launcher, never the kernel a notebook asks for
    (inside the sandbox's command line when there is one)."""

    launch_argv: list[str] = [sys.executable, _LAUNCH]
    owner: tuple[int, int] | None = None   # a kernel user must be able to read its connection file

    @property
    def kernel_spec(self) -> KernelSpec:  # type: ignore[override]
        return KernelSpec(argv=[*self.launch_argv, "-f", "{connection_file}"],
                          display_name="grading", language="python", metadata={})

    def write_connection_file(self, **kwargs: Any) -> None:  # noqa: D102
        super().write_connection_file(**kwargs)
        if self.owner is not None:
            os.chown(self.connection_file, *self.owner)


class _QuietClient(NotebookClient):
    """Keeps no outputs: grading never reads them, so a notebook printing gigabytes costs time, not memory."""

    def output(self, outs, msg, display_id, cell_index):  # noqa: D102
        return None


def disk_usage(folder: Path, max_entries: int) -> tuple[int, int]:
    """Bytes (allocated blocks) and entries under `folder`, never following a link; the count stops one past
    `max_entries`, so a folder of a million files costs no more to look at than a full one."""
    used, entries, stack = 0, 0, [str(folder)]
    while stack and entries <= max_entries:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    if entries > max_entries:
                        break
        except OSError:
            continue
    return used, entries


class _Watch(threading.Thread):
    """Looks at what a kernel wrote to this machine's disk every WATCH_EVERY seconds and ends the kernel when it
    passes `cap` bytes or `entries` files and folders (a file-count bomb counts too)."""

    def __init__(self, kernel: "NotebookKernel", folder: Path, cap: int, entries: int) -> None:
        super().__init__(daemon=True, name="grader-disk-watch")
        self.kernel, self.folder, self.cap, self.entries = kernel, folder, cap, entries
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        if self is not threading.current_thread():
            self.join(5)

    def run(self) -> None:
        while not self._stop_event.wait(WATCH_EVERY):
            used, entries = disk_usage(self.folder, self.entries)
            if used > self.cap or entries > self.entries:
                what = f"{used / 2**20:.0f} MiB" if used > self.cap else f"more than {self.entries} files"
                self.kernel.end(f"the notebook wrote {what} to its folder on the grading machine's disk "
                                f"(at most {self.cap / 2**20:.0f} MiB and {self.entries} files)")
                return


@dataclass
class NotebookKernel:
    sources: list[str]                      # the notebook's code cells, in order
    cwd: Path                               # scratch copy of the notebook's folder
    limits: Limits
    setup: Any = None                       # callable(kernel) run after each (re)start, before any cell
    isolation: Isolation | None = None      # public grader and sandbox (None: this process's grader, no sandbox)
    folder: Path | None = None              # the notebook's own folder (holds cwd), the one place it may write
    outcomes: dict[int, Outcome] = field(default_factory=dict)   # first outcome of each cell
    skip: set[int] = field(default_factory=set)                   # cells that killed or hung the kernel
    slow: set[int] = field(default_factory=set)                   # cells that timed out but could be interrupted
    restarts: int = 0
    gave_up: str = ""                       # why the kernel is gone for good ("" while usable)
    exhausted: str = ""                     # why the grader ended the kernel: what it wrote outgrew its cap

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.limits.notebook_timeout
        self._client: NotebookClient | None = None
        self._ran_upto = 0                 # cells before this index have been run once
        self._reply: dict | None = None
        self._kernel_pid: int | None = None
        self.token = secrets.token_hex(8)  # in the kernel's environment: finds what it started, wherever it went
        if self.folder is None:
            self.folder = self.cwd

    # ---------------------------------------------------------------- lifecycle

    def _env(self) -> dict[str, str]:
        n = str(self.limits.threads)
        ours = {
            "CUDA_VISIBLE_DEVICES": "",        # grades must not depend on the grading machine having a GPU
            "GRADER_GRADING": "1",             # grader.check in the notebook only says the grader runs the checks
            "GRADER_MEMORY_LIMIT": str(self.limits.address_space),
            "GRADER_PROCESSES": str(self.limits.processes), "GRADER_FILE_SIZE": str(self.limits.files),
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
        exchange = Path(self.folder) / sandbox.EXCHANGE
        exchange.mkdir(exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=exchange))
        if self.isolation is not None:
            sandbox.own_folder(exchange, self.isolation)
        return path

    def _manager(self) -> _GradingKernelManager:
        iso = self.isolation
        if iso is None:
            # Unix sockets in a private folder: no TCP port, nothing another user on the machine can reach.
            self._ipc = tempfile.mkdtemp(prefix="grader-ipc-")
            return _GradingKernelManager(transport="ipc", ip=os.path.join(self._ipc, "kernel"))
        if self.restarts == 0:
            self.home = Path(self.folder) / "home"
            sandbox.prepare_home(self.home)
            if iso.kind == "bwrap":
                sandbox.stage_identity(Path(self.folder), sandbox.sandbox_uid(iso))
            sandbox.own_folder(Path(self.folder), iso)
        self._ipc = str(self.private_dir("ipc-"))  # a fresh one per start: nothing left in it by the notebook
        km = _GradingKernelManager(transport="ipc", ip=os.path.join(self._ipc, "kernel"),
                                   connection_file=os.path.join(self._ipc, "connection.json"))
        prefix = (sandbox.bwrap_argv(iso, Path(self.folder), self.cwd, disk=self.limits.files)
                  if iso.kind == "bwrap" else [])
        km.launch_argv = [*prefix, sys.executable, iso.launch]
        km.owner = sandbox.user_ids(iso)
        return km

    def _watched(self) -> tuple[Path, int, int] | None:
        """The folder on this machine's disk the kernel may write, with the bytes and entries it may put there
        (None: no folder to watch). Sandboxed, only its exchange folder (the rest is in size-limited memory);
        otherwise its whole folder, which then holds its files."""
        if self.isolation is None:
            return None
        if self.isolation.kind == "bwrap":
            return Path(self.folder) / sandbox.EXCHANGE, EXCHANGE_BYTES, EXCHANGE_ENTRIES
        return Path(self.folder), self.limits.files, FOLDER_ENTRIES

    def start(self) -> None:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")])
        km = self._manager()
        self._kernel_pid = None
        client = _QuietClient(nb, km=km, timeout=int(self.limits.cell_timeout),
                              allow_errors=True, interrupt_on_timeout=False, record_timing=False,
                              shutdown_kernel="immediate", startup_timeout=120, iopub_timeout=10)
        client.on_cell_executed = self._on_executed
        client.start_new_kernel(cwd=str(self.cwd), env=self._env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        client.start_new_kernel_client()
        self._client = client
        fast = BlockingKernelClient()
        fast.load_connection_info(client.km.get_connection_info())
        fast.start_channels(iopub=False, stdin=False, hb=False, control=False)
        self._fast = fast
        self._comm_id = ""
        fifo = os.path.join(self._ipc, f"done-{self.restarts}")
        os.mkfifo(fifo, 0o600)
        ids = sandbox.user_ids(self.isolation) if self.isolation is not None else None
        if ids is not None:
            os.chown(fifo, *ids)
        self.fifo_path, self._fifo = fifo, os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        self._fifo_buffer = b""
        watched = self._watched()
        if watched is not None:
            self._watch = _Watch(self, *watched)
            self._watch.start()
        if self.setup is not None:
            self.setup(self)

    def _on_executed(self, cell: Any, cell_index: int, execute_reply: dict) -> None:
        self._reply = execute_reply

    def close(self) -> None:
        watch, self._watch = getattr(self, "_watch", None), None
        if watch is not None:
            watch.stop()
        if getattr(self, "_fifo", None) is not None:
            os.close(self._fifo)
            self._fifo = None
        fast, self._fast = getattr(self, "_fast", None), None
        if fast is not None:
            fast.stop_channels()
        client, self._client = self._client, None
        if client is None or client.km is None:
            return
        kids = self._started() + self._sandbox_processes()
        try:
            client._cleanup_kernel()
        except Exception:
            pass
        _kill(kids)
        shutil.rmtree(getattr(self, "_ipc", ""), ignore_errors=True)

    def _launched(self) -> psutil.Process | None:
        """The process the kernel manager started: the kernel, or the sandbox holding it."""
        pid = getattr(getattr(getattr(self._client, "km", None), "provisioner", None), "pid", None)
        try:
            return psutil.Process(pid) if pid else None
        except psutil.Error:
            return None

    def _sandbox_processes(self) -> list[psutil.Process]:
        """With bubblewrap: the sandbox's own processes (its init among them), which die when it is killed."""
        top = self._launched()
        if top is None or self.isolation is None or self.isolation.kind != "bwrap":
            return []
        try:
            return [top, *(p for p in top.children(recursive=True) if p.pid != self.kernel_pid())]
        except psutil.Error:
            return []

    def kernel_pid(self) -> int | None:
        """The kernel's own process id here (inside a sandbox: the first Python process under bubblewrap)."""
        if self._kernel_pid is not None:
            return self._kernel_pid
        top = self._launched()
        if top is None:
            return None
        if self.isolation is None or self.isolation.kind != "bwrap":
            self._kernel_pid = top.pid
            return top.pid
        python = os.path.realpath(sys.executable)
        level = [top]
        for _ in range(4):  # bubblewrap, its init, then the kernel: the shallowest Python process
            level = [c for p in level for c in _children(p)]
            for p in level:
                if os.path.realpath(_exe(p)) == python:
                    self._kernel_pid = p.pid
                    return p.pid
        return None

    def _started(self) -> list[psutil.Process]:
        """Every process the notebook's code started (torch.multiprocessing or torch.distributed workers, and
        in a sandbox or as a kernel user also those that left the kernel's tree), never the kernel itself."""
        found: dict[int, psutil.Process] = {}
        pid = self.kernel_pid()
        try:
            if pid is not None:
                found.update((p.pid, p) for p in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass
        kernel = {pid}
        for p in self._sandbox_processes():
            if p.pid not in kernel and os.path.realpath(_exe(p)) != os.path.realpath(self._bwrap()):
                found[p.pid] = p
        if self.isolation is not None and self.isolation.kind == "user":
            uid = (sandbox.user_ids(self.isolation) or (None,))[0]
            for p in psutil.process_iter(["uids"]):
                if p.pid not in kernel and p.info["uids"] and p.info["uids"].real == uid and self._carries_token(p):
                    found[p.pid] = p
        return list(found.values())

    def _bwrap(self) -> str:
        return shutil.which(self.isolation.bwrap) or self.isolation.bwrap if self.isolation else ""

    def _carries_token(self, p: psutil.Process) -> bool:
        try:
            return p.environ().get("GRADER_NOTEBOOK") == self.token
        except psutil.Error:
            return False

    def end(self, why: str) -> None:
        """End the kernel and everything it started, from any thread; `why` becomes what its checks report."""
        self.exhausted = why
        top = self._launched()
        _kill(self._started() + ([top] if top is not None else []))

    def kill_children(self) -> int:
        """End every process the notebook's code started; the kernel itself lives on. How many there were."""
        kids = self._started()
        _kill(kids)
        return len(kids)

    def __enter__(self) -> "NotebookKernel":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------- executing

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def execute(self, source: str, timeout: float) -> Outcome:
        """Run code in the kernel; the limit is also cut to what is left of the notebook's time."""
        if self._client is None:
            return Outcome("dead", "", self.gave_up or "the kernel is not running")
        timeout = min(timeout, self.remaining())
        if timeout <= 0:
            return Outcome("timeout", "", "notebook")
        client = self._client
        client.timeout = max(1, int(timeout + 0.999))
        client.nb.cells[0] = cell = nbformat.v4.new_code_cell(source)
        self._reply = None
        try:
            client.execute_cell(cell, 0, store_history=False)
        except CellTimeoutError:
            return Outcome("timeout")
        except DeadKernelError:
            return Outcome("dead")
        content = (self._reply or {}).get("content", {})
        if any(p.get("source") == "ask_exit" and not p.get("keepkernel") for p in content.get("payload") or []):
            return Outcome("dead", "exit", "the cell asked the kernel to exit")  # exit() or quit(): it stops soon
        if content.get("status") == "error":
            return Outcome("error", str(content.get("ename", "")), str(content.get("evalue", ""))[:300])
        return Outcome("ok")

    def _alive(self) -> bool:
        process = getattr(getattr(self._client.km, "provisioner", None), "process", None)
        return process is not None and process.poll() is None

    def call(self, source: str, timeout: float) -> Outcome:
        """Run code silently (no history, no outputs kept): the fast path for the grader's own requests."""
        if self._client is None or self._fast is None:
            return Outcome("dead", "", self.gave_up or "the kernel is not running")
        timeout = min(timeout, self.remaining())
        if timeout <= 0:
            return Outcome("timeout", "", "notebook")
        msg_id = self._fast.execute(source, silent=True, store_history=False, allow_stdin=False)
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self._fast.get_shell_msg(timeout=max(0.01, min(0.5, deadline - time.monotonic())))
            except Empty:
                if not self._alive():
                    return Outcome("dead")
                if time.monotonic() >= deadline:
                    return Outcome("timeout")
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            content = msg["content"]
            if content.get("status") == "error":
                return Outcome("error", str(content.get("ename", "")), str(content.get("evalue", ""))[:300])
            return Outcome("ok")

    def comm_ready(self) -> bool:
        return bool(getattr(self, "_comm_id", "")) and self._client is not None

    def open_comm(self, target: str) -> None:
        """Open a comm to `target` (registered in the kernel beforehand); `post` then uses it."""
        comm_id = uuid.uuid4().hex
        self._fast.shell_channel.send(self._fast.session.msg(
            "comm_open", {"comm_id": comm_id, "target_name": target, "data": {}}))
        self._comm_id = comm_id

    def post(self, data: dict, timeout: float) -> Outcome:
        """Send a comm message and wait until the kernel writes `data["n"]` to the FIFO: ~1 ms, no cell machinery."""
        if self._client is None or self._fast is None or not self._comm_id:
            return Outcome("dead", "", self.gave_up or "the kernel is not running")
        timeout = min(timeout, self.remaining())
        if timeout <= 0:
            return Outcome("timeout", "", "notebook")
        self._fast.shell_channel.send(self._fast.session.msg("comm_msg", {"comm_id": self._comm_id, "data": data}))
        want = f"{data['n']}".encode()
        deadline = time.monotonic() + timeout
        while True:
            lines = self._fifo_buffer.split(b"\n")
            self._fifo_buffer = lines.pop()
            if want in lines:
                return Outcome("ok")
            left = deadline - time.monotonic()
            if left <= 0:
                return Outcome("timeout")
            ready, _, _ = select.select([self._fifo], [], [], min(0.5, left))
            chunk = os.read(self._fifo, 4096) if ready else b""
            if chunk:
                self._fifo_buffer += chunk
            elif not self._alive():
                return Outcome("dead")
            elif ready:  # no writer yet, or it closed: nothing to wait on but the clock
                time.sleep(0.005)

    def interrupt(self) -> bool:
        """Interrupt a busy kernel; True if it answers again within a few seconds."""
        if self._client is None:
            return False
        try:
            if self.isolation is not None and self.isolation.kind == "bwrap":
                # Signalling the sandbox's process group would end bubblewrap itself: the kernel alone gets it.
                pid = self.kernel_pid()
                if pid is None:
                    return False
                os.kill(pid, signal.SIGINT)
            else:
                run_sync(self._client.km.interrupt_kernel)()
        except Exception:
            return False
        return self.call("pass", 5).status == "ok"

    def recover(self, cause: Outcome) -> None:
        """After a timeout or a death: end the processes the code started (a hung worker would outlive the
        interrupt), interrupt, else restart and replay the cells run so far."""
        self.kill_children()
        if cause.status == "timeout" and self.interrupt():
            return
        self.restart()

    def restart(self) -> None:
        """A fresh kernel with every cell run so far replayed, except those that killed or hung one."""
        while True:
            self.close()
            if self.restarts >= self.limits.max_restarts:
                self.gave_up = f"gave up after {self.restarts} kernel restarts"
                return
            if self.remaining() <= 0:
                self.gave_up = "the notebook's time ran out"
                return
            self.restarts += 1
            self.start()
            for i in range(self._ran_upto):
                if i in self.skip:
                    continue
                # A cell that timed out is replayed for a moment, for the definitions above its loop.
                limit = REPLAY_SLOW_CELL if i in self.slow else self.limits.cell_timeout
                out = self.execute(self.sources[i], limit)
                if out.status == "timeout":
                    self.kill_children()
                if out.status == "timeout" and i in self.slow and self.interrupt():
                    continue
                if out.status in ("dead", "timeout"):
                    self.skip.add(i)
                    break
            else:
                return

    def revive(self) -> None:
        """One more fresh kernel after the notebook's own run gave up: the checks get a restart budget of their own."""
        self.gave_up = ""
        self.restarts = 0
        self.restart()

    def run_cells(self) -> None:
        """Run every cell once, in order, continuing past errors; a cell that kills or hangs the kernel is skipped."""
        for i, source in enumerate(self.sources):
            if self.gave_up:
                self.outcomes[i] = Outcome("skipped", "", self.gave_up)
                continue
            if self.remaining() <= 0:
                self.outcomes[i] = Outcome("skipped", "", "the notebook's time ran out")
                continue
            out = self.execute(source, self.limits.cell_timeout)
            if out.status == "dead" and self.exhausted:
                out, self.exhausted = Outcome("dead", "", self.exhausted), ""
            self.outcomes[i] = out
            self._ran_upto = i + 1
            if out.status == "timeout":
                self.kill_children()
            if out.status == "timeout" and self.interrupt():
                self.slow.add(i)
            elif out.status in ("dead", "timeout"):
                self.skip.add(i)
                self.restart()
