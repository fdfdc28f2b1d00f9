"""Chapter 10 scenarios: a student's average_gradients in a simulated process group, ddp_train recorded, and
shard_indices's shuffle beside torch's global random state.

Grading runs on one machine with no partner processes, so the world is simulated inside this scenario:
torch.distributed's group queries and all_reduce are replaced for the call (and put back after), under every name
the student's function holds them by. Each rank is a thread running the student's function on a model of its own:
the same weights, the gradients of its own batch (not multiples of each other's), so only gradients that really
went through the all-reduces can make the average. All-reduce number i of every rank adds up what each rank's
number i read, as gloo's does. One started with async_op=True reads its tensor at the call and its sum lands on
`work.wait()`, so the scenario counts the works never waited on, and the tensors changed between the call and the
wait (in a real run, a race with the all-reduce reading them).

ddp_train runs for real (it starts its own processes); what its ranks did is recorded by the models
grader.course.distributed.toy_model builds while the environment variable below names a folder (the ranks
inherit it; grader/course/ddp_record.py writes the records), with torch's flight recorder on in the ranks so that
the records say how many numbers their collectives carried.

shard_indices's shuffle runs here too, so that torch's global random state before and after the call is read in
the process where the student's function runs (global_rng_after_shuffle).
"""
import contextlib
import ctypes
import os
import shutil
import tempfile
import threading

import torch
import torch.distributed as dist

from . import common

_SUM = dist.ReduceOp.SUM if dist.is_available() else None
_c10d = dist.distributed_c10d if dist.is_available() else None
_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_RENDEZVOUS_S = 10.0  # how long a simulated rank waits for the others at an all-reduce (they run the same code)
_randn, _manual_seed, _equal = torch.randn, torch.manual_seed, torch.equal
_get_rng_state = torch.get_rng_state
_load, _listdir, _join = torch.load, os.listdir, os.path.join
_RECORD_ENV = "GRADER_DDP_RECORD"  # grader.course.ddp_record.RECORD_ENV (this module may not import grader)
_FLIGHT_RECORDER = {"TORCH_FR_BUFFER_SIZE": "2000"}  # the collectives each rank ran, with their sizes (ranks inherit)


def _model(spec, seed, frozen, rank=0):
    """The model every rank holds (the same weights), with the gradients of that rank's own batch."""
    model = torch.nn.Sequential(*common.build_all(spec, seed))
    if frozen:  # a frozen parameter has no gradient; averaging must leave it alone
        list(model.parameters())[-1].requires_grad_(False)
    _manual_seed(seed + 1 + 7919 * rank)
    model(_randn(5, spec[0][1])).pow(2).sum().backward()
    return model


def _grads(model):
    """Copies of each parameter's gradient (None kept): what the rank held, not what the student changes later."""
    return {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in model.named_parameters()}


class _Stopped(BaseException):
    """Raised in a rank's thread still running once the call is over (an endless loop): the thread ends."""


class _World:
    """Where the simulated ranks meet: all-reduce number i of every rank sums the tensors each read at its call."""

    def __init__(self, size, timeout):
        self.size, self.timeout = size, timeout
        self.cond = threading.Condition()
        self.read = {}      # (call index, rank) -> the tensor as that rank's all-reduce read it
        self.failed = None  # (rank, error) of the first rank that raised
        self.returned = set()  # the ranks whose call is over: they make no more all-reduces

    def deposit(self, rank, index, tensor):
        with self.cond:
            self.read[index, rank] = tensor
            self.cond.notify_all()

    def fail(self, rank, error):
        with self.cond:
            if self.failed is None:
                self.failed = (rank, error)
            self.cond.notify_all()

    def finish(self, rank):
        with self.cond:
            self.returned.add(rank)
            self.cond.notify_all()

    def total(self, rank, index):
        """The sum (in rank order) of every rank's all-reduce number `index`, once all have made it."""
        def missing():
            return [r for r in range(self.size) if (index, r) not in self.read]

        def ready():
            return self.failed is not None or not missing() or any(r in self.returned for r in missing())

        with self.cond:
            self.cond.wait_for(ready, self.timeout)
            absent = missing()
            if absent and self.failed is not None:
                raise RuntimeError(f"rank {self.failed[0]} raised {type(self.failed[1]).__name__} before its "
                                   f"all_reduce number {index + 1}, which rank {rank} waited for")
            if absent:
                when = "returned without it" if absent[0] in self.returned else f"made none within {self.timeout:g} s"
                raise RuntimeError(f"rank {rank}'s all_reduce number {index + 1} was met by no all_reduce of rank "
                                   f"{absent[0]}, which {when}: every rank makes the same all-reduces, in the same "
                                   "order")
            parts = [self.read[index, r] for r in range(self.size)]
        if len({(tuple(t.shape), t.dtype) for t in parts}) > 1:
            raise RuntimeError(f"the ranks' all_reduce number {index + 1} got tensors of different shapes or "
                               "dtypes: every rank all-reduces the same tensors, in the same order")
        out = parts[0].clone()
        for t in parts[1:]:
            out += t
        return out


def _stop(thread):
    """A rank's thread still running after the call (an endless loop) is made to raise _Stopped."""
    if thread.is_alive() and thread.ident is not None:
        _set_async_exc(ctypes.c_ulong(thread.ident), ctypes.py_object(_Stopped))


@contextlib.contextmanager
def _collectives_replaced(fakes, fn):
    """torch.distributed's functions replaced by `fakes` for the call, and put back after: the attributes of
    torch.distributed and distributed_c10d, and the names the student's function holds them under
    (`from torch.distributed import all_reduce` binds a global of its own; a closure can hold one too)."""
    modules = [m for m in (dist, _c10d) if m is not None]
    swap = {id(getattr(m, name)): fake for name, fake in fakes.items() for m in modules if hasattr(m, name)}
    holders = {(id(vars(m)), name): vars(m) for m in modules for name in fakes if hasattr(m, name)}
    cells = {}
    for f in _unwrapped(fn):
        namespace = getattr(f, "__globals__", None)
        if isinstance(namespace, dict):
            holders.update({(id(namespace), name): namespace for name, value in list(namespace.items())
                            if id(value) in swap})
        cells.update({id(c): c for c in (getattr(f, "__closure__", None) or ()) if id(_cell_value(c)) in swap})
    saved = [(d, name, d[name]) for (_, name), d in holders.items()]
    kept = [(c, c.cell_contents) for c in cells.values()]
    try:
        for d, name, value in saved:
            d[name] = swap[id(value)]
        for c, value in kept:
            c.cell_contents = swap[id(value)]
        yield
    finally:
        for d, name, value in saved:
            d[name] = value
        for c, value in kept:
            c.cell_contents = value


def _unwrapped(fn):
    """The function and those it wraps: the notebook's guard wrapper (`_grader_student_`), functools.wraps'."""
    out = []
    while fn is not None and len(out) < 8 and all(fn is not f for f in out):
        out.append(fn)
        fn = getattr(fn, "_grader_student_", None) or getattr(fn, "__wrapped__", None)
    return out


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def average_in_fake_world(average_gradients, spec, world_size, seed, frozen=False):
    """Call average_gradients(model) in every rank of a simulated world (rank 0 in this thread, the others in
    threads of their own): each rank's gradients before and after, and what rank 0's all-reduces did."""
    models = [_model(spec, seed, frozen, rank) for rank in range(world_size)]
    before = [_grads(m) for m in models]
    params = [{n: p.detach().clone() for n, p in m.named_parameters()} for m in models]
    param_storages = {p.untyped_storage().data_ptr() for m in models for p in m.parameters()}
    world, here = _World(world_size, _RENDEZVOUS_S), threading.local()
    stats = [{"calls": 0, "works": [], "params": 0} for _ in range(world_size)]

    class _Work:
        """An all-reduce in flight: it read `tensor` at the call; the sum is written into it on wait()."""

        def __init__(self, tensor, rank, index):
            self.tensor, self.rank, self.index = tensor, rank, index
            self.read, self.done, self.raced = tensor.detach().clone(), False, False
            world.deposit(rank, index, self.read)

        def wait(self, *a, **k):
            if not self.done:
                self.done = True
                total = world.total(self.rank, self.index)
                self.raced = not _equal(self.tensor.detach(), self.read)
                with torch.no_grad():
                    self.tensor.copy_(total)
            return True

        def is_completed(self):
            return self.done

    def all_reduce(tensor, op=_SUM, group=None, async_op=False):
        if op != _SUM:
            raise RuntimeError(f"all_reduce with {op} is not supported by the gloo backend of every torch version: "
                               "all-reduce with ReduceOp.SUM, then divide by the world size")
        rank = getattr(here, "rank", 0)
        mine = stats[rank]
        mine["params"] += tensor.untyped_storage().data_ptr() in param_storages
        work = _Work(tensor, rank, mine["calls"])
        mine["calls"] += 1
        if async_op:
            mine["works"].append(work)
            return work
        work.wait()
        return None

    fakes = {"is_available": lambda: True, "is_initialized": lambda *a, **k: True,
             "get_world_size": lambda *a, **k: world_size, "get_rank": lambda *a, **k: getattr(here, "rank", 0),
             "all_reduce": all_reduce}
    errors = {}

    def run_rank(rank):
        here.rank = rank
        try:
            average_gradients(models[rank])
        except _Stopped:
            pass
        except BaseException as e:  # reported by rank 0's thread
            errors[rank] = e
            world.fail(rank, e)
        finally:
            world.finish(rank)

    threads = [threading.Thread(target=run_rank, args=(rank,), daemon=True, name=f"simulated-rank-{rank}")
               for rank in range(1, world_size)]
    with _collectives_replaced(fakes, average_gradients):
        try:
            for t in threads:
                t.start()
            here.rank = 0
            average_gradients(models[0])
        except BaseException as e:
            world.fail(0, e)
            for t in threads:  # first: a timeout's alarm, raised again every half second, can cut the join short
                _stop(t)
            raise
        finally:
            world.finish(0)
            try:
                for t in threads:
                    t.join(_RENDEZVOUS_S)
            finally:
                for t in threads:
                    _stop(t)
    if errors:
        raise errors[min(errors)]
    after = [_grads(m) for m in models]
    unchanged = all(torch.equal(p.detach(), params[r][n]) for r, m in enumerate(models)
                    for n, p in m.named_parameters())
    calls, works = stats[0]["calls"], stats[0]["works"]
    error = "" if calls or all(g is None for g in before[0].values()) else \
        "it never called dist.all_reduce, so no other rank's gradient was added"
    del models
    return {"before": before, "after": after, "params_unchanged": unchanged, "error": error, "calls": calls,
            "unwaited": sum(not w.done for w in works), "raced": sum(w.raced for w in works), "async": len(works),
            "params_reduced": sum(s["params"] for s in stats)}


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
    setting = {_RECORD_ENV: folder, **_FLIGHT_RECORDER}
    before = {name: os.environ.get(name) for name in setting}
    os.environ.update(setting)
    try:
        state = ddp_train(world_size=world_size, steps=steps, lr=lr, seed=seed)
        models = [_load(_join(folder, name), weights_only=True) for name in sorted(_listdir(folder))
                  if name.endswith(".pt")]
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(folder, ignore_errors=True)
    if isinstance(state, dict):  # a state_dict is an OrderedDict; plain data is a dict
        state = dict(state.items())
    return {"state": state, "models": models, "pid": os.getpid()}
