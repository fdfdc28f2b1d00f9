"""Chapter 09 (gpu): public checks. Hidden checks for the same exercises live in grader/hidden/gpu.py.

Grading has no GPU, so the checks of device logic run the student's code on simulated machines
(grader/scenarios/gpu.py): a CPU-only one, one with a given number of GPUs, and one with an
asynchronous simulated GPU (a queue of work on the host's clock, CUDA events, allocator counters).
Every check sets the machine it needs, so its verdict is the same on a laptop and on an H100.
"""
from __future__ import annotations

import torch

from grader.expect import describe, expect, expect_raises, factor_hint, fail
from grader.registry import exercise
from grader.scenario import run_scenario
from grader.scenarios import gpu as scenarios
from grader.course import bench  # noqa: F401  (so the forbidden grader.course.bench.time_fn can be found)
from grader.course import specs  # noqa: F401  (so the forbidden grader.course.specs.memory_bandwidth can be found)
from grader import wire
# Imported so the forbidden helpers below can be found (and refused) even when the student imports them later.
import torch.fx.node  # noqa: F401,E402
import torch.utils._pytree  # noqa: F401,E402
import torch.utils.benchmark  # noqa: F401,E402
try:  # a build without distributed support has no torch.distributed.utils
    import torch.distributed.utils  # noqa: F401
except ImportError:  # pragma: no cover
    pass

_device_count = torch.cuda.device_count  # the real machine's, bound before any student code runs

TRY_GPU = exercise("gpu.try_gpu", points=1)
TRY_ALL_GPUS = exercise("gpu.try_all_gpus", points=1)
# torch's pytree helpers walk and rebuild nested containers: the whole of to_device. TreeSpec.unflatten, which
# every one of them ends in, also refuses a spec rebuilt by hand (tree_structure(batch).unflatten(leaves)).
PYTREE = tuple(f"torch.utils._pytree.{name}" for name in ("tree_map", "tree_map_only", "tree_map_with_path",
                                                           "tree_unflatten", "TreeSpec.unflatten"))


def _present(names: tuple[str, ...]) -> tuple[str, ...]:
    """The names that exist in this build of torch (a forbidden name must resolve to be refused)."""
    return tuple(n for n in names if wire.resolve(n) is not None)


# Other library walks that move or map every tensor of a nested batch: DDP's input mover and its helper, and
# torch.fx's map_aggregate (the Python wrapper and the C function behind it).
WALKERS = _present(("torch.distributed.utils._recursive_to", "torch.distributed.utils._apply_to_tensors",
                    "torch.fx.node.map_aggregate", "torch._C._fx_map_aggregate"))
# Whole timers: warm-up, repetitions, CUDA synchronization and the median in one call.
TIMERS = ("grader.course.bench.time_fn", "grader.course.bench._time_host", "grader.course.bench._time_cuda",
          *_present(tuple(f"torch.utils.benchmark.Timer.{m}" for m in (
              "timeit", "blocked_autorange", "adaptive_autorange", "autorange"))))
TO_DEVICE = exercise("gpu.to_device", points=3, forbid=(*PYTREE, *WALKERS))
TIME_FN = exercise("gpu.time_fn", points=3, forbid=TIMERS)
# A datasheet's bandwidth is not a measurement: grader.course.specs' table would answer without copying a byte.
TRANSFER_BANDWIDTH = exercise("gpu.transfer_bandwidth", points=2, forbid=("grader.course.specs.memory_bandwidth",))
MEMORY_DELTA = exercise("gpu.memory_delta", points=2)


def _shown(x) -> str:
    return repr(x) if isinstance(x, torch.device) else describe(x)


# ---------------------------------------------------------------- try_gpu / try_all_gpus

def expect_device(got, want: torch.device, what: str) -> None:
    if type(got) is not torch.device:
        fail(f"{what} returned {_shown(got)}; return a torch.device, e.g. torch.device({str(want)!r})")
    if got != want:
        hint = ""
        if got.type == "cuda" and got.index is None:
            hint = " (a CUDA device without an index means 'the current GPU'; name it: cuda:i)"
        fail(f"{what} returned {got!r}, expected {want!r}{hint}")


def expect_try_gpu(try_gpu, count: int, calls: list) -> None:
    got = run_scenario(scenarios.try_gpu_on, try_gpu, count, calls)
    expect(isinstance(got, list) and len(got) == len(calls), f"try_gpu on a machine with {count} GPUs gave {got!r}")
    for c, g in zip(calls, got):
        i = 0 if c is None else (c["i"] if isinstance(c, dict) else c)
        arg = "" if c is None else (f"i={i}" if isinstance(c, dict) else str(i))
        want = torch.device(f"cuda:{i}") if i < count else torch.device("cpu")
        expect_device(g, want, f"try_gpu({arg}) on a machine with {count} GPU{'s' if count != 1 else ''}")


def expect_try_all_gpus(try_all_gpus, count: int) -> None:
    got = run_scenario(scenarios.try_all_gpus_on, try_all_gpus, count)
    what = f"try_all_gpus() on a machine with {count} GPU{'s' if count != 1 else ''}"
    want = [torch.device(f"cuda:{i}") for i in range(count)] or [torch.device("cpu")]
    if type(got) is not list:
        fail(f"{what} returned {_shown(got)}; return a list of torch.device")
    for g in got:
        if type(g) is not torch.device:
            fail(f"{what} returned a list holding {_shown(g)}; every item should be a torch.device")
    if got != want:
        fail(f"{what} returned {got!r}, expected {want!r}")


@TRY_GPU.check
def on_this_machine(try_gpu):
    """try_gpu() on this machine: cuda:0 if it has a GPU, else cpu; try_gpu(64) is cpu"""
    n = _device_count()
    expect_device(try_gpu(), torch.device("cuda:0") if n else torch.device("cpu"),
                  f"try_gpu() on this machine ({n} GPU{'s' if n != 1 else ''})")
    expect_device(try_gpu(64), torch.device("cpu"), f"try_gpu(64) on this machine ({n} GPUs)")


@TRY_GPU.check
def simulated_machines(try_gpu):
    """machines with 0, 1 and 4 GPUs (simulated): cuda:i when GPU i exists, else cpu; try_gpu(i=2) by keyword"""
    expect_try_gpu(try_gpu, 0, [None, 0, 1])
    expect_try_gpu(try_gpu, 1, [None, 0, 1])
    expect_try_gpu(try_gpu, 4, [None, 1, 3, 4, {"i": 2}])


@TRY_ALL_GPUS.check
def all_gpus_or_cpu(try_all_gpus):
    """machines with 0, 1 and 4 GPUs (simulated): [cpu], [cuda:0], [cuda:0, ..., cuda:3]"""
    for count in (0, 1, 4):
        expect_try_all_gpus(try_all_gpus, count)


# ---------------------------------------------------------------- to_device
# A batch is described by a nested spec: ["tensor", shape, dtype], ["param", shape], ["watched", shape],
# ["numpy", shape], ["value", v], ["object"], ["list", [specs]], ["tuple", [specs]], ["dict", [[key, spec], ...]]
# (and the other Mappings: "OrderedDict", "defaultdict" with default_factory list, "UserDict", specs as for
# "dict"), ["namedtuple", name, [fields], [specs]]. It travels flattened (flat_spec); the checks walk it for what must
# come back.


MAPPINGS = ("dict", "OrderedDict", "defaultdict", "UserDict")  # collections.abc.Mapping kinds a batch may hold


def tensor(*shape: int, dtype: str = "float32") -> list:
    return ["tensor", list(shape), dtype]


def expect_moved(out: dict, spec: list, device, what: str) -> None:
    """The scenario's report must show every tensor on `device` (the same object when it was there already),
    everything else returned as is, the same container types, and the input containers untouched."""
    if out["changed"]:
        fail(f"{what} changed the input batch in place (at {', '.join(out['changed'][:3])}): build new containers "
             "and leave the caller's batch as it was")
    _expect_node(out["output"], spec, torch.device(device), "batch", out["inputs"], what)


def _kind_name(node: dict) -> str:
    return {"namedtuple": f"the namedtuple {node.get('type')}", "other": f"a {node.get('type')}",
            "tensor": "a tensor"}.get(node["kind"], f"a{'n' if node['kind'][:1] in 'OA' else ''} {node['kind']}")


def _expect_node(nodes: dict, spec: list, device: torch.device, path: str, inputs: dict, what: str) -> None:
    """`nodes` maps each path of the output to a description of what is there (see scenarios.gpu._describe)."""
    node = nodes.get(path)
    if node is None:
        fail(f"{what}: the result has nothing at {path}")
    kind = spec[0]
    if kind in ("tensor", "param", "watched"):
        if node["kind"] != "tensor":
            fail(f"{what}: {path} was a tensor, but came back as {_kind_name(node)}")
        dtype = spec[2] if kind == "tensor" and len(spec) > 2 else "float32"
        if node["device"] != str(device):
            fail(f"{what}: {path} is on {node['device']}, expected {device} (move every tensor, however deep)")
        if node["shape"] != list(spec[1]) or node["dtype"] != dtype:
            fail(f"{what}: {path} came back with shape {tuple(node['shape'])} and dtype {node['dtype']}, but the "
                 f"input was {dtype} of shape {tuple(spec[1])}: move it, change nothing else")
        if device.type == "cpu" and node["input"] != path:
            fail(f"{what}: {path} was already on the cpu, yet came back as a new tensor; .to(device) returns the "
                 "same tensor object when nothing has to move (no copy, no memory)")
        if "values" in node and path in inputs and not torch.equal(node["values"], inputs[path]):
            fail(f"{what}: {path} came back with other values than it had")
        return
    if kind in ("numpy", "object"):
        if node["kind"] != "other" or node["input"] != path:
            fail(f"{what}: {path} was a {'NumPy array' if kind == 'numpy' else 'Thing object'}, not a tensor; it should "
                 f"come back as the same object, got {_kind_name(node)}")
        return
    if kind == "value":
        value = spec[1]
        if node["kind"] != "other" or node["type"] != type(value).__name__ or node.get("repr") != repr(value):
            fail(f"{what}: {path} was {value!r} ({type(value).__name__}); it should come back as it is, "
                 f"got {_kind_name(node)}" + (f" {node.get('repr')}" if node["kind"] == "other" else ""))
        return
    if kind == "namedtuple":
        name, fields, items = spec[1], list(spec[2]), spec[3]
        if node["kind"] != "namedtuple" or node["type"] != name or node.get("fields") != fields:
            fail(f"{what}: {path} was the namedtuple {name}{tuple(fields)}, but came back as {_kind_name(node)}; "
                 f"rebuild a namedtuple with its own class: type(x)(*items)")
        for field, item in zip(fields, items):
            _expect_node(nodes, item, device, f"{path}.{field}", inputs, what)
        return
    if node["kind"] != kind:
        if kind in MAPPINGS and kind != "dict":
            fail(f"{what}: {path} was a{'n' if kind[0] == 'O' else ''} {kind}, but came back as {_kind_name(node)}: "
                 "keep the Mapping's own type (copy.copy(x), then assign each key, keeps it; a defaultdict "
                 "also keeps its default_factory)")
        fail(f"{what}: {path} was a {kind}, but came back as {_kind_name(node)} (keep the container type"
             + ("; a tuple must stay a tuple" if kind == "tuple" else "") + ")")
    if kind in MAPPINGS:
        keys = [k for k, _ in spec[1]]
        if node["keys"] != keys:
            fail(f"{what}: {path} had the keys {keys}, but came back with {node['keys']}")
        if kind == "defaultdict" and node.get("factory") != "list":
            fail(f"{what}: {path} was a defaultdict(list), but came back with default_factory "
                 f"{node.get('factory')}: keep it (copy.copy(x) does)")
        for key, item in spec[1]:
            _expect_node(nodes, item, device, f"{path}[{key!r}]", inputs, what)
        return
    if node["len"] != len(spec[1]):
        fail(f"{what}: {path} had {len(spec[1])} items, but came back with {node['len']} "
             "(keep every item, tensors or not)")
    for i, item in enumerate(spec[1]):
        _expect_node(nodes, item, device, f"{path}[{i}]", inputs, what)


def flat_spec(spec: list) -> list:
    """The nested spec as records [id, parent id, key, kind, arg], depth first (see scenarios.gpu._build)."""
    records: list = []

    def walk(s: list, parent, key) -> None:
        nid, kind = len(records), s[0]
        arg = {"tensor": lambda: [list(s[1]), s[2] if len(s) > 2 else "float32"], "value": lambda: s[1],
               "namedtuple": lambda: [s[1], list(s[2])]}.get(kind, lambda: list(s[1]) if kind in (
                   "param", "watched", "numpy") else None)()
        records.append([nid, parent, key, kind, arg])
        if kind in ("list", "tuple"):
            for i, child in enumerate(s[1]):
                walk(child, nid, i)
        elif kind in MAPPINGS:
            for k, child in s[1]:
                walk(child, nid, k)
        elif kind == "namedtuple":
            for i, child in enumerate(s[3]):
                walk(child, nid, i)

    walk(spec, None, None)
    return records


def expect_to_device(to_device, spec: list, device, what: str, non_blocking=None, seed: int = 0) -> dict:
    out = run_scenario(scenarios.move, to_device, flat_spec(spec), device, non_blocking, seed)
    expect_moved(out, spec, device, what)
    return out


NESTED = ["dict", [["x", tensor(2, 3)],
                   ["labels", tensor(2, dtype="int64")],
                   ["extra", ["dict", [["mask", tensor(2, 3, dtype="bool")],
                                       ["pair", ["list", [tensor(4), ["list", [tensor(1, dtype="bfloat16")]]]]]]]],
                   ["weight", ["param", [3]]]]]
MIXED = ["dict", [["x", tensor(2, 2)], ["n", ["value", 3]], ["name", ["value", "batch-7"]], ["weight", ["value", 0.5]],
                  ["missing", ["value", None]], ["flag", ["value", True]], ["image", ["numpy", [2, 3]]],
                  ["tokenizer", ["object"]], ["ids", ["list", [["value", 1], ["value", 2], tensor(2, dtype="int64")]]]]]
CONTAINERS = ["tuple", [tensor(3), ["list", [tensor(2), ["value", "a"]]],
                        ["tuple", [tensor(1), ["namedtuple", "Pair", ["inputs", "targets"], [tensor(2, 2), tensor(2)]]]]]]


@TO_DEVICE.check
def moves_nested_tensors(to_device):
    """every tensor (nn.Parameter too) in nested dicts and lists moves to the device ('meta' here), dtype and shape kept"""
    expect_to_device(to_device, NESTED, "meta", "to_device({'x': ..., 'labels': ..., 'extra': {...}}, 'meta')")


@TO_DEVICE.check
def keeps_other_leaves(to_device):
    """ints, strings, floats, None, bools, NumPy arrays and other objects come back as they are"""
    expect_to_device(to_device, MIXED, "meta", "to_device(a dict of tensors, numbers, strings, None, an array, "
                                               "an object, 'meta')")


@TO_DEVICE.check
def keeps_container_types(to_device):
    """a tuple stays a tuple, a list a list, a namedtuple the same namedtuple"""
    expect_to_device(to_device, CONTAINERS, "meta", "to_device((tensor, [tensor, 'a'], (tensor, Pair(...))), 'meta')")


MAPPED = ["OrderedDict", [["x", tensor(2)], ["by_name", ["defaultdict", [["a", ["list", [tensor(1)]]],
                                                                       ["b", ["list", []]]]]],
                          ["encoding", ["UserDict", [["input_ids", tensor(2, 3, dtype="int64")],
                                                     ["mask", tensor(2, 3, dtype="bool")]]]], ["n", ["value", 4]]]]


@TO_DEVICE.check
def keeps_mapping_types(to_device):
    """any Mapping: an OrderedDict, a defaultdict (its default_factory too) and a UserDict keep their types"""
    expect_to_device(to_device, MAPPED, "meta", "to_device(OrderedDict(x=..., by_name=defaultdict(list, ...), "
                                                "encoding=UserDict(...)), 'meta')")


@TO_DEVICE.check
def same_object_when_nothing_moves(to_device):
    """moving to the device the tensors are on already returns the same tensor objects (no copies)"""
    expect_to_device(to_device, NESTED, "cpu", "to_device({'x': ..., 'labels': ..., 'extra': {...}}, 'cpu')")
    expect_to_device(to_device, tensor(3, 4), torch.device("cpu"), "to_device(a tensor, torch.device('cpu'))")


@TO_DEVICE.check
def leaves_the_input_alone(to_device):
    """the input's dicts and lists are not changed in place"""
    spec = ["dict", [["a", tensor(2)], ["b", ["list", [tensor(3), ["dict", [["c", tensor(1)]]]]]]]]
    expect_to_device(to_device, spec, "meta", "to_device({'a': tensor, 'b': [tensor, {'c': tensor}]}, 'meta')")


def expect_non_blocking(out: dict, wanted: bool, count: int, what: str) -> None:
    flags = [nb for _, nb in out["calls"]]
    expect(len(flags) >= count, f"{what}: the tensors were not moved with .to(device, non_blocking=...) "
                                f"(saw {len(flags)} moves of {count} tensors)")
    bad = [f"{op}(non_blocking={nb})" for op, nb in out["calls"] if nb is not wanted]
    expect(not bad, f"{what}: a tensor was moved with {bad[0] if bad else ''}; pass non_blocking={wanted} on to "
                    "every move")


@TO_DEVICE.check
def passes_non_blocking_on(to_device):
    """non_blocking=True reaches every .to() call (a CPU cannot show it; the check watches the calls)"""
    spec = ["dict", [["x", ["watched", [2, 3]]], ["y", ["list", [["watched", [4]]]]]]]
    out = expect_to_device(to_device, spec, "meta", "to_device(batch, 'meta', non_blocking=True)", non_blocking=True)
    expect_non_blocking(out, True, 2, "to_device(batch, 'meta', non_blocking=True)")
    out = expect_to_device(to_device, spec, "meta", "to_device(batch, 'meta')")
    expect_non_blocking(out, False, 2, "to_device(batch, 'meta') (non_blocking left to its default, False)")


# ---------------------------------------------------------------- time_fn

def seconds_of(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(f"{what} returned {describe(value)}; return the seconds as a Python float")
    value = float(value)
    expect(value == value and value not in (float("inf"), float("-inf")), f"{what} returned {value}")
    return value


def expect_median(out: dict, timed_ms: list[float], warmup_ms: list[float], what: str, gpu: bool = False) -> None:
    """time_fn called fn warmup + reps times and returned about the median of the timed calls."""
    expect_calls(out, len(warmup_ms) + len(timed_ms), what)
    got = seconds_of(out["seconds"], what)
    ordered = sorted(timed_ms)
    n = len(ordered)
    median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2 / 1e3
    # Sleeps and simulated work last at least their time; the upper bound is the timed calls' spans (what a
    # correct timer could have measured, a busy machine's pauses included), so one late wake-up or pause
    # widens it only if it lands in the middle of the order.
    spans = sorted(out["spans"][len(warmup_ms):])
    lo, hi = 0.7 * ordered[(n - 1) // 2] / 1e3, 1.15 * spans[n // 2] + 0.002
    if lo <= got <= hi:
        return
    if lo <= got / 1e3 <= hi:
        fail(f"{what} returned {got:.3g}: that is the median in milliseconds; return seconds, not milliseconds")
    mean = sum(timed_ms) / n / 1e3
    if got < 0.2 * min(timed_ms) / 1e3:
        if gpu:
            fail(f"{what} returned {got * 1e6:.1f} µs, but each call's work takes {min(timed_ms):g} ms or more on the "
                 "(simulated) GPU: the host's clock only saw the launches. Wait for the GPU before reading the "
                 "clock (torch.cuda.synchronize()) or time with CUDA events")
        fail(f"{what} returned {got:.3g}, far less than the fastest call ({min(timed_ms) / 1e3:g} s); "
             "return seconds (not milliseconds or nanoseconds), timing the calls themselves")
    if got > 100 * max(timed_ms + warmup_ms) / 1e3:
        fail(f"{what} returned {got:.3g}: more than any call took; return seconds, not milliseconds")
    hint = ""
    if abs(got - mean) < 0.15 * mean:
        hint = " (that is about the mean: take the median)"
    elif abs(got - min(timed_ms) / 1e3) < 0.3 * min(timed_ms) / 1e3:
        hint = " (that is about the fastest call: take the median)"
    elif warmup_ms and got > hi:
        hint = " (are the warm-up calls in it? time only the reps calls after them)"
    fail(f"{what} returned {got * 1e3:.2f} ms, but the median of the timed calls is {median * 1e3:.2f} ms{hint}")


def expect_calls(out: dict, want: int, what: str) -> None:
    expect(out["calls"] == want, f"{what} called fn {out['calls']} times; it should call it warmup + reps = {want} "
                                 "times")


@TIME_FN.check
def calls_fn_warmup_plus_reps_times(time_fn):
    """time_fn(fn, warmup=2, reps=5) calls fn exactly 7 times; time_fn(fn), with the defaults 3 and 10, 13 times"""
    out = run_scenario(scenarios.time_calls, time_fn, [1, 1], [1] * 5, 2, 5, "cpu")
    expect_calls(out, 7, "time_fn(fn, warmup=2, reps=5)")
    seconds_of(out["seconds"], "time_fn(fn, warmup=2, reps=5)")
    out = run_scenario(scenarios.time_calls, time_fn, [1, 1, 1], [1] * 10, None, None, "cpu")
    expect_calls(out, 13, "time_fn(fn) (warmup=3 and reps=10 by default)")


@TIME_FN.check
def median_of_the_timed_calls(time_fn):
    """the median of the timed calls (not the mean, not the fastest), warm-up calls left out"""
    # milliseconds; sorted: 5 5 5 30 300 300 300. The mean (135) lies far above the median's upper bound (1.15 x
    # the spans' median + 2 ms: 36.5 ms on an idle machine); a mean passes only if the machine pauses the 30 ms
    # call by 98 ms or more (a 5 ms one by 126 ms), not if it pauses the process at any other point.
    timed = [5, 300, 30, 5, 300, 5, 300]
    warm = [100, 100, 100]  # with them, the median (100) is neither the timed calls' median nor their mean
    out = run_scenario(scenarios.time_calls, time_fn, warm, timed, 3, 7, "cpu")
    what = "time_fn(fn, warmup=3, reps=7) where the timed calls take 5, 300, 30, 5, 300, 5, 300 ms"
    expect_median(out, timed, warm, what)


@TIME_FN.check
def waits_for_the_gpu(time_fn):
    """on a (simulated) GPU, fn only launches its work: time_fn must wait for it (synchronize or CUDA events)"""
    timed = [20] * 5
    out = run_scenario(scenarios.time_calls, time_fn, [30, 30], timed, 2, 5, "gpu")
    what = "time_fn(fn, warmup=2, reps=5) on a simulated GPU where each call launches 20 ms of work"
    expect_median(out, timed, [30, 30], what, gpu=True)


# ---------------------------------------------------------------- transfer_bandwidth

MiB = 2**20


def bandwidth_calls(transfer_bandwidth, nbytes: int, pinned: bool, device, what: str) -> tuple[list[float], list[float]]:
    """What the calls returned (each a positive number) and the plain copies' seconds timed beside them."""
    out = run_scenario(scenarios.bandwidth, transfer_bandwidth, nbytes, pinned, device)
    for value in out["bandwidth"]:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail(f"{what} returned {describe(value)}; return bytes per second as a Python float")
        if not float(value) > 0:  # NaN too
            fail(f"{what} returned {float(value)}; a bandwidth is positive")
    return [float(v) for v in out["bandwidth"]], out["reference_seconds"]


FASTEST = 4  # how many times a plain copy's best speed a call may claim (a block timer's copies stay in cache)


def expect_bandwidth(transfer_bandwidth, nbytes: int, pinned: bool, device, what: str) -> float:
    values, reference = bandwidth_calls(transfer_bandwidth, nbytes, pinned, device, what)
    # A busy machine can slow all three calls of a wrong answer (bits per second: 8x) into the accepted range,
    # never speed one up: while the best call claims more than half the most it may, call it again.
    for _ in range(2):
        if not FASTEST / 2 < max(values) / (nbytes / min(reference)) <= FASTEST:
            break
        more, beside = bandwidth_calls(transfer_bandwidth, nbytes, pinned, device, what)
        values, reference = values + more, reference + beside
    value = max(values)  # its best call: load only ever slows a copy down
    slow, fast = max(reference), min(reference)  # plain copies timed beside it
    lo, hi = nbytes / slow / 8, FASTEST * nbytes / fast
    if value < lo:
        ratio = nbytes / slow / value
        if value < 1e3:
            hint = " (is that a time, or GB/s? return nbytes / seconds, in bytes per second)"
        elif 1e2 < ratio < 1e4:
            hint = " (bytes per millisecond? return bytes per second)"
        else:
            hint = " (does the timed part allocate or fill tensors? make them before timing; copy exactly nbytes)"
        fail(f"{what} returned {value:.3g} bytes/s, but a plain copy of {nbytes} bytes here runs at about "
             f"{nbytes / slow:.3g} bytes/s{hint}")
    if value > hi:
        if 6 < value / (nbytes / fast) < 12:
            fail(f"{what} returned {value:.3g}, about 8x what a plain copy of {nbytes} bytes here runs at "
                 f"({nbytes / fast:.3g} bytes/s): bits per second? return bytes per second")
        fail(f"{what} returned {value:.3g} bytes/s, but a plain copy of {nbytes} bytes here runs at about "
             f"{nbytes / fast:.3g} bytes/s: copy nbytes bytes (not fewer), count each byte once, and time "
             "the copy itself")
    return value


@TRANSFER_BANDWIDTH.check
def bytes_per_second_on_cpu(transfer_bandwidth):
    """on a CPU, a host-to-host copy of 32 MiB: a bandwidth in bytes/s close to a plain copy's"""
    expect_bandwidth(transfer_bandwidth, 32 * MiB, False, "cpu", "transfer_bandwidth(32 MiB, False, 'cpu')")


@TRANSFER_BANDWIDTH.check
def copies_nbytes(transfer_bandwidth):
    """the copy has nbytes bytes: 1 MiB and 16 MiB each match a plain copy of their own size; device a torch.device too"""
    expect_bandwidth(transfer_bandwidth, MiB, False, "cpu", "transfer_bandwidth(1 MiB, False, 'cpu')")
    expect_bandwidth(transfer_bandwidth, 16 * MiB, False, torch.device("cpu"),
                     "transfer_bandwidth(16 MiB, False, torch.device('cpu'))")


@TRANSFER_BANDWIDTH.check
def pinned_is_ignored_without_cuda(transfer_bandwidth):
    """pinned=True on a CPU-only machine does not raise (pinning needs an accelerator): it is ignored"""
    expect_bandwidth(transfer_bandwidth, 8 * MiB, True, "cpu", "transfer_bandwidth(8 MiB, True, 'cpu') on a "
                                                                "machine without a GPU")


@TRANSFER_BANDWIDTH.check
def rejects_empty_transfers(transfer_bandwidth):
    """nbytes < 1 raises ValueError"""
    expect_raises(ValueError, lambda: run_scenario(scenarios.bandwidth_error, transfer_bandwidth, 0, False, "cpu"),
                  "transfer_bandwidth(0, False, 'cpu')")


# ---------------------------------------------------------------- memory_delta


def delta_of(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(f"{what} returned {describe(value)}; return a number of bytes as a Python int")
    return int(value)


def expect_delta_cpu(memory_delta, case: str, nbytes: int, want: int, what: str, device="cpu") -> None:
    got = delta_of(run_scenario(scenarios.held_on_cpu, memory_delta, case, nbytes, device)["delta"], what)
    if got != want:
        fail(f"{what} returned {got} bytes, expected {want}"
             + (_delta_hint(case, got, nbytes) or (factor_hint(got, want) if want else "")))


def _delta_hint(case: str, got: int, nbytes: int) -> str:
    if case == "temporary" and got == 5 * nbytes:
        return " (that is the peak: fn's temporary tensor was freed before it returned, so it does not count)"
    if case == "temporary" and got == 4 * nbytes:
        return " (that is the largest temporary, freed before fn returned)"
    if case == "return" and got == nbytes:
        return " (that is fn's return value: drop it before you measure; it is not kept)"
    if got == 0 and case in ("keep", "several", "temporary", "view"):
        return " (nothing? measure on the device fn allocates on: on a CPU with grader.course.memtrack.track_memory)"
    return ""


SIMULATED = dict(allocated=2**30, peak=3 * 2**30, cached=8 * MiB)  # the allocator's state before fn runs


def expect_delta_gpu(memory_delta, case: str, nbytes: int, want: int, what: str, device="cuda") -> None:
    out = run_scenario(scenarios.held_on_gpu, memory_delta, case, nbytes, device, SIMULATED["allocated"],
                       SIMULATED["peak"], SIMULATED["cached"])
    got = delta_of(out["delta"], what)
    if got != want:
        hint = _delta_hint(case, got, nbytes)
        if got >= SIMULATED["allocated"]:
            hint = (" (that counts what was allocated before fn ran, or the peak of earlier work: "
                    "subtract torch.cuda.memory_allocated() from before the call)")
        elif got == 0 and case == "keep":
            hint = (" (torch.cuda.memory_reserved counts the allocator's cache, which had room; "
                    "use torch.cuda.memory_allocated)")
        if not hint and want:
            hint = factor_hint(got, want)
        fail(f"{what} returned {got} bytes, expected {want}{hint}")


@MEMORY_DELTA.check
def counts_what_fn_keeps(memory_delta):
    """on a CPU: fn stores a 1 MiB tensor in a list, so 1 MiB is still held when it returns"""
    expect_delta_cpu(memory_delta, "keep", MiB, MiB, "memory_delta(fn, 'cpu') where fn keeps a 1 MiB tensor")


@MEMORY_DELTA.check
def not_the_peak(memory_delta):
    """on a CPU: a 4 MiB temporary freed before fn returns does not count, only the 1 MiB fn keeps"""
    expect_delta_cpu(memory_delta, "temporary", MiB, MiB,
                     "memory_delta(fn, 'cpu') where fn makes a 4 MiB temporary and keeps a 1 MiB copy")


@MEMORY_DELTA.check
def return_value_is_not_kept(memory_delta):
    """on a CPU: fn's return value is dropped before measuring, so a returned tensor counts 0"""
    expect_delta_cpu(memory_delta, "return", MiB, 0, "memory_delta(fn, 'cpu') where fn returns a 1 MiB tensor")


@MEMORY_DELTA.check
def cuda_counters(memory_delta):
    """on a simulated GPU that already holds 1 GiB (peak 3 GiB): keep, temporary and returned tensors"""
    where = "on a simulated GPU that already holds 1 GiB"
    expect_delta_gpu(memory_delta, "keep", 2 * MiB, 2 * MiB, f"memory_delta(fn, 'cuda') {where}, fn keeps 2 MiB")
    expect_delta_gpu(memory_delta, "temporary", 2 * MiB, 2 * MiB,
                     f"memory_delta(fn, 'cuda') {where}, fn keeps 2 MiB and frees an 8 MiB temporary")
    expect_delta_gpu(memory_delta, "return", 2 * MiB, 0, f"memory_delta(fn, 'cuda') {where}, fn returns 2 MiB")
