"""How many bytes of tensors are alive at once: the peak of a piece of code, on a CPU as on a GPU.

On CUDA the caching allocator keeps the statistic (`torch.cuda.max_memory_allocated`). A CPU, and Apple's
MPS (whose `torch.mps.current_allocated_memory` keeps no peak), have no such counter, so `track_memory` watches every tensor the code's operations produce (a TorchDispatchMode sees
them all, the backward pass included) and every storage's end (a weakref finalizer fires when the storage
is really freed, however many views shared it), and keeps the running total and its peak. Both count
bytes of tensor storage the code allocated; neither counts what was alive before it started. One difference:
CUDA's counters are net, so a tensor from before that the block frees (old gradients dropped by `zero_grad()`)
lowers `current` and `peak` there and not on a CPU; free such tensors before the block to compare devices.

    with track_memory(device) as mem:
        loss = model(x).sum(); loss.backward(); opt.step()
    print(mem.peak, mem.current)   # bytes
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["track_memory", "MemoryTrace"]


@dataclass
class MemoryTrace:
    """Bytes of tensor storage allocated inside the block: alive now, at the peak so far, and in all (CPU).

    Read inside the block too: on CUDA `current` and `peak` ask the allocator at each read."""
    device: str
    allocated: int = 0
    _current: int = 0
    _peak: int = 0
    _live: dict = field(default_factory=dict, repr=False)
    _cuda_start: int | None = field(default=None, repr=False)

    @property
    def current(self) -> int:
        if self._cuda_start is not None:
            return torch.cuda.memory_allocated(self.device) - self._cuda_start
        return self._current

    @property
    def peak(self) -> int:
        if self._cuda_start is not None:
            return torch.cuda.max_memory_allocated(self.device) - self._cuda_start
        return self._peak

    def _add(self, storage: torch.UntypedStorage) -> None:
        key = id(storage)
        if key in self._live:
            return
        size = storage.nbytes()
        self._live[key] = size
        self._current += size
        self.allocated += size
        self._peak = max(self._peak, self._current)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self._current -= self._live.pop(key, 0)


class _Watcher(TorchDispatchMode):
    def __init__(self, trace: MemoryTrace, device: torch.device) -> None:
        super().__init__()
        self.trace, self.device = trace, device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # An output that shares an input's storage (a view, an in-place result) allocated nothing.
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor) and t.layout == torch.strided}
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and leaf.device == self.device and leaf.layout == torch.strided:
                storage = leaf.untyped_storage()
                if storage.data_ptr() not in inputs or storage.nbytes() == 0:
                    self.trace._add(storage)
        return out


class track_memory:
    """Context manager measuring the tensor bytes the block allocates on `device` (CPU, CUDA or MPS)."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.trace = MemoryTrace(str(self.device))

    def __enter__(self) -> MemoryTrace:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.trace._cuda_start = torch.cuda.memory_allocated(self.device)
        else:
            self._watcher = _Watcher(self.trace, self.device)
            self._watcher.__enter__()
        return self.trace

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            start = self.trace._cuda_start
            self.trace._current = torch.cuda.memory_allocated(self.device) - start
            self.trace._peak = torch.cuda.max_memory_allocated(self.device) - start
            self.trace._cuda_start = None  # frozen at the block's end, like the CPU's figures
        else:
            self._watcher.__exit__(*exc)
