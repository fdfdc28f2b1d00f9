"""Sandboxed kernels forked from a template instead of started from nothing: a grading worker's kernels each
used to import torch, ipykernel and torch._dynamo again (about 3 of the 5 CPU-seconds a notebook costs). The
worker now starts one template process that imports them once (template_main.py), and each kernel is forked
from it into its notebook's own sandbox: bubblewrap still makes a fresh sandbox per kernel, with a small
`door` process in it, and the forked kernel joins that sandbox's namespaces and root before it drops its
rights and runs any notebook code. Each kernel is still fresh, for one notebook only.

Only grading workers that will grade more than one notebook start one (cohort.py), and only with bubblewrap run
as root (`suits`). A kernel starts through launch.py as before until the template has done its imports, and
whenever the template cannot start or answer.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import socket
import subprocess
import sys
import time
from multiprocessing.util import Finalize
from pathlib import Path

import psutil

from grader.autograde.sandbox import Isolation

READY_SECONDS = 120  # the template's imports: seconds on a slow machine
DOOR_SECONDS = 30    # bubblewrap's start, until its door process is there


class TemplateUnavailable(RuntimeError):
    """The template could not start or answer: the kernel starts through launch.py instead."""


class Template:
    """One template process for this worker's kernels, for one run's isolation and environment."""

    def __init__(self) -> None:
        self.enabled = False
        self._process: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._key: tuple | None = None
        self._ready = False

    def enable(self) -> None:
        """In a grading worker: fork sandboxed kernels from a template, ended when the worker exits."""
        self.enabled = True
        Finalize(self, Template.close, args=(self,), exitpriority=10)
        atexit.register(self.close)

    @staticmethod
    def suits(isolation: Isolation | None) -> bool:
        """Kernels fork from a template only where bubblewrap sandboxes them as root. An instructor who is not root
        has bubblewrap nest a user namespace in its own (--disable-userns), whose mount and PID namespaces a
        forked kernel could only join through the outer one: there kernels start through launch.py."""
        return isolation is not None and isolation.kind == "bwrap" and isolation.root

    def usable(self, isolation: Isolation | None) -> bool:
        """Whether this start's kernel forks from the template: enabled, started for this isolation, and done with
        its imports (a kernel never waits for them: until then kernels start through launch.py)."""
        return (self.enabled and self.suits(isolation) and self._key is not None and self._key[0] == isolation
                and self.ready())

    def ready(self) -> bool:
        """Whether the template has done its imports (never waits for it)."""
        if not self._ready and self._sock is not None:
            readable, _, _ = select.select([self._sock], [], [], 0)
            if readable:
                self._wait_ready()
        return self._ready

    def prepare(self, isolation: Isolation, env: dict[str, str]) -> None:
        """Start the template for kernels with environment `env` now, without waiting for its imports (a worker
        does this as it starts, so that its first notebook does not wait for them)."""
        base = template_env(env)
        key = (isolation, tuple(sorted(base.items())))
        if self._key != key:
            self.close()
            self._start(isolation, base)
            self._key = key

    def spawn(self, isolation: Isolation, env: dict[str, str], door: int, argv: list[str], cwd: str) -> int:
        """Fork a kernel into the sandbox that holds process `door`; its process id. `env` is the kernel's whole
        environment; the template is started with the part of it that is the same for every notebook."""
        if self._key != (isolation, tuple(sorted(template_env(env).items()))):
            raise TemplateUnavailable("the kernel template was started for another environment")
        if not self._ready:
            self._wait_ready()
        request = {"door": door, "cwd": cwd, "env": env, "argv": argv}
        try:
            self._sock.send(json.dumps(request).encode())
            answer = json.loads(self._receive(READY_SECONDS))
        except (OSError, ValueError) as e:
            self.close()
            raise TemplateUnavailable(f"the kernel template stopped answering ({e})") from None
        if "pid" not in answer:
            raise TemplateUnavailable(answer.get("error", "the kernel template gave no kernel"))
        return int(answer["pid"])

    def _start(self, isolation: Isolation, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        program = str(Path(isolation.launch).with_name("template_main.py"))
        try:
            self._process = subprocess.Popen([sys.executable, program, str(theirs.fileno())], env=env,
                                             pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
        finally:
            theirs.close()
        self._sock = ours
        self._ready = False

    def _wait_ready(self) -> None:
        try:
            ready = json.loads(self._receive(READY_SECONDS))
        except (OSError, ValueError) as e:
            self.close()
            raise TemplateUnavailable(f"the kernel template did not start ({e})") from None
        if not ready.get("ready"):
            self.close()
            raise TemplateUnavailable("the kernel template did not start")
        self._ready = True

    def _receive(self, seconds: float) -> bytes:
        self._sock.settimeout(seconds)
        data = self._sock.recv(1 << 16)
        if not data:
            raise OSError("the template ended")
        return data

    def close(self) -> None:
        sock, self._sock = self._sock, None
        process, self._process = self._process, None
        self._key = None
        if sock is not None:
            sock.close()  # the template ends when it reads the end of its socket
        if process is not None:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def template_env(env: dict[str, str]) -> dict[str, str]:
    """What of a kernel's environment the template starts with: all but what differs per notebook (its folders,
    its token, its limits' values that launch.py reads after the imports). Python reads PYTHONHASHSEED and
    PYTHONPATH at start, torch its threads and devices at import: those come from here."""
    per_notebook = ("GRADER_", "JPY_", "HOME", "MPLCONFIGDIR", "XDG_", "IPYTHONDIR", "PWD")
    return {k: v for k, v in env.items() if not k.startswith(per_notebook)} | {"GRADER_PUBLIC": "1"}


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
