"""`python -m grader ARGS` run in the test's own process, for commands that grade nothing new.

A new interpreter costs about 2 s of CPU before the command does anything (torch and the checks are imported);
a re-run that reuses OUT's records, or a run that stops on a bad argument before grading, does little else.
Such runs go through the same `grader.__main__.main` here. A run that would start grading workers fails
instead: forking the test process is not what `make grade` does, so that run belongs in a subprocess, unless
its workers start from a forkserver (what `make grade` does where torch is built with CUDA), which forks them
from a fresh process, never from this one.
"""
from __future__ import annotations

import contextlib
import io
import multiprocessing.forkserver
import subprocess

import pytest

from grader.__main__ import main
from grader.autograde import cohort


def _no_pool(*_args, **_kwargs):
    raise AssertionError("this run grades notebooks: run it as a subprocess (`python -m grader ...`), not in-process")


def _stop_forkserver() -> None:
    """End this process's forkserver, which the grading pool started with its own preload (torch alone). A process
    has one; left running, every later user in this pytest worker would fork from it, as `grader.course.distributed`
    does for each launch of ranks, which then import torch.distributed and torch._dynamo again, rank by rank."""
    multiprocessing.forkserver._forkserver._stop()


def run_grader(*args: str, forkserver: bool = False) -> subprocess.CompletedProcess:
    """`python -m grader *args` in this process: its exit status and what it printed, as subprocess.run gives.
    With `forkserver` it may grade, its workers started from a forkserver whatever this torch is built with."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        if forkserver:
            patch.setattr(cohort, "start_method", lambda: "forkserver")
        else:
            patch.setattr(cohort, "_pool", _no_pool)
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's own refusals
            code = e.code if isinstance(e.code, int) else 2
        finally:
            if forkserver:
                _stop_forkserver()
    return subprocess.CompletedProcess(["python", "-m", "grader", *args], code, out.getvalue(), err.getvalue())
