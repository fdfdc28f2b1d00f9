"""Chapter 07 scenarios: init_mixture_ on tensors and Parameters made where it runs; seed_everything's draws.

init_mixture_ must fill its argument in place and hand back that very object, on a plain tensor and on a
Parameter that requires grad. Object identity and a Parameter's autograd state do not cross to the grading
process, so the tensor is made here, the student's function fills it, and what comes back is data: the
values, whether the returned object was the argument, and the Parameter's state afterwards. "In place" is
judged by memory, not by the name: the values come back as read through an alias of the argument's memory
made before the call (what a transposed view's base, or an optimizer holding the Parameter, would read), and
whether the argument still uses that memory afterwards (`w.data = ...` or `w.set_(...)` swap in other memory).

seed_everything changes global random state, so it is called here, each generator is drawn from after
each call, and the draws come back as lists of numbers. The scenario puts every generator's state (and the
deterministic-algorithms setting, which a student's seed_everything may also change) back as it found it.
"""
import contextlib
import random

import numpy as np
import torch

_manual_seed = torch.manual_seed
_full = torch.full
_no_grad = torch.no_grad
_Parameter = torch.nn.Parameter
_Linear = torch.nn.Linear
_torch_rand = torch.rand
_get_rng_state, _set_rng_state = torch.get_rng_state, torch.set_rng_state
_np_random = np.random.random
_np_seed = np.random.seed
_py_seed = random.seed
_np_get_state, _np_set_state = np.random.get_state, np.random.set_state
_py_random = random.random
_py_getstate, _py_setstate = random.getstate, random.setstate
_det_enabled = torch.are_deterministic_algorithms_enabled
_det_warn_only = torch.is_deterministic_algorithms_warn_only_enabled
_use_det = torch.use_deterministic_algorithms
_cuda_available = torch.cuda.is_available
_cuda_get_states, _cuda_set_states = torch.cuda.get_rng_state_all, torch.cuda.set_rng_state_all
_NAN = float("nan")


def _blank(shape, dtype, layout):
    """A NaN-filled tensor of this shape, so any element left unwritten shows."""
    if layout == "transposed":  # a non-contiguous view: the transpose of a (shape[1], shape[0]) tensor
        return _full((shape[1], shape[0]), _NAN, dtype=dtype).t()
    return _full(tuple(shape), _NAN, dtype=dtype)


def _memory_of(weight):
    """An alias of weight's memory, in weight's layout, and where that memory starts: taken before the call."""
    return weight.detach(), weight.untyped_storage().data_ptr()


def _filled(weight, memory, returned):
    """What init_mixture_(weight) did, as data: `values` read through the alias made before the call (weight's
    original memory), whether weight still uses that memory, and weight's own dtype and shape now."""
    alias, start = memory
    return {"returned_argument": returned is weight, "returned_type": type(returned).__name__,
            "kept_memory": weight.untyped_storage().data_ptr() == start,
            "dtype": str(weight.dtype), "shape": tuple(weight.shape), "values": alias.clone()}


def mixture_fill(init_mixture_, shape, dtype, layout, seed, calls=1):
    """init_mixture_ called on `calls` fresh NaN-filled tensors: for each, _filled's record (`layout`: "contiguous"
    or "transposed", a non-contiguous 2-D view of a NaN-filled base)."""
    _manual_seed(seed)
    out = []
    for _ in range(calls):
        weight = _blank(shape, dtype, layout)
        memory = _memory_of(weight)
        returned = init_mixture_(weight)
        out.append(_filled(weight, memory, returned))
        del weight, memory, returned
    return out


def mixture_repeats(init_mixture_, shape, seed, other_seeds):
    """init_mixture_ on fresh NaN-filled float32 tensors, one per entry of `other_seeds`, each call right after
    torch.manual_seed(seed), with NumPy's and Python's random generators seeded with that entry first (so they are in
    another state before each call): the values each call wrote, read through an alias of the tensor's memory. Both
    generators' states are put back afterwards."""
    np_state, py_state = _np_get_state(), _py_getstate()
    try:
        out = []
        for other in other_seeds:
            _np_seed(other)
            _py_seed(other)
            _manual_seed(seed)
            weight = _blank(shape, torch.float32, "contiguous")
            alias = weight.detach()
            returned = init_mixture_(weight)
            out.append(alias.clone())
            del weight, alias, returned
        return out
    finally:
        _np_set_state(np_state)
        _py_setstate(py_state)


def mixture_parameter(init_mixture_, in_features, out_features, seed):
    """init_mixture_ on a fresh nn.Linear's weight (a Parameter that requires grad, NaN-filled first): _filled's
    record, and whether layer.weight is still that Parameter, a trainable leaf, afterwards."""
    _manual_seed(seed)
    layer = _Linear(in_features, out_features)
    with _no_grad():
        layer.weight.fill_(_NAN)
    weight = layer.weight
    memory = _memory_of(weight)
    returned = init_mixture_(layer.weight)
    after = layer.weight
    out = {**_filled(weight, memory, returned), "same_parameter": after is weight,
           "is_parameter": type(after) is _Parameter, "requires_grad": bool(after.requires_grad),
           "is_leaf": bool(after.is_leaf)}
    del layer, weight, memory, returned, after
    return out


def _draw(n):
    draws = {"torch": _torch_rand(n).tolist(), "numpy": [float(v) for v in _np_random(n)],
             "random": [_py_random() for _ in range(n)], "cuda": None}
    if _cuda_available():
        draws["cuda"] = _torch_rand(n, device="cuda").tolist()
    return draws


@contextlib.contextmanager
def _seeding_undone():
    """Inside the block a student's seed_everything may reseed every generator and switch deterministic algorithms
    on; afterwards each generator's state (CUDA's where there is one) and the setting are as they were."""
    torch_state, np_state, py_state = _get_rng_state(), _np_get_state(), _py_getstate()
    cuda_state = _cuda_get_states() if _cuda_available() else None
    det, warn = _det_enabled(), _det_warn_only()
    try:
        yield
    finally:
        _set_rng_state(torch_state)
        _np_set_state(np_state)
        _py_setstate(py_state)
        if cuda_state is not None:
            _cuda_set_states(cuda_state)
        if (_det_enabled(), _det_warn_only()) != (det, warn):  # the first call of the setter alone takes a second
            _use_det(det, warn_only=warn)


def seed_gpu_states(seed_everything, seeds, count):
    """seed_everything(seed) for each seed in turn on a machine with `count` simulated GPUs (chapter 08's simulated
    CUDA generators, on chapter 09's simulated devices), each GPU's generator moved to a random state before each
    call, as training would leave it: every GPU generator's state (its bytes) after each call."""
    from . import checkpointing as simulated  # installed beside this module in a grading kernel: taken when used

    gpus = [simulated._SimulatedGenerator(state) for state in simulated._random_states(count, 0)]
    out = []
    with _seeding_undone(), simulated._on_gpus(gpus, (seed_everything,)):
        for k, seed in enumerate(seeds):
            simulated._move_on(gpus, 1000 + k)
            seed_everything(seed)
            out.append([g.get_state().tolist() for g in gpus])
    return out


def seed_draws(seed_everything, seeds, n=4):
    """For each seed in turn: seed_everything(seed), then n numbers from torch, numpy, random (and CUDA when
    present), and under "returned" None or the type name of what seed_everything returned. Every generator's
    state and the deterministic-algorithms setting are restored afterwards."""
    out = []
    with _seeding_undone():
        for seed in seeds:
            returned = seed_everything(seed)
            out.append(_draw(n))
            out[-1]["returned"] = None if returned is None else type(returned).__name__
    return out
