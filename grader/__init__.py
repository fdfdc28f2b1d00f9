"""The course's grader: exercise checks, and the course library (timing, device specs, memory) in grader.course.

In a notebook, right after an exercise:  grader.check("tensors.same_storage", same_storage)
A cell that uses an exercise starts with  %%needs same_storage  (it waits until the exercise is written).
"""
from grader import needs as _needs
from grader.notebook import check

try:  # imported now, before any student code runs, so the checks bind torch's own functions
    from grader.runner import run_exercise, run_namespace
    # The course library's public face (SPEC.md's grader.bench.time_fn, grader.specs.peak_flops): the notebooks'
    # `from grader import bench, specs`; the modules live in grader.course, apart from checking and grading.
    from grader.course import bench, memtrack, specs
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
