"""torch.manual_seed at the cost of the generators this torch has.

torch.manual_seed also seeds CUDA's, XPU's and MTIA's generators. Where one of those backends has not started, torch
queues the seed for its start together with the caller's stack formatted as text (traceback.format_stack, which
looks up every frame's source line): 0.5 to 2 ms a call, a hundred times the seeding itself, and a check that runs
an answer reseeding every layer reseeds thousands of times. A backend this torch was built without never starts,
so that text is never read: its module gets a traceback that formats none (the seeds are still queued, as torch
queues them). A torch built with the backend is left as it is."""
from __future__ import annotations

import traceback
import types

import torch

_NO_STACK = types.SimpleNamespace(format_stack=lambda *_args, **_kwargs: [])


def _unbuilt() -> list[types.ModuleType]:
    """The accelerator modules whose backend this torch was not built with."""
    import torch.mtia
    import torch.xpu

    built = {torch.cuda: torch.backends.cuda.is_built(), torch.xpu: torch.xpu._is_compiled(),
             torch.mtia: torch.mtia._is_compiled()}
    return [module for module, has in built.items() if not has]


def skip_unread_stacks() -> list[str]:
    """Stop formatting the stacks torch queues for backends it was built without; the modules changed."""
    changed = []
    for module in _unbuilt():
        if getattr(module, "traceback", None) is traceback:
            module.traceback = _NO_STACK
            changed.append(module.__name__)
    return changed
