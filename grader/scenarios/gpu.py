"""Chapter 09 scenarios: the student's device code run on simulated machines, so a CPU can grade GPU logic.

Grading runs without a GPU (and a grade must not depend on whether the grading machine has one), yet
`try_gpu`, `to_device`, `time_fn`, `transfer_bandwidth` and `memory_delta` have CUDA branches that must be
right. Each scenario here therefore decides what machine the student's code sees, for the length of the call
only, by replacing attributes of `torch.cuda` (and `torch.accelerator`) and putting the originals back
afterwards, whatever happens:

* `none`: a CPU-only machine, as a CPU build of PyTorch behaves: no devices, `torch.cuda.synchronize`
  and CUDA events raise, the CUDA memory counters read 0, and pinning host memory raises (a
  TorchFunctionMode refuses `pin_memory()` and `pin_memory=True`). On a GPU machine too, so the
  verdict is the same on any hardware.
* a number of GPUs (`count`): only `device_count` / `is_available` change (enough for `try_gpu`).
* `gpu`: simulated CUDA devices with an asynchronous queue. A "kernel" launched by the test function
  returns at once; its work completes `seconds` later, one kernel after another. `torch.cuda.synchronize()`
  (and a stream's or an event's `synchronize()`) waits for the queue; a CUDA event records the time at which
  the queue reaches it. Each device's caching allocator counts simulated blocks (`memory_allocated`,
  `max_memory_allocated`, `memory_reserved`, ...).

Timing runs on a **simulated clock** (`_Clock`): `time.perf_counter`, `perf_counter_ns`, `monotonic`,
`monotonic_ns`, `time`, `time_ns` and `timeit.default_timer` read it while the student's function runs (in
the scenario's own thread; other threads keep the real clock), and so do the aliases of those functions that
the student's functions reach (`from time import perf_counter` in the notebook) and grader.course.bench's
timer. It moves only by what the scenario decides: a call of the test function takes exactly its duration, a
copy of n bytes exactly n / rate seconds (`_Machine`, a TorchFunctionMode that charges every torch call by
the bytes it allocates and writes, and runs CUDA tensors as `meta` tensors on the simulated GPU). So a right
answer is exact, every wrong one is wrong by a known factor, and no verdict depends on the load of the
grading machine. One sanity check per exercise runs on the real clock (`_RealClock`) instead.

The replaced CUDA functions are replaced under the names the student's functions imported them by too
(`from torch.cuda import Event, synchronize`: `_aliases`), as the clocks are.

The scenarios return plain data only (numbers, strings, tensors on the CPU, containers), and compute
no expected value: the checks in grader/exercises/gpu.py judge it.
"""
import collections
import collections.abc
import functools
import sys
import threading
import time

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

_cuda = torch.cuda
_cuda_memory = torch.cuda.memory
_accelerator = getattr(torch, "accelerator", None)
_perf = time.perf_counter
_sleep = time.sleep
_get_ident = threading.get_ident
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_empty = torch.empty
_randn = torch.randn
_randint = torch.randint
_manual_seed = torch.manual_seed
_parse_to = torch._C._nn._parse_to
_copy = torch.Tensor.copy_
_get_threads, _set_threads = torch.get_num_threads, torch.set_num_threads
_DEVICE_ATTRIBUTE = torch._C.TensorBase.device
_IS_CUDA_ATTRIBUTE = torch._C.TensorBase.is_cuda
_MISSING = object()
# The clocks a timer may read, by name in the time module (bound now, before any student code runs).
_REAL_CLOCKS = {name: getattr(time, name) for name in (
    "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns")}
_BENCH = "grader.course.bench"  # the course's timer: allowed in transfer_bandwidth, its clock bound at import

# ---------------------------------------------------------------- replacing attributes for one call


def _get(owner, name):
    return owner.get(name, _MISSING) if isinstance(owner, dict) else getattr(owner, name, _MISSING)


def _set(owner, name, value):
    if isinstance(owner, dict):
        owner[name] = value
    else:
        setattr(owner, name, value)


def _delete(owner, name):
    if isinstance(owner, dict):
        owner.pop(name, None)
    else:
        delattr(owner, name)


class _Patched:
    """Set attributes of modules (or keys of namespaces) inside a `with` block; the previous values come back on
    the way out. Modes (TorchFunctionModes) are entered after the changes and left before they are undone."""

    def __init__(self, changes, *modes):
        self.changes, self.modes, self.saved, self.entered = changes, [m for m in modes if m is not None], [], []

    def __enter__(self):
        for owner, name, value in self.changes:
            self.saved.append((owner, name, _get(owner, name)))
            _set(owner, name, value)
        for mode in self.modes:
            mode.__enter__()
            self.entered.append(mode)
        return self

    def __exit__(self, *exc):
        try:
            while self.entered:
                self.entered.pop().__exit__(*exc)
        finally:
            for owner, name, value in reversed(self.saved):
                if value is _MISSING:
                    _delete(owner, name)
                else:
                    _set(owner, name, value)
            self.saved = []
        return False


def _on_both(name, value):
    """The same replacement in torch.cuda and torch.cuda.memory (where the memory functions are defined)."""
    changes = [(_cuda, name, value)]
    if hasattr(_cuda_memory, name):
        changes.append((_cuda_memory, name, value))
    return changes


def _aliases(changes, reached):
    """The same replacements of torch.cuda's (and torch.accelerator's) attributes under the names the functions
    `reached` imported them by (`from torch.cuda import synchronize`): the keys of their namespaces bound to a replaced
    attribute. Read before the changes are made."""
    owners = [m for m in (_cuda, _cuda_memory, _accelerator) if m is not None]
    replaced = {}
    for owner, name, value in changes:
        real = _get(owner, name) if any(owner is m for m in owners) else _MISSING
        if real is not _MISSING:
            replaced.setdefault(id(real), (real, value))
    out, seen = [], set()
    for namespace in _namespaces(reached):
        if namespace is globals() or any(namespace is vars(m) for m in owners):
            continue
        for key, value in list(namespace.items()):
            hit = replaced.get(id(value))
            if hit is not None and hit[0] is value and (id(namespace), key) not in seen:
                seen.add((id(namespace), key))
                out.append((namespace, key, hit[1]))
    return out


def _machine(changes, reached=(), *modes):
    """Patches that make a machine of `changes`, also under the names the functions `reached` imported them by."""
    return _Patched(changes + _aliases(changes, reached), *modes)


def _counting_gpus(count):
    """A machine with `count` CUDA GPUs, as far as counting and availability go."""
    changes = [(_cuda, "device_count", lambda: count), (_cuda, "is_available", lambda: count > 0)]
    if _accelerator is not None:
        changes += [(_accelerator, name, value) for name, value in (
            ("device_count", lambda: count), ("is_available", lambda: count > 0),
            ("current_accelerator", lambda check_available=False: torch.device("cuda") if count else None))
            if hasattr(_accelerator, name)]
    return changes


def _not_compiled(*args, **kwargs):
    raise AssertionError("Torch not compiled with CUDA enabled")


def _no_accelerator(*args, **kwargs):
    raise RuntimeError("Cannot access accelerator device when none is available.")


class _NoEvent:
    """What torch.cuda.Event is in a CPU build."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Tried to instantiate dummy base class Event")


class _NoPinning(TorchFunctionMode):
    """Pinning host memory needs an accelerator: refuse it as a CPU build of PyTorch does."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") == "pin_memory" or kwargs.get("pin_memory"):
            _no_accelerator()
        return func(*args, **kwargs)


def _zero(*args, **kwargs):
    return 0


def _cpu_only_changes():
    """A CPU-only machine: no GPU to count, CUDA calls fail as in a CPU build, counters read 0."""
    changes = _counting_gpus(0)
    changes += [(_cuda, "synchronize", _not_compiled), (_cuda, "current_stream", _not_compiled),
                (_cuda, "default_stream", _not_compiled), (_cuda, "current_device", _not_compiled),
                (_cuda, "Event", _NoEvent), (_cuda, "is_initialized", lambda: False), (_cuda, "init", _not_compiled)]
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        changes += _on_both(name, _zero)
    if _accelerator is not None and hasattr(_accelerator, "synchronize"):
        changes.append((_accelerator, "synchronize", _no_accelerator))
    return changes


def _cpu_only(*reached):
    """A CPU-only machine (see _cpu_only_changes), where pinning host memory raises; also under the names the
    functions `reached` imported torch.cuda's functions by."""
    return _machine(_cpu_only_changes(), reached, _NoPinning())


# ---------------------------------------------------------------- clocks


class _Clock:
    """Simulated seconds for one scenario. They pass only when the scenario says so (a call's work, a copy, a wait
    for the simulated GPU), plus a nanosecond per reading so that a loop waiting for the clock ends. Only the
    thread that made it sees it; every other thread keeps reading the real clocks."""

    TICK = 1e-9

    def __init__(self):
        self.elapsed = 0.0
        self.thread = _get_ident()

    def now(self):
        return self.elapsed

    def advance(self, seconds):
        self.elapsed += seconds

    def reach(self, t):
        self.elapsed = max(self.elapsed, t)

    def _fake(self, real, nanoseconds):
        """A clock function reading this clock from where `real` stands now, in the scenario's thread."""
        base = real()

        def clock():
            if _get_ident() != self.thread:
                return real()
            self.elapsed += self.TICK
            return base + round(self.elapsed * 1e9) if nanoseconds else base + self.elapsed
        clock.__name__ = getattr(real, "__name__", "clock")
        return clock

    def changes(self, *reached):
        """The replacements that make the time module, timeit, grader.course.bench and the clock aliases in the
        namespaces of the functions `reached` read this clock."""
        fakes = {id(real): self._fake(real, name.endswith("_ns")) for name, real in _REAL_CLOCKS.items()}
        changes = [(time, name, fakes[id(real)]) for name, real in _REAL_CLOCKS.items()]
        timeit = sys.modules.get("timeit")  # imported by whoever uses it (torch.utils.benchmark, the student)
        if timeit is not None:
            changes.append((timeit, "default_timer", fakes[id(_REAL_CLOCKS["perf_counter"])]))
        namespaces = _namespaces(reached)
        bench = sys.modules.get(_BENCH)
        if bench is not None:
            namespaces.append(vars(bench))
        for namespace in namespaces:
            if namespace is globals():  # this module's own clocks stay real
                continue
            for key, value in list(namespace.items()):
                if id(value) in fakes and any(value is real for real in _REAL_CLOCKS.values()):
                    changes.append((namespace, key, fakes[id(value)]))
        return changes


class _RealClock:
    """The host's own clock: simulated work really takes its time (the sanity checks' machine)."""

    def now(self):
        return _perf()

    def advance(self, seconds):
        self.reach(_perf() + seconds)

    def reach(self, t):
        while True:
            left = t - _perf()
            if left <= 0:
                return
            _sleep(left)

    def changes(self, *reached):
        return []


def _namespaces(objects, depth=4):
    """The global namespaces of the Python functions reachable from `objects`: the functions themselves, what
    their closures and defaults hold, a partial's function, a bound method's function (the grader's wrapper
    around the student's function holds it in a closure). A notebook's functions share the notebook's."""
    found, seen = {}, set()

    def walk(obj, left):
        if id(obj) in seen or left < 0:
            return
        seen.add(id(obj))
        if isinstance(obj, functools.partial):
            walk(obj.func, left - 1)
            return
        fn = getattr(obj, "__func__", obj)
        code = getattr(fn, "__code__", None)
        namespace = getattr(fn, "__globals__", None)
        if code is None or not isinstance(namespace, dict):
            call = getattr(type(obj), "__call__", None)
            if call is not None and getattr(call, "__code__", None) is not None:
                walk(call, left - 1)
            return
        found.setdefault(id(namespace), namespace)
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                walk(cell.cell_contents, left - 1)
            except ValueError:  # an empty cell
                pass
        for default in (getattr(fn, "__defaults__", None) or ()) + tuple((getattr(fn, "__kwdefaults__", None)
                                                                         or {}).values()):
            if callable(default):
                walk(default, left - 1)

    for obj in objects:
        walk(obj, depth)
    return list(found.values())


# ---------------------------------------------------------------- a simulated GPU


class _Allocator:
    """One device's caching allocator: bytes of live blocks, their peak, and what it reserved from the driver."""

    def __init__(self, allocated=0, peak=0, cached=0):
        self.allocated, self.peak = allocated, max(peak, allocated)
        self.reserved = allocated + cached  # the caching allocator keeps freed blocks: reserved >= allocated
        self.peak_reserved = self.reserved

    def allocate(self, nbytes):
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)
        if self.allocated > self.reserved:  # grow the cache in 2 MiB segments, as the allocator does
            self.reserved = -(-self.allocated // 2**21) * 2**21
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        return _Block(self, nbytes)

    def free(self, nbytes):
        self.allocated -= nbytes

    def stats(self):
        return {"allocated_bytes.all.current": self.allocated, "allocated_bytes.all.peak": self.peak,
                "reserved_bytes.all.current": self.reserved, "reserved_bytes.all.peak": self.peak_reserved}

    def reset_peak(self):
        self.peak, self.peak_reserved = self.allocated, self.reserved

    def empty_cache(self):
        self.reserved = self.allocated


class _Block:
    """A simulated device allocation: it counts until the last reference to it goes, like a tensor."""

    def __init__(self, allocator, nbytes):
        self.allocator, self.nbytes = allocator, nbytes

    def __del__(self):
        self.allocator.free(self.nbytes)


class _Properties:
    """What torch.cuda.get_device_properties tells of a simulated GPU."""

    def __init__(self, index):
        self.name, self.index = "Simulated GPU", index
        self.total_memory, self.multi_processor_count, self.major, self.minor = 80 * 2**30, 132, 9, 0
        self.L2_cache_size = 50 * 2**20


class _FakeGPU:
    """`count` CUDA devices simulated on a clock: one queue of work (on the current device; enough for a timer),
    events, and an allocator per device whose counters start at allocated / peak / cached."""

    LAUNCH = 2e-6  # host seconds a launch takes; the work it queues may start as the launch begins

    def __init__(self, clock, count=1, allocated=0, peak=0, cached=0):
        self.clock, self.count, self.current = clock, count, 0
        self.busy_until = clock.now()  # when the queued work will be done
        self.memory = [_Allocator(allocated, peak, cached) for _ in range(count)]

    def index(self, device=None):
        """The device index a torch.cuda function's `device` argument names (None: the current device)."""
        if device is None:
            return self.current
        if isinstance(device, int) and not isinstance(device, bool):
            index = device
        else:
            device = torch.device(device)
            if device.type != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {device}")
            index = self.current if device.index is None else device.index
        if not 0 <= index < self.count:
            raise RuntimeError("CUDA error: invalid device ordinal")
        return index

    # work
    def launch(self, seconds):
        """Queue `seconds` of work behind what is queued; return after the launch's host time, as CUDA does."""
        self.busy_until = max(self.clock.now(), self.busy_until) + seconds
        self.clock.advance(self.LAUNCH)

    def synchronize(self, *args, **kwargs):
        self.clock.reach(self.busy_until)

    def allocate(self, nbytes, device=None):
        return self.memory[self.index(device)].allocate(nbytes)

    def changes(self):
        gpu, clock = self, self.clock

        class Event:
            """torch.cuda.Event on the simulated device: it completes when the queue reaches it."""

            def __init__(self, enable_timing=False, blocking=False, interprocess=False, **kwargs):
                self.enable_timing, self.t = enable_timing, None

            def record(self, stream=None):
                self.t = max(clock.now(), gpu.busy_until)

            def query(self):
                return self.t is None or clock.now() >= self.t

            def synchronize(self):
                if self.t is not None:
                    clock.reach(self.t)

            def wait(self, stream=None):
                pass

            def elapsed_time(self, end_event):
                if not (self.enable_timing and end_event.enable_timing):
                    raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
                if self.t is None or end_event.t is None:
                    raise RuntimeError("Both events must be recorded before calculating elapsed time.")
                if not (self.query() and end_event.query()):
                    raise RuntimeError("CUDA error: device not ready")
                return (end_event.t - self.t) * 1e3  # milliseconds, as CUDA reports

        class Stream:
            def __init__(self, *args, **kwargs):
                pass

            def synchronize(self):
                gpu.synchronize()

            def query(self):
                return clock.now() >= gpu.busy_until

            def wait_event(self, event):
                pass

            def wait_stream(self, stream):
                pass

            def record_event(self, event=None):
                event = event if event is not None else Event()
                event.record(self)
                return event

        class device:
            """torch.cuda.device(i): the current device inside the block."""

            def __init__(self, device):
                self.index = gpu.index(device) if device is not None and device != -1 else None

            def __enter__(self):
                self.previous = gpu.current
                if self.index is not None:
                    gpu.current = self.index
                return self

            def __exit__(self, *exc):
                gpu.current = self.previous
                return False

        def set_device(device):
            gpu.current = gpu.index(device)

        def counter(read):
            return lambda device=None: read(gpu.memory[gpu.index(device)])

        def each(act):
            return lambda device=None: act(gpu.memory[gpu.index(device)])

        stream = Stream()
        changes = _counting_gpus(self.count)
        changes += [(_cuda, "synchronize", gpu.synchronize), (_cuda, "current_device", lambda: gpu.current),
                    (_cuda, "set_device", set_device), (_cuda, "device", device),
                    (_cuda, "current_stream", lambda device=None: stream), (_cuda, "Stream", Stream),
                    (_cuda, "default_stream", lambda device=None: stream), (_cuda, "Event", Event),
                    (_cuda, "is_initialized", lambda: True), (_cuda, "init", lambda: None),
                    (_cuda, "get_device_properties", lambda device=None: _Properties(gpu.index(device))),
                    (_cuda, "get_device_name", lambda device=None: _Properties(gpu.index(device)).name)]
        for name, value in (("memory_allocated", counter(lambda a: a.allocated)),
                            ("max_memory_allocated", counter(lambda a: a.peak)),
                            ("memory_reserved", counter(lambda a: a.reserved)),
                            ("max_memory_reserved", counter(lambda a: a.peak_reserved)),
                            ("reset_peak_memory_stats", each(_Allocator.reset_peak)),
                            ("reset_max_memory_allocated", each(_Allocator.reset_peak)),
                            ("memory_stats", counter(_Allocator.stats)),
                            ("empty_cache", lambda: [a.empty_cache() for a in gpu.memory] and None)):
            changes += _on_both(name, value)
        if _accelerator is not None and hasattr(_accelerator, "synchronize"):
            changes.append((_accelerator, "synchronize", gpu.synchronize))
        return changes

    def patches(self, *reached):
        return _machine(self.changes(), reached)


# ---------------------------------------------------------------- a simulated machine's tensors

# A copy from a simulated GPU to the host runs at this share of the rate the other way, from memory pinned as much: a
# rate of its own, so a transfer_bandwidth that copies the wrong way measures what no host-to-device copy does.
READBACK = 0.7
# Factory functions that only allocate (their memory is written later, if ever).
_ALLOCATE_ONLY = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
# What new host memory costs, as a share of what writing its bytes costs (the kernel hands out zeroed pages). Not a
# round share, so no two mistakes (an allocation timed, the bytes counted twice) cancel out.
_ALLOCATION = 0.4


def _tensors(x, depth=0):
    """The tensors in a call's arguments or result (through lists, tuples and dicts)."""
    if isinstance(x, _Tensor):
        return [x]
    if depth < 3 and isinstance(x, (list, tuple)):
        return [t for item in x for t in _tensors(item, depth + 1)]
    if depth < 3 and isinstance(x, dict):
        return [t for item in x.values() for t in _tensors(item, depth + 1)]
    return []


def _storage(t):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return None


def _in_place(name, args):
    """Whether a call writes into its first argument, a tensor (torch's trailing underscore: add_, copy_)."""
    return name.endswith("_") and not name.startswith("__") and bool(args) and isinstance(args[0], _Tensor)


def _versions(*tensors):
    """The tensors' version counters (which every in-place write moves), or None where a tensor has none."""
    try:
        return tuple(t._version for t in tensors)
    except Exception:  # inference tensors keep no version
        return None


class _Machine(TorchFunctionMode):
    """Torch calls on a simulated machine: each costs simulated time by the bytes it moves.

    On the host, a call costs (0.4 x the bytes of new storage it allocates + the bytes it writes) / host_rate:
    `empty` pays for its pages, `ones` and `clone` for their pages and their writes, `copy_` for what it writes. With a GPU
    (`gpu`), CUDA tensors are made on `meta` and remembered with their device index; a host-to-device copy
    runs at `pinned_rate` from pinned memory (queued: with non_blocking the host goes on at once) and at
    `pageable_rate` from pageable memory (staged: the host waits), a device-to-host copy at READBACK times the
    rate for its destination's pinning; work on device tensors is queued at `device_rate`. Without a GPU, CUDA
    tensors and pinning raise as in a CPU build. `moves` records each move's (operation, non_blocking)."""

    def __init__(self, clock, gpu=None, host_rate=20e9, pinned_rate=48e9, pageable_rate=12e9, device_rate=3e12):
        super().__init__()
        self.clock, self.gpu = clock, gpu
        self.host_rate, self.pinned_rate, self.pageable_rate, self.device_rate = (
            host_rate, pinned_rate, pageable_rate, device_rate)
        self.on_gpu = {}  # id(tensor) -> (tensor, device index): the simulated GPU's tensors
        self.pinned = {}  # id(tensor) -> tensor: pinned host tensors
        self.copied = {}  # (id(dst), id(src)) -> (dst, src, their versions) after a real host copy
        self.moves = []

    # where a tensor is
    def where(self, t):
        """('cuda', i) for a simulated GPU tensor, else (its device type, None)."""
        entry = self.on_gpu.get(id(t))
        if entry is not None and entry[0] is t:
            return "cuda", entry[1]
        return t.device.type, None

    def is_pinned(self, t):
        entry = self.pinned.get(id(t))
        return entry is not None and entry is t

    def _on(self, t, index):
        self.on_gpu[id(t)] = (t, index)
        return t

    def _pin(self, t):
        self.pinned[id(t)] = t
        return t

    def _cuda(self, device):
        """The index of the simulated GPU `device` names (an int names a CUDA device, as in torch), or None."""
        if device is None or isinstance(device, bool):
            return None
        if not isinstance(device, int) and torch.device(device).type != "cuda":
            return None
        if self.gpu is None:
            _not_compiled()
        return self.gpu.index(device)

    # costs
    def _host(self, seconds):
        self.clock.advance(seconds)

    def _host_call(self, name, args, out):
        """Charge a host call by the bytes of new storage it made and the bytes it wrote."""
        inputs = {_storage(t) for t in _tensors(args)}
        made = sum(t.untyped_storage().nbytes() for t in _tensors(out) if t.device.type == "cpu"
                   and _storage(t) not in inputs)
        if _in_place(name, args):
            written = args[0].nbytes  # in place: what it overwrote
        elif name == "__setitem__" and len(args) > 2:
            written = args[2].nbytes if isinstance(args[2], _Tensor) else 0
        elif name in _ALLOCATE_ONLY:
            written = 0
        else:
            written = made
        self._host((_ALLOCATION * made + written) / self.host_rate)

    def _transfer(self, dst, src, non_blocking):
        """The time a copy from src to dst takes, where at least one of them is on the simulated GPU."""
        nbytes = dst.nbytes
        (dst_kind, _), (src_kind, _) = self.where(dst), self.where(src)
        if dst_kind == "cuda" and src_kind == "cuda":
            self.gpu.launch(nbytes / self.device_rate)
            return
        host = src if dst_kind == "cuda" else dst
        share = 1.0 if dst_kind == "cuda" else READBACK
        if self.is_pinned(host):
            self.gpu.launch(nbytes / (share * self.pinned_rate))  # DMA from (or to) pinned memory: queued
            if not non_blocking:
                self.gpu.synchronize()
        else:
            self.gpu.launch(nbytes / (share * self.pageable_rate))  # staged through a pinned buffer; the host waits
            self.gpu.synchronize()

    # the calls
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        owner = getattr(func, "__self__", None)
        tensor = args[0] if args and isinstance(args[0], _Tensor) else None
        if tensor is not None and (owner is _DEVICE_ATTRIBUTE or owner is _IS_CUDA_ATTRIBUTE):
            return self._attribute(func, owner, args)
        if tensor is not None and name == "is_pinned":
            return self.is_pinned(tensor)
        if tensor is not None and name == "pin_memory":
            return self._pinned_copy(tensor)
        pin = bool(kwargs.get("pin_memory"))
        if pin:
            if self.gpu is None:
                _no_accelerator()
            kwargs["pin_memory"] = False
        if tensor is not None and name in ("to", "cuda", "cpu"):
            return self._move(func, name, args, kwargs)
        if tensor is not None and name == "copy_" and len(args) > 1 and isinstance(args[1], _Tensor):
            return self._copy(func, args, kwargs)
        index = self._cuda(kwargs.get("device"))
        on_gpu = [self.where(t)[1] for t in _tensors((args, kwargs)) if self.where(t)[0] == "cuda"]
        if index is not None:
            kwargs["device"] = "meta"
            return self._on_gpu_call(func, name, args, kwargs, index)
        if on_gpu:
            return self._on_gpu_call(func, name, args, kwargs, on_gpu[0])
        out = func(*args, **kwargs)
        self._host_call(name, args, out)
        return self._pin(out) if pin and isinstance(out, _Tensor) else out

    def _attribute(self, func, owner, args):
        """`.device` and `.is_cuda` of a tensor: a simulated GPU tensor says where it is simulated to be."""
        kind, index = self.where(args[0])
        if kind != "cuda":
            return func(*args)
        return torch.device("cuda", index) if owner is _DEVICE_ATTRIBUTE else True

    def _pinned_copy(self, tensor):
        """`.pin_memory()`: a pinned copy (on a machine with a GPU; a CPU-only one refuses, as a CPU build does)."""
        if self.gpu is None:
            _no_accelerator()
        out = tensor.clone()
        self._host_call("clone", (tensor,), out)
        return self._pin(out)

    def _copy(self, func, args, kwargs):
        """`dst.copy_(src, non_blocking)`: a transfer when either is on the simulated GPU, else a host copy."""
        dst, src = args[0], args[1]
        non_blocking = bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
        if "cuda" in (self.where(dst)[0], self.where(src)[0]):
            self.moves.append(("copy_", non_blocking))
            self._transfer(dst, src, non_blocking)
            return dst
        self._host_call("copy_", args, None)
        return self._host_copy(func, args, kwargs)

    def _on_gpu_call(self, func, name, args, kwargs, index):
        """Work on the simulated GPU `index`: done on meta tensors, its writes queued at the device's rate."""
        out = func(*args, **kwargs)
        written = sum(t.nbytes for t in _tensors(out) if t.device.type == "meta")
        if _in_place(name, args):
            written = args[0].nbytes
        if name not in _ALLOCATE_ONLY and written:
            self.gpu.launch(written / self.device_rate)
        for t in _tensors(out):
            if t.device.type == "meta" and self.where(t)[0] != "cuda":
                self._on(t, index)
        return out

    def _host_copy(self, func, args, kwargs):
        """dst.copy_(src) on the host, done for real unless dst already holds what this copy would write (the same
        pair copied before, neither written since): a timer's hundreds of repeated copies then cost no real time."""
        dst, src = args[0], args[1]
        key = (id(dst), id(src))
        done, versions = self.copied.get(key), _versions(dst, src)
        if done is not None and done[0] is dst and done[1] is src and versions is not None and done[2] == versions:
            return dst
        out = func(*args, **kwargs)
        self.copied[key] = (dst, src, _versions(dst, src))
        return out

    def _move(self, func, name, args, kwargs):
        """`.to(...)`, `.cuda(...)` and `.cpu()`: the same tensor when nothing changes, else a copy."""
        src = args[0]
        if name == "to":
            device, dtype, non_blocking, _ = _parse_to(*args[1:], **{k: v for k, v in kwargs.items() if k != "copy"})
            copy = bool(kwargs.get("copy", False))
        elif name == "cuda":
            if self.gpu is None:
                _not_compiled()
            named = args[1] if len(args) > 1 else kwargs.get("device")
            device = torch.device("cuda", self.gpu.current if named is None else self.gpu.index(named))
            dtype, copy = None, False
            non_blocking = bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
        else:
            device, dtype, non_blocking, copy = torch.device("cpu"), None, False, False
        kind, index = self.where(src)
        target = (kind, index) if device is None else (
            ("cuda", self._cuda(device)) if torch.device(device).type == "cuda" else (torch.device(device).type, None))
        if "cuda" not in (kind, target[0]):  # host to host (or meta): torch's own
            out = func(*args, **kwargs)
            self._host_call(name, args, out)
            return out
        self.moves.append((name, non_blocking))
        if target == (kind, index) and (dtype is None or dtype == src.dtype) and not copy:
            return src
        dtype = dtype or src.dtype
        if target[0] == "cuda":
            out = self._on(_empty(tuple(src.shape), dtype=dtype, device="meta"), target[1])
        else:
            out = _empty(tuple(src.shape), dtype=dtype, device=target[0]).zero_()
        self._transfer(out, src, non_blocking)
        return out


def _simulated(clock, count=0, reached=(), **rates):
    """The patches and the mode of a simulated machine with `count` GPUs (0: CPU-only) on `clock`; the GPU, or
    None, and the machine."""
    gpu = _FakeGPU(clock, count) if count else None
    machine = _Machine(clock, gpu, **rates)
    changes = clock.changes(*reached) + (gpu.changes() if gpu is not None else _cpu_only_changes())
    return _machine(changes, reached, machine), gpu, machine


# ---------------------------------------------------------------- try_gpu / try_all_gpus


def try_gpu_on(try_gpu, count, calls):
    """try_gpu on a machine with `count` GPUs; each call is None (no argument), an int i, or {"i": i}."""
    out = []
    with _machine(_counting_gpus(count), (try_gpu,)):
        for c in calls:
            if c is None:
                out.append(try_gpu())
            elif isinstance(c, dict):
                out.append(try_gpu(**c))
            else:
                out.append(try_gpu(c))
    return out


def try_all_gpus_on(try_all_gpus, count):
    """try_all_gpus on a machine with `count` GPUs: what it returned."""
    with _machine(_counting_gpus(count), (try_all_gpus,)):
        return try_all_gpus()


# ---------------------------------------------------------------- to_device

_CALLS = []  # what the watched tensors saw: (method, non_blocking)


class _Watched(torch.Tensor):
    """A tensor that notes which non_blocking its moves were asked for (invisible on a CPU otherwise)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "to" and args and isinstance(args[0], _Watched):
            try:
                _CALLS.append(("to", bool(_parse_to(*args[1:], **kwargs)[2])))
            except Exception:
                _CALLS.append(("to", None))
        elif name == "cuda" and args and isinstance(args[0], _Watched):
            _CALLS.append(("cuda", bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))))
        elif name == "copy_" and len(args) > 1 and isinstance(args[1], _Watched):
            _CALLS.append(("copy_", bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))))
        return super().__torch_function__(func, types, args, kwargs)


class Thing:
    """Some object that is not a tensor or a container (a tokenizer, a callback...)."""

    def __repr__(self):
        return "Thing()"


_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
           "int64": torch.int64, "int32": torch.int32, "uint8": torch.uint8, "bool": torch.bool}


def _build(records, machine=None):
    """The batch a flat spec describes: records [id, parent id, key, kind, arg] in depth-first order (the
    bridge carries only shallow data, so the nested spec travels flattened). Kinds and their arg:
    "tensor" [shape, dtype], "param" shape, "watched" shape (a tensor noting its moves' non_blocking),
    "cuda" [shape, index] (a float32 tensor on `machine`'s simulated GPU), "numpy" shape, "value" the value itself,
    "object" None, "list"/"tuple"/"dict" None (and the Mappings
    "OrderedDict", "defaultdict" (default_factory list), "UserDict", None),
    "namedtuple" [name, fields]; a child's key is its index, dict key or position in the namedtuple."""
    children, kinds, classes = {}, {}, {}
    for nid, parent, key, kind, arg in records:
        kinds[nid] = (kind, arg)
        children.setdefault(parent, []).append((key, nid))

    def make(nid):
        kind, arg = kinds[nid]
        kids = [(key, make(c)) for key, c in children.get(nid, [])]
        if kind == "tensor":
            shape, dtype = tuple(arg[0]), _DTYPES[arg[1]]
            if dtype.is_floating_point:
                return _randn(shape).to(dtype)
            if dtype == torch.bool:
                return _randint(0, 2, shape).bool()
            return _randint(0, 100, shape).to(dtype)
        if kind == "param":
            return _Parameter(_randn(tuple(arg)))
        if kind == "cuda":
            return machine._on(_empty(tuple(arg[0]), device="meta"), arg[1])
        if kind == "watched":
            return _randn(tuple(arg)).as_subclass(_Watched)
        if kind == "numpy":
            return np.arange(int(np.prod(arg)), dtype=np.float32).reshape(arg)
        if kind == "value":
            return arg
        if kind == "object":
            return Thing()
        if kind == "list":
            return [v for _, v in kids]
        if kind == "tuple":
            return tuple(v for _, v in kids)
        if kind == "dict":
            return {k: v for k, v in kids}
        if kind == "OrderedDict":
            return collections.OrderedDict(kids)
        if kind == "defaultdict":
            return collections.defaultdict(list, kids)
        if kind == "UserDict":
            return collections.UserDict(kids)
        if kind == "namedtuple":
            name, fields = arg[0], tuple(arg[1])
            if (name, fields) not in classes:
                classes[(name, fields)] = collections.namedtuple(name, fields)
            return classes[(name, fields)](*(v for _, v in kids))
        raise ValueError(f"unknown kind {kind!r}")

    return make(records[0][0])


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _children(x):
    """(key, child) pairs of a container the exercise knows (any Mapping, list, tuple, namedtuple), else None."""
    if isinstance(x, collections.abc.Mapping):
        return list(x.items())
    if type(x) in (list, tuple) or _is_namedtuple(x):
        return list(enumerate(x))
    return None


def _path(path, key, x):
    if _is_namedtuple(x):
        return f"{path}.{type(x)._fields[key]}"
    return f"{path}[{key!r}]"


def _leaves(x, path, found, depth=0):
    """id -> path of every leaf (anything that is not a known container) and every container of the input (a
    result holding one of the input's containers shares it with the caller)."""
    kids = _children(x) if depth < 12 else None
    found.setdefault(id(x), path)
    if kids is None:
        return
    for key, child in kids:
        _leaves(child, _path(path, key, x), found, depth + 1)


def _inputs(x, path, found, depth=0):
    """path -> detached copy of every input tensor leaf."""
    kids = _children(x) if depth < 12 else None
    if kids is None:
        if isinstance(x, _Tensor):
            found[path] = x.detach().as_subclass(_Tensor).clone()
        return
    for key, child in kids:
        _inputs(child, _path(path, key, x), found, depth + 1)


def _snapshot(x, depth=0):
    """The identity and contents of every container of the input, to notice changes made in place."""
    kids = _children(x) if depth < 12 else None
    if kids is None:
        return id(x)
    return (type(x).__name__, id(x), [(k, _snapshot(c, depth + 1)) for k, c in kids])


def _changed(before, x, path, depth=0):
    """Paths of the input's containers that are not as they were (items replaced, added or removed)."""
    kids = _children(x) if depth < 12 else None
    if kids is None:
        return [] if before == id(x) else [path]
    if not isinstance(before, tuple) or before[1] != id(x):
        return [path]
    if [k for k, _ in before[2]] != [k for k, _ in kids]:
        return [path]
    out = []
    for (key, snap), (_, child) in zip(before[2], kids):
        out += _changed(snap, child, _path(path, key, x), depth + 1)
    return out


def _describe(x, leaves, path, out, depth=0):
    """The output as data, one entry per path (a flat dict: the bridge carries only shallow data): containers
    with their types and keys, tensors by device/dtype/shape (and values on the cpu), other leaves by type."""
    if isinstance(x, _Tensor):
        d = {"kind": "tensor", "type": type(x).__name__, "device": str(x.device),
             "dtype": str(x.dtype).removeprefix("torch."), "shape": list(x.shape), "input": leaves.get(id(x))}
        if x.device.type == "cpu" and x.layout == torch.strided:
            d["values"] = x.detach().as_subclass(_Tensor).clone()
        out[path] = d
        return
    kids = _children(x) if depth < 12 else None
    if kids is None:
        try:
            text = repr(x)[:60]
        except Exception:
            text = "?"
        out[path] = {"kind": "other", "type": type(x).__name__, "input": leaves.get(id(x)), "repr": text}
        return
    if isinstance(x, collections.abc.Mapping):
        out[path] = {"kind": type(x).__name__, "type": type(x).__name__, "keys": list(x)}
        if isinstance(x, collections.defaultdict):
            out[path]["factory"] = getattr(x.default_factory, "__name__", repr(x.default_factory))
    elif _is_namedtuple(x):
        out[path] = {"kind": "namedtuple", "type": type(x).__name__, "fields": list(type(x)._fields), "len": len(x)}
    else:
        out[path] = {"kind": type(x).__name__, "type": type(x).__name__, "len": len(x)}
    out[path]["input"] = leaves.get(id(x))  # the input's path when this is one of the input's own containers
    for key, child in kids:
        _describe(child, leaves, _path(path, key, x), out, depth + 1)


def move(to_device, spec, device, non_blocking, seed):
    """to_device on a batch built from `spec` (flat records, see _build), moved to `device` on a CPU-only machine;
    what came back, described as data. non_blocking=None calls to_device(batch, device), leaving the argument to its
    default."""
    _manual_seed(seed)
    del _CALLS[:]
    batch = _build(spec)
    leaves, inputs = {}, {}
    _leaves(batch, "batch", leaves)
    _inputs(batch, "batch", inputs)
    before = _snapshot(batch)
    try:
        with _cpu_only(to_device):  # whatever the grading machine has: to_device asking torch.cuda sees none
            if non_blocking is None:
                out = to_device(batch, device)
            else:
                out = to_device(batch, device, non_blocking=non_blocking)
        described = {}
        _describe(out, leaves, "batch", described)
        report = {"output": described, "changed": _changed(before, batch, "batch"),
                  "inputs": inputs, "calls": [list(c) for c in _CALLS]}
    finally:  # also when to_device raised after some moves: the next scenario starts from no calls
        del _CALLS[:]
    del batch, out
    return report


def move_to_gpu(to_device, spec, device, non_blocking, seed, count):
    """to_device on a batch built from `spec` (as `move`; "cuda" leaves start on a simulated GPU), moved to
    `device` on a machine with `count` simulated GPUs whose tensors live on `meta` (see _Machine). What came back,
    described as data with each tensor's simulated device, and every move's (operation, non_blocking)."""
    _manual_seed(seed)
    patches, _, machine = _simulated(_Clock(), count, (to_device,))
    batch = _build(spec, machine)
    leaves = {}
    _leaves(batch, "batch", leaves)
    before = _snapshot(batch)
    with patches:
        if non_blocking is None:
            out = to_device(batch, device)
        else:
            out = to_device(batch, device, non_blocking=non_blocking)
        described = {}
        _describe(out, leaves, "batch", described)
    report = {"output": described, "changed": _changed(before, batch, "batch"), "inputs": {},
              "calls": [list(c) for c in machine.moves]}
    del batch, out
    return report


# ---------------------------------------------------------------- time_fn


def time_calls(time_fn, warmup_ms, timed_ms, warmup, reps, machine, clock="simulated"):
    """time_fn(fn, warmup=..., reps=...) where call k of fn takes durations[k] milliseconds.

    durations = warmup_ms + timed_ms (the last one repeats if fn is called more often). machine "cpu": a
    CPU-only machine, fn does its work before it returns. machine "gpu": a simulated GPU, fn launches its
    work and returns at once; the work runs on the simulated device's queue. clock "simulated": the calls
    take exactly their durations on a simulated clock (no sleep); "real": on the host's clock (fn sleeps).
    warmup=None and reps=None leave both arguments to their defaults. Returns what time_fn returned, how often
    it called fn, and each call's span: the most a correct timer could have measured for it on this run (see
    `_spans`; on the simulated clock, its duration).
    """
    durations = [ms / 1e3 for ms in list(warmup_ms) + list(timed_ms)]
    sim = _Clock() if clock == "simulated" else _RealClock()
    launched, done = [], []  # per call: when fn was entered, when its work was finished
    gpu = _FakeGPU(sim) if machine == "gpu" else None

    def fn():
        k = len(launched)
        launched.append(sim.now())
        seconds = durations[min(k, len(durations) - 1)]
        if gpu is not None:
            gpu.launch(seconds)
            done.append(gpu.busy_until)
        else:
            sim.advance(seconds)
            done.append(sim.now())

    kwargs = {}
    if warmup is not None:
        kwargs["warmup"] = warmup
    if reps is not None:
        kwargs["reps"] = reps
    changes = sim.changes(time_fn) + (gpu.changes() if gpu is not None else _cpu_only_changes())
    called = sim.now()
    with _machine(changes, (time_fn,), None if gpu is not None else _NoPinning()):
        result = time_fn(fn, **kwargs)
    returned = sim.now()
    return {"seconds": result, "calls": len(launched), "spans": _spans(launched, done, called, returned)}


def _spans(launched: list[float], done: list[float], called: float, returned: float) -> list[float]:
    """Seconds per call: from the end of the previous call's work (or time_fn's start) to the later of the end
    of this call's work and the next launch (or time_fn's return). Any correct timing of call k lies inside
    (its clock starts after the work before it is done and stops before fn is called again), so the median of
    correct timings is at most the spans' median however late a busy machine woke the process or paused it,
    while a pause in one call does not move the spans' median the way it would move a slack for every call."""
    before = [called] + done[:-1]
    after = launched[1:] + [returned]
    return [max(d, a) - b for b, d, a in zip(before, done, after)]


# ---------------------------------------------------------------- transfer_bandwidth


def bandwidth(transfer_bandwidth, nbytes, pinned, device, gpus=0, rates=None):
    """transfer_bandwidth(nbytes, pinned, device) on a simulated machine with `gpus` GPUs (0: CPU-only), on the
    simulated clock: every torch call costs the time `_Machine` gives it at `rates` (host_rate, pinned_rate,
    pageable_rate, device_rate: bytes per second). What it returned."""
    patches, _, _ = _simulated(_Clock(), gpus, (transfer_bandwidth,), **(rates or {}))
    with patches:
        result = transfer_bandwidth(nbytes, pinned, device)
    return {"bandwidth": result}


def _copy_seconds(nbytes, reps=5):
    """Seconds of single plain host-to-host copies of nbytes on the real clock: the fastest and the slowest."""
    src = _empty(nbytes, dtype=torch.uint8).fill_(1)
    dst = _empty(nbytes, dtype=torch.uint8)
    _copy(dst, src)  # first touch of dst's pages, untimed
    times = []
    for _ in range(reps):
        t0 = _perf()
        _copy(dst, src)
        times.append(_perf() - t0)
    del src, dst
    return times


def bandwidth_on_the_real_clock(transfer_bandwidth, nbytes, pinned, device, calls=2):
    """transfer_bandwidth(nbytes, pinned, device) on a CPU-only machine and the host's real clock, called `calls`
    times between plain copies of the same size timed the same way: what it returned each time, and the plain
    copies' seconds (a sanity check with a wide band: a busy machine slows both, and only ever slows)."""
    threads = _get_threads()
    _set_threads(1)  # one thread, as in a grading kernel: a copy split over threads waits for the slowest
    results, reference = [], []
    try:
        reference += _copy_seconds(nbytes)
        for _ in range(calls):
            with _cpu_only(transfer_bandwidth):
                results.append(transfer_bandwidth(nbytes, pinned, device))
            reference += _copy_seconds(nbytes)
    finally:
        _set_threads(threads)
    return {"bandwidth": results, "reference_seconds": reference}


def bandwidth_error(transfer_bandwidth, nbytes, pinned, device):
    """transfer_bandwidth on a simulated CPU-only machine, for arguments it should refuse: whatever it returns or
    raises."""
    patches, _, _ = _simulated(_Clock(), 0, (transfer_bandwidth,))
    with patches:
        return transfer_bandwidth(nbytes, pinned, device)


# ---------------------------------------------------------------- memory_delta


def _cpu_fn(case, nbytes, keep):
    def keep_it():
        keep.append(_empty(nbytes, dtype=torch.uint8))

    def temporary():
        big = _empty(4 * nbytes, dtype=torch.uint8).fill_(1)
        keep.append(big[:nbytes].clone())  # big is freed when fn returns

    def returned():
        return _empty(nbytes, dtype=torch.uint8).fill_(2)

    def view():
        big = _empty(4 * nbytes, dtype=torch.uint8)
        keep.append(big[:nbytes])  # a view: it keeps all of big's storage alive

    def nothing():
        return float(_randn(nbytes // 4).sum())

    def several():
        for _ in range(3):
            keep.append(_empty(nbytes, dtype=torch.uint8))
        keep.append(_empty(2 * nbytes, dtype=torch.uint8).fill_(0)[:0])  # an empty view, full storage
    return {"keep": keep_it, "temporary": temporary, "return": returned, "view": view,
            "nothing": nothing, "several": several}[case]


def _counted(fn, calls):
    """fn, noting each call in `calls` (memory_delta calls fn once: a second call keeps what it keeps twice)."""
    def counted():
        calls.append(None)
        return fn()
    return counted


def held_on_cpu(memory_delta, case, nbytes, device):
    """memory_delta(fn, device) on a CPU-only machine, fn one of the cases of _cpu_fn with real tensors: what it
    returned, and how often it called fn."""
    keep, calls = [], []
    fn = _counted(_cpu_fn(case, nbytes, keep), calls)
    with _cpu_only(memory_delta):
        result = memory_delta(fn, device)
    del keep[:]
    return {"delta": result, "calls": len(calls)}


def held_on_gpu(memory_delta, case, nbytes, device, allocated, peak, cached, count=1, on=0):
    """memory_delta(fn, device) on `count` simulated GPUs whose allocators already hold `allocated` bytes each (their
    peak so far `peak`, plus `cached` bytes of free cache); fn allocates simulated blocks on GPU `on`, as in the
    CPU cases. What it returned, and how often it called fn."""
    gpu = _FakeGPU(_Clock(), count, allocated, peak, cached)
    keep, calls = [], []

    def fn():
        if case == "keep":
            keep.append(gpu.allocate(nbytes, on))
        elif case == "temporary":
            big = gpu.allocate(4 * nbytes, on)
            gpu.launch(0.001)
            keep.append(gpu.allocate(nbytes, on))
            del big
        elif case == "return":
            return gpu.allocate(nbytes, on)
        elif case == "several":
            for _ in range(3):
                keep.append(gpu.allocate(nbytes, on))
            tmp = gpu.allocate(8 * nbytes, on)
            del tmp
        elif case == "nothing":
            tmp = gpu.allocate(nbytes, on)
            del tmp
        return None

    with gpu.patches(memory_delta):
        result = memory_delta(_counted(fn, calls), device)
    del keep[:]
    return {"delta": result, "calls": len(calls)}
