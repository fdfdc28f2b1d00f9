"""The course's grader: exercise checks, timing, and device specs.

In a notebook, right after an exercise:  grader.check("tensors.same_storage", same_storage)
A cell that uses an exercise starts with  %%needs same_storage  (it waits until the exercise is written).
"""
from grader import needs as _needs
from grader.notebook import check
from grader.runner import run_exercise, run_namespace

_needs.register()  # the %%needs cell magic, when imported in IPython

__all__ = ["check", "run_exercise", "run_namespace"]
