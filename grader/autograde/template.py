"""Sandboxed kernels forked from a template instead of started from nothing: each kernel used to import torch,
ipykernel and torch._dynamo again (about 3 of the 5 CPU-seconds a notebook cost), then matplotlib.pyplot in its
first cell. A grading run now starts one template process that imports them once (template_main.py; matplotlib
with a fresh home's settings), and each kernel is forked from it into its
notebook's own sandbox: bubblewrap still makes a fresh sandbox per kernel, with a small `door` process in it,
and the forked kernel joins that sandbox's namespaces and root before it drops its rights and runs any notebook
code. Each kernel is still fresh, for one notebook only.

The grading process starts the template (`serving`) when it has two notebooks or more to grade, and only with
bubblewrap run as root (`suits`); its workers connect to it (`TEMPLATE`). A worker's first kernel waits for the
template's imports (seconds a kernel started through launch.py would spend on the same imports, on a core of its
own); a kernel starts through launch.py whenever the template cannot answer, or is not ready within READY_SECONDS.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from multiprocessing.util import Finalize
from pathlib import Path

import psutil

from grader.autograde.kernel_side import IMPORTS
from grader.autograde.sandbox import Isolation, matplotlib_folder, prepare_home

ANSWER_SECONDS = 30  # a fork into a sandbox takes milliseconds; a template that takes this long is broken
DOOR_SECONDS = 30    # bubblewrap's start, until its door process is there
READY_SECONDS = 60   # the template's imports, on a machine busy starting every worker: a template that
                     # takes longer is stuck, and each worker gives up on it once


class TemplateUnavailable(RuntimeError):
    """The template could not answer: the kernel starts through launch.py instead."""


def suits(isolation: Isolation | None) -> bool:
    """Kernels fork from a template only where bubblewrap sandboxes them as root. An instructor who is not root
    has bubblewrap nest a user namespace in its own (--disable-userns), whose mount and PID namespaces a forked
    kernel could only join through the outer one: there kernels start through launch.py."""
    return isolation is not None and isolation.kind == "bwrap" and isolation.root


def template_env(env: dict[str, str]) -> dict[str, str]:
    """What of a kernel's environment the template starts with: all but what differs per notebook (its folders,
    its token, the values launch.py reads after the imports). Python reads PYTHONHASHSEED and PYTHONPATH at start,
    torch its threads and devices at import: those come from here."""
    per_notebook = ("GRADER_", "JPY_", "HOME", "MPLCONFIGDIR", "XDG_", "IPYTHONDIR", "PWD")
    return {k: v for k, v in env.items() if not k.startswith(per_notebook)} | {"GRADER_PUBLIC": "1"}


@contextlib.contextmanager
def serving(isolation: Isolation, env: dict[str, str], scratch: str, wanted: bool,
            dynamo: bool = True) -> Iterator[Path | None]:
    """In the grading process: the run's template, started now for kernels with environment `env` (a kernel's
    whole environment: the template starts with its part that is the same for every notebook; its imports
    go on while its workers start), ended with the run. Yields the socket workers connect to, in a folder of
    `scratch` that only this user can enter (None where no template is `wanted` or `suits`). `dynamo`: the
    template imports torch._dynamo too, for kernels whose notebooks import it (kernel_dynamo)."""
    if not (wanted and suits(isolation)):
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="template-", dir=scratch))  # 0700: no kernel user reaches the socket
    path = folder / "socket"
    home = folder / "home"  # matplotlib's folder while the template imports it: a kernel's fresh home's
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    process = None
    try:
        prepare_home(home)
        listener.bind(str(path))
        listener.listen(64)
        program = str(Path(isolation.launch).with_name("template_main.py"))
        process = subprocess.Popen([sys.executable, program, str(listener.fileno()),
                                    "dynamo" if dynamo else "no-dynamo", *IMPORTS],
                                   env=template_env(env) | {"MPLCONFIGDIR": str(matplotlib_folder(home))},
                                   pass_fds=[listener.fileno()], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
        listener.close()
        yield path
    finally:
        listener.close()
        if process is not None:
            process.kill()  # its children waiting on kernels end with their kernels
            process.wait()
        path.unlink(missing_ok=True)
        shutil.rmtree(home, ignore_errors=True)
        folder.rmdir()


class Template:
    """A worker's connection to its run's template."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._key: tuple | None = None
        self._sock: socket.socket | None = None
        self._ready = False
        self._closed_at_exit = False

    def attach(self, path: Path | None, isolation: Isolation, env: dict[str, str]) -> None:
        """In a grading worker: fork sandboxed kernels from the template at `path` (None: none), started for
        `isolation` and kernels with environment `env`; the connection ends when the worker exits."""
        self.close()
        self.path = path
        self._key = (isolation, tuple(sorted(template_env(env).items()))) if path is not None else None
        if not self._closed_at_exit:
            Finalize(self, Template.close, args=(self,), exitpriority=10)
            atexit.register(self.close)
            self._closed_at_exit = True

    def usable(self, isolation: Isolation | None) -> bool:
        """Whether this start's kernel forks from the template: one serves this isolation and has done its imports.
        The first time, this waits for them: a kernel started through launch.py instead would do the same imports
        again, and on a busy machine take as long."""
        return self._key is not None and self._key[0] == isolation and self.ready(wait=READY_SECONDS)

    def ready(self, wait: float = 0) -> bool:
        """Whether the template has done its imports and taken this worker's connection, waiting up to `wait`
        seconds for it; a template not ready by then is given up (its kernels start through launch.py)."""
        if self._ready or self.path is None:
            return self._ready
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                self._sock.connect(str(self.path))  # queued until the template, its imports done, accepts it
            readable, _, _ = select.select([self._sock], [], [], wait)
            if readable:
                self._ready = bool(json.loads(self._sock.recv(1 << 16) or b"{}").get("ready"))
            if not self._ready and (readable or wait):
                self.give_up()
        except (OSError, ValueError):
            self.give_up()
        return self._ready

    def spawn(self, isolation: Isolation, env: dict[str, str], door: int, argv: list[str], cwd: str) -> int:
        """Fork a kernel into the sandbox that holds process `door`; its process id. `env` is the kernel's whole
        environment, whose part that is the same for every notebook the template started with."""
        if self._key != (isolation, tuple(sorted(template_env(env).items()))) or not self.ready():
            raise TemplateUnavailable("no kernel template for this kernel's environment")
        try:
            self._sock.send(json.dumps({"door": door, "cwd": cwd, "env": env, "argv": argv}).encode())
            self._sock.settimeout(ANSWER_SECONDS)
            answer = json.loads(self._sock.recv(1 << 16) or b"{}")
        except (OSError, ValueError) as e:
            self.give_up()
            raise TemplateUnavailable(f"the kernel template stopped answering ({e})") from None
        if "pid" not in answer:
            raise TemplateUnavailable(answer.get("error", "the kernel template gave no kernel"))
        return int(answer["pid"])

    def give_up(self) -> None:
        """No more kernels from the template in this worker (it failed): they start through launch.py."""
        self.close()
        self.path = self._key = None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._ready = False
        if sock is not None:
            sock.close()


def find_door(bwrap_pid: int, seconds: float = DOOR_SECONDS) -> int:
    """The door process bubblewrap started (under its init): the first Python process in its tree."""
    python = os.path.realpath(sys.executable)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            for p in psutil.Process(bwrap_pid).children(recursive=True):
                try:
                    if os.path.realpath(p.exe()) == python:
                        return p.pid
                except psutil.Error:
                    continue
        except psutil.NoSuchProcess:
            raise TemplateUnavailable("bubblewrap ended before its door started") from None
        time.sleep(0.002)
    raise TemplateUnavailable(f"bubblewrap's door did not start within {seconds:.0f} s")


TEMPLATE = Template()
