"""Find and end what a grading kernel started: the kernel itself, the sandbox holding it, and every process its
notebook started, wherever it went (a new session, a double fork, the kernel user's other processes)."""
from __future__ import annotations

import ctypes
import os
import shutil
import sys
from collections.abc import Callable

import psutil

from grader.autograde import sandbox
from grader.autograde.sandbox import Isolation


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


_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_reaper = 0  # the process that made itself the subreaper (a forked child is not one: the flag is not inherited)


def reap_orphans() -> bool:
    """Make this process the reaper of the processes its kernels leave behind (Linux's child subreaper), so `kill`
    reaps them at once: a sandbox's init, orphaned when its bubblewrap is killed, otherwise stays a zombie until
    the machine's init collects it (over a second here; in a container whose init never does, every `kill` would
    wait its whole timeout). False where the system has no such thing."""
    global _reaper
    if _reaper == os.getpid():
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    _reaper = os.getpid()
    return True


def kill(processes: list[psutil.Process]) -> None:
    """SIGKILL each, and wait (a few seconds at most) until they are gone."""
    for p in processes:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(processes, timeout=5)


class KernelProcesses:
    """The processes of one kernel. `launched()` gives the process the kernel manager started (the kernel, or the
    sandbox holding it); `token` is in the kernel's environment and so in everything it starts."""

    def __init__(self, isolation: Isolation | None, token: str, launched: Callable[[], int | None]) -> None:
        self.isolation, self.token, self._launched_pid = isolation, token, launched
        self._kernel_pid: int | None = None
        self._door: int | None = None
        reap_orphans()

    def forget(self) -> None:
        """A new kernel was started: find its process again."""
        self._kernel_pid = None
        self._door = None

    def adopt(self, kernel: int, door: int) -> None:
        """The kernel was forked into the sandbox from the template (template.py): it is `kernel`, outside
        bubblewrap's tree, and bubblewrap's first process is the `door` that holds the sandbox open for it."""
        self._kernel_pid, self._door = kernel, door

    @property
    def _sandboxed(self) -> bool:
        return self.isolation is not None and self.isolation.kind == "bwrap"

    def launched(self) -> psutil.Process | None:
        pid = self._launched_pid()
        try:
            return psutil.Process(pid) if pid else None
        except psutil.Error:
            return None

    def sandbox(self) -> list[psutil.Process]:
        """With bubblewrap: the sandbox's own processes (its init among them), which die when it is killed; a
        kernel forked into it from the template among them (it is not in bubblewrap's tree)."""
        top = self.launched()
        if top is None or not self._sandboxed:
            return []
        try:
            found = [top, *(p for p in top.children(recursive=True) if p.pid != self.kernel_pid())]
            if self._door is not None and self._kernel_pid is not None:
                found.append(psutil.Process(self._kernel_pid))
            return found
        except psutil.Error:
            return []

    def kernel_pid(self) -> int | None:
        """The kernel's own process id here (inside a sandbox: the first Python process under bubblewrap, or the
        one forked into it from the template)."""
        if self._kernel_pid is not None:
            return self._kernel_pid
        top = self.launched()
        if top is None:
            return None
        if not self._sandboxed:
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

    def started(self) -> list[psutil.Process]:
        """Every process the notebook's code started (torch.multiprocessing or torch.distributed workers, and in a
        sandbox or as a kernel user also those that left the kernel's tree), never the kernel itself."""
        found: dict[int, psutil.Process] = {}
        pid = self.kernel_pid()
        try:
            if pid is not None:
                found.update((p.pid, p) for p in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass
        bwrap = os.path.realpath(shutil.which(self.isolation.bwrap) or self.isolation.bwrap) if self.isolation else ""
        for p in self.sandbox():
            if p.pid not in (pid, self._door) and os.path.realpath(_exe(p)) != bwrap:
                found[p.pid] = p
        if self.isolation is not None and self.isolation.kind == "user":
            uid = (sandbox.user_ids(self.isolation) or (None,))[0]
            for p in psutil.process_iter(["uids"]):
                if p.pid != pid and p.info["uids"] and p.info["uids"].real == uid and self._carries_token(p):
                    found[p.pid] = p
        return list(found.values())

    def _carries_token(self, p: psutil.Process) -> bool:
        try:
            return p.environ().get("GRADER_NOTEBOOK") == self.token
        except psutil.Error:
            return False

    def end_all(self) -> None:
        """End the kernel, its sandbox and everything the notebook started, from any thread."""
        top = self.launched()
        kill(self.started() + self.sandbox() + ([top] if top is not None else []))

    def end_started(self) -> int:
        """End every process the notebook's code started; the kernel itself lives on. How many there were."""
        kids = self.started()
        kill(kids)
        return len(kids)
