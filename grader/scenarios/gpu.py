"""Chapter 09 scenarios: the student's device code run on simulated machines, so a CPU can grade GPU logic.

Grading runs without a GPU, yet `try_gpu`, `time_fn` and `memory_delta` have CUDA branches that must be
right. Each scenario here therefore decides what machine the student's code sees, for the length of the
call only, by replacing attributes of `torch.cuda` (and `torch.accelerator`) and putting the originals
back afterwards, whatever happens:

* `none`: a CPU-only machine, as a CPU build of PyTorch behaves: no devices, `torch.cuda.synchronize`
  and CUDA events raise, the CUDA memory counters read 0, and pinning host memory raises (a
  TorchFunctionMode refuses `pin_memory()` and `pin_memory=True`). On a GPU machine too, so the
  verdict is the same on any hardware.
* a number of GPUs (`count`): only `device_count` / `is_available` change (enough for `try_gpu`).
* `gpu`: one simulated CUDA device with an asynchronous queue on the host's real clock. A "kernel"
  launched by the test function returns at once; its work completes `seconds` later, one kernel after
  another. `torch.cuda.synchronize()` (and a stream's or an event's `synchronize()`) waits for the
  queue; a CUDA event records the time at which the queue reaches it. Its caching allocator's counters
  (`memory_allocated`, `max_memory_allocated`, `memory_reserved`, ...) count simulated blocks.

The scenarios return plain data only (numbers, strings, tensors on the CPU, containers), and compute
no expected value: the checks in grader/exercises/gpu.py judge it.
"""
import collections
import collections.abc
import time

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

_cuda = torch.cuda
_cuda_memory = torch.cuda.memory
_accelerator = getattr(torch, "accelerator", None)
_perf = time.perf_counter
_sleep = time.sleep
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_empty = torch.empty
_randn = torch.randn
_randint = torch.randint
_manual_seed = torch.manual_seed
_parse_to = torch._C._nn._parse_to
_copy = torch.Tensor.copy_
_get_threads, _set_threads = torch.get_num_threads, torch.set_num_threads
_MISSING = object()

# ---------------------------------------------------------------- replacing attributes for one call


class _Patched:
    """Set attributes of modules inside a `with` block; the previous values come back on the way out."""

    def __init__(self, changes, mode=None):
        self.changes, self.mode, self.saved = changes, mode, []

    def __enter__(self):
        for owner, name, value in self.changes:
            self.saved.append((owner, name, getattr(owner, name, _MISSING)))
            setattr(owner, name, value)
        if self.mode is not None:
            self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            if self.mode is not None:
                self.mode.__exit__(*exc)
        finally:
            for owner, name, value in reversed(self.saved):
                if value is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, value)
            self.saved = []
        return False


def _on_both(name, value):
    """The same replacement in torch.cuda and torch.cuda.memory (where the memory functions are defined)."""
    changes = [(_cuda, name, value)]
    if hasattr(_cuda_memory, name):
        changes.append((_cuda_memory, name, value))
    return changes


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
            raise RuntimeError("Cannot access accelerator device when none is available.")
        return func(*args, **kwargs)


def _zero(*args, **kwargs):
    return 0


def _cpu_only():
    """A CPU-only machine: no GPU to count, CUDA calls fail as in a CPU build, counters read 0, no pinning."""
    changes = _counting_gpus(0)
    changes += [(_cuda, "synchronize", _not_compiled), (_cuda, "current_stream", _not_compiled),
                (_cuda, "default_stream", _not_compiled), (_cuda, "current_device", _not_compiled),
                (_cuda, "Event", _NoEvent)]
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        changes += _on_both(name, _zero)
    if _accelerator is not None and hasattr(_accelerator, "synchronize"):
        changes.append((_accelerator, "synchronize", _no_accelerator))
    return _Patched(changes, _NoPinning())


# ---------------------------------------------------------------- a simulated GPU


class _FakeGPU:
    """One CUDA device simulated on the host's clock: a queue of work, events, and allocator counters."""

    def __init__(self, allocated=0, peak=0, cached=0):
        self.busy_until = _perf()  # when the queued work will be done
        self.allocated, self.peak = allocated, max(peak, allocated)
        self.reserved = allocated + cached  # the caching allocator keeps freed blocks: reserved >= allocated
        self.peak_reserved = self.reserved

    # work
    def launch(self, seconds):
        """Queue `seconds` of work behind what is queued; return at once, as a kernel launch does."""
        self.busy_until = max(_perf(), self.busy_until) + seconds

    def wait_until(self, t):
        while True:
            left = t - _perf()
            if left <= 0:
                return
            _sleep(left)

    def synchronize(self, *args, **kwargs):
        self.wait_until(self.busy_until)

    # memory
    def allocate(self, nbytes):
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)
        if self.allocated > self.reserved:  # grow the cache in 2 MiB segments, as the allocator does
            self.reserved = -(-self.allocated // 2**21) * 2**21
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        return _Block(self, nbytes)

    def free(self, nbytes):
        self.allocated -= nbytes

    def memory_stats(self, *args, **kwargs):
        return {"allocated_bytes.all.current": self.allocated, "allocated_bytes.all.peak": self.peak,
                "reserved_bytes.all.current": self.reserved, "reserved_bytes.all.peak": self.peak_reserved}

    def reset_peak(self, *args, **kwargs):
        self.peak, self.peak_reserved = self.allocated, self.reserved

    def empty_cache(self):
        self.reserved = self.allocated

    def patches(self):
        gpu = self

        class Event:
            """torch.cuda.Event on the simulated device: it completes when the queue reaches it."""

            def __init__(self, enable_timing=False, blocking=False, interprocess=False, **kwargs):
                self.enable_timing, self.t = enable_timing, None

            def record(self, stream=None):
                self.t = max(_perf(), gpu.busy_until)

            def query(self):
                return self.t is None or _perf() >= self.t

            def synchronize(self):
                if self.t is not None:
                    gpu.wait_until(self.t)

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
            def synchronize(self):
                gpu.synchronize()

            def query(self):
                return _perf() >= gpu.busy_until

            def wait_event(self, event):
                pass

            def wait_stream(self, stream):
                pass

            def record_event(self, event=None):
                event = event if event is not None else Event()
                event.record(self)
                return event

        stream = Stream()
        changes = _counting_gpus(1)
        changes += [(_cuda, "synchronize", gpu.synchronize), (_cuda, "current_device", lambda: 0),
                    (_cuda, "current_stream", lambda device=None: stream),
                    (_cuda, "default_stream", lambda device=None: stream), (_cuda, "Event", Event)]
        for name, value in (("memory_allocated", lambda device=None: gpu.allocated),
                            ("max_memory_allocated", lambda device=None: gpu.peak),
                            ("memory_reserved", lambda device=None: gpu.reserved),
                            ("max_memory_reserved", lambda device=None: gpu.peak_reserved),
                            ("reset_peak_memory_stats", gpu.reset_peak),
                            ("reset_max_memory_allocated", gpu.reset_peak),
                            ("memory_stats", gpu.memory_stats), ("empty_cache", gpu.empty_cache)):
            changes += _on_both(name, value)
        if _accelerator is not None and hasattr(_accelerator, "synchronize"):
            changes.append((_accelerator, "synchronize", gpu.synchronize))
        return _Patched(changes)


class _Block:
    """A simulated device allocation: it counts until the last reference to it goes, like a tensor."""

    def __init__(self, gpu, nbytes):
        self.gpu, self.nbytes = gpu, nbytes

    def __del__(self):
        self.gpu.free(self.nbytes)


# ---------------------------------------------------------------- try_gpu / try_all_gpus


def try_gpu_on(try_gpu, count, calls):
    """try_gpu on a machine with `count` GPUs; each call is None (no argument), an int i, or {"i": i}."""
    out = []
    with _Patched(_counting_gpus(count)):
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
    with _Patched(_counting_gpus(count)):
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


def _build(records):
    """The batch a flat spec describes: records [id, parent id, key, kind, arg] in depth-first order (the
    bridge carries only shallow data, so the nested spec travels flattened). Kinds and their arg:
    "tensor" [shape, dtype], "param" shape, "watched" shape (a tensor noting its moves' non_blocking),
    "numpy" shape, "value" the value itself, "object" None, "list"/"tuple"/"dict" None (and the Mappings
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
    """id -> path of every leaf (anything that is not a known container) of the input."""
    kids = _children(x) if depth < 12 else None
    if kids is None:
        found.setdefault(id(x), path)
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
    for key, child in kids:
        _describe(child, leaves, _path(path, key, x), out, depth + 1)


def move(to_device, spec, device, non_blocking, seed):
    """to_device on a batch built from `spec` (flat records, see _build), moved to `device`; what came back,
    described as data. non_blocking=None calls to_device(batch, device), leaving the argument to its default.
    """
    _manual_seed(seed)
    del _CALLS[:]
    batch = _build(spec)
    leaves, inputs = {}, {}
    _leaves(batch, "batch", leaves)
    _inputs(batch, "batch", inputs)
    before = _snapshot(batch)
    try:
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


# ---------------------------------------------------------------- time_fn


def time_calls(time_fn, warmup_ms, timed_ms, warmup, reps, machine):
    """time_fn(fn, warmup=..., reps=...) where call k of fn takes durations[k] milliseconds.

    durations = warmup_ms + timed_ms (the last one repeats if fn is called more often). machine "cpu": a
    CPU-only machine, fn does its work before it returns. machine "gpu": a simulated GPU, fn launches its
    work and returns at once; the work runs on the simulated device's queue. warmup=None and reps=None
    leave both arguments to their defaults. Returns what time_fn returned, how often it called fn, and each
    call's span: the most a correct timer could have measured for it on this run (see `_spans`).
    """
    durations = [ms / 1e3 for ms in list(warmup_ms) + list(timed_ms)]
    launched, done = [], []  # per call: when fn was entered, when its work was finished
    gpu = _FakeGPU() if machine == "gpu" else None

    def fn():
        k = len(launched)
        launched.append(_perf())
        seconds = durations[min(k, len(durations) - 1)]
        if gpu is not None:
            gpu.launch(seconds)
            done.append(gpu.busy_until)
        else:
            end = launched[-1] + seconds
            while _perf() < end:
                _sleep(end - _perf())
            done.append(_perf())

    kwargs = {}
    if warmup is not None:
        kwargs["warmup"] = warmup
    if reps is not None:
        kwargs["reps"] = reps
    called = _perf()
    with gpu.patches() if gpu is not None else _cpu_only():
        result = time_fn(fn, **kwargs)
    returned = _perf()
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


def _copy_seconds(nbytes, reps=9, block_seconds=0.005):
    """Seconds per plain host-to-host copy of nbytes, two ways: the median of single copies (an undisturbed
    copy), and a block of back-to-back copies lasting a few milliseconds (what a block timer sees on a
    machine that other work shares). The check accepts anything from a little above the first to well
    below the second."""
    src = _empty(nbytes, dtype=torch.uint8).fill_(1)
    dst = _empty(nbytes, dtype=torch.uint8)
    _copy(dst, src)  # first touch of dst's pages, untimed
    times = []
    for _ in range(reps):
        t0 = _perf()
        _copy(dst, src)
        times.append(_perf() - t0)
    times.sort()
    single = times[len(times) // 2]
    number = max(1, min(10_000, int(block_seconds / max(single, 1e-9))))
    t0 = _perf()
    for _ in range(number):
        _copy(dst, src)
    block = (_perf() - t0) / number
    del src, dst
    return [single, block]


def bandwidth(transfer_bandwidth, nbytes, pinned, device, calls=3):
    """transfer_bandwidth(nbytes, pinned, device) on a CPU-only machine, called `calls` times between plain
    copies of the same size, so the check can judge the number: its best call against the best plain copy
    (on a busy machine a single call can be slowed by half or more, which would hide a factor like 8).

    All of it runs on one thread (as in a grading kernel): a copy split over threads on a busy machine waits
    for the slowest thread's next time slice, and its time would say more about the machine's load than
    about the student's code."""
    threads = _get_threads()
    _set_threads(1)
    results, reference = [], []
    try:
        reference += _copy_seconds(nbytes)
        for _ in range(calls):
            with _cpu_only():
                results.append(transfer_bandwidth(nbytes, pinned, device))
            reference += _copy_seconds(nbytes)
    finally:
        _set_threads(threads)
    return {"bandwidth": results, "reference_seconds": reference}


def bandwidth_error(transfer_bandwidth, nbytes, pinned, device):
    """transfer_bandwidth on a CPU-only machine, for arguments it should refuse: whatever it returns or raises."""
    with _cpu_only():
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


def held_on_cpu(memory_delta, case, nbytes, device):
    """memory_delta(fn, device) on a CPU-only machine, fn one of the cases of _cpu_fn with real tensors."""
    keep = []
    fn = _cpu_fn(case, nbytes, keep)
    with _cpu_only():
        result = memory_delta(fn, device)
    del keep[:]
    return {"delta": result}


def held_on_gpu(memory_delta, case, nbytes, device, allocated, peak, cached):
    """memory_delta(fn, device) on a simulated GPU whose allocator already holds `allocated` bytes (its peak so far
    `peak`, plus `cached` bytes of free cache); fn allocates simulated blocks as in the CPU cases."""
    gpu = _FakeGPU(allocated, peak, cached)
    keep = []

    def fn():
        if case == "keep":
            keep.append(gpu.allocate(nbytes))
        elif case == "temporary":
            big = gpu.allocate(4 * nbytes)
            gpu.launch(0.001)
            keep.append(gpu.allocate(nbytes))
            del big
        elif case == "return":
            return gpu.allocate(nbytes)
        elif case == "several":
            for _ in range(3):
                keep.append(gpu.allocate(nbytes))
            tmp = gpu.allocate(8 * nbytes)
            del tmp
        elif case == "nothing":
            tmp = gpu.allocate(nbytes)
            del tmp
        return None

    with gpu.patches():
        result = memory_delta(fn, device)
    del keep[:]
    return {"delta": result}
