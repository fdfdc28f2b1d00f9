"""What each rank of a chapter 10 training run did, recorded by the model itself, for the ddp_train checks.

While the environment names a folder in RECORD_ENV (the ddp_train scenario sets it; spawned ranks inherit
it), every model `grader.course.distributed.toy_model` builds records its training (gradients on) there, per
process:
- at each forward of the whole model: the rows it received, its weights at that moment, its rank, whether a
  process group was up, how many collectives that group had run so far, and how many floating-point numbers this
  process's collectives had carried (from torch's flight recorder, which the ddp_train scenario turns on);
- at each forward of each layer with parameters: the rows that layer received and the FLOPs it did (a forward that
  calls the layers one by one, or calls the model once more, shows here);
- at each backward: the gradient that reached each parameter, before any communication (a hook on the parameter
  runs before DistributedDataParallel's all-reduce, and before anything is added to .grad);
- and, in a process group of several ranks, the mark that hook added to that gradient: random numbers (from a
  generator seeded afresh in each process) that only this rank's .grad and what it sends carry onward. The average
  a rank steps with must hold the mean of the ranks' marks: a gradient it worked out another way (on copies of the
  weights, every rank can build every row) holds none, whatever its collectives carried.
The checks read which rows each rank trained on, how much each rank computed, the gradient of its own rows, and
from consecutive weights which step it took, whatever wrapped the model (DistributedDataParallel, gradients
averaged by hand, SGD written out).
"""
from __future__ import annotations

import itertools
import math
import os
import pickle
from typing import Any

import torch
from torch import nn

__all__ = ["RECORD_ENV", "ForwardRecorder", "record_if_asked"]

RECORD_ENV = "GRADER_DDP_RECORD"  # the scenario (which may not import grader) spells it out too
_files = itertools.count()
_FLOATS = {"Float", "Double", "Half", "BFloat16"}  # the flight recorder's names of floating-point dtypes
MARK_SCALE = 0.02  # the marks' spread: far above the checks' tolerance (~1e-3), small beside the toy's gradients


def _rank_world_group() -> tuple[int, int, bool, int | None]:
    """This process's rank and world size (the process group's, else launch's environment, else -1), whether a
    process group is up, and the number of collectives it has run (None where the backend does not count them)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            seq: int | None = int(dist.distributed_c10d._get_default_group()._get_sequence_number_for_group())
        except Exception:  # a backend or version without the count
            seq = None
        return dist.get_rank(), dist.get_world_size(), True, seq
    return int(os.environ.get("RANK", -1)), int(os.environ.get("WORLD_SIZE", -1)), False, None


def _floats_sent(seq: int | None) -> int | None:
    """How many floating-point numbers this process's collectives have carried so far (the inputs' elements), as
    torch's flight recorder lists them; None where it lists nothing it should (a torch without it for gloo, a buffer
    turned off or wrapped round)."""
    try:
        entries = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(True, False)).get("entries", [])
    except Exception:  # a torch without the recorder, or another format
        return None
    if not entries:
        return 0 if seq == 0 else None
    if min(e.get("record_id", 0) for e in entries) > 0:  # the oldest entries were dropped
        return None
    return sum(math.prod(size) for e in entries
               for dtype, size in zip(e.get("input_dtypes", []), e.get("input_sizes", [])) if dtype in _FLOATS)


class ForwardRecorder:
    """The whole model's forward pre-hook, and the owner of this process's record, rewritten whole (atomically) at
    each event so that it is complete whenever the worker ends. Classes, not closures, so that a model pickled into
    a rank keeps recording there (in a file of that process)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.pid = -1
        self.path = ""
        self.watching = -1  # the process whose parameters carry gradient hooks
        self.record: dict[str, Any] = {}
        self.marks = torch.Generator()

    def _begin(self) -> dict[str, Any]:
        if self.pid != os.getpid():  # the first event in this process
            self.pid = os.getpid()
            self.path = os.path.join(self.folder, f"{self.pid}-{next(_files)}.pt")
            self.record = {"pid": self.pid, "x": [], "params": [], "rank": [], "world": [], "group": [], "seq": [],
                           "sent": [], "layers": {}, "grads": {}, "marks": {}}
            self.marks.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)  # no other process can know it
        return self.record

    def _save(self) -> None:
        torch.save(self.record, self.path + ".tmp")
        os.replace(self.path + ".tmp", self.path)

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if not torch.is_grad_enabled():  # evaluation, not training
            return
        r = self._begin()
        if self.watching != self.pid:  # tensor hooks do not travel with a pickled model: set them here
            for name, p in module.named_parameters():
                p.register_hook(_GradientHook(self, name))
            self.watching = self.pid
        x = args[0] if args else next(iter(kwargs.values()), None)
        rank, world, group, seq = _rank_world_group()
        r["x"].append(x.detach().cpu().clone() if isinstance(x, torch.Tensor) else None)
        r["params"].append({n: p.detach().cpu().clone() for n, p in module.named_parameters()})
        sent = _floats_sent(seq) if group else None
        for key, value in (("rank", rank), ("world", world), ("group", group), ("seq", seq), ("sent", sent)):
            r[key].append(value)
        self._save()

    def layer(self, name: str, module: nn.Module, args: tuple) -> None:
        """A layer with parameters ran a training forward: the rows it got and its FLOPs (2 per weight per row)."""
        if not torch.is_grad_enabled():
            return
        x = args[0] if args else None
        rows = int(x.shape[0]) if isinstance(x, torch.Tensor) and x.dim() > 0 else -1
        weight = getattr(module, "weight", None)
        flops = 2 * rows * weight.numel() if isinstance(weight, torch.Tensor) and rows >= 0 else -1
        entry = self._begin()["layers"].setdefault(name, {"rows": [], "flops": []})
        entry["rows"].append(rows)
        entry["flops"].append(flops)
        self._save()

    def gradient(self, name: str, grad: torch.Tensor) -> torch.Tensor | None:
        """Record the gradient reaching `name`; in a group of several ranks, mark it (what the hook returns)."""
        r = self._begin()
        r["grads"].setdefault(name, []).append(grad.detach().cpu().clone())
        several = bool(r["group"] and r["group"][-1] and r["world"][-1] > 1)
        mark = torch.randn(grad.shape, generator=self.marks) * MARK_SCALE if several else torch.zeros(grad.shape)
        r["marks"].setdefault(name, []).append(mark)
        self._save()
        return grad + mark.to(grad.device, grad.dtype) if several else None


class _LayerHook:
    """A forward pre-hook on one layer with parameters."""

    def __init__(self, recorder: ForwardRecorder, name: str) -> None:
        self.recorder, self.name = recorder, name

    def __call__(self, module: nn.Module, args: tuple) -> None:
        self.recorder.layer(self.name, module, args)


class _GradientHook:
    """A hook on one parameter: the gradient reaching it in a backward, before it is accumulated or communicated,
    recorded (and marked, returned in its place)."""

    def __init__(self, recorder: ForwardRecorder, name: str) -> None:
        self.recorder, self.name = recorder, name

    def __call__(self, grad: torch.Tensor) -> torch.Tensor | None:
        return self.recorder.gradient(self.name, grad)


def record_if_asked(model: nn.Module) -> nn.Module:
    """Make `model` record its training when RECORD_ENV names a folder; the model either way."""
    folder = os.environ.get(RECORD_ENV)
    if folder:
        recorder = ForwardRecorder(folder)
        model.register_forward_pre_hook(recorder, with_kwargs=True)
        for name, layer in model.named_modules():
            if any(True for _ in layer.parameters(recurse=False)):
                layer.register_forward_pre_hook(_LayerHook(recorder, name))
    return model
