"""What a kernel may write to this machine's disk: looked at a few times a second, the kernel ended past its cap.

Sandboxed, a kernel writes its files into size-limited memory; the one folder on disk it shares with the grading
process (sockets, the bridge's replies) is watched here. Without a sandbox its whole folder is.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

# The exchange folder (sandbox.EXCHANGE) holds the bridge's replies (wire.MAX_REPLY_BYTES) and the kernel's
# sockets: past these the kernel is ended.
EXCHANGE_BYTES = 96 * 2**20
EXCHANGE_ENTRIES = 256
FOLDER_ENTRIES = 10_000  # without a sandbox the kernel works in its folder on disk: its files, capped as a whole
WATCH_EVERY = 0.25  # seconds between two looks at what the kernel wrote


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


class DiskWatch(threading.Thread):
    """Looks at what a kernel wrote to this machine's disk every WATCH_EVERY seconds and ends the kernel when it
    passes `cap` bytes or `entries` files and folders (a file-count bomb counts too)."""

    def __init__(self, end: Callable[[str], None], folder: Path, cap: int, entries: int) -> None:
        super().__init__(daemon=True, name="grader-disk-watch")
        self.end, self.folder, self.cap, self.entries = end, folder, cap, entries
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
                self.end(f"the notebook wrote {what} to its folder on the grading machine's disk "
                         f"(at most {self.cap / 2**20:.0f} MiB and {self.entries} files)")
                return
