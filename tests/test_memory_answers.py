"""Chapter 03 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from grader.runner import run_exercise

STATES = {"sgd": 0, "momentum": 1, "adagrad": 1, "adam": 2}


# ---------------------------------------------------------------- correct, written differently

def nbytes_meta(shape, dtype):
    return torch.empty(tuple(shape), dtype=dtype, device="meta").nbytes


def nbytes_bits(shape, dtype):
    bits = torch.finfo(dtype).bits if dtype.is_floating_point or dtype.is_complex and False else None
    size = torch.tensor([], dtype=dtype).element_size()
    return int(math.prod(shape)) * size


def training_table(num_params, num_activations, optimizer, dtype=torch.float32):
    table = {"sgd": 0, "momentum": 1, "adagrad": 1, "adam": 2}
    if optimizer not in table:
        raise ValueError(optimizer)
    b = torch.empty(0, dtype=dtype).element_size()
    out = dict(params=num_params * b, grads=num_params * b, optimizer_state=table[optimizer] * num_params * b,
               activations=num_activations * b)
    out["total"] = sum(out.values())
    return out


def compact_empty_copy(x):
    out = torch.empty(x.shape, dtype=x.dtype)
    out.copy_(x)
    return out


def compact_if_needed(x):
    if x.is_contiguous() and x.untyped_storage().nbytes() == x.numel() * x.element_size():
        return x
    return x.clone(memory_format=torch.contiguous_format)


def batch_from_numpy(data, batch_size, context_length, device):
    if len(data) < context_length + 1:
        raise ValueError("too short")
    starts = np.random.randint(0, len(data) - context_length, size=batch_size)
    x = np.stack([data[s:s + context_length] for s in starts]).astype(np.int64)
    y = np.stack([data[s + 1:s + 1 + context_length] for s in starts]).astype(np.int64)
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def batch_zero_copy(data, batch_size, context_length, device):
    n = len(data) - context_length
    if n < 1:
        raise ValueError("data shorter than one window")
    tokens = torch.from_numpy(data)  # shares the memmap's pages, reads nothing yet
    starts = torch.randint(n, (batch_size,))
    rows = starts[:, None] + torch.arange(context_length + 1)
    window = tokens[rows].long()
    return window[:, :-1].to(device), window[:, 1:].to(device)


CORRECT = [
    ("get_memory_usage", lambda x: x.numel() * x.element_size()),
    ("get_memory_usage", lambda x: x.nelement() * torch.empty((), dtype=x.dtype).element_size()),
    ("tensor_nbytes", nbytes_meta), ("tensor_nbytes", nbytes_bits),
    ("training_memory", training_table),
    ("max_params", lambda memory_bytes, bytes_per_param: int(memory_bytes // bytes_per_param)),
    ("max_params", lambda m, b: math.floor(m / b) if isinstance(m, int) and isinstance(b, int) and m < 2**52
     else int(m // b)),
    ("compact", lambda x: x.clone()), ("compact", compact_empty_copy), ("compact", compact_if_needed),
    ("get_batch", batch_from_numpy), ("get_batch", batch_zero_copy),
]


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CORRECT)])
def test_correct_answers_pass_every_check(name, fn):
    r = run_exercise(f"memory.{name}", fn, hidden=True)
    failing = [(c.name, c.message) for c in r.checks if not c.passed]
    assert r.status == "passed" and not failing, failing


# ---------------------------------------------------------------- plausible but wrong

def batch_never_last(data, batch_size, context_length, device):
    if len(data) < context_length + 1:
        raise ValueError("too short")
    starts = torch.randint(len(data) - context_length - 1, (batch_size,))  # off by one: the last window never
    x = torch.stack([torch.from_numpy(data[s:s + context_length].astype(np.int64)) for s in starts])
    y = torch.stack([torch.from_numpy(data[s + 1:s + 1 + context_length].astype(np.int64)) for s in starts])
    return x.to(device), y.to(device)


def batch_reads_everything(data, batch_size, context_length, device):
    tokens = torch.tensor(np.array(data), dtype=torch.int64)  # the whole file in memory
    if len(tokens) < context_length + 1:
        raise ValueError("too short")
    starts = torch.randint(len(tokens) - context_length, (batch_size,))
    rows = starts[:, None] + torch.arange(context_length + 1)
    return tokens[rows][:, :-1].to(device), tokens[rows][:, 1:].to(device)


def batch_unshifted(data, batch_size, context_length, device):
    x, _ = batch_from_numpy(data, batch_size, context_length, device)
    return x, x.clone()


def batch_uint16(data, batch_size, context_length, device):
    x, y = batch_zero_copy(data, batch_size, context_length, device)
    return x.to(torch.int32), y.to(torch.int32)


def batch_no_check(data, batch_size, context_length, device):
    starts = torch.randint(max(1, len(data) - context_length), (batch_size,))
    rows = (starts[:, None] + torch.arange(context_length + 1)).clamp(max=len(data) - 1)
    window = torch.from_numpy(data)[rows].long()
    return window[:, :-1], window[:, 1:]


def training_adam_one_state(num_params, num_activations, optimizer, dtype=torch.float32):
    out = training_table(num_params, num_activations, "momentum" if optimizer == "adam" else optimizer, dtype)
    return out


def training_four_bytes(num_params, num_activations, optimizer, dtype=torch.float32):
    return training_table(num_params, num_activations, optimizer, torch.float32)


def training_no_grads(num_params, num_activations, optimizer, dtype=torch.float32):
    out = training_table(num_params, num_activations, optimizer, dtype)
    out["total"] -= out["grads"]
    return out


WRONG = [
    ("get_memory_usage", lambda x: x.numel() * 4),
    ("get_memory_usage", lambda x: x.untyped_storage().nbytes()),
    ("get_memory_usage", lambda x: float(x.numel() * x.element_size())),
    ("get_memory_usage", lambda x: torch.tensor(x.numel() * x.element_size())),
    ("tensor_nbytes", lambda shape, dtype: torch.empty(tuple(shape), dtype=dtype).nbytes),
    ("tensor_nbytes", lambda shape, dtype: int(math.prod(shape)) * 4),
    ("training_memory", training_adam_one_state), ("training_memory", training_four_bytes),
    ("training_memory", training_no_grads),
    ("max_params", lambda m, b: math.ceil(m / b)), ("max_params", lambda m, b: m / b),
    ("max_params", lambda m, b: int(b // m)),
    ("compact", lambda x: x.contiguous()), ("compact", lambda x: x.view(x.shape) if x.is_contiguous() else x.clone()),
    ("compact", lambda x: x.detach()),
    ("get_batch", batch_never_last), ("get_batch", batch_reads_everything), ("get_batch", batch_unshifted),
    ("get_batch", batch_uint16), ("get_batch", batch_no_check),
]


@pytest.mark.parametrize("name,fn", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_plausible_wrong_answers_fail(name, fn):
    r = run_exercise(f"memory.{name}", fn, hidden=True)
    assert r.status in ("failed", "error") and r.score < r.points


@pytest.mark.parametrize("name,fn", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_wrong_answers_get_a_readable_message(name, fn):
    r = run_exercise(f"memory.{name}", fn)
    for c in r.checks:
        if not c.passed:
            assert c.message and "Traceback" not in c.message and len(c.message) < 600


def test_public_checks_catch_the_classic_mistakes():
    """numel()*4, the storage of a view, a compact that returns a view, the last window never drawn,
    the whole memmap read into memory."""
    for name, fn in [WRONG[0], WRONG[1], WRONG[12], WRONG[15], WRONG[16]]:
        assert run_exercise(f"memory.{name}", fn).status != "passed", name
