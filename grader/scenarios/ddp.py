"""Chapter 10 scenarios: a student's average_gradients in a simulated process group, ddp_train recorded, and
shard_indices's shuffle beside torch's global random state.

Grading runs on one machine with no partner processes, so the world is simulated inside this scenario:
torch.distributed's group queries and all_reduce are replaced for the call (and put back after). Rank k of
the simulated world holds (k + 1) times this rank's gradients, so an all-reduce with SUM of any tensor
built linearly from the gradients (one per parameter, or all flattened into one bucket) multiplies it
by 1 + 2 + ... + world_size, and the true average is known exactly. An all-reduce started with async_op=True
behaves as gloo's does: it reads its tensor while it runs and its sum lands on `work.wait()`, so the
scenario counts the works never waited on, and the tensors changed between the call and the wait (in a real
run, a race with the all-reduce reading them).

ddp_train runs for real (it starts its own processes); what its ranks did is recorded by the models
grader.course.distributed.toy_model builds while the environment variable below names a folder (the ranks
inherit it; grader/course/ddp_record.py writes the records).

shard_indices's shuffle runs here too, so that torch's global random state before and after the call is read in
the process where the student's function runs (global_rng_after_shuffle).
"""
import os
import shutil
import tempfile

import torch
import torch.distributed as dist

from . import common

_SUM = dist.ReduceOp.SUM if dist.is_available() else None
_randn, _manual_seed, _equal = torch.randn, torch.manual_seed, torch.equal
_get_rng_state = torch.get_rng_state
_load, _listdir, _join = torch.load, os.listdir, os.path.join
_RECORD_ENV = "GRADER_DDP_RECORD"  # grader.course.ddp_record.RECORD_ENV (this module may not import grader)


def _model(spec, seed, frozen):
    model = torch.nn.Sequential(*common.build_all(spec, seed))
    if frozen:  # a frozen parameter has no gradient; averaging must leave it alone
        list(model.parameters())[-1].requires_grad_(False)
    _manual_seed(seed + 1)
    model(_randn(5, spec[0][1])).pow(2).sum().backward()
    return model


def average_in_fake_world(average_gradients, spec, world_size, seed, frozen=False):
    """Call average_gradients(model) as rank 0 of a simulated world; gradients and parameters before and after."""
    model = _model(spec, seed, frozen)
    before = {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in model.named_parameters()}
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    total = sum(range(1, world_size + 1))
    calls, works = [], []

    class _Work:
        """An all-reduce in flight: it read `tensor` at the call; the sum is written into it on wait()."""

        def __init__(self, tensor):
            self.tensor, self.read, self.done, self.raced = tensor, tensor.detach().clone(), False, False

        def wait(self, *a, **k):
            if not self.done:
                self.done = True
                self.raced = not _equal(self.tensor.detach(), self.read)
                with torch.no_grad():
                    self.tensor.copy_(self.read * total)
            return True

        def is_completed(self):
            return self.done

    def all_reduce(tensor, op=_SUM, group=None, async_op=False):
        if op != _SUM:
            raise RuntimeError(f"all_reduce with {op} is not supported by the gloo backend of every torch version: "
                               "all-reduce with ReduceOp.SUM, then divide by the world size")
        calls.append(tuple(tensor.shape))
        work = _Work(tensor)
        if async_op:
            works.append(work)
            return work
        work.wait()
        return None

    fakes = {"is_available": lambda: True, "is_initialized": lambda: True,
             "get_world_size": lambda *a, **k: world_size, "get_rank": lambda *a, **k: 0, "all_reduce": all_reduce}
    saved = {name: getattr(dist, name) for name in fakes}
    try:
        for name, fake in fakes.items():
            setattr(dist, name, fake)
        average_gradients(model)
    finally:
        for name, original in saved.items():
            setattr(dist, name, original)
    after = {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in model.named_parameters()}
    unchanged = all(torch.equal(p.detach(), params[n]) for n, p in model.named_parameters())
    error = "" if calls or all(g is None for g in before.values()) else \
        "it never called dist.all_reduce, so no other rank's gradient was added"
    del model
    return {"before": before, "after": after, "params_unchanged": unchanged, "error": error, "calls": len(calls),
            "unwaited": sum(not w.done for w in works), "raced": sum(w.raced for w in works), "async": len(works)}


def global_rng_after_shuffle(shard_indices, num_samples, rank, world_size, seed, epoch, state_seed):
    """Call shard_indices(..., shuffle=True) with torch's global generator seeded by `state_seed`: whether its state
    (torch.get_rng_state()) is the same afterwards, as it is when the shuffle draws from a torch.Generator of its
    own (the indices are judged by the other checks)."""
    _manual_seed(state_seed)
    before = _get_rng_state()
    shard_indices(num_samples, rank, world_size, shuffle=True, seed=seed, epoch=epoch, drop_last=False)
    return {"unchanged": bool(_equal(_get_rng_state(), before))}


def train_recorded(ddp_train, world_size, steps, lr, seed):
    """Call ddp_train(world_size=..., steps=..., lr=..., seed=...) with toy_model's models recording their
    training forwards in every process; what it returned, each recorded model, and this process's pid (a
    model trained here, in the notebook itself, is no rank's)."""
    folder = tempfile.mkdtemp(prefix="ddp-record-")
    before = os.environ.get(_RECORD_ENV)
    os.environ[_RECORD_ENV] = folder
    try:
        state = ddp_train(world_size=world_size, steps=steps, lr=lr, seed=seed)
        models = [_load(_join(folder, name), weights_only=True) for name in sorted(_listdir(folder))
                  if name.endswith(".pt")]
    finally:
        if before is None:
            os.environ.pop(_RECORD_ENV, None)
        else:
            os.environ[_RECORD_ENV] = before
        shutil.rmtree(folder, ignore_errors=True)
    if isinstance(state, dict):  # a state_dict is an OrderedDict; plain data is a dict
        state = dict(state.items())
    return {"state": state, "models": models, "pid": os.getpid()}
