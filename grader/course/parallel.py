"""Chapter 10's measurements of parallel training in real gloo processes: the bytes each scheme sends, tensor and
pipeline parallelism, and DDP's buckets. Targets for `grader.course.distributed.launch`; each joins its group.

Bytes sent are read from Linux's per-process I/O accounting around the work: `wchar` in /proc/self/io counts every
byte the process handed to a write-like system call, gloo's socket sends included. So they are what the rank
really sent (message headers too), not what a formula says; None where the system keeps no such count.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from grader.course.distributed import _init

__all__ = ["bytes_written", "ring_reduce_scatter", "collective_bytes", "scheme_traffic", "tensor_parallel_mlp",
           "pipeline_bubbles", "bucket_overlap"]


def bytes_written() -> int | None:
    """Bytes this process has written so far, to sockets as to files (Linux's /proc/self/io); None elsewhere."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _sent(work: Callable[[], Any]) -> int | None:
    """Bytes this rank sends while `work()` runs the second time (the first prints any warning, which counts as
    written too), after a barrier (so no earlier message is counted)."""
    work()
    dist.barrier()
    before = bytes_written()
    work()
    after = bytes_written()
    return None if before is None or after is None else after - before


def ring_reduce_scatter(flat: torch.Tensor) -> torch.Tensor:
    """This rank's chunk of the sum of every rank's `flat` (n equal chunks, chunk r for rank r), by section 4's ring:
    n - 1 steps, each sending one chunk to rank + 1 and adding the one received from rank - 1."""
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = [c.clone() for c in flat.chunk(n)]
    for step in range(n - 1):
        send, receive = (rank - step - 1) % n, (rank - step - 2) % n
        incoming = torch.empty_like(chunks[receive])
        for request in (dist.isend(chunks[send], (rank + 1) % n), dist.irecv(incoming, (rank - 1) % n)):
            request.wait()
        chunks[receive] += incoming
    return chunks[rank]


def collective_bytes(rank: int, world_size: int, nbytes: int = 2**20) -> dict[str, int | None]:
    """Bytes this rank sends in one call of each collective on a float32 buffer of `nbytes` (a reduce-scatter's
    input and an all-gather's output are that buffer; a broadcast comes from rank 0)."""
    _init(rank, world_size)
    full = torch.ones(nbytes // 4)
    part = torch.ones(nbytes // 4 // world_size)
    out = {"all_reduce": _sent(lambda: dist.all_reduce(full)),
           "reduce_scatter": _sent(lambda: dist.reduce_scatter_single(part, full)),
           "ring reduce-scatter by send/recv": _sent(lambda: ring_reduce_scatter(full)),
           "all_gather": _sent(lambda: dist.all_gather_single(full, part)),
           "broadcast": _sent(lambda: dist.broadcast(full, src=0))}
    dist.destroy_process_group()
    return out


# ---------------------------------------------------------------- what each sharding scheme sends

def _bias_free(width: int, layers: int) -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank and for every scheme
    return nn.Sequential(*(nn.Linear(width, width, bias=False) for _ in range(layers)))


class _ShardedByHand:
    """ZeRO-2 written out: the gradients reduce-scattered (each rank keeps the sum of its chunk), Adam on this
    rank's chunk of the flat parameters only, then an all-gather of the updated chunks into every rank's model."""

    def __init__(self, model: nn.Module, reduce_scatter: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.params = list(model.parameters())
        self.reduce_scatter = reduce_scatter
        flat = torch.cat([p.detach().flatten() for p in self.params])
        self.shard = flat.chunk(dist.get_world_size())[dist.get_rank()].clone().requires_grad_()
        self.adam = torch.optim.Adam([self.shard], lr=1e-3)

    def zero_grad(self, set_to_none: bool = False) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        flat_grad = torch.cat([p.grad.flatten() for p in self.params])
        self.shard.grad = self.reduce_scatter(flat_grad) / dist.get_world_size()
        self.adam.step()
        flat = torch.empty(flat_grad.numel())
        dist.all_gather_single(flat, self.shard.detach())
        with torch.no_grad():
            for p, new in zip(self.params, flat.split([p.numel() for p in self.params])):
                p.copy_(new.view_as(p))


def _gloo_reduce_scatter(flat: torch.Tensor) -> torch.Tensor:
    mine = torch.empty(flat.numel() // dist.get_world_size())
    dist.reduce_scatter_single(mine, flat)
    return mine


def _fsdp(model: nn.Module, **options: Any) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        fully_shard(layer, mesh=mesh, **options)
    return fully_shard(model, mesh=mesh, **options)


def _local_bytes(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def _schemes() -> dict[str, Callable[[nn.Module], tuple[nn.Module, Any]]]:
    """Each scheme: (the module to call, the optimizer to step) built around a fresh model."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    adam = torch.optim.Adam
    return {
        "DDP": lambda m: (DDP(m), adam(m.parameters(), lr=1e-3)),
        "DDP + ZeroRedundancyOptimizer": lambda m: (DDP(m), ZeroRedundancyOptimizer(m.parameters(), adam, lr=1e-3)),
        "ZeRO-2 by hand, ring reduce-scatter": lambda m: (m, _ShardedByHand(m, ring_reduce_scatter)),
        "ZeRO-2 by hand, gloo reduce_scatter": lambda m: (m, _ShardedByHand(m, _gloo_reduce_scatter)),
        "FSDP2": lambda m: (_fsdp(m), adam(m.parameters(), lr=1e-3)),
        "FSDP2, reshard_after_forward=False": lambda m: (_fsdp(m, reshard_after_forward=False),
                                                         adam(m.parameters(), lr=1e-3)),
        "FSDP2, bf16 MixedPrecisionPolicy": lambda m: (
            _fsdp(m, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)),
            adam(m.parameters(), lr=1e-3)),
    }


def scheme_traffic(rank: int, world_size: int, width: int = 256, layers: int = 4, steps: int = 3) -> dict[str, Any]:
    """For each scheme, the bytes this rank sent in the forward, the backward and the optimizer step of the last of
    `steps` Adam steps (the first ones build DDP's buckets and Adam's state), what layer 0's weight holds on this
    rank when the backward starts, its dtype while it runs, and the largest difference of the final weights from
    DDP's (the same training, sharded differently)."""
    _init(rank, world_size)
    out: dict[str, Any] = {"num_params": width * width * layers}
    finals: dict[str, list[torch.Tensor]] = {}
    g = torch.Generator().manual_seed(rank)  # each rank its own rows
    batches = [torch.randn(8, width, generator=g) for _ in range(steps)]
    for name, build in _schemes().items():
        model = _bias_free(width, layers)
        net, opt = build(model)
        seen: dict[str, Any] = {}
        model[0].register_forward_pre_hook(lambda m, a: seen.update(dtype=str(m.weight.dtype).removeprefix("torch.")))
        for x in batches:
            opt.zero_grad(set_to_none=True)
            dist.barrier()
            marks = [bytes_written()]
            y = net(x)
            y.register_hook(lambda grad: seen.update(at_backward=_local_bytes(model[0].weight)))
            loss = y.float().pow(2).mean()
            marks.append(bytes_written())
            loss.backward()
            marks.append(bytes_written())
            opt.step()
            marks.append(bytes_written())
        sent = None if None in marks else dict(zip(("forward", "backward", "step"), (b - a for a, b in
                                                                                 zip(marks, marks[1:]))))
        out[name] = {"sent": sent, "weight_at_backward": seen["at_backward"], "dtype_in_forward": seen["dtype"],
                     "dtype_at_rest": str(model[0].weight.dtype).removeprefix("torch.")}
        finals[name] = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone()
                        for p in model.parameters()]
    out["max_diff"] = {name: max(float((a.detach().float() - b.detach()).abs().max())
                                 for a, b in zip(finals[name], finals["DDP"]))
                       for name in finals}
    dist.destroy_process_group()
    return out


# ---------------------------------------------------------------- tensor parallelism

class _AllReduceInForward(torch.autograd.Function):
    """Megatron's g: the row-parallel layer's partial outputs are summed over the ranks; the gradient passes as is."""

    @staticmethod
    def forward(ctx: Any, partial: torch.Tensor, counts: dict[str, int]) -> torch.Tensor:
        total = partial.clone()
        dist.all_reduce(total)
        counts["forward"] += 1
        return total

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _AllReduceInBackward(torch.autograd.Function):
    """Megatron's f: the input goes to the column-parallel layer as is; its gradient is summed over the ranks."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, counts: dict[str, int]) -> torch.Tensor:
        ctx.counts = counts
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        total = grad.clone()
        dist.all_reduce(total)
        ctx.counts["backward"] += 1
        return total, None


def _mlp_weights(blocks: int, width: int, hidden: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(hidden, width, generator=g) / width ** 0.5,
             torch.randn(width, hidden, generator=g) / hidden ** 0.5) for _ in range(blocks)]


def tensor_parallel_mlp(rank: int, world_size: int, width: int = 64, hidden: int = 256, rows: int = 16,
                        blocks: int = 2) -> dict[str, Any]:
    """`blocks` MLP blocks x -> gelu(x W1^T) W2^T, each W1 split by rows (column-parallel: each rank computes
    hidden / n of the hidden units) and W2 by columns (row-parallel: each rank's partial output, summed by one
    all-reduce). Against the whole MLP run in this process: the largest difference of the output, of the input's
    gradient and of this rank's weight gradients; the all-reduces counted; the bytes sent in forward and backward."""
    _init(rank, world_size)
    weights = _mlp_weights(blocks, width, hidden)
    x = torch.randn(rows, width, generator=torch.Generator().manual_seed(1))

    full = [(w1.clone().requires_grad_(), w2.clone().requires_grad_()) for w1, w2 in weights]
    x_full = x.clone().requires_grad_()
    h = x_full
    for w1, w2 in full:
        h = F.gelu(h @ w1.T) @ w2.T
    h.pow(2).mean().backward()

    mine = slice(rank * hidden // world_size, (rank + 1) * hidden // world_size)
    shards = [(w1[mine].clone().requires_grad_(), w2[:, mine].clone().requires_grad_()) for w1, w2 in weights]
    counts = {"forward": 0, "backward": 0}
    x_tp = x.clone().requires_grad_()
    dist.barrier()
    start = bytes_written()
    h_tp = x_tp
    for w1, w2 in shards:
        partial = F.gelu(_AllReduceInBackward.apply(h_tp, counts) @ w1.T) @ w2.T
        h_tp = _AllReduceInForward.apply(partial, counts)
    loss = h_tp.pow(2).mean()
    middle = bytes_written()
    loss.backward()
    end = bytes_written()
    grads = max(max(float((a.grad - b.grad[mine]).abs().max()), float((c.grad - d.grad[:, mine]).abs().max()))
                for (a, c), (b, d) in zip(shards, full))
    out = {"output_diff": float((h_tp - h).detach().abs().max()),
           "input_grad_diff": float((x_tp.grad - x_full.grad).abs().max()),
           "weight_grad_diff": grads, "allreduces": counts, "activation_bytes": rows * width * 4,
           "sent": None if None in (start, middle, end) else {"forward": middle - start, "backward": end - middle},
           "weight_bytes": sum(_local_bytes(t) for pair in shards for t in pair)}
    dist.destroy_process_group()
    return out


# ---------------------------------------------------------------- pipeline parallelism

def _stage(width: int, layers: int) -> nn.Module:
    return nn.Sequential(*(m for _ in range(layers) for m in (nn.Linear(width, width), nn.Tanh())))


def _gpipe_step(stage: nn.Module, rank: int, world_size: int, microbatches: int, rows: int, width: int) -> float:
    """One GPipe step: every micro-batch forward, stage by stage, then every backward in reverse; the seconds this
    stage spent computing (the rest of the step it waited for a neighbour)."""
    first, last = rank == 0, rank == world_size - 1
    busy = 0.0
    kept, sends = [], []  # sends go out while the stage computes on (isend): a blocking send would wait for the
    for i in range(microbatches):  # next stage to be done with the previous micro-batch
        x = torch.randn(rows, width) if first else torch.empty(rows, width)
        if not first:
            dist.recv(x, rank - 1)
            x.requires_grad_()
        start = time.perf_counter()
        y = stage(x)
        busy += time.perf_counter() - start
        if not last:
            sends.append(dist.isend(y.detach(), rank + 1))
        kept.append((x, y))
    for x, y in reversed(kept):
        grad = None
        if not last:
            grad = torch.empty_like(y)
            dist.recv(grad, rank + 1)
        start = time.perf_counter()
        (y.pow(2).mean() if last else y).backward(grad)
        busy += time.perf_counter() - start
        if not first:
            sends.append(dist.isend(x.grad, rank - 1))
    for work in sends:
        work.wait()
    return busy


def pipeline_bubbles(rank: int, world_size: int, microbatches: Sequence[int], width: int = 1024, rows: int = 128,
                     layers: int = 2, reps: int = 5) -> dict[int, dict[str, float]]:
    """A pipeline of `world_size` stages (this rank: `layers` Linear + Tanh layers of `width`), trained one GPipe step
    at a time on micro-batches of `rows` rows. For each micro-batch count, of the fastest of `reps` steps (what other
    work on the machine disturbed least; every stage picks the same): its seconds, and this stage's idle share of
    it, 1 - (its compute time) / (the step, from a barrier to the end of the last stage)."""
    _init(rank, world_size)
    torch.manual_seed(rank)
    stage = _stage(width, layers)
    _gpipe_step(stage, rank, world_size, 1, rows, width)  # warm-up
    out = {}
    for m in microbatches:
        steps = []
        for _ in range(reps):
            dist.barrier()
            start = time.perf_counter()
            busy = _gpipe_step(stage, rank, world_size, m, rows, width)
            end = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            dist.all_reduce(end, op=dist.ReduceOp.MAX)  # the step ends when its last stage does
            steps.append((float(end), 1 - busy / float(end)))
        span, idle = min(steps)
        out[m] = {"seconds": span, "idle": idle}
    dist.destroy_process_group()
    return out


# ---------------------------------------------------------------- DDP's buckets

def bucket_overlap(rank: int, world_size: int, width: int = 512, depth: int = 6, rows: int = 32, steps: int = 6,
                   caps: Sequence[float] = (0.25, 25.0)) -> dict[str, Any]:
    """DDP steps of a `depth`-layer MLP with each bucket size in `caps` (MiB): the buckets counted by a communication
    hook, the median step seconds; and the same step with the all-reduce after the whole backward (no_sync, then one
    all-reduce of every gradient flattened: nothing overlapped), and the backward alone (no communication)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    _init(rank, world_size)
    x = torch.randn(rows, width, generator=torch.Generator().manual_seed(rank))

    def build() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(*(m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())))

    def timed(step: Callable[[], None]) -> float:
        times = []
        for i in range(steps + 2):
            dist.barrier()
            start = time.perf_counter()
            step()
            if i >= 2:
                times.append(time.perf_counter() - start)
        return statistics.median(times)

    out: dict[str, Any] = {"grad_bytes": sum(p.numel() * 4 for p in build().parameters()), "caps": {}}
    for cap in caps:
        model = DDP(build(), bucket_cap_mb=cap)
        calls = [0]

        def counting(state, bucket, calls=calls):  # no annotations: DDP checks them against GradBucket
            calls[0] += 1
            return allreduce_hook(state, bucket)

        model.register_comm_hook(dist.group.WORLD, counting)
        for _ in range(2):  # the first backward runs one bucket, then DDP rebuilds them in the order grads came
            calls[0] = 0
            model(x).pow(2).mean().backward()
        buckets = calls[0]
        out["caps"][cap] = {"buckets": buckets, "seconds": timed(lambda: model(x).pow(2).mean().backward())}
    model = DDP(build())
    params = list(model.parameters())

    def after_backward() -> None:
        with model.no_sync():
            model(x).pow(2).mean().backward()
        flat = torch.cat([p.grad.flatten() for p in params])
        dist.all_reduce(flat)

    def local() -> None:
        with model.no_sync():
            model(x).pow(2).mean().backward()

    out["after_backward"] = timed(after_backward)
    out["backward_alone"] = timed(local)
    out["allreduce_alone"] = timed(lambda: dist.all_reduce(torch.cat([p.grad.flatten() for p in params])))
    dist.destroy_process_group()
    return out

