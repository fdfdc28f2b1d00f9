"""Scenarios, one module per chapter: the kernel-side half of checks on live objects (see grader/scenario.py).

Each module is self-contained (torch, numpy and the standard library only) because when grading its
source is installed in the student's kernel before any student code runs.
"""
