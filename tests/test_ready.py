"""When a grading kernel is ready (grader/autograde/ready.py): on a real kernel, and on channels that lose the
status a kernel published before the subscription reached it (simulated: a slow joiner cannot be made to happen
at will)."""
from __future__ import annotations

import asyncio
from queue import Empty

import pytest

from grader.autograde import ready
from grader.autograde.launcher import GradingKernelManager
from grader.autograde.ready import ReadyClient


async def _ready_then_print(km: GradingKernelManager) -> list[dict]:
    """Start a real kernel, wait until it is ready, run one print; every IOPub message read after ready."""
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
        msg_id = kc.execute("print('hi')")
        seen = []
        while not (seen and seen[-1]["msg_type"] == "status" and seen[-1]["content"]["execution_state"] == "idle"
                   and seen[-1]["parent_header"].get("msg_id") == msg_id):
            seen.append(await kc.get_iopub_msg(timeout=30))
        return [dict(m, sent=msg_id) for m in seen]
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


def test_a_real_kernel_is_ready_with_iopub_live_and_nothing_stale_left(tmp_path):
    """Caught: returning on the shell's reply alone (its status messages would still wait on IOPub, read as if
    they were the first cell's), and a client that is not ReadyClient (the 0.2 s wait for silence is back)."""
    km = GradingKernelManager(transport="ipc", ip=str(tmp_path / "k"))
    assert km.client_factory is ReadyClient
    seen = asyncio.run(_ready_then_print(km))
    sent = seen[0]["sent"]
    assert all(m["parent_header"].get("msg_id") == sent for m in seen), [(m["msg_type"], m["content"]) for m in seen]
    assert seen[0]["msg_type"] == "status" and seen[0]["content"]["execution_state"] == "busy"
    assert any(m["msg_type"] == "stream" and m["content"]["text"] == "hi\n" for m in seen)


class _Channel:
    """A channel that hands out queued messages, or raises Empty (as jupyter_client's does on a timeout)."""

    def __init__(self) -> None:
        self.queue: list[dict] = []
        self.waited: list[float] = []

    async def get_msg(self, timeout: float) -> dict:
        self.waited.append(timeout)
        if not self.queue:
            raise Empty
        return self.queue.pop(0)


def _status(state: str, parent: str) -> dict:
    return {"msg_type": "status", "content": {"execution_state": state}, "parent_header": {"msg_id": parent}}


class _Kernel(ReadyClient):
    """ReadyClient over simulated channels: request i is answered; its IOPub status is lost while `joined` is
    False (published before the subscription reached the kernel), delivered after."""

    def __init__(self, lost: int, alive: bool = True) -> None:
        self.shell, self.iopub, self.lost, self.sent, self.alive = _Channel(), _Channel(), lost, 0, alive
        self.info: dict | None = None

    shell_channel = property(lambda self: self.shell)
    iopub_channel = property(lambda self: self.iopub)

    def kernel_info(self) -> str:
        self.sent += 1
        msg_id = f"info-{self.sent}"
        if not self.alive:
            return msg_id
        self.shell.queue.append({"msg_type": "kernel_info_reply", "parent_header": {"msg_id": msg_id},
                                 "content": {}})
        if self.sent > self.lost:
            self.iopub.queue += [_status("busy", msg_id), _status("idle", msg_id)]
        return msg_id

    async def _async_is_alive(self) -> bool:
        return self.alive

    def _handle_kernel_info_reply(self, msg: dict) -> None:
        self.info = msg


@pytest.mark.parametrize("lost", [0, 1, 3])
def test_a_lost_status_sends_the_request_again_until_one_arrives(lost):
    """Caught: trusting the first reply when IOPub brought nothing (the subscription was not live yet)."""
    kc = _Kernel(lost)
    asyncio.run(kc.wait_for_ready(timeout=60))
    assert kc.sent == lost + 1
    assert kc.info is not None and kc.info["parent_header"]["msg_id"] == f"info-{lost + 1}"
    assert kc.iopub.queue == [] and kc.shell.queue == []  # nothing from before is left to be read as new
    # silence is waited for only where a status was lost, never once the kernel is known ready
    assert kc.iopub.waited.count(ready.IOPUB_PATIENCE) == lost + 2


def test_a_dead_kernel_or_the_deadline_ends_the_wait():
    with pytest.raises(RuntimeError, match="died"):
        asyncio.run(_Kernel(0, alive=False).wait_for_ready(timeout=60))
    with pytest.raises(RuntimeError, match="didn't respond"):
        asyncio.run(_Kernel(10**9).wait_for_ready(timeout=0))
