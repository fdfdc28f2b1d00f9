"""The course's grader: exercise checks, timing, and device specs.

In a notebook, right after an exercise:  grader.check("tensors.same_storage", same_storage)
"""
from grader.notebook import check
from grader.runner import run_exercise, run_namespace

__all__ = ["check", "run_exercise", "run_namespace"]
