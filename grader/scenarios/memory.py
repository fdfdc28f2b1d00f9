"""Chapter 03 scenarios: get_batch on a real np.memmap, built here from plain inputs.

A memmap cannot cross to the grading process, so the file and the memmap are made where the student's
function runs, what the function returned comes back as data, and the file is removed.

`pages_read` answers "did get_batch read the whole file?" without a large file or a large allocation.
The memmap covers a sparse file (16 MiB of holes: no disk used, no page of it in memory yet) mapped with
MADV_RANDOM (no read-ahead), so after the call the pages of the file that are in memory are the pages
the call touched. It counts them three ways and reports the largest:

* the mapping's resident pages in /proc/self/smaps (Linux): reads through the memmap, numpy or torch;
* the file's pages in the page cache (mincore, Linux and macOS): reads of the file by its name too;
* the peak of numpy's allocations during the call (tracemalloc): whole copies such as np.array(data).

A batch touches a page or two per window; reading everything touches all 4096.

The notebook shows the same probe from the course library (grader/course/pagecache.py). This module keeps its
own copy of it because a scenario's source is installed alone in the grading kernel and may import nothing
of the grader (grader/scenarios/__init__.py); a change to one is a change to both.
"""
import mmap
import os
import random
import shutil
import sys
import tempfile
import tracemalloc

import numpy as np
import torch

_manual_seed = torch.manual_seed
_np_seed = np.random.seed
_py_seed = random.seed
_memmap_cls = np.memmap
_tracing, _trace_start, _trace_stop = tracemalloc.is_tracing, tracemalloc.start, tracemalloc.stop
_traced, _reset_peak = tracemalloc.get_traced_memory, tracemalloc.reset_peak
_PAGE = mmap.PAGESIZE

try:  # mincore(2) through ctypes; absent on Windows
    import ctypes

    _libc = ctypes.CDLL(None, use_errno=True)
    _mincore = _libc.mincore
    _mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    _mincore.restype = ctypes.c_int
except (ImportError, OSError, AttributeError, TypeError):
    _mincore = None


def _seed(seed):
    _manual_seed(seed)
    _np_seed(seed % 2**32)
    _py_seed(seed)


def _memmap(folder, tokens=None, length=None):
    path = os.path.join(folder, "tokens.bin")
    if tokens is not None:
        np.asarray(tokens, dtype=np.uint16).tofile(path)
    else:
        with open(path, "wb") as f:
            f.truncate(2 * length)  # a sparse file: it costs no disk, and none of its pages is in memory
    data = _memmap_cls(path, dtype=np.uint16, mode="r")
    if tokens is None and hasattr(mmap, "MADV_RANDOM"):
        try:
            data._mmap.madvise(mmap.MADV_RANDOM)  # fault in only the pages touched, no read-ahead
        except (AttributeError, OSError, ValueError):
            pass
    return data


def _smaps_pages(address):
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


def _cached_pages(address, nbytes):
    """Pages of the mapped range in the page cache (mincore), else None."""
    if _mincore is None:
        return None
    pages = (nbytes + _PAGE - 1) // _PAGE
    vec = (ctypes.c_ubyte * pages)()
    if _mincore(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), vec) != 0:
        return None
    return sum(v & 1 for v in vec)


def batches(get_batch, tokens, batch_size, context_length, draws, seed, device="cpu"):
    """get_batch called `draws` times on a memmap of `tokens`: the (x, y) pairs it returned."""
    folder = tempfile.mkdtemp(prefix="grader-memmap-")
    try:
        data = _memmap(folder, tokens)
        _seed(seed)
        out = [get_batch(data, batch_size, context_length, device) for _ in range(draws)]
        del data
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _pinned_as_is(tensor, *args, **kwargs):
    """pin_memory while the meta device stands for an accelerator: the tensor itself, on every grading machine (a
    machine without one refuses to pin, one with a GPU pins: the grade would depend on the machine)."""
    return tensor


def layout(get_batch, tokens, batch_size, context_length, device, seed):
    """One get_batch call: type, dtype, shape and device of each thing it returned (for devices such as
    'meta', whose tensors cannot come back as data). Pinning host memory, the step before an asynchronous copy to
    an accelerator, is a no-op here."""
    folder = tempfile.mkdtemp(prefix="grader-memmap-")
    pin = torch.Tensor.pin_memory
    try:
        data = _memmap(folder, tokens)
        _seed(seed)
        torch.Tensor.pin_memory = _pinned_as_is
        try:
            out = get_batch(data, batch_size, context_length, device)
        finally:
            torch.Tensor.pin_memory = pin
        del data
        if type(out) not in (tuple, list):
            return {"type": type(out).__name__, "items": None}
        items = [{"type": type(t).__name__, "dtype": str(getattr(t, "dtype", None)),
                  "shape": tuple(t.shape) if isinstance(t, torch.Tensor) else None,
                  "device": str(t.device) if isinstance(t, torch.Tensor) else None} for t in out]
        del out
        return {"type": "tuple", "items": items}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def pages_read(get_batch, length, batch_size, context_length, seed):
    """What one get_batch call on a memmap of `length` tokens read: pages of the file touched, by each
    method that works here, and the peak bytes numpy allocated during the call."""
    folder = tempfile.mkdtemp(prefix="grader-memmap-")
    try:
        data = _memmap(folder, length=length)
        address, nbytes = data.ctypes.data, data.nbytes
        _seed(seed)
        tracing = _tracing()
        if tracing:
            _reset_peak()
        else:
            _trace_start()
        try:
            x, y = get_batch(data, batch_size, context_length, "cpu")
            numpy_peak = _traced()[1]
        finally:
            if not tracing:
                _trace_stop()
        pages = {"mapping": _smaps_pages(address) if sys.platform.startswith("linux") else None,
                 "page cache": _cached_pages(address, nbytes)}
        shapes = (tuple(x.shape), tuple(y.shape))
        del data, x, y
        return {"pages": {k: v for k, v in pages.items() if v is not None},
                "file_pages": (nbytes + _PAGE - 1) // _PAGE, "file_bytes": nbytes,
                "numpy_peak": numpy_peak, "shapes": shapes}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
