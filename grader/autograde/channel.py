"""The three ways the grader sends code to a running kernel, behind one guard (a time limit cut to what is left
of the notebook's time, a dead kernel reported as such):

* `execute`: a notebook cell, through nbclient (its outputs discarded as they arrive);
* `call`: code run silently on the shell channel, the grader's own short requests;
* `post`: a line on a FIFO the bridge's handler reads, answered on another (under 1 ms, no message at all).
"""
from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from queue import Empty
from typing import Any

import nbformat
from jupyter_client.blocking import BlockingKernelClient
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError


class Ended(StrEnum):
    """How sending code to the kernel ended (a StrEnum: it compares equal to its string)."""
    OK = "ok"
    ERROR = "error"          # the code raised: ename and evalue say what
    TIMEOUT = "timeout"      # past its time limit ("notebook" in evalue: the notebook's own time ran out)
    DEAD = "dead"            # the kernel died, or asked to exit
    SKIPPED = "skipped"      # never sent (the kernel was gone, or the notebook's time)


@dataclass
class Outcome:
    """How one execution ended, with the exception's name and text for an error."""
    status: Ended
    ename: str = ""
    evalue: str = ""


def _error(content: dict) -> Outcome:
    return Outcome(Ended.ERROR, str(content.get("ename", "")), str(content.get("evalue", ""))[:300])


class QuietClient(NotebookClient):
    """Keeps no outputs: grading never reads them, so a notebook printing gigabytes costs time, not memory."""

    def output(self, outs, msg, display_id, cell_index):  # noqa: D102
        return None


class Channel:
    """The connection to one started kernel: nbclient for cells, a second client for the grader's code, and the
    two FIFOs of its requests. `remaining()` is what is left of the notebook's time; `alive()` whether the kernel runs."""

    def __init__(self, client: QuietClient, fifo: str, requests: str, remaining: Callable[[], float],
                 alive: Callable[[], bool]) -> None:
        self.client, self.remaining, self.alive = client, remaining, alive
        self._reply: dict | None = None
        client.on_cell_executed = self._on_executed
        fast = BlockingKernelClient()
        fast.load_connection_info(client.km.get_connection_info())
        fast.start_channels(iopub=False, stdin=False, hb=False, control=False)
        self.fast = fast
        self.fifo_path, self.requests_path = fifo, requests
        self._fifo = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        self._requests: int | None = None  # opened once the kernel reads it (`open_requests`)
        self._buffer = b""

    def close(self) -> None:
        for fd in (self._fifo, self._requests):
            if fd is not None:
                os.close(fd)
        self._fifo = self._requests = None
        self.fast.stop_channels()

    def _on_executed(self, cell: Any, cell_index: int, execute_reply: dict) -> None:
        self._reply = execute_reply

    def _limit(self, timeout: float) -> float | Outcome:
        """The guard all three share: the time this send may take, or why it may not be sent at all."""
        timeout = min(timeout, self.remaining())
        return timeout if timeout > 0 else Outcome(Ended.TIMEOUT, "", "notebook")

    def execute(self, source: str, timeout: float) -> Outcome:
        """Run a notebook cell."""
        limit = self._limit(timeout)
        if isinstance(limit, Outcome):
            return limit
        client = self.client
        client.timeout = max(1, int(limit + 0.999))
        client.nb.cells[0] = cell = nbformat.v4.new_code_cell(source)
        self._reply = None
        try:
            client.execute_cell(cell, 0, store_history=False)
        except CellTimeoutError:
            return Outcome(Ended.TIMEOUT)
        except DeadKernelError:
            return Outcome(Ended.DEAD)
        content = (self._reply or {}).get("content", {})
        if any(p.get("source") == "ask_exit" and not p.get("keepkernel") for p in content.get("payload") or []):
            return Outcome(Ended.DEAD, "exit", "the cell asked the kernel to exit")  # exit() or quit(): it stops soon
        return _error(content) if content.get("status") == "error" else Outcome(Ended.OK)

    def call(self, source: str, timeout: float) -> Outcome:
        """Run code silently (no history, no outputs kept): the fast path for the grader's own requests."""
        limit = self._limit(timeout)
        if isinstance(limit, Outcome):
            return limit
        msg_id = self.fast.execute(source, silent=True, store_history=False, allow_stdin=False)
        deadline = time.monotonic() + limit
        while True:
            try:
                msg = self.fast.get_shell_msg(timeout=max(0.01, min(0.5, deadline - time.monotonic())))
            except Empty:
                if not self.alive():
                    return Outcome(Ended.DEAD)
                if time.monotonic() >= deadline:
                    return Outcome(Ended.TIMEOUT)
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            return _error(msg["content"]) if msg["content"].get("status") == "error" else Outcome(Ended.OK)

    @property
    def listening(self) -> bool:
        """Whether `post` can be used: `open_requests` was called."""
        return self._requests is not None

    def open_requests(self) -> None:
        """The kernel reads the requests FIFO now (the bridge's `listen`); `post` then uses it."""
        self._requests = os.open(self.requests_path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)

    def post(self, data: dict, timeout: float) -> Outcome:
        """Write a request line and wait until the kernel writes `data["n"]` to the FIFO."""
        if self._requests is None:
            return Outcome(Ended.DEAD, "", "the kernel reads no requests")
        limit = self._limit(timeout)
        if isinstance(limit, Outcome):
            return limit
        line = b"\0".join(os.fsencode(str(data[k])) for k in ("n", "op", "req", "resp")) + b"\n"
        if line.count(b"\n") != 1:  # a line per request: a temporary folder named with a line break cannot be sent
            return Outcome(Ended.ERROR, "BridgeError", f"a request's file name holds a line break: {data['req']!r}")
        try:
            os.write(self._requests, line)  # one short write: whole, or not at all
        except BlockingIOError:  # a kernel that has not read what came before
            return Outcome(Ended.TIMEOUT)
        want = f"{data['n']}".encode()
        deadline = time.monotonic() + limit
        while True:
            lines = self._buffer.split(b"\n")
            self._buffer = lines.pop()
            if want in lines:
                return Outcome(Ended.OK)
            left = deadline - time.monotonic()
            if left <= 0:
                return Outcome(Ended.TIMEOUT)
            ready, _, _ = select.select([self._fifo], [], [], min(0.5, left))
            chunk = os.read(self._fifo, 4096) if ready else b""
            if chunk:
                self._buffer += chunk
            elif not self.alive():
                return Outcome(Ended.DEAD)
            elif ready:  # no writer yet, or it closed: nothing to wait on but the clock
                time.sleep(0.005)
