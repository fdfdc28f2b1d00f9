"""Chapter 10 (ddp): hidden checks, run only at grading."""
from __future__ import annotations

import torch

from grader.exercises.ddp import (ALLREDUCE_TRAFFIC, AVERAGE_GRADIENTS, DDP_TRAIN, RING_ALLREDUCE, SHARD_INDICES,
                                  ZERO_MEMORY, expect_allreduce, expect_average, expect_shard, expect_traffic,
                                  expect_zero)
from grader.exercises.ddp_judge import expect_ddp
from grader.expect import call, expect_tensor
from grader.inputs import randint


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
