"""Chapter 09 (gpu): public checks. Hidden checks for the same exercises live in grader/hidden/gpu.py.

The checks of device logic run the student's code on simulated machines (grader/scenarios/gpu.py): a
CPU-only one, one with a given number of GPUs, and one with asynchronous simulated GPUs (a queue of work,
CUDA events, allocator counters, copies at rates the check sets), on a simulated clock. Every check sets the
machine and the clock it needs and none asks the grading machine what it has, so a verdict is the same on a
laptop, on an H100 and on a machine busy grading sixteen notebooks. One sanity check per timing exercise runs
on the real clock, with a band wide enough for any load.
"""
from __future__ import annotations

import statistics

import torch

from grader.expect import describe, expect, expect_raises, factor_hint, fail
from grader.registry import exercise
from grader.scenario import run_scenario
from grader.scenarios import gpu as scenarios
from grader.course import bench  # noqa: F401  (so the forbidden grader.course.bench.time_fn can be found)
from grader.course import specs  # noqa: F401  (so the forbidden grader.course.specs.memory_bandwidth can be found)
from grader import guard
# Imported so the forbidden helpers below can be found (and refused) even when the student imports them later.
import torch.fx.node  # noqa: F401,E402
import torch.utils._pytree  # noqa: F401,E402
import torch.utils.benchmark  # noqa: F401,E402
import torch.utils.data._utils.collate  # noqa: F401,E402
import torch.utils.data._utils.pin_memory  # noqa: F401,E402
try:  # a build without distributed support has no torch.distributed.utils
    import torch.distributed.utils  # noqa: F401
except ImportError:  # pragma: no cover
    pass

TRY_GPU = exercise("gpu.try_gpu", points=1)
TRY_ALL_GPUS = exercise("gpu.try_all_gpus", points=1)
# torch's pytree helpers walk and rebuild nested containers: the whole of to_device. TreeSpec.unflatten, which
# every one of them ends in, also refuses a spec rebuilt by hand (tree_structure(batch).unflatten(leaves)).
PYTREE = tuple(f"torch.utils._pytree.{name}" for name in ("tree_map", "tree_map_only", "tree_map_with_path",
                                                           "tree_unflatten", "TreeSpec.unflatten"))


def _present(names: tuple[str, ...]) -> tuple[str, ...]:
    """The names that exist in this build of torch (a forbidden name must resolve to be refused)."""
    return tuple(n for n in names if guard.resolve(n) is not None)


# Other library walks that move or map every tensor of a nested batch: DDP's input mover and its helper,
# torch.fx's map_aggregate (the Python wrapper and the C function behind it), and the DataLoader's own walkers
# (pin_memory rebuilds every Mapping, namedtuple, tuple and list around Tensor.pin_memory, which a student may rebind
# to a move; collate and default_convert walk a batch the same way).
WALKERS = _present(("torch.distributed.utils._recursive_to", "torch.distributed.utils._apply_to_tensors",
                    "torch.fx.node.map_aggregate", "torch._C._fx_map_aggregate",
                    "torch.utils.data._utils.pin_memory.pin_memory", "torch.utils.data._utils.collate.collate",
                    "torch.utils.data._utils.collate.default_convert"))
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
def simulated_machines(try_gpu):
    """machines with 0, 1 and 4 GPUs (simulated): cuda:i when GPU i exists, else cpu; try_gpu(i=2) by keyword"""
    expect_try_gpu(try_gpu, 0, [None, 0])
    expect_try_gpu(try_gpu, 1, [None, 0])
    expect_try_gpu(try_gpu, 4, [None, 1, 3, {"i": 2}])


@TRY_GPU.check
def past_the_last_gpu(try_gpu):
    """GPU i that does not exist is the cpu: try_gpu(1) with 1 GPU, try_gpu(4) and try_gpu(64) with 4 (simulated)"""
    expect_try_gpu(try_gpu, 0, [1, 64])
    expect_try_gpu(try_gpu, 1, [1, {"i": 2}])
    expect_try_gpu(try_gpu, 4, [4, 64])


@TRY_ALL_GPUS.check
def all_gpus_or_cpu(try_all_gpus):
    """machines with 0, 1 and 4 GPUs (simulated): [cpu], [cuda:0], [cuda:0, ..., cuda:3]"""
    for count in (0, 1, 4):
        expect_try_all_gpus(try_all_gpus, count)


# ---------------------------------------------------------------- to_device
# A batch is described by a nested spec: ["tensor", shape, dtype], ["param", shape], ["watched", shape],
# ["cuda", shape, index] (float32 on simulated GPU `index`), ["numpy", shape], ["value", v], ["object"],
# ["list", [specs]], ["tuple", [specs]], ["dict", [[key, spec], ...]]
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
    if kind in ("tensor", "param", "watched", "cuda"):
        if node["kind"] != "tensor":
            fail(f"{what}: {path} was a tensor, but came back as {_kind_name(node)}")
        dtype = spec[2] if kind == "tensor" and len(spec) > 2 else "float32"
        if node["device"] != str(device):
            hint = " (move every tensor, however deep)"
            if device.type == "cuda" and node["device"].startswith("cuda"):
                hint = (f" (move it to the device you are given, {device}, index and all: .cuda() and 'cuda' mean "
                        "the current GPU)")
            fail(f"{what}: {path} is on {node['device']}, expected {device}{hint}")
        if node["shape"] != list(spec[1]) or node["dtype"] != dtype:
            fail(f"{what}: {path} came back with shape {tuple(node['shape'])} and dtype {node['dtype']}, but the "
                 f"input was {dtype} of shape {tuple(spec[1])}: move it, change nothing else")
        there = torch.device("cuda", spec[2]) if kind == "cuda" else torch.device("cpu")
        if device == there and node["input"] != path:
            fail(f"{what}: {path} was already on {there}, yet came back as a new tensor; .to(device) returns the "
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
        # after its items (as for every container), so a walk that stops short is told which tensor it left
        _expect_new(node, path, f"namedtuple {name}", what)
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
        _expect_new(node, path, kind, what)
        return
    if node["len"] != len(spec[1]):
        fail(f"{what}: {path} had {len(spec[1])} items, but came back with {node['len']} "
             "(keep every item, tensors or not)")
    for i, item in enumerate(spec[1]):
        _expect_node(nodes, item, device, f"{path}[{i}]", inputs, what)
    if spec[1] or kind != "tuple":  # Python has one empty tuple: every () is the same object
        _expect_new(node, path, kind, what)


def _expect_new(node: dict, path: str, kind: str, what: str) -> None:
    """A container comes back as a new one, never one of the caller's (moved or not, its items would be shared)."""
    if node.get("input") is not None:
        fail(f"{what}: {path} came back as the caller's own {kind} (the input's {node['input']}), not a new one: "
             "build a new container of the same type every time, even when nothing in it moves (else the result and "
             "the caller's batch share it, and changing one changes the other)")


def flat_spec(spec: list) -> list:
    """The nested spec as records [id, parent id, key, kind, arg], depth first (see scenarios.gpu._build)."""
    records: list = []

    def walk(s: list, parent, key) -> None:
        nid, kind = len(records), s[0]
        arg = {"tensor": lambda: [list(s[1]), s[2] if len(s) > 2 else "float32"], "value": lambda: s[1],
               "namedtuple": lambda: [s[1], list(s[2])], "cuda": lambda: [list(s[1]), s[2]]}.get(
                   kind, lambda: list(s[1]) if kind in ("param", "watched", "numpy") else None)()
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
    """moving to the device the tensors are on already: the same tensor objects (no copies), in new containers"""
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


GPU_BATCH = ["dict", [["x", tensor(2, 3)], ["on_gpu", ["cuda", [4], 1]],
                      ["rest", ["list", [tensor(3, dtype="int64"),
                                         ["tuple", [tensor(1, dtype="bool"), ["value", 7]]]]]]]]


def expect_to_gpu(to_device, spec: list, device, count: int, what: str, non_blocking=None, seed: int = 0) -> dict:
    out = run_scenario(scenarios.move_to_gpu, to_device, flat_spec(spec), device, non_blocking, seed, count)
    expect_moved(out, spec, device, what)
    return out


@TO_DEVICE.check
def to_a_simulated_gpu(to_device):
    """on a machine with 4 GPUs (simulated): every tensor to cuda:1 (one is there already), to cuda:2, non_blocking on"""
    what = "to_device(batch, 'cuda:1', non_blocking=True) on a machine with 4 GPUs"
    out = expect_to_gpu(to_device, GPU_BATCH, "cuda:1", 4, what, non_blocking=True)
    expect_non_blocking(out, True, 3, what)
    what = "to_device(batch, torch.device('cuda', 2)) on a machine with 4 GPUs"
    out = expect_to_gpu(to_device, GPU_BATCH, torch.device("cuda", 2), 4, what)
    expect_non_blocking(out, False, 4, what + " (non_blocking left to its default, False)")


# ---------------------------------------------------------------- time_fn
# The checks run time_fn on a simulated clock (scenarios.gpu._Clock): each call of fn takes exactly the
# milliseconds the check gives it, so the right answer is the median to the nanosecond, whatever the load, and
# each wrong one lands on a value the check can name (the mean, the fastest call, the warm-up included, the
# launches only). One check runs on the real clock with a band wide enough for any load.

EXACT = 0.01  # relative tolerance on the simulated clock: a correct answer is off by nanoseconds


def seconds_of(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(f"{what} returned {describe(value)}; return the seconds as a Python float")
    value = float(value)
    expect(value == value and value not in (float("inf"), float("-inf")), f"{what} returned {value}")
    return value


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _near(got: float, want: float) -> bool:
    return abs(got - want) <= EXACT * abs(want)


def _timing_mistake(got: float, timed: list[float], warm: list[float], gpu: bool) -> str:
    """What a time_fn that returned `got` seconds for calls of `timed` seconds (after `warm` ones) most likely did."""
    median = _median(timed)
    if gpu and got < 0.05 * min(timed):
        return ("the host's clock only saw the launches: on the (simulated) GPU fn only queues its work. Wait for "
                "the GPU before reading the clock (torch.cuda.synchronize()) or time with CUDA events")
    named = [(median * 1e3, "that is the median in milliseconds; return seconds, not milliseconds"),
             (median * 1e6, "that is the median in microseconds; return seconds"),
             (median * 1e9, "that is the median in nanoseconds; return seconds"),
             (sum(timed) / len(timed), "that is the mean: take the median"),
             (min(timed), "that is the fastest call: take the median"),
             (max(timed), "that is the slowest call: take the median"),
             (sum(timed), "that is the total of the timed calls: take the median of each call's time")]
    if warm:
        named += [(_median(warm + timed), "are the warm-up calls in it? time only the reps calls after them"),
                  (_median(timed[:-1] + warm[-1:]), "one call too early: the last warm-up call is timed, the last "
                                                    "timed call is not"),
                  ((sum(warm) + sum(timed)) / (len(warm) + len(timed)), "that is the mean of every call, warm-up "
                                                                       "included: take the median of the timed ones")]
    for value, mistake in named:
        if value != median and _near(got, value):
            return mistake
    if got < 0.05 * min(timed):
        return ("far less than the fastest call: does your clock see fn's work? time with time.perf_counter() "
                "(the check simulates it), in seconds")
    return ""


def expect_median(out: dict, timed_ms: list[float], warmup_ms: list[float], what: str, gpu: bool = False) -> None:
    """time_fn called fn warmup + reps times and returned the median of the timed calls, on the simulated clock."""
    expect_calls(out, len(warmup_ms) + len(timed_ms), what)
    got = seconds_of(out["seconds"], what)
    timed, warm = [ms / 1e3 for ms in timed_ms], [ms / 1e3 for ms in warmup_ms]
    median = _median(timed)
    if _near(got, median):
        return
    mistake = _timing_mistake(got, timed, warm, gpu)
    fail(f"{what} returned {got:.6g} s, but the median of the timed calls is {median:.6g} s"
         + (f": {mistake}" if mistake else ""))


def expect_calls(out: dict, want: int, what: str) -> None:
    expect(out["calls"] == want, f"{what} called fn {out['calls']} times; it should call it warmup + reps = {want} "
                                 "times")


def time_calls(time_fn, warmup_ms: list, timed_ms: list, warmup, reps, machine: str, clock: str = "simulated") -> dict:
    return run_scenario(scenarios.time_calls, time_fn, warmup_ms, timed_ms, warmup, reps, machine, clock)


@TIME_FN.check
def calls_fn_warmup_plus_reps_times(time_fn):
    """time_fn(fn, warmup=2, reps=5) calls fn exactly 7 times; time_fn(fn), with the defaults 3 and 10, 13 times"""
    out = time_calls(time_fn, [1, 1], [1] * 5, 2, 5, "cpu")
    expect_calls(out, 7, "time_fn(fn, warmup=2, reps=5)")
    seconds_of(out["seconds"], "time_fn(fn, warmup=2, reps=5)")
    out = time_calls(time_fn, [1, 1, 1], [1] * 10, None, None, "cpu")
    expect_calls(out, 13, "time_fn(fn) (warmup=3 and reps=10 by default)")


@TIME_FN.check
def median_of_the_timed_calls(time_fn):
    """the median of the timed calls (not the mean, not the fastest), warm-up calls left out (a simulated clock)"""
    # milliseconds; sorted: 5 5 5 30 300 300 300: median 30, mean 135, fastest 5; with the warm-up calls in, 80;
    # shifted by one call (the last warm-up timed, the last timed call not), 60
    timed, warm = [300, 5, 30, 300, 5, 300, 5], [100, 100, 60]
    out = time_calls(time_fn, warm, timed, 3, 7, "cpu")
    expect_median(out, timed, warm, "time_fn(fn, warmup=3, reps=7) where the timed calls take 300, 5, 30, 300, 5, 300, "
                                    "5 ms")


@TIME_FN.check
def waits_for_the_gpu(time_fn):
    """on a (simulated) GPU, fn only launches its work: time_fn must wait for it (synchronize or CUDA events)"""
    timed, warm = [20, 40, 20, 40, 40], [30, 30]
    out = time_calls(time_fn, warm, timed, 2, 5, "gpu")
    expect_median(out, timed, warm, "time_fn(fn, warmup=2, reps=5) on a simulated GPU where each call launches "
                                    "20 or 40 ms of work", gpu=True)


REAL_MS = 12  # each call of the real-clock check sleeps this long (a check sleeps at most 50 ms at a time)


@TIME_FN.check
def on_the_real_clock(time_fn):
    """on the machine's own clock (fn sleeps 12 ms): seconds, about 12 ms, whatever the machine's load"""
    timed = [REAL_MS] * 5
    out = time_calls(time_fn, [REAL_MS], timed, 1, 5, "cpu", "real")
    what = f"time_fn(fn, warmup=1, reps=5) where fn sleeps {REAL_MS} ms"
    expect_calls(out, 6, what)
    got = seconds_of(out["seconds"], what)
    # A sleep lasts at least its time; a busy machine only lengthens the calls, and every correct timing of a call
    # lies within its span (scenarios.gpu._spans), so the band is wide and its top moves with the load.
    lo, hi = 0.5 * REAL_MS / 1e3, 2 * _median(out["spans"][1:]) + 0.005
    if lo <= got <= hi:
        return
    mistake = next((m for scale, m in ((1e3, "milliseconds"), (1e6, "microseconds"), (1e9, "nanoseconds"))
                    if lo <= got / scale <= hi), None)
    fail(f"{what} returned {got:.3g}, but each call takes about {REAL_MS / 1e3:g} s"
         + (f": that is {mistake}; return seconds" if mistake else ""))


# ---------------------------------------------------------------- transfer_bandwidth
# The checks run transfer_bandwidth on a simulated machine and clock (scenarios.gpu._Machine): a copy of n bytes
# takes exactly n / rate seconds, allocating or filling memory costs what writing it costs, a copy from pinned
# memory to a simulated GPU is queued (the host goes on) and one from pageable memory makes the host wait. So the
# right answer is the rate the check set, and each mistake is off by a factor the check names. One check times
# a real copy on the real clock, with a band wide enough for any load.

MiB = 2**20
RATES = dict(host_rate=20e9, pinned_rate=48e9, pageable_rate=12e9, device_rate=3e12)  # bytes/s, simulated


def bandwidth_of(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(f"{what} returned {describe(value)}; return bytes per second as a Python float")
    if not float(value) > 0 or float(value) == float("inf"):  # NaN too
        fail(f"{what} returned {float(value)}; a bandwidth is positive and finite")
    return float(value)


def _rate(pinned: bool, device, gpus: int, rates: dict) -> tuple[float, str]:
    """The simulated rate a correct answer measures, and its name."""
    if gpus and torch.device(device).type == "cuda":
        return (rates["pinned_rate"], "from pinned memory") if pinned else (rates["pageable_rate"],
                                                                           "from pageable memory")
    return rates["host_rate"], "host to host"


def _bandwidth_mistake(value: float, want: float, nbytes: int, pinned: bool, gpu: bool, rates: dict) -> str:
    """What an answer that measured `value` where a correct one measures `want` most likely did."""
    ratio = value / want
    if value < 1e3:
        return "is that a time, or GB/s? return nbytes / seconds, in bytes per second"
    for k, mistake in ((8, "bits per second? return bytes per second"),
                       (2, "each byte counted twice: a copy of nbytes bytes moves nbytes (count them once)"),
                       (1e-3, "bytes per millisecond? return bytes per second"),
                       (1e-9, "is that GB/s? return bytes per second")):
        if _near(ratio, k):
            return mistake
    if gpu and pinned and _near(value, rates["pageable_rate"]):
        return ("that is the rate from pageable memory: with pinned=True on a GPU, copy from pinned memory "
                "(pin_memory=True, or .pin_memory())")
    if gpu and not pinned and _near(value, rates["pinned_rate"]):
        return "that is the rate from pinned memory: with pinned=False, copy from ordinary (pageable) memory"
    if gpu and _near(ratio, scenarios.READBACK):
        return ("that is a copy from the device to the host: measure host to device, the source on the host (pinned "
                "when asked) and the destination on the device (dst.copy_(src) copies src into dst)")
    if gpu and ratio > 2:  # the host's clock saw the launch, or a clock that does not count waiting was read
        return ("the copy had not finished when your clock was read: a copy from pinned memory with "
                "non_blocking=True only queues the work; wait for the GPU (torch.cuda.synchronize() or CUDA "
                "events: your time_fn does), on a clock that counts the wait (time.perf_counter)")
    if _near(ratio, nbytes / MiB) and nbytes != MiB:
        return "copy nbytes bytes (not fewer): the check times a copy of exactly nbytes"
    if ratio < 1 and gpu:
        return ("slower than the copy: is the source pinned when pinned is true, and does the timed part make or "
                "fill tensors? make src and dst before timing, and time only dst.copy_(src, non_blocking=...)")
    if ratio < 1:
        return ("does the timed part allocate or fill tensors? new memory and filling it cost time too: make src "
                "and dst before timing, and time only dst.copy_(src)")
    hint = factor_hint(value, want).removeprefix("; ")
    return hint or ("faster than the copy runs: count each byte once (nbytes / seconds), time the whole copy, and "
                    "read a clock the check simulates (time.perf_counter, CUDA events, your time_fn)")


def expect_bandwidth(transfer_bandwidth, nbytes: int, pinned: bool, device, what: str, gpus: int = 0,
                     rates: dict | None = None) -> float:
    """transfer_bandwidth on a simulated machine with `gpus` GPUs (0: a CPU-only one) measures the rate it set."""
    rates = rates or RATES
    out = run_scenario(scenarios.bandwidth, transfer_bandwidth, nbytes, pinned, device, gpus, rates)
    value = bandwidth_of(out["bandwidth"], what)
    want, kind = _rate(pinned, device, gpus, rates)
    if _near(value, want):
        return value
    mistake = _bandwidth_mistake(value, want, nbytes, pinned, gpus > 0 and torch.device(device).type == "cuda", rates)
    fail(f"{what} returned {value:.4g} bytes/s, but the simulated copy ({kind}) runs at {want:.4g} bytes/s"
         + (f": {mistake}" if mistake else ""))


@TRANSFER_BANDWIDTH.check
def bytes_per_second_on_cpu(transfer_bandwidth):
    """on a CPU-only machine (simulated, copies at 20 GB/s), a host-to-host copy of 32 MiB: 20e9 bytes/s"""
    expect_bandwidth(transfer_bandwidth, 32 * MiB, False, "cpu", "transfer_bandwidth(32 MiB, False, 'cpu')")


@TRANSFER_BANDWIDTH.check
def copies_nbytes(transfer_bandwidth):
    """the copy has nbytes bytes: 1 MiB and 16 MiB each give the copy's rate; device a torch.device too"""
    expect_bandwidth(transfer_bandwidth, MiB, False, "cpu", "transfer_bandwidth(1 MiB, False, 'cpu')")
    expect_bandwidth(transfer_bandwidth, 16 * MiB, False, torch.device("cpu"),
                     "transfer_bandwidth(16 MiB, False, torch.device('cpu'))")


@TRANSFER_BANDWIDTH.check
def pinned_is_ignored_without_cuda(transfer_bandwidth):
    """pinned=True on a CPU-only machine does not raise (pinning needs an accelerator): it is ignored"""
    expect_bandwidth(transfer_bandwidth, 8 * MiB, True, "cpu", "transfer_bandwidth(8 MiB, True, 'cpu') on a "
                                                                "machine without a GPU")


@TRANSFER_BANDWIDTH.check
def pinned_and_pageable_on_a_gpu(transfer_bandwidth):
    """on a simulated GPU: from pinned memory 48e9 bytes/s (a queued copy: wait for it), from pageable 12e9"""
    for pinned in (True, False):
        expect_bandwidth(transfer_bandwidth, 16 * MiB, pinned, "cuda", f"transfer_bandwidth(16 MiB, {pinned}, "
                         "'cuda') on a simulated GPU", gpus=1)


@TRANSFER_BANDWIDTH.check
def rejects_empty_transfers(transfer_bandwidth):
    """nbytes < 1 raises ValueError"""
    expect_raises(ValueError, lambda: run_scenario(scenarios.bandwidth_error, transfer_bandwidth, 0, False, "cpu"),
                  "transfer_bandwidth(0, False, 'cpu')")


REAL_BAND = 50  # the real-clock check accepts 1/50 of a plain copy's median speed to 50 times its best


@TRANSFER_BANDWIDTH.check
def on_the_real_clock(transfer_bandwidth):
    """a real 8 MiB copy on this machine's own clock: within a factor of 50 of plain copies timed beside it"""
    nbytes, what = 8 * MiB, "transfer_bandwidth(8 MiB, False, 'cpu') on the real clock"
    out = run_scenario(scenarios.bandwidth_on_the_real_clock, transfer_bandwidth, nbytes, False, "cpu")
    value = max(bandwidth_of(v, what) for v in out["bandwidth"])  # its best call: a busy machine only slows it
    median, fast = nbytes / _median(out["reference_seconds"]), nbytes / min(out["reference_seconds"])
    if median / REAL_BAND <= value <= fast * REAL_BAND:
        return
    hint = ""
    if value < 1e3:
        hint = ": is that a time, or GB/s? return nbytes / seconds, in bytes per second"
    elif median / REAL_BAND <= value * 1e3 <= fast * REAL_BAND:
        hint = ": bytes per millisecond? return bytes per second"
    fail(f"{what} returned {value:.3g} bytes/s, but plain copies of 8 MiB here ran at {median:.3g} bytes/s (median) "
         f"and {fast:.3g} at best{hint}")


# ---------------------------------------------------------------- memory_delta


def expect_called_once(out: dict, what: str) -> None:
    expect(out["calls"] == 1, f"{what} called fn {out['calls']} times; call it exactly once (a second call keeps "
                              "what fn keeps twice, and its other side effects happen twice)")


def delta_of(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(f"{what} returned {describe(value)}; return a number of bytes as a Python int")
    return int(value)


def expect_delta_cpu(memory_delta, case: str, nbytes: int, want: int, what: str, device="cpu") -> None:
    out = run_scenario(scenarios.held_on_cpu, memory_delta, case, nbytes, device)
    expect_called_once(out, what)
    got = delta_of(out["delta"], what)
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


def expect_delta_gpu(memory_delta, case: str, nbytes: int, want: int, what: str, device="cuda", count: int = 1,
                     on: int = 0) -> None:
    """memory_delta(fn, device) on `count` simulated GPUs, fn allocating on GPU `on`, returns `want`."""
    out = run_scenario(scenarios.held_on_gpu, memory_delta, case, nbytes, device, SIMULATED["allocated"],
                       SIMULATED["peak"], SIMULATED["cached"], count, on)
    expect_called_once(out, what)
    got = delta_of(out["delta"], what)
    if got != want:
        hint = _delta_hint(case, got, nbytes)
        if got == 0 and on != 0 and want:
            hint = (f" (fn allocated on cuda:{on}, and torch.cuda.memory_allocated() without a device reads the "
                    "current GPU, cuda:0: pass the device on)")
        if got >= SIMULATED["allocated"]:
            hint = (" (that counts what was allocated before fn ran, or the peak of earlier work: "
                    "subtract torch.cuda.memory_allocated() from before the call)")
        elif got == 0 and case == "keep" and on == 0:
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


@MEMORY_DELTA.check
def on_the_gpu_it_names(memory_delta):
    """on 4 simulated GPUs: fn keeps 2 MiB on cuda:2, so memory_delta(fn, 'cuda:2') is 2 MiB (cuda:0's counter: 0)"""
    expect_delta_gpu(memory_delta, "keep", 2 * MiB, 2 * MiB, "memory_delta(fn, 'cuda:2') on 4 simulated GPUs, fn keeps "
                                                             "2 MiB on cuda:2", device="cuda:2", count=4, on=2)
