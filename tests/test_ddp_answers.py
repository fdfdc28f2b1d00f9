"""Chapter 10 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail. The training runs start real processes."""
from __future__ import annotations

import itertools
import math
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from grader import distributed
from grader.runner import run_exercise


# ---------------------------------------------------------------- correct, written differently

def ring_buffers(tensors):
    """Rank-major state copied per step, sends read from the snapshot."""
    n = len(tensors)
    state = [[c.clone() for c in torch.tensor_split(t.reshape(-1), n)] for t in tensors]
    for s in range(n - 1):
        snapshot = [[c.clone() for c in rank] for rank in state]
        for r in range(n):
            k = (r - s) % n
            state[(r + 1) % n][k] = state[(r + 1) % n][k] + snapshot[r][k]
    for s in range(n - 1):
        snapshot = [[c.clone() for c in rank] for rank in state]
        for r in range(n):
            k = (r + 1 - s) % n
            state[(r + 1) % n][k] = snapshot[r][k]
    return [torch.cat(rank).reshape(t.shape).clone() for rank, t in zip(state, tensors)]


def ring_receiver_view(tensors):
    """Written from the receiver's side: rank r receives from r - 1."""
    n = len(tensors)
    bounds = [len(c) for c in torch.tensor_split(torch.empty(tensors[0].numel()), n)]
    starts = [sum(bounds[:k]) for k in range(n)]
    bufs = [t.detach().reshape(-1).clone() for t in tensors]
    for s in range(n - 1):
        incoming = []
        for r in range(n):
            src, k = (r - 1) % n, (r - 1 - s) % n
            incoming.append((r, k, bufs[src][starts[k]:starts[k] + bounds[k]].clone()))
        for r, k, data in incoming:
            bufs[r][starts[k]:starts[k] + bounds[k]] = data + bufs[r][starts[k]:starts[k] + bounds[k]]
    for s in range(n - 1):
        incoming = []
        for r in range(n):
            src, k = (r - 1) % n, (r - s) % n
            incoming.append((r, k, bufs[src][starts[k]:starts[k] + bounds[k]].clone()))
        for r, k, data in incoming:
            bufs[r][starts[k]:starts[k] + bounds[k]] = data
    return [b.view(t.shape) for b, t in zip(bufs, tensors)]


def shard_cycle(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    if shuffle:
        order = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    else:
        order = list(range(num_samples))
    total = (num_samples // world_size if drop_last else math.ceil(num_samples / world_size)) * world_size
    order = list(itertools.islice(itertools.cycle(order), total))
    return [order[i] for i in range(rank, total, world_size)]


def average_bucketed(model):
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True)
    work.wait()
    flat.div_(dist.get_world_size())
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def average_divide_first(model):
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            p.grad.div_(world)
            dist.all_reduce(p.grad)


WORKERS = textwrap.dedent('''
    import datetime
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from grader.distributed import toy_batch, toy_model


    def manual(rank, world_size, steps, lr, seed):
        """Strided rows, gradients averaged by hand."""
        dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60))
        model = toy_model(seed)
        for step in range(steps):
            x, y = toy_batch(seed, step)
            model.zero_grad()
            F.mse_loss(model(x[rank::world_size]), y[rank::world_size]).backward()
            with torch.no_grad():
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p -= lr * p.grad / world_size
        return {k: v.clone() for k, v in model.state_dict().items()}


    def unaveraged(rank, world_size, steps, lr, seed):
        """Each rank trains on its own rows and never talks to the others."""
        model = toy_model(seed)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for step in range(steps):
            x, y = toy_batch(seed, step)
            rows = x.shape[0] // world_size
            opt.zero_grad()
            F.mse_loss(model(x[rank * rows:(rank + 1) * rows]), y[rank * rows:(rank + 1) * rows]).backward()
            opt.step()
        return model.state_dict()


    def summed(rank, world_size, steps, lr, seed):
        """All-reduces the gradients but forgets to divide."""
        dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60))
        model = toy_model(seed)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for step in range(steps):
            x, y = toy_batch(seed, step)
            opt.zero_grad()
            F.mse_loss(model(x[rank::world_size]), y[rank::world_size]).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
        return model.state_dict()


    def stub(rank, world_size, steps, lr, seed):
        raise NotImplementedError
''')


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("workers")
    (folder / "answer_workers.py").write_text(WORKERS)
    sys.path.insert(0, str(folder))  # spawned ranks inherit sys.path
    yield "answer_workers"
    sys.path.remove(str(folder))


def ddp_with(worker: str):
    def ddp_train(world_size=2, steps=5, lr=0.1, seed=0):
        return distributed.launch(f"answer_workers:{worker}", world_size, (steps, lr, seed), timeout=60)[0]
    ddp_train.__name__ = f"ddp_train_{worker}"
    return ddp_train


CORRECT = [
    ("ring_allreduce", ring_buffers), ("ring_allreduce", ring_receiver_view),
    ("allreduce_traffic", lambda nbytes, world_size: (world_size - 1) * 2 * nbytes / world_size),
    ("allreduce_traffic", lambda nbytes, n: 0.0 if n == 1 else nbytes * (2 - 2 / n)),
    ("shard_indices", shard_cycle),
    ("average_gradients", average_bucketed), ("average_gradients", average_divide_first),
]


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CORRECT)])
def test_correct_answers_pass_every_check(name, fn):
    r = run_exercise(f"ddp.{name}", fn, hidden=True)
    failing = [(c.name, c.message) for c in r.checks if not c.passed]
    assert r.status == "passed" and not failing, failing


def test_a_manual_data_parallel_worker_passes(workers):
    r = run_exercise("ddp.ddp_train", ddp_with("manual"), hidden=True)
    assert r.status == "passed", [(c.name, c.message) for c in r.checks]


# ---------------------------------------------------------------- plausible but wrong

def ring_naive(tensors):
    total = torch.stack(tensors).sum(0)
    return [total.clone() for _ in tensors]


def ring_shared(tensors):
    total = torch.stack(tensors).sum(0)
    return [total for _ in tensors]  # one tensor for every rank


def ring_divisible_only(tensors):
    n = len(tensors)
    chunks = [list(t.reshape(n, -1).clone()) for t in tensors]  # breaks unless n divides the length
    for s in range(n - 1):
        sends = [(r, (r - s) % n, chunks[r][(r - s) % n].clone()) for r in range(n)]
        for r, k, d in sends:
            chunks[(r + 1) % n][k] = chunks[(r + 1) % n][k] + d
    for s in range(n - 1):
        sends = [(r, (r + 1 - s) % n, chunks[r][(r + 1 - s) % n].clone()) for r in range(n)]
        for r, k, d in sends:
            chunks[(r + 1) % n][k] = d
    return [torch.cat(c).view(t.shape) for c, t in zip(chunks, tensors)]


def ring_reduce_scatter_only(tensors):
    n = len(tensors)
    chunks = [list(torch.tensor_split(t.flatten().clone(), n)) for t in tensors]
    for s in range(n - 1):
        sends = [(r, (r - s) % n, chunks[r][(r - s) % n].clone()) for r in range(n)]
        for r, k, d in sends:
            chunks[(r + 1) % n][k] = chunks[(r + 1) % n][k] + d
    return [torch.cat(c).view(t.shape) for c, t in zip(chunks, tensors)]


def ring_in_place(tensors):
    total = torch.stack(tensors).sum(0)
    for t in tensors:
        t.copy_(total)  # the inputs are the ranks' memory; they come back changed
    return [t.clone() for t in tensors]


def ring_flat(tensors):
    return [r.flatten() for r in ring_buffers(tensors)]


def shard_unpadded(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    order = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed + epoch)).tolist() \
        if shuffle else list(range(num_samples))
    return order[rank::world_size]


def shard_seed_only(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    return shard_cycle(num_samples, rank, world_size, shuffle, seed, 0, drop_last)


def shard_blocks(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    everything = shard_cycle(num_samples, 0, 1, shuffle, seed, epoch, drop_last)
    per = len(shard_cycle(num_samples, rank, world_size, shuffle, seed, epoch, drop_last))
    padded = list(itertools.islice(itertools.cycle(everything), per * world_size))
    return padded[rank * per:(rank + 1) * per]


def shard_per_rank_seed(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    return shard_cycle(num_samples, rank, world_size, shuffle, seed + epoch + rank, 0, drop_last)


def average_sum_only(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)


def average_by_two(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= 2


def average_with_avg_op(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)


def average_parameters(model):
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p.data)
            p.data /= dist.get_world_size()


def average_no_none_check(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


WRONG = [
    ("ring_allreduce", ring_naive), ("ring_allreduce", ring_shared), ("ring_allreduce", ring_divisible_only),
    ("ring_allreduce", ring_reduce_scatter_only), ("ring_allreduce", ring_in_place), ("ring_allreduce", ring_flat),
    ("allreduce_traffic", lambda nbytes, n: (n - 1) / n * nbytes),
    ("allreduce_traffic", lambda nbytes, n: 2.0 * nbytes),
    ("allreduce_traffic", lambda nbytes, n: 2 * (n - 1) * nbytes),
    ("shard_indices", shard_unpadded), ("shard_indices", shard_seed_only), ("shard_indices", shard_blocks),
    ("shard_indices", shard_per_rank_seed),
    ("shard_indices", lambda *a, **k: torch.tensor(shard_cycle(*a, **k))),
    ("average_gradients", average_sum_only), ("average_gradients", average_by_two),
    ("average_gradients", average_with_avg_op), ("average_gradients", average_parameters),
    ("average_gradients", average_no_none_check),
]


@pytest.mark.parametrize("name,fn", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_plausible_wrong_answers_fail(name, fn):
    r = run_exercise(f"ddp.{name}", fn, hidden=True)
    assert r.status in ("failed", "error") and r.score < r.points


@pytest.mark.parametrize("name,fn", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_wrong_answers_get_a_readable_message(name, fn):
    r = run_exercise(f"ddp.{name}", fn)
    for c in r.checks:
        if not c.passed:
            assert c.message and "Traceback" not in c.message and len(c.message) < 600


def test_public_checks_catch_the_classic_mistakes():
    """Sum without dividing, no padding, a ring that needs divisible lengths, one buffer for all ranks."""
    for name, fn in [("average_gradients", average_sum_only), ("shard_indices", shard_unpadded),
                     ("ring_allreduce", ring_divisible_only), ("ring_allreduce", ring_shared),
                     ("allreduce_traffic", lambda nbytes, n: (n - 1) / n * nbytes)]:
        assert run_exercise(f"ddp.{name}", fn).status != "passed", name


@pytest.mark.parametrize("worker", ["unaveraged", "summed"])
def test_training_runs_that_do_not_average_fail(workers, worker):
    r = run_exercise("ddp.ddp_train", ddp_with(worker))
    assert r.status == "failed", [(c.name, c.message) for c in r.checks]


def test_a_stub_worker_is_not_implemented(workers):
    r = run_exercise("ddp.ddp_train", ddp_with("stub"))
    assert r.status == "not_implemented"
