"""Chapter 09 (gpu): hidden checks: more machines, deeper and odder batches, other timings and sizes."""
from __future__ import annotations

import torch

from grader.exercises.gpu import (GPU_BATCH, MAPPINGS, MEMORY_DELTA, MiB, TIME_FN, TO_DEVICE, TRANSFER_BANDWIDTH,
                                  TRY_ALL_GPUS, TRY_GPU, expect_bandwidth, expect_calls, expect_delta_cpu,
                                  expect_delta_gpu, expect_median, expect_non_blocking, expect_to_device, expect_to_gpu,
                                  expect_try_all_gpus, expect_try_gpu, tensor, time_calls)
from grader.expect import expect_raises
from grader.inputs import randint
from grader.scenario import run_scenario
from grader.scenarios import gpu as scenarios


# ---------------------------------------------------------------- try_gpu / try_all_gpus

@TRY_GPU.hidden
def more_machines(try_gpu):
    """machines with 2, 3 and 8 GPUs, every index up to and past the last, by keyword too"""
    for count in (2, 3, 8):
        expect_try_gpu(try_gpu, count, [None, *range(count + 2), {"i": count - 1}, {"i": count}])


@TRY_ALL_GPUS.hidden
def more_machines_all(try_all_gpus):
    """machines with 2, 3 and 8 GPUs"""
    for count in (2, 3, 8):
        expect_try_all_gpus(try_all_gpus, count)


# ---------------------------------------------------------------- to_device

_DTYPES = ("float32", "float64", "bfloat16", "int64", "int32", "uint8", "bool")
_VALUES = (0, 7, -3, 2.5, "text", "", None, True, False)


def random_spec(depth: int) -> list:
    """A random batch: containers of every kind nested up to `depth`, tensors and other leaves."""
    r = randint(0, 9) if depth > 0 else randint(0, 4)
    if r <= 1:
        return tensor(*[randint(1, 3) for _ in range(randint(0, 3))], dtype=_DTYPES[randint(0, len(_DTYPES) - 1)])
    if r == 2:
        return ["value", _VALUES[randint(0, len(_VALUES) - 1)]]
    if r == 3:
        return ["numpy", [randint(1, 3)]] if randint(0, 1) else ["object"]
    if r == 4:
        return ["param", [randint(1, 3)]]
    n = randint(0, 3)
    items = [random_spec(depth - 1) for _ in range(n)]
    if r <= 5:
        return ["list", items]
    if r <= 7:  # a plain dict half of the time, else another Mapping
        kind = "dict" if randint(0, 1) else MAPPINGS[randint(1, len(MAPPINGS) - 1)]
        return [kind, [[f"k{i}" if randint(0, 3) else i, s] for i, s in enumerate(items)]]
    if r == 8 or n == 0:
        return ["tuple", items]
    return ["namedtuple", f"Record{n}", [f"f{i}" for i in range(n)], items]


@TO_DEVICE.hidden
def random_batches(to_device):
    """random nested batches of every container and leaf kind, to 'meta' and to the cpu"""
    for trial in range(25):
        spec = ["dict", [["a", random_spec(4)], ["b", random_spec(3)], ["c", tensor(2)]]]
        device = ("meta", "cpu", torch.device("meta"), torch.device("cpu"))[trial % 4]
        expect_to_device(to_device, spec, device, f"to_device(a random nested batch, {device!r})", seed=trial)


@TO_DEVICE.hidden
def bare_leaves_and_empty_containers(to_device):
    """a bare tensor, a bare int, a bare string; empty dict, list and tuple; a Parameter"""
    for spec in (tensor(2, 2), ["value", 5], ["value", "s"], ["dict", []], ["list", []], ["tuple", []],
                 ["param", [3]], ["list", [["dict", []], ["tuple", []], ["list", [["list", []]]]]]):
        for device in ("meta", "cpu"):
            expect_to_device(to_device, spec, device, f"to_device({spec[0]} batch, {device!r})")


@TO_DEVICE.hidden
def int_keys_and_key_order(to_device):
    """dict keys of any kind stay, in their order"""
    spec = ["dict", [[3, tensor(1)], ["z", tensor(2)], [1, ["value", "x"]], ["a", ["tuple", [tensor(1)]]]]]
    expect_to_device(to_device, spec, "meta", "to_device({3: ..., 'z': ..., 1: ..., 'a': ...}, 'meta')")


@TO_DEVICE.hidden
def mappings_inside_mappings(to_device):
    """empty and nested OrderedDicts, defaultdicts and UserDicts, to 'meta' and to the cpu"""
    spec = ["UserDict", [["od", ["OrderedDict", [[2, tensor(1)], ["dd", ["defaultdict", []]]]]],
                         ["t", ["tuple", [["defaultdict", [["w", ["list", [tensor(2, dtype="int32")]]]]]]]]]]
    for device in ("meta", "cpu"):
        expect_to_device(to_device, spec, device, f"to_device(UserDict(od=OrderedDict(...), t=(defaultdict(...),)), "
                                                  f"{device!r})")


@TO_DEVICE.hidden
def deep_namedtuples(to_device):
    """namedtuples inside namedtuples inside lists, tuples of tuples"""
    inner = ["namedtuple", "Inner", ["x", "meta"], [tensor(2), ["dict", [["id", ["value", 4]], ["t", tensor(1)]]]]]
    outer = ["namedtuple", "Outer", ["first", "rest"], [inner, ["tuple", [["tuple", [tensor(1), inner]]]]]]
    expect_to_device(to_device, ["list", [outer, outer]], "meta", "to_device([Outer(...), Outer(...)], 'meta')")


@TO_DEVICE.hidden
def non_blocking_false_and_deep(to_device):
    """non_blocking=False given explicitly reaches every move, nested ones too"""
    spec = ["tuple", [["watched", [2]], ["dict", [["w", ["list", [["watched", [1]], ["watched", [3]]]]]]]]]
    out = expect_to_device(to_device, spec, "meta", "to_device(batch, 'meta', non_blocking=False)", non_blocking=False)
    expect_non_blocking(out, False, 3, "to_device(batch, 'meta', non_blocking=False)")
    out = expect_to_device(to_device, spec, "meta", "to_device(batch, 'meta', non_blocking=True)", non_blocking=True)
    expect_non_blocking(out, True, 3, "to_device(batch, 'meta', non_blocking=True)")


def _moving(spec: list, index: int) -> int:
    """How many tensors of a batch spec must move to GPU `index` (those not on it already)."""
    kind = spec[0]
    if kind in ("tensor", "param", "watched"):
        return 1
    if kind == "cuda":
        return int(spec[2] != index)
    if kind in ("list", "tuple"):
        return sum(_moving(s, index) for s in spec[1])
    if kind in MAPPINGS:
        return sum(_moving(s, index) for _, s in spec[1])
    if kind == "namedtuple":
        return sum(_moving(s, index) for s in spec[3])
    return 0


@TO_DEVICE.hidden
def random_batches_on_gpus(to_device):
    """random nested batches (some tensors on a simulated GPU already) to a random GPU of a simulated machine"""
    for trial in range(6):
        count = randint(1, 8)
        index = randint(0, count - 1)
        spec = ["list", [random_spec(3), ["cuda", [randint(1, 3)], index], ["cuda", [2], (index + 1) % count]]]
        device = (f"cuda:{index}", torch.device("cuda", index))[trial % 2]
        out = expect_to_gpu(to_device, spec, device, count, f"to_device(a random nested batch, {device!r}) on "
                            f"{count} simulated GPUs", non_blocking=bool(trial % 3), seed=trial)
        moving = _moving(spec, index)
        if moving:
            expect_non_blocking(out, bool(trial % 3), moving, f"to_device(batch, {device!r}, "
                                f"non_blocking={bool(trial % 3)})")


@TO_DEVICE.hidden
def the_current_gpu_is_not_enough(to_device):
    """to cuda:3 of 4 simulated GPUs: 'cuda' and .cuda() would mean cuda:0"""
    expect_to_gpu(to_device, GPU_BATCH, "cuda:3", 4, "to_device(batch, 'cuda:3') on a machine with 4 GPUs")


# ---------------------------------------------------------------- time_fn

@TIME_FN.hidden
def default_arguments(time_fn):
    """time_fn(fn) warms up 3 times and times 10 calls"""
    timed = [2, 7, 2, 7, 7, 2, 7, 2, 7, 7]
    out = time_calls(time_fn, [1, 1, 1], timed, None, None, "cpu")
    expect_calls(out, 13, "time_fn(fn)")
    expect_median(out, timed, [1, 1, 1], "time_fn(fn) where the timed calls take 2 or 7 ms")


@TIME_FN.hidden
def median_on_the_gpu(time_fn):
    """on a simulated GPU with uneven work: the median, the warm-up queue left out"""
    timed = [5, 150, 5, 25, 150, 5, 150]
    out = time_calls(time_fn, [60, 60, 60], timed, 3, 7, "gpu")
    expect_median(out, timed, [60, 60, 60], "time_fn(fn, warmup=3, reps=7) on a simulated GPU", gpu=True)


@TIME_FN.hidden
def no_warmup_one_rep(time_fn):
    """warmup=0 and reps=1, on a CPU and on a simulated GPU"""
    for machine in ("cpu", "gpu"):
        out = time_calls(time_fn, [], [15], 0, 1, machine)
        expect_median(out, [15], [], f"time_fn(fn, warmup=0, reps=1) on a {machine}", gpu=machine == "gpu")


@TIME_FN.hidden
def even_reps(time_fn):
    """an even number of reps whose two middle calls differ: their mean"""
    timed = [3, 30, 10, 12, 3, 30]
    out = time_calls(time_fn, [1], timed, 1, 6, "cpu")
    expect_median(out, timed, [1], "time_fn(fn, warmup=1, reps=6)")


@TIME_FN.hidden
def random_durations(time_fn):
    """random durations, warm-up counts and reps, on a CPU and on a simulated GPU"""
    for trial in range(4):
        warmup, reps = randint(0, 4), randint(1, 12)
        warm = [randint(1, 400) / 4 for _ in range(warmup)]
        timed = [randint(1, 400) / 4 for _ in range(reps)]
        machine = ("cpu", "gpu")[trial % 2]
        out = time_calls(time_fn, warm, timed, warmup, reps, machine)
        expect_median(out, timed, warm, f"time_fn(fn, warmup={warmup}, reps={reps}) on a {machine} where the timed "
                                        f"calls take {', '.join(f'{t:g}' for t in timed)} ms", gpu=machine == "gpu")


# ---------------------------------------------------------------- transfer_bandwidth


def _random_rates() -> dict:
    """Simulated rates, bytes per second, drawn for one check (pinned above pageable, as on real machines)."""
    pageable = randint(40, 160) * 1e8
    return dict(host_rate=randint(50, 400) * 1e8, pinned_rate=pageable * randint(3, 6) + 1e8,
                pageable_rate=pageable, device_rate=randint(10, 40) * 1e11)


@TRANSFER_BANDWIDTH.hidden
def odd_sizes_and_device_objects(transfer_bandwidth):
    """sizes that are not powers of two, the device as a torch.device, pinned or not, other rates"""
    for _ in range(2):
        nbytes = randint(3 * MiB, 12 * MiB) | 1
        pinned = bool(randint(0, 1))
        expect_bandwidth(transfer_bandwidth, nbytes, pinned, torch.device("cpu"),
                         f"transfer_bandwidth({nbytes}, {pinned}, torch.device('cpu'))", rates=_random_rates())


@TRANSFER_BANDWIDTH.hidden
def large_copy(transfer_bandwidth):
    """a 64 MiB copy"""
    expect_bandwidth(transfer_bandwidth, 64 * MiB, False, "cpu", "transfer_bandwidth(64 MiB, False, 'cpu')")


@TRANSFER_BANDWIDTH.hidden
def gpus_rates_and_devices(transfer_bandwidth):
    """simulated GPUs at other rates: 'cuda:0' and torch.device('cuda', 0), pinned and pageable, odd sizes"""
    for trial in range(4):
        nbytes, pinned = randint(MiB, 24 * MiB) | 1, bool(trial % 2)
        device = ("cuda:0", torch.device("cuda", 0))[trial // 2]
        expect_bandwidth(transfer_bandwidth, nbytes, pinned, device, f"transfer_bandwidth({nbytes}, {pinned}, "
                         f"{device!r}) on a simulated GPU", gpus=1, rates=_random_rates())


@TRANSFER_BANDWIDTH.hidden
def negative_size(transfer_bandwidth):
    """a negative nbytes raises ValueError"""
    expect_raises(ValueError, lambda: run_scenario(scenarios.bandwidth_error, transfer_bandwidth, -5, True, "cpu"),
                  "transfer_bandwidth(-5, True, 'cpu')")


# ---------------------------------------------------------------- memory_delta

@MEMORY_DELTA.hidden
def views_keep_whole_storages(memory_delta):
    """on a CPU: a small view kept alive holds its whole storage; several tensors add up"""
    n = 256 * 1024
    expect_delta_cpu(memory_delta, "view", n, 4 * n, "memory_delta(fn, 'cpu') where fn keeps a view of a quarter of a "
                                                     "1 MiB tensor")
    expect_delta_cpu(memory_delta, "several", n, 5 * n, "memory_delta(fn, 'cpu') where fn keeps three 256 KiB tensors "
                                                        "and an empty view of a 512 KiB one")


@MEMORY_DELTA.hidden
def nothing_kept(memory_delta):
    """fn that keeps nothing: 0 on a CPU and on a simulated GPU"""
    expect_delta_cpu(memory_delta, "nothing", MiB, 0, "memory_delta(fn, 'cpu') where fn keeps nothing",
                     device=torch.device("cpu"))
    expect_delta_gpu(memory_delta, "nothing", MiB, 0, "memory_delta(fn, 'cuda') where fn keeps nothing")


@MEMORY_DELTA.hidden
def gpu_sizes_and_devices(memory_delta):
    """on a simulated GPU: random sizes, several blocks kept, the device as torch.device('cuda:0')"""
    for _ in range(3):
        n = randint(1, 4096) * 512
        expect_delta_gpu(memory_delta, "several", n, 3 * n, f"memory_delta(fn, cuda:0) where fn keeps three blocks of "
                                                            f"{n} bytes", device=torch.device("cuda:0"))
        expect_delta_gpu(memory_delta, "temporary", n, n, f"memory_delta(fn, 'cuda') where fn keeps {n} bytes")


@MEMORY_DELTA.hidden
def several_gpus(memory_delta):
    """on 2 to 8 simulated GPUs: what fn keeps on one of them, named 'cuda:i', torch.device or 'cuda' (the current)"""
    for trial in range(3):
        count = randint(2, 8)
        on = randint(1, count - 1)
        n = randint(1, 4096) * 512
        device = (f"cuda:{on}", torch.device("cuda", on))[trial % 2]
        expect_delta_gpu(memory_delta, "several", n, 3 * n, f"memory_delta(fn, {device!r}) on {count} simulated GPUs, "
                         f"fn keeps three blocks of {n} bytes on cuda:{on}", device=device, count=count, on=on)
    expect_delta_gpu(memory_delta, "keep", MiB, MiB, "memory_delta(fn, 'cuda') on 4 simulated GPUs, fn keeps 1 MiB on "
                     "the current GPU, cuda:0", count=4, on=0)
