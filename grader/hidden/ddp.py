"""Chapter 10 (ddp): hidden checks, run only at grading."""
from __future__ import annotations

import math

import torch

from grader.exercises.ddp import (ALLREDUCE_TRAFFIC, AVERAGE_GRADIENTS, DDP_TRAIN, LAYOUTS, PARALLEL_LAYOUT,
                                  PIPELINE_BUBBLE, RING_ALLREDUCE, SHARD_INDICES, ZERO_MEMORY, expect_allreduce,
                                  expect_average, expect_bubble, expect_layout_values, expect_shard, expect_traffic,
                                  expect_zero, layout_of)
from grader.exercises.ddp_judge import expect_ddp
from grader.expect import call, expect, expect_tensor
from grader.inputs import randint
from grader.scenario import run_scenario
from grader.scenarios import ddp as scenarios


def reference_ring(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The ring exactly as the exercise specifies it (which rank adds which chunk when), for the order of sums."""
    n = len(tensors)
    chunks = [list(torch.tensor_split(t.flatten().clone(), n)) for t in tensors]
    for step in range(n - 1):  # reduce-scatter: rank r sends chunk (r - step) % n to rank r + 1, which adds it
        sent = [(r, (r - step) % n, chunks[r][(r - step) % n].clone()) for r in range(n)]
        for r, k, data in sent:
            chunks[(r + 1) % n][k] = chunks[(r + 1) % n][k] + data
    for step in range(n - 1):  # all-gather: rank r sends chunk (r + 1 - step) % n to rank r + 1, which keeps it
        sent = [(r, (r + 1 - step) % n, chunks[r][(r + 1 - step) % n].clone()) for r in range(n)]
        for r, k, data in sent:
            chunks[(r + 1) % n][k] = data
    return [torch.cat(c).view(t.shape) for c, t in zip(chunks, tensors)]


@RING_ALLREDUCE.hidden
def random_worlds_and_lengths(ring_allreduce):
    """world sizes 1 to 8, lengths divisible or not (shorter than the world, too), int64 exactly"""
    for _ in range(12):
        n, length = randint(1, 8), randint(1, 20)
        expect_allreduce(ring_allreduce, [torch.randint(-99, 99, (length,)) for _ in range(n)],
                         f"{n} ranks of {length} int64 elements", exact=True)


@RING_ALLREDUCE.hidden
def sums_in_ring_order(ring_allreduce):
    """each chunk is summed in the ring's order (rank k's chunk k first, then k+1, ...), as float32 shows"""
    for n, length in ((3, 7), (4, 9), (5, 5), (8, 11)):
        tensors = [(torch.randn(length) * 10.0 ** torch.randint(-4, 8, (length,))).float() for _ in range(n)]
        want = reference_ring(tensors)
        got = call(ring_allreduce, list(tensors), what=f"ring_allreduce({n} ranks of {length} elements)")
        for rank in range(n):
            expect_tensor(got[rank], want[rank], f"ring_allreduce({n} ranks of {length} float32 elements of mixed "
                          f"magnitudes): rank {rank}'s result, summed in the ring's order", rtol=0, atol=0)


@RING_ALLREDUCE.hidden
def keeps_dtype_and_shape(ring_allreduce):
    """float64 and 3-D inputs come back as float64 of the same shape"""
    expect_allreduce(ring_allreduce, [torch.randn(2, 3, 5, dtype=torch.float64) for _ in range(4)],
                     "4 ranks of float64 (2, 3, 5)")


@ALLREDUCE_TRAFFIC.hidden
def traffic_random(allreduce_traffic):
    """random sizes and world sizes"""
    for _ in range(20):
        nbytes, n = randint(1, 10**9), randint(1, 64)
        expect_traffic(allreduce_traffic, nbytes, n, 2 * (n - 1) / n * nbytes)


def zero_oracle(psi: int, n: int, stage: int, p: float, g: float, k: float) -> dict[str, float]:
    """The ZeRO paper's per-device formulas, written stage by stage (independent of the checks' table)."""
    if stage == 0:
        parts = (p * psi, g * psi, k * psi)
    elif stage == 1:
        parts = (p * psi, g * psi, k * psi / n)
    elif stage == 2:
        parts = (p * psi, g * psi / n, k * psi / n)
    else:
        parts = (p * psi / n, g * psi / n, k * psi / n)
    return {"params": parts[0], "grads": parts[1], "optimizer_state": parts[2], "total": sum(parts)}


@ZERO_MEMORY.hidden
def zero_random_sizes(zero_memory):
    """random parameter counts (not divisible by the world size too), world sizes 1 to 1024, every stage"""
    for _ in range(24):
        psi, n, stage = randint(1, 10**11), randint(1, 1024), randint(0, 3)
        expect_zero(zero_memory, psi, n, stage, zero_oracle(psi, n, stage, 2, 2, 12))
    # a shard of a third of a byte: within 1e-9 of the expected value only as a float (// rounds it off)
    expect_zero(zero_memory, 10**6 + 1, 3, 3, zero_oracle(10**6 + 1, 3, 3, 2, 2, 12))


@ZERO_MEMORY.hidden
def zero_random_byte_counts(zero_memory):
    """random bytes per parameter for weights, gradients and optimizer state (fp32, fp8, SGD's 0 state, ...)"""
    for _ in range(16):
        psi, n, stage = randint(1, 10**10), randint(1, 64), randint(0, 3)
        p, g, k = randint(1, 4), randint(1, 4), randint(0, 16)
        expect_zero(zero_memory, psi, n, stage, zero_oracle(psi, n, stage, p, g, k), nbytes=(p, g, k))


@ZERO_MEMORY.hidden
def zero_world_of_one(zero_memory):
    """a world of 1: every stage keeps everything, as plain training does"""
    for stage in range(4):
        expect_zero(zero_memory, 12345, 1, stage, zero_oracle(12345, 1, 0, 2, 2, 12))


@SHARD_INDICES.hidden
def random_configurations(shard_indices):
    """random sizes, ranks, world sizes, seeds, epochs, shuffle and drop_last"""
    for _ in range(40):
        world = randint(1, 6)
        expect_shard(shard_indices, randint(1, 40), randint(0, world - 1), world, shuffle=bool(randint(0, 1)),
                     seed=randint(0, 100), epoch=randint(0, 5), drop_last=bool(randint(0, 1)))


@SHARD_INDICES.hidden
def fewer_samples_than_ranks(shard_indices):
    """3 samples over 5 ranks: padding repeats the list"""
    for rank in range(5):
        expect_shard(shard_indices, 3, rank, 5)
        expect_shard(shard_indices, 3, rank, 5, shuffle=True, seed=3, epoch=2)


@SHARD_INDICES.hidden
def far_fewer_samples_than_ranks(shard_indices):
    """1 to 3 samples over 7 to 12 ranks, shuffled or not: the list repeated several times over"""
    for _ in range(6):
        world = randint(7, 12)
        num, rank = randint(1, 3), randint(0, world - 1)
        expect_shard(shard_indices, num, rank, world, shuffle=bool(randint(0, 1)), seed=randint(0, 9),
                     epoch=randint(0, 3))


@SHARD_INDICES.hidden
def global_generator_untouched(shard_indices):
    """shuffle=True draws from a torch.Generator of its own: torch's global random state is the same after the call"""
    for num, rank, world, seed, epoch in ((9, 1, 2, 7, 3), (randint(2, 40), 0, randint(1, 4), randint(0, 99), 1)):
        what = (f"shard_indices({num}, rank={rank}, world_size={world}, shuffle=True, seed={seed}, epoch={epoch}, "
                "drop_last=False)")
        out = run_scenario(scenarios.global_rng_after_shuffle, shard_indices, num, rank, world, seed, epoch,
                           randint(10**6, 10**9))
        expect(out["unchanged"], f"{what} changed torch's global random state (torch.get_rng_state()): "
                                 "torch.manual_seed(seed + epoch) resets the generator the rest of the program draws "
                                 "from, on every call. Seed a torch.Generator of its own and pass it to "
                                 "torch.randperm(..., generator=...)")


@AVERAGE_GRADIENTS.hidden
def four_ranks_and_a_frozen_parameter(average_gradients):
    """4 ranks; a parameter without a gradient keeps none"""
    expect_average(average_gradients, 4, seed=3, frozen=True)


@AVERAGE_GRADIENTS.hidden
def one_rank_changes_nothing(average_gradients):
    """a world of 1: the average of one is itself"""
    expect_average(average_gradients, 1, seed=4)


@DDP_TRAIN.hidden(timeout=60)  # as the public checks: a launch can take tens of seconds on a busy machine
def one_process(ddp_train):
    """a world of 1 process: its rank takes all 16 rows and trains as one process does"""
    expect_ddp(ddp_train, 1, 2, 0.2, 5)


@DDP_TRAIN.hidden(timeout=60)  # as the public checks: a launch can take tens of seconds on a busy machine
def other_seed_and_steps(ddp_train):
    """2 processes, another seed, learning rate and more steps: own rows, averaged gradients, one process's result"""
    expect_ddp(ddp_train, 2, 4, 0.05, 11)


def gpipe_idle_share(stages: int, microbatches: int, forward: float = 1.0, backward: float = 2.0) -> float:
    """A GPipe step on a simulated clock: every micro-batch's forward stage by stage, then every backward in reverse
    order, each as soon as its inputs are ready; the idle share of stage 0's step (every stage's is the same)."""
    f_end = [[0.0] * microbatches for _ in range(stages)]
    for s in range(stages):
        for i in range(microbatches):
            ready = max(f_end[s][i - 1] if i else 0.0, f_end[s - 1][i] if s else 0.0)
            f_end[s][i] = ready + forward
    b_end = [[0.0] * microbatches for _ in range(stages)]
    for s in reversed(range(stages)):
        free = f_end[s][-1]
        for i in reversed(range(microbatches)):
            ready = max(free, b_end[s + 1][i] if s + 1 < stages else 0.0)
            b_end[s][i] = free = ready + backward
    step = b_end[0][0]
    return 1 - microbatches * (forward + backward) / step


@PIPELINE_BUBBLE.hidden
def random_pipelines(pipeline_bubble):
    """1 to 16 stages, 1 to 64 micro-batches: the idle share of a GPipe step simulated on a clock"""
    for _ in range(20):
        p, m = randint(1, 16), randint(1, 64)
        expect_bubble(pipeline_bubble, p, m, gpipe_idle_share(p, m))


def _ring(n: int) -> dict[str, float]:
    """Elements each rank sends per element of the buffer, in a ring of n."""
    return {"all-reduce": 2 * (n - 1) / n, "all-gather": (n - 1) / n, "reduce-scatter": (n - 1) / n}


def layout_oracle(num_params: float, layers: int, d_model: int, world_size: int, tokens: float, memory_bytes: float,
                  flop_per_sec: float, link_bytes_per_sec: float) -> dict[str, dict[str, float]]:
    """Each layout's collectives listed and priced by the ring, its compute by 6 FLOPs per parameter per token, and
    the compute-bound batch found by search on the two step times (not by solving the formula)."""
    n, psi = world_size, num_params
    ring = _ring(n)

    def sends(layout: str, t: float) -> list[tuple[str, float]]:
        if layout == "dp":
            return [("all-reduce", 2 * psi)]
        if layout == "fsdp":
            return [("all-gather", 2 * psi), ("all-gather", 2 * psi), ("reduce-scatter", 2 * psi)]
        return [("all-reduce", 2 * t * d_model)] * (4 * layers)

    def comm(layout: str, t: float) -> float:
        return sum(ring[c] * b for c, b in sends(layout, t)) / link_bytes_per_sec

    def compute(layout: str, t: float) -> float:
        return 6 * psi * t / (n if layout == "tp" else 1) / flop_per_sec

    def bound(layout: str) -> float:
        bound_at = lambda t: compute(layout, t) >= comm(layout, t)  # noqa: E731
        if bound_at(1e-9):
            return 0.0
        hi = 1.0
        while not bound_at(hi):
            hi *= 2
            if hi > 1e40:
                return math.inf
        lo = hi / 2 if hi > 1 else 0.0
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if bound_at(mid) else (mid, hi)
        return hi

    memory = {"dp": 16 * psi, "fsdp": 16 * psi / n, "tp": 16 * psi / n}
    return {layout: {"memory": memory[layout], "fits": memory[layout] <= memory_bytes,
                     "comm_bytes": comm(layout, tokens) * link_bytes_per_sec, "compute_bound_tokens": bound(layout)}
            for layout in LAYOUTS}


def _close_enough(want: dict[str, dict[str, float]], got: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The oracle's search ends within a hair of the crossing: where the answer is that close, it is the answer."""
    out = {layout: dict(values) for layout, values in want.items()}
    for layout, values in out.items():
        have, value = got[layout]["compute_bound_tokens"], values["compute_bound_tokens"]
        if isinstance(have, (int, float)) and value not in (0.0, math.inf) and abs(have - value) <= 1e-6 * value:
            values["compute_bound_tokens"] = have
    return out


@PARALLEL_LAYOUT.hidden
def random_models_and_devices(parallel_layout):
    """random models, world sizes, batches, memories, FLOP/s and links, every layout and key"""
    for _ in range(16):
        case = {"num_params": float(randint(1, 2000)) * 1e8, "layers": randint(1, 128),
                "d_model": 128 * randint(1, 128), "world_size": randint(1, 512), "tokens": randint(1, 10**6),
                "memory_bytes": float(randint(8, 200)) * 1e9, "flop_per_sec": float(randint(1, 5000)) * 1e12}
        link = float(randint(1, 1000)) * 1e9
        what, got = layout_of(parallel_layout, case, link)
        expect_layout_values(what, got, _close_enough(layout_oracle(**case, link_bytes_per_sec=link), got))


@PARALLEL_LAYOUT.hidden
def fits_exactly(parallel_layout):
    """a training state of exactly the device's memory fits"""
    case = {"num_params": 5e9, "layers": 24, "d_model": 2048, "world_size": 4, "tokens": 2048,
            "memory_bytes": 20e9, "flop_per_sec": 312e12}
    what, got = layout_of(parallel_layout, case, 300e9)
    expect_layout_values(what, got, {"fsdp": {"fits": True}, "tp": {"fits": True}, "dp": {"fits": False}})
