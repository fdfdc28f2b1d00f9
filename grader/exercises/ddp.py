"""Chapter 10 (ddp): public checks. Hidden checks for the same exercises live in grader/hidden/ddp.py."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from grader.distributed import toy_batch, toy_model
from grader.expect import call, describe, expect, expect_equal, expect_tensor, expect_type, fail
from grader.registry import exercise
from grader.scenario import run_scenario
from grader.scenarios import ddp as scenarios

# The references, bound before any student code runs.
_DistributedSampler = DistributedSampler
_stack, _mse, _sgd = torch.stack, F.mse_loss, torch.optim.SGD

RING_ALLREDUCE = exercise("ddp.ring_allreduce", points=3)
ALLREDUCE_TRAFFIC = exercise("ddp.allreduce_traffic", points=1)
SHARD_INDICES = exercise("ddp.shard_indices", points=2,
                         forbid=("torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"))
AVERAGE_GRADIENTS = exercise("ddp.average_gradients", points=2)
DDP_TRAIN = exercise("ddp.ddp_train", points=3)


# ---------------------------------------------------------------- ring_allreduce

def expect_allreduce(ring_allreduce, tensors: list[torch.Tensor], how: str, exact: bool = False) -> list[torch.Tensor]:
    """Every output is the elementwise sum of all inputs, a tensor of its own, in the inputs' shape and dtype."""
    want = _stack([t.double() for t in tensors]).sum(0).to(tensors[0].dtype)
    what = f"ring_allreduce({how})"
    got = call(ring_allreduce, list(tensors), what=what)
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
    """3 and 4 ranks; 2-D tensors keep their shape"""
    expect_allreduce(ring_allreduce, [torch.randn(4, 3) for _ in range(3)], "3 ranks of shape (4, 3)")
    expect_allreduce(ring_allreduce, [torch.randn(8) for _ in range(4)], "4 ranks of 8 elements")


@RING_ALLREDUCE.check
def length_not_divisible(ring_allreduce):
    """7 elements over 3 ranks, 2 elements over 5 ranks: chunks of unequal (even empty) size"""
    expect_allreduce(ring_allreduce, [torch.randn(7) for _ in range(3)], "3 ranks of 7 elements")
    expect_allreduce(ring_allreduce, [torch.randn(2) for _ in range(5)], "5 ranks of 2 elements")


@RING_ALLREDUCE.check
def one_rank(ring_allreduce):
    """a world of 1: nothing to exchange, the result is a copy"""
    expect_allreduce(ring_allreduce, [torch.arange(5.0)], "1 rank of 5 elements")


# ---------------------------------------------------------------- allreduce_traffic

def expect_traffic(allreduce_traffic, nbytes: int, world_size: int, want: float) -> None:
    got = allreduce_traffic(nbytes, world_size)
    what = f"allreduce_traffic({nbytes}, {world_size})"
    expect_type(got, (int, float), what)
    expect(abs(got - want) <= 1e-9 * max(1.0, want), f"{what} returned {got!r}; each rank should send {want:g} bytes")


@ALLREDUCE_TRAFFIC.check
def traffic_literals(allreduce_traffic):
    """2(n-1)/n of the buffer per rank: 1 GB over 2, 4 and 8 ranks"""
    expect_traffic(allreduce_traffic, 10**9, 2, 1.0e9)
    expect_traffic(allreduce_traffic, 10**9, 4, 1.5e9)
    expect_traffic(allreduce_traffic, 10**9, 8, 1.75e9)


@ALLREDUCE_TRAFFIC.check
def a_single_rank_sends_nothing(allreduce_traffic):
    """a world of 1 sends 0 bytes"""
    expect_traffic(allreduce_traffic, 4096, 1, 0.0)


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


# ---------------------------------------------------------------- average_gradients

SPEC = [["Linear", 4, 3], ["Tanh"], ["Linear", 3, 2]]


def expect_average(average_gradients, world_size: int, seed: int, frozen: bool = False) -> None:
    """In a simulated world, rank k holds (k + 1) times this rank's gradients: the average is known exactly."""
    out = run_scenario(scenarios.average_in_fake_world, average_gradients, SPEC, world_size, seed, frozen)
    what = f"average_gradients(model) with a world of {world_size}"
    if out["error"]:
        fail(f"{what}: {out['error']}")
    factor = sum(range(1, world_size + 1)) / world_size
    for name, before in out["before"].items():
        after = out["after"][name]
        if before is None:
            expect(after is None, f"{what}: parameter {name} had no gradient and must keep none")
            continue
        expect_tensor(after, before * factor, f"{what}: the gradient of {name} (ranks hold 1x, 2x, ... this rank's "
                                              f"gradient, so the average is {factor:g}x)")
    expect(out["params_unchanged"], f"{what} changed the parameters themselves; average only the gradients")


@AVERAGE_GRADIENTS.check
def two_ranks_average(average_gradients):
    """with 2 ranks every gradient becomes the mean of both ranks' gradients"""
    expect_average(average_gradients, 2, seed=1)


@AVERAGE_GRADIENTS.check
def world_size_from_the_group(average_gradients):
    """the world size comes from the process group (3 ranks here), not a constant"""
    expect_average(average_gradients, 3, seed=2)


# ---------------------------------------------------------------- ddp_train

def single_process(steps: int, lr: float, seed: int) -> dict[str, torch.Tensor]:
    """The baseline DDP must reproduce: plain SGD on each step's full batch in this process."""
    model = toy_model(seed)
    opt = _sgd(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = toy_batch(seed, step)
        opt.zero_grad()
        _mse(model(x), y).backward()
        opt.step()
    return {k: v.detach() for k, v in model.state_dict().items()}


def expect_ddp(ddp_train, world_size: int, steps: int, lr: float, seed: int) -> None:
    want = single_process(steps, lr, seed)
    what = f"ddp_train(world_size={world_size}, steps={steps}, lr={lr}, seed={seed})"
    got = ddp_train(world_size=world_size, steps=steps, lr=lr, seed=seed)
    expect_type(got, dict, what)
    expect_equal(sorted(got), sorted(want), f"{what}: the state_dict keys")
    for key, value in want.items():
        expect_tensor(got[key], value, f"{what}: {key} after training, against one process on the full batch",
                      rtol=0, atol=1e-6)


@DDP_TRAIN.check(timeout=30)  # a launch takes a few seconds; a run that hangs ends here as a timeout
def two_processes_equal_one(ddp_train):
    """2 gloo processes end with the parameters of one process trained on the full batch (within 1e-6)"""
    expect_ddp(ddp_train, 2, 3, 0.1, 0)
