"""grader/quickseed.py: torch.manual_seed formats no stack for the accelerators this torch was built without, and
seeds exactly as before."""
from __future__ import annotations

import traceback

import pytest
import torch
import torch.mtia
import torch.xpu

import grader  # noqa: F401  (importing the grader makes the change)
from grader.quickseed import _NO_STACK, skip_unread_stacks

BUILT = {"torch.cuda": torch.backends.cuda.is_built(), "torch.xpu": torch.xpu._is_compiled(),
         "torch.mtia": torch.mtia._is_compiled()}


def test_only_the_backends_this_torch_lacks_lose_their_stacks():
    """A torch built with CUDA keeps the stack it queues (where a GPU may start later and report it)."""
    for name, built in BUILT.items():
        module = {"torch.cuda": torch.cuda, "torch.xpu": torch.xpu, "torch.mtia": torch.mtia}[name]
        assert (module.traceback is traceback) == built, name
        assert (module.traceback is _NO_STACK) == (not built), name
    assert skip_unread_stacks() == []  # done once, at import: nothing left to change


@pytest.mark.skipif(all(BUILT.values()), reason="this torch is built with every backend: nothing is skipped")
def test_manual_seed_formats_no_stack_and_draws_as_a_seeded_generator(monkeypatch):
    """The saving (a stack formatted per unbuilt backend per call, 0.5 to 2 ms) is gone; the draws are torch's."""
    formatted = []
    monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: formatted.append(1) or [])
    for seed in (0, 3, 2**40 + 7):
        torch.manual_seed(seed)
        drawn = torch.rand(5)
        assert torch.equal(drawn, torch.rand(5, generator=torch.Generator().manual_seed(seed)))
    expected_calls = 3 * sum(BUILT.values())  # the built backends still format theirs
    assert len(formatted) == expected_calls
    assert torch.initial_seed() == 2**40 + 7
