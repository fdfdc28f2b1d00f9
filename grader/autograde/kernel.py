"""One student notebook in a fresh, limited kernel: run its cells, survive what they do, replay after a crash.

The kernel is the course's Python (this interpreter) started through `grader/autograde/launch.py`, which
confines it and applies the memory limit, whatever kernel the notebook's metadata names; in a grading run
sandboxed by root, it is forked instead from the run's kernel template (template.py), which takes the same
steps. Given an `Isolation`
(sandbox.py), it imports the public grader only and runs inside the sandbox, with its sockets, its connection
file and the bridge's files in the notebook's exchange folder. Cells that kill or hang the kernel are remembered
and skipped when the kernel is restarted and the notebook replayed, so the definitions in the other cells survive.

The units: launcher.py (environment, folders, command line), channel.py (sending code), processes.py (finding
and ending processes), diskwatch.py (what it writes to disk); NotebookKernel puts them together.
"""
from __future__ import annotations

import os
import secrets
import signal
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from nbclient.util import run_sync

from grader.autograde.channel import Channel, Ended, Outcome, QuietClient
from grader.autograde.diskwatch import EXCHANGE_BYTES, EXCHANGE_ENTRIES, DiskWatch, disk_usage  # noqa: F401
from grader.autograde.launcher import Launcher
from grader.autograde.processes import KernelProcesses, kill
from grader.autograde.sandbox import Isolation
from grader.autograde.template import TEMPLATE, TemplateUnavailable, find_door

GiB = 2**30
REPLAY_SLOW_CELL = 2.0  # seconds a timed-out cell gets when the notebook is replayed
AHEAD_NICE = 19         # the priority a kernel started ahead of its notebook waits at (warm.py)

__all__ = ["GiB", "Limits", "Ended", "Outcome", "NotebookKernel", "disk_usage", "EXCHANGE_BYTES", "EXCHANGE_ENTRIES"]


@dataclass(frozen=True)
class Limits:
    """What one notebook may use while graded (all configurable from the command line)."""
    cell_timeout: float = 60.0       # seconds per notebook cell
    check_timeout: float = 20.0      # seconds per check (all the calls one check makes)
    notebook_timeout: float = 600.0  # seconds for the whole notebook: cells, replays and checks
    memory: int = 4 * GiB            # memory the kernel may add to its start-up: address space plus its files
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
        self._client: QuietClient | None = None
        self._channel: Channel | None = None
        self._watch: DiskWatch | None = None
        self._waiting: int | None = None   # the FIFO a kernel started ahead waits on, held open (launch)
        self._ahead = False                # started ahead and told to go on: its priority is set back at connect
        self._ran_upto = 0                 # cells before this index have been run once
        self.token = secrets.token_hex(8)  # in the kernel's environment: finds what it started, wherever it went
        if self.folder is None:
            self.folder = self.cwd
        self.launcher = Launcher(self.limits, self.isolation, Path(self.folder), Path(self.cwd), self.token)
        self.processes = KernelProcesses(self.isolation, self.token, self._launched_pid)

    # ---------------------------------------------------------------- lifecycle

    def _launched_pid(self) -> int | None:
        return getattr(getattr(getattr(self._client, "km", None), "provisioner", None), "pid", None)

    @property
    def home(self) -> Path:
        return self.launcher.home

    @property
    def fifo_path(self) -> str:
        return self._channel.fifo_path if self._channel is not None else ""

    @property
    def requests_path(self) -> str:
        return self._channel.requests_path if self._channel is not None else ""

    def private_dir(self, prefix: str) -> Path:
        """A new folder for the grader's files in the notebook's exchange folder (the kernel can reach it there)."""
        return self.launcher.private_dir(prefix)

    def start(self) -> None:
        """Start the kernel and connect to it."""
        self.launch()
        self.connect()

    def launch(self, ahead: bool = False) -> None:
        """Start the kernel's process. `ahead`: the notebook's files are not there yet; it imports torch and
        ipykernel, then waits (launch.py) until `go`."""
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")])
        km = self.launcher.manager()
        self.processes.forget()
        client = QuietClient(nb, km=km, timeout=int(self.limits.cell_timeout), allow_errors=True,
                             interrupt_on_timeout=False, record_timing=False, shutdown_kernel="immediate",
                             startup_timeout=120, iopub_timeout=10)
        env = self.launcher.env()
        if ahead:
            # Held open here from the start: what `go` writes waits in the pipe until the kernel gets to read it.
            fifo = self.launcher.fifo("wait")
            self._waiting = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
            env["GRADER_WAIT"] = fifo
            if os.geteuid() == 0:  # only root can set it back to normal priority when its notebook comes
                env["GRADER_WAIT_NICE"] = str(AHEAD_NICE)
        self._client = client  # before it starts: whatever part of the start failed, close() ends it
        client.start_new_kernel(cwd=str(self.cwd), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self.launcher.forked:
            try:
                self._fork_from_template(km, env)
            except TemplateUnavailable:  # started as launch.py starts it, this once and after
                self.launcher.fork = False
                self.close()
                self.launch(ahead)

    def _fork_from_template(self, km: Any, env: dict[str, str]) -> None:
        """Fork this start's kernel from the template into the sandbox bubblewrap just made (template.py)."""
        door = find_door(km.provisioner.pid)
        argv = [self.isolation.launch, "-f", km.connection_file]
        self.processes.adopt(TEMPLATE.spawn(self.isolation, env, door, argv, str(self.folder)), door)

    def go(self) -> None:
        """Let a kernel started ahead go on: the notebook's files are in its folder now; as root, at normal
        priority again (it started ahead at AHEAD_NICE, taking only what the machine left idle)."""
        if self._waiting is None:
            return
        self._normal_priority()
        os.write(self._waiting, b"go\n")
        self._ahead = True

    def _normal_priority(self) -> None:
        pid = self.kernel_pid()
        if os.geteuid() == 0 and pid is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, pid, 0)
            except OSError:
                pass

    def _stop_waiting(self) -> None:
        if self._waiting is not None:
            os.close(self._waiting)
            self._waiting = None

    def connect(self) -> None:
        """Wait until the started kernel answers, then open the channels, the disk watch and the bridge."""
        self._client.start_new_kernel_client()
        if self._ahead:  # found by now for sure: a kernel started ahead runs at normal priority from here
            self._normal_priority()
            self._ahead = False
        self._channel = Channel(self._client, self.launcher.fifo(f"done-{self.restarts}"),
                                self.launcher.fifo(f"requests-{self.restarts}"), self.remaining, self._alive)
        watched = self.launcher.watched()
        if watched is not None:
            self._watch = DiskWatch(self.end, *watched)
            self._watch.start()
        if self.setup is not None:
            self.setup(self)

    def adopt(self, sources: list[str], setup: Any) -> None:
        """Make a kernel started ahead this notebook's: its cells, its bridge, the notebook's time from now."""
        self.sources, self.setup = sources, setup
        self.deadline = time.monotonic() + self.limits.notebook_timeout

    def alive(self) -> bool:
        return self._alive()

    def close(self) -> None:
        self._stop_waiting()
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
        client = self._client
        if client is None or client.km is None:
            self._client = None
            return
        kids = self.processes.started() + self.processes.sandbox()  # found through the client, before it goes
        top = self.processes.launched()  # the kernel, or the sandbox that holds it
        contexts = [c.context for c in (client.km, getattr(client, "kc", None)) if c is not None]
        self._client = None
        # Ended and reaped here first: jupyter_client's shutdown of a live kernel polls it every tenth of a second,
        # a tenth of a second of every notebook graded; it finds this one gone and only removes its files.
        kill(kids + ([top] if top is not None and top.pid not in {k.pid for k in kids} else []))
        try:
            client._cleanup_kernel()
        except Exception:
            pass
        # Sockets a failed start left open would make the context's garbage collection wait for them forever
        # (zmq's term), stalling the worker between two notebooks: closed now, without waiting.
        for context in contexts:
            context.destroy(linger=0)
        shutil.rmtree(self.launcher.ipc, ignore_errors=True)

    def __enter__(self) -> "NotebookKernel":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def kernel_pid(self) -> int | None:
        """The kernel's own process id here (processes.py finds it, in a sandbox or forked into one)."""
        return self.processes.kernel_pid()

    def end(self, why: str) -> None:
        """End the kernel and everything it started, from any thread; `why` becomes what its checks report."""
        self.exhausted = why
        self.processes.end_all()

    def kill_children(self) -> int:
        """End every process the notebook's code started; the kernel itself lives on. How many there were."""
        return self.processes.end_started()

    def _alive(self) -> bool:
        process = getattr(getattr(getattr(self._client, "km", None), "provisioner", None), "process", None)
        return process is not None and process.poll() is None

    # ---------------------------------------------------------------- sending code (channel.py)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _gone(self) -> Outcome:
        return Outcome(Ended.DEAD, "", self.gave_up or "the kernel is not running")

    def execute(self, source: str, timeout: float) -> Outcome:
        """Run a cell; the limit is also cut to what is left of the notebook's time."""
        return self._channel.execute(source, timeout) if self._channel is not None else self._gone()

    def call(self, source: str, timeout: float) -> Outcome:
        """Run code silently (no history, no outputs kept): the fast path for the grader's own requests."""
        return self._channel.call(source, timeout) if self._channel is not None else self._gone()

    def listening(self) -> bool:
        """Whether the kernel reads requests from its FIFO (`post`), once `start_listening` was told it does."""
        return self._channel is not None and self._channel.listening

    def start_listening(self) -> None:
        """The bridge's handler reads the requests FIFO now: `post` uses it from here."""
        self._channel.open_requests()

    def post(self, data: dict, timeout: float) -> Outcome:
        """Write a request line to the kernel and wait until it writes `data["n"]` to the FIFO: no cell machinery."""
        return self._channel.post(data, timeout) if self._channel is not None else self._gone()

    # ---------------------------------------------------------------- surviving what cells do

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
        return self.call("pass", 5).status == Ended.OK

    def recover(self, cause: Outcome) -> None:
        """After a timeout or a death: end the processes the code started (a hung worker would outlive the
        interrupt), interrupt, else restart and replay the cells run so far."""
        self.kill_children()
        if cause.status == Ended.TIMEOUT and self.interrupt():
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
            if self._replay():
                return

    def _replay(self) -> bool:
        """Run again every cell run so far but the skipped ones; False when one of them killed or hung this
        kernel too (it is skipped from now on, and the caller restarts)."""
        for i in range(self._ran_upto):
            if i in self.skip:
                continue
            # A cell that timed out is replayed for a moment, for the definitions above its loop.
            limit = REPLAY_SLOW_CELL if i in self.slow else self.limits.cell_timeout
            out = self.execute(self.sources[i], limit)
            if out.status == Ended.TIMEOUT:
                self.kill_children()
            if out.status == Ended.TIMEOUT and i in self.slow and self.interrupt():
                continue
            if out.status in (Ended.DEAD, Ended.TIMEOUT):
                self.skip.add(i)
                return False
        return True

    def revive(self) -> None:
        """One more fresh kernel after the notebook's own run gave up: the checks get a restart budget of their own."""
        self.gave_up = ""
        self.restarts = 0
        self.restart()

    def run_cells(self) -> None:
        """Run every cell once, in order, continuing past errors; a cell that kills or hangs the kernel is skipped."""
        for i, source in enumerate(self.sources):
            if self.gave_up:
                self.outcomes[i] = Outcome(Ended.SKIPPED, "", self.gave_up)
                continue
            if self.remaining() <= 0:
                self.outcomes[i] = Outcome(Ended.SKIPPED, "", "the notebook's time ran out")
                continue
            out = self.execute(source, self.limits.cell_timeout)
            if out.status == Ended.DEAD and self.exhausted:
                out, self.exhausted = Outcome(Ended.DEAD, "", self.exhausted), ""
            self.outcomes[i] = out
            self._ran_upto = i + 1
            if out.status == Ended.TIMEOUT:
                self.kill_children()
            if out.status == Ended.TIMEOUT and self.interrupt():
                self.slow.add(i)
            elif out.status in (Ended.DEAD, Ended.TIMEOUT):
                self.skip.add(i)
                self.restart()
