"""Chapter 03 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail."""
from __future__ import annotations

import functools
import math
import random
import resource
import sys

import numpy as np
import pytest
import torch

from grader.results import ERROR
from grader.runner import run_exercise

from tests.answers import Wrong, assert_caught, assert_passes, failures, ids

W = Wrong


def as_in_the_kernel(answer):
    """`answer` under an address-space limit, as the grading kernel runs it (RLIMIT_AS, launch.py): without one, a
    machine that overcommits memory (vm.overcommit_memory=1, as the H200's did) lets a 4 TB torch.zeros start
    filling the RAM, and the kernel's out-of-memory killer ends this test process instead of the answer."""
    if sys.platform != "linux":
        return answer

    @functools.wraps(answer)
    def limited(*args, **kwargs):
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/status", encoding="ascii") as f:
            used = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        cap = used + 2**40  # 1 TiB more than now
        resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
        try:
            return answer(*args, **kwargs)
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    return limited

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")


# ---------------------------------------------------------------- correct, written differently

def nbytes_meta(shape, dtype):
    return torch.empty(tuple(shape), dtype=dtype, device="meta").nbytes


def nbytes_itemsize(shape, dtype):
    n = 1
    for d in shape:
        n *= int(d)
    return n * dtype.itemsize


def nbytes_one_element(shape, dtype):
    return int(math.prod(shape)) * torch.empty(0, dtype=dtype).element_size()


def training_table(num_params, num_activations, optimizer, dtype=torch.float32):
    table = {"sgd": 0, "momentum": 1, "adagrad": 1, "adam": 2}
    if optimizer not in table:
        raise ValueError(optimizer)
    b = torch.empty(0, dtype=dtype).element_size()
    out = dict(params=num_params * b, grads=num_params * b, optimizer_state=table[optimizer] * num_params * b,
               activations=num_activations * b)
    out["total"] = sum(out.values())
    return out


def training_match(num_params, num_activations, optimizer, dtype=torch.float32):
    match optimizer:
        case "sgd":
            states = 0
        case "momentum" | "adagrad":
            states = 1
        case "adam":
            states = 2
        case _:
            raise ValueError(f"no such optimizer: {optimizer}")
    size = dtype.itemsize
    params = grads = num_params * size
    return {"params": params, "grads": grads, "optimizer_state": states * params,
            "activations": num_activations * size, "total": (2 + states) * params + num_activations * size}


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


def batch_fancy_index(data, batch_size, context_length, device):
    last = len(data) - context_length - 1
    if last < 0:
        raise ValueError("need context_length + 1 tokens")
    starts = np.array([random.randint(0, last) for _ in range(batch_size)])  # randint includes its bound
    window = torch.tensor(data[starts[:, None] + np.arange(context_length + 1)].astype(np.int64), device=device)
    return window[:, :-1], window[:, 1:]


CORRECT = [
    ("get_memory_usage", lambda x: x.numel() * x.element_size()),
    ("get_memory_usage", lambda x: x.nelement() * torch.empty((), dtype=x.dtype).element_size()),
    ("get_memory_usage", lambda x: x.nbytes),
    ("get_memory_usage", lambda x: math.prod(x.shape) * x.dtype.itemsize),
    ("tensor_nbytes", nbytes_meta), ("tensor_nbytes", nbytes_itemsize), ("tensor_nbytes", nbytes_one_element),
    ("training_memory", training_table), ("training_memory", training_match),
    ("max_params", lambda memory_bytes, bytes_per_param: int(memory_bytes // bytes_per_param)),
    ("max_params", lambda m, b: math.floor(m / b)),
    ("compact", lambda x: x.clone()), ("compact", compact_empty_copy), ("compact", compact_if_needed),
    ("compact", lambda x: torch.empty_like(x, memory_format=torch.contiguous_format).copy_(x)),
    ("compact", lambda x: x.detach().clone().contiguous()),
    ("get_batch", batch_from_numpy), ("get_batch", batch_zero_copy), ("get_batch", batch_fancy_index),
]


# ---------------------------------------------------------------- activation_bytes

def activation_formula(block, batch, seq, d_model, n_heads, d_ff, dtype):
    size, tokens = dtype.itemsize, batch * seq
    if block == "mlp":
        return tokens * (d_model + 2 * d_ff) * size
    return (tokens * (8 * d_model + 2 * d_ff + 4) + batch * n_heads * seq * seq) * size + seq * seq


def activation_by_layer(block, batch, seq, d_model, n_heads, d_ff, dtype):
    """Layer by layer, one saved tensor at a time, through tensor_nbytes-style shapes."""
    nbytes = lambda *shape, kind=dtype: math.prod(shape) * torch.empty((), dtype=kind).element_size()
    mlp = [nbytes(batch, seq, d_model), nbytes(batch, seq, d_ff), nbytes(batch, seq, d_ff)]
    if block == "mlp":
        return sum(mlp)
    head = d_model // n_heads
    saved = [nbytes(batch, seq, d_model), nbytes(batch, seq, 1), nbytes(batch, seq, 1),   # LayerNorm 1
             nbytes(batch, seq, d_model),                                                 # Q, K, V's input
             nbytes(batch * n_heads, seq, head), nbytes(batch * n_heads, head, seq),      # q, k
             nbytes(seq, seq, kind=torch.bool),                                           # the causal mask
             nbytes(batch, n_heads, seq, seq),                                            # softmax output
             nbytes(batch * n_heads, seq, head),                                          # v
             nbytes(batch, seq, d_model),                                                 # O's input
             nbytes(batch, seq, d_model), nbytes(batch, seq, 1), nbytes(batch, seq, 1)]   # LayerNorm 2
    return sum(saved) + sum(mlp)


def activation_meta(block, batch, seq, d_model, n_heads, d_ff, dtype):
    """Per token and per sequence, in bits, then bytes."""
    bits = torch.finfo(dtype).bits
    per_token = d_model + 2 * d_ff if block == "mlp" else 8 * d_model + 2 * d_ff + 4
    attention = 0 if block == "mlp" else batch * n_heads * seq * seq * bits + seq * seq * 8
    return (batch * seq * per_token * bits + attention) // 8


CORRECT += [("activation_bytes", activation_formula), ("activation_bytes", activation_by_layer),
            ("activation_bytes", activation_meta)]


def _act(block, b, s, d, h, f, dtype, *, per_token=None, softmax=None, mask=None, size=None, extra=0,
         mlp_per_token=None):
    """The right count with one part changed, for the named mistakes below (`per_token` is the block's)."""
    size = dtype.itemsize if size is None else size
    if block == "mlp":
        return b * s * (d + 2 * f if mlp_per_token is None else mlp_per_token) * size + extra
    per_token = 8 * d + 2 * f + 4 if per_token is None else per_token
    softmax = b * h * s * s if softmax is None else softmax
    mask = s * s if mask is None else mask
    return (b * s * per_token + softmax) * size + mask + extra


def _params(block, d, f):
    mlp = d * f + f + f * d + d
    return mlp if block == "mlp" else mlp + 4 * (d * d + d) + 4 * d


# The named mistakes, each with the public check that catches it first and what its message says.
ACTIVATION_WRONG = {
    "forgets the GELU input": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, mlp_per_token=d + f,
                                                             per_token=8 * d + f + 4),
        "tiny_blocks_by_hand", "GELU saves its input"),
    "counts parameters as activations": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, extra=_params(B, d, f) * t.itemsize),
        "tiny_blocks_by_hand", "counts the parameters"),
    "forgets the dtype size (elements)": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, size=1),
        "tiny_blocks_by_hand", "counts elements"),
    "always 4 bytes per value": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, size=4),
        "agrees_with_saved_tensors_hooks", "returned 2,880; autograd saves 1,440 bytes"),
    "softmax output once, not per head": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, softmax=b * s * s),
        "tiny_blocks_by_hand", "every one of the n_heads heads"),
    "softmax output counted twice": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, softmax=2 * b * h * s * s),
        "tiny_blocks_by_hand", "counted twice"),
    "forgets the softmax output": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, softmax=0),
        "tiny_blocks_by_hand", "softmax output is missing"),
    "forgets the causal mask": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, mask=0),
        "tiny_blocks_by_hand", "causal mask is missing"),
    "mask in the dtype": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, mask=s * s * t.itemsize),
        "tiny_blocks_by_hand", "1 byte per entry"),
    "mask per sequence and head": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, mask=b * h * s * s),
        "tiny_blocks_by_hand", "shared by the batch and heads"),
    "forgets the LayerNorm statistics": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, per_token=8 * d + 2 * f),
        "tiny_blocks_by_hand", "statistics are missing"),
    "forgets q, k, v": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, per_token=5 * d + 2 * f + 4),
        "tiny_blocks_by_hand", "q, k and v are missing"),
    "forgets the block's input": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: _act(B, b, s, d, h, f, t, mlp_per_token=2 * f,
                                                             per_token=7 * d + 2 * f + 4),
        "tiny_blocks_by_hand", "d_model-wide tensor per token missing"),
    "a float": W(
        "activation_bytes", lambda B, b, s, d, h, f, t: float(_act(B, b, s, d, h, f, t)),
        "tiny_blocks_by_hand", "Python int"),
}


def activation_recorded(block, batch, seq, d_model, n_heads, d_ff, dtype):
    """The shortcut: build the block and let autograd tell (refused, and it cannot reach real sizes)."""
    from grader.exercises.memory import saved_bytes
    return saved_bytes(block, batch, seq, d_model, n_heads, d_ff, dtype)["total"]


def activation_recorded_by_path(block, batch, seq, d_model, n_heads, d_ff, dtype):
    import torch.autograd.graph
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        pass
    return activation_formula(block, batch, seq, d_model, n_heads, d_ff, dtype)


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CORRECT)])
def test_correct_answers_pass_every_check(name, fn):
    assert_passes("memory", name, fn)


# ---------------------------------------------------------------- plausible but wrong

def batch_never_last(data, batch_size, context_length, device):
    if len(data) < context_length + 1:
        raise ValueError("too short")
    starts = torch.randint(len(data) - context_length - 1, (batch_size,))  # off by one: the last window never
    x = torch.stack([torch.from_numpy(data[s:s + context_length].astype(np.int64)) for s in starts])
    y = torch.stack([torch.from_numpy(data[s + 1:s + 1 + context_length].astype(np.int64)) for s in starts])
    return x.to(device), y.to(device)


def batch_one_past_last(data, batch_size, context_length, device):
    if len(data) < context_length + 1:
        raise ValueError("too short")
    starts = [random.randint(0, len(data) - context_length) for _ in range(batch_size)]  # one start too many
    window = [np.asarray(data[s:s + context_length + 1], dtype=np.int64) for s in starts]
    x = torch.tensor(np.stack([w[:-1] for w in window]))
    y = torch.tensor(np.stack([w[1:] for w in window]))
    return x.to(device), y.to(device)


def batch_reads_everything(data, batch_size, context_length, device):
    tokens = torch.tensor(np.array(data), dtype=torch.int64)  # the whole file in memory
    if len(tokens) < context_length + 1:
        raise ValueError("too short")
    starts = torch.randint(len(tokens) - context_length, (batch_size,))
    rows = starts[:, None] + torch.arange(context_length + 1)
    return tokens[rows][:, :-1].to(device), tokens[rows][:, 1:].to(device)


def batch_astype_everything(data, batch_size, context_length, device):
    return batch_zero_copy(data.astype(np.int64), batch_size, context_length, device)  # converts the whole file


def batch_from_file(data, batch_size, context_length, device):
    return batch_from_numpy(np.fromfile(data.filename, dtype=np.uint16), batch_size, context_length, device)


def batch_long_everything(data, batch_size, context_length, device):
    tokens = torch.from_numpy(data).long()  # a zero-copy view, then a full int64 copy
    if len(tokens) < context_length + 1:
        raise ValueError("too short")
    rows = torch.randint(len(tokens) - context_length, (batch_size,))[:, None] + torch.arange(context_length + 1)
    return tokens[rows][:, :-1].to(device), tokens[rows][:, 1:].to(device)


def batch_unshifted(data, batch_size, context_length, device):
    x, _ = batch_from_numpy(data, batch_size, context_length, device)
    return x, x.clone()


def batch_int32(data, batch_size, context_length, device):
    x, y = batch_zero_copy(data, batch_size, context_length, device)
    return x.to(torch.int32), y.to(torch.int32)


def batch_uint16(data, batch_size, context_length, device):
    if len(data) < context_length + 1:
        raise ValueError("too short")
    starts = np.random.randint(0, len(data) - context_length, size=batch_size)
    x = np.stack([data[s:s + context_length] for s in starts])  # stays uint16
    y = np.stack([data[s + 1:s + 1 + context_length] for s in starts])
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def batch_numpy_arrays(data, batch_size, context_length, device):
    x, y = batch_from_numpy(data, batch_size, context_length, device)
    return x.numpy(), y.numpy()


def batch_no_check(data, batch_size, context_length, device):
    starts = torch.randint(max(1, len(data) - context_length), (batch_size,))
    rows = (starts[:, None] + torch.arange(context_length + 1)).clamp(max=len(data) - 1)
    window = torch.from_numpy(data)[rows].long()
    return window[:, :-1], window[:, 1:]


def batch_one_start(data, batch_size, context_length, device):
    if len(data) < context_length + 1:
        raise ValueError("too short")
    s = int(torch.randint(len(data) - context_length, ()))  # one start repeated for the whole batch
    w = torch.from_numpy(data[s:s + context_length + 1].astype(np.int64))
    return w[:-1].repeat(batch_size, 1).to(device), w[1:].repeat(batch_size, 1).to(device)


def batch_ignores_device(data, batch_size, context_length, device):
    return batch_zero_copy(data, batch_size, context_length, "cpu")


def batch_same_every_call(data, batch_size, context_length, device):
    if len(data) < context_length + 1:
        raise ValueError("too short")
    g = torch.Generator().manual_seed(0)  # a fixed generator: the same windows on every call
    rows = torch.randint(len(data) - context_length, (batch_size,), generator=g)[:, None] \
        + torch.arange(context_length + 1)
    window = torch.from_numpy(data)[rows].long()
    return window[:, :-1].to(device), window[:, 1:].to(device)


def training_adam_one_state(num_params, num_activations, optimizer, dtype=torch.float32):
    return training_table(num_params, num_activations, "momentum" if optimizer == "adam" else optimizer, dtype)


def training_four_bytes(num_params, num_activations, optimizer, dtype=torch.float32):
    return training_table(num_params, num_activations, optimizer, torch.float32)


def training_no_grads(num_params, num_activations, optimizer, dtype=torch.float32):
    out = training_table(num_params, num_activations, optimizer, dtype)
    out["total"] -= out["grads"]
    return out


def training_total_without_activations(num_params, num_activations, optimizer, dtype=torch.float32):
    out = training_table(num_params, num_activations, optimizer, dtype)
    out["total"] -= out["activations"]
    return out


def training_key_error(num_params, num_activations, optimizer, dtype=torch.float32):
    states = {"sgd": 0, "momentum": 1, "adagrad": 1, "adam": 2}[optimizer]  # KeyError, not ValueError
    return training_table(num_params, num_activations, ["sgd", "momentum", "adam"][states], dtype)


def training_floats(num_params, num_activations, optimizer, dtype=torch.float32):
    return {k: v / 1 for k, v in training_table(num_params, num_activations, optimizer, dtype).items()}


def compact_wiping_input(x):
    out = x.clone()
    x.zero_()  # right output, but the caller's tensor is destroyed
    return out


def compact_swapping_storage(x):
    x.data = x.clone()  # compact, but the caller's x now holds a new storage: x was changed
    return x


def compact_set_in_place(x):
    return x.set_(x.clone())  # the same, through set_


class _Small(torch.Tensor):
    """A view that claims a small storage."""

    def untyped_storage(self):
        return super().clone().untyped_storage()


def usage_four_bytes_each(x):
    return x.numel() * 4  # float32's size for every dtype


def usage_of_the_storage(x):
    return x.untyped_storage().nbytes()  # the storage of a view, not the view's own elements


def compact_by_contiguous(x):
    return x.contiguous()  # returns the view itself: it is already contiguous


WRONG = [
    W("get_memory_usage", usage_four_bytes_each, "other_dtypes", "its 15 elements of float16 take 30 bytes"),
    W("get_memory_usage", usage_of_the_storage, "a_view_counts_its_own_elements",
      "its 200 elements of float32 take 800 bytes"),
    W("get_memory_usage", lambda x: float(x.numel() * x.element_size()), "float32_matrix",
      "should be int, got float"),
    W("get_memory_usage", lambda x: torch.tensor(x.numel() * x.element_size()), "float32_matrix",
      "should be int, got int64 tensor"),
    W("get_memory_usage", lambda x: x.numel(), "float32_matrix",
      "returned 32; its 32 elements of float32 take 128 bytes"),  # elements, not bytes
    W("get_memory_usage", lambda x: sys.getsizeof(x), "float32_matrix", "take 128 bytes"),
    W("get_memory_usage", lambda x: np.int64(x.numel() * x.element_size()), "float32_matrix",
      "should be int, got int64"),
    # allocates: the answer itself runs out of memory on the public shape no CPU holds
    W("tensor_nbytes", as_in_the_kernel(lambda shape, dtype: torch.empty(tuple(shape), dtype=dtype).nbytes),
      "without_allocating", "can't allocate memory", status=ERROR),
    W("tensor_nbytes", as_in_the_kernel(lambda shape, dtype: torch.zeros(tuple(shape), dtype=dtype).element_size()
      * math.prod(shape)), "without_allocating", "can't allocate memory", status=ERROR),
    W("tensor_nbytes", lambda shape, dtype: int(math.prod(shape)) * 4, "small_shapes",
      "tensor_nbytes((2, 3), torch.bfloat16) returned 24; expected 12"),
    # finfo knows neither integer dtypes (the answer raises) nor complex ones (half the size): caught both ways
    W("tensor_nbytes", lambda shape, dtype: math.prod(shape) * torch.finfo(dtype).bits // 8, "small_shapes",
      "torch.finfo() requires a floating point input type", status=ERROR),
    W("tensor_nbytes", lambda shape, dtype: math.prod(shape) * torch.finfo(dtype).bits // 8, "shape_as_list_or_size",
      "tensor_nbytes([4, 5], torch.complex64) returned 80; expected 160"),
    W("tensor_nbytes", lambda shape, dtype: math.prod(shape) * dtype.itemsize / 1, "small_shapes",
      "should be int, got float"),
    W("training_memory", training_adam_one_state, "adam_in_float32", "['optimizer_state'] is 4000; expected 8000"),
    W("training_memory", training_four_bytes, "other_dtypes", "['params'] is 400; expected 200 (2 bytes per value"),
    W("training_memory", training_no_grads, "adam_in_float32", "['total'] is 14000; expected 18000"),
    W("training_memory", training_total_without_activations, "adam_in_float32", "['total'] is 16000; expected 18000"),
    W("training_memory", training_key_error, "unknown_optimizer", "should raise ValueError, but raised KeyError"),
    W("training_memory", training_floats, "adam_in_float32", "should be int, got float"),
    W("max_params", lambda m, b: math.ceil(m / b), "rounds_down", "max_params(100, 16) returned 7; expected 6"),
    W("max_params", lambda m, b: m / b, "eight_gpus", "should be int, got float"),
    W("max_params", lambda m, b: int(b // m), "eight_gpus", "returned 0; expected 40000000000"),
    W("max_params", lambda m, b: round(m / b), "rounds_down", "max_params(15, 16) returned 1; expected 0"),
    W("compact", compact_by_contiguous, "a_small_slice_of_a_big_tensor", "it is still a view into the big storage"),
    W("compact", lambda x: x.view(x.shape) if x.is_contiguous() else x.clone(), "a_small_slice_of_a_big_tensor",
      "it is still a view into the big storage"),
    W("compact", lambda x: x.detach(), "non_contiguous_views", "it is still a view into the big storage"),
    W("compact", lambda x: x[...], "non_contiguous_views", "it is still a view into the big storage"),
    W("compact", lambda x: x.reshape(x.shape), "non_contiguous_views", "it is still a view into the big storage"),
    # what the exercise's text asks (leave x alone) is checked in the student's notebook, not only at grading
    W("compact", compact_wiping_input, "does_not_change_x", "changed its input in place"),
    W("compact", compact_swapping_storage, "does_not_change_x", "changed its input in place"),
    W("compact", compact_set_in_place, "does_not_change_x", "changed its input in place"),
    W("compact", lambda x: x.as_subclass(_Small), "a_small_slice_of_a_big_tensor", "should be a plain torch.Tensor"),
    W("get_batch", batch_never_last, "every_start_is_reachable", "never started a window at [7]"),
    # the whole memmap in memory: np.array(data), data.astype, np.fromfile, torch.from_numpy(data).long()
    W("get_batch", batch_reads_everything, "reads_only_what_it_needs", "it reads the whole file"),
    W("get_batch", batch_astype_everything, "reads_only_what_it_needs", "it reads the whole file"),
    W("get_batch", batch_from_file, "reads_only_what_it_needs", "(page cache): it reads the whole file"),
    W("get_batch", batch_long_everything, "reads_only_what_it_needs", "it reads the whole file"),
    # one start too many: the answer's own stack fails on the short last window
    W("get_batch", batch_one_past_last, "every_start_is_reachable", "all input arrays must have the same shape",
      status=ERROR),
    W("get_batch", batch_unshifted, "windows_and_targets", "y must be x shifted by one token"),
    W("get_batch", batch_int32, "windows_and_targets", "x has dtype torch.int32; token ids must come out as int64"),
    W("get_batch", batch_uint16, "windows_and_targets", "x has dtype torch.uint16; token ids must come out as int64"),
    W("get_batch", batch_numpy_arrays, "windows_and_targets", "x should be a tensor, got ndarray"),
    W("get_batch", batch_no_check, "too_short", "should raise ValueError"),
    # x and y on `device`, one start per row: stated in the text, checked in the notebook
    W("get_batch", batch_one_start, "each_row_its_own_start", "gave every row of a batch the same start"),
    W("get_batch", batch_ignores_device, "on_the_device_asked_for", "move x and y to `device`"),
    W("get_batch", batch_same_every_call, "each_row_its_own_start", "starts must be independent"),
]

# the shortcut: record a real block's saved tensors inside the student's function (and it cannot reach real sizes)
ACTIVATION_SHORTCUTS = [
    W("activation_bytes", activation_recorded, "tiny_blocks_by_hand",
      "must do this itself, not call torch.autograd.graph.saved_tensors_hooks"),
    W("activation_bytes", activation_recorded_by_path, "tiny_blocks_by_hand",
      "must do this itself, not call torch.autograd.graph.saved_tensors_hooks"),
]


@pytest.mark.parametrize("wrong", WRONG, ids=ids(WRONG))
def test_each_wrong_answer_is_caught_by_its_check(wrong):
    """Every wrong answer fails the public check named, before any grading: numel()*4, the storage of a view, a
    compact that returns a view, the last window never drawn, the whole memmap read into memory, among others."""
    assert_caught("memory", wrong, public_only=True)


def test_reading_the_whole_file_is_caught_by_every_measure():
    """Each way of noticing a whole read reports it on its own (so one failing measure cannot hide it)."""
    from grader.scenarios import memory as scenarios

    got = scenarios.pages_read(batch_reads_everything, 2**23, 8, 32, 0)
    assert got["pages"] and all(p == got["file_pages"] for p in got["pages"].values()), got
    assert got["numpy_peak"] >= got["file_bytes"], got
    fine = scenarios.pages_read(batch_zero_copy, 2**23, 8, 32, 0)
    assert all(p <= 2 * 8 for p in fine["pages"].values()) and fine["numpy_peak"] < 2**16, fine


@pytest.mark.parametrize("mistake", list(ACTIVATION_WRONG))
def test_activation_mistakes_are_named(mistake):
    """Each named mistake fails the public checks first in the check listed, with a message that names it."""
    wrong = ACTIVATION_WRONG[mistake]
    result = assert_caught("memory", wrong, public_only=True)
    assert next(c.name for c in result.checks if not c.passed) == wrong.check, failures(result)


@pytest.mark.parametrize("wrong", ACTIVATION_SHORTCUTS, ids=[w.answer.__name__ for w in ACTIVATION_SHORTCUTS])
def test_activation_shortcut_is_refused(wrong):
    """Recording a real block's saved tensors inside the student's function fails a public check that names the
    call, under the name imported and under its module path, and the hooks work afterwards."""
    assert_caught("memory", wrong, public_only=True)
    seen = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
        (torch.randn(3, requires_grad=True) * torch.randn(3)).sum()
    assert seen


def test_activation_oracles_agree():
    """The public literals are what the hooks record on the real blocks, and the hidden closed form agrees with
    the hooks on shapes of every kind (fused and separate Q, K, V; views and copies of q, k, v)."""
    from grader.exercises.memory import saved_bytes
    from grader.hidden.memory import activation_parts
    assert saved_bytes("mlp", 2, 5, 6, 3, 7, torch.float32)["total"] == 800
    assert saved_bytes("transformer", 2, 5, 6, 3, 7, torch.float32) == {"total": 3265, "mask": 25, "softmax": 600,
                                                                         "stats": 160}
    for args in [("transformer", 1, 5, 12, 3, 7, torch.float16), ("transformer", 3, 1, 8, 2, 7, torch.float64),
                 ("transformer", 2, 4, 6, 1, 5, torch.bfloat16), ("transformer", 2, 5, 12, 3, 20, torch.float32)]:
        for fused in (False, True):
            assert saved_bytes(*args, fused=fused)["total"] == activation_parts(*args)["total"], (args, fused)


def test_activation_stub_is_not_implemented():
    def activation_bytes(block, batch, seq, d_model, n_heads, d_ff, dtype):
        raise NotImplementedError
    assert run_exercise("memory.activation_bytes", activation_bytes, hidden=True).status == "not_implemented"
