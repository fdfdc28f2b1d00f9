"""Kernels started ahead (grader/autograde/warm.py): one is started only when a notebook will come for it, and the
one started is the next notebook's, alive and waiting."""
from __future__ import annotations

from grader.autograde.kernel import Limits
from grader.autograde.warm import Ahead


def test_a_kernel_is_started_ahead_only_when_a_notebook_will_come(tmp_path):
    """Caught: a spare kernel started after the last notebook of a worker (a run of one notebook, Gradescope's,
    started two kernels and ended one unused)."""
    ahead = Ahead()
    ahead.enabled = True
    limits = Limits(cell_timeout=5, check_timeout=5)
    try:
        ahead.wanted = False
        ahead.prepare(limits, None, tmp_path)
        assert ahead.take(limits, None) is None and list(tmp_path.iterdir()) == []
        ahead.wanted = True
        ahead.prepare(limits, None, tmp_path)
        taken = ahead.take(limits, None)
        assert taken is not None
        kernel, top = taken
        try:
            assert kernel.alive() and top.parent == tmp_path
        finally:
            kernel.close()
    finally:
        ahead.close()
