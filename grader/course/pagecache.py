"""Which pages of a memory-mapped file a function read: chapter 03 shows that get_batch reads a window, not the file.

`pages_read` maps a sparse file (`length` uint16 tokens of holes: no disk used, no page of it in memory yet)
with MADV_RANDOM (no read-ahead), calls `get_batch` once on it, and counts the file's pages now in memory,
which are the pages the call touched, two ways:

* the mapping's resident pages in /proc/self/smaps (Linux): reads through the memmap, numpy or torch;
* the file's pages in the page cache (mincore, Linux and macOS): reads of the file by its name too;

and the peak of numpy's allocations during the call (tracemalloc), which shows whole copies such as
np.array(data). The chapter 03 grading scenario (grader/scenarios/memory.py) runs the same probe from its
own copy, because a scenario may import nothing of the grader.
"""
from __future__ import annotations

import mmap
import os
import random
import shutil
import sys
import tempfile
import tracemalloc
from typing import Any, Callable

import numpy as np
import torch

__all__ = ["pages_read"]

_PAGE = mmap.PAGESIZE

try:  # mincore(2) through ctypes; absent on Windows
    import ctypes

    _mincore = ctypes.CDLL(None, use_errno=True).mincore
    _mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    _mincore.restype = ctypes.c_int
except (ImportError, OSError, AttributeError, TypeError):
    _mincore = None


def _sparse_memmap(folder: str, length: int) -> np.memmap:
    """A read-only uint16 memmap of a file of `length` tokens that are all holes, read ahead of nothing."""
    path = os.path.join(folder, "tokens.bin")
    with open(path, "wb") as f:
        f.truncate(2 * length)  # a sparse file: it costs no disk, and none of its pages is in memory
    data = np.memmap(path, dtype=np.uint16, mode="r")
    if hasattr(mmap, "MADV_RANDOM"):
        try:
            data._mmap.madvise(mmap.MADV_RANDOM)  # fault in only the pages touched, no read-ahead
        except (AttributeError, OSError, ValueError):
            pass
    return data


def _smaps_pages(address: int) -> int | None:
    """Resident pages of the mapping that holds `address` (Linux), else None."""
    try:
        with open("/proc/self/smaps") as f:
            inside = False
            for line in f:
                head = line.split(None, 1)[0] if line.strip() else ""
                if "-" in head and not head.endswith(":"):
                    low, high = (int(v, 16) for v in head.split("-"))
                    inside = low <= address < high
                elif inside and head == "Rss:":
                    return int(line.split()[1]) * 1024 // _PAGE
    except (OSError, ValueError):
        return None
    return None


def _cached_pages(address: int, nbytes: int) -> int | None:
    """Pages of the mapped range in the page cache (mincore), else None."""
    if _mincore is None:
        return None
    pages = (nbytes + _PAGE - 1) // _PAGE
    vec = (ctypes.c_ubyte * pages)()
    if _mincore(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), vec) != 0:
        return None
    return sum(v & 1 for v in vec)


def pages_read(get_batch: Callable, length: int, batch_size: int, context_length: int,
               seed: int) -> dict[str, Any]:
    """One `get_batch(data, batch_size, context_length, "cpu")` call on a memmap of `length` tokens: the file's
    pages it touched by each method that works here ("pages"), the file's size in pages and bytes, the peak
    bytes numpy allocated during the call, and the shapes of the (x, y) it returned."""
    folder = tempfile.mkdtemp(prefix="grader-memmap-")
    try:
        data = _sparse_memmap(folder, length)
        address, nbytes = data.ctypes.data, data.nbytes
        torch.manual_seed(seed)  # whichever generator get_batch draws from, as the grading scenario seeds
        np.random.seed(seed % 2**32)
        random.seed(seed)
        tracing = tracemalloc.is_tracing()
        if tracing:
            tracemalloc.reset_peak()
        else:
            tracemalloc.start()
        try:
            x, y = get_batch(data, batch_size, context_length, "cpu")
            numpy_peak = tracemalloc.get_traced_memory()[1]
        finally:
            if not tracing:
                tracemalloc.stop()
        pages = {"mapping": _smaps_pages(address) if sys.platform.startswith("linux") else None,
                 "page cache": _cached_pages(address, nbytes)}
        shapes = (tuple(x.shape), tuple(y.shape))
        del data, x, y
        return {"pages": {k: v for k, v in pages.items() if v is not None},
                "file_pages": (nbytes + _PAGE - 1) // _PAGE, "file_bytes": nbytes,
                "numpy_peak": numpy_peak, "shapes": shapes}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
