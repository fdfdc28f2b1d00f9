"""Real `torch.distributed` processes launched from a notebook, safely, and the toy problem chapter 10 trains.

`launch("ddp_worker:train_worker", world_size=2, args=(...))` starts `world_size` processes, each with the
environment `init_process_group` reads (MASTER_ADDR, MASTER_PORT on a free port, RANK, WORLD_SIZE), calls
`fn(rank, world_size, *args)` in each, and returns their results in rank order. What a notebook
needs and `mp.spawn` does not give: a deadline (a rank that waits for a peer that never comes ends
the launch with TimeoutError), every child process stopped whatever happens, a second port when the
first was taken meanwhile, and a child's exception raised in the notebook with its rank. The target
must live in an importable file (a new process cannot import a notebook cell's function): on sys.path,
or in the working directory, which each child puts first on its sys.path.

On Linux the ranks fork from multiprocessing's "forkserver", a clean process started at the first launch that
imports torch once, instead of each rank starting a fresh interpreter ("spawn", as `torch.multiprocessing.spawn`
does, and what other systems use): a launch then takes a fraction of a second instead of an import of torch per
rank. Either way a rank gets the launching process's environment, working directory and sys.path as they are
at the launch, and nothing else of its memory.

`toy_model`'s models record their training forwards for chapter 10's checks when asked (grader/course/ddp_record.py).
"""
from __future__ import annotations

import importlib
import io
import multiprocessing
import os
import queue as queue_module
import socket
import sys
import time
import traceback
from typing import Any, Sequence

import torch
from torch import nn

from grader.course.ddp_record import record_if_asked

__all__ = ["free_port", "launch", "WorkerError", "toy_model", "toy_batch", "TOY_BATCH"]

TOY_BATCH = 16  # rows in every step's batch of the toy problem; divisible by 1, 2, 4, 8 ranks
_PORT_TAKEN = ("address already in use", "EADDRINUSE", "errno 98")


class RankNotImplemented(NotImplementedError):
    """A rank reached a stub's NotImplementedError: the exercise is not written yet, and the grader says so (a
    NotImplementedError raised here, not by the student's own `raise`, would otherwise be graded as an error)."""

    grader_stub = True


class WorkerError(RuntimeError):
    """A rank raised: the message names the rank, the exception and its last lines."""


def free_port() -> int:
    """A TCP port on localhost that nothing listens on now (the OS picks it, so parallel launches differ)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def toy_model(seed: int) -> nn.Module:
    """The model chapter 10 trains: the same weights for the same seed, in any process."""
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return record_if_asked(model)


def toy_batch(seed: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s full batch (TOY_BATCH rows): inputs (16, 8) and targets (16, 1), the same in any process."""
    g = torch.Generator().manual_seed(10_000 * seed + step)
    x = torch.randn(TOY_BATCH, 8, generator=g)
    y = (x[:, :1] * 2 - x[:, 1:2]).sin() + 0.1 * torch.randn(TOY_BATCH, 1, generator=g)
    return x, y


def _to_bytes(value: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


# What the forkserver imports once, so that no rank imports it again. torch._dynamo too: the first
# DistributedDataParallel(...) of a process imports it (seconds, each rank, each launch); the optimizers and FSDP
# chapter 10 shards with; and chapter 10's model-parallel workers.
_PRELOAD = ["torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo", "torch.distributed.optim",
            "torch.distributed.fsdp", __name__, "grader.course.parallel"]


def _context() -> multiprocessing.context.BaseContext:
    """Linux: the forkserver with torch preloaded (forking the notebook's own process would copy its threads and
    state); elsewhere spawn (Windows has no fork, and macOS's system frameworks are not safe to fork)."""
    if sys.platform != "linux":
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)  # takes effect when the server starts, at the first launch
    return ctx


def _gloo_deadlock_workarounds() -> None:
    """Two ways torch 2.13's gloo ranks deadlocked here, closed in the rank's process. A gloo thread that drops the
    last reference to a finished work needs the GIL when the work holds a Python object (the context every backward
    stashes in C++ thread-local state, for compiled autograd, which nothing reads on these ranks; or a tensor made in
    Python), while `destroy_process_group`, or DDP's reducer freeing the group after it, holds the GIL and waits for
    that thread to end. The stash is turned off, and `destroy_process_group` first lets those threads finish. (The
    chapter's worker deadlocked in 2 of 20 launches before, in none of 25 after.)"""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    stash = torch._C._stash_obj_in_tls
    torch._C._stash_obj_in_tls = lambda key, value: None if key == "context" else stash(key, value)
    destroy = distributed_c10d.destroy_process_group

    def destroy_process_group(group: Any = None) -> None:
        time.sleep(0.05)  # the GIL released: gloo's threads drop the works they hold
        destroy(group)

    dist.destroy_process_group = distributed_c10d.destroy_process_group = destroy_process_group


def _bootstrap(target: str, rank: int, world_size: int, port: int, args: tuple, results: Any,
               environ: dict[str, str], threads: int = 1) -> None:
    """In a child: the launcher's environment (a forkserver's children would otherwise have the server's, from
    its start), the rendezvous variables, its share of the launcher's `threads` (at least one: a grading kernel
    has one, and its ranks must not take a core each of a machine other notebooks are graded on), the target,
    and its result or error."""
    os.environ.clear()
    os.environ.update(environ)
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size)})
    torch.set_num_threads(max(1, threads // world_size))
    _gloo_deadlock_workarounds()
    # the child starts in the parent's working directory but with the parent's sys.path, which holds the folder
    # the parent *started* in: the folder a notebook writes its worker into (chapter 10 works in a temporary one)
    # comes first
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        module, _, name = target.partition(":")
        fn = getattr(importlib.import_module(module), name)
        value = fn(rank, world_size, *args)
        results.put(("ok", rank, _to_bytes(value)))
    except BaseException as e:  # reported to the parent, whatever it is
        base = next((c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins"), "Exception")
        tb = traceback.format_exc(limit=4).replace(here + os.sep, "")  # no temporary folder's name: a stable text
        results.put(("error", rank, (type(e).__name__, base, str(e)[:500], tb[-1500:])))
    finally:
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass


def _stop(processes: Sequence[multiprocessing.Process]) -> None:
    """Every child ends: politely, then for sure."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.kill()
            p.join(5)


def _run_once(target: str, world_size: int, args: tuple, timeout: float) -> list[Any]:
    ctx = _context()
    results = ctx.Queue()
    port = free_port()
    environ = dict(os.environ)
    threads = torch.get_num_threads()
    processes = [ctx.Process(target=_bootstrap, name=f"rank-{rank}", daemon=True,
                             args=(target, rank, world_size, port, args, results, environ, threads))
                 for rank in range(world_size)]
    done: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        for p in processes:
            p.start()
        while len(done) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the {world_size} processes did not all finish within {timeout:g} s (a rank "
                                   f"waiting for a peer that never came?); every process was stopped")
            try:
                kind, rank, payload = results.get(timeout=min(0.2, left))
            except queue_module.Empty:
                dead = [p for r, p in enumerate(processes) if r not in done and p.exitcode is not None]
                if dead:
                    time.sleep(0.2)  # its report may still be in the queue
                    if results.empty():
                        raise WorkerError(f"{dead[0].name} exited with code {dead[0].exitcode} without a result "
                                          "(killed, or out of memory?)")
                continue
            if kind == "error":
                name, base, message, tb = payload
                if base == "NotImplementedError":
                    raise RankNotImplemented(f"rank {rank}: {message or 'not implemented yet'}")
                raise WorkerError(f"rank {rank} raised {name}: {message}\n{tb}")
            done[rank] = torch.load(io.BytesIO(payload), weights_only=True)
    finally:
        _stop(processes)
        results.close()
        results.join_thread()
    return [done[r] for r in range(world_size)]


def launch(target: str, world_size: int, args: Sequence[Any] = (), timeout: float = 120.0) -> list[Any]:
    """Run `fn(rank, world_size, *args)` in `world_size` new processes; their results, rank 0 first.

    `target` is "module:function" of an importable file (e.g. one a notebook wrote with %%writefile). Each rank
    gets its share of this process's torch threads (at least one).
    Results travel with torch.save (tensors, numbers, strings and containers of them). Raises
    TimeoutError after `timeout` seconds, NotImplementedError if a rank hit a stub, WorkerError if a
    rank raised anything else; in every case no child process is left behind.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if ":" not in target:
        raise ValueError(f"target must be 'module:function', got {target!r}")
    try:
        return _run_once(target, world_size, tuple(args), timeout)
    except WorkerError as e:  # the free port was taken between choosing it and binding it: once more
        if not any(s in str(e) for s in _PORT_TAKEN):
            raise
        return _run_once(target, world_size, tuple(args), timeout)


# --------------------------------------------------------------------------------------
# Workers for chapter 10's measurements (targets for `launch`; each calls init_process_group itself)
# --------------------------------------------------------------------------------------

def _init(rank: int, world_size: int, backend: str = "gloo") -> None:
    import datetime

    import torch.distributed as dist

    dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60))


def allreduce_seconds(rank: int, world_size: int, sizes: Sequence[int], reps: int = 10, rounds: int = 5,
                      backend: str = "gloo") -> list[list[float]]:
    """For each size in bytes, the median seconds of one all-reduce (SUM) of a float32 buffer in each of `rounds`
    rounds of `reps` calls, after a warm-up. The rounds visit the sizes in turn, so a burst of load on a busy
    machine inflates one round of every size rather than every round of one size; their minimum is the
    all-reduce's own cost, their spread the machine's noise."""
    import statistics

    import torch.distributed as dist

    _init(rank, world_size, backend)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    bufs = [torch.ones(max(1, nbytes // 4), device=device) for nbytes in sizes]
    for buf in bufs:
        for _ in range(3):
            dist.all_reduce(buf)
    out: list[list[float]] = [[] for _ in sizes]
    for _ in range(rounds):
        for i, buf in enumerate(bufs):
            times = []
            for _ in range(reps):
                dist.barrier()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                dist.all_reduce(buf)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - start)
            out[i].append(statistics.median(times))
    return out


def step_seconds(rank: int, world_size: int, width: int, batch: int, steps: int = 8,
                 threads: int = 1) -> dict[str, Any]:
    """One data-parallel SGD step of a width x width MLP on `batch` rows split over the ranks, each rank with
    `threads` threads (so a world of n uses n times the cores of a world of one, as n GPUs are n devices):
    median seconds of the whole step and of its all-reduce (every gradient flattened into one buffer), the
    fastest of each (what a busy machine inflates least), this rank's FLOPs per step, and the estimated peak
    FLOP/s of its threads (0.0 when unknown) with its label."""
    import statistics

    import torch.distributed as dist
    from torch.utils.flop_counter import FlopCounterMode

    from grader.course import specs

    torch.set_num_threads(threads)
    peak = specs.device_peak("cpu", torch.float32)  # this rank's cores: `threads` of them
    _init(rank, world_size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, width))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch // world_size, width)
    params = list(model.parameters())

    def step() -> float:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        flat = torch.cat([p.grad.flatten() for p in params])
        start = time.perf_counter()
        dist.all_reduce(flat)
        comm = time.perf_counter() - start
        flat /= world_size
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        opt.step()
        return comm

    with FlopCounterMode(display=False) as counter:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
    totals, comms = [], []
    for i in range(steps + 2):
        dist.barrier()
        start = time.perf_counter()
        comm = step()
        if i >= 2:  # two warm-up steps
            totals.append(time.perf_counter() - start)
            comms.append(comm)
    return {"step": statistics.median(totals), "allreduce": statistics.median(comms), "step_best": min(totals),
            "allreduce_best": min(comms), "threads": float(torch.get_num_threads()),
            "peak": peak.flop_per_sec if peak else 0.0, "peak_label": peak.label if peak else "",
            "flops": float(counter.get_total_flops()), "params": float(sum(p.numel() for p in params))}


def _local_bytes(t: torch.Tensor) -> int:
    """Bytes this rank stores for `t`: a DTensor (FSDP2's sharded parameters) counts only its local shard."""
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def _state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of an optimizer's per-parameter tensors (Adam's two moments), without its scalar step counters."""
    return sum(_local_bytes(v) for s in optimizer.state.values() for k, v in s.items()
               if k != "step" and isinstance(v, torch.Tensor))


class _SavedActivations:
    """Bytes of the tensors autograd saves for the backward while the block runs, the model's parameters left out
    (under FSDP, the parameters all-gathered for the layer that runs are the model's parameters at that moment)."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.bytes = model, 0
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        params = {(p.to_local() if hasattr(p, "to_local") else p).untyped_storage().data_ptr()
                  for p in self.model.parameters()}
        if t.untyped_storage().data_ptr() not in params:
            self.bytes += t.numel() * t.element_size()
        return t

    def __enter__(self) -> "_SavedActivations":
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.hooks.__exit__(*exc)


def sharded_state_bytes(rank: int, world_size: int, width: int = 256, layers: int = 4,
                        steps: int = 2) -> dict[str, Any]:
    """Per-rank bytes of parameters, gradients and Adam state (fp32) after `steps` steps of the same training
    under plain DDP, DDP with ZeroRedundancyOptimizer (ZeRO-1) and FSDP2's fully_shard (ZeRO-3), the activations
    each saved for its last backward (8 rows per rank), the bytes of
    FSDP's first layer weight on this rank while that layer runs and between steps, and the largest difference
    between the three schemes' final parameters (sharding moves the state, not the arithmetic).
    `layers` bias-free width x width layers: equal tensors, so ZeroRedundancyOptimizer splits them evenly."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    _init(rank, world_size)

    def build() -> nn.Module:
        torch.manual_seed(0)  # the same weights on every rank and for every scheme
        return nn.Sequential(*(nn.Linear(width, width, bias=False) for _ in range(layers)))

    def train(model: nn.Module, wrapped: nn.Module, opt: torch.optim.Optimizer, states: torch.optim.Optimizer
              ) -> dict[str, int]:
        g = torch.Generator().manual_seed(rank)  # each rank its own rows
        for _ in range(steps):
            opt.zero_grad(set_to_none=False)
            with _SavedActivations(model) as saved:
                loss = wrapped(torch.randn(8, width, generator=g)).pow(2).mean()
            loss.backward()
            opt.step()
        params = list(model.parameters())
        return {"params": sum(_local_bytes(p) for p in params), "grads": sum(_local_bytes(p.grad) for p in params),
                "optimizer_state": _state_bytes(states), "activations": saved.bytes}

    out: dict[str, Any] = {}
    finals = {}
    model = build()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    out["ddp"] = train(model, DistributedDataParallel(model), opt, opt)
    finals["ddp"] = [p.detach().clone() for p in model.parameters()]
    model = build()
    zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    out["zero1"] = train(model, DistributedDataParallel(model), zero, zero.optim)  # .optim: this rank's partition
    finals["zero1"] = [p.detach().clone() for p in model.parameters()]
    model = build()
    mesh = init_device_mesh("cpu", (world_size,))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    seen: list[int] = []  # bytes of a layer's weight on this rank while the layer runs (after FSDP's all-gather)
    model[0].register_forward_pre_hook(lambda module, args: seen.append(_local_bytes(module.weight)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    out["fsdp"] = train(model, model, opt, opt)
    out["fsdp_layer_bytes"] = {"running": seen[-1], "between_steps": _local_bytes(model[0].weight)}
    finals["fsdp"] = [p.full_tensor().detach().clone() for p in model.parameters()]
    out["num_params"] = sum(p.numel() for p in finals["ddp"])
    out["max_diff"] = max(float((a - b).abs().max()) for name in ("zero1", "fsdp")
                          for a, b in zip(finals["ddp"], finals[name]))
    dist.destroy_process_group()
    return out


def accumulation_allreduces(rank: int, world_size: int, micro_batches: int = 4, width: int = 64) -> dict[str, Any]:
    """Gradient accumulation over `micro_batches` backward passes under DDP, with and without `no_sync()` on all
    but the last: the number of bucket all-reduces each way (counted by a communication hook) and the largest
    difference between the two accumulated gradients."""
    from contextlib import nullcontext

    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    _init(rank, world_size)
    grads, counts = {}, {}
    for mode in ("every micro-batch", "no_sync"):
        torch.manual_seed(0)
        model = DistributedDataParallel(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1)))
        calls = [0]

        def counting_hook(state, bucket, calls=calls):  # no annotations: DDP checks them against GradBucket
            calls[0] += 1
            return allreduce_hook(state, bucket)  # the default: all-reduce the bucket, divide by the world size

        model.register_comm_hook(dist.group.WORLD, counting_hook)
        g = torch.Generator().manual_seed(rank)
        for i in range(micro_batches):
            last = i == micro_batches - 1
            with model.no_sync() if mode == "no_sync" and not last else nullcontext():
                (model(torch.randn(8, width, generator=g)).pow(2).mean() / micro_batches).backward()
        grads[mode] = [p.grad.detach().clone() for p in model.parameters()]
        counts[mode] = calls[0]
    dist.destroy_process_group()
    diff = max(float((a - b).abs().max()) for a, b in zip(grads["every micro-batch"], grads["no_sync"]))
    return {"allreduces": counts, "max_diff": diff}


def seeds_and_checkpoint(rank: int, world_size: int, folder: str, steps: int = 3) -> dict[str, Any]:
    """Dropout masks drawn after one seed on every rank and after seed + rank; a model built from a per-rank seed
    before and after DistributedDataParallel wraps it; then a checkpoint written by rank 0 alone, a barrier, and
    every rank loading it: when rank 0 finished writing, when each rank went past the barrier, and whether what
    it loaded equals its own model."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    _init(rank, world_size)
    out: dict[str, Any] = {}
    drop = nn.Dropout(0.5)  # training mode: a random mask
    torch.manual_seed(0)
    out["mask_one_seed"] = drop(torch.ones(12)) > 0
    torch.manual_seed(0 + rank)
    out["mask_seed_plus_rank"] = drop(torch.ones(12)) > 0
    torch.manual_seed(100 + rank)  # a different initialisation on every rank...
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 1))
    out["weight_built"] = model[0].weight.detach().clone()
    ddp = DistributedDataParallel(model)  # ...replaced by rank 0's: the constructor broadcasts it
    out["weight_wrapped"] = model[0].weight.detach().clone()
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(steps):
        x, y = toy_batch(0, step)
        x = x[rank::world_size]  # this rank's rows
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y[rank::world_size]).backward()
        opt.step()
    path = os.path.join(folder, "checkpoint.pt")
    if rank == 0:  # one writer: the ranks' models are equal, and two writers of one file would clobber it
        torch.save({"model": ddp.module.state_dict(), "optimizer": opt.state_dict(), "step": steps}, path)
        out["saved_at"] = time.time()
    dist.barrier()  # nobody reads the file before rank 0 has written all of it
    out["past_barrier_at"] = time.time()
    loaded = torch.load(path, map_location="cpu", weights_only=True)  # map_location: a GPU rank would say its own
    out["loaded_equals_mine"] = all(torch.equal(v, loaded["model"][k]) for k, v in ddp.module.state_dict().items())
    out["loaded_step"] = loaded["step"]
    dist.barrier()
    dist.destroy_process_group()
    return out
