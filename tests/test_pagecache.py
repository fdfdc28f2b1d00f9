"""grader.course.pagecache: chapter 03's probe of which pages of a memory-mapped file get_batch read."""
import sys

import numpy as np
import pytest
import torch

from grader.course import pagecache
from grader.scenarios import memory as memory_scenario

LENGTH, BATCH, CONTEXT = 2**23, 8, 32


def windows(data, batch_size, context_length, device):
    """Reads only its windows: a page or two each."""
    starts = torch.randint(len(data) - context_length, (batch_size,)).tolist()
    x = torch.stack([torch.from_numpy(data[s:s + context_length].astype(np.int64)) for s in starts])
    y = torch.stack([torch.from_numpy(data[s + 1:s + 1 + context_length].astype(np.int64)) for s in starts])
    return x.to(device), y.to(device)


def copies_it_all(data, batch_size, context_length, device):
    """The mistake the probe is for: np.array(data) reads every page of the file first."""
    return windows(np.array(data), batch_size, context_length, device)


def touched(probe: dict) -> int:
    if sys.platform == "win32":
        pytest.skip("Windows has neither /proc/self/smaps nor mincore: no page can be counted")
    assert probe["pages"], "neither /proc/self/smaps nor mincore answered on Linux or macOS"
    return max(probe["pages"].values())


def test_a_windowed_read_touches_few_pages_and_a_copy_all_of_them():
    """Catches a probe that counts the whole file (or nothing) whatever get_batch read."""
    few = pagecache.pages_read(windows, LENGTH, BATCH, CONTEXT, 0)
    assert few["file_pages"] == LENGTH * 2 // pagecache._PAGE and few["shapes"] == ((BATCH, CONTEXT),) * 2
    assert touched(few) < few["file_pages"] // 4
    everything = pagecache.pages_read(copies_it_all, LENGTH, BATCH, CONTEXT, 0)
    assert touched(everything) == everything["file_pages"] and everything["numpy_peak"] >= LENGTH * 2


def test_the_notebook_and_the_grading_scenario_probe_alike():
    """The scenario keeps its own copy of the probe (it may import nothing of the grader): catches the two
    drifting apart."""
    for fn in (windows, copies_it_all):
        ours = pagecache.pages_read(fn, LENGTH, BATCH, CONTEXT, 0)
        theirs = memory_scenario.pages_read(fn, LENGTH, BATCH, CONTEXT, 0)
        assert ours["pages"].keys() == theirs["pages"].keys() and ours["shapes"] == theirs["shapes"]
        assert (touched(ours) < ours["file_pages"] // 4) == (touched(theirs) < theirs["file_pages"] // 4)
        assert {k: ours[k] for k in ("file_pages", "file_bytes")} == {k: theirs[k] for k in ("file_pages", "file_bytes")}
