"""Chapter 08 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail."""
from __future__ import annotations

import copy
import functools
import io
import json
import math
import os
import pickle
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
from torch.utils.checkpoint import checkpoint_sequential as library_checkpoint_sequential  # bound before any check
from torch.cuda import get_rng_state_all as cuda_states, set_rng_state_all as set_cuda_states  # imported names

from grader.results import ERROR
from grader.runner import run_exercise

from tests.answers import Wrong, assert_caught, assert_passes, ids


# ---------------------------------------------------------------- correct, written differently

class AdaGradAddcmul(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, dict(lr=lr, eps=eps))

    @torch.no_grad()
    def step(self, closure=None):
        loss = torch.enable_grad()(closure)() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    g2 = self.state[p].setdefault("g2", torch.zeros_like(p))
                    g2.addcmul_(p.grad, p.grad)
                    p.addcdiv_(p.grad, (g2 + group["eps"]).sqrt(), value=-group["lr"])
        return loss


class AdaGradRsqrt(torch.optim.Optimizer):
    """No decorator: the update runs on p.data's storage through torch.no_grad() blocks; state made on first use."""

    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, {"lr": lr, "eps": eps})

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        with torch.no_grad():
            for group in self.param_groups:
                lr, eps = group["lr"], group["eps"]
                for p in (q for q in group["params"] if q.grad is not None):
                    state = self.state[p]
                    state["g2"] = state["g2"] + p.grad ** 2 if "g2" in state else p.grad ** 2
                    p -= lr * p.grad * torch.rsqrt(state["g2"] + eps)
        return loss


def _np_state_to_list():
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return [name, keys.tolist(), pos, has_gauss, cached]


def save_checkpoint_flat(model, optimizer, iteration, path):
    ckpt = {"iteration": iteration, "model_state": model.state_dict(), "optim_state": optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(), "numpy_rng": _np_state_to_list(), "python_rng": random.getstate()}
    if torch.cuda.is_available():
        ckpt["cuda_rng"] = torch.cuda.get_rng_state_all()
    torch.save(ckpt, path)


def load_checkpoint_flat(path, model, optimizer):
    ckpt = torch.load(path)  # weights_only=True is the default since torch 2.6
    model.load_state_dict(ckpt["model_state"])
    optimizer.load_state_dict(ckpt["optim_state"])
    name, keys, pos, has_gauss, cached = ckpt["numpy_rng"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    random.setstate(ckpt["python_rng"])
    torch.set_rng_state(ckpt["torch_rng"])
    if "cuda_rng" in ckpt and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(ckpt["cuda_rng"])
    return ckpt["iteration"]


def save_checkpoint_atomic(model, optimizer, iteration, path):
    """Writes through a temporary file next to path (crash-safe), with the RNGs in a list."""
    state = np.random.get_state()
    rngs = [torch.random.get_rng_state(), (state[0], torch.tensor(state[1].astype(np.int64)), *state[2:]),
            random.getstate(), [torch.cuda.get_rng_state(f"cuda:{i}") for i in range(torch.cuda.device_count())]]
    tmp = str(path) + ".partial"
    with open(tmp, "wb") as f:
        torch.save({"m": model.state_dict(), "o": optimizer.state_dict(), "it": int(iteration), "rngs": rngs}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint_atomic(path, model, optimizer):
    with open(path, "rb") as f:
        ckpt = torch.load(f, weights_only=True, map_location="cpu")
    torch_state, (name, keys, *rest), py_state, cuda = ckpt["rngs"]
    model.load_state_dict(ckpt["m"])
    optimizer.load_state_dict(ckpt["o"])
    torch.random.set_rng_state(torch_state)
    for i, cuda_state in enumerate(cuda):
        torch.cuda.set_rng_state(cuda_state, i)
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    random.setstate(py_state)
    return ckpt["it"]


def save_checkpoint_packed(model, optimizer, iteration, path):
    """Other layouts: a list; the model's tensors without names; torch's state as a list of ints, numpy's keys as
    an int32 view, random's state as JSON text, the GPUs' (torch.cuda.random's functions) as lists of ints."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    rng = {"torch": torch.get_rng_state().tolist(), "np": [name, torch.from_numpy(keys.view(np.int32)), pos, has_gauss,
                                                          cached], "py": json.dumps(random.getstate()),
           "cuda": [s.tolist() for s in torch.cuda.random.get_rng_state_all()]}
    torch.save([int(iteration), list(model.state_dict().values()), optimizer.state_dict(), rng], path)


def load_checkpoint_packed(path, model, optimizer):
    iteration, tensors, optimizer_state, rng = torch.load(path, weights_only=True)
    model.load_state_dict(dict(zip(model.state_dict(), tensors)))
    optimizer.load_state_dict(optimizer_state)
    torch.set_rng_state(torch.tensor(rng["torch"], dtype=torch.uint8))
    name, keys, pos, has_gauss, cached = rng["np"]
    np.random.set_state((name, keys.numpy().view(np.uint32), pos, has_gauss, cached))
    version, words, gauss = json.loads(rng["py"])
    random.setstate((version, tuple(words), gauss))
    if rng["cuda"]:
        torch.cuda.random.set_rng_state_all(torch.tensor(rng["cuda"], dtype=torch.uint8))
    return iteration


def save_checkpoint_bytes(model, optimizer, iteration, path):
    """The generators' states as bytes (weights_only=True reads bytes): torch's and each GPU's raw (the GPUs' read by
    names imported from torch.cuda), numpy's and random's pickled."""
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": iteration,
                "torch_rng": bytes(torch.get_rng_state().numpy()), "numpy_rng": pickle.dumps(np.random.get_state()),
                "python_rng": pickle.dumps(random.getstate()), "cuda_rng": [bytes(s.numpy()) for s in cuda_states()]},
               path)


def load_checkpoint_bytes(path, model, optimizer):
    ckpt = torch.load(path, weights_only=True)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(torch.frombuffer(bytearray(ckpt["torch_rng"]), dtype=torch.uint8))
    np.random.set_state(pickle.loads(ckpt["numpy_rng"]))
    random.setstate(pickle.loads(ckpt["python_rng"]))
    set_cuda_states([torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in ckpt["cuda_rng"]])
    return ckpt["step"]


def _flat_checkpoint(model, optimizer, iteration):
    return {"iteration": iteration, "model_state": model.state_dict(), "optim_state": optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(), "numpy_rng": _np_state_to_list(), "python_rng": random.getstate()}


def _restore_flat(ckpt, model, optimizer):
    """Everything of a _flat_checkpoint but the GPUs' generators."""
    model.load_state_dict(ckpt["model_state"])
    optimizer.load_state_dict(ckpt["optim_state"])
    name, keys, pos, has_gauss, cached = ckpt["numpy_rng"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    random.setstate(ckpt["python_rng"])
    torch.set_rng_state(ckpt["torch_rng"].cpu())
    return ckpt["iteration"]


def save_checkpoint_per_device(model, optimizer, iteration, path):
    """Each GPU's generator read with that GPU made current by torch.cuda.device(i)."""
    ckpt = _flat_checkpoint(model, optimizer, iteration)
    if torch.cuda.is_available():
        ckpt["cuda_rng"] = []
        for i in range(torch.cuda.device_count()):
            with torch.cuda.device(i):
                ckpt["cuda_rng"].append(torch.cuda.get_rng_state())
    torch.save(ckpt, path)


def load_checkpoint_set_device(path, model, optimizer):
    """Each GPU's generator restored with torch.cuda.set_device(i), then the first GPU made current again."""
    ckpt = torch.load(path, weights_only=True)
    iteration = _restore_flat(ckpt, model, optimizer)
    if torch.cuda.is_available():
        for i, state in enumerate(ckpt.get("cuda_rng", [])):
            torch.cuda.set_device(i)
            torch.cuda.set_rng_state(state)
        torch.cuda.set_device(0)
    return iteration


def save_checkpoint_set_device(model, optimizer, iteration, path):
    """Each GPU's generator read after torch.cuda.set_device(i); the device that was current made current again."""
    ckpt = _flat_checkpoint(model, optimizer, iteration)
    if torch.cuda.is_available():
        current, ckpt["cuda_rng"] = torch.cuda.current_device(), []
        for i in range(torch.cuda.device_count()):
            torch.cuda.set_device(i)
            ckpt["cuda_rng"].append(torch.cuda.get_rng_state())
        torch.cuda.set_device(current)
    torch.save(ckpt, path)


def load_checkpoint_map_location(path, model, optimizer):
    """The device-aware load: map_location="cuda" where CUDA is available (the states brought back with .cpu())."""
    ckpt = torch.load(path, map_location="cuda" if torch.cuda.is_available() else "cpu")
    iteration = _restore_flat(ckpt, model, optimizer)
    if "cuda_rng" in ckpt and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in ckpt["cuda_rng"]])
    return iteration


def atomic_mkstemp(obj, path):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise


def atomic_suffix(obj, path):
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_named_temporary(obj, path):
    folder = os.path.dirname(os.fspath(path)) or "."
    with tempfile.NamedTemporaryFile(dir=folder, delete=False) as f:
        try:
            torch.save(obj, f)
            f.flush()
            os.fdatasync(f.fileno())
        except BaseException:
            f.close()
            os.unlink(f.name)
            raise
    os.rename(f.name, path)


def atomic_buffer_first(obj, path):
    """Serialize in memory first (a crash there touches no file), then write, sync and rename; the temporary file
    removed if the write fails (a full disk)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    tmp = os.path.join(os.path.dirname(os.fspath(path)), f".{os.path.basename(os.fspath(path))}.{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(buffer.getbuffer())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_one_os_write(obj, path):
    """Buffer first, then one os.write of it: on a full disk os.write writes part of it and returns the count, which
    nothing checks, so a truncated checkpoint is fsynced and renamed onto path."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    tmp = os.path.join(os.path.dirname(os.fspath(path)), f".{os.path.basename(os.fspath(path))}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, buffer.getvalue())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def atomic_in_place_renamed_onto_itself(obj, path):
    """Not atomic: the file itself is rewritten (truncated first), then renamed onto itself to look like a publish."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with open(path, "wb") as f:
        f.write(buffer.getvalue())
        f.flush()
        os.fsync(f.fileno())
    os.replace(path, path)


def atomic_no_cleanup_when_the_write_fails(obj, path):
    """Pickled in memory first (so a crash while pickling leaves nothing), but a failed write leaves the temporary
    file behind."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    tmp = os.fspath(path) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(buffer.getvalue())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_rng_without_kept_normals(model, optimizer, iteration, path):
    """Every RNG's main state, but not the normal NumPy and random.gauss keep for their next call (both make normals
    in pairs): the keys and position of NumPy's state, the 625 words of random's."""
    _, keys, pos, _has_gauss, _cached = np.random.get_state()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iteration": iteration,
                "torch": torch.get_rng_state(), "np_keys": torch.from_numpy(keys.astype(np.int64)), "np_pos": int(pos),
                "py": list(random.getstate()[1])}, path)


def load_rng_without_kept_normals(path, model, optimizer):
    ckpt = torch.load(path, weights_only=True)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["torch"])
    np.random.set_state(("MT19937", ckpt["np_keys"].numpy().astype(np.uint32), ckpt["np_pos"]))
    random.setstate((3, tuple(ckpt["py"]), None))
    return ckpt["iteration"]


def safe_load_device(path):
    return torch.load(path, map_location=torch.device("cpu"), weights_only=True)


def safe_load_file(path):
    with open(path, "rb") as f:
        return torch.load(f, map_location="cpu", weights_only=True)


def matching_state_dict(model, state_dict):
    own = model.state_dict()
    keep = {k: v for k, v in state_dict.items() if k in own and v.shape == own[k].shape}
    model.load_state_dict(keep, strict=False)
    return [k for k in own if k in keep]


def matching_loop(model, state_dict):
    names = []
    for name, target in model.state_dict().items():  # state_dict() tensors share the model's memory
        if name in state_dict and tuple(state_dict[name].shape) == tuple(target.shape):
            target.copy_(state_dict[name])
            names.append(name)
    return names


def checkpointed_array_split(blocks, x, segments):
    blocks = list(blocks)
    if segments < 1 or segments > len(blocks):
        raise ValueError("bad number of segments")
    for part in np.array_split(np.arange(len(blocks)), segments):
        seq = torch.nn.Sequential(*[blocks[i] for i in part])
        x = checkpoint(seq, x, use_reentrant=False)
    return x


def checkpointed_rounded(blocks, x, segments):
    blocks = [b for b in blocks]
    n = len(blocks)
    if not (isinstance(segments, int) and 0 < segments <= n):
        raise ValueError(f"need 1 <= segments <= {n}")
    bounds = [round(i * n / segments) for i in range(segments + 1)]

    def run(lo, hi):
        def f(h):
            for b in blocks[lo:hi]:
                h = b(h)
            return h
        return f
    for lo, hi in zip(bounds, bounds[1:]):
        x = checkpoint(run(lo, hi), x, use_reentrant=False, preserve_rng_state=True)
    return x


def interval_sqrt(save_seconds, mtbf_seconds):
    if not (save_seconds > 0 and mtbf_seconds > 0):
        raise ValueError(f"times must be positive, got {save_seconds} and {mtbf_seconds}")
    return math.sqrt(2 * save_seconds * mtbf_seconds)


def interval_by_bisection(save_seconds, mtbf_seconds):
    """Where the waste's slope, -C/T^2 + 1/(2M), turns positive, found by bisection on T (no closed form)."""
    if not all(t > 0 for t in (save_seconds, mtbf_seconds)):  # NaN > 0 is False: refused too
        raise ValueError("save_seconds and mtbf_seconds must be > 0")
    lo, hi = 0.0, 2.0 * (save_seconds + mtbf_seconds)
    for _ in range(400):
        mid = (lo + hi) / 2
        if mid == lo or mid == hi:
            break
        lo, hi = (lo, mid) if 1 / (2 * mtbf_seconds) - save_seconds / mid ** 2 > 0 else (mid, hi)
    return (lo + hi) / 2


def interval_powers(save_seconds: float, mtbf_seconds: float) -> float:
    if math.isnan(save_seconds) or math.isnan(mtbf_seconds) or save_seconds <= 0 or mtbf_seconds <= 0:
        raise ValueError("non-positive time")
    return float((2.0 * save_seconds) ** 0.5 * mtbf_seconds ** 0.5)


CORRECT = [
    ("adagrad", [AdaGradAddcmul]), ("adagrad", [AdaGradRsqrt]),
    ("save_checkpoint", [save_checkpoint_flat, load_checkpoint_flat]),
    ("save_checkpoint", [save_checkpoint_atomic, load_checkpoint_atomic]),
    ("save_checkpoint", [save_checkpoint_packed, load_checkpoint_packed]),
    ("save_checkpoint", [save_checkpoint_bytes, load_checkpoint_bytes]),
    ("save_checkpoint", [save_checkpoint_per_device, load_checkpoint_set_device]),
    ("save_checkpoint", [save_checkpoint_set_device, load_checkpoint_map_location]),
    ("atomic_save", [atomic_mkstemp]), ("atomic_save", [atomic_suffix]), ("atomic_save", [atomic_named_temporary]),
    ("atomic_save", [atomic_buffer_first]),
    ("safe_load", [safe_load_device]), ("safe_load", [safe_load_file]),
    ("load_matching", [matching_state_dict]), ("load_matching", [matching_loop]),
    ("checkpointed_forward", [checkpointed_array_split]), ("checkpointed_forward", [checkpointed_rounded]),
    ("checkpoint_interval", [interval_sqrt]), ("checkpoint_interval", [interval_by_bisection]),
    ("checkpoint_interval", [interval_powers]),
]


@pytest.fixture
def leaves_no_files(tmp_path, monkeypatch):
    """Caught: a scenario that leaves its folders behind. Every scenario works in folders of its own (under tempfile's
    folder, here one for this test alone) and removes them, also when the student's code fails: each test of an
    answer, correct, wrong or refused, finds that folder empty after grading it."""
    folder = tmp_path / "tempfile-folder"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield
    # torchinductor_<user>: torch's own cache folder, made under tempfile's folder the first time this process imports
    # torch._inductor (an optimizer's first step does), by whichever test comes first
    assert [p for p in folder.iterdir() if not p.name.startswith("torchinductor_")] == []


@pytest.mark.usefixtures("leaves_no_files")
@pytest.mark.parametrize("name,objs", CORRECT, ids=[f"{n}-{o[0].__name__}" for n, o in CORRECT])
def test_correct_answers_pass_every_check(name, objs):
    assert_passes("checkpointing", name, *objs)


# ---------------------------------------------------------------- plausible but wrong: AdaGrad

def _adagrad(update):
    """An AdaGrad class whose step calls update(optimizer, group, p) for every p with a gradient."""
    class AdaGrad(torch.optim.Optimizer):
        def __init__(self, params, lr=1e-2, eps=1e-10):
            super().__init__(params, {"lr": lr, "eps": eps})

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        update(self, group, p)
    return AdaGrad


def _eps_outside(opt, group, p):
    g2 = opt.state[p].setdefault("g2", torch.zeros_like(p))
    g2 += p.grad ** 2
    p -= group["lr"] * p.grad / (g2.sqrt() + group["eps"])


def _default_lr(opt, group, p):
    g2 = opt.state[p].setdefault("g2", torch.zeros_like(p))
    g2 += p.grad ** 2
    p -= opt.defaults["lr"] * p.grad / (g2 + opt.defaults["eps"]).sqrt()


def _other_key(opt, group, p):
    s = opt.state[p].setdefault("sum", torch.zeros_like(p))
    s += p.grad ** 2
    p -= group["lr"] * p.grad / (s + group["eps"]).sqrt()


def _on_the_parameter(opt, group, p):
    if not hasattr(p, "g2"):
        p.g2 = torch.zeros_like(p)
    p.g2 += p.grad ** 2
    p -= group["lr"] * p.grad / (p.g2 + group["eps"]).sqrt()


def _no_accumulation(opt, group, p):
    opt.state[p]["g2"] = p.grad ** 2
    p -= group["lr"] * p.grad / (opt.state[p]["g2"] + group["eps"]).sqrt()


def _update_before_accumulating(opt, group, p):
    g2 = opt.state[p].setdefault("g2", torch.zeros_like(p))
    p -= group["lr"] * p.grad / (g2 + group["eps"]).sqrt()
    g2 += p.grad ** 2


def _changes_grad(opt, group, p):
    g2 = opt.state[p].setdefault("g2", torch.zeros_like(p))
    g2.addcmul_(p.grad, p.grad)
    p.grad.div_((g2 + group["eps"]).sqrt())
    p.sub_(group["lr"] * p.grad)


def _rebinds_data(opt, group, p):
    """A new tensor put into p.data each step: the same Parameter object, other storage."""
    g2 = opt.state[p].setdefault("g2", torch.zeros_like(p))
    g2 += p.grad ** 2
    p.data = p.data - group["lr"] * p.grad / (g2 + group["eps"]).sqrt()


def _float64_state(opt, group, p):
    g2 = opt.state[p].setdefault("g2", torch.zeros_like(p, dtype=torch.float64))
    g2 += p.grad.double() ** 2
    p -= (group["lr"] * p.grad.double() / (g2 + group["eps"]).sqrt()).to(p.dtype)


class AdaGradFromTorch(torch.optim.Adagrad):
    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, lr=lr, eps=eps)


class AdaGradNoneCrash(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                g2 = self.state[p].setdefault("g2", torch.zeros_like(p))
                g2 += p.grad * p.grad  # p.grad may be None
                p -= group["lr"] * p.grad / (g2 + group["eps"]).sqrt()


class AdaGradNoNoGrad(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, {"lr": lr, "eps": eps})

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    g2 = self.state[p].setdefault("g2", torch.zeros_like(p))
                    g2 += p.grad ** 2
                    p -= group["lr"] * p.grad / (g2 + group["eps"]).sqrt()  # in place on a leaf that requires grad


class AdaGradOwnDict(torch.optim.Optimizer):
    """Keeps g2 in a dict of its own, which state_dict() never sees."""

    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, {"lr": lr, "eps": eps})
        self.sums = {}

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    g2 = self.sums.setdefault(id(p), torch.zeros_like(p))
                    g2 += p.grad ** 2
                    p -= group["lr"] * p.grad / (g2 + group["eps"]).sqrt()


class AdaGradInnerTorch(torch.optim.Optimizer):
    """torch's Adagrad doing the update: with eps=0 and initial_accumulator_value=eps it is this very formula."""

    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    state = self.state[p]
                    if "inner" not in state:
                        state["inner"] = torch.optim.Adagrad([p], lr=group["lr"], eps=0.0,
                                                             initial_accumulator_value=group["eps"])
                    state["inner"].step()
                    state["g2"] = state["inner"].state[p]["sum"] - group["eps"]


class AdaGradFunctional(torch.optim.Optimizer):
    """torch's functional Adagrad under its public alias."""

    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        from torch.optim._functional import adagrad
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    state = self.state[p]
                    state.setdefault("g2", torch.zeros_like(p))
                    state.setdefault("step", torch.tensor(0.0))
                    adagrad([p], [p.grad], [state["g2"]], [state["step"]], lr=group["lr"], weight_decay=0.0,
                            lr_decay=0.0, eps=group["eps"], maximize=False)


def _closure_ignored(opt, group, p):
    g2 = opt.state[p].setdefault("g2", torch.zeros_like(p))
    g2 += p.grad ** 2
    p -= group["lr"] * p.grad / (g2 + group["eps"]).sqrt()


class AdaGradClosureNoGrad(torch.optim.Optimizer):
    """Calls the closure inside step's torch.no_grad(): its backward fails."""

    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    g2 = self.state[p].setdefault("g2", torch.zeros_like(p))
                    g2 += p.grad ** 2
                    p -= group["lr"] * p.grad / (g2 + group["eps"]).sqrt()
        return loss


# ---------------------------------------------------------------- plausible but wrong: checkpoints

def _saver(rngs=("torch", "numpy", "random"), optimizer=True, shift=0, iteration_as_tensor=False, raw_numpy=False,
           cuda=""):
    """cuda "all": every GPU's generator state saved where CUDA is available; "current": the current GPU's only;
    "loop": one per GPU, each read from the current GPU (no torch.cuda.device(i) around the read)."""
    def save_checkpoint(model, opt, iteration, path):
        ckpt = {"model": model.state_dict(), "iteration": iteration + shift}
        if iteration_as_tensor:
            ckpt["iteration"] = torch.tensor(iteration)
        if optimizer:
            ckpt["optimizer"] = opt.state_dict()
        if "torch" in rngs:
            ckpt["torch"] = torch.get_rng_state()
        if "numpy" in rngs:
            ckpt["numpy"] = np.random.get_state() if raw_numpy else _np_state_to_list()
        if "random" in rngs:
            ckpt["random"] = random.getstate()
        if cuda and torch.cuda.is_available():
            ckpt["cuda"] = {"all": torch.cuda.get_rng_state_all, "current": torch.cuda.get_rng_state,
                            "loop": lambda: [torch.cuda.get_rng_state() for _ in range(torch.cuda.device_count())]
                            }[cuda]()
        torch.save(ckpt, path)
    return save_checkpoint


def _loader(path, model, opt):
    ckpt = torch.load(path, weights_only=False)
    model.load_state_dict(ckpt["model"])
    if "optimizer" in ckpt:
        opt.load_state_dict(ckpt["optimizer"])
    if "torch" in ckpt:
        torch.set_rng_state(ckpt["torch"])
    if "numpy" in ckpt:
        s = ckpt["numpy"]
        np.random.set_state(s if isinstance(s, tuple) else (s[0], np.array(s[1], dtype=np.uint32), *s[2:]))
    if "random" in ckpt:
        random.setstate(ckpt["random"])
    if "cuda" in ckpt:
        (torch.cuda.set_rng_state_all if isinstance(ckpt["cuda"], list) else torch.cuda.set_rng_state)(ckpt["cuda"])
    return ckpt["iteration"]


def _loader_default(path, model, opt):
    """torch.load with its default, weights_only=True, on a checkpoint holding numpy's raw state: it raises."""
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["torch"])
    np.random.set_state(ckpt["numpy"])
    random.setstate(ckpt["random"])
    return ckpt["iteration"]


def _loader_plus_one(path, model, opt):
    return _loader(path, model, opt) + 1


def _loader_forgets_model(path, model, opt):
    ckpt = torch.load(path, weights_only=False)
    opt.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["torch"])
    s = ckpt["numpy"]
    np.random.set_state((s[0], np.array(s[1], dtype=np.uint32), *s[2:]))
    random.setstate(ckpt["random"])
    return ckpt["iteration"]


def _save_rng_beside(model, opt, iteration, path):
    """Puts the RNG states in a second file next to the checkpoint."""
    _saver(rngs=())(model, opt, iteration, path)
    torch.save({"torch": torch.get_rng_state(), "numpy": _np_state_to_list(), "random": random.getstate()},
               str(path) + ".rng")


def _load_rng_beside(path, model, opt):
    it = _loader(path, model, opt)
    rng = torch.load(str(path) + ".rng", weights_only=True)
    torch.set_rng_state(rng["torch"])
    s = rng["numpy"]
    np.random.set_state((s[0], np.array(s[1], dtype=np.uint32), *s[2:]))
    random.setstate(rng["random"])
    return it


def _loader_assigns(path, model, opt):
    """load_state_dict(assign=True): the model gets the loaded tensors as new parameters, which the optimizer built
    before never sees; it steps the old ones."""
    ckpt = torch.load(path, weights_only=False)
    model.load_state_dict(ckpt["model"], assign=True)
    opt.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["torch"])
    s = ckpt["numpy"]
    np.random.set_state((s[0], np.array(s[1], dtype=np.uint32), *s[2:]))
    random.setstate(ckpt["random"])
    return ckpt["iteration"]


_KEPT: dict = {}  # what the answers below keep in memory instead of in the file


def _keep(model, opt, path):
    _KEPT[os.path.abspath(path)] = copy.deepcopy({
        "model": model.state_dict(), "optimizer": opt.state_dict(), "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(), "random": random.getstate()})


def _save_in_memory(model, opt, iteration, path):
    """The real checkpoint in a dict keyed by path; the file holds only the iteration (review c0508, finding 6)."""
    _keep(model, opt, path)
    torch.save({"iteration": iteration}, path)


def _load_in_memory(path, model, opt):
    kept = _KEPT[os.path.abspath(path)]
    model.load_state_dict(kept["model"])
    opt.load_state_dict(copy.deepcopy(kept["optimizer"]))
    torch.set_rng_state(kept["torch"])
    np.random.set_state(kept["numpy"])
    random.setstate(kept["random"])
    return torch.load(path, weights_only=True)["iteration"]


def _save_rng_in_memory(model, opt, iteration, path):
    """The model and the optimizer in the file, the generators' states in memory (the last save's)."""
    _KEPT["rng"] = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iteration": iteration}, path)


def _load_rng_in_memory(path, model, opt):
    ckpt = torch.load(path, weights_only=True)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    torch_state, numpy_state, random_state = _KEPT["rng"]
    torch.set_rng_state(torch_state)
    np.random.set_state(numpy_state)
    random.setstate(random_state)
    return ckpt["iteration"]


def _save_also_in_memory(model, opt, iteration, path):
    """A complete file, and a copy of everything kept in memory under its path, which the loader takes instead."""
    _keep(model, opt, path)
    _saver()(model, opt, iteration, path)


def _save_cuda_in_memory(model, opt, iteration, path):
    """Every state in the file but the GPUs' generators, kept in memory (the last save's)."""
    _KEPT["cuda"] = torch.cuda.get_rng_state_all()
    _saver()(model, opt, iteration, path)


def _load_cuda_in_memory(path, model, opt):
    iteration = _loader(path, model, opt)
    torch.cuda.set_rng_state_all(_KEPT["cuda"])
    return iteration


# ---------------------------------------------------------------- plausible but wrong: files

def atomic_in_place(obj, path):
    torch.save(obj, path)


def atomic_no_cleanup(obj, path):
    tmp = str(path) + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_in_tmp(obj, path):
    fd, tmp = tempfile.mkstemp()  # in /tmp, not next to path
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        shutil.move(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_no_fsync(obj, path):
    tmp = str(path) + ".tmp"
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_swallows(obj, path):
    tmp = str(path) + ".tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except Exception:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_cleans_up_on_exception_only(obj, path):
    """Right in every way but one: `except Exception` lets Ctrl-C's KeyboardInterrupt past the clean-up."""
    tmp = str(path) + ".tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except Exception:
        os.remove(tmp)
        raise


def atomic_wraps(obj, path):
    tmp = str(path) + ".tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except Exception as e:
        os.remove(tmp)
        raise RuntimeError("could not save the checkpoint") from e


def atomic_backup_and_restore(obj, path):
    """Writes in place, but puts the old bytes back when the save fails: a real crash leaves no chance to."""
    old = Path(path).read_bytes() if os.path.exists(path) else None
    try:
        torch.save(obj, path)
    except BaseException:
        if old is None:
            os.remove(path)
        else:
            Path(path).write_bytes(old)
        raise


def atomic_copy_over(obj, path):
    tmp = str(path) + ".tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        shutil.copyfile(tmp, path)  # copies into path: not atomic
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_by_torch_helper(obj, path):
    """torch's private atomic writer (temporary in the folder, fsync, os.replace): the whole recipe in one call."""
    from torch._dynamo.aot_compile import atomic_write_binary
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_binary(os.fspath(path), buffer.getvalue())


def atomic_by_inductor(obj, path):
    """Inductor's cache writer: a temporary next to path, renamed onto it."""
    from torch._inductor.codecache import write_atomic
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_atomic(os.fspath(path), buffer.getvalue())


def atomic_fsync_first(obj, path):
    """Syncs the temporary file while it is still empty, then writes it (issue 26)."""
    tmp = str(path) + ".tmp"
    try:
        with open(tmp, "wb") as f:
            os.fsync(f.fileno())
            torch.save(obj, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_fsync_mkstemp_fd(obj, path):
    """Syncs mkstemp's descriptor at once and closes it, then torch.save writes the file by its name: unsynced."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".pt")
    os.fsync(fd)
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise


def atomic_fsync_folder(obj, path):
    """Syncs the folder (which makes the rename durable) instead of the file (whose bytes the rename publishes)."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, "partial.tmp")  # torch.save refuses a file name that starts with a dot
    try:
        torch.save(obj, tmp)
    except BaseException:
        os.remove(tmp)
        raise
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def atomic_returns_path(obj, path):
    atomic_mkstemp(obj, path)
    return path


def safe_load_no_map_location(path):
    return torch.load(path, weights_only=True)  # a file written on a GPU fails on a CPU-only machine


def safe_load_default(path):
    return torch.load(path)  # weights_only=True by default since torch 2.6, but the environment can flip it


def safe_load_unsafe(path):
    return torch.load(path, weights_only=False)


def safe_load_wraps_the_refusal(path):
    """Refuses, but as a ValueError of its own: a caller that catches pickle.UnpicklingError misses it."""
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        raise ValueError(f"unsafe checkpoint: {e}") from e


def safe_load_fallback(path):
    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError:
        return torch.load(path, weights_only=False)


def safe_load_pickle(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def safe_load_silent(path):
    try:
        return torch.load(path, weights_only=True)
    except Exception:
        return None


def safe_load_refuses_all(path):
    raise pickle.UnpicklingError("no")


def matching_data_assign(model, state_dict):
    """The same objects, new memory: each matching tensor gets `.data = ` a converted clone, so a view or a
    state_dict() entry taken before keeps the old values."""
    names = []
    tensors = dict(model.named_parameters())
    tensors.update(dict(model.named_buffers()))
    for name in model.state_dict():
        t, src = tensors.get(name), state_dict.get(name)
        if t is not None and src is not None and tuple(src.shape) == tuple(t.shape):
            t.data = src.detach().to(t.dtype).clone()
            names.append(name)
    return names


def matching_by_name(model, state_dict):
    own = model.state_dict()
    names = [k for k in own if k in state_dict]
    with torch.no_grad():
        for k in names:
            own[k].copy_(state_dict[k])  # raises on a shape mismatch
    return names


def matching_strict_false(model, state_dict):
    model.load_state_dict(state_dict, strict=False)  # raises on a shape mismatch
    return [k for k in model.state_dict() if k in state_dict]


def matching_names_by_name(model, state_dict):
    own = model.state_dict()
    with torch.no_grad():
        for k, v in own.items():
            if k in state_dict and state_dict[k].shape == v.shape:
                v.copy_(state_dict[k])
    return [k for k in own if k in state_dict]  # also names the ones it did not copy


def matching_by_numel(model, state_dict):
    own = model.state_dict()
    names = []
    with torch.no_grad():
        for k, v in own.items():
            if k in state_dict and state_dict[k].numel() == v.numel():
                v.copy_(state_dict[k].reshape(v.shape))
                names.append(k)
    return names


def matching_shares(model, state_dict):
    names = []
    for k, p in list(model.named_parameters()) + list(model.named_buffers()):
        if k in state_dict and state_dict[k].shape == p.shape:
            p.data = state_dict[k]  # the model now shares the state_dict's memory
            names.append(k)
    return [k for k in model.state_dict() if k in names]


def matching_new_parameters(model, state_dict):
    names = []
    for k, p in list(model.named_parameters()):
        if k in state_dict and state_dict[k].shape == p.shape:
            owner = model.get_submodule(k.rpartition(".")[0])
            setattr(owner, k.rpartition(".")[2], torch.nn.Parameter(state_dict[k].clone()))
            names.append(k)
    return names


def matching_state_dict_order(model, state_dict):
    own = model.state_dict()
    names = [k for k, v in state_dict.items() if k in own and v.shape == own[k].shape]
    with torch.no_grad():
        for k in names:
            own[k].copy_(state_dict[k])
    return names


def matching_parameters_only(model, state_dict):
    names = []
    with torch.no_grad():
        for k, p in model.named_parameters():
            if k in state_dict and state_dict[k].shape == p.shape:
                p.copy_(state_dict[k])
                names.append(k)
    return names


def matching_pops(model, state_dict):
    own = model.state_dict()
    names = []
    for k in list(state_dict):
        v = state_dict.pop(k)  # empties the caller's dict
        if k in own and v.shape == own[k].shape:
            own[k].copy_(v)
            names.append(k)
    return [k for k in own if k in names]


def _segments(blocks, segments):
    blocks = list(blocks)
    if not 1 <= segments <= len(blocks):
        raise ValueError("segments")
    size, extra = divmod(len(blocks), segments)
    out, start = [], 0
    for s in range(segments):
        stop = start + size + (s < extra)
        out.append(blocks[start:stop])
        start = stop
    return out


def _run(part):
    def f(h):
        for b in part:
            h = b(h)
        return h
    return f


def checkpointed_by_the_library(blocks, x, segments):
    """torch's checkpoint_sequential under another name: the forbid reaches it through its code."""
    if not 1 <= segments <= len(blocks):
        raise ValueError(f"segments={segments}")
    return library_checkpoint_sequential(torch.nn.Sequential(*blocks), segments, x, use_reentrant=False)


def _adagrad_private_kernel(opt, group, p):
    """torch's own Adagrad kernel under its private name, handed state_sum = g2 + eps and eps = 0, so that eps lands
    inside the square root; g2 read back afterwards."""
    from torch.optim.adagrad import _single_tensor_adagrad
    g2 = opt.state[p].setdefault("g2", torch.zeros_like(p))
    state_sum = g2 + group["eps"]
    _single_tensor_adagrad([p], [p.grad], [state_sum], [torch.tensor(0.0)], None, None, lr=group["lr"],
                           weight_decay=0.0, lr_decay=0.0, eps=0.0, has_sparse_grad=False, maximize=False,
                           differentiable=False, has_complex=False)
    g2.copy_(state_sum - group["eps"])


def atomic_by_fsspec(obj, path):
    """fsspec's atomic writer (installed with torch): the temporary file next to path, removed on any exception,
    os.replace'd onto path; only the fsync is the student's."""
    from fsspec.utils import atomic_write
    with atomic_write(os.fspath(path)) as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def checkpointed_in_lists(blocks, x, segments):
    """checkpointed_in_numpy with Python lists: each saved activation packed as (dtype, shape, values) and unpacked
    with torch.tensor, out of sight of torch's allocations."""
    blocks = list(blocks)
    if not 1 <= segments <= len(blocks):
        raise ValueError("segments must be between 1 and len(blocks)")
    sizes = [len(blocks) // segments + (i < len(blocks) % segments) for i in range(segments)]
    h, start = x, 0

    def pack(t):
        return t.dtype, t.shape, t.detach().reshape(-1).tolist()

    def unpack(packed):
        dtype, shape, values = packed
        return torch.tensor(values, dtype=dtype).reshape(shape)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        for size in sizes:
            for b in blocks[start:start + size]:
                h = b(h)
            start += size
    return h


def checkpointed_in_numpy(blocks, x, segments):
    """No checkpointing: a plain forward whose saved activations are packed into NumPy arrays (which torch's
    allocations do not count), with hooks that re-run each segment during backward only to be counted."""
    blocks = list(blocks)
    if not 1 <= segments <= len(blocks):
        raise ValueError("segments must be between 1 and len(blocks)")
    sizes = [len(blocks) // segments + (i < len(blocks) % segments) for i in range(segments)]
    h, start = x, 0
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.detach().numpy().copy(), torch.from_numpy):
        for size in sizes:
            part, h_in = blocks[start:start + size], h
            for b in part:
                h = b(h)

            def recount(grad, part=part, h_in=h_in.detach()):
                with torch.no_grad():
                    t = h_in
                    for b in part:
                        t = b(t)
                return grad
            h.register_hook(recount)
            start += size
    return h


def checkpointed_plain(blocks, x, segments):
    for part in _segments(blocks, segments):
        x = _run(part)(x)
    return x


def checkpointed_last_plain(blocks, x, segments):
    """checkpoint_sequential's way: the last segment runs without checkpoint."""
    parts = _segments(blocks, segments)
    for part in parts[:-1]:
        x = checkpoint(_run(part), x, use_reentrant=False)
    return _run(parts[-1])(x)


def checkpointed_last_takes_rest(blocks, x, segments):
    blocks = list(blocks)
    if not 1 <= segments <= len(blocks):
        raise ValueError("segments")
    size = len(blocks) // segments
    for s in range(segments):
        part = blocks[s * size:(s + 1) * size] if s < segments - 1 else blocks[s * size:]
        x = checkpoint(_run(part), x, use_reentrant=False)
    return x


def checkpointed_drops_remainder(blocks, x, segments):
    blocks = list(blocks)
    if not 1 <= segments <= len(blocks):
        raise ValueError("segments")
    size = len(blocks) // segments
    for s in range(segments):
        x = checkpoint(_run(blocks[s * size:(s + 1) * size]), x, use_reentrant=False)
    return x


def checkpointed_reentrant(blocks, x, segments):
    for part in _segments(blocks, segments):
        x = checkpoint(_run(part), x, use_reentrant=True)
    return x


def checkpointed_no_rng(blocks, x, segments):
    for part in _segments(blocks, segments):
        x = checkpoint(_run(part), x, use_reentrant=False, preserve_rng_state=False)
    return x


def checkpointed_sequential(blocks, x, segments):
    return torch.utils.checkpoint.checkpoint_sequential(torch.nn.Sequential(*blocks), segments, x,
                                                        use_reentrant=False)


def checkpointed_one(blocks, x, segments):
    if not 1 <= segments <= len(list(blocks)):
        raise ValueError("segments")
    return checkpoint(_run(list(blocks)), x, use_reentrant=False)


def checkpointed_no_check(blocks, x, segments):
    blocks = list(blocks)
    size, extra = divmod(len(blocks), max(segments, 1))
    start = 0
    for s in range(max(segments, 1)):
        stop = start + size + (s < extra)
        x = checkpoint(_run(blocks[start:stop]), x, use_reentrant=False)
        start = stop
    return x


def checkpointed_detached(blocks, x, segments):
    for part in _segments(blocks, segments):
        x = checkpoint(_run(part), x, use_reentrant=False)
    return x.detach()


class _AlwaysClose(torch.Tensor):
    """A tensor subclass that claims to equal anything."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.isclose, torch.Tensor.__eq__, torch.equal):
            return torch.ones(args[0].shape, dtype=torch.bool) if func is not torch.equal else True
        return super().__torch_function__(func, types, args, kwargs or {})


def _save_everything(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE


def _save_matmuls(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default) \
        else CheckpointPolicy.PREFER_RECOMPUTE


def _checkpointed_with_policy(policy):
    """Each segment checkpointed with a selective-checkpointing policy: recomputed in the backward, yet what the
    policy saves stays alive from the forward."""
    def checkpointed_forward(blocks, x, segments):
        for part in _segments(blocks, segments):
            x = checkpoint(_run(part), x, use_reentrant=False,
                           context_fn=functools.partial(create_selective_checkpoint_contexts, policy))
        return x
    return checkpointed_forward


def checkpointed_keeps_a_list(blocks, x, segments):
    """Keeps every block's output in a list the segment function closes over: the checkpoint keeps the function,
    so the list, alive until the backward."""
    outputs = []

    def run(part):
        def f(h):
            for b in part:
                h = b(h)
                outputs.append(h)
            return h
        return f
    for part in _segments(blocks, segments):
        x = checkpoint(run(part), x, use_reentrant=False)
    return x


def checkpointed_lying(blocks, x, segments):
    y = checkpointed_plain(blocks, x, segments)
    return torch.zeros(y.shape).requires_grad_().as_subclass(_AlwaysClose)


def _positive(save_seconds, mtbf_seconds):
    if save_seconds <= 0 or mtbf_seconds <= 0:
        raise ValueError("times must be positive")


def interval_without_two(save_seconds, mtbf_seconds):
    _positive(save_seconds, mtbf_seconds)
    return math.sqrt(save_seconds * mtbf_seconds)


def interval_daly(save_seconds, mtbf_seconds):
    _positive(save_seconds, mtbf_seconds)
    return math.sqrt(2 * save_seconds * mtbf_seconds) - save_seconds


def interval_in_minutes(save_seconds, mtbf_seconds):
    _positive(save_seconds, mtbf_seconds)
    return math.sqrt(2 * save_seconds * mtbf_seconds) / 60


def interval_ratio(save_seconds, mtbf_seconds):
    _positive(save_seconds, mtbf_seconds)
    return math.sqrt(2 * mtbf_seconds / save_seconds)  # not a time at all


def interval_rounded(save_seconds, mtbf_seconds):
    _positive(save_seconds, mtbf_seconds)
    return round(math.sqrt(2 * save_seconds * mtbf_seconds))  # whole seconds


def interval_tensor(save_seconds, mtbf_seconds):
    _positive(save_seconds, mtbf_seconds)
    return torch.sqrt(torch.tensor(2.0 * save_seconds * mtbf_seconds))


def interval_unchecked(save_seconds, mtbf_seconds):
    return math.sqrt(2 * abs(save_seconds) * abs(mtbf_seconds))


def interval_lets_nan_through(save_seconds, mtbf_seconds):
    """NaN <= 0 is False: a NaN time passes the test and the interval is nan."""
    if save_seconds <= 0 or mtbf_seconds <= 0:
        raise ValueError("times must be positive")
    return math.sqrt(2 * save_seconds * mtbf_seconds)


def interval_min_guard(save_seconds, mtbf_seconds):
    """min(s, m) with a NaN is NaN or the other time (NaN compares false), and NaN <= 0 is False: NaN gets through."""
    if min(save_seconds, mtbf_seconds) <= 0:
        raise ValueError("times must be positive")
    return math.sqrt(2 * save_seconds * mtbf_seconds)


W = Wrong
WRONG = [
    # AdaGrad
    W("adagrad", _adagrad(_eps_outside), "eps_inside_the_square_root",
      "eps outside the square root"),  # torch's Adagrad formula, not the exercise's sqrt(g2 + eps)
    W("adagrad", _adagrad(_default_lr), "groups_and_missing_grads",
      "parameter 2 (group 1) after step 2"),  # the defaults' lr and eps instead of the group's
    W("adagrad", _adagrad(_other_key), "one_parameter", "its state has no 'g2'"),  # the sum under another key
    W("adagrad", _adagrad(_on_the_parameter), "state_dict_round_trip",
      "keep all the state in self.state[p]"),  # the sum kept on the parameter: state_dict() never sees it
    W("adagrad", _adagrad(_no_accumulation), "one_parameter",
      "after step 2: 6 of 6 values differ"),  # this step's squared gradient only, no running sum
    W("adagrad", _adagrad(_update_before_accumulating), "one_parameter",
      "after step 1: 6 of 6 values differ"),  # updates with last step's sum (divides by sqrt(eps) at step 1)
    W("adagrad", _adagrad(_rebinds_data), "updates_in_place_grad_untouched",
      "new storage (p.data = ...)"),  # the same Parameter, new storage: a state_dict taken before misses the step
    W("adagrad", _adagrad(_float64_state), "one_parameter",
      "state['g2'] has dtype torch.float64, expected torch.float32"),  # the state in float64
    W("adagrad", AdaGradNoneCrash, "groups_and_missing_grads", "'NoneType'", status=ERROR),  # p.grad may be None
    W("adagrad", AdaGradNoNoGrad, "one_parameter", "a leaf Variable that requires grad is being used in an in-place",
      status=ERROR),  # no torch.no_grad(): in place on a leaf that requires grad
    W("adagrad", AdaGradOwnDict, "state_dict_round_trip",
      "keep all the state in self.state[p]"),  # a dict of its own, which state_dict() never sees
    # save_checkpoint / load_checkpoint
    # the normal NumPy and random.gauss keep between calls is part of their state (get_state()/getstate() whole)
    W("save_checkpoint", (save_rng_without_kept_normals, load_rng_without_kept_normals), "resumes_bit_identically",
      "differ"),
    W("save_checkpoint", (_saver(rngs=()), _loader), "every_rng_restored",
      "torch's RNG alone"),  # no RNG state at all
    W("save_checkpoint", (_saver(rngs=("torch",)), _loader), "every_rng_restored",
      "numpy's RNG alone"),  # torch's RNG only
    W("save_checkpoint", (_saver(rngs=("torch", "numpy")), _loader), "every_rng_restored",
      "random's RNG alone"),  # forgets random
    W("save_checkpoint", (_saver(rngs=("numpy", "random")), _loader), "every_rng_restored",
      "torch's RNG alone"),  # forgets torch
    W("save_checkpoint", (_saver(), _loader_plus_one), "resumes_bit_identically",
      "returned 4 for a checkpoint saved with iteration=3"),  # resumes one step late
    W("save_checkpoint", (_saver(shift=-1), _loader), "optimizer_state_and_iteration",
      "returned 1 for a checkpoint saved with iteration=2"),  # saves the iteration before
    W("save_checkpoint", (_saver(optimizer=False), _loader), "optimizer_state_and_iteration",
      "the model's or the optimizer's state"),  # no optimizer state
    W("save_checkpoint", (_saver(raw_numpy=True), _loader), "one_file_that_loads_with_weights_only",
      "weights_only=True"),  # numpy's raw state: needs weights_only=False
    W("save_checkpoint", (_saver(iteration_as_tensor=True), _loader), "optimizer_state_and_iteration",
      "return the saved iteration as an int"),  # a tensor, not an int
    W("save_checkpoint", (_saver(), _loader_forgets_model), "optimizer_state_and_iteration",
      "the model's or the optimizer's state"),  # model not loaded
    W("save_checkpoint", (_save_rng_beside, _load_rng_beside), "one_file_that_loads_with_weights_only",
      "write exactly one file, at path"),  # a second file
    W("save_checkpoint", (_saver(raw_numpy=True), _loader_default), "resumes_bit_identically",
      "store it as a tensor"),  # numpy array, weights_only load
    W("save_checkpoint", (_saver(), _loader_assigns), "resumes_bit_identically",
      "load_state_dict(..., assign=True) replaces them"),  # the optimizer steps the parameters the model dropped
    W("save_checkpoint", (_save_in_memory, _load_in_memory), "one_file_that_loads_with_weights_only",
      "the model's 0.weight, as it was at the save, is nowhere"),  # the file holds only the iteration
    W("save_checkpoint", (_save_rng_in_memory, _load_rng_in_memory), "one_file_that_loads_with_weights_only",
      "torch's RNG state, as it was at the save, is nowhere"),  # the generators' states kept in memory
    W("save_checkpoint", (_save_also_in_memory, _load_in_memory), "resumes_bit_identically",
      "moved to another folder"),  # loads what memory kept under the path, not the file
    W("save_checkpoint", (_saver(), _loader), "cuda_generators_restored",
      "the checkpoint must hold the CUDA generators' states"),  # torch's CPU generator only: a GPU's dropout differs
    W("save_checkpoint", (_saver(cuda="current"), _loader), "cuda_generators_restored",
      "only the current GPU's was restored"),  # torch.cuda.get_rng_state(): device 0 alone
    W("save_checkpoint", (_save_cuda_in_memory, _load_cuda_in_memory), "cuda_generators_restored",
      "GPU 0's CUDA RNG state, as it was at the save, is nowhere"),  # the GPUs' states kept in memory
    W("save_checkpoint", (_saver(cuda="loop"), _loader), "cuda_generators_restored",
      "only the current GPU's was restored"),  # a loop over the GPUs that reads the current one each time
    # atomic_save
    W("atomic_save", atomic_in_place, "crash_keeps_the_old_file", "writing into path itself"),
    # a failed write (a full disk), not only a failed pickling: the text asks for the temporary file removed then
    W("atomic_save", atomic_one_os_write, "a_full_disk_keeps_the_old_file", "no longer holds the old file"),
    W("atomic_save", atomic_in_place_renamed_onto_itself, "a_full_disk_keeps_the_old_file",
      "not the old file byte for byte"),
    W("atomic_save", atomic_no_cleanup_when_the_write_fails, "a_full_disk_keeps_the_old_file",
      "remove the temporary file when the save fails"),
    W("atomic_save", atomic_no_cleanup, "crash_keeps_the_old_file", "remove the temporary file"),
    W("atomic_save", atomic_in_tmp, "temporary_in_the_same_folder", "outside path's folder"),  # in /tmp
    W("atomic_save", atomic_no_fsync, "temporary_in_the_same_folder", "no os.fsync before os.replace"),
    W("atomic_save", atomic_fsync_first, "temporary_in_the_same_folder",
      "fsynced when it held 0 bytes"),  # fsync of the empty file, then the write (issue 26)
    W("atomic_save", atomic_fsync_mkstemp_fd, "temporary_in_the_same_folder",
      "os.fsync after the last write"),  # mkstemp's descriptor synced at once, the file written later by name
    W("atomic_save", atomic_fsync_folder, "temporary_in_the_same_folder",
      "was not of the temporary file"),  # the folder synced, not the file
    W("atomic_save", atomic_swallows, "crash_keeps_the_old_file",
      "but atomic_save returned normally"),  # the exception swallowed
    W("atomic_save", atomic_cleans_up_on_exception_only, "an_interrupt_keeps_the_old_file",
      "a KeyboardInterrupt is not an Exception"),  # the temporary file left behind by Ctrl-C
    W("atomic_save", atomic_wraps, "crash_keeps_the_old_file",
      "re-raise the original exception"),  # another exception raised
    W("atomic_save", atomic_backup_and_restore, "crash_keeps_the_old_file",
      "writing into path itself"),  # in place: a real crash leaves no chance to restore
    W("atomic_save", atomic_copy_over, "temporary_in_the_same_folder",
      "no os.replace(temporary, path) was seen"),  # copies into path: not atomic
    # checkpoint_interval
    W("checkpoint_interval", interval_without_two, "one_minute_save_one_failure_a_day", "the factor 2 under the root"),
    W("checkpoint_interval", interval_daly, "one_minute_save_one_failure_a_day", "Daly's higher-order correction"),
    W("checkpoint_interval", interval_daly, "grows_as_square_roots", "should double"),
    W("checkpoint_interval", interval_in_minutes, "one_minute_save_one_failure_a_day", "in minutes"),
    W("checkpoint_interval", interval_ratio, "minimizes_the_waste", "wastes less"),  # sqrt(2M/C): no time
    W("checkpoint_interval", interval_rounded, "one_minute_save_one_failure_a_day",
      "rounded to whole seconds"),  # whole seconds
    W("checkpoint_interval", interval_tensor, "one_minute_save_one_failure_a_day", "return a Python float"),
    # "raise ValueError unless both times are positive": NaN is not positive, though NaN <= 0 is False
    W("checkpoint_interval", interval_lets_nan_through, "refuses_nan",
      "should raise ValueError, but returned float nan"),
    W("checkpoint_interval", interval_min_guard, "refuses_nan", "checkpoint_interval(nan, 3600.0) should raise"),
    # safe_load
    W("safe_load", safe_load_unsafe, "refuses_code", "ran the code hidden"),  # weights_only=False
    W("safe_load", safe_load_fallback, "refuses_code", "never fall back"),  # weights_only=False when True refuses
    W("safe_load", safe_load_wraps_the_refusal, "refuses_code", "let torch's own pickle.UnpicklingError propagate"),
    W("safe_load", safe_load_pickle, "loads_tensors_and_state_dicts",
      "raised UnpicklingError"),  # pickle.load cannot read torch's format
    W("safe_load", safe_load_silent, "refuses_code", "it must raise"),  # returns None instead of refusing
    W("safe_load", safe_load_refuses_all, "loads_tensors_and_state_dicts", "raised UnpicklingError: no"),
    # load_matching
    W("load_matching", matching_data_assign, "copies_matching_names_and_shapes", "new memory (`.data = ...`"),
    W("load_matching", matching_by_name, "copies_matching_names_and_shapes",
      "must match the size of tensor b", status=ERROR),  # raises on a shape mismatch
    W("load_matching", matching_strict_false, "copies_matching_names_and_shapes",
      "Error(s) in loading state_dict", status=ERROR),  # strict=False still raises on a shape mismatch
    W("load_matching", matching_names_by_name, "copies_matching_names_and_shapes",
      "those were not copied"),  # also names the ones it did not copy
    W("load_matching", matching_by_numel, "buffers_and_other_dtypes",
      "which names ['3.weight']"),  # reshapes a transposed weight with as many elements
    W("load_matching", matching_shares, "same_shapes_everywhere",
      "shares memory with the state_dict"),  # the model now shares the state_dict's memory
    W("load_matching", matching_new_parameters, "same_shapes_everywhere",
      "replaced the model's parameters or buffers with new objects"),
    W("load_matching", matching_state_dict_order, "plain_dict_in_other_order",
      "list them in the order of model.state_dict()"),  # names in the state_dict's order
    W("load_matching", matching_pops, "copies_matching_names_and_shapes",
      "changed the state_dict it was given"),  # empties the caller's dict
    # checkpointed_forward
    W("checkpointed_forward", checkpointed_plain, "blocks_are_recomputed",
      "no block ran again during backward"),  # no checkpointing
    W("checkpointed_forward", checkpointed_last_plain, "blocks_are_recomputed",
      "were not recomputed during backward"),  # checkpoint_sequential's way: the last segment runs plain
    W("checkpointed_forward", checkpointed_last_takes_rest, "blocks_are_recomputed",
      "should have sizes that differ by at most one"),  # the last segment takes the remainder
    W("checkpointed_forward", checkpointed_drops_remainder, "same_output_and_gradients",
      "the output, against running the blocks in order"),  # the remainder blocks never run
    W("checkpointed_forward", checkpointed_reentrant, "input_without_grad",
      "does not require grad"),  # use_reentrant=True: no graph when x does not require grad
    W("checkpointed_forward", checkpointed_one, "blocks_are_recomputed",
      "backward recomputed 1 segment(s) of [7] blocks"),  # one segment, whatever segments says
    W("checkpointed_forward", checkpointed_no_check, "bad_segment_counts",
      "should raise ValueError, but returned"),  # segments not checked
    W("checkpointed_forward", checkpointed_detached, "same_output_and_gradients",
      "returned a tensor that does not require grad"),
    W("checkpointed_forward", _checkpointed_with_policy(_save_matmuls), "keeps_only_segment_boundaries",
      "10.0 activations"),  # selective checkpointing saving every Linear's output: 8 of them, plus 2
    W("checkpointed_forward", _checkpointed_with_policy(_save_everything), "keeps_only_segment_boundaries",
      "16.0 activations"),  # a policy that saves everything: recomputed, yet nothing freed
    W("checkpointed_forward", checkpointed_keeps_a_list, "keeps_only_segment_boundaries",
      "8.0 activations"),  # every block's output held in a list the checkpoint keeps alive
    W("checkpointed_forward", checkpointed_lying, "same_output_and_gradients",
      "returned _AlwaysClose, not a tensor"),  # a tensor that claims to equal anything
]


@pytest.mark.usefixtures("leaves_no_files")
@pytest.mark.parametrize("wrong", WRONG, ids=ids(WRONG))
def test_each_wrong_answer_is_caught_by_its_check(wrong):
    assert_caught("checkpointing", wrong)


def torch_defines(module_file: str, name: str) -> bool:
    """Whether torch's source defines `name` (read, not imported: importing torch._dynamo costs seconds)."""
    source = Path(torch.__file__).parent / module_file
    return source.is_file() and f"def {name}(" in source.read_text(encoding="utf-8", errors="replace")


# torch's private atomic writer is in torch 2.13, not in 2.11 (there that answer fails to import: no shortcut to name)
TORCH_ATOMIC_WRITER = torch_defines("_dynamo/aot_compile.py", "atomic_write_binary")

# Each whole-job shortcut and each requirement the exercise text states fails a public check, whose message names the
# library call or the requirement (issue 15).
REFUSED = [
    W("adagrad", AdaGradFromTorch, "one_parameter", "not call torch.optim.Adagrad.step"),  # subclassing torch's Adagrad
    W("adagrad", AdaGradInnerTorch, "one_parameter", "not call torch.optim.Adagrad.step"),  # an inner torch Adagrad
    W("adagrad", AdaGradFunctional, "one_parameter",
      "not call torch.optim._functional.adagrad"),  # torch's functional kernel
    *([W("atomic_save", atomic_by_torch_helper, "replaces_the_file",
         "not call torch._dynamo.aot_compile.atomic_write_binary")] if TORCH_ATOMIC_WRITER else []),
    W("atomic_save", atomic_by_inductor, "replaces_the_file", "not call torch._inductor.codecache.write_atomic"),
    W("atomic_save", atomic_by_fsspec, "replaces_the_file", "not call fsspec.utils.atomic_write"),  # any library's
    W("adagrad", _adagrad(_adagrad_private_kernel), "one_parameter",
      "not call torch.optim.adagrad._single_tensor_adagrad"),  # eps moved inside the root by hand
    W("checkpointed_forward", checkpointed_in_numpy, "same_output_and_gradients", "not call torch.Tensor.numpy"),
    W("checkpointed_forward", checkpointed_in_lists, "same_output_and_gradients", "not call torch.Tensor.tolist"),
    # checkpoint_sequential under another name (bound before any check): the forbid reaches it through its code
    W("checkpointed_forward", checkpointed_by_the_library, "same_output_and_gradients",
      "not call torch.utils.checkpoint.checkpoint_sequential"),
    W("checkpointed_forward", checkpointed_sequential, "same_output_and_gradients",
      "not call torch.utils.checkpoint.checkpoint_sequential"),
]
REQUIRED = [
    W("adagrad", _adagrad(_closure_ignored), "step_with_a_closure",
      "called the closure 0 times"),  # step(closure) calls it
    W("adagrad", AdaGradClosureNoGrad, "step_with_a_closure", "torch.enable_grad()"),  # ...with gradients enabled
    W("adagrad", _adagrad(_changes_grad), "updates_in_place_grad_untouched", "do not modify it"),  # p.grad unchanged
    W("atomic_save", atomic_returns_path, "replaces_the_file", "return None"),
    W("atomic_save", atomic_fsync_first, "temporary_in_the_same_folder", "after the last write"),  # fsync after writing
    W("checkpoint_interval", interval_unchecked, "refuses_non_positive_times", "should raise ValueError"),
    W("safe_load", safe_load_no_map_location, "loads_a_gpu_file_onto_the_cpu", 'map_location="cpu"'),
    W("safe_load", safe_load_default, "refuses_code_whatever_the_default", "pass weights_only=True explicitly"),
    W("checkpointed_forward", checkpointed_no_rng, "dropout_draws_the_same_mask",
      "preserve_rng_state=True"),  # dropout masks redrawn
    W("load_matching", matching_parameters_only, "buffers_and_other_dtypes", "1.running_mean"),  # buffers copied too
]


@pytest.mark.usefixtures("leaves_no_files")
@pytest.mark.parametrize("wrong", REFUSED + REQUIRED, ids=ids(REFUSED + REQUIRED))
def test_public_checks_name_the_shortcut_or_the_requirement(wrong):
    assert_caught("checkpointing", wrong, public_only=True)


class AdaGradStub(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        raise NotImplementedError


def _stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("name,count", [("adagrad", 1), ("save_checkpoint", 2), ("atomic_save", 1), ("safe_load", 1),
                                        ("load_matching", 1), ("checkpointed_forward", 1),
                                        ("checkpoint_interval", 1)])
def test_stubs_are_not_implemented_and_score_nothing(name, count):
    """A stub is `not_implemented` in every check, even where a scenario records the student's exceptions as data."""
    objs = [AdaGradStub] if name == "adagrad" else [_stub] * count
    r = run_exercise(f"checkpointing.{name}", *objs, hidden=True)
    assert r.status == "not_implemented" and r.score == 0
    assert all(c.status == "not_implemented" for c in r.checks), [(c.name, c.status) for c in r.checks]


# ---------------------------------------------------------------- the same in a grading kernel

KERNEL_IMPORTS = ("import math, os, pickle, random, shutil, tempfile\nimport numpy as np\nimport torch\nimport torch.nn as nn\n"
                  "import torch.nn.functional as F\nfrom torch.utils.checkpoint import checkpoint\n")
KERNEL_WRONG = '''
def atomic_exception_only(obj, path):
    tmp = str(path) + ".tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except Exception:
        os.remove(tmp)
        raise

def atomic_in_place(obj, path):
    torch.save(obj, path)

def atomic_one_os_write(obj, path):
    import io
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    tmp = str(path) + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, buffer.getvalue())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)

def atomic_in_tmp(obj, path):
    fd, tmp = tempfile.mkstemp()
    with os.fdopen(fd, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    shutil.move(tmp, path)

def save_without_rng(model, optimizer, iteration, path):
    torch.save({"m": model.state_dict(), "o": optimizer.state_dict(), "it": iteration}, path)

def load_without_rng(path, model, optimizer):
    ckpt = torch.load(path, weights_only=True)
    model.load_state_dict(ckpt["m"])
    optimizer.load_state_dict(ckpt["o"])
    return ckpt["it"]

def load_one_late(path, model, optimizer):
    return load_checkpoint(path, model, optimizer) + 1

_KEPT = {}

def save_in_memory(model, optimizer, iteration, path):
    import copy
    _KEPT[os.path.abspath(path)] = copy.deepcopy({"m": model.state_dict(), "o": optimizer.state_dict(),
                                                  "rng": (torch.get_rng_state(), np.random.get_state(),
                                                          random.getstate())})
    torch.save({"it": iteration}, path)

def load_in_memory(path, model, optimizer):
    kept = _KEPT[os.path.abspath(path)]
    model.load_state_dict(kept["m"])
    optimizer.load_state_dict(kept["o"])
    torch.set_rng_state(kept["rng"][0])
    np.random.set_state(kept["rng"][1])
    random.setstate(kept["rng"][2])
    return torch.load(path, weights_only=True)["it"]

def safe_load_fallback(path):
    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError:
        return torch.load(path, weights_only=False)

def matching_by_name(model, state_dict):
    own = model.state_dict()
    names = [k for k in own if k in state_dict]
    for k in names:
        own[k].copy_(state_dict[k])
    return names

def checkpointed_last_plain(blocks, x, segments):
    blocks = list(blocks)
    size, extra = divmod(len(blocks), segments)
    parts, start = [], 0
    for s in range(segments):
        parts.append(blocks[start:start + size + (s < extra)])
        start += size + (s < extra)
    def run(part):
        def f(h):
            for b in part:
                h = b(h)
            return h
        return f
    for part in parts[:-1]:
        x = checkpoint(run(part), x, use_reentrant=False)
    return run(parts[-1])(x)

class AdaGradOutside(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    g2 = self.state[p].setdefault("g2", torch.zeros_like(p))
                    g2 += p.grad ** 2
                    p -= group["lr"] * p.grad / (g2.sqrt() + group["eps"])

class AdaGradStub(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, {"lr": lr, "eps": eps})

    def step(self, closure=None):
        raise NotImplementedError

class AdaGradFromTorch(torch.optim.Adagrad):
    def __init__(self, params, lr=1e-2, eps=1e-10):
        super().__init__(params, lr=lr, eps=eps)

def atomic_by_inductor(obj, path):
    import io
    from torch._inductor.codecache import write_atomic
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_atomic(os.fspath(path), buffer.getvalue())

def atomic_fsync_first(obj, path):
    tmp = str(path) + ".tmp"
    try:
        with open(tmp, "wb") as f:
            os.fsync(f.fileno())
            torch.save(obj, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise

def checkpointed_keeps_a_list(blocks, x, segments):
    outputs = []
    blocks = list(blocks)
    size, extra = divmod(len(blocks), segments)
    start = 0
    for s in range(segments):
        part = blocks[start:start + size + (s < extra)]
        start += len(part)
        def f(h, part=part):
            for b in part:
                h = b(h)
                outputs.append(h)
            return h
        x = checkpoint(f, x, use_reentrant=False)
    return x

def interval_daly(save_seconds, mtbf_seconds):
    if save_seconds <= 0 or mtbf_seconds <= 0:
        raise ValueError("times must be positive")
    return (2 * save_seconds * mtbf_seconds) ** 0.5 - save_seconds

def stub(*args):
    raise NotImplementedError
'''
SOLVED = {"adagrad": ["AdaGrad"], "save_checkpoint": ["save_checkpoint", "load_checkpoint"],
          "atomic_save": ["atomic_save"], "safe_load": ["safe_load"], "load_matching": ["load_matching"],
          "checkpointed_forward": ["checkpointed_forward"], "checkpoint_interval": ["checkpoint_interval"]}
KERNEL_WRONG_NAMES = [("adagrad", ["AdaGradOutside"]), ("save_checkpoint", ["save_without_rng", "load_without_rng"]),
                      ("save_checkpoint", ["save_checkpoint", "load_one_late"]),
                      ("save_checkpoint", ["save_in_memory", "load_in_memory"]), ("atomic_save", ["atomic_in_place"]),
                      ("atomic_save", ["atomic_in_tmp"]), ("atomic_save", ["atomic_one_os_write"]),
                      ("safe_load", ["safe_load_fallback"]),
                      ("load_matching", ["matching_by_name"]), ("checkpointed_forward", ["checkpointed_last_plain"]),
                      ("checkpoint_interval", ["interval_daly"])]


@pytest.fixture(scope="module")
def kernel_bridge(grading_bridge):
    import nbformat

    solution = nbformat.read(Path(__file__).resolve().parents[1] / "solutions" / "08_checkpointing.ipynb", as_version=4)
    exercises = [c.source for c in solution.cells if c.cell_type == "code" and "### BEGIN SOLUTION" in c.source]
    return grading_bridge([KERNEL_IMPORTS, *exercises, KERNEL_WRONG], cell_timeout=120, check_timeout=60, memory_gib=4)


def grade_in_kernel(bridge, name, names):
    import time

    from grader import registry
    from grader.autograde.bridge import RemoteFunction
    from grader.runner import run_check

    ex = registry.load(hidden=True).get(f"checkpointing.{name}")
    objs = tuple(RemoteFunction(bridge, n, ex) for n in names)
    results = []
    for check in ex.checks:
        bridge.limit, bridge.deadline = 60, time.monotonic() + 60
        results.append(run_check(ex, check, objs, timeout=None))
    return results


def test_in_a_grading_kernel_solutions_pass_wrong_answers_fail_stubs_are_not_implemented(kernel_bridge):
    """The scenarios' data crosses the bridge, the stubs stay stubs, and watching renames and fsyncs (an audit hook,
    os.fsync wrapped for the call) is not mistaken for the notebook tampering with the grader."""
    for name, names in SOLVED.items():
        failing = [(r.name, r.status, r.message) for r in grade_in_kernel(kernel_bridge, name, names) if not r.passed]
        assert not failing, (name, failing)
    for name, names in KERNEL_WRONG_NAMES:
        assert not all(r.passed for r in grade_in_kernel(kernel_bridge, name, names)), (name, names)
    for name, count in [("adagrad", 1), ("save_checkpoint", 2), ("atomic_save", 1), ("safe_load", 1),
                        ("load_matching", 1), ("checkpointed_forward", 1), ("checkpoint_interval", 1)]:
        names = ["AdaGradStub"] if name == "adagrad" else ["stub"] * count
        statuses = {r.status for r in grade_in_kernel(kernel_bridge, name, names)}
        assert statuses == {"not_implemented"}, (name, statuses)
    # shortcuts are refused in the kernel too, by name: a forbidden call inside a scenario, a library rename
    for name, names, words in [("adagrad", ["AdaGradFromTorch"], "not call torch.optim.Adagrad.step"),
                               ("atomic_save", ["atomic_by_inductor"], "not call torch._inductor.codecache.write_atomic")]:
        messages = " | ".join(r.message for r in grade_in_kernel(kernel_bridge, name, names) if not r.passed)
        assert words in messages, (name, messages)
    # what the scenarios measure crosses the bridge: a file's identity at fsync and at rename, the bytes a forward kept,
    # what a checkpoint file holds
    for name, names, check, words in [
            ("atomic_save", ["atomic_fsync_first"], "temporary_in_the_same_folder", "fsynced when it held 0 bytes"),
            ("atomic_save", ["atomic_exception_only"], "an_interrupt_keeps_the_old_file",
             "a KeyboardInterrupt is not an Exception"),
            # the file size limit (a full disk) is set in the kernel, not only in this process
            ("atomic_save", ["atomic_one_os_write"], "a_full_disk_keeps_the_old_file", "no longer holds the old file"),
            ("checkpointed_forward", ["checkpointed_keeps_a_list"], "keeps_only_segment_boundaries", "8.0 activations"),
            ("save_checkpoint", ["save_in_memory", "load_in_memory"], "one_file_that_loads_with_weights_only",
             "the model's 0.weight, as it was at the save, is nowhere")]:
        results = {r.name: r for r in grade_in_kernel(kernel_bridge, name, names)}
        assert not results[check].passed and words in results[check].message, (name, results[check].message)
    kernel_bridge.probe()
    assert not kernel_bridge.tampered, kernel_bridge.tampered

