"""The course's grader: exercise checks, and the course library (timing, device specs, memory) in grader.course.

In a notebook, right after an exercise:  grader.check("tensors.same_storage", same_storage)
A cell that uses an exercise starts with  %%needs same_storage  (it waits until the exercise is written).
"""
import sys as _sys

# jsonschema, which nbformat imports, imports rfc3987_syntax where it is installed (jupyter-events' format extra
# brings it), and that builds a Lark parser on import: a CPU-second in every process that reads a notebook, and a
# grading run or a test suite starts hundreds. Nothing here checks the "iri" formats it serves; without it,
# jsonschema leaves them unchecked (tests/test_collect.py: reading a notebook imports no such parser).
_sys.modules.setdefault("rfc3987_syntax", None)

from grader import needs as _needs  # noqa: E402
from grader.notebook import check  # noqa: E402

try:  # imported now, before any student code runs, so the checks bind torch's own functions
    from grader.runner import run_exercise, run_namespace
    # The course library's public face (SPEC.md's grader.bench.time_fn, grader.specs.peak_flops): the notebooks'
    # `from grader import bench, specs`; the modules live in grader.course, apart from checking and grading.
    from grader.course import bench, memtrack, specs
    from grader.quickseed import skip_unread_stacks as _skip_unread_stacks

    _skip_unread_stacks()  # torch.manual_seed 100 times cheaper on a machine without CUDA (grader/quickseed.py)
except ModuleNotFoundError as _missing:  # a bare Python running `python -m grader lab`, which installs them
    if (_missing.name or "grader").split(".")[0] == "grader":
        raise
    _WHY = f"{_missing.name}, which this Python lacks (`python -m grader lab` sets up the course)"

    def __getattr__(name: str):
        """Say why the checks are unavailable instead of a bare AttributeError."""
        if name in ("run_exercise", "run_namespace", "bench", "memtrack", "specs"):
            raise ImportError(f"grader.{name} needs {_WHY}")
        raise AttributeError(f"module 'grader' has no attribute {name!r}")

_needs.register()  # the %%needs cell magic, when imported in IPython

__all__ = ["check", "run_exercise", "run_namespace", "bench", "memtrack", "specs"]
