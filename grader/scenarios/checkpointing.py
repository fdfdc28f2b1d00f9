"""Chapter 08 scenarios: an optimizer stepped, training interrupted and resumed, files written, crashed and loaded.

Optimizers, models, RNG states and files cannot cross to the grading process, so each scenario builds
them where the student's code runs, drives that code, and hands back data: parameters and optimizer
state as tensors, folder listings as names, file contents as bytes, exceptions as their class names.

* Files live in a folder made here with tempfile.mkdtemp() and removed before returning, whatever happened.
* Bit-identity of resumed training is a fair demand only within one process and thread count, so the
  uninterrupted and the resumed runs are both made here, one after the other, and compared by the check.
* How atomic_save published its file is watched, not guessed: a rename shows up as Python's audit event
  "os.rename" (os.replace, os.rename, Path.replace and shutil.move all raise it, however they were imported),
  with the function that asked for it (past the standard library's file helpers: a torch function there is a
  library helper doing the whole job), and os.fsync / os.fdatasync are wrapped while the call runs (and put back
  after). Each event names its file by (device, inode, size, mtime_ns): an fsync's from fstat of its descriptor,
  a rename's from stat of its source just before the rename, so a check can ask whether the file renamed onto
  path was the file synced, with all its bytes already written.
* A file "written on a GPU" is a CPU file whose tensors torch.save tagged cuda:0 (a tagger registered with
  torch.serialization.register_package for the save, removed after): torch.load needs map_location to read it
  on a CPU-only machine, and puts it on the GPU where there is one.
* A "crash" in the middle of a save is an object whose pickling looks at the folder, then raises.
* numpy's and random's global states are put back as they were found; torch's is restored by the caller.
* What a checkpoint file holds is handed back flat, whatever its layout: its tensors, its lists of numbers (as
  tensors), the integers written in its strings and its bytes, with the states it should hold taken at the save.
* A machine with GPUs is simulated for save_checkpoint and load_checkpoint (`gpus`): chapter 09's simulated devices
  (gpu._FakeGPU: torch.cuda.is_available() is True, torch.cuda.device / set_device / current_device choose the
  current one), where every function of torch.cuda.random (also under torch.cuda, torch.cuda.default_generators, and
  the names the student imported them by) reads and writes one 16-byte state per device, which the scenario changes
  between the save and the load and reads after the load; torch.load(..., map_location="cuda") keeps tensors on the
  CPU.
"""
import collections
import contextlib
import gc
import io
import os
import pathlib
import pickle
import random
import re
import shutil
import sys
import tempfile
import weakref

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from . import common

_save, _load = torch.save, torch.load
_data_ptr = torch.Tensor.data_ptr
_manual_seed = torch.manual_seed
_randn = torch.randn
_from_numpy = torch.from_numpy
_no_grad = torch.no_grad
_Parameter = torch.nn.Parameter
_Sequential = torch.nn.Sequential
_mse = F.mse_loss
_Tensor, _Optimizer = torch.Tensor, torch.optim.Optimizer
_Adam, _SGD = torch.optim.Adam, torch.optim.SGD
_OPTIMIZERS = {"adam": lambda ps: _Adam(ps, lr=0.02), "sgd_momentum": lambda ps: _SGD(ps, lr=0.05, momentum=0.9)}
_np_seed, _np_normal = np.random.seed, np.random.standard_normal
_np_get_state, _np_set_state = np.random.get_state, np.random.set_state
_py_seed, _py_random, _py_gauss = random.seed, random.random, random.gauss
_py_getstate, _py_setstate = random.getstate, random.setstate
_mkdtemp, _rmtree, _listdir = tempfile.mkdtemp, shutil.rmtree, os.listdir
_join, _dirname, _exists = os.path.join, os.path.dirname, os.path.exists
_fspath, _fsdecode = os.fspath, os.fsdecode
_mkdir = os.mkdir
_replace = os.replace
_find_integers = re.compile(r"-?\d+").findall
_tensor, _int64, _float64 = torch.tensor, torch.int64, torch.float64
_get_rng_state = torch.get_rng_state
_Generator, _randint, _uint8 = torch.Generator, torch.randint, torch.uint8
_cuda, _cuda_random = torch.cuda, torch.cuda.random
_CUDA_STATE_BYTES = 16  # a CUDA (Philox) generator's state: its seed and its offset, 8 bytes each
_Path = pathlib.Path
_fsync, _fdatasync = os.fsync, getattr(os, "fdatasync", None)
_fstat, _stat = os.fstat, os.stat
_addaudithook = sys.addaudithook
_getframe = sys._getframe
_is_grad_enabled = torch.is_grad_enabled
_tree_leaves, _finalize = tree_leaves, weakref.finalize
_strided, _cpu = torch.strided, torch.device("cpu")
_collect, _freeze, _unfreeze = gc.collect, gc.freeze, gc.unfreeze
_register_package = torch.serialization.register_package
_package_registry = torch.serialization._package_registry  # the list register_package appends to
_environ = os.environ
_FORCE_NO_WEIGHTS_ONLY = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
# Modules whose frames stand between a rename and the code that asked for it (os.replace called through
# pathlib, shutil or tempfile). pathlib is a package from Python 3.13 on.
_FILE_HELPERS = ("os", "posixpath", "ntpath", "genericpath", "shutil", "tempfile", "pathlib")

# While atomic_save runs, WATCHING holds one list that receives ("rename", src, dst, by, file, by_a_library) and
# ("fsync", file) events, file being _identity(...) of the file concerned.
# Both are containers mutated in place (the grader notices a scenario module whose names are rebound).
WATCHING = []
_HOOKED = []


# Where installed libraries and the standard library live: a rename asked for by code there is a library's (an
# atomic writer such as fsspec.utils.atomic_write), not the student's.
_LIBRARIES = tuple({os.path.dirname(os.path.dirname(os.__file__)), os.path.dirname(os.__file__),
                    os.path.dirname(os.path.dirname(torch.__file__))})


def _renamer():
    """(module.qualname of the function that asked for the rename being audited, past the file helpers; whether
    that function is a library's)."""
    frame = _getframe(2)  # 0: here, 1: _audit, 2: the caller of os.replace / os.rename (a C function)
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in _FILE_HELPERS:
        frame = frame.f_back
    if frame is None:
        return "?", False
    code = frame.f_code
    library = os.path.abspath(code.co_filename).startswith(_LIBRARIES)
    return f"{frame.f_globals.get('__name__', '?')}.{getattr(code, 'co_qualname', code.co_name)}", library


def _identity(st):
    """A file as (device, inode, size in bytes, modification time in ns): equal before and after nothing was
    written to it."""
    return (int(st.st_dev), int(st.st_ino), int(st.st_size), int(st.st_mtime_ns))


def _audit(event, args):
    if WATCHING and event == "os.rename":
        try:
            by, library = _renamer()
        except Exception:
            by, library = "?", False
        try:
            src, dst = _fsdecode(_fspath(args[0])), _fsdecode(_fspath(args[1]))
        except Exception:  # a dir_fd-relative or odd argument: recorded as unreadable, never an error here
            WATCHING[-1].append(("rename", "?", "?", by, None, library))
            return
        try:
            renamed = _identity(_stat(src))
        except Exception:
            renamed = None
        WATCHING[-1].append(("rename", src, dst, by, renamed, library))


@contextlib.contextmanager
def _watch():
    """Record the renames and fsyncs made inside the block, in order."""
    if not _HOOKED:  # an audit hook cannot be removed: one per process, idle unless WATCHING holds a list
        _addaudithook(_audit)
        _HOOKED.append(True)
    events = []

    def synced(fd):
        try:  # os.fsync takes a descriptor or an object with fileno()
            return ("fsync", _identity(_fstat(fd if isinstance(fd, int) else fd.fileno())))
        except Exception:  # not a file: the real call raises below
            return ("fsync", None)

    def fsync(fd):
        events.append(synced(fd))
        return _fsync(fd)

    def fdatasync(fd):
        events.append(synced(fd))
        return _fdatasync(fd)

    WATCHING.append(events)
    os.fsync = fsync
    if _fdatasync is not None:
        os.fdatasync = fdatasync
    try:
        yield events
    finally:
        os.fsync = _fsync
        if _fdatasync is not None:
            os.fdatasync = _fdatasync
        WATCHING.remove(events)


@contextlib.contextmanager
def _global_rngs_kept():
    """numpy's and random's global states as they were, whatever the block (and the student's code) did."""
    np_state, py_state = _np_get_state(), _py_getstate()
    try:
        yield
    finally:
        _np_set_state(np_state)
        _py_setstate(py_state)


def _error(e):
    """An exception as one line: its class, and its message's first line (for torch.load's long refusal, the
    line that names what it refused)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    named = ["Unsupported global" + line.split("Unsupported global", 1)[1].split(" was not an allowed")[0]
             for line in lines if "Unsupported global" in line]
    text = (named or lines or [""])[0][:200]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _clone(x):
    return None if x is None else x.detach().clone()


# ---------------------------------------------------------------- AdaGrad

def _adagrad(AdaGrad, groups, kwargs):
    opt_groups, params = [], []
    for g in groups:
        ps = [_Parameter(t.detach().clone()) for t in g["params"]]
        params += ps
        opt_groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": ps})
    return AdaGrad(opt_groups, **kwargs), params


def _snapshot(opt, params):
    states = [opt.state.get(p, {}) for p in params]  # .get: indexing the defaultdict would add entries
    return {"params": [_clone(p) for p in params],
            "g2": [_clone(s.get("g2")) if isinstance(s.get("g2"), _Tensor) else s.get("g2") for s in states],
            "grads": [_clone(p.grad) for p in params]}


def _step(opt, params, step_grads):
    for p, g in zip(params, step_grads):
        p.grad = _clone(g)
    opt.step()


def adagrad_steps(AdaGrad, groups, kwargs, grads):
    """AdaGrad(groups built from plain tensors, **kwargs) stepped once per entry of `grads` (one gradient or None
    per parameter, in group order): parameters, state["g2"] and .grad after each step, the final state_dict, and
    whether each parameter still has the storage it started with (an in-place update keeps it)."""
    opt, params = _adagrad(AdaGrad, groups, kwargs)
    storages = [p.untyped_storage().data_ptr() for p in params]
    steps, kept = [], [True] * len(params)
    for step_grads in grads:
        _step(opt, params, step_grads)
        steps.append(_snapshot(opt, params))
        # after each step: new storage made while the old one was alive has another address, then or never
        kept = [k and p.untyped_storage().data_ptr() == s for k, p, s in zip(kept, params, storages)]
    stepped = [p for g in opt.param_groups for p in g["params"]]
    report = {"is_optimizer": isinstance(opt, _Optimizer), "steps": steps,
              "same_objects": len(stepped) == len(params) and all(a is b for a, b in zip(stepped, params)),
              "same_storage": kept,
              "state_dict": opt.state_dict()}
    del opt, params, stepped
    return report


def adagrad_resume(AdaGrad, groups, kwargs, grads, split):
    """Two runs over the same gradients: one uninterrupted; one whose state_dict after `split` steps goes through
    torch.save / torch.load(weights_only=True) into a fresh AdaGrad over fresh parameters (copies of the values),
    which takes the remaining steps."""
    whole, whole_params = _adagrad(AdaGrad, groups, kwargs)
    for step_grads in grads:
        _step(whole, whole_params, step_grads)
    part, part_params = _adagrad(AdaGrad, groups, kwargs)
    for step_grads in grads[:split]:
        _step(part, part_params, step_grads)
    buffer = io.BytesIO()
    _save(part.state_dict(), buffer)
    buffer.seek(0)
    try:
        loaded = _load(buffer, weights_only=True)
    except Exception as e:
        return {"error": f"its state_dict() does not load with torch.load(weights_only=True): {_error(e)}"}
    fresh_groups, i = [], 0
    for g in groups:
        n = len(g["params"])
        fresh_groups.append({**{k: v for k, v in g.items() if k != "params"},
                             "params": [p.detach().clone() for p in part_params[i:i + n]]})
        i += n
    resumed, resumed_params = _adagrad(AdaGrad, fresh_groups, kwargs)
    resumed.load_state_dict(loaded)
    for step_grads in grads[split:]:
        _step(resumed, resumed_params, step_grads)
    report = {"error": None, "whole": _snapshot(whole, whole_params), "resumed": _snapshot(resumed, resumed_params)}
    del whole, whole_params, part, part_params, resumed, resumed_params, loaded
    return report


def adagrad_closure(AdaGrad, values, kwargs):
    """AdaGrad([p], **kwargs).step(closure), where the closure zeroes the gradient, backpropagates (p * p).sum() and
    returns it; then step() without a closure. Whether the closure ran and with gradients enabled, what each step
    returned, p after the first step, and what the first step raised."""
    p = _Parameter(values.detach().clone())
    opt = AdaGrad([p], **kwargs)
    calls = []

    def closure():
        calls.append(bool(_is_grad_enabled()))
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    returned, error = None, None
    try:
        returned = opt.step(closure)
    except NotImplementedError:  # a stub stays a stub: not an exception to record
        raise
    except Exception as e:
        error = _error(e)
    after = _clone(p)
    plain = opt.step() if error is None else None
    report = {"calls": calls, "error": error, "after": after,
              "returned": returned.detach() if isinstance(returned, _Tensor) else returned,
              "returned_type": type(returned).__name__, "plain_returned_type": type(plain).__name__}
    del opt, p, returned, plain
    return report


# ---------------------------------------------------------------- save_checkpoint / load_checkpoint

def _seed_all(seed):
    _manual_seed(seed)
    _np_seed(seed % 2**32)
    _py_seed(seed)


def _train(model, opt, start, stop, x0, y0, sources):
    """Steps start..stop-1: batches drawn from the RNGs named in `sources`, targets that depend on the step.

    Each step draws an odd number of NumPy normals and one random.gauss: both make normals in pairs and keep the
    second for the next call, so after an odd number of steps that kept normal is part of the state to save."""
    for it in range(start, stop):
        x = x0
        if "torch" in sources:
            x = x + _randn(tuple(x0.shape))
        if "numpy" in sources:
            x = x + _from_numpy(_np_normal(size=tuple(x0.shape))).to(x0.dtype) + 0.01 * float(_np_normal())
        if "random" in sources:
            x = x * (0.5 + _py_random()) + 0.01 * _py_gauss(0.0, 1.0)
        loss = _mse(model(x), y0 * (1.0 + 0.1 * it))
        opt.zero_grad()
        loss.backward()
        opt.step()


def _values(model):
    return {name: _clone(t) for name, t in model.state_dict().items()}


class _PlainUnpickler(pickle.Unpickler):
    """Reads numbers, strings, bytes and containers only: it refuses every class, so no code runs."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name} is not read here")


def _numbers(x, depth=0):
    """The numbers of a list or tuple, nested lists flattened, or None if it holds anything else."""
    if type(x) in (int, float, bool):
        return [x]
    if depth > 8 or not isinstance(x, (list, tuple)):
        return None
    out = []
    for item in x:
        found = _numbers(item, depth + 1)
        if found is None:
            return None
        out += found
    return out


def _file_leaves(x, out, depth=0):
    """Everything of a loaded checkpoint that can hold a state's values, flat: tensors (lists of numbers made
    tensors), the integers in each string as one tensor, bytes. Any layout: key names and nesting do not matter."""
    if len(out) > 5000 or depth > 40:
        return out
    if isinstance(x, _Tensor):
        try:
            out.append(x.detach().to(_cpu).clone())
        except Exception:  # a tensor with no data here (meta, sparse...): no state in it
            pass
    elif isinstance(x, (bytes, bytearray)):
        out.append(bytes(x))
        if len(x) < 2**20:  # a state pickled into bytes (pickle.dumps(random.getstate()))
            try:
                inner = _PlainUnpickler(io.BytesIO(x)).load()
            except Exception:
                inner = None
            _file_leaves(inner, out, depth + 1)
    elif isinstance(x, str):
        found = _find_integers(x)
        if found:
            out.append(_tensor([int(v) % 2**63 for v in found], dtype=_int64))
    elif isinstance(x, dict):
        for v in x.values():
            _file_leaves(v, out, depth + 1)
    elif isinstance(x, (list, tuple)):
        found = _numbers(x) if x else None
        if found is None:
            for v in x:
                _file_leaves(v, out, depth + 1)
        elif all(type(v) is not float for v in found):
            out.append(_tensor([int(v) % 2**63 for v in found], dtype=_int64))
        else:
            out.append(_tensor(found, dtype=_float64))
    return out


def _states(model, opt, gpus=()):
    """The states a checkpoint taken now must hold: the model's tensors, the optimizer's, and the RNGs' (the
    simulated GPUs' too)."""
    optimizer = {}
    for index, state in opt.state_dict()["state"].items():
        for key, value in state.items():
            if isinstance(value, _Tensor):
                optimizer[f"state[{index}][{key!r}]"] = _clone(value)
    return {"model": _values(model), "optimizer": optimizer, "torch": _get_rng_state(),
            "numpy": _from_numpy(_np_get_state()[1].copy()), "random": _tensor(_py_getstate()[1][:624], dtype=_int64),
            "cuda": [g.get_state() for g in gpus]}


# ---------------------------------------------------------------- simulated CUDA generators

def _random_states(count, seed):
    """`count` CUDA generator states drawn from `seed` by a generator of their own (the global ones untouched)."""
    g = _Generator().manual_seed(seed)
    return [_randint(0, 256, (_CUDA_STATE_BYTES,), dtype=_uint8, generator=g) for _ in range(count)]


class _SimulatedGenerator:
    """A simulated GPU's default generator: a state of 16 bytes, read and written as torch.Generator's is."""

    def __init__(self, state):
        self.state = state

    def get_state(self):
        """A copy of the state, as torch.Generator.get_state() returns one."""
        return self.state.clone()

    def set_state(self, new_state):
        """The state replaced by a copy of `new_state`, refused as CUDA refuses a state of another type or size."""
        if not isinstance(new_state, _Tensor):
            raise TypeError(f"a CUDA RNG state is a torch.ByteTensor, not a {type(new_state).__name__}")
        if new_state.dtype != _uint8:
            raise RuntimeError("RNG state must be a torch.ByteTensor")
        if new_state.numel() != _CUDA_STATE_BYTES:
            raise RuntimeError("RNG state is wrong size")
        self.state = new_state.detach().to(_cpu).reshape(-1).clone()

    def manual_seed(self, seed):
        """The state of a generator seeded with `seed` (its offset 0)."""
        seed = int(seed) % 2**64
        self.state = _tensor([(seed >> (8 * i)) & 255 for i in range(8)] + [0] * 8, dtype=_uint8)
        return self

    def initial_seed(self):
        """The seed held in the state's first 8 bytes."""
        return sum(int(b) << (8 * i) for i, b in enumerate(self.state[:8].tolist()))

    def seed(self):
        """A new seed, as torch's draws one; here from the current one, so that a scenario stays reproducible."""
        self.manual_seed(self.initial_seed() * 6364136223846793005 + 1442695040888963407)
        return self.initial_seed()


def _move_on(gpus, seed):
    """The simulated GPUs' generators at new states drawn from `seed`, as training on them would leave them."""
    for g, state in zip(gpus, _random_states(len(gpus), seed)):
        g.state = state


def _cuda_rng_changes(gpus, machine):
    """What makes the functions of torch.cuda.random (under torch.cuda too) and default_generators read and write
    the simulated generators `gpus`, each call on the device it names or on `machine`'s current device (its
    torch.cuda.device / set_device / current_device)."""

    def get_rng_state(device="cuda"):
        return gpus[machine.index(device)].get_state()

    def set_rng_state(new_state, device="cuda"):
        gpus[machine.index(device)].set_state(new_state)

    def set_rng_state_all(new_states):
        for i, state in enumerate(new_states):
            set_rng_state(state, i)

    def manual_seed(seed):
        gpus[machine.current].manual_seed(seed)

    def manual_seed_all(seed):
        for g in gpus:
            g.manual_seed(seed)

    def seed():
        gpus[machine.current].seed()

    def seed_all():
        manual_seed_all(gpus[machine.current].seed())

    functions = {"get_rng_state": get_rng_state, "get_rng_state_all": lambda: [g.get_state() for g in gpus],
                 "set_rng_state": set_rng_state, "set_rng_state_all": set_rng_state_all, "manual_seed": manual_seed,
                 "manual_seed_all": manual_seed_all, "seed": seed, "seed_all": seed_all,
                 "initial_seed": lambda: gpus[machine.current].initial_seed()}
    changes = [(module, name, fn) for module in (_cuda, _cuda_random) for name, fn in functions.items()
               if hasattr(module, name)]
    return changes + [(_cuda, "default_generators", tuple(gpus))]


@contextlib.contextmanager
def _registered(tagger, deserializer):
    """torch.serialization's tagger and deserializer for storages, ahead of torch's own, inside the block only."""
    _register_package(-1000, tagger, deserializer)
    try:
        yield
    finally:
        for entry in [e for e in _package_registry if e[1] is tagger]:
            _package_registry.remove(entry)


def _cpu_storage(storage, location):
    """A storage saved on a GPU, or sent to one by map_location, left on the CPU (this build may have no CUDA)."""
    return storage if location.startswith("cuda") else None


@contextlib.contextmanager
def _on_gpus(gpus, reached):
    """Inside the block, `reached` (the student's functions) run on a machine with the simulated GPUs `gpus`, device
    0 current (chapter 09's simulated devices, with these generators), where torch.load puts "cuda" tensors on the
    CPU; with none, on this one as it is."""
    if not gpus:
        yield
        return
    from . import gpu  # chapter 09's scenarios, installed after this module in a grading kernel: taken when used
    machine = gpu._FakeGPU(gpu._Clock(), len(gpus))
    with gpu._machine(machine.changes() + _cuda_rng_changes(gpus, machine), reached), \
            _registered(lambda storage: None, _cpu_storage):
        yield


def resume_run(save_checkpoint, load_checkpoint, spec, optimizer, x0, y0, sources, n_steps, m_steps, seed,
               early_save=None, gpus=0):
    """n_steps + m_steps of training without a break, then the same training interrupted: n_steps, save_checkpoint
    (after an earlier save to the same path at step `early_save`, if given), RNGs disturbed, a fresh model (other
    weights) and optimizer, load_checkpoint of the file moved to another folder (as a copy elsewhere would be), and
    the remaining steps from the iteration it returned. Also what the file holds (_file_leaves) and the states it
    should hold, taken just before the last save (_states). With `gpus`, save and load run on that many simulated
    GPUs, whose generators change after each save (as training on them would) and are read after the load."""
    folder = _mkdtemp(prefix="grader-checkpoint-")
    try:
        with _global_rngs_kept():
            path = _join(folder, "checkpoint.pt")
            total = n_steps + m_steps
            model = common.build(spec, seed)
            opt = _OPTIMIZERS[optimizer](model.parameters())
            _seed_all(seed + 1)
            _train(model, opt, 0, total, x0, y0, sources)
            whole = _values(model)
            del model, opt

            model = common.build(spec, seed)
            opt = _OPTIMIZERS[optimizer](model.parameters())
            _seed_all(seed + 1)
            done, reached = 0, (save_checkpoint, load_checkpoint)
            cuda = [_SimulatedGenerator(None) for _ in range(gpus)]
            _move_on(cuda, seed + 3000)
            if early_save is not None:
                _train(model, opt, 0, early_save, x0, y0, sources)
                with _on_gpus(cuda, reached):
                    save_checkpoint(model, opt, early_save, path)
                _move_on(cuda, seed + 4000)
                done = early_save
            _train(model, opt, done, n_steps, x0, y0, sources)
            at_save = _states(model, opt, cuda)
            with _on_gpus(cuda, reached):
                save_checkpoint(model, opt, n_steps, path)
            _move_on(cuda, seed + 5000)
            listing = sorted(_listdir(folder))
            weights_only_error, in_file = "the checkpoint file was not written", []
            if _exists(path):
                try:
                    _file_leaves(_load(path, weights_only=True), in_file)
                    weights_only_error = None
                except Exception as e:
                    weights_only_error = _error(e)
                # resumed from another path, as from a copy on another machine
                path = _join(_mkdtemp(prefix="elsewhere-", dir=folder), "checkpoint.pt")
                _replace(_join(folder, "checkpoint.pt"), path)
            del model, opt

            _seed_all(seed + 1000)  # disturb every RNG, and start from other objects
            _randn(5), _np_normal(5), _py_random()
            model = common.build(spec, seed + 1)
            opt = _OPTIMIZERS[optimizer](model.parameters())
            _seed_all(seed + 2000)
            start, resumed, load_error = None, None, None
            try:
                with _on_gpus(cuda, reached):
                    start = load_checkpoint(path, model, opt)
            except NotImplementedError:
                raise
            except Exception as e:  # reported with the line that says what torch.load refused, if it did
                load_error = _error(e)
            stepped = [p for g in opt.param_groups for p in g["params"]]
            params_kept = len(stepped) == len(list(model.parameters())) and all(
                a is b for a, b in zip(stepped, model.parameters()))  # the optimizer still steps the model's own
            if type(start) is int and -10 <= start <= total + 10:
                _train(model, opt, start, total, x0, y0, sources)
                resumed = _values(model)
            report = {"whole": whole, "resumed": resumed, "start": start, "start_type": type(start).__name__,
                      "load_error": load_error, "listing": listing, "file": "checkpoint.pt",
                      "weights_only_error": weights_only_error, "params_kept": params_kept,
                      "at_save": at_save, "in_file": in_file, "cuda_after_load": [g.get_state() for g in cuda]}
            del model, opt, start, stepped, cuda
            return report
    finally:
        _rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- atomic_save

class CrashDuringSave(Exception):
    """The simulated crash: raised while the object was being pickled, in the middle of the save."""


class InterruptDuringSave(KeyboardInterrupt):
    """The simulated Ctrl-C at the same moment: a KeyboardInterrupt, which `except Exception` does not catch."""


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


class _Crash:
    """Pickling it records the folder's files and the target's bytes at that moment, then raises CrashDuringSave."""

    def __init__(self, path, seen, interrupt=False):
        self.path, self.seen, self.interrupt = path, seen, interrupt

    def __reduce__(self):
        self.seen.append({"listing": sorted(_listdir(_dirname(self.path))), "bytes": _read(self.path)})
        if self.interrupt:
            raise InterruptDuringSave("simulated Ctrl-C in the middle of the save")
        raise CrashDuringSave("simulated crash in the middle of the save")


FULL_AT = 64 * 1024  # a "full disk": writing a file past this many bytes fails (OSError, errno EFBIG)


@contextlib.contextmanager
def _disk_full_at(size):
    """Until the block ends, no file of this process grows past `size` bytes: a write past it fails as a full disk
    would (the file size limit, RLIMIT_FSIZE, with SIGXFSZ ignored so that the write fails instead of the process).
    Yields False where that cannot be set (no resource module, or not the main thread)."""
    try:
        import resource
        import signal
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    except (ImportError, AttributeError, ValueError, OSError):
        yield False
        return
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size if hard == resource.RLIM_INFINITY else min(size, hard), hard))
        yield True
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def atomic_run(atomic_save, ops, existing, subfolder, name, as_pathlib):
    """atomic_save called once per op on one path in a fresh folder (which holds `existing`, saved first, unless it
    is None). An op is ("save", payload), ("crash", payload), ("interrupt", payload) or ("full", payload): crash and
    interrupt save the payload plus an object whose pickling raises (CrashDuringSave, or InterruptDuringSave as
    Ctrl-C would); full saves it while no file may grow past FULL_AT bytes (a full disk: the write fails). After each
    op: what it raised, what the folder and the file held during and after the call, and the renames and fsyncs it
    made, in order."""
    root = _mkdtemp(prefix="grader-atomic-")
    try:
        folder = _join(root, subfolder) if subfolder else root
        os.makedirs(folder, exist_ok=True)
        path = _join(folder, name)
        if existing is not None:
            _save(existing, path)
        target = _Path(path) if as_pathlib else path
        report = []
        for kind, payload in ops:
            before = _read(path)
            seen = []
            obj = payload if kind in ("save", "full") else dict(payload, crash=_Crash(path, seen, kind == "interrupt"))
            raised, returned, limited = None, None, None
            full = _disk_full_at(FULL_AT) if kind == "full" else contextlib.nullcontext()
            with _watch() as events, full as limited:
                try:
                    returned = atomic_save(obj, target)
                except NotImplementedError:  # a stub stays a stub: not an exception to record
                    raise
                except (Exception, InterruptDuringSave) as e:  # the student's (or the crash's) exception, as data
                    # a full disk: any exception (torch.save reports the failed write as a RuntimeError of its own)
                    crash = InterruptDuringSave if kind == "interrupt" else CrashDuringSave
                    raised = {"type": type(e).__name__, "crash": kind == "full" or type(e) is crash,
                              "text": _error(e)}
            loaded = None
            if _exists(path):
                try:
                    loaded = {"value": _load(path, weights_only=True)}
                except Exception as e:
                    loaded = {"error": _error(e)}
            report.append({"kind": "save" if limited is False else kind, "before": before,  # no limit: a save
                           "raised": raised, "during": seen, "events": list(events),
                           "listing": sorted(_listdir(folder)), "after": _read(path), "loaded": loaded,
                           "returned": type(returned).__name__})
            del obj, returned
        return {"path": path, "folder": folder, "ops": report}
    finally:
        _rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- safe_load

def _leave_mark(path):
    """What a hostile pickle could call while loading; here it only writes a marker file in a scratch folder."""
    with open(path, "w") as f:
        f.write("this ran while the file was loaded")
    return "marked"


class _RunsCode:
    """Unpickling it calls os.mkdir (how="mkdir") or _leave_mark (how="mark") on a marker path: harmless, visible."""

    def __init__(self, how, marker):
        self.how, self.marker = how, marker

    def __reduce__(self):
        return (_mkdir if self.how == "mkdir" else _leave_mark, (self.marker,))


def _plain(x, depth=0):
    """Loaded data as the grader can receive it: OrderedDicts become dicts (their order kept)."""
    if depth < 8 and isinstance(x, dict):
        return {k: _plain(v, depth + 1) for k, v in x.items()}
    if depth < 8 and type(x) in (list, tuple):
        return type(x)(_plain(v, depth + 1) for v in x)
    return x


def _ordered(x, depth=0):
    if depth < 8 and type(x) is dict:
        return collections.OrderedDict((k, _ordered(v, depth + 1)) for k, v in x.items())
    return x


def _tensors(x, depth=0):
    if isinstance(x, _Tensor):
        return [x]
    if depth < 8 and isinstance(x, dict):
        x = list(x.values())
    if depth < 8 and type(x) in (list, tuple):
        return [t for v in x for t in _tensors(v, depth + 1)]
    return []


def _save_tagged_cuda(data, path):
    """torch.save(data, path) with every tensor's storage tagged cuda:0, as if it had been saved on a GPU."""
    storages = {t.untyped_storage().data_ptr() for t in _tensors(data)}

    def tagger(storage):
        try:
            return "cuda:0" if storage.data_ptr() in storages else None
        except Exception:
            return None

    with _registered(tagger, lambda storage, location: None):
        _save(data, path)


def _as_received(got):
    """What safe_load returned, as the grader can receive it; tensors not on the CPU make it a description."""
    devices = sorted({str(t.device) for t in _tensors(got)} - {"cpu"})
    if devices:
        return {"type": type(got).__name__, "value": None, "error": None, "devices": devices}
    return {"type": type(got).__name__, "value": _plain(got), "error": None, "devices": []}


def safe_load_run(safe_load, kinds, payloads, hostile, force_default_off=False):
    """Each payload saved with torch.save (kinds[i] "ordered": its dicts saved as OrderedDicts, like a state_dict;
    "plain": as it is; "gpu": as it is, its tensors tagged cuda:0) and read back by safe_load; then each hostile
    file, (layout, how): a pickle that runs code when loaded, alone ("top") or inside a checkpoint-like dict
    ("nested"), read with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 in the environment when `force_default_off` (it
    makes torch.load's default weights_only=False). For those: what safe_load raised, and whether the code ran
    (its marker exists). (Kinds and payloads come apart: the grading bridge carries containers 8 levels deep,
    and an optimizer's state_dict inside a checkpoint already takes 6.)"""
    folder = _mkdtemp(prefix="grader-safe-load-")
    try:
        loaded = []
        for i, (kind, data) in enumerate(zip(kinds, payloads)):
            path = _join(folder, f"file{i}.pt")
            if kind == "gpu":
                _save_tagged_cuda(data, path)
            else:
                _save(_ordered(data) if kind == "ordered" else data, path)
            try:
                got = safe_load(path)
                loaded.append(_as_received(got))
                del got
            except NotImplementedError:  # a stub stays a stub: not an exception to record
                raise
            except Exception as e:
                loaded.append({"type": None, "value": None, "error": _error(e), "devices": []})
        refused = []
        for i, (layout, how) in enumerate(hostile):
            marker = _join(folder, f"marker{i}")
            code = _RunsCode(how, marker)
            obj = code if layout == "top" else {"model": collections.OrderedDict(w=_randn(3)), "meta": [1, code]}
            path = _join(folder, f"hostile{i}.pt")
            _save(obj, path)
            raised = None
            forced = _environ.get(_FORCE_NO_WEIGHTS_ONLY)
            if force_default_off:
                _environ[_FORCE_NO_WEIGHTS_ONLY] = "1"
            try:
                got = safe_load(path)
                del got
            except NotImplementedError:  # a stub stays a stub: not an exception to record
                raise
            except Exception as e:
                raised = _error(e)
            finally:
                if force_default_off:
                    if forced is None:
                        _environ.pop(_FORCE_NO_WEIGHTS_ONLY, None)
                    else:
                        _environ[_FORCE_NO_WEIGHTS_ONLY] = forced
            refused.append({"raised": raised, "ran_code": _exists(marker)})
        return {"loaded": loaded, "hostile": refused}
    finally:
        _rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- load_matching

def matching_run(load_matching, spec, seed, source, ordered):
    """load_matching(model built from spec, a copy of `source`): what it returned, the model's tensors before and
    after, whether its tensors are still the same objects, whether the source was changed, and whether the model
    shares memory with the source (the source's tensors are changed after the call, and the model looked at again)."""
    model = common.build(spec, seed)
    before = _values(model)
    objects = dict(model.state_dict(keep_vars=True))
    memory = {k: _data_ptr(v) for k, v in objects.items()}
    given = (collections.OrderedDict if ordered else dict)((k, _clone(v)) for k, v in source.items())
    names = load_matching(model, given)
    after = _values(model)
    now = dict(model.state_dict(keep_vars=True))
    same_objects = list(now) == list(objects) and all(now[k] is v for k, v in objects.items())
    # the same objects, and each still on its own memory (`p.data = new` keeps the object, not the memory)
    moved = sorted(k for k, v in objects.items() if _data_ptr(v) != memory[k])
    source_after = {k: _clone(v) for k, v in given.items()}
    with _no_grad():
        for v in given.values():
            v.add_(100)
    report = {"names": names, "before": before, "after": after, "after_source_changed": _values(model),
              "same_objects": same_objects, "moved": moved, "source_after": source_after,
              "requires_grad": {k: bool(p.requires_grad) for k, p in model.named_parameters()}}
    del model, objects, given, now, names
    return report


# ---------------------------------------------------------------- checkpointed_forward

class _Allocations(TorchDispatchMode):
    """The CPU tensor storages the operations inside the block create (views and in-place results create none),
    and `alive`, the bytes of those not yet freed: what the block leaves behind, the tensors autograd saved with
    it (a weakref finalizer fires when a storage is really freed, however many tensors shared it)."""

    def __init__(self):
        super().__init__()
        self.live = {}

    @property
    def alive(self):
        return sum(self.live.values())

    def _freed(self, key):
        self.live.pop(key, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tree_leaves((args, kwargs))
                  if isinstance(t, _Tensor) and t.layout == _strided}
        for leaf in _tree_leaves(out):
            if isinstance(leaf, _Tensor) and leaf.layout == _strided and leaf.device == _cpu:
                storage = leaf.untyped_storage()
                key = id(storage)
                if key not in self.live and (storage.data_ptr() not in inputs or storage.nbytes() == 0):
                    self.live[key] = storage.nbytes()
                    _finalize(storage, self._freed, key)
        return out


def checkpoint_run(checkpointed_forward, specs, seed, x, g, segments, as_sequential, x_requires_grad):
    """checkpointed_forward(blocks built from specs, x, segments), then backward(g). Each block's forward is
    wrapped to log its index: the calls made during the forward and during the backward (recomputation). And
    `kept`: the bytes of the tensors the forward made that are still alive when it has returned (the output, and
    what autograd keeps for the backward)."""
    blocks = common.build_all(specs, seed)
    phase, calls = ["forward"], {"forward": [], "backward": []}
    for i, block in enumerate(blocks):
        def counted(*args, _i=i, _forward=block.forward, **kwargs):
            calls[phase[0]].append(_i)
            return _forward(*args, **kwargs)
        block.forward = counted
    container = _Sequential(*blocks) if as_sequential else list(blocks)
    xin = x.detach().clone().requires_grad_(x_requires_grad)
    _manual_seed(seed + 1)
    made = _Allocations()
    _freeze()  # what exists now stays out of the collection below, which then walks only what the call made
    try:
        with made:
            y = checkpointed_forward(container, xin, segments)
        _collect()  # the call's own cycles, so `kept` counts what is really held
    finally:
        _unfreeze()
    report = {"y": y, "requires_grad": bool(getattr(y, "requires_grad", False)), "x_grad": None, "grads": {},
              "forward_calls": list(calls["forward"]), "backward_calls": [], "kept": made.alive}
    if isinstance(y, _Tensor) and y.requires_grad and tuple(y.shape) == tuple(g.shape):  # else the check names it
        phase[0] = "backward"
        y.backward(g)
        report["y"] = y.detach()
        report["x_grad"] = _clone(xin.grad)
        report["grads"] = {f"{i}.{name}": _clone(p.grad) for i, b in enumerate(blocks)
                           for name, p in b.named_parameters()}
        report["backward_calls"] = list(calls["backward"])
    del blocks, container, xin, y
    return report


def checkpoint_raises(checkpointed_forward, specs, seed, x, segments):
    """checkpointed_forward(blocks, x, segments) for a segment count it must refuse: the names of the exception's
    classes (empty when it returned)."""
    blocks = common.build_all(specs, seed)
    try:
        checkpointed_forward(list(blocks), x.detach().clone().requires_grad_(), segments)
    except NotImplementedError:  # a stub stays a stub: not an exception to record
        raise
    except Exception as e:
        return [c.__name__ for c in type(e).__mro__]
    finally:
        del blocks
    return []
