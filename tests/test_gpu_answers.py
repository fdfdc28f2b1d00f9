"""Chapter 09 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail. The checks simulate the machines, so these
run the same on a CPU-only machine and on a GPU one."""
from __future__ import annotations

import collections
import copy
import itertools
import statistics
import time
from collections.abc import Mapping

import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._pytree import tree_map

from grader.course import bench
from grader.course.memtrack import track_memory
from grader.results import ERROR
from grader.runner import run_exercise

from tests.answers import Wrong, assert_caught, assert_passes, ids

W = Wrong


# ---------------------------------------------------------------- correct, written differently

def try_gpu_d2l(i=0):
    if torch.cuda.device_count() >= i + 1:
        return torch.device(f"cuda:{i}")
    return torch.device("cpu")


def try_gpu_available(i=0):
    if torch.cuda.is_available() and 0 <= i < torch.cuda.device_count():
        return torch.device("cuda", i)
    return torch.device("cpu")


def try_all_gpus_loop():
    devices = []
    for i in range(torch.cuda.device_count()):
        devices.append(torch.device("cuda", i))
    if not devices:
        devices.append(torch.device("cpu"))
    return devices


def try_all_gpus_via_try_gpu():
    n = torch.cuda.device_count()
    return [try_gpu_d2l(i) for i in range(n)] if n else [try_gpu_d2l(10**6)]


def to_device_match(batch, device, non_blocking=False):
    match batch:
        case torch.Tensor():
            return batch.to(device=device, non_blocking=non_blocking)
        case collections.defaultdict():
            return type(batch)(batch.default_factory, {k: to_device_match(v, device, non_blocking)
                                                       for k, v in batch.items()})
        case Mapping():
            return type(batch)({k: to_device_match(v, device, non_blocking) for k, v in batch.items()})
        case list():
            return [to_device_match(v, device, non_blocking) for v in batch]
        case tuple() if hasattr(batch, "_fields"):
            return type(batch)._make(to_device_match(v, device, non_blocking) for v in batch)
        case tuple():
            return tuple(to_device_match(v, device, non_blocking) for v in batch)
        case _:
            return batch


def to_device_copy(batch, device, non_blocking=False):
    """Moves with empty_like + copy_, and only when the tensor is elsewhere."""
    if isinstance(batch, torch.Tensor):
        if batch.device == torch.device(device):
            return batch
        out = torch.empty_like(batch, device=device)
        out.copy_(batch, non_blocking=non_blocking)
        return out
    if isinstance(batch, Mapping):  # a shallow copy keeps the type and a defaultdict's factory
        out = copy.copy(batch)
        for k in out:
            out[k] = to_device_copy(batch[k], device, non_blocking)
        return out
    if isinstance(batch, (list, tuple)):
        items = [to_device_copy(v, device, non_blocking) for v in batch]
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):
            return type(batch)(*items)
        return type(batch)(items)
    return batch


def to_device_stack(batch, device, non_blocking=False):
    """No recursion: an explicit stack of containers to fill, built bottom-up with their own types."""
    def build(x):
        if isinstance(x, torch.Tensor):
            return x.to(device, non_blocking=non_blocking)
        if isinstance(x, collections.defaultdict):
            return collections.defaultdict(x.default_factory, [(k, build(v)) for k, v in x.items()])
        if isinstance(x, Mapping):
            return x.__class__([(k, build(v)) for k, v in x.items()])
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return x._replace(**{f: build(getattr(x, f)) for f in x._fields})
        if isinstance(x, (list, tuple)):
            return type(x)(list(map(build, x)))
        return x
    return build(batch)


def time_fn_sync(fn, warmup=3, reps=10):
    cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_fn_events_each(fn, warmup=3, reps=10):
    """Events around each call, waiting on the end event; numpy's median; monotonic_ns on the CPU."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if torch.cuda.is_available():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        else:
            t0 = time.monotonic_ns()
            fn()
            times.append((time.monotonic_ns() - t0) * 1e-9)
    return float(np.median(times))


def time_fn_stream_all(fn, warmup=3, reps=10):
    """Times warmup + reps calls, then drops the warm-up ones; waits with the current stream."""
    on_gpu = torch.cuda.is_available()
    times = []
    for _ in range(warmup + reps):
        if on_gpu:
            torch.cuda.current_stream().synchronize()
        t0 = time.perf_counter()
        fn()
        if on_gpu:
            torch.cuda.current_stream().synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[warmup:])


def _paused(fn, seconds, at=None):
    """fn on a busy machine: the process is paused for `seconds` before call number `at` (before every call
    when None), after the timer has read its clock."""
    calls = itertools.count()

    def paused():
        if at is None or next(calls) == at:
            time.sleep(seconds)
        fn()
    return paused


def time_fn_paused_once(fn, warmup=3, reps=10):
    """time_fn_stream_all paused for 40 ms before the first timed call's work (with reps=1 no median absorbs it:
    the check's bound, that call's span, includes it)."""
    return time_fn_stream_all(_paused(fn, 0.040, at=warmup), warmup, reps)


def time_fn_paused_each(fn, warmup=3, reps=10):
    """time_fn_sync paused for 20 ms before every call."""
    return time_fn_sync(_paused(fn, 0.020), warmup, reps)


def time_fn_accelerator(fn, warmup=3, reps=10):
    sync = torch.accelerator.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2


def bandwidth_own_timer(nbytes, pinned, device):
    if nbytes <= 0:
        raise ValueError("nbytes must be positive")
    device = torch.device(device)
    cuda = device.type == "cuda"
    src = torch.empty(nbytes, dtype=torch.uint8).fill_(3)
    if pinned and cuda:
        src = src.pin_memory()
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return nbytes / time_fn_sync(lambda: dst.copy_(src, non_blocking=bool(pinned and cuda)))


def bandwidth_bench(nbytes, pinned, device):
    """grader.course.bench.time_fn is allowed here; the source is made with pin_memory= directly."""
    if nbytes < 1:
        raise ValueError(nbytes)
    device = torch.device(device)
    pin = pinned and device.type == "cuda"
    src = torch.zeros(nbytes, dtype=torch.uint8, pin_memory=pin)
    dst = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    return float(nbytes) / bench.time_fn(lambda: dst.copy_(src, non_blocking=pin), device=device)


def bandwidth_block(nbytes, pinned, device):
    """Times blocks of 5 copies as a whole (a mean per block), and keeps the fastest block."""
    if nbytes < 1:
        raise ValueError("nothing to copy")
    device = torch.device(device)
    pin = pinned and device.type == "cuda"
    src = torch.ones(nbytes, dtype=torch.uint8)
    src = src.pin_memory() if pin else src
    dst = torch.empty_like(src, device=device)
    dst.copy_(src)
    best = float("inf")
    for _ in range(3):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            dst.copy_(src, non_blocking=pin)
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / 5)
    return nbytes / best


def memory_delta_sync(fn, device):
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.memory_allocated(device) - before
    with track_memory(device) as mem:
        fn()
    return mem.current


def memory_delta_stats(fn, device):
    """Reads memory_stats() on CUDA; no synchronize (the counters are host-side)."""
    if torch.device(device).type == "cuda":
        key = "allocated_bytes.all.current"
        before = torch.cuda.memory_stats(device)[key]
        fn()
        return int(torch.cuda.memory_stats(device)[key] - before)
    with track_memory(device) as mem:
        fn()
    return int(mem.current)


def memory_delta_tracker(fn, device):
    """grader.course.memtrack does both devices itself."""
    with track_memory(device) as mem:
        fn()
    return mem.current


CORRECT = [
    ("try_gpu", try_gpu_d2l), ("try_gpu", try_gpu_available),
    ("try_all_gpus", try_all_gpus_loop), ("try_all_gpus", try_all_gpus_via_try_gpu),
    ("to_device", to_device_match), ("to_device", to_device_copy), ("to_device", to_device_stack),
    ("time_fn", time_fn_sync), ("time_fn", time_fn_events_each), ("time_fn", time_fn_stream_all),
    ("time_fn", time_fn_accelerator), ("time_fn", time_fn_paused_once), ("time_fn", time_fn_paused_each),
    ("transfer_bandwidth", bandwidth_own_timer), ("transfer_bandwidth", bandwidth_bench),
    ("transfer_bandwidth", bandwidth_block),
    ("memory_delta", memory_delta_sync), ("memory_delta", memory_delta_stats), ("memory_delta", memory_delta_tracker),
]


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{f.__name__}" for n, f in CORRECT])
def test_correct_answers_pass_every_check(name, fn):
    assert_passes("gpu", name, fn)


# ---------------------------------------------------------------- plausible but wrong

def _cuda_or_cpu(i):
    return torch.device(f"cuda:{i}") if torch.cuda.is_available() else torch.device("cpu")


def time_fn_no_sync(fn, warmup=3, reps=10):
    """The classic: a host clock around an asynchronous launch."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_fn_sync_before_only(fn, warmup=3, reps=10):
    """Synchronizes before starting the clock, but reads it before the work is done."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_fn_events_no_wait(fn, warmup=3, reps=10):
    """Reads elapsed_time before the end event has completed (CUDA raises 'device not ready')."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if torch.cuda.is_available():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_fn_events_ms(fn, warmup=3, reps=10):
    """Events, but returns elapsed_time's milliseconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if torch.cuda.is_available():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def time_fn_mean(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def time_fn_mean_paused_in_warmup(fn, warmup=3, reps=10):
    """The mean, on a machine that paused the process for 100 ms during the warm-up (outside what it times). A
    slack for the longest pause anywhere in the run let a mean pass on a busy CI machine; the check's bound
    comes from the timed calls' own spans."""
    return time_fn_mean(_paused(fn, 0.100, at=warmup - 1), warmup, reps)


def time_fn_min(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(reps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def time_fn_times_warmup(fn, warmup=3, reps=10):
    """Times the warm-up calls too."""
    times = []
    for _ in range(warmup + reps):
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_fn_extra_call(fn, warmup=3, reps=10):
    fn()  # "one more warm-up can't hurt"
    return time_fn_sync(fn, warmup, reps)


def time_fn_tensor(fn, warmup=3, reps=10):
    """Returns a 0-dim tensor from torch.median."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return torch.tensor(times).median()


def to_device_top_level(batch, device, non_blocking=False):
    """Forgets nested levels."""
    if isinstance(batch, dict):
        return {k: v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v
                for k, v in batch.items()}
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    return batch


def to_device_drops_leaves(batch, device, non_blocking=False):
    """Keeps only tensors and containers."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: to_device_drops_leaves(v, device, non_blocking) for k, v in batch.items()
                if isinstance(v, (torch.Tensor, dict, list, tuple))}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device_drops_leaves(v, device, non_blocking) for v in batch
                           if isinstance(v, (torch.Tensor, dict, list, tuple)))
    return batch


def to_device_lists(batch, device, non_blocking=False):
    """Turns every tuple into a list."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: to_device_lists(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [to_device_lists(v, device, non_blocking) for v in batch]
    return batch


def to_device_plain_tuples(batch, device, non_blocking=False):
    """A namedtuple comes back as a plain tuple."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: to_device_plain_tuples(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(to_device_plain_tuples(v, device, non_blocking) for v in batch)
    if isinstance(batch, list):
        return [to_device_plain_tuples(v, device, non_blocking) for v in batch]
    return batch


def to_device_generator_namedtuple(batch, device, non_blocking=False):
    """type(x)(generator), which a namedtuple refuses."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: to_device_generator_namedtuple(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device_generator_namedtuple(v, device, non_blocking) for v in batch)
    return batch


def to_device_in_place(batch, device, non_blocking=False):
    """Writes the moved tensors back into the caller's containers."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        for k in batch:
            batch[k] = to_device_in_place(batch[k], device, non_blocking)
        return batch
    if isinstance(batch, list):
        for i, v in enumerate(batch):
            batch[i] = to_device_in_place(v, device, non_blocking)
        return batch
    if isinstance(batch, tuple):
        return type(batch)(*[to_device_in_place(v, device, non_blocking) for v in batch]) \
            if hasattr(batch, "_fields") else tuple(to_device_in_place(v, device, non_blocking) for v in batch)
    return batch


def _recursive(move, numpy=False):
    """A to_device that is right except for how it moves a leaf (`move`), and NumPy arrays too when `numpy`."""
    def to_device(batch, device, non_blocking=False):
        if isinstance(batch, torch.Tensor) or (numpy and isinstance(batch, np.ndarray)):
            return move(batch, device, non_blocking)
        if isinstance(batch, dict):
            return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):
            return type(batch)(*(to_device(v, device, non_blocking) for v in batch))
        if isinstance(batch, (list, tuple)):
            return type(batch)(to_device(v, device, non_blocking) for v in batch)
        return batch
    return to_device


to_device_ignores_non_blocking = _recursive(lambda x, d, nb: x.to(d))
to_device_always_non_blocking = _recursive(lambda x, d, nb: x.to(d, non_blocking=True))
to_device_always_copies = _recursive(lambda x, d, nb: x.to(d, non_blocking=nb, copy=True))
to_device_casts = _recursive(lambda x, d, nb: x.to(d, torch.float32, non_blocking=nb))
to_device_converts_numpy = _recursive(lambda x, d, nb: torch.as_tensor(x).to(d, non_blocking=nb), numpy=True)
to_device_empty_like = _recursive(lambda x, d, nb: torch.empty_like(x, device=d))  # moves shape, not values


def to_device_pytree(batch, device, non_blocking=False):
    """torch's pytree does the whole walk and rebuild: forbidden (under the name it was imported by too)."""
    return tree_map(lambda x: x.to(device, non_blocking=non_blocking) if isinstance(x, torch.Tensor) else x, batch)


def to_device_pytree_only(batch, device, non_blocking=False):
    return pytree.tree_map_only(torch.Tensor, lambda x: x.to(device, non_blocking=non_blocking), batch)


def to_device_pytree_with_path(batch, device, non_blocking=False):
    return pytree.tree_map_with_path(
        lambda path, x: x.to(device, non_blocking=non_blocking) if isinstance(x, torch.Tensor) else x, batch)


def to_device_flatten_unflatten(batch, device, non_blocking=False):
    leaves, spec = pytree.tree_flatten(batch)
    moved = [x.to(device, non_blocking=non_blocking) if isinstance(x, torch.Tensor) else x for x in leaves]
    return pytree.tree_unflatten(moved, spec)


def to_device_spec_unflatten(batch, device, non_blocking=False):
    """The spec's own unflatten, with the leaves taken apart by hand."""
    moved = [x.to(device, non_blocking=non_blocking) if isinstance(x, torch.Tensor) else x
             for x in pytree.tree_leaves(batch)]
    return pytree.tree_structure(batch).unflatten(moved)


PYTREE_SHORTCUTS = [W("to_device", fn, "moves_nested_tensors", f"not call torch.utils._pytree.{name}")
                    for fn, name in [(to_device_pytree, "tree_map"), (to_device_pytree_only, "tree_map_only"),
                                     (to_device_pytree_with_path, "tree_map_with_path"),
                                     (to_device_flatten_unflatten, "tree_unflatten"),
                                     (to_device_spec_unflatten, "TreeSpec.unflatten")]]


def to_device_walkers(batch, device, non_blocking=False):
    """DDP's own helper applies a function to every tensor of a nested batch."""
    from torch.distributed.utils import _apply_to_tensors
    return _apply_to_tensors(lambda x: x.to(device, non_blocking=non_blocking), batch)


def to_device_ddp_recursive_to(batch, device, non_blocking=False):
    from torch.distributed.utils import _recursive_to
    return _recursive_to(batch, torch.device(device), False)[0]


def to_device_fx_map(batch, device, non_blocking=False):
    import torch.fx.node
    return torch.fx.node.map_aggregate(batch, lambda x: x.to(device, non_blocking=non_blocking)
                                       if isinstance(x, torch.Tensor) else x)


def to_device_fx_c(batch, device, non_blocking=False):
    return torch._C._fx_map_aggregate(batch, lambda x: x.to(device, non_blocking=non_blocking)
                                      if isinstance(x, torch.Tensor) else x)


WALKER_SHORTCUTS = [W("to_device", fn, "moves_nested_tensors", f"not call {name}")
                    for fn, name in [(to_device_walkers, "torch.distributed.utils._apply_to_tensors"),
                                     (to_device_ddp_recursive_to, "torch.distributed.utils._recursive_to"),
                                     (to_device_fx_map, "torch.fx.node.map_aggregate"),
                                     (to_device_fx_c, "torch._C._fx_map_aggregate")]]


def to_device_exact_dict(batch, device, non_blocking=False):
    """The old rule, `type(batch) is dict`: an OrderedDict, a defaultdict or a UserDict comes back unmoved."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if type(batch) is dict:
        return {k: to_device_exact_dict(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device_exact_dict(v, device, non_blocking) for v in batch))
    if type(batch) in (list, tuple):
        return type(batch)(to_device_exact_dict(v, device, non_blocking) for v in batch)
    return batch


def to_device_plain_dicts(batch, device, non_blocking=False):
    """Moves inside every Mapping, but hands back a plain dict."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {k: to_device_plain_dicts(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device_plain_dicts(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device_plain_dicts(v, device, non_blocking) for v in batch)
    return batch


def to_device_mapping_type_call(batch, device, non_blocking=False):
    """type(x)(items) for every Mapping: a defaultdict reads the items as its default_factory and refuses."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return type(batch)({k: to_device_mapping_type_call(v, device, non_blocking) for k, v in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device_mapping_type_call(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device_mapping_type_call(v, device, non_blocking) for v in batch)
    return batch


def to_device_drops_factory(batch, device, non_blocking=False):
    """A defaultdict rebuilt without its default_factory (defaultdict(None, ...))."""
    if isinstance(batch, collections.defaultdict):
        return collections.defaultdict(None, {k: to_device_drops_factory(v, device, non_blocking)
                                              for k, v in batch.items()})
    if isinstance(batch, Mapping):
        return type(batch)({k: to_device_drops_factory(v, device, non_blocking) for k, v in batch.items()})
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device_drops_factory(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device_drops_factory(v, device, non_blocking) for v in batch)
    return batch


def time_fn_torch_timer(fn, warmup=3, reps=10):
    """torch.utils.benchmark.Timer does the warm-up, the synchronization and the median itself."""
    from torch.utils.benchmark import Timer
    return Timer(stmt="fn()", globals={"fn": fn}).timeit(reps).median


def time_fn_blocked_autorange(fn, warmup=3, reps=10):
    import torch.utils.benchmark as benchmark
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange().median


def time_fn_bench_host(fn, warmup=3, reps=10):
    """The grader's private host timer, under another name."""
    return bench._time_host(fn, warmup, reps, torch.device("cpu"), 0.0)


TIMER_SHORTCUTS = [W("time_fn", fn, "calls_fn_warmup_plus_reps_times", f"not call {name}")
                   for fn, name in [(time_fn_torch_timer, "torch.utils.benchmark.Timer.timeit"),
                                    (time_fn_blocked_autorange, "torch.utils.benchmark.Timer.blocked_autorange"),
                                    (time_fn_bench_host, "grader.course.bench._time_host"),
                                    (lambda fn, warmup=3, reps=10: bench.time_fn(fn, warmup=warmup, reps=reps),
                                     "grader.course.bench.time_fn")]]


def to_device_nothing(batch, device, non_blocking=False):
    return batch


def bandwidth_seconds(nbytes, pinned, device):
    """Returns the seconds of the copy, not bytes per second."""
    if nbytes < 1:
        raise ValueError(nbytes)
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return time_fn_sync(lambda: dst.copy_(src))


def bandwidth_gbps(nbytes, pinned, device):
    return bandwidth_own_timer(nbytes, pinned, device) / 1e9


def bandwidth_bits(nbytes, pinned, device):
    return 8 * bandwidth_own_timer(nbytes, pinned, device)


def _bits_on_a_busy_machine():
    """Bits per second, from a machine so busy that its calls come in runs of three slowed 3x (each timed copy is
    done three times) and runs of three at full speed: the slowed ones claim about 2.7x a plain copy's speed,
    within what the check accepts. Three calls of one look at the answer were all slowed once on a loaded CI
    machine; the check looks again while the best call is more than twice a plain copy's speed."""
    calls = itertools.count()

    def bits(nbytes, pinned, device):
        times = 3 if next(calls) // 3 % 2 == 0 else 1
        src = torch.ones(nbytes, dtype=torch.uint8)
        dst = torch.empty(nbytes, dtype=torch.uint8, device=device)

        def copies():
            for _ in range(times):
                dst.copy_(src)
        return 8 * nbytes / time_fn_sync(copies)
    return bits


def bandwidth_fixed_buffer(nbytes, pinned, device):
    """Always copies 1 MiB, whatever nbytes says."""
    if nbytes < 1:
        raise ValueError(nbytes)
    src = torch.ones(2**20, dtype=torch.uint8)
    dst = torch.empty(2**20, dtype=torch.uint8, device=device)
    return nbytes / time_fn_sync(lambda: dst.copy_(src))


def bandwidth_always_pins(nbytes, pinned, device):
    """Pins whenever asked, GPU or not: raises on a machine without one."""
    if nbytes < 1:
        raise ValueError(nbytes)
    src = torch.ones(nbytes, dtype=torch.uint8)
    if pinned:
        src = src.pin_memory()
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return nbytes / time_fn_sync(lambda: dst.copy_(src, non_blocking=pinned))


def bandwidth_no_check(nbytes, pinned, device):
    """No ValueError: a copy of 0 bytes 'runs' at 0 bytes/s."""
    src = torch.ones(max(nbytes, 0), dtype=torch.uint8)
    dst = torch.empty(max(nbytes, 0), dtype=torch.uint8, device=device)
    return nbytes / time_fn_sync(lambda: dst.copy_(src))


def bandwidth_per_millisecond(nbytes, pinned, device):
    """Bytes per millisecond."""
    return bandwidth_own_timer(nbytes, pinned, device) / 1e3


def bandwidth_datasheet(nbytes, pinned, device):
    """The spec table's memory bandwidth instead of a measured copy."""
    from grader.course import specs
    if nbytes < 1:
        raise ValueError(nbytes)
    return float(specs.memory_bandwidth(device) or 1e10)


def memory_delta_peak(fn, device):
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        return torch.cuda.max_memory_allocated(device) - before
    with track_memory(device) as mem:
        fn()
    return mem.peak


def memory_delta_absolute(fn, device):
    """No baseline: everything allocated on the device after fn."""
    if torch.device(device).type == "cuda":
        fn()
        return torch.cuda.memory_allocated(device)
    with track_memory(device) as mem:
        fn()
    return mem.current


def memory_delta_reserved(fn, device):
    if torch.device(device).type == "cuda":
        before = torch.cuda.memory_reserved(device)
        fn()
        return torch.cuda.memory_reserved(device) - before
    with track_memory(device) as mem:
        fn()
    return mem.current


def memory_delta_keeps_result(fn, device):
    """Holds fn's return value while measuring."""
    if torch.device(device).type == "cuda":
        before = torch.cuda.memory_allocated(device)
        out = fn()
        after = torch.cuda.memory_allocated(device)
        del out
        return after - before
    with track_memory(device) as mem:
        out = fn()
        held = mem.current
    del out
    return held


def memory_delta_max_no_reset(fn, device):
    if torch.device(device).type == "cuda":
        before = torch.cuda.memory_allocated(device)
        fn()
        return torch.cuda.max_memory_allocated(device) - before
    with track_memory(device) as mem:
        fn()
    return mem.current


def memory_delta_cuda_only(fn, device):
    """The CUDA counters on every device (they read 0 without a GPU)."""
    before = torch.cuda.memory_allocated()
    fn()
    return torch.cuda.memory_allocated() - before


def memory_delta_total(fn, device):
    if torch.device(device).type == "cuda":
        before = torch.cuda.memory_allocated(device)
        fn()
        return torch.cuda.memory_allocated(device) - before
    with track_memory(device) as mem:
        fn()
    return mem.allocated  # everything allocated, freed or not


def memory_delta_float(fn, device):
    return float(memory_delta_sync(fn, device))


def memory_delta_doubled(fn, device):
    """Counts every kept byte twice."""
    return 2 * memory_delta_sync(fn, device)


# Each names the check that must fail it, public where one catches it (the mistakes the chapter warns about are
# caught before grading, not only by hidden checks), with words of its message.
WRONG = [
    # try_gpu: a string, no index, no bounds, off by one; try_all_gpus: empty, a tuple, cpu appended, one GPU short,
    # a generator
    W("try_gpu", lambda i=0: f"cuda:{i}" if i < torch.cuda.device_count() else "cpu", "on_this_machine",
      f"returned str {'cuda:0' if torch.cuda.device_count() else 'cpu'!r}; return a torch.device"),
    W("try_gpu", lambda i=0: torch.device("cuda") if i < torch.cuda.device_count() else torch.device("cpu"),
      "simulated_machines", "a CUDA device without an index"),
    W("try_gpu", lambda i=0: _cuda_or_cpu(i), "simulated_machines",
      "returned device(type='cuda', index=1), expected device(type='cpu')"),
    W("try_gpu", lambda i=0: torch.device(f"cuda:{i}") if i <= torch.cuda.device_count() and torch.cuda.is_available()
      else torch.device("cpu"), "simulated_machines", "returned device(type='cuda', index=1), expected device(type='cpu')"),
    W("try_all_gpus", lambda: [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())], "all_gpus_or_cpu",
      "returned [], expected [device(type='cpu')]"),
    W("try_all_gpus", lambda: tuple(try_all_gpus_loop()), "all_gpus_or_cpu", "returned tuple"),
    W("try_all_gpus", lambda: [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())] +
      [torch.device("cpu")], "all_gpus_or_cpu", "device(type='cpu')], expected [device(type='cuda', index=0)]"),
    W("try_all_gpus", lambda: [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count() - 1)] or
      [torch.device("cpu")], "all_gpus_or_cpu", "returned [device(type='cpu')], expected [device(type='cuda', index=0)]"),
    W("try_all_gpus", lambda: (torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())), "all_gpus_or_cpu",
      "returned generator"),
    # to_device
    W("to_device", to_device_top_level, "moves_nested_tensors", "batch['extra']['mask'] is on cpu"),
    W("to_device", to_device_drops_leaves, "keeps_other_leaves", "but came back with ['x', 'ids']"),
    W("to_device", to_device_lists, "keeps_container_types", "batch was a tuple, but came back as a list"),
    W("to_device", to_device_plain_tuples, "keeps_container_types", "was the namedtuple Pair('inputs', 'targets'), "
      "but came back as a tuple"),
    W("to_device", to_device_generator_namedtuple, "keeps_container_types", "missing 1 required positional argument",
      status=ERROR),
    W("to_device", to_device_in_place, "leaves_the_input_alone", "changed the input batch in place"),
    W("to_device", to_device_ignores_non_blocking, "passes_non_blocking_on", "moved with to(non_blocking=False)"),
    W("to_device", to_device_always_non_blocking, "passes_non_blocking_on", "pass non_blocking=False on"),
    W("to_device", to_device_always_copies, "same_object_when_nothing_moves", "yet came back as a new tensor"),
    W("to_device", to_device_casts, "moves_nested_tensors", "dtype float32, but the input was int64"),
    W("to_device", to_device_converts_numpy, "keeps_other_leaves", "was a NumPy array, not a tensor"),
    W("to_device", to_device_empty_like, "passes_non_blocking_on", "the tensors were not moved with .to(device"),
    W("to_device", to_device_nothing, "moves_nested_tensors", "batch['x'] is on cpu, expected meta"),
    # each Mapping mistake gets the message that says what to keep (the type, the default_factory)
    W("to_device", to_device_exact_dict, "keeps_mapping_types", "batch['x'] is on cpu"),
    W("to_device", to_device_plain_dicts, "keeps_mapping_types", "came back as a dict"),
    W("to_device", to_device_mapping_type_call, "keeps_mapping_types", "TypeError: first argument must be callable",
      status=ERROR),
    W("to_device", to_device_drops_factory, "keeps_mapping_types", "came back with default_factory None"),
    # time_fn
    W("time_fn", time_fn_no_sync, "waits_for_the_gpu", "the host's clock only saw the launches"),
    W("time_fn", time_fn_sync_before_only, "waits_for_the_gpu", "the host's clock only saw the launches"),
    W("time_fn", time_fn_events_no_wait, "waits_for_the_gpu", "device not ready", status=ERROR),
    W("time_fn", time_fn_events_ms, "median_of_the_timed_calls", "return seconds, not milliseconds"),
    W("time_fn", time_fn_mean, "median_of_the_timed_calls", "that is about the mean"),
    W("time_fn", time_fn_mean_paused_in_warmup, "median_of_the_timed_calls", "that is about the mean"),
    W("time_fn", time_fn_min, "median_of_the_timed_calls", "that is about the fastest call"),
    W("time_fn", time_fn_times_warmup, "median_of_the_timed_calls", "are the warm-up calls in it?"),
    W("time_fn", time_fn_extra_call, "calls_fn_warmup_plus_reps_times", "called fn 8 times"),
    W("time_fn", time_fn_tensor, "calls_fn_warmup_plus_reps_times", "return the seconds as a Python float"),
    # transfer_bandwidth: the limits come from plain copies timed beside the answer. bandwidth_bits says "bits per
    # second?" only when its copy ran near theirs; on a loaded machine the message may name another cause.
    W("transfer_bandwidth", bandwidth_seconds, "bytes_per_second_on_cpu", "is that a time, or GB/s?"),
    W("transfer_bandwidth", bandwidth_gbps, "bytes_per_second_on_cpu", "is that a time, or GB/s?"),
    W("transfer_bandwidth", bandwidth_bits, "bytes_per_second_on_cpu"),
    W("transfer_bandwidth", _bits_on_a_busy_machine(), "bytes_per_second_on_cpu"),
    W("transfer_bandwidth", bandwidth_fixed_buffer, "copies_nbytes", "copy nbytes bytes (not fewer)"),
    W("transfer_bandwidth", bandwidth_always_pins, "pinned_is_ignored_without_cuda",
      "Cannot access accelerator device", status=ERROR),
    W("transfer_bandwidth", bandwidth_no_check, "rejects_empty_transfers", "should raise ValueError"),
    W("transfer_bandwidth", bandwidth_per_millisecond, "bytes_per_second_on_cpu", "bytes per millisecond?"),
    # grader.specs.memory_bandwidth answers from a table, without copying: refused in the first public check
    W("transfer_bandwidth", bandwidth_datasheet, "bytes_per_second_on_cpu",
      "not call grader.course.specs.memory_bandwidth"),
    # memory_delta
    W("memory_delta", memory_delta_peak, "not_the_peak", "that is the peak"),
    W("memory_delta", memory_delta_absolute, "cuda_counters", "that counts what was allocated before fn ran"),
    W("memory_delta", memory_delta_reserved, "cuda_counters", "torch.cuda.memory_reserved counts the allocator's cache"),
    W("memory_delta", memory_delta_keeps_result, "return_value_is_not_kept", "that is fn's return value"),
    W("memory_delta", memory_delta_max_no_reset, "cuda_counters", "or the peak of earlier work"),
    W("memory_delta", memory_delta_cuda_only, "counts_what_fn_keeps", "measure on the device fn allocates on"),
    W("memory_delta", memory_delta_total, "not_the_peak", "returned 5242880 bytes, expected 1048576"),
    W("memory_delta", memory_delta_float, "counts_what_fn_keeps", "return a number of bytes as a Python int"),
    # off by a clean factor: the message says so (grader.expect's factor hint), on the CPU and the simulated GPU
    W("memory_delta", memory_delta_doubled, "counts_what_fn_keeps", "2.00× the expected value"),
    W("memory_delta", memory_delta_doubled, "cuda_counters", "2.00× the expected value"),
]


@pytest.mark.parametrize("wrong", WRONG, ids=ids(WRONG))
def test_each_wrong_answer_is_caught_by_its_check(wrong):
    assert_caught("gpu", wrong)


@pytest.mark.parametrize("wrong", PYTREE_SHORTCUTS, ids=ids(PYTREE_SHORTCUTS))
def test_pytree_shortcuts_are_refused_by_name(wrong):
    """torch.utils._pytree walks and rebuilds the containers: the whole exercise. A public check says so, and
    the helpers work again afterwards."""
    assert_caught("gpu", wrong, public_only=True)
    assert tree_map(lambda x: x + 1, {"a": 1, "b": (2, [3])}) == {"a": 2, "b": (3, [4])}


@pytest.mark.parametrize("wrong", WALKER_SHORTCUTS, ids=ids(WALKER_SHORTCUTS))
def test_library_walkers_are_refused_by_name(wrong):
    """DDP's input movers and torch.fx's map_aggregate walk and rebuild the batch: refused, named, in a public check."""
    assert_caught("gpu", wrong, public_only=True)


@pytest.mark.parametrize("wrong", TIMER_SHORTCUTS, ids=ids(TIMER_SHORTCUTS))
def test_whole_timers_are_refused_by_name(wrong):
    """A timer that does warm-up, synchronization and the median is the exercise: refused, named, and usable
    again afterwards."""
    assert_caught("gpu", wrong, public_only=True)
    import torch.utils.benchmark as benchmark
    assert benchmark.Timer(stmt="1 + 1").timeit(3).median > 0


def test_a_time_fn_without_synchronize_is_told_why():
    """The message names the cause: the clock saw the launches; synchronize or use events."""
    r = run_exercise("gpu.time_fn", time_fn_no_sync)
    failed = {c.name: c.message for c in r.checks if not c.passed}
    assert list(failed) == ["waits_for_the_gpu"], failed
    assert "synchronize" in failed["waits_for_the_gpu"] and "launch" in failed["waits_for_the_gpu"]


def test_the_simulated_machines_are_put_back():
    """After every kind of check, torch.cuda is as it was (also after a student function that raised)."""
    from grader.scenarios import gpu as scenarios

    names = ("is_available", "device_count", "synchronize", "Event", "current_stream", "memory_allocated",
             "max_memory_allocated", "memory_reserved", "reset_peak_memory_stats", "current_device")
    before = {n: getattr(torch.cuda, n) for n in names}
    memory_before = torch.cuda.memory.memory_allocated
    for name, fn in [("time_fn", time_fn_events_no_wait), ("memory_delta", memory_delta_peak),
                     ("try_gpu", try_gpu_d2l), ("transfer_bandwidth", bandwidth_always_pins)]:
        run_exercise(f"gpu.{name}", fn, hidden=True)
    assert {n: getattr(torch.cuda, n) for n in names} == before
    assert torch.cuda.memory.memory_allocated is memory_before
    assert not scenarios._CALLS
    if torch.cuda.is_available():
        assert torch.ones(2).pin_memory().is_pinned()  # no mode left refusing pinning
