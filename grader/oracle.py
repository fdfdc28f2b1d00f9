"""Oracles worked out once per process: a grading worker checks every student at the same public and hidden
inputs, and an oracle that builds and runs a model for them (chapter 04's FlopCounterMode counts, chapter 03's
saved tensors, measured training step and KV cache) gives the same answer each time."""
from __future__ import annotations

import copy
import functools
from typing import Any, Callable, TypeVar

import torch

_fork_rng = torch.random.fork_rng  # bound at import, as the checks bind what they call
Answer = TypeVar("Answer")


def once_per_process(oracle: Callable[..., Answer]) -> Callable[..., Answer]:
    """`oracle(*args, **kwargs)`, computed at its first call with these arguments and copied out at every call. The
    oracle must depend on its arguments alone; it runs with torch's generator forked, so a check's later draws are
    the same whether the answer was computed or remembered (a grade never depends on who was graded before)."""
    @functools.wraps(oracle)
    def remembered(*args: Any, **kwargs: Any) -> Answer:
        key = (args, tuple(sorted(kwargs.items())))
        if key not in remembered.answers:
            with _fork_rng(devices=[]):
                remembered.answers[key] = oracle(*args, **kwargs)
        return copy.deepcopy(remembered.answers[key])

    remembered.answers = {}
    return remembered
