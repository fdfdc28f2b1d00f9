"""When a started grading kernel is ready: it answered kernel_info, and IOPub brought the `idle` status of the last
kernel_info request sent, so the subscription is live and nothing the kernel sent before can still be on its way
(each request is answered in turn; the shell's reply to the last one is read too).

jupyter_client's own wait ends by reading IOPub until 0.2 s pass without a message: 0.2 s of every notebook's
start spent idle, a tenth of what grading a notebook costs. The last request's idle status says the same without
waiting for silence.
"""
from __future__ import annotations

import time
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.utils import ensure_async

# How long IOPub may stay silent while the last request's status is awaited before a request is sent again
# (a subscription made after the kernel published is the case jupyter_client's own wait retries on, after 0.2 s).
IOPUB_PATIENCE = 0.2


class ReadyClient(AsyncKernelClient):
    """A kernel client whose `wait_for_ready` returns as soon as the kernel is known to be ready."""

    async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
        """Send kernel_info until one is answered; then wait for the last request's idle status on IOPub and its
        reply on the shell channel (each request is answered in turn), so that neither channel holds a message
        from before. A status that does not come means IOPub was not live yet: the request is sent again."""
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            last = self.kernel_info()
            try:
                reply = await ensure_async(self.shell_channel.get_msg(timeout=1))
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply" and await self._idle(last, deadline):
                reply = await self._reply(last, reply)
                if reply is not None:
                    self._handle_kernel_info_reply(reply)
                    return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")

    async def _reply(self, request: str, reply: dict) -> dict | None:
        """The reply to `request`: `reply` or one read after it (None if it does not come within a second)."""
        while reply["parent_header"].get("msg_id") != request:
            try:
                reply = await ensure_async(self.shell_channel.get_msg(timeout=1))
            except Empty:
                return None
        return reply

    async def _idle(self, request: str, deadline: float) -> bool:
        """Read IOPub until the idle status of `request` (True), or until it is silent for IOPUB_PATIENCE (False)."""
        while time.monotonic() <= deadline:
            try:
                msg = await ensure_async(self.iopub_channel.get_msg(timeout=IOPUB_PATIENCE))
            except Empty:
                return False
            if (msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle"
                    and msg["parent_header"].get("msg_id") == request):
                return True
        return False

    wait_for_ready = _async_wait_for_ready
