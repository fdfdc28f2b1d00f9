"""Chapter 03 scenarios: get_batch on a real np.memmap, built here from plain inputs.

A memmap cannot cross to the grading process, so the file and the memmap are made where the student's
function runs, the batches come back as data, and the file is removed. For the "never read the whole
file" check the memmap covers a large sparse file (no disk used) and the scenario counts the page
faults the call caused: a batch touches a few pages, reading everything touches all of them.
"""
import os
import resource
import shutil
import tempfile

import numpy as np
import torch

_manual_seed = torch.manual_seed
_np_seed = np.random.seed


def _memmap(folder, tokens=None, length=None):
    path = os.path.join(folder, "tokens.bin")
    if tokens is not None:
        np.asarray(tokens, dtype=np.uint16).tofile(path)
    else:
        with open(path, "wb") as f:
            f.truncate(2 * length)  # a sparse file: reading it costs memory and time, storing it nothing
    return np.memmap(path, dtype=np.uint16, mode="r")


def batches(get_batch, tokens, batch_size, context_length, draws, seed, device="cpu"):
    """get_batch called `draws` times on a memmap of `tokens`: the (x, y) pairs, or the error it raised."""
    folder = tempfile.mkdtemp(prefix="grader-memmap-")
    try:
        data = _memmap(folder, tokens)
        _manual_seed(seed)
        _np_seed(seed % 2**32)
        out = [get_batch(data, batch_size, context_length, device) for _ in range(draws)]
        del data
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def pages_touched(get_batch, length, batch_size, context_length, seed):
    """Page faults one get_batch call on a memmap of `length` tokens caused (whole reads fault on every page)."""
    folder = tempfile.mkdtemp(prefix="grader-memmap-")
    try:
        data = _memmap(folder, length=length)
        _manual_seed(seed)
        _np_seed(seed % 2**32)
        before = resource.getrusage(resource.RUSAGE_SELF)
        x, y = get_batch(data, batch_size, context_length, "cpu")
        after = resource.getrusage(resource.RUSAGE_SELF)
        shapes = (tuple(x.shape), tuple(y.shape))
        del data, x, y
        return {"faults": (after.ru_minflt - before.ru_minflt) + (after.ru_majflt - before.ru_majflt),
                "file_pages": 2 * length // resource.getpagesize(), "shapes": shapes}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
