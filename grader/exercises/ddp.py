"""Chapter 10 (ddp): public checks. Hidden checks for the same exercises live in grader/hidden/ddp.py."""
from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils.data import DistributedSampler

from grader.exercises.ddp_judge import (expect_averaged, expect_same_as_one_process, expect_sharded,
                                       recorded_run)
from grader.expect import (call, describe, expect, expect_equal, expect_raises, expect_tensor, expect_type,
                           factor_hint, fail)
from grader.registry import exercise
from grader.scenario import run_scenario
from grader.scenarios import ddp as scenarios

# The references, bound before any student code runs.
_DistributedSampler = DistributedSampler
_stack, _isclose, _tensor_split, _cat, _equal = torch.stack, torch.isclose, torch.tensor_split, torch.cat, torch.equal

RING_ALLREDUCE = exercise("ddp.ring_allreduce", points=3)
ALLREDUCE_TRAFFIC = exercise("ddp.allreduce_traffic", points=1)
ZERO_MEMORY = exercise("ddp.zero_memory", points=2)
# The class's own methods too (first: the names below replace the class they are looked up on): the notebook
# imports DistributedSampler at its top, and a function using that name holds the class itself.
SHARD_INDICES = exercise("ddp.shard_indices", points=2,
                         forbid=("torch.utils.data.distributed.DistributedSampler.__init__",
                                 "torch.utils.data.distributed.DistributedSampler.__iter__",
                                 "torch.utils.data.DistributedSampler",
                                 "torch.utils.data.distributed.DistributedSampler"))
AVERAGE_GRADIENTS = exercise("ddp.average_gradients", points=2)
DDP_TRAIN = exercise("ddp.ddp_train", points=3)
PIPELINE_BUBBLE = exercise("ddp.pipeline_bubble", points=1)
PARALLEL_LAYOUT = exercise("ddp.parallel_layout", points=3)


# ---------------------------------------------------------------- ring_allreduce

def expect_allreduce(ring_allreduce, tensors: list[torch.Tensor], how: str, exact: bool = False) -> list[torch.Tensor]:
    """Every output is the elementwise sum of all inputs, a tensor of its own, in the inputs' shape and dtype."""
    want = _stack([t.double() for t in tensors]).sum(0).to(tensors[0].dtype)
    what = f"ring_allreduce({how})"
    inputs = [t.clone() for t in tensors]
    got = call(ring_allreduce, list(tensors), what=what)
    for rank, (t, before) in enumerate(zip(tensors, inputs)):
        expect(_equal(t, before), f"{what} changed rank {rank}'s input tensor in place; the inputs stand for the "
                                  "ranks' memory before the all-reduce: work on copies")
    expect_type(got, list, what)
    expect(len(got) == len(tensors), f"{what} returned {len(got)} tensors for {len(tensors)} ranks")
    tol = 0.0 if exact else 1e-5
    for rank, t in enumerate(got):
        expect_tensor(t, want, f"{what}: rank {rank}'s result", rtol=tol, atol=tol)
    ptrs = {t.untyped_storage().data_ptr() for t in got} | {t.untyped_storage().data_ptr() for t in tensors}
    expect(len(ptrs) == 2 * len(tensors), f"{what}: every rank must end with a tensor of its own (in a real "
                                          "cluster each lives in another process); some results share memory "
                                          "with each other or with the inputs")
    return got


@RING_ALLREDUCE.check
def two_ranks(ring_allreduce):
    """2 ranks, 6 elements each: every rank ends with the sum"""
    expect_allreduce(ring_allreduce, [torch.arange(6.0), 10 * torch.arange(6.0)], "2 ranks of 6 elements")


@RING_ALLREDUCE.check
def several_ranks_any_shape(ring_allreduce):
    """3 and 4 ranks; 2-D tensors keep their shape, float64 stays float64"""
    expect_allreduce(ring_allreduce, [torch.randn(4, 3) for _ in range(3)], "3 ranks of shape (4, 3)")
    expect_allreduce(ring_allreduce, [torch.randn(2, 5, dtype=torch.float64) for _ in range(3)],
                     "3 ranks of float64 (2, 5)")
    expect_allreduce(ring_allreduce, [torch.randn(8) for _ in range(4)], "4 ranks of 8 elements")


@RING_ALLREDUCE.check
def length_not_divisible(ring_allreduce):
    """7 elements over 3 ranks, 2 elements over 5 ranks: chunks of unequal (even empty) size"""
    expect_allreduce(ring_allreduce, [torch.randn(7) for _ in range(3)], "3 ranks of 7 elements")
    expect_allreduce(ring_allreduce, [torch.randn(2) for _ in range(5)], "5 ranks of 2 elements")


def ring_order_sum(tensors: list[torch.Tensor], start_at_chunk: bool = True) -> torch.Tensor:
    """The sum of the inputs with chunk k (of torch.tensor_split's n) added up in the ring's order: it starts at
    rank k, and each rank that receives it adds its own copy, ((t_k + t_k+1) + t_k+2) + ...; with
    start_at_chunk=False every chunk is added in rank order from rank 0, as sum(tensors) does."""
    n = len(tensors)
    split = [_tensor_split(t.flatten(), n) for t in tensors]
    out = []
    for k in range(n):
        first = k if start_at_chunk else 0
        acc = split[first][k].clone()
        for j in range(1, n):
            acc = split[(first + j) % n][k] + acc
        out.append(acc)
    return _cat(out).view(tensors[0].shape)


def mixed_magnitudes(n: int, length: int, seed: int) -> list[torch.Tensor]:
    """float32 values from 1e-4 to 1e7 in size: the order of additions shows in the rounding."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(length, generator=g) * 10.0 ** torch.randint(-4, 8, (length,), generator=g)
            for _ in range(n)]


@RING_ALLREDUCE.check
def ring_order_of_sums(ring_allreduce):
    """each chunk is summed in the ring's order (chunk k starts at rank k), exactly, as float32 rounding shows"""
    for n, length in ((3, 7), (4, 9)):
        tensors = mixed_magnitudes(n, length, seed=n)
        want, in_rank_order = ring_order_sum(tensors), ring_order_sum(tensors, start_at_chunk=False)
        what = f"ring_allreduce({n} ranks of {length} float32 elements of mixed magnitudes)"
        got = expect_allreduce(ring_allreduce, tensors, f"{n} ranks of {length} float32 elements of mixed magnitudes")
        for rank, t in enumerate(got):
            if _equal(t, want):
                continue
            if _equal(t, in_rank_order):
                order = ", ".join(map(str, range(n)))
                fail(f"{what}: rank {rank}'s result adds every element in rank order {order} (as "
                     "sum(tensors) or torch.stack(tensors).sum(0) do), not in the ring's order: chunk k starts at "
                     "rank k, and each rank it reaches adds its own copy")
            expect_tensor(t, want, f"{what}: rank {rank}'s result, summed in the ring's order (chunk k starts at "
                                   "rank k)", rtol=0, atol=0)


@RING_ALLREDUCE.check
def one_rank(ring_allreduce):
    """a world of 1: nothing to exchange, the result is a copy"""
    expect_allreduce(ring_allreduce, [torch.arange(5.0)], "1 rank of 5 elements")


# ---------------------------------------------------------------- allreduce_traffic

def expect_traffic(allreduce_traffic, nbytes: int, world_size: int, want: float) -> None:
    expect_traffic_at(allreduce_traffic, nbytes, [(world_size, want)])


def _traffic_hint(answers: list[tuple[int, float, float]]) -> str:
    """A likely cause, named only when every case agrees on it: with one world size, "2x it" cannot tell the
    world size from a constant 2 (`2 * nbytes` answers exactly that at n = 2)."""
    ratios = [(n, got / want) for n, got, want in answers if want]
    if not ratios:
        return ""
    if all(abs(r - 0.5) < 1e-9 for _, r in ratios):
        return "; yours is half of it, one reduce-scatter (or one all-gather): an all-reduce is both"
    if len({n for n, _ in ratios}) > 1 and all(abs(r - n) < 1e-9 * n for n, r in ratios):
        return ("; yours is n times it at every world size n: each of the 2(n - 1) steps sends one 1/n chunk, "
                "not the whole buffer")
    if len({n for n, _, _ in answers}) > 1 and len({got for _, got, _ in answers}) == 1:
        return "; yours is the same at every world size: the traffic per rank depends on n"
    hints = {factor_hint(float(got), float(want)) for n, got, want in answers if want}
    return hints.pop() if len(hints) == 1 else ""


def expect_traffic_at(allreduce_traffic, nbytes: int, cases: list[tuple[int, float]]) -> None:
    """allreduce_traffic(nbytes, n) for each (n, bytes each rank sends), asked for all before judging any."""
    answers = []
    for world_size, want in cases:
        got = allreduce_traffic(nbytes, world_size)
        expect_type(got, (int, float), f"allreduce_traffic({nbytes}, {world_size})")
        answers.append((world_size, got, want))
    wrong = [(n, got, want) for n, got, want in answers if abs(got - want) > 1e-9 * max(1.0, want)]
    if wrong:
        n, got, want = wrong[0]
        fail(f"allreduce_traffic({nbytes}, {n}) returned {got!r}; each rank should send {want:g} bytes"
             f"{_traffic_hint(answers)}")


@ALLREDUCE_TRAFFIC.check
def traffic_literals(allreduce_traffic):
    """2(n-1)/n of the buffer per rank: 1 GB over 2, 4 and 8 ranks"""
    expect_traffic_at(allreduce_traffic, 10**9, [(2, 1.0e9), (4, 1.5e9), (8, 1.75e9)])


@ALLREDUCE_TRAFFIC.check
def a_single_rank_sends_nothing(allreduce_traffic):
    """a world of 1 sends 0 bytes"""
    expect_traffic(allreduce_traffic, 4096, 1, 0.0)


# ---------------------------------------------------------------- zero_memory

ZERO_KEYS = ("params", "grads", "optimizer_state", "total")
_SHARDED_FROM = {"optimizer_state": 1, "grads": 2, "params": 3}  # the first ZeRO stage that shards each
_LABELS = {"params": "parameters", "grads": "gradients", "optimizer_state": "optimizer state"}


def _exact(x: float) -> str:
    """A number as Python writes it: an int in full, a float with every digit it needs to be told apart (repr)."""
    return repr(int(x)) if type(x) is int else repr(float(x))


def shown_pair(got: float, want: float) -> tuple[str, str]:
    """`got` and `want` for a message: short (:g) where that tells them apart, else exactly (a miss of 0.4 bytes
    in 241 million shows as 241481234 and 241481234.4, not as 2.41481e+08 twice)."""
    short = f"{got:g}", f"{want:g}"
    return short if short[0] != short[1] else (_exact(got), _exact(want))


def expect_zero(zero_memory, num_params: int, world_size: int, stage: int, want: dict[str, float],
                nbytes: tuple[int, int, int] | None = None) -> None:
    """Keys, numbers, and each value within 1e-9 of `want`; a miss names the stage's rule for that key."""
    extra = "" if nbytes is None else ", param_bytes={}, grad_bytes={}, optimizer_bytes={}".format(*nbytes)
    what = f"zero_memory({num_params:_}, {world_size}, stage={stage}{extra})"
    got = zero_memory(num_params, world_size, stage) if nbytes is None else \
        zero_memory(num_params, world_size, stage, *nbytes)
    expect_type(got, dict, what)
    expect_equal(sorted(got), sorted(ZERO_KEYS), f"{what}'s keys")
    per = dict(zip(("params", "grads", "optimizer_state"), nbytes or (2, 2, 12)))
    for key in ZERO_KEYS:
        value = got[key]
        expect_type(value, (int, float), f"{what}[{key!r}]")
        if abs(value - want[key]) <= 1e-9 * max(1.0, abs(want[key])):
            continue
        got_shown, want_shown = shown_pair(value, want[key])
        if key == "total":
            fail(f"{what}['total'] is {got_shown} bytes; expected {want_shown}, the sum of the other three")
        n, sharded = world_size, stage >= _SHARDED_FROM[key]
        full = want[key] * (n if sharded else 1)
        rule = (f"stage {stage} shards the {_LABELS[key]}, so each of the {n} ranks keeps 1/{n} of them" if sharded
                else f"stage {stage} does not shard the {_LABELS[key]}: every rank keeps all of them")
        close = lambda a, b: abs(a - b) <= 1e-9 * max(1.0, abs(b))  # noqa: E731
        default = {"params": 2, "grads": 2, "optimizer_state": 12}[key]
        if nbytes is not None and per[key] != default and close(value * per[key], want[key] * default):
            hint = f"; yours counts {default} bytes per parameter, the default: use the {per[key]} passed"
        elif sharded and n > 2 and close(value * (n - 1), full):
            hint = f"; yours is the whole divided by {n - 1}: {n} ranks hold {n} shards, not {n - 1}"
        elif sharded and close(value, full):
            hint = "; yours is a full copy"
        elif sharded and math.isfinite(value) and value == int(value) and abs(value - want[key]) < 1:
            hint = (f"; yours is rounded to a whole number of bytes: divide by {n} with /, not //, and keep the "
                    "float (padding the shards to equal sizes is ignored here)")
        elif not sharded and close(value, full / n):
            hint = f"; yours is a 1/{n} shard"
        elif nbytes is None and key == "optimizer_state":
            hint = ("; mixed-precision Adam keeps 12 bytes per parameter: an fp32 master copy of the weights (4) "
                    "and two fp32 moments (4 + 4)")
        else:
            hint = f" ({per[key]} bytes per parameter){factor_hint(float(value), float(want[key]))}"
        fail(f"{what}[{key!r}] is {got_shown} bytes per rank; expected {want_shown}: {rule}{hint}")


@ZERO_MEMORY.check
def plain_ddp_replicates(zero_memory):
    """stage 0 (plain DDP): every rank holds 2 + 2 + 12 = 16 bytes per parameter, whatever the world size"""
    want = {"params": 2e9, "grads": 2e9, "optimizer_state": 12e9, "total": 16e9}
    for world in (1, 4):
        expect_zero(zero_memory, 10**9, world, 0, want)


@ZERO_MEMORY.check
def stages_one_and_two(zero_memory):
    """stage 1 shards only the optimizer state (fp32 master weights and both moments); stage 2 the gradients too"""
    expect_zero(zero_memory, 10**9, 4, 1, {"params": 2e9, "grads": 2e9, "optimizer_state": 3e9, "total": 7e9})
    expect_zero(zero_memory, 10**9, 4, 2, {"params": 2e9, "grads": 0.5e9, "optimizer_state": 3e9, "total": 5.5e9})


@ZERO_MEMORY.check
def stage_three_is_ddp_over_n(zero_memory):
    """stage 3 (FSDP) shards everything: each value is stage 0's divided by the world size (8 ranks here)"""
    expect_zero(zero_memory, 10**9, 8, 3, {"params": 0.25e9, "grads": 0.25e9, "optimizer_state": 1.5e9,
                                          "total": 2e9})


@ZERO_MEMORY.check
def seven_billion_on_two_gpus(zero_memory):
    """7B parameters on two 80 GB GPUs: 112 GB per rank under plain DDP, 56 GB under stage 3"""
    expect_zero(zero_memory, 7 * 10**9, 2, 0, {"params": 14e9, "grads": 14e9, "optimizer_state": 84e9,
                                              "total": 112e9})
    expect_zero(zero_memory, 7 * 10**9, 2, 3, {"params": 7e9, "grads": 7e9, "optimizer_state": 42e9, "total": 56e9})


@ZERO_MEMORY.check
def other_byte_counts(zero_memory):
    """fp32 Adam (4, 4 and 8 bytes per parameter, as measured in this notebook) over 4 ranks at stage 1"""
    expect_zero(zero_memory, 1000, 4, 1, {"params": 4000, "grads": 4000, "optimizer_state": 2000, "total": 10000},
                nbytes=(4, 4, 8))


@ZERO_MEMORY.check
def unknown_stage(zero_memory):
    """a stage other than 0, 1, 2, 3 raises ValueError"""
    for stage in (4, -1):
        expect_raises(ValueError, lambda: zero_memory(1000, 2, stage), f"zero_memory(1000, 2, stage={stage})")


# ---------------------------------------------------------------- shard_indices

class _Sized(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def sampler_indices(num_samples: int, rank: int, world_size: int, shuffle: bool, seed: int, epoch: int,
                    drop_last: bool) -> list[int]:
    """What torch's own DistributedSampler yields (the reference)."""
    sampler = _DistributedSampler(_Sized(num_samples), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                  drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


def expect_shard(shard_indices, num_samples: int, rank: int, world_size: int, shuffle: bool = False, seed: int = 0,
                 epoch: int = 0, drop_last: bool = False) -> None:
    want = sampler_indices(num_samples, rank, world_size, shuffle, seed, epoch, drop_last)
    what = (f"shard_indices({num_samples}, rank={rank}, world_size={world_size}, shuffle={shuffle}, seed={seed}, "
            f"epoch={epoch}, drop_last={drop_last})")
    got = shard_indices(num_samples, rank, world_size, shuffle=shuffle, seed=seed, epoch=epoch, drop_last=drop_last)
    expect_type(got, list, what)
    expect(all(type(i) is int for i in got), f"{what} should hold Python ints, got {describe(got)}")
    if got != want:
        shown = f"{got[:12]}{' ...' if len(got) > 12 else ''}"
        fail(f"{what} returned {shown} ({len(got)} indices); DistributedSampler gives {want[:12]}"
             f"{' ...' if len(want) > 12 else ''} ({len(want)} indices)")


@SHARD_INDICES.check
def in_order_and_padded(shard_indices):
    """no shuffle: rank r takes every world_size-th index from r, padded from the start to equal length"""
    for rank in range(3):
        expect_shard(shard_indices, 10, rank, 3)


@SHARD_INDICES.check
def drop_last_trims(shard_indices):
    """drop_last=True drops the tail instead of padding"""
    for rank in range(3):
        expect_shard(shard_indices, 10, rank, 3, drop_last=True)


@SHARD_INDICES.check
def shuffled_by_seed_and_epoch(shard_indices):
    """shuffle=True permutes with a generator seeded by seed + epoch, the same on every rank"""
    for rank in range(2):
        for epoch in (0, 1):
            expect_shard(shard_indices, 9, rank, 2, shuffle=True, seed=7, epoch=epoch)


@SHARD_INDICES.check
def padding_repeats_the_data(shard_indices):
    """2 samples over 5 ranks, 1 over 4: the padding repeats the list as many times as it takes"""
    for rank in range(5):
        expect_shard(shard_indices, 2, rank, 5)
    for rank in range(4):
        expect_shard(shard_indices, 1, rank, 4, shuffle=True, seed=1)


# ---------------------------------------------------------------- average_gradients

SPEC = [["Linear", 4, 3], ["Tanh"], ["Linear", 3, 2]]


def expect_multiple(after: Any, want: torch.Tensor, world_size: int, what: str) -> None:
    """When a gradient came back a constant multiple of the average, say which multiple (n x: the sum)."""
    if not isinstance(after, torch.Tensor) or after.shape != want.shape or not after.is_floating_point():
        return
    norm = float((want.double() ** 2).sum())
    if norm == 0.0:
        return
    k = float((after.double() * want.double()).sum()) / norm
    if abs(k - 1) < 1e-3 or not bool(_isclose(after.double(), k * want.double(), rtol=1e-5, atol=1e-6).all()):
        return
    if world_size > 1 and abs(k - world_size) < 1e-3 * world_size:
        fail(f"{what} is {world_size}x the average over the {world_size} ranks, i.e. their sum: divide the "
             "all-reduced gradient by dist.get_world_size()")
    fail(f"{what} is {k:.3g}x the average over the {world_size} ranks: all-reduce with SUM, then divide by "
         f"dist.get_world_size() ({world_size} here)")


def expect_not_own(after: Any, own: torch.Tensor, world_size: int, what: str) -> None:
    """A gradient that came back a multiple of this rank's own (x 1: untouched) took nothing from the other ranks."""
    if world_size == 1 or own.numel() < 2 or not isinstance(after, torch.Tensor) or after.shape != own.shape or \
            not after.is_floating_point():
        return
    norm = float((own.double() ** 2).sum())
    k = float((after.double() * own.double()).sum()) / norm if norm else 0.0
    if not bool(_isclose(after.double(), k * own.double(), rtol=1e-5, atol=1e-6).all()):
        return
    mine = "this rank's own gradient" if abs(k - 1) < 1e-6 else f"{k:.3g}x this rank's own gradient"
    fail(f"{what} is {mine}, with nothing of the other ranks' gradients, which differ from it: all-reduce the "
         "gradients themselves with SUM, so that the other ranks' gradients are added in, then divide by "
         "dist.get_world_size()")


def expect_average(average_gradients, world_size: int, seed: int, frozen: bool = False) -> None:
    """In a simulated world each rank (a thread) holds gradients of its own batch; every rank must end with their
    average, which only an all-reduce of the gradients themselves can bring."""
    out = run_scenario(scenarios.average_in_fake_world, average_gradients, SPEC, world_size, seed, frozen)
    what = f"average_gradients(model) with a world of {world_size}"
    if out["error"]:
        fail(f"{what}: {out['error']}")
    if out["unwaited"]:
        fail(f"{what}: {out['unwaited']} of its {out['async']} all-reduces started with async_op=True were never "
             "waited on: the sum lands in the tensor only once work.wait() has returned; wait on every work before "
             "dividing")
    if out["raced"]:
        fail(f"{what}: {out['raced']} tensor(s) changed between dist.all_reduce(..., async_op=True) and work.wait(): "
             "the all-reduce reads its tensor while it runs, so in a real run it races with that change; divide "
             "after wait() has returned")
    if out["params_reduced"]:
        fail(f"{what} all-reduced the parameters themselves (p or p.data), not their gradients: all-reduce each "
             "p.grad, then divide it by dist.get_world_size()")
    before = out["before"]
    for rank, after in enumerate(out["after"]):
        for name, own in before[rank].items():
            got, where = after[name], f"{what}: rank {rank}'s gradient of {name}"
            if own is None:
                expect(got is None, f"{what}: parameter {name} had no gradient and must keep none")
                continue
            want = sum(b[name].double() for b in before) / world_size
            expect_multiple(got, want, world_size, where)
            expect_not_own(got, own, world_size, where)
            expect_tensor(got, want.to(own.dtype), f"{where} (the average of the {world_size} ranks' gradients)")
    expect(out["params_unchanged"], f"{what} changed the parameters themselves; average only the gradients")


@AVERAGE_GRADIENTS.check
def two_ranks_average(average_gradients):
    """with 2 ranks every gradient becomes the mean of both ranks' gradients"""
    expect_average(average_gradients, 2, seed=1)


@AVERAGE_GRADIENTS.check
def world_size_from_the_group(average_gradients):
    """the world size comes from the process group (3 ranks here), not a constant"""
    expect_average(average_gradients, 3, seed=2)


@AVERAGE_GRADIENTS.check
def no_gradient_stays_none(average_gradients):
    """a parameter whose .grad is None (frozen) keeps none; the others are averaged (2 ranks)"""
    expect_average(average_gradients, 2, seed=5, frozen=True)


# ---------------------------------------------------------------- ddp_train
#
# The worker runs in processes of its own; grader/exercises/ddp_judge.py judges what the models toy_model built
# there recorded: the rows each rank's forward received (sharding), the step each rank took (averaging), and
# rank 0's final state. The three public checks judge one launch.

PUBLIC_RUN = {"world_size": 2, "steps": 3, "lr": 0.1, "seed": 0}
_SHARING = ("each_rank_its_own_rows", "gradients_averaged_before_each_step", "two_processes_equal_one")
_shared: dict[str, Any] = {}


def shared_run(ddp_train: Any, check: str) -> dict[str, Any]:
    """The public run: the first check to ask launches it, each of the others reads it once (a check that has
    read it already launches anew: the student changed the worker and checks again)."""
    entry = _shared.get("run")
    if entry is None or entry["fn"] is not ddp_train or check not in entry["pending"]:
        try:
            outcome: tuple[bool, Any] = (True, recorded_run(ddp_train, **PUBLIC_RUN))
        except BaseException as e:  # a stub, a rank's error, a timeout: the same verdict for every check
            outcome = (False, e)
        entry = {"fn": ddp_train, "pending": set(_SHARING), "outcome": outcome}
        _shared["run"] = entry
    entry["pending"].discard(check)
    if not entry["pending"]:
        del _shared["run"]
    ok, value = entry["outcome"]
    if not ok:
        raise value
    return value


@DDP_TRAIN.check(timeout=60)  # a launch takes seconds (tens on a busy 2-core machine); a hang ends as a timeout
def each_rank_its_own_rows(ddp_train):
    """2 gloo processes: at every step rank r's forward gets its own 8 of the 16 rows (disjoint, together all 16)"""
    expect_sharded(shared_run(ddp_train, "each_rank_its_own_rows"))


@DDP_TRAIN.check(timeout=60)  # the same run as the check above (it launches only when run alone)
def gradients_averaged_before_each_step(ddp_train):
    """every rank starts from toy_model(seed) and steps with the average of both ranks' gradients, not its own"""
    expect_averaged(shared_run(ddp_train, "gradients_averaged_before_each_step"))


@DDP_TRAIN.check(timeout=60)
def two_processes_equal_one(ddp_train):
    """2 gloo processes end with the parameters of one process trained on the full batch (within 1e-6)"""
    expect_same_as_one_process(shared_run(ddp_train, "two_processes_equal_one"))


if set(_SHARING) != {c.name for c in DDP_TRAIN.public_checks()}:
    raise RuntimeError("every public ddp_train check must be named in _SHARING (they share one launch)")


# ---------------------------------------------------------------- pipeline_bubble

def expect_bubble(pipeline_bubble, stages: int, microbatches: int, want: float) -> None:
    """pipeline_bubble(p, m) is `want`; a miss says which common formula it matches."""
    what = f"pipeline_bubble({stages}, {microbatches})"
    got = call(pipeline_bubble, stages, microbatches, what=what)
    expect_type(got, (int, float), what)
    if abs(got - want) <= 1e-12:
        return
    p, m = stages, microbatches
    if abs(got - (p - 1) / m) <= 1e-12:
        hint = ("; yours is (p - 1)/m, the idle time over the compute time (as the Megatron-LM paper writes it): "
                "the exercise asks for the idle share of the whole step, idle over idle + compute")
    elif p + m > 1 and abs(got - (p - 1) / (m + p)) <= 1e-12:
        hint = "; yours is (p - 1)/(m + p): the step lasts m + p - 1 slots, not m + p"
    else:
        hint = factor_hint(float(got), want)
    fail(f"{what} returned {got!r}; with {p} stage{'s' * (p != 1)} and {m} micro-batch{'es' * (m != 1)} each stage "
         f"is idle {want:.6g} of the step{hint}")


@PIPELINE_BUBBLE.check
def bubble_literals(pipeline_bubble):
    """(p - 1)/(m + p - 1) of the step: 2 stages and 1 micro-batch idle half of it, 4 stages and 8 micro-batches 3/11"""
    expect_bubble(pipeline_bubble, 2, 1, 0.5)
    expect_bubble(pipeline_bubble, 4, 8, 3 / 11)
    expect_bubble(pipeline_bubble, 2, 4, 0.2)


@PIPELINE_BUBBLE.check
def one_stage_waits_for_nobody(pipeline_bubble):
    """a single stage is never idle, however many micro-batches"""
    for m in (1, 7):
        expect_bubble(pipeline_bubble, 1, m, 0.0)


@PIPELINE_BUBBLE.check
def micro_batches_shrink_it(pipeline_bubble):
    """8 stages: 7/8 of the step idle with 1 micro-batch, 7/1031 with 1024"""
    expect_bubble(pipeline_bubble, 8, 1, 7 / 8)
    expect_bubble(pipeline_bubble, 8, 1024, 7 / 1031)


@PIPELINE_BUBBLE.check
def nothing_to_pipeline(pipeline_bubble):
    """no stage or no micro-batch raises ValueError"""
    for p, m in ((0, 4), (4, 0), (-1, 2)):
        expect_raises(ValueError, lambda: pipeline_bubble(p, m), f"pipeline_bubble({p}, {m})")


# ---------------------------------------------------------------- parallel_layout

LAYOUTS = ("dp", "fsdp", "tp")
LAYOUT_KEYS = ("memory", "fits", "comm_bytes", "compute_bound_tokens")
# 7B parameters (32 layers of width 4096) on 8 GPUs of 80 GB, 989.5 TFLOP/s (H100 SXM, dense bf16), 4096 tokens each
SEVEN_B = {"num_params": 7e9, "layers": 32, "d_model": 4096, "world_size": 8, "tokens": 4096, "memory_bytes": 80e9,
           "flop_per_sec": 989.5e12}
NVLINK, INFINIBAND = 450e9, 50e9  # bytes/s each way: NVLink 4 (900 GB/s both ways together), one 400 Gb/s NIC
_RULES = {
    ("dp", "memory"): "plain data parallelism keeps the whole training state on every rank: 16 bytes per parameter",
    ("fsdp", "memory"): "FSDP shards the whole training state: 16 bytes per parameter over the world size",
    ("tp", "memory"): "tensor parallelism splits every weight matrix, and with it its gradient and optimizer "
                      "state: 16 bytes per parameter over the world size",
    ("dp", "comm_bytes"): "DDP all-reduces the bf16 gradients once per step: 2(n - 1)/n x 2 bytes x parameters",
    ("fsdp", "comm_bytes"): "FSDP all-gathers the bf16 parameters twice (forward and backward) and reduce-scatters "
                            "the bf16 gradients: 3(n - 1)/n x 2 bytes x parameters",
    ("tp", "comm_bytes"): "tensor parallelism all-reduces the (tokens x d_model) bf16 activations 4 times per layer "
                          "(2 in the forward, 2 in the backward), 2(n - 1)/n of them each time",
    ("dp", "compute_bound_tokens"): "compute 6 x parameters x tokens FLOPs per device against the DDP traffic",
    ("fsdp", "compute_bound_tokens"): "compute 6 x parameters x tokens FLOPs per device against FSDP's traffic",
    ("tp", "compute_bound_tokens"): "compute (6 x parameters x tokens / n FLOPs) and traffic both grow with the "
                                    "tokens: either every batch is compute-bound (0) or none is (math.inf)",
}


def layout_of(parallel_layout, case: dict[str, float], link: float) -> tuple[str, dict[str, dict[str, Any]]]:
    """Call parallel_layout on `case` over a link of `link` bytes/s; the call as text and its checked shape."""
    args = dict(case, link_bytes_per_sec=link)
    what = "parallel_layout({})".format(", ".join(f"{k}={v:g}" for k, v in args.items()))
    got = call(lambda: parallel_layout(**args), what=what)
    expect_type(got, dict, what)
    expect_equal(sorted(got), sorted(LAYOUTS), f"{what}'s layouts")
    for layout in LAYOUTS:
        expect_type(got[layout], dict, f"{what}[{layout!r}]")
        expect_equal(sorted(got[layout]), sorted(LAYOUT_KEYS), f"{what}[{layout!r}]'s keys")
    return what, got


def expect_layout_values(what: str, got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]]) -> None:
    """Each value of `want` (layout -> key -> value) within 1e-9 relative; a miss names that layout's rule."""
    for layout, values in want.items():
        for key, value in values.items():
            have = got[layout][key]
            if key == "fits":
                expect(have is value, f"{what}[{layout!r}]['fits'] is {have!r}, expected {value}: the training "
                                      "state per rank against the device's memory_bytes")
                continue
            expect_type(have, (int, float), f"{what}[{layout!r}][{key!r}]")
            if value in (0.0, math.inf):
                ok = have == value
            else:
                ok = abs(have - value) <= 1e-9 * abs(value)
            if not ok:
                fail(f"{what}[{layout!r}][{key!r}] is {have:g}; expected {value:g}: {_RULES[layout, key]}"
                     f"{factor_hint(float(have), float(value)) if value not in (0.0, math.inf) else ''}")


@PARALLEL_LAYOUT.check
def memory_per_rank(parallel_layout):
    """7B parameters on 8 GPUs of 80 GB: plain DP keeps 112 GB per rank (does not fit), FSDP and TP 14 GB"""
    what, got = layout_of(parallel_layout, SEVEN_B, NVLINK)
    expect_layout_values(what, got, {"dp": {"memory": 112e9, "fits": False}, "fsdp": {"memory": 14e9, "fits": True},
                                     "tp": {"memory": 14e9, "fits": True}})


@PARALLEL_LAYOUT.check
def communication_per_step(parallel_layout):
    """bytes each rank sends per step: DP 24.5 GB, FSDP 1.5x that, TP 7.5 GB at 4096 tokens (it grows with them)"""
    what, got = layout_of(parallel_layout, SEVEN_B, NVLINK)
    tp = 7_516_192_768.0
    expect_layout_values(what, got, {"dp": {"comm_bytes": 24.5e9}, "fsdp": {"comm_bytes": 36.75e9},
                                     "tp": {"comm_bytes": tp}})
    what, got = layout_of(parallel_layout, dict(SEVEN_B, tokens=8192), NVLINK)
    expect_layout_values(what, got, {"dp": {"comm_bytes": 24.5e9}, "tp": {"comm_bytes": 2 * tp}})


@PARALLEL_LAYOUT.check
def compute_bound_batch(parallel_layout):
    """NVLink (450 GB/s): DP compute-bound from 1283 tokens per device, FSDP 1924, TP any; 50 GB/s: TP none"""
    what, got = layout_of(parallel_layout, SEVEN_B, NVLINK)
    expect_layout_values(what, got, {"dp": {"compute_bound_tokens": 1282.6851851851852},
                                     "fsdp": {"compute_bound_tokens": 1924.0277777777778},
                                     "tp": {"compute_bound_tokens": 0.0}})
    what, got = layout_of(parallel_layout, SEVEN_B, INFINIBAND)
    expect_layout_values(what, got, {"dp": {"compute_bound_tokens": 11544.166666666666},
                                     "tp": {"compute_bound_tokens": math.inf}})


@PARALLEL_LAYOUT.check
def one_device_sends_nothing(parallel_layout):
    """a world of 1: the whole state on the device, nothing sent, compute-bound at any batch"""
    what, got = layout_of(parallel_layout, dict(SEVEN_B, num_params=1e9, world_size=1), NVLINK)
    expect_layout_values(what, got, {layout: {"memory": 16e9, "fits": True, "comm_bytes": 0.0,
                                              "compute_bound_tokens": 0.0} for layout in LAYOUTS})
