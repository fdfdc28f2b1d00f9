"""Kernels started ahead: while a worker grades one notebook, it starts the kernel for its next one, which
confines itself, imports torch and ipykernel, and then waits. When the next notebook comes, its files are put
in that kernel's folder and it goes on: the second or two of a kernel's start is spent while the last notebook
ran, not while this one waits. Each kernel is still fresh, sandboxed and for one notebook only.

Only grading workers start kernels ahead (`enable`, from cohort.py): a test or a tool that grades one notebook
starts its kernel when it needs it.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
from multiprocessing.util import Finalize
from pathlib import Path

from grader.autograde.kernel import Limits, NotebookKernel
from grader.autograde.sandbox import Isolation


class Ahead:
    """At most one kernel started ahead, for the next notebook graded with the same limits and isolation."""

    def __init__(self) -> None:
        self.enabled = False
        self.wanted = True    # whether a next notebook will come to this worker (cohort._run says, per notebook)
        self._spare: NotebookKernel | None = None
        self._key: tuple | None = None
        self._root: Path | None = None

    def enable(self) -> None:
        """In a grading worker: start kernels ahead, and end the one left waiting when the worker exits (a pool's
        worker leaves through multiprocessing's own exit, which runs its finalizers, not atexit's)."""
        self.enabled = True
        Finalize(self, Ahead.close, args=(self,), exitpriority=10)
        atexit.register(self.close)

    def prepare(self, limits: Limits, isolation: Isolation | None, root: Path) -> None:
        """Start the next notebook's kernel under `root` (the run's scratch folder), unless one waits already."""
        if not self.enabled or not self.wanted or self._spare is not None:
            return
        top = Path(tempfile.mkdtemp(prefix="nb-", dir=root))
        top.chmod(0o711)  # a kernel user passes through to its own folder
        folder = top / "run"
        (folder / "notebooks").mkdir(parents=True)
        kernel = NotebookKernel([], folder / "notebooks", limits, isolation=isolation, folder=folder)
        try:
            kernel.launch(ahead=True)
        except Exception:  # no kernel ahead: the next notebook starts its own, as before
            kernel.close()
            shutil.rmtree(top, ignore_errors=True)
            return
        self._spare, self._key, self._root = kernel, (limits, isolation), top

    def take(self, limits: Limits, isolation: Isolation | None) -> tuple[NotebookKernel, Path] | None:
        """The kernel started ahead and the folder that holds it (the caller removes it), if it suits and lives."""
        spare, key, top = self._spare, self._key, self._root
        self._spare = self._key = self._root = None
        if spare is None:
            return None
        if key == (limits, isolation) and spare.alive():
            return spare, top
        spare.close()
        shutil.rmtree(top, ignore_errors=True)
        return None

    def close(self) -> None:
        taken = self.take(None, None)  # type: ignore[arg-type]  (matches nothing: ends it)
        if taken is not None:
            kernel, top = taken
            kernel.close()
            shutil.rmtree(top, ignore_errors=True)


AHEAD = Ahead()
