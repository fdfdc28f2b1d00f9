"""What each rank of a chapter 10 training run did, recorded by the model itself, for the ddp_train checks.

While the environment names a folder in RECORD_ENV (the ddp_train scenario sets it; spawned ranks inherit
it), every model `grader.course.distributed.toy_model` builds records each training forward (gradients on) there:
the rows it received, its weights at that moment, its rank and whether a process group was up. The check
reads which rows each rank trained on, and from consecutive weights which step each rank took, whatever
wrapped the model (DistributedDataParallel, gradients averaged by hand, SGD written out).
"""
from __future__ import annotations

import itertools
import os
from typing import Any

import torch
from torch import nn

__all__ = ["RECORD_ENV", "ForwardRecorder", "record_if_asked"]

RECORD_ENV = "GRADER_DDP_RECORD"  # the scenario (which may not import grader) spells it out too
_files = itertools.count()


def _rank_world_group() -> tuple[int, int, bool]:
    """This process's rank and world size (the process group's, else launch's environment, else -1), and
    whether a process group is up."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), True
    return int(os.environ.get("RANK", -1)), int(os.environ.get("WORLD_SIZE", -1)), False


class ForwardRecorder:
    """A forward pre-hook: appends the input rows and weights to this process's record, rewritten whole
    (atomically) each time so that it is complete whenever the worker ends. A class, not a closure, so
    that a model pickled into a rank keeps recording there (in a file of that process)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.pid = -1
        self.path = ""
        self.record: dict[str, Any] = {}

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if not torch.is_grad_enabled():  # evaluation, not training
            return
        if self.pid != os.getpid():  # the first forward in this process
            self.pid = os.getpid()
            self.path = os.path.join(self.folder, f"{self.pid}-{next(_files)}.pt")
            self.record = {"pid": self.pid, "x": [], "params": [], "rank": [], "world": [], "group": []}
        x = args[0] if args else next(iter(kwargs.values()), None)
        rank, world, group = _rank_world_group()
        r = self.record
        r["x"].append(x.detach().cpu().clone() if isinstance(x, torch.Tensor) else None)
        r["params"].append({n: p.detach().cpu().clone() for n, p in module.named_parameters()})
        r["rank"].append(rank)
        r["world"].append(world)
        r["group"].append(group)
        torch.save(r, self.path + ".tmp")
        os.replace(self.path + ".tmp", self.path)


def record_if_asked(model: nn.Module) -> nn.Module:
    """Make `model` record its training forwards when RECORD_ENV names a folder; the model either way."""
    folder = os.environ.get(RECORD_ENV)
    if folder:
        model.register_forward_pre_hook(ForwardRecorder(folder), with_kwargs=True)
    return model
