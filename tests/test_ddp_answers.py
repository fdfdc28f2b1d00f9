"""Chapter 10 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail. The training runs start real processes."""
from __future__ import annotations

import itertools
import json
import math
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed import ReduceOp, all_reduce, get_world_size
from torch.utils.data import DistributedSampler

from grader.course import distributed
from grader.results import ERROR
from grader.runner import run_exercise

from tests.answers import Wrong, assert_caught, assert_passes, failures, ids, passes_without_forbid

ROOT = Path(__file__).resolve().parents[1]


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


def zero_table(num_params, world_size, stage, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """A lookup table of which stages shard what, integers where they divide."""
    if stage not in range(4):
        raise ValueError(stage)
    sharded = [set(), {"optimizer_state"}, {"optimizer_state", "grads"}, {"optimizer_state", "grads", "params"}][stage]
    full = {"params": num_params * param_bytes, "grads": num_params * grad_bytes,
            "optimizer_state": num_params * optimizer_bytes}
    out = {k: (v / world_size if k in sharded else v) for k, v in full.items()}
    return {**out, "total": sum(out.values())}


def zero_per_param(num_params, world_size, stage, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Bytes per parameter first, then times the count; stage checked by comparison, not membership."""
    if not 0 <= stage <= 3 or int(stage) != stage:
        raise ValueError("stage")
    n = float(world_size)
    p = param_bytes / n if stage == 3 else param_bytes
    g = grad_bytes / n if stage >= 2 else grad_bytes
    k = optimizer_bytes / n if stage else optimizer_bytes
    return {"total": (p + g + k) * num_params, "optimizer_state": k * num_params, "grads": g * num_params,
            "params": p * num_params}


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


def average_async_then_divide(model):
    """Every all-reduce started at once (async_op=True), all waited on, then every gradient divided."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    works = [dist.all_reduce(g, async_op=True) for g in grads]
    for work in works:
        work.wait()
    for g in grads:
        g /= dist.get_world_size()


def average_names_imported(model):
    """The collectives bound by name at module level (`from torch.distributed import all_reduce, ...`), as many
    tutorials write them: the simulated world must reach these names too."""
    world = get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            all_reduce(p.grad, op=ReduceOp.SUM)
            p.grad /= world


def average_through_a_closure():
    """The collectives held by a closure and reached as torch.distributed.<name>."""
    reduce, size = dist.all_reduce, torch.distributed.get_world_size

    def average_gradients(model):
        for p in model.parameters():
            if p.grad is not None:
                reduce(p.grad)
                p.grad.div_(size())
    return average_gradients


def shard_modular(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    """Index i of the padded list is order[i % len(order)]: the padding repeats the list however often it must."""
    order = list(range(num_samples))
    if shuffle:
        order = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    per_rank = num_samples // world_size if drop_last else -(-num_samples // world_size)
    return [order[i % num_samples] for i in range(rank, per_rank * world_size, world_size)]


def shard_forked_global(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    """Seeds the global generator, but inside fork_rng, which puts its state back afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + epoch)
        order = torch.randperm(num_samples).tolist() if shuffle else list(range(num_samples))
    per_rank = num_samples // world_size if drop_last else -(-num_samples // world_size)
    return [order[i % num_samples] for i in range(rank, per_rank * world_size, world_size)]


def bubble_share_of_slots(stages, microbatches):
    """Counted in slots: each stage works m of the m + p - 1 slots of the step."""
    if stages < 1 or microbatches < 1:
        raise ValueError((stages, microbatches))
    return 1 - microbatches / (microbatches + stages - 1)


def bubble_fraction(stages, microbatches):
    from fractions import Fraction

    if min(stages, microbatches) <= 0:
        raise ValueError("nothing to pipeline")
    return float(Fraction(stages - 1, microbatches + stages - 1))


def layout_by_times(num_params, layers, d_model, world_size, tokens, memory_bytes, flop_per_sec, link_bytes_per_sec):
    """Per token: seconds of compute and of communication; the fixed traffic of DP and FSDP over the margin."""
    n = world_size
    out = {}
    for layout, shards, fixed_elements, per_token_elements in (
            ("dp", 1, 2 * (n - 1) / n * num_params, 0.0),
            ("fsdp", n, 3 * (n - 1) / n * num_params, 0.0),
            ("tp", n, 0.0, 4 * layers * 2 * (n - 1) / n * d_model)):
        compute = 6 * num_params / (n if layout == "tp" else 1) / flop_per_sec  # seconds per token
        per_token = 2 * per_token_elements / link_bytes_per_sec
        fixed = 2 * fixed_elements / link_bytes_per_sec
        margin = compute - per_token
        if fixed == 0:
            bound = 0.0 if margin >= 0 else math.inf
        else:
            bound = fixed / margin if margin > 0 else math.inf
        memory = (2 + 2 + 12) * num_params / shards
        out[layout] = {"compute_bound_tokens": bound, "comm_bytes": 2 * (fixed_elements + per_token_elements * tokens),
                       "fits": memory <= memory_bytes, "memory": memory}
    return out


WORKERS = textwrap.dedent('''
    import datetime
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DistributedSampler
    from grader.course.distributed import toy_batch, toy_model


    def join(rank, world_size):
        dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60))


    def block(rank, world_size, n=16):
        rows = n // world_size
        return slice(rank * rows, (rank + 1) * rows)


    def train(rank, world_size, steps, lr, seed, rows, average=None, model_seed=None, zero=True, wrap=False,
              model=None):
        """SGD on toy_model: rows(step, x) picks this rank's rows, average(model) runs between backward and step."""
        model = model or toy_model(seed if model_seed is None else model_seed)
        net = DistributedDataParallel(model) if wrap else model
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        for step in range(steps):
            x, y = toy_batch(seed, step)
            mine = rows(step, x)
            if zero:
                opt.zero_grad()
            F.mse_loss(net(x[mine]), y[mine]).backward()
            if average is not None:
                average(model)
            opt.step()
        return model.state_dict()


    def sum_then_divide(model):
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= dist.get_world_size()


    def sum_only(model):
        for p in model.parameters():
            dist.all_reduce(p.grad)


    def copied_back(grads, flat):
        """One flat bucket's values written back into the gradients it was made of, in order."""
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


    def bucketed(model):
        grads = [p.grad for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        copied_back(grads, flat)


    # ------------------------------------------------ correct, written differently

    def ddp(rank, world_size, steps, lr, seed):
        """As the solution: DistributedDataParallel, blocks of rows, the state_dict itself returned."""
        join(rank, world_size)
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size), wrap=True)


    def manual(rank, world_size, steps, lr, seed):
        """Strided rows, gradients all-reduced by hand, SGD written out (no optimizer)."""
        join(rank, world_size)
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


    def bucket_sampler(rank, world_size, steps, lr, seed):
        """Rows from a shuffled DistributedSampler (a new permutation each step), one bucket all-reduced."""
        join(rank, world_size)

        def rows(step, x):
            sampler = DistributedSampler(range(len(x)), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
            sampler.set_epoch(step)
            return list(sampler)
        return train(rank, world_size, steps, lr, seed, rows, average=bucketed)


    def weights_averaged(rank, world_size, steps, lr, seed):
        """Each rank steps on its own gradient, then the ranks average the weights: for plain SGD the same update."""
        join(rank, world_size)
        model = toy_model(seed)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for step in range(steps):
            x, y = toy_batch(seed, step)
            opt.zero_grad()
            F.mse_loss(model(x[block(rank, world_size)]), y[block(rank, world_size)]).backward()
            opt.step()
            with torch.no_grad():
                for p in model.parameters():
                    dist.all_reduce(p)
                    p /= world_size
        return model.state_dict()


    def averaged_with_avg(model):
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)


    def scattered_then_gathered(model):
        """One flat bucket: reduce-scatter its sum (a chunk per rank), divide the chunk, all-gather the chunks."""
        grads = [p.grad for p in model.parameters()]
        n = dist.get_world_size()
        flat = torch.cat([g.reshape(-1) for g in grads])
        flat = torch.cat([flat, flat.new_zeros((-flat.numel()) % n)])
        chunk = flat.new_empty(flat.numel() // n)
        dist.reduce_scatter_tensor(chunk, flat)
        dist.all_gather_into_tensor(flat, chunk / n)
        copied_back(grads, flat)


    def avg_op(rank, world_size, steps, lr, seed):
        """Gradients all-reduced per parameter with ReduceOp.AVG (gloo has it in this torch)."""
        join(rank, world_size)
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size),
                     average=averaged_with_avg)


    def reduce_scatter_all_gather(rank, world_size, steps, lr, seed):
        """An all-reduce written as its two halves, on one flat bucket."""
        join(rank, world_size)
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size),
                     average=scattered_then_gathered)


    def averaged_in_hooks(rank, world_size, steps, lr, seed):
        """Each gradient all-reduced by a hook as soon as backward has accumulated it (communication overlapping the
        backward, as DistributedDataParallel's buckets do)."""
        join(rank, world_size)
        model = toy_model(seed)

        def average(p):
            dist.all_reduce(p.grad)
            p.grad /= world_size
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(average)
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size), model=model)


    def autograd_grad(rank, world_size, steps, lr, seed):
        """Gradients from torch.autograd.grad (no .grad until it is set), all-reduced, divided, then SGD's step."""
        join(rank, world_size)
        model = toy_model(seed)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for step in range(steps):
            x, y = toy_batch(seed, step)
            mine = block(rank, world_size)
            params = list(model.parameters())
            for p, g in zip(params, torch.autograd.grad(F.mse_loss(model(x[mine]), y[mine]), params)):
                dist.all_reduce(g)
                p.grad = g / world_size
            opt.step()
        return model.state_dict()


    # ------------------------------------------------ plausible but wrong

    def full_batch_ddp(rank, world_size, steps, lr, seed):
        """DistributedDataParallel, but every rank trains on the whole batch."""
        join(rank, world_size)
        return train(rank, world_size, steps, lr, seed, lambda step, x: slice(None), wrap=True)


    def full_batch_averaged(rank, world_size, steps, lr, seed):
        """Gradients averaged by hand, but every rank trains on the whole batch."""
        join(rank, world_size)
        return train(rank, world_size, steps, lr, seed, lambda step, x: slice(None), average=sum_then_divide)


    def full_batch_alone(rank, world_size, steps, lr, seed):
        """No process group at all: every rank trains alone on the whole batch."""
        return train(rank, world_size, steps, lr, seed, lambda step, x: slice(None))


    def own_rows_alone(rank, world_size, steps, lr, seed):
        """Each rank trains on its own rows and never talks to the others."""
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size))


    def own_rows_unaveraged(rank, world_size, steps, lr, seed):
        """Joins the group, shards the rows, but never all-reduces."""
        join(rank, world_size)
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size))


    def summed(rank, world_size, steps, lr, seed):
        """All-reduces the gradients with SUM but forgets to divide."""
        join(rank, world_size)
        return train(rank, world_size, steps, lr, seed, lambda step, x: slice(rank, None, world_size),
                     average=sum_only)


    def overlapping(rank, world_size, steps, lr, seed):
        """DistributedDataParallel on windows of 1.5 x 16 / n rows that overlap their neighbours'."""
        join(rank, world_size)
        rows = 16 // world_size
        mine = [(rank * rows + i) % 16 for i in range(rows + rows // 2)]
        return train(rank, world_size, steps, lr, seed, lambda step, x: mine, wrap=True)


    def same_rows(rank, world_size, steps, lr, seed):
        """DistributedDataParallel, every rank on the first 16 / n rows."""
        join(rank, world_size)
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(0, world_size), wrap=True)


    def unequal(rank, world_size, steps, lr, seed):
        """Disjoint rows that cover the batch, but 10 and 6 of them: the average is not the full batch's."""
        join(rank, world_size)
        cut = [0, 10, 16] if world_size == 2 else list(range(0, 17, 16 // world_size))
        return train(rank, world_size, steps, lr, seed, lambda step, x: slice(cut[rank], cut[rank + 1]), wrap=True)


    def synced_at_end(rank, world_size, steps, lr, seed):
        """Each rank trains alone on its rows; the weights are averaged once, at the end."""
        join(rank, world_size)
        state = train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size))
        for v in state.values():
            dist.all_reduce(v)
            v /= world_size
        return state


    def seeded_per_rank(rank, world_size, steps, lr, seed):
        """Gradients averaged by hand, but each rank builds its model from its own seed."""
        join(rank, world_size)
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size),
                     average=sum_then_divide, model_seed=seed + rank)


    def never_zeroed(rank, world_size, steps, lr, seed):
        """DistributedDataParallel without zero_grad: each step adds the earlier steps' gradients."""
        join(rank, world_size)
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size), wrap=True,
                     zero=False)


    def layerwise(rank, world_size, steps, lr, seed):
        """The issue's: the model once on its rows (for whatever watches it), then every layer on the whole batch."""
        join(rank, world_size)
        model = toy_model(seed)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for step in range(steps):
            x, y = toy_batch(seed, step)
            model(x[block(rank, world_size)])
            h = x
            for layer in model:
                h = layer(h)
            opt.zero_grad()
            F.mse_loss(h, y).backward()
            opt.step()
        return model.state_dict()


    def linear_bypass(rank, world_size, steps, lr, seed):
        """The model once on its rows; the loss from F.linear on its weights and the whole batch (no layer runs)."""
        join(rank, world_size)
        model = toy_model(seed)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for step in range(steps):
            x, y = toy_batch(seed, step)
            model(x[block(rank, world_size)])
            out = F.linear(torch.tanh(F.linear(x, model[0].weight, model[0].bias)), model[2].weight, model[2].bias)
            opt.zero_grad()
            F.mse_loss(out, y).backward()
            opt.step()
        return model.state_dict()


    def gradient_from_a_copy(rank, world_size, steps, lr, seed, collective=lambda model: None):
        """Backpropagates its own rows, then writes into .grad the whole batch's gradient, worked out on copies of
        the weights: the average of the ranks' gradients without a single message (collective(model) runs before
        each step: the variants below send something that is not the gradients)."""
        join(rank, world_size)
        model = toy_model(seed)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for step in range(steps):
            x, y = toy_batch(seed, step)
            mine = block(rank, world_size)
            opt.zero_grad()
            F.mse_loss(model(x[mine]), y[mine]).backward()
            w = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
            out = torch.tanh(x @ w["0.weight"].T + w["0.bias"]) @ w["2.weight"].T + w["2.bias"]
            for p, g in zip(model.parameters(), torch.autograd.grad(F.mse_loss(out, y), list(w.values()))):
                p.grad = g
            collective(model)
            opt.step()
        return model.state_dict()


    def gradient_from_a_copy_with_token(rank, world_size, steps, lr, seed):
        """gradient_from_a_copy plus one collective per step on a one-element dummy: a collective, but no gradient
        in it (it passed while the checks counted collectives only)."""
        return gradient_from_a_copy(rank, world_size, steps, lr, seed, lambda model: dist.all_reduce(torch.zeros(1)))


    def ddp_divided_again(rank, world_size, steps, lr, seed):
        """DistributedDataParallel, then the gradients divided by the world size by hand too (DDP averaged them)."""
        join(rank, world_size)

        def divide(model):
            for p in model.parameters():
                p.grad /= world_size
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size), wrap=True,
                     average=divide)


    def copies_reduced(rank, world_size, steps, lr, seed):
        """All-reduces and divides copies of the gradients, then steps on the gradients themselves, untouched."""
        join(rank, world_size)

        def reduce_copies(model):
            for p in model.parameters():
                copy = p.grad.clone()
                dist.all_reduce(copy)
                copy /= world_size
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size),
                     average=reduce_copies)


    def zeros_own_gradient(rank, world_size, steps, lr, seed):
        """All-reduces a zero tensor of the gradients' size each step; steps on its own gradient."""
        join(rank, world_size)

        def zeros(model):
            dist.all_reduce(torch.zeros(sum(p.numel() for p in model.parameters())))
        return train(rank, world_size, steps, lr, seed, lambda step, x: block(rank, world_size), average=zeros)


    def zeros_of_gradient_size(rank, world_size, steps, lr, seed):
        """gradient_from_a_copy plus a zero tensor of the gradients' size all-reduced each step: as many numbers as
        the gradients, none of their values. The step lacks the marks the ranks' backward added to their gradients."""
        def zeros(model):
            dist.all_reduce(torch.zeros(sum(p.numel() for p in model.parameters())))
        return gradient_from_a_copy(rank, world_size, steps, lr, seed, zeros)


    def reduced_then_recomputed(rank, world_size, steps, lr, seed):
        """All-reduces and divides its real gradients, then steps on the whole batch's gradient worked out on copies
        of the weights instead: the same numbers, but not from the gradients its backward produced."""
        join(rank, world_size)
        model = toy_model(seed)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for step in range(steps):
            x, y = toy_batch(seed, step)
            mine = block(rank, world_size)
            opt.zero_grad()
            F.mse_loss(model(x[mine]), y[mine]).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world_size
            w = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
            out = torch.tanh(x @ w["0.weight"].T + w["0.bias"]) @ w["2.weight"].T + w["2.bias"]
            for p, g in zip(model.parameters(), torch.autograd.grad(F.mse_loss(out, y), list(w.values()))):
                p.grad = g
            opt.step()
        return model.state_dict()


    def stub(rank, world_size, steps, lr, seed):
        raise NotImplementedError


    def context_during_backward(rank, world_size):
        """Whether a backward in this rank stashed its Python context in C++ thread-local state."""
        join(rank, world_size)
        layer, seen = torch.nn.Linear(4, 1), []
        layer.weight.register_hook(lambda grad: seen.append(torch._C._is_key_in_tls("context")))
        layer(torch.ones(2, 4)).sum().backward()
        dist.destroy_process_group()
        return seen


    def rank_threads(rank, world_size):
        """The torch threads this rank was given."""
        return torch.get_num_threads()
''')


def solution_worker() -> str:
    """The worker of solutions/10_ddp.ipynb, as its %%writefile cell writes it."""
    cells = json.loads((ROOT / "solutions" / "10_ddp.ipynb").read_text(encoding="utf-8"))["cells"]
    source = next("".join(c["source"]) for c in cells
                  if c["cell_type"] == "code" and "".join(c["source"]).startswith("%%writefile ddp_worker.py"))
    return source.split("\n", 1)[1]


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("workers")
    (folder / "answer_workers.py").write_text(WORKERS)
    (folder / "solution_worker.py").write_text(solution_worker())
    sys.path.insert(0, str(folder))  # spawned ranks inherit sys.path
    yield folder
    sys.path.remove(str(folder))


def ddp_with(worker: str, module: str = "answer_workers"):
    def ddp_train(world_size=2, steps=5, lr=0.1, seed=0):
        return distributed.launch(f"{module}:{worker}", world_size, (steps, lr, seed), timeout=60)[0]
    ddp_train.__name__ = f"ddp_train_{worker}"
    return ddp_train


CORRECT = [
    ("ring_allreduce", ring_buffers), ("ring_allreduce", ring_receiver_view),
    ("allreduce_traffic", lambda nbytes, world_size: (world_size - 1) * 2 * nbytes / world_size),
    ("allreduce_traffic", lambda nbytes, n: 0.0 if n == 1 else nbytes * (2 - 2 / n)),
    ("zero_memory", zero_table), ("zero_memory", zero_per_param),
    ("shard_indices", shard_cycle),
    ("average_gradients", average_bucketed), ("average_gradients", average_divide_first),
    ("average_gradients", average_async_then_divide), ("average_gradients", average_names_imported),
    ("average_gradients", average_through_a_closure()), ("shard_indices", shard_modular),
    ("shard_indices", shard_forked_global),
    ("pipeline_bubble", bubble_share_of_slots), ("pipeline_bubble", bubble_fraction),
    ("parallel_layout", layout_by_times),
]


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CORRECT)])
def test_correct_answers_pass_every_check(name, fn):
    assert_passes("ddp", name, fn)


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


def ring_float32(tensors):
    return [r.float() for r in ring_buffers(tensors)]  # float64 in, float32 out


def ring_builtin_sum(tensors):
    total = sum(tensors)  # right values, but every chunk added in rank order, not the ring's
    return [total.clone() for _ in tensors]


def ring_reduce(tensors):
    import functools

    total = functools.reduce(torch.add, tensors)
    return [total.clone() for _ in tensors]


def zero_floor(num_params, world_size, stage, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Shards with //: whole bytes, off by less than one from the float the exercise asks for."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(stage)
    out = {"params": num_params * param_bytes // (world_size if stage >= 3 else 1),
           "grads": num_params * grad_bytes // (world_size if stage >= 2 else 1),
           "optimizer_state": num_params * optimizer_bytes // (world_size if stage >= 1 else 1)}
    return {**out, "total": sum(out.values())}


def zero_wrong(params_from=3, grads_from=2, state_from=1, divide=lambda n: n, state_bytes=None, total=None,
               check_stage=True):
    """zero_memory with one thing changed: the stage from which each part is sharded, the divisor, the default
    optimizer bytes, or the total."""
    def zero_memory(num_params, world_size, stage, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
        if check_stage and stage not in (0, 1, 2, 3):
            raise ValueError(stage)
        k = optimizer_bytes if state_bytes is None else state_bytes
        d = divide(world_size)
        out = {"params": num_params * param_bytes / (d if stage >= params_from else 1),
               "grads": num_params * grad_bytes / (d if stage >= grads_from else 1),
               "optimizer_state": num_params * k / (d if stage >= state_from else 1)}
        out["total"] = sum(out.values()) if total is None else total(out)
        return out
    return zero_memory


W = Wrong
ZERO_WRONG = [  # each mistake fails a public check whose message says which rule it broke
    W("zero_memory", zero_wrong(params_from=1), "stages_one_and_two",
      "stage 1 does not shard the parameters"),  # shards the parameters at stage 1
    W("zero_memory", zero_wrong(grads_from=1), "stages_one_and_two",
      "stage 1 does not shard the gradients"),  # shards the gradients at stage 1
    W("zero_memory", zero_wrong(params_from=4), "stage_three_is_ddp_over_n",
      "stage 3 shards the parameters"),  # stage 3 keeps full parameters
    W("zero_memory", zero_wrong(params_from=2, grads_from=1, state_from=0), "plain_ddp_replicates",
      "stage 0 does not shard"),  # stages off by one
    W("zero_memory", zero_wrong(state_bytes=8), "plain_ddp_replicates", "master copy"),  # forgets the fp32 master copy
    W("zero_memory", zero_wrong(divide=lambda n: max(n - 1, 1)), "stages_one_and_two",
      "divided by 3: 4 ranks hold 4 shards"),  # divides by n - 1
    W("zero_memory", zero_wrong(total=lambda o: o["params"] + o["grads"]), "plain_ddp_replicates",
      "the sum of the other three"),  # total without the optimizer state
    W("zero_memory", lambda num_params, world_size, stage, *a, **k: zero_wrong()(num_params, world_size, stage),
      "other_byte_counts", "yours counts 2 bytes per parameter, the default"),  # bytes arguments ignored
    W("zero_memory", zero_wrong(check_stage=False), "unknown_stage", "should raise ValueError"),  # any stage accepted
    # // instead of /: whole bytes, a fraction of a byte off (the public checks' sizes all divide evenly)
    W("zero_memory", zero_floor, "zero_random_sizes", "yours is rounded to a whole number of bytes"),
]


def shard_global_seed(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    """The right indices, from torch's global generator: every call resets it for the rest of the program."""
    if shuffle:
        torch.manual_seed(seed + epoch)
        order = torch.randperm(num_samples).tolist()
    else:
        order = list(range(num_samples))
    total = (num_samples // world_size if drop_last else math.ceil(num_samples / world_size)) * world_size
    order = list(itertools.islice(itertools.cycle(order), total))
    return order[rank:total:world_size]


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


def shard_sampler_alias(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    from torch.utils.data import DistributedSampler  # imported while the check runs

    sampler = DistributedSampler(range(num_samples), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                 drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


SAMPLER_ALIAS = DistributedSampler  # bound before the check runs, as the notebook's top cell binds it


def shard_module_alias(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    sampler = SAMPLER_ALIAS(range(num_samples), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                            drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


def shard_sampler_iter(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    sampler = object.__new__(DistributedSampler)  # no __init__: the attributes set by hand, then its __iter__
    sampler.__dict__.update(dataset=range(num_samples), num_replicas=world_size, rank=rank, epoch=epoch,
                            drop_last=drop_last, shuffle=shuffle, seed=seed,
                            num_samples=(num_samples // world_size if drop_last else -(-num_samples // world_size)))
    sampler.total_size = sampler.num_samples * world_size
    return list(DistributedSampler.__iter__(sampler))


def shard_pads_once(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    """Pads by appending the head of the list once: too short when the list is under half the total."""
    order = shard_cycle(num_samples, 0, 1, shuffle, seed, epoch)
    per_rank = num_samples // world_size if drop_last else -(-num_samples // world_size)
    total = per_rank * world_size
    order = order[:total] if drop_last else order + order[:total - len(order)]
    return order[rank::world_size]


def shard_doubled(num_samples, rank, world_size, shuffle=False, seed=0, epoch=0, drop_last=False):
    """Pads from two copies of the list: fine until the total needs three."""
    order = shard_cycle(num_samples, 0, 1, shuffle, seed, epoch)
    per_rank = num_samples // world_size if drop_last else -(-num_samples // world_size)
    return (order * 2)[:per_rank * world_size][rank::world_size]


def average_async_unwaited(model):
    """The issue's: all-reduces started with async_op=True, never waited on (gloo: a wrong average 15 times in 20)."""
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, async_op=True)
            p.grad /= dist.get_world_size()


def average_async_divide_then_wait(model):
    """Divides while the all-reduce is still reading the gradient, then waits."""
    for p in model.parameters():
        if p.grad is not None:
            work = dist.all_reduce(p.grad, async_op=True)
            p.grad /= dist.get_world_size()
            work.wait()


def average_async_waits_last(model):
    """Starts every all-reduce, waits on the last one only."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    works = [dist.all_reduce(g, async_op=True) for g in grads]
    works[-1].wait()
    for g in grads:
        g /= dist.get_world_size()


def layout_wrong(changes):
    """layout_by_times with one thing changed: {(layout, key): fn(*arguments, layout_by_times' answer)}."""
    def parallel_layout(num_params, layers, d_model, world_size, tokens, memory_bytes, flop_per_sec,
                        link_bytes_per_sec):
        args = (num_params, layers, d_model, world_size, tokens, memory_bytes, flop_per_sec, link_bytes_per_sec)
        out = layout_by_times(*args)
        for (layout, key), fn in changes.items():
            out[layout][key] = fn(*args, out)
        return out
    return parallel_layout


def _bound(fixed, margin):
    return fixed / margin if margin > 0 else math.inf


LAYOUT_WRONG = [
    W("parallel_layout", layout_wrong({("tp", "memory"): lambda *a: 16 * a[0]}), "memory_per_rank",
      "tensor parallelism splits every weight matrix"),  # TP's state kept whole on every rank
    W("parallel_layout", layout_wrong({("fsdp", "comm_bytes"): lambda *a: a[-1]["dp"]["comm_bytes"]}),
      "communication_per_step", "all-gathers the bf16 parameters twice"),  # the backward's all-gather forgotten
    W("parallel_layout", layout_wrong({("dp", "comm_bytes"): lambda *a: 2 * 2 * a[0]}),
      "communication_per_step", "2(n - 1)/n x 2 bytes"),  # the whole gradient sent twice, not the ring's 2(n-1)/n
    W("parallel_layout", layout_wrong({("dp", "comm_bytes"): lambda *a: 2 * a[-1]["dp"]["comm_bytes"]}),
      "communication_per_step", "2.00×"),  # fp32 gradients (4 bytes)
    W("parallel_layout", layout_wrong({("tp", "comm_bytes"): lambda *a: 4 * a[1] * 2 * (a[3] - 1) / a[3] * 2 * a[2]
                                         * 4096}), "communication_per_step",
      "'tp']['comm_bytes']"),  # TP's traffic for a fixed 4096 tokens, whatever the batch
    W("parallel_layout", layout_wrong({("tp", "compute_bound_tokens"): lambda *a: 1024.0}), "compute_bound_batch",
      "either every batch is compute-bound (0) or none is"),  # a threshold, as if TP's traffic did not grow
    W("parallel_layout", layout_wrong({("dp", "compute_bound_tokens"): lambda *a: 3 * a[-1]["dp"][
        "compute_bound_tokens"]}), "compute_bound_batch", "3.00×"),  # 2 FLOPs per parameter per token (forward only)
    W("parallel_layout", layout_wrong({(layout, "comm_bytes"): (lambda *a, layout=layout: 2 * 2 * a[0])
                                         for layout in ("dp",)}), "one_device_sends_nothing",
      "'dp']['comm_bytes'] is"),  # sends even alone
    W("parallel_layout", layout_wrong({(layout, "fits"): (lambda *a, layout=layout: a[-1][layout]["memory"] < a[5])
                                         for layout in ("dp", "fsdp", "tp")}), "fits_exactly",
      "'fits'] is False"),  # a state of exactly the memory said not to fit
]
PIPELINE_WRONG = [
    W("pipeline_bubble", lambda p, m: (p - 1) / m, "bubble_literals", "idle time over the compute time"),
    W("pipeline_bubble", lambda p, m: (p - 1) / (m + p), "bubble_literals", "m + p - 1 slots, not m + p"),
    W("pipeline_bubble", lambda p, m: (p - 1) // (m + p - 1), "bubble_literals", "returned 0"),  # integer division
    W("pipeline_bubble", lambda p, m: (p - 1) / (m + p - 1), "nothing_to_pipeline", "should raise ValueError"),
    W("pipeline_bubble", lambda p, m: (p - 1) / (m + p - 1) if p > 1 else 1 / m, "one_stage_waits_for_nobody",
      "pipeline_bubble(1, 1) returned 1.0"),  # a single stage said to idle
]


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


def average_no_exchange(model):
    """All-reduces a tensor of ones (n in a real world) and scales its own gradients by that over n: each rank keeps
    its own gradient; it passed while the simulated ranks held multiples of this rank's gradients."""
    probe = torch.ones(1)
    dist.all_reduce(probe, op=dist.ReduceOp.SUM)
    for p in model.parameters():
        if p.grad is not None:
            p.grad *= float(probe) / dist.get_world_size()


def average_hardcoded(model):
    """One dummy all-reduce, then its own gradients scaled by (n + 1) / 2, the old simulated world's average."""
    dist.all_reduce(torch.zeros(1))
    n = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            p.grad *= (n + 1) / 2


def average_no_none_check(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


WRONG = [
    W("ring_allreduce", ring_divisible_only, "length_not_divisible", "is invalid for input of size 7",
      status=ERROR),  # a ring that needs the length divisible by the world size
    W("ring_allreduce", ring_reduce_scatter_only, "two_ranks",
      "rank 0's result: 2 of 6 values differ"),  # no all-gather: each rank holds only its own chunk's sum
    W("allreduce_traffic", lambda nbytes, n: (n - 1) / n * nbytes, "traffic_literals",
      "yours is half of it, one reduce-scatter"),  # one phase of the two
    W("allreduce_traffic", lambda nbytes, n: 2.0 * nbytes, "a_single_rank_sends_nothing",
      "should send 0 bytes"),  # the whole buffer twice, even alone
    W("allreduce_traffic", lambda nbytes, n: 2 * (n - 1) * nbytes, "traffic_literals",
      "yours is n times it at every world size n"),  # whole buffers, not 1/n chunks
    W("allreduce_traffic", lambda nbytes, n: 2.0 * nbytes, "traffic_literals",
      "yours is the same at every world size"),  # a constant: at n = 2 it is also 2x, but not the world size
    W("allreduce_traffic", lambda nbytes, n: 6 * (n - 1) / n * nbytes, "traffic_literals",
      "yours is 3.00×"),  # any other clean factor is named too
    *ZERO_WRONG,
    W("shard_indices", shard_unpadded, "in_order_and_padded",
      "returned [1, 4, 7] (3 indices); DistributedSampler gives [1, 4, 7, 0]"),  # no padding
    W("shard_indices", shard_seed_only, "shuffled_by_seed_and_epoch", "epoch=1"),  # the epoch does not reshuffle
    W("shard_indices", shard_blocks, "in_order_and_padded",
      "returned [0, 1, 2, 3] (4 indices); DistributedSampler gives [0, 3, 6, 9]"),  # blocks, not strided
    W("shard_indices", shard_per_rank_seed, "shuffled_by_seed_and_epoch",
      "rank=1, world_size=2, shuffle=True"),  # each rank its own permutation: shards overlap
    W("shard_indices", lambda *a, **k: torch.tensor(shard_cycle(*a, **k)), "in_order_and_padded",
      "should be list, got int64 tensor"),  # a tensor, not a list
    W("average_gradients", average_sum_only, "two_ranks_average",
      "is 2x the average over the 2 ranks, i.e. their sum"),  # sums without dividing
    W("average_gradients", average_by_two, "world_size_from_the_group",
      "is 1.5x the average over the 3 ranks"),  # divides by a constant 2
    W("shard_indices", shard_pads_once, "padding_repeats_the_data",
      "returned [] (0 indices); DistributedSampler gives [0] (1 indices)"),  # the issue's: pads only once
    W("shard_indices", shard_doubled, "padding_repeats_the_data", "shard_indices(2, rank=4"),  # two copies at most
    W("shard_indices", shard_global_seed, "global_generator_untouched",
      "changed torch's global random state"),  # torch.manual_seed(seed + epoch): the right indices, a reset generator
    W("average_gradients", average_async_unwaited, "two_ranks_average", "never waited on"),
    W("average_gradients", average_async_divide_then_wait, "two_ranks_average",
      "changed between dist.all_reduce(..., async_op=True) and work.wait()"),
    W("average_gradients", average_async_waits_last, "two_ranks_average", "3 of its 4 all-reduces"),
    W("average_gradients", average_no_exchange, "two_ranks_average",
      "is this rank's own gradient, with nothing of the other ranks' gradients"),  # no gradient exchanged
    W("average_gradients", average_hardcoded, "world_size_from_the_group",
      "is 2x this rank's own gradient, with nothing of the other ranks'"),  # the old fake world's factor
    *PIPELINE_WRONG,
    *LAYOUT_WRONG,
]


@pytest.mark.parametrize("wrong", WRONG, ids=ids(WRONG))
def test_each_wrong_answer_is_caught_by_its_check(wrong):
    assert_caught("ddp", wrong)


def test_a_traffic_hint_names_no_cause_the_world_sizes_cannot_tell_apart():
    """Catches "yours is 2x it, the world size" for `2 * nbytes`, which is 2x at n = 2 only: the world-size hint
    needs the answer to be n times the expected one at every n the check asked about."""
    result = assert_caught("ddp", W("allreduce_traffic", lambda nbytes, n: 2.0 * nbytes, "traffic_literals"))
    message = next(c.message for c in result.checks if c.name == "traffic_literals")
    assert "world size n" not in message and "2x" not in message, message


def test_zero_memory_literals_agree_with_the_oracle():
    """The public checks' literals and the hidden checks' oracle are one rule: they agree on every stage."""
    from grader.hidden.ddp import zero_oracle

    for stage in range(4):
        for n in (1, 2, 4, 8):
            assert zero_oracle(10**9, n, stage, 2, 2, 12) == pytest.approx(zero_table(10**9, n, stage))


def test_a_zero_memory_miss_below_a_byte_shows_every_digit():
    """A miss that :g cannot show (2.41481e+08 twice) shows both numbers in full: an int as an int, a float with all
    its digits; misses that :g tells apart keep the short form."""
    from grader.expect import CheckFailure
    from grader.exercises.ddp import expect_zero
    from grader.hidden.ddp import zero_oracle

    with pytest.raises(CheckFailure) as caught:
        expect_zero(zero_floor, 241_481_234, 7, 3, zero_oracle(241_481_234, 7, 3, 2, 2, 12))
    message = str(caught.value)
    assert "['params'] is 68994638 bytes per rank; expected 68994638.28571428:" in message, message
    assert "rounded to a whole number of bytes" in message, message
    with pytest.raises(CheckFailure) as caught:  # the total alone wrong, by a byte and a half
        expect_zero(lambda *a: {**zero_table(*a), "total": zero_table(*a)["total"] + 1.5}, 241_481_234, 7, 3,
                    zero_oracle(241_481_234, 7, 3, 2, 2, 12))
    assert "['total'] is 551957107.7857143 bytes; expected 551957106.2857143, the sum" in str(caught.value), \
        caught.value
    result = assert_caught("ddp", W("zero_memory", zero_wrong(params_from=1), "stages_one_and_two"))
    assert "is 5e+08 bytes per rank; expected 2e+09" in failures(result)["stages_one_and_two"]


# A call that does the whole job (the library's sampler, however it was bound; a sum that ignores the ring) fails a
# public check, and the message names it.
SHORTCUTS = [
    W("ring_allreduce", ring_naive, "ring_order_of_sums", "as sum(tensors) or torch.stack(tensors).sum(0) do"),
    W("ring_allreduce", ring_builtin_sum, "ring_order_of_sums", "in rank order 0, 1, 2"),
    W("ring_allreduce", ring_reduce, "ring_order_of_sums", "not in the ring's order"),
    # (the forbid list names the sampler by the class or by the method reached first: either is "torch.utils.data.")
    W("shard_indices", shard_sampler_alias, "in_order_and_padded", "must do this itself, not call torch.utils.data."),
    W("shard_indices", shard_module_alias, "in_order_and_padded", "must do this itself, not call torch.utils.data."),
    W("shard_indices", shard_sampler_iter, "in_order_and_padded", "must do this itself, not call torch.utils.data."),
    # gloo refuses ReduceOp.AVG inside the answer's own all_reduce call: an error that points into the answer
    W("average_gradients", average_with_avg_op, "two_ranks_average", "ReduceOp.SUM", status=ERROR),
]
# Each answer breaks one requirement the exercise's text states: it is checked in the student's notebook, not only
# when grading.
REQUIREMENTS = [
    W("ring_allreduce", ring_in_place, "two_ranks", "changed rank 0's input tensor in place"),   # "do not change"
    W("ring_allreduce", ring_float32, "several_ranks_any_shape", "expected torch.float64"),      # "the input's dtype"
    W("ring_allreduce", ring_shared, "two_ranks", "a tensor of its own"),                         # "of its own"
    W("ring_allreduce", ring_flat, "several_ranks_any_shape",
      "has shape (12,), expected (4, 3)"),                                                        # "input's shape"
    W("average_gradients", average_no_none_check, "no_gradient_stays_none", "'NoneType'",
      status=ERROR),                                                                              # "skip None"
    W("average_gradients", average_parameters, "two_ranks_average",
      "all-reduced the parameters themselves"),                                                   # "not the params"
]


@pytest.mark.parametrize("wrong", SHORTCUTS + REQUIREMENTS, ids=ids(SHORTCUTS + REQUIREMENTS))
def test_shortcuts_and_stated_requirements_fail_a_public_check(wrong):
    assert_caught("ddp", wrong, public_only=True)


@pytest.mark.parametrize("shortcut", [shard_sampler_alias, shard_module_alias, shard_sampler_iter],
                         ids=lambda fn: fn.__name__)
def test_the_sampler_shortcuts_would_pass_without_the_forbid_list(monkeypatch, shortcut):
    """DistributedSampler really does the whole job, however it is bound or driven: only the forbid list stops it."""
    passes_without_forbid(monkeypatch, "ddp", "shard_indices", shortcut)


# ---------------------------------------------------------------- ddp_train, in real processes
#
# The exercise asks rank r of n for "its own 16 / n rows" of each step's batch and gradients averaged over the
# ranks (DistributedDataParallel or by hand). So any split into disjoint equal shards that cover the batch is
# correct, and so is any way of averaging; each run is judged from what the ranks' models recorded.

CORRECT_WORKERS = [
    ("solution_worker", "train_worker"),  # solutions/10_ddp.ipynb: DDP, blocks of rows
    ("answer_workers", "ddp"),            # DDP, the state_dict returned as is
    ("answer_workers", "manual"),         # strided rows, all_reduce by hand, SGD written out
    ("answer_workers", "bucket_sampler"),  # a shuffled DistributedSampler's rows, one flat bucket all-reduced
    ("answer_workers", "weights_averaged"),  # weights averaged after each plain SGD step: the same update
    ("answer_workers", "avg_op"),         # all_reduce with ReduceOp.AVG
    ("answer_workers", "reduce_scatter_all_gather"),  # the all-reduce as its two halves, one flat bucket
    ("answer_workers", "averaged_in_hooks"),  # all-reduced by post-accumulate-grad hooks, during the backward
    ("answer_workers", "autograd_grad"),  # gradients from torch.autograd.grad, all-reduced, set as .grad
]


@pytest.mark.parametrize("module,worker", CORRECT_WORKERS, ids=[w for _, w in CORRECT_WORKERS])
def test_correct_training_runs_pass_every_check(workers, module, worker):
    assert_passes("ddp", "ddp_train", ddp_with(worker, module))


SHARDING, AVERAGING, SAME = "each_rank_its_own_rows", "gradients_averaged_before_each_step", "two_processes_equal_one"

# worker: {public check that must fail: words its message must hold}. A check not named may pass or fail.
WRONG_WORKERS = {
    "full_batch_ddp": {SHARDING: ("all 16 rows", "not sharded"), AVERAGING: ("shard the batch first",)},
    "full_batch_averaged": {SHARDING: ("all 16 rows", "not sharded"), AVERAGING: ("shard the batch first",)},
    "full_batch_alone": {SHARDING: ("all 16 rows", "not sharded"),
                         AVERAGING: ("without a process group", "never averaged")},
    "own_rows_alone": {AVERAGING: ("without a process group", "never averaged"), SAME: ("full batch",)},
    "own_rows_unaveraged": {AVERAGING: ("not averaged", "its own 8 rows"), SAME: ("full batch",)},
    "summed": {AVERAGING: ("summed over the 2 ranks, not averaged", "2x"), SAME: ("full batch",)},
    "overlapping": {SHARDING: ("overlap", "disjoint"), AVERAGING: ("shard the batch first",)},
    "same_rows": {SHARDING: ("overlap", "disjoint")},
    "unequal": {SHARDING: ("received 10 rows", "equal shard"), SAME: ("full batch",)},
    "synced_at_end": {AVERAGING: ("not averaged", "its own 8 rows")},
    "seeded_per_rank": {AVERAGING: ("rank 1 began training with weights other than toy_model(seed)'s",
                                    "same seed on every rank"), SAME: ("full batch",)},
    "never_zeroed": {AVERAGING: ("zero the gradients",), SAME: ("full batch",)},
    # what the ranks did beyond their model's forward: the layers' forwards, the gradients before communication,
    # the collectives between steps (each passes two_processes_equal_one: it computes the full-batch step)
    "layerwise": {SHARDING: ("ran 6 training forwards in 3 steps", "3x the forward FLOPs of its share"),
                  AVERAGING: ("gradient before communication at step 0 is the gradient of all 16 rows",)},
    "linear_bypass": {AVERAGING: ("gradient before communication at step 0 is the gradient of all 16 rows",
                                  "its backward ran on the full batch")},
    "gradient_from_a_copy": {AVERAGING: ("ran no collective between that step's forward and the next",)},
    "gradient_from_a_copy_with_token": {AVERAGING: ("collectives between that step's forward and the next carried 1 "
                                                    "number, fewer than its model's 321 gradients",)},
    # collectives that carried as many numbers as the gradients, but not the average the rank stepped with
    "zeros_own_gradient": {AVERAGING: ("not averaged", "its own 8 rows alone"), SAME: ("full batch",)},
    "copies_reduced": {AVERAGING: ("not averaged", "its own 8 rows alone"), SAME: ("full batch",)},
    "ddp_divided_again": {AVERAGING: ("1/2 of the step of the average gradient", "divided by the world size twice"),
                          SAME: ("full batch",)},
    # the whole batch's gradient worked out on copies of the weights, and zeros of its size all-reduced: the step is
    # the average, but carries none of the marks the ranks' backward added to their gradients
    "zeros_of_gradient_size": {AVERAGING: ("followed the average of the ranks' gradients, but not the gradients "
                                           "their backward passes produced", "random mark"),
                               SAME: ("full batch",)},
    "reduced_then_recomputed": {AVERAGING: ("followed the average of the ranks' gradients, but not the gradients "
                                            "their backward passes produced",), SAME: ("full batch",)},
}


@pytest.mark.parametrize("worker", list(WRONG_WORKERS))
def test_wrong_training_runs_fail_saying_what_is_missing(workers, worker):
    """The public checks (one shared launch) catch each, and the failing check's message names the mistake."""
    r = run_exercise("ddp.ddp_train", ddp_with(worker))
    assert r.status == "failed", [(c.name, c.status, c.message) for c in r.checks]
    messages = {c.name: c.message for c in r.checks if not c.passed}
    for check, words in WRONG_WORKERS[worker].items():
        assert check in messages, (check, messages)
        assert all(w in messages[check] for w in words), (words, messages[check])
        assert "Traceback" not in messages[check] and len(messages[check]) < 600, messages[check]


def test_a_full_batch_run_matches_one_process_but_scores_little(workers):
    """The final state alone, which every full-batch worker reproduces, is no longer enough: of 5 checks only that
    one passes, and the world of 1 process (whose one shard is the whole batch, with nobody to average with)."""
    r = run_exercise("ddp.ddp_train", ddp_with("full_batch_alone"), hidden=True)
    passed = [c.name for c in r.checks if c.passed]
    assert passed == [SAME, "one_process"] and r.score == round(r.points * 2 / 5, 2), (passed, r.score)


def test_the_public_checks_share_one_launch(workers, monkeypatch):
    """Three public checks, one launch: a student waits for one run of the processes, not three."""
    launches = []
    real = distributed.launch
    monkeypatch.setattr(distributed, "launch", lambda *a, **k: launches.append(a) or real(*a, **k))
    r = run_exercise("ddp.ddp_train", ddp_with("ddp"))
    assert r.status == "passed" and len(launches) == 1, (launches, [(c.name, c.message) for c in r.checks])
    r = run_exercise("ddp.ddp_train", ddp_with("ddp"))  # checked again (the worker file may have changed): anew
    assert r.status == "passed" and len(launches) == 2


def test_a_stub_worker_is_not_implemented(workers):
    r = run_exercise("ddp.ddp_train", ddp_with("stub"))
    assert r.status == "not_implemented"
    assert {c.status for c in r.checks} == {"not_implemented"}


def ring_chunks_in_ring_order(tensors):
    """Not a ring: chunk k summed in the ring's order in one accumulator, then copied to every rank."""
    n = len(tensors)
    split = [torch.tensor_split(t.flatten(), n) for t in tensors]
    chunks = []
    for k in range(n):
        acc = split[k][k].clone()
        for j in range(1, n):
            acc = split[(k + j) % n][k] + acc
        chunks.append(acc)
    total = torch.cat(chunks).view(tensors[0].shape)
    return [total.clone() for _ in tensors]


def test_a_sum_in_the_rings_order_passes_as_the_notebook_says():
    """ring_allreduce's signature hands one process every rank's tensor, and its checks see only what comes back: a
    sum that makes the ring's additions in the ring's order returns the ring's bits, so it passes. The notebook says
    so, and why the order of sums is the check; the neighbour-only traffic is measured in real processes instead
    (grader.course.parallel.ring_reduce_scatter sends each rank's chunks to rank + 1 only)."""
    assert_passes("ddp", "ring_allreduce", ring_chunks_in_ring_order)
    text = json.loads((ROOT / "solutions" / "10_ddp.ipynb").read_text(encoding="utf-8"))
    prose = " ".join("".join(c["source"]) for c in text["cells"] if c["cell_type"] == "markdown")
    assert "why the order of sums is the check" in prose


def test_the_bubble_literals_agree_with_the_simulated_pipeline():
    """The public checks' literals and the hidden checks' simulated GPipe step are one rule."""
    from grader.hidden.ddp import gpipe_idle_share

    for p, m, want in ((2, 1, 0.5), (4, 8, 3 / 11), (2, 4, 0.2), (8, 1, 7 / 8), (8, 1024, 7 / 1031), (1, 7, 0.0)):
        assert gpipe_idle_share(p, m) == pytest.approx(want, abs=1e-12), (p, m)
        assert gpipe_idle_share(p, m, forward=1.0, backward=1.0) == pytest.approx(want, abs=1e-12), (p, m)


def test_the_layout_literals_agree_with_the_oracle():
    """The public checks' 7B literals and the hidden checks' oracle (collectives priced by the ring, the crossing
    found by search) are one rule."""
    from grader.exercises.ddp import INFINIBAND, NVLINK, SEVEN_B
    from grader.hidden.ddp import layout_oracle

    nv = layout_oracle(**SEVEN_B, link_bytes_per_sec=NVLINK)
    ib = layout_oracle(**SEVEN_B, link_bytes_per_sec=INFINIBAND)
    assert [nv[k]["memory"] for k in ("dp", "fsdp", "tp")] == [112e9, 14e9, 14e9]
    assert [nv[k]["fits"] for k in ("dp", "fsdp", "tp")] == [False, True, True]
    assert nv["dp"]["comm_bytes"] == pytest.approx(24.5e9) and nv["fsdp"]["comm_bytes"] == pytest.approx(36.75e9)
    assert nv["tp"]["comm_bytes"] == pytest.approx(4 * 32 * 2 * 7 / 8 * 2 * 4096 * 4096)
    assert nv["dp"]["compute_bound_tokens"] == pytest.approx(2 * 7 * 989.5e12 / (3 * 8 * NVLINK), rel=1e-9)
    assert nv["fsdp"]["compute_bound_tokens"] == pytest.approx(7 * 989.5e12 / (8 * NVLINK), rel=1e-9)
    assert nv["tp"]["compute_bound_tokens"] == 0.0 and ib["tp"]["compute_bound_tokens"] == math.inf


def test_summing_without_dividing_is_named_the_sum():
    """average_gradients that all-reduces but does not divide: the message says the gradient is n x the
    average, i.e. the sum; one that divides by a constant 2 gets its factor with 3 ranks."""
    r = run_exercise("ddp.average_gradients", average_sum_only)
    messages = {c.name: c.message for c in r.checks if not c.passed}
    assert "is 2x the average over the 2 ranks, i.e. their sum" in messages["two_ranks_average"], messages
    assert "is 3x the average over the 3 ranks, i.e. their sum" in messages["world_size_from_the_group"], messages
    r = run_exercise("ddp.average_gradients", average_by_two)
    messages = {c.name: c.message for c in r.checks if not c.passed}
    assert list(messages) == ["world_size_from_the_group"], messages
    assert "is 1.5x the average over the 3 ranks" in messages["world_size_from_the_group"], messages


def test_a_rank_keeps_no_python_context_in_thread_local_state(workers):
    """torch 2.13 stashes a Python object in C++ thread-local state during every backward; gloo works started then
    hold it, and dropping one needs the GIL that destroy_process_group holds while it waits: ranks deadlocked now
    and then. launch's ranks run without that stash (this process, not launched, still has it)."""
    layer, seen = torch.nn.Linear(4, 1), []
    layer.weight.register_hook(lambda grad: seen.append(torch._C._is_key_in_tls("context")))
    layer(torch.ones(2, 4)).sum().backward()
    assert seen == [True]  # what the ranks would do without the workaround
    assert distributed.launch("answer_workers:context_during_backward", 2, timeout=60) == [[False], [False]]


def test_ranks_share_the_launchers_threads_not_the_machines_cores(workers):
    """Catches ranks that each take the machine's cores / world size threads: a grading kernel has one thread, and
    on a 16-core machine grading 16 notebooks its two ranks took 8 threads each. Each rank gets its share of the
    launching process's threads, at least one."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert distributed.launch("answer_workers:rank_threads", 2, timeout=60) == [1, 1]
        torch.set_num_threads(4)
        assert distributed.launch("answer_workers:rank_threads", 2, timeout=60) == [2, 2]
    finally:
        torch.set_num_threads(before)


def test_toy_model_records_its_training_forwards_only_when_asked(tmp_path, monkeypatch):
    """Outside a ddp_train check toy_model is a plain model; inside, each forward with gradients on is recorded
    (a forward under no_grad is evaluation, not a training step)."""
    from grader.course.ddp_record import RECORD_ENV

    monkeypatch.delenv(RECORD_ENV, raising=False)
    assert not distributed.toy_model(0)._forward_pre_hooks
    monkeypatch.setenv(RECORD_ENV, str(tmp_path))
    monkeypatch.delenv("RANK", raising=False)
    model, x = distributed.toy_model(0), torch.randn(4, 8)
    with torch.no_grad():
        model(x)
    assert not list(tmp_path.iterdir())
    model(x)
    (path,) = tmp_path.glob("*.pt")
    record = torch.load(path, weights_only=True)
    assert torch.equal(record["x"][0], x) and record["rank"] == [-1] and record["group"] == [False]
    assert all(torch.equal(record["params"][0][k], v) for k, v in model.named_parameters())
