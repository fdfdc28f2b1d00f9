"""Chapter 03 (memory): public checks. Hidden checks for the same exercises live in grader/hidden/memory.py.

activation_bytes is checked against torch's own record of what autograd saves (`saved_tensors_hooks`, bound at
import) on real blocks built here (`_MLP`, `_Block`), whose saved tensors are also sorted into parts, so a wrong
count can be told which part went wrong; for CUDA's rule, on the GPU where there is one, else the CPU's record with
the LayerNorm statistics in the dtype CUDA keeps them in (STATS_DTYPE), so a grade is the same on any machine.
training_peak_bytes is checked against a real mixed-precision training step of a GPT built here (`_GPT`), measured with
grader.course.memtrack; kv_cache_bytes against the cache a real decoder (`_CachedDecoder`) holds after generating.

Counting is arithmetic on sizes: each byte-counting exercise that takes sizes is also asked about sizes whose tensors
could not exist, not even on the meta device (more than 2**63 bytes), so building or running a model cannot pass; a
formula can.
"""
from __future__ import annotations

import math
import weakref
from contextlib import contextmanager as _contextmanager
from contextlib import nullcontext as _nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint as _torch_checkpoint

from grader.course.memtrack import track_memory as _track_memory
from grader.expect import (CheckFailure, call, describe, expect, expect_equal, expect_raises, expect_tensor,
                           expect_tensor_like, expect_type, factor_hint, fail)
from grader.inputs import randint
from grader.oracle import once_per_process
from grader.guard import UNTRACED
from grader.registry import exercise
from grader.scenario import run_scenario
from grader.scenarios import memory as scenarios
from grader.expect import OWN_COUNTER
from grader.expect import at_sizes_no_tensor_can_hold as _no_tensor_can_hold


def at_sizes_no_tensor_can_hold(fn, name: str):
    """expect.at_sizes_no_tensor_can_hold for byte counts: more than 2**63 bytes, and a TypeError (a call it cannot
    take) passes unchanged."""
    return _no_tensor_can_hold(fn, name, holds="take more than 2**63 bytes", also_raise=(TypeError,))


GET_MEMORY_USAGE = exercise("memory.get_memory_usage", points=1)
TENSOR_NBYTES = exercise("memory.tensor_nbytes", points=1, counts=True, forbid=(OWN_COUNTER, *UNTRACED))
COMPACT = exercise("memory.compact", points=2)
TRAINING_MEMORY = exercise("memory.training_memory", points=2, counts=True)
MAX_PARAMS = exercise("memory.max_params", points=1, counts=True)
# Recording the saved tensors of a real block is the shortcut (and cannot reach the sizes no tensor can hold):
# refused while the student's function runs, under any name, the C function the context manager calls included. A
# block run at small sizes and scaled up is stopped by the trace of the call at sizes no tensor can hold, and so is
# the work out of the trace's sight (guard.UNTRACED) in every byte count.
ACTIVATION_BYTES = exercise("memory.activation_bytes", points=3, counts=True,
                            forbid=("torch.autograd.graph.saved_tensors_hooks.__enter__",
                                    "torch.autograd.graph.saved_tensors_hooks",
                                    "torch._C._autograd._push_saved_tensors_default_hooks", OWN_COUNTER, *UNTRACED))
GET_BATCH = exercise("memory.get_batch", points=3)
TRAINING_PEAK_BYTES = exercise("memory.training_peak_bytes", points=3, counts=True, forbid=(OWN_COUNTER, *UNTRACED))
KV_CACHE_BYTES = exercise("memory.kv_cache_bytes", points=2, counts=True, forbid=(OWN_COUNTER, *UNTRACED))

# Bytes per element of every dtype, from the formats' definitions (literals: the check computes nothing the
# exercise asks for).
ELEMENT_BYTES = {torch.float64: 8, torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.int64: 8,
                 torch.int32: 4, torch.int16: 2, torch.int8: 1, torch.uint8: 1, torch.bool: 1, torch.complex64: 8,
                 torch.complex128: 16, torch.float8_e4m3fn: 1, torch.float8_e5m2: 1}
STATES = {"sgd": 0, "momentum": 1, "adagrad": 1, "adam": 2}
KEYS = ("params", "grads", "optimizer_state", "activations", "total")


def expect_int(value, what: str) -> int:
    """A byte count is a Python int: not a float, a NumPy integer or a tensor."""
    if type(value) is not int:
        fail(f"{what} should be a Python int, got {describe(value)}")
    return value




# ---------------------------------------------------------------- get_memory_usage

def expect_usage(get_memory_usage, x: torch.Tensor, want: int, how: str) -> None:
    what = f"get_memory_usage({how})"
    got = call(get_memory_usage, x, what=what)
    expect_type(got, int, what)
    expect(got == want, f"{what} returned {got}; its {x.numel()} elements of {str(x.dtype)[6:]} take {want} bytes"
                        + factor_hint(got, want))


@GET_MEMORY_USAGE.check
def float32_matrix(get_memory_usage):
    """a (4, 8) float32 tensor takes 4 * 8 * 4 = 128 bytes"""
    expect_usage(get_memory_usage, torch.zeros(4, 8), 128, "torch.zeros(4, 8)")


@GET_MEMORY_USAGE.check
def other_dtypes(get_memory_usage):
    """the element size depends on the dtype: float16, int8, float64, bool"""
    for dtype in (torch.float16, torch.int8, torch.float64, torch.bool):
        expect_usage(get_memory_usage, torch.zeros(3, 5, dtype=dtype), 15 * ELEMENT_BYTES[dtype],
                     f"torch.zeros(3, 5, dtype={dtype})")


@GET_MEMORY_USAGE.check
def a_view_counts_its_own_elements(get_memory_usage):
    """a small slice of a big tensor: its own elements, not the whole storage it views"""
    big = torch.zeros(1000, 100)
    expect_usage(get_memory_usage, big[:2], 800, "big[:2] where big = torch.zeros(1000, 100)")


# ---------------------------------------------------------------- tensor_nbytes

def expect_nbytes(tensor_nbytes, shape, dtype: torch.dtype, want: int) -> None:
    what = f"tensor_nbytes({shape!r}, {dtype})"
    got = tensor_nbytes(shape, dtype)
    expect_type(got, int, what)
    hint = factor_hint(got, want)
    if got != want and want > 2**53 and abs(got - want) <= want * 2**-52:  # off by a float's rounding, not a rule
        hint = (": past 2**53 a float no longer holds every integer, so a division with / rounds the count; divide "
                "the ints with // (exact at any size)")
    expect(got == want, f"{what} returned {got}; expected {want}{hint}")


@TENSOR_NBYTES.check
def small_shapes(tensor_nbytes):
    """(2, 3) in float32 is 24 bytes; in bfloat16 12; a 0-dim tensor holds one element"""
    expect_nbytes(tensor_nbytes, (2, 3), torch.float32, 24)
    expect_nbytes(tensor_nbytes, (2, 3), torch.bfloat16, 12)
    expect_nbytes(tensor_nbytes, (), torch.int64, 8)


@TENSOR_NBYTES.check
def every_kind_of_dtype(tensor_nbytes):
    """bool and int8 take 1 byte per element, float8 1, complex64 8, int64 8"""
    for dtype in (torch.bool, torch.int8, torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64, torch.int64):
        expect_nbytes(tensor_nbytes, (3, 7), dtype, 21 * ELEMENT_BYTES[dtype])


@TENSOR_NBYTES.check
def without_allocating(tensor_nbytes):
    """(10**6, 10**6) float32 is 4 TB and (10**9, 10**9) int64 8 EB: computed, never allocated"""
    expect_nbytes(tensor_nbytes, (1_000_000, 1_000_000), torch.float32, 4 * 10**12)
    expect_nbytes(tensor_nbytes, (10**9, 10**9), torch.int64, 8 * 10**18)


@TENSOR_NBYTES.check
def more_bytes_than_int64_holds(tensor_nbytes):
    """(2**32, 2**32) int64 is 2**67 bytes and (3 * 10**9, 3 * 10**9) float32 36 * 10**18: exact Python ints

    Past 2**63 bytes no tensor can exist, not even on the meta device, and int64 arithmetic (NumPy's, a torch.Size's
    numel()) wraps around; Python's ints do not."""
    tensor_nbytes = at_sizes_no_tensor_can_hold(tensor_nbytes, "tensor_nbytes")
    expect_nbytes(tensor_nbytes, (2**32, 2**32), torch.int64, 2**67)
    expect_nbytes(tensor_nbytes, [3 * 10**9, 3 * 10**9], torch.float32, 36 * 10**18)


@TENSOR_NBYTES.check
def shape_as_list_or_size(tensor_nbytes):
    """the shape may be a list or a torch.Size; a dimension of 0 means 0 bytes"""
    expect_nbytes(tensor_nbytes, [4, 5], torch.complex64, 160)
    expect_nbytes(tensor_nbytes, torch.Size([7, 0, 3]), torch.float64, 0)


# ---------------------------------------------------------------- training_memory

def expect_training(training_memory, num_params: int, num_activations: int, optimizer: str,
                    dtype: torch.dtype | None = None) -> None:
    size = ELEMENT_BYTES[dtype or torch.float32]
    want = {"params": num_params * size, "grads": num_params * size,
            "optimizer_state": STATES[optimizer] * num_params * size, "activations": num_activations * size}
    want["total"] = sum(want.values())
    args = f"{num_params}, {num_activations}, {optimizer!r}" + (f", {dtype}" if dtype else "")
    what = f"training_memory({args})"
    got = training_memory(num_params, num_activations, optimizer) if dtype is None else \
        training_memory(num_params, num_activations, optimizer, dtype)
    expect_type(got, dict, what)
    expect_equal(sorted(got), sorted(KEYS), f"{what}'s keys")
    for key in KEYS:
        expect_type(got[key], int, f"{what}[{key!r}]")
        if got[key] != want[key]:
            fail(f"{what}[{key!r}] is {got[key]}; expected {want[key]} ({size} bytes per value, "
                 f"{STATES[optimizer]} optimizer state(s) per parameter){factor_hint(got[key], want[key])}")


@TRAINING_MEMORY.check
def adam_in_float32(training_memory):
    """Adam keeps two states per parameter: 16 bytes per parameter in float32, plus activations"""
    expect_training(training_memory, 1000, 500, "adam")


@TRAINING_MEMORY.check
def every_optimizer(training_memory):
    """SGD keeps no state, momentum and AdaGrad one, Adam two"""
    for opt in ("sgd", "momentum", "adagrad", "adam"):
        expect_training(training_memory, 100, 10, opt)


@TRAINING_MEMORY.check
def other_dtypes(training_memory):
    """everything in bfloat16 takes half the bytes"""
    expect_training(training_memory, 100, 10, "momentum", torch.bfloat16)


@TRAINING_MEMORY.check
def unknown_optimizer(training_memory):
    """an optimizer it does not know raises ValueError"""
    expect_raises(ValueError, lambda: training_memory(10, 10, "lion"), "training_memory(10, 10, 'lion')")


# ---------------------------------------------------------------- max_params

def expect_max(max_params, memory_bytes, bytes_per_param, want: int) -> None:
    what = f"max_params({memory_bytes!r}, {bytes_per_param!r})"
    got = max_params(memory_bytes, bytes_per_param)
    expect_type(got, int, what)
    hint = factor_hint(got, want)
    if got != want and want > 2**53 and abs(got - want) <= want * 2**-52:  # off by a float's rounding, not a rule
        hint = (": past 2**53 a float no longer holds every integer, so a division with / rounds the count; divide "
                "the ints with // (exact at any size)")
    expect(got == want, f"{what} returned {got}; expected {want}{hint}")


@MAX_PARAMS.check
def eight_gpus(max_params):
    """8 x 80 GB at 16 bytes per parameter holds 40e9 parameters"""
    expect_max(max_params, 8 * 80 * 10**9, 16, 40 * 10**9)


@MAX_PARAMS.check
def rounds_down(max_params):
    """a parameter that does not fit entirely does not count"""
    expect_max(max_params, 100, 16, 6)
    expect_max(max_params, 15, 16, 0)


# ---------------------------------------------------------------- compact

def expect_compact(compact, x: torch.Tensor, how: str) -> None:
    """Same values, shape and dtype; a storage of exactly its elements' bytes, not shared with x's bigger one."""
    what = f"compact({how})"
    want = x.clone()
    got = call(compact, x, what=what)
    expect_tensor(got, want, what, rtol=0, atol=0)
    need = got.numel() * got.element_size()
    have = got.untyped_storage().nbytes()
    if have > need:
        fail(f"{what} holds a storage of {have} bytes for {need} bytes of elements: it is still a view "
             f"into the big storage (x's storage has {x.untyped_storage().nbytes()} bytes)")


@COMPACT.check
def a_small_slice_of_a_big_tensor(compact):
    """x = big[:10] keeps all of big alive; compact(x) keeps only its 10 rows"""
    big = torch.randn(1000, 64)
    expect_compact(compact, big[:10], "big[:10] where big is (1000, 64)")


@COMPACT.check
def a_contiguous_slice_in_the_middle(compact):
    """a contiguous slice is still a view: contiguous() alone returns it unchanged"""
    big = torch.randn(5000)
    expect_compact(compact, big[100:200], "big[100:200] where big has 5000 elements")


@COMPACT.check
def non_contiguous_views(compact):
    """a column, a strided slice, an expanded tensor"""
    big = torch.randn(50, 40)
    expect_compact(compact, big[:, 3], "big[:, 3]")
    expect_compact(compact, big[::5, ::4], "big[::5, ::4]")
    expect_compact(compact, big[0].expand(3, 40), "big[0].expand(3, 40)")


def expect_input_unchanged(compact, n: int, start: int, stop: int) -> None:
    """compact(big[start:stop]) leaves its input as it was: a view of big's storage, with the same values."""
    big = torch.randn(n)
    x = big[start:stop]
    before = x.clone()
    expect_compact(compact, x, f"big[{start}:{stop}]")
    same = x.untyped_storage().data_ptr() == big.untyped_storage().data_ptr()
    expect(same and x.data_ptr() == big[start:].data_ptr(),
           f"compact(big[{start}:{stop}]) changed its input: x no longer views big's storage (compact must return "
           "a new tensor, not swap x's storage with x.data = ... or x.set_(...))")
    expect(bool((x == before).all()), f"compact(big[{start}:{stop}]) changed the values of its input")


@COMPACT.check
def does_not_change_x(compact):
    """x itself stays as it was (a view of the big tensor, same values): compact returns a new tensor"""
    expect_input_unchanged(compact, 500, 30, 45)


# ---------------------------------------------------------------- get_batch

TOP_ID = 2**16 - 1  # the largest id a uint16 file holds (GPT-2's 50257 ids need all 16 bits)


def token_ids(length: int) -> list[int]:
    """`length` consecutive token ids ending at 65535, so a window's first id tells where it starts, and ids of
    32768 and above (half of a uint16's range, a third of GPT-2's 50257) are in every batch: read as int16 they
    would come out negative."""
    return list(range(TOP_ID + 1 - length, TOP_ID + 1))


def expect_batches(out, tokens: list[int], batch_size: int, context_length: int, what: str) -> set[int]:
    """Every (x, y) has the right shapes, dtype and device, is a real window with targets shifted by one;
    returns the start positions seen. `tokens` are consecutive ids (token_ids): an id minus the first is its
    position."""
    data = torch.tensor(tokens, dtype=torch.int64)
    first = tokens[0]
    starts = set()
    for pair in out:
        if type(pair) not in (tuple, list) or len(pair) != 2:
            fail(f"{what} should return a pair (x, y), got {describe(pair)}")
        x, y = pair
        for name, t in (("x", x), ("y", y)):
            if isinstance(t, torch.Tensor) and t.dtype != torch.int64:
                fail(f"{what}: {name} has dtype {t.dtype}; token ids must come out as int64 (torch.long), the "
                     "dtype embeddings and losses take, whatever the file stores")
            expect_tensor_like(t, (batch_size, context_length), torch.int64, "cpu", f"{what}: {name}")
        expect(bool((y[:, :-1] == x[:, 1:]).all()), f"{what}: y must be x shifted by one token "
                                                     "(y[:, :-1] == x[:, 1:])")
        for name, t in (("x", x), ("y", y)):
            negative = (t < 0).any(dim=1).nonzero()
            if negative.numel():
                row = int(negative[0])
                fail(f"{what}: {name}[{row}] holds the ids {t[row].tolist()} where the file holds uint16 ids from "
                     f"{first} to {tokens[-1]}: ids of 32768 and above came out negative. Token ids are unsigned: "
                     "read them as uint16 (or int32/int64), never as int16")
        for row in range(batch_size):
            start = int(x[row, 0]) - first  # consecutive ids: a token's id minus the first is its position
            window = data[start:start + context_length + 1] if start >= 0 else data[:0]
            if window.numel() != context_length + 1 or not torch.equal(x[row], window[:-1]) or \
                    not torch.equal(y[row], window[1:]):
                fail(f"{what}: row {row} is not a window of the data: x = {x[row].tolist()}, y = {y[row].tolist()}")
            starts.add(start)
    return starts


@GET_BATCH.check
def windows_and_targets(get_batch):
    """x and y are (batch_size, context_length) int64 windows of the data, y shifted by one"""
    tokens = token_ids(100)
    out = run_scenario(scenarios.batches, get_batch, tokens, 4, 8, 5, 0)
    expect_batches(out, tokens, 4, 8, "get_batch(memmap of 100 tokens, 4, 8, 'cpu')")


@GET_BATCH.check
def every_start_is_reachable(get_batch):
    """on 12 tokens with context 4, all 8 start positions 0..7 turn up, the last one included"""
    tokens = token_ids(12)
    out = run_scenario(scenarios.batches, get_batch, tokens, 8, 4, 40, 1)
    starts = expect_batches(out, tokens, 8, 4, "get_batch(memmap of 12 tokens, 8, 4, 'cpu')")
    # 320 draws from 8 starts: a correct answer misses a start with probability below 1e-17.
    missing = sorted(set(range(8)) - starts)
    expect(not missing, f"get_batch(memmap of 12 tokens, 8, 4, 'cpu') never started a window at {missing} in 320 "
                        "rows; the last valid start is len(data) - context_length - 1 = 7")


@GET_BATCH.check
def too_short(get_batch):
    """data shorter than one window plus its target raises ValueError"""
    expect_raises(ValueError, lambda: run_scenario(scenarios.batches, get_batch, token_ids(8), 2, 8, 1, 0),
                  "get_batch(memmap of 8 tokens, 2, 8, 'cpu')")


@GET_BATCH.check
def reads_only_what_it_needs(get_batch):
    """on a memmap of 2**23 tokens (16 MiB), one batch touches a few pages, not the whole file"""
    expect_reads_little(get_batch, 8, 32, 2)


def expect_on_device(get_batch, length: int, batch_size: int, context_length: int, device, seed: int) -> None:
    """x and y are int64 (batch_size, context_length) tensors on the meta device when asked for it."""
    what = f"get_batch(memmap of {length} tokens, {batch_size}, {context_length}, device={device!r})"
    out = run_scenario(scenarios.layout, get_batch, token_ids(length), batch_size, context_length, device, seed)
    expect(out["type"] == "tuple" and out["items"] is not None and len(out["items"]) == 2,
           f"{what} returned a {out['type']}, not (x, y)")
    shape = (batch_size, context_length)
    for name, item in zip("xy", out["items"]):
        if (item["type"], item["device"], item["dtype"], item["shape"]) != ("Tensor", "meta", "torch.int64", shape):
            fail(f"{what} returned {name} as a {item['type']} of dtype {item['dtype']}, shape {item['shape']} on "
                 f"{item['device']}: expected an int64 {shape} tensor on meta (move x and y to `device`)")


@GET_BATCH.check
def on_the_device_asked_for(get_batch):
    """x and y are made on `device`: asked for the meta device, both are meta int64 tensors"""
    expect_on_device(get_batch, 30, 2, 5, "meta", 7)


def expect_own_starts(get_batch, length: int, batch_size: int, context_length: int, draws: int, seed: int) -> None:
    """Each row of every batch starts at its own random position: no batch repeats one start in every row."""
    tokens = token_ids(length)
    what = f"get_batch(memmap of {length} tokens, {batch_size}, {context_length}, 'cpu')"
    out = run_scenario(scenarios.batches, get_batch, tokens, batch_size, context_length, draws, seed)
    starts = expect_batches(out, tokens, batch_size, context_length, what)
    per_batch = [len(set(x[:, 0].tolist())) for x, _ in out]
    expect(min(per_batch) > 1, f"{what} gave every row of a batch the same start: draw one start per row")
    expect(len(starts) > draws * batch_size // 2,
           f"{what}: {draws * batch_size} rows started at only {len(starts)} positions; starts must be independent "
           "and uniform")
    # Independent starts put the other rows at new distances from the first in every batch; rows that follow the
    # first (at a stride, or one after another, wrapping round) keep the same distances in every batch.
    valid = length - context_length
    gaps = {tuple((s - x[0, 0].item()) % valid for s in x[:, 0].tolist()) for x, _ in out}
    expect(len(gaps) > 1, f"{what}: in each of {draws} batches the rows start at the same distances from the first row "
                          f"({list(next(iter(gaps)))[:6]}, counted round the {valid} starts): they follow one draw. "
                          "Draw each row's start independently (torch.randint(..., (batch_size,)))")


@GET_BATCH.check
def each_row_its_own_start(get_batch):
    """each row of a batch starts at its own random position, not one start for the whole batch"""
    expect_own_starts(get_batch, 3000, 6, 4, 4, 8)


def expect_uniform_starts(get_batch, seed: int) -> None:
    """6,400 rows from 20 tokens with context 4: each of the 16 starts turns up between 250 and 600 times, where each
    expects 400.

    A uniform draw leaves that band with probability below 1e-12 over all 16 starts (binomial tails, sd 19.4); a
    draw clamped to the last start (randint(0, len(data)).clamp(max=...)) puts a quarter of all rows there, about
    1,600; a rounded uniform draw (round(rand() * last)) gives the first and last starts half a share, about 213."""
    tokens = token_ids(20)
    what = "get_batch(memmap of 20 tokens, 64, 4, 'cpu')"
    out = run_scenario(scenarios.batches, get_batch, tokens, 64, 4, 100, seed)
    expect_batches(out, tokens, 64, 4, what)
    counts = [0] * 16
    for x, _ in out:
        for start in x[:, 0].tolist():
            counts[start - tokens[0]] += 1
    most = max(range(16), key=counts.__getitem__)
    expect(counts[most] < 600, f"{what}: in 6,400 rows, start {most} came up {counts[most]} times, where each of the "
                               "16 starts should come up about 400: starts must be uniform (a start clamped into "
                               "range piles the clamped draws onto the last one)")
    least = min(range(16), key=counts.__getitem__)
    expect(counts[least] >= 250, f"{what}: in 6,400 rows, start {least} came up only {counts[least]} times, where each "
                                 "of the 16 starts should come up about 400: starts must be uniform (rounding a "
                                 "uniform float to the nearest start gives the first and last starts half a share; "
                                 "draw integers, e.g. torch.randint(0, last + 1, ...))")


@GET_BATCH.check
def starts_are_uniform(get_batch):
    """every start is equally likely: each of 16 starts comes up 250 to 600 times in 6,400 rows (about 400 each)"""
    expect_uniform_starts(get_batch, 11)


def expect_reads_little(get_batch, batch_size: int, context_length: int, seed: int) -> None:
    """One get_batch call on a memmap of 2**23 tokens touches under a quarter of the file's pages and copies
    under a quarter of its bytes (a batch needs a page or two per window)."""
    what = f"get_batch(memmap of 2**23 tokens, {batch_size}, {context_length}, 'cpu')"
    out = run_scenario(scenarios.pages_read, get_batch, 2**23, batch_size, context_length, seed)
    shapes = ((batch_size, context_length),) * 2
    expect(out["shapes"] == shapes, f"{what} returned shapes {out['shapes']}, expected {shapes}")
    whole = "it reads the whole file instead of the windows it needs (np.array(data), torch.tensor(data), " \
            "data.astype(...) or np.fromfile copy it all; index the memmap with the windows' positions instead)"
    for method, pages in out["pages"].items():
        expect(pages < out["file_pages"] // 4,
               f"{what} brought {pages} of the file's {out['file_pages']} pages into memory ({method}): {whole}")
    expect(out["numpy_peak"] < out["file_bytes"] // 4,
           f"{what} allocated {out['numpy_peak']:,} bytes of numpy arrays for a file of {out['file_bytes']:,} "
           f"bytes: {whole}")


# ---------------------------------------------------------------- activation_bytes

_SavedHooks = torch.autograd.graph.saved_tensors_hooks  # torch's record of what the forward pass saves: the oracle
_Module, _Linear, _LayerNorm, _GELU, _Sequential = nn.Module, nn.Linear, nn.LayerNorm, nn.GELU, nn.Sequential
_ones, _randn, _bool, _manual_seed = torch.ones, torch.randn, torch.bool, torch.manual_seed
_cuda_available = torch.cuda.is_available
_sqrt = math.sqrt
_LAYER_NORM_NODE = "NativeLayerNormBackward0"  # the autograd node of LayerNorm, which saves its statistics

# The dtype a LayerNorm's saved mean and 1/std have, by the device whose kernel ran: on the CPU the input's dtype; on
# CUDA the kernel's accumulate type, float32 for 16-bit inputs (aten/src/ATen/native/cuda/layer_norm_kernel.cu;
# torch._refs.native_layer_norm says the same, and keeps the input's dtype only on the CPU). Literals:
# tests/test_memory_answers.py checks them against that reference on a fake CUDA device, and on a GPU the public
# check below compares against real CUDA hooks. Issue 27 recorded it on an H200: two (4, 8, 1) float32 tensors.
STATS_DTYPE = {"cpu": {torch.float16: torch.float16, torch.bfloat16: torch.bfloat16, torch.float32: torch.float32,
                       torch.float64: torch.float64},
               "cuda": {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float32,
                        torch.float64: torch.float64}}


class _MLP(_Module):
    """The transformer's MLP: Linear(d_model, d_ff) -> GELU -> Linear(d_ff, d_model), with biases."""

    def __init__(self, d_model: int, d_ff: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.net = _Sequential(_Linear(d_model, d_ff, dtype=dtype), _GELU(), _Linear(d_ff, d_model, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class _Block(_Module):
    """A pre-norm decoder block, written out: LayerNorm, Q, K, V (one fused Linear or three), explicit
    `q @ k.transpose` scores scaled by 1/sqrt(head_dim), a causal mask made in the forward pass and applied with
    masked_fill, softmax, the weighted sum, the output projection, a residual; LayerNorm, the MLP, a residual."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dtype: torch.dtype, fused: bool) -> None:
        super().__init__()
        self.n_heads, self.fused = n_heads, fused
        self.ln1, self.ln2 = _LayerNorm(d_model, dtype=dtype), _LayerNorm(d_model, dtype=dtype)
        if fused:
            self.qkv = _Linear(d_model, 3 * d_model, dtype=dtype)
        else:
            self.q, self.k, self.v = (_Linear(d_model, d_model, dtype=dtype) for _ in range(3))
        self.o = _Linear(d_model, d_model, dtype=dtype)
        self.mlp = _MLP(d_model, d_ff, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(d, dim=-1) if self.fused else (self.q(h), self.k(h), self.v(h))
        q, k, v = (t.reshape(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / _sqrt(d // self.n_heads)            # (b, heads, s, s)
        future = _ones(s, s, dtype=_bool, device=x.device).triu(1)            # the causal mask, 1 byte per entry
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        attended = (weights @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(attended)
        return x + self.mlp(self.ln2(x))


def _stats_storages(out: torch.Tensor) -> set[int]:
    """Storages of the LayerNorm statistics (mean and 1/std) the graph behind `out` saved, found by their node."""
    found, seen, todo = set(), set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == _LAYER_NORM_NODE:
            found |= {stat.untyped_storage().data_ptr() for stat in (node._saved_result1, node._saved_result2)}
        todo.extend(next_node for next_node, _ in node.next_functions)
    return found


def recorded(model: torch.nn.Module, x: torch.Tensor) -> tuple[dict, set[int]]:
    """What autograd saves for backward while `model(x)` runs: {storage: (bytes, shape, dtype)} for every distinct
    storage saved, parameters left out (in memory anyway), and the storages of the LayerNorm statistics among them."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, tuple[int, tuple[int, ...], torch.dtype]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = (storage.nbytes(), tuple(t.shape), t.dtype)
        return t

    with _SavedHooks(pack, lambda t: t):
        out = model(x)
    return saved, _stats_storages(out)


@once_per_process
def saved_bytes(block: str, batch: int, seq: int, d_model: int, n_heads: int, d_ff: int, dtype: torch.dtype,
                device: str = "cpu", *, fused: bool = False) -> dict[str, int]:
    """What autograd saves for backward in one forward pass of the real block on a (batch, seq, d_model) input that
    requires grad, by the rule of `device`'s kernels: bytes of every distinct storage saved, parameters left out
    (they are in memory anyway). Also sorted into parts for the hints: the 1-byte bool mask, the softmax outputs (the
    only (.., seq, seq) float tensors), the LayerNorms' per-token statistics (and their number of values), the rest.

    The block runs on `device` where this machine has one (a CUDA GPU for "cuda"); a CUDA rule asked for on a machine
    without one is the CPU's record with the statistics in the dtype CUDA keeps them in (STATS_DTYPE): the same
    count, whatever machine grades."""
    _manual_seed(0)
    model = _MLP(d_model, d_ff, dtype) if block == "mlp" else _Block(d_model, n_heads, d_ff, dtype, fused)
    x = _randn(batch, seq, d_model).to(dtype)
    if device == "cuda" and _cuda_available():
        model, x = model.to("cuda"), x.to("cuda")
    saved, stats = recorded(model, x.requires_grad_())
    parts = {"total": 0, "mask": 0, "softmax": 0, "stats": 0, "stats_values": 0}
    for ptr, (nbytes, shape, kind) in saved.items():
        if ptr in stats:
            values = nbytes // ELEMENT_BYTES[kind]
            parts["stats_values"] += values
            nbytes = values * ELEMENT_BYTES[STATS_DTYPE[device][dtype]] if x.device.type != device else nbytes
            parts["stats"] += nbytes
        elif kind == _bool:
            parts["mask"] += nbytes
        elif block != "mlp" and shape[-2:] == (seq, seq) and \
                nbytes == batch * n_heads * seq * seq * ELEMENT_BYTES[dtype]:
            parts["softmax"] += nbytes
        parts["total"] += nbytes
    return parts


def _device_hint(got: int, want: dict[str, int], dtype: torch.dtype, device: str) -> str:
    """The named mistake of a LayerNorm statistics rule for the wrong device, or ''."""
    values, stats = want["stats_values"], want["stats"]
    other = "cpu" if device == "cuda" else "cuda"
    if not values or STATS_DTYPE[other][dtype] == STATS_DTYPE[device][dtype]:
        if values and got == want["total"] - stats + 4 * values and stats != 4 * values:
            return (f" (the LayerNorm statistics of a {str(dtype)[6:]} input are {str(dtype)[6:]} on {device}, "
                    "not always 4 bytes)")
        return ""
    if got != want["total"] - stats + values * ELEMENT_BYTES[STATS_DTYPE[other][dtype]]:
        return ""
    if device == "cuda":
        return (f" (that is the CPU's rule: on CUDA, LayerNorm keeps its mean and 1/std in float32 for a "
                f"{str(dtype)[6:]} input, 4 bytes per value)")
    return (f" (that is CUDA's rule: on the CPU, LayerNorm keeps its mean and 1/std in the input's dtype, "
            f"{ELEMENT_BYTES[dtype]} bytes per value for {str(dtype)[6:]})")


def _activation_hint(got: int, want: dict[str, int], args: tuple) -> str:
    """The named mistake a wrong count matches (several shapes are checked, so each mistake shows in one)."""
    block, b, s, d, h, f, dtype, device = args
    size, total = ELEMENT_BYTES[dtype], want["total"]
    tokens = b * s
    named = _device_hint(got, want, dtype, device)
    if named:
        return named
    if block != "mlp" and got == total - want["mask"] + s * s * size:
        return " (the causal mask is bool: 1 byte per entry, whatever the dtype)"
    if got * size == total - want["mask"] + want["mask"] * size or got == (total - want["mask"]) // size + want["mask"]:
        return f" (that counts elements: multiply by the dtype's {size} bytes per element)"
    if got == total - tokens * f * size:
        return " (one d_ff-wide tensor missing: GELU saves its input, and the second Linear saves GELU's output)"
    if got == total - tokens * d * size:
        return (" (one d_model-wide tensor per token missing: the block's input, the normalized inputs of the "
                "projections and the MLP, q, k, v, the attention output and the residual sum are all saved)")
    if block != "mlp" and h > 1 and got == total - want["softmax"] + want["softmax"] // h:
        return " (the softmax output counted once: every one of the n_heads heads saves its own seq x seq weights)"
    if block != "mlp" and got == total + want["softmax"]:
        return (" (the softmax output counted twice: softmax saves it and the weighted sum saves the same tensor, "
                "one storage)")
    if block != "mlp" and got == total - want["softmax"]:
        return " (the softmax output is missing: softmax's backward needs its output, b x heads x seq x seq values)"
    if block != "mlp" and want["mask"] and got == total - want["mask"]:
        return " (the causal mask is missing: masked_fill keeps it for backward, seq x seq bools)"
    if block != "mlp" and want["mask"] and got == total - want["mask"] + b * h * s * s:
        return " (the mask counted per sequence and head: it is one seq x seq tensor, shared by the batch and heads)"
    if block != "mlp" and got == total - want["stats"]:
        return " (the LayerNorms' statistics are missing: each keeps a mean and 1/std per token)"
    weights = 2 * d * f if block == "mlp" else 2 * d * f + 4 * d * d
    everything = weights + d + f if block == "mlp" else weights + d + f + 4 * d + 4 * d
    if got in (total + weights * size, total + everything * size):
        return (" (that counts the parameters: they are in memory whatever the step does; activations are what "
                "the forward pass adds)")
    if block != "mlp" and got == total - 3 * tokens * d * size:
        return " (q, k and v are missing: the scores matmul saves q and k, the weighted sum saves v)"
    return factor_hint(got, total)


def activation_call(args: tuple) -> str:
    block, b, s, d, h, f, dtype, device = args
    return f"activation_bytes({block!r}, {b}, {s}, {d}, {h}, {f}, {dtype}, {device!r})"


def expect_activation(activation_bytes, args: tuple, want: dict[str, int] | None = None,
                      what_counts: str = "autograd saves") -> None:
    want = want or saved_bytes(*args)
    what = activation_call(args)
    got = expect_int(activation_bytes(*args), what)
    if got != want["total"]:
        fail(f"{what} returned {got:,}; {what_counts} {want['total']:,} bytes" + _activation_hint(got, want, args))


@ACTIVATION_BYTES.check
def tiny_blocks_by_hand(activation_bytes):
    """batch 2, seq 5, d_model 6, 3 heads, d_ff 7 in float32 on the CPU: the MLP saves 800 bytes, the block 3,265

    The block's 3,265: 2,480 bytes of per-token tensors, 160 of LayerNorm statistics, 600 of softmax weights and 25 of
    the bool mask."""
    expect_activation(activation_bytes, ("mlp", 2, 5, 6, 3, 7, torch.float32, "cpu"),
                      {"total": 800, "mask": 0, "softmax": 0, "stats": 0, "stats_values": 0}, "by hand it is")
    expect_activation(activation_bytes, ("transformer", 2, 5, 6, 3, 7, torch.float32, "cpu"),
                      {"total": 3265, "mask": 25, "softmax": 600, "stats": 160, "stats_values": 40}, "by hand it is")


@ACTIVATION_BYTES.check
def layernorm_statistics_by_device(activation_bytes):
    """a bfloat16 block saves 1,645 bytes on the CPU and 1,725 on CUDA, whose LayerNorms keep float32 statistics

    On the CPU LayerNorm saves its mean and 1/std in the input's dtype; CUDA's kernel computes them in float32 for
    16-bit inputs and saves them so: the block's 40 statistics take 160 bytes there. A float64 block keeps them in
    float64 on both."""
    for device, total, stats in (("cpu", 1645, 80), ("cuda", 1725, 160)):
        expect_activation(activation_bytes, ("transformer", 2, 5, 6, 3, 7, torch.bfloat16, device),
                          {"total": total, "mask": 25, "softmax": 300, "stats": stats, "stats_values": 40},
                          "by hand it is")
    expect_activation(activation_bytes, ("transformer", 2, 5, 6, 3, 7, torch.float64, "cuda"),
                      {"total": 6505, "mask": 25, "softmax": 1200, "stats": 320, "stats_values": 40}, "by hand it is")


@ACTIVATION_BYTES.check
def agrees_with_saved_tensors_hooks(activation_bytes):
    """real blocks in float32 and bfloat16 against what saved_tensors_hooks records, by the CPU's rule and CUDA's

    CUDA's on the GPU itself where there is one. Fused or separate Q, K, V projections; one head or several; a batch
    of one, a sequence of one."""
    cases = [("mlp", 3, 5, 8, 1, 20, torch.bfloat16, "cpu"), ("transformer", 2, 5, 12, 3, 20, torch.float32, "cpu"),
             ("transformer", 1, 7, 8, 4, 16, torch.bfloat16, "cpu"),
             ("transformer", 3, 1, 6, 2, 5, torch.float32, "cpu"),
             ("transformer", 2, 4, 6, 1, 9, torch.bfloat16, "cuda"), ("mlp", 2, 3, 4, 1, 6, torch.bfloat16, "cuda")]
    for device in ("cpu", "cuda"):
        heads = randint(1, 4)
        cases.append(("transformer", randint(1, 3), randint(1, 9), heads * randint(2, 4), heads, randint(1, 24),
                      (torch.float32, torch.bfloat16)[randint(0, 1)], device))
    for i, args in enumerate(cases):
        expect_activation(activation_bytes, args, saved_bytes(*args, fused=i % 2 == 0))


@ACTIVATION_BYTES.check
def dtype_and_mask(activation_bytes):
    """the same block in float32 and bfloat16: every saved value halves, except the 1-byte causal mask"""
    for dtype in (torch.float32, torch.bfloat16):
        args = ("transformer", 2, 6, 8, 2, 12, dtype, "cpu")
        expect_activation(activation_bytes, args, saved_bytes(*args))


@ACTIVATION_BYTES.check
def shapes_no_tensor_can_hold(activation_bytes):
    """a batch of 2**20 sequences of 2**20 tokens: exact ints past 2**63 bytes, from the sizes alone

    No tensor of these sizes can exist, not even on the meta device, so running a block fails while arithmetic does
    not."""
    activation_bytes = at_sizes_no_tensor_can_hold(activation_bytes, "activation_bytes")
    expect_activation(activation_bytes, ("transformer", 2**20, 2**20, 2**16, 2**6, 2**18, torch.bfloat16, "cpu"),
                      {"total": 149_879_805_494_494_756_864, "mask": 2**40, "softmax": 2**67, "stats": 2**43,
                       "stats_values": 2**42}, "the count is")
    expect_activation(activation_bytes, ("mlp", 2**20, 2**20, 2**16, 2**6, 2**24, torch.float32, "cuda"),
                      {"total": 147_862_182_965_828_124_672, "mask": 0, "softmax": 0, "stats": 0, "stats_values": 0},
                      "the count is")


# ---------------------------------------------------------------- training_peak_bytes

_Embedding, _Parameter, _ModuleList = nn.Embedding, nn.Parameter, nn.ModuleList
_linear, _cross_entropy, _checkpoint = F.linear, F.cross_entropy, _torch_checkpoint
_AdamW, _no_grad, _randint, _is_tensor = torch.optim.AdamW, torch.no_grad, torch.randint, torch.is_tensor
_native_layer_norm = torch.ops.aten.native_layer_norm.default
_finalize = weakref.finalize
_get_threads, _set_threads = torch.get_num_threads, torch.set_num_threads
PEAK_KEYS = ("params", "grads", "optimizer_state", "activations", "peak")
LOSS_SCALARS = 8  # the loss and cross_entropy's total weight: two float32 scalars, alive but no activation


class _GPT(_Module):
    """A GPT-2-style decoder in bfloat16: a token embedding tied to the unembedding, learned positions, n_layers of the
    chapter's _Block (fused Q, K, V in every other one), a final LayerNorm; each block checkpointed (non-reentrant,
    keeping only its input) when asked."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, vocab_size: int, seq: int,
                 checkpointing: bool) -> None:
        super().__init__()
        dtype = torch.bfloat16
        self.tok = _Embedding(vocab_size, d_model, dtype=dtype)
        self.pos = _Parameter(_randn(seq, d_model).to(dtype) * 0.02)
        self.blocks = _ModuleList(_Block(d_model, n_heads, d_ff, dtype, i % 2 == 1) for i in range(n_layers))
        self.ln_f = _LayerNorm(d_model, dtype=dtype)
        self.checkpointing = checkpointing

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = _checkpoint(block, x, use_reentrant=False) if self.checkpointing else block(x)
        return _linear(self.ln_f(x), self.tok.weight)


class _LayerNormStats(TorchDispatchMode):
    """Counts the values of LayerNorm statistics (mean and 1/std) alive now: the ones a forward pass saved."""

    def __init__(self) -> None:
        super().__init__()
        self.alive: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is _native_layer_norm:
            for stat in out[1:]:
                storage = stat.untyped_storage()
                self.alive[id(storage)] = stat.numel()
                _finalize(storage, self.alive.pop, id(storage), None)
        return out


@_contextmanager
def _one_thread():
    """Run the oracle's tiny models on one thread: on a loaded machine two threads of tiny ops wait on each other far
    longer than they compute, and a check's time limit must not depend on the machine's load."""
    threads = _get_threads()
    _set_threads(1)
    try:
        yield
    finally:
        _set_threads(threads)


def _storage_bytes(tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


@once_per_process
def measured_step(n_layers: int, batch: int, seq: int, d_model: int, n_heads: int, d_ff: int, vocab_size: int,
                  checkpointing: bool = False, device: str = "cpu") -> dict[str, int]:
    """One steady-state training step of the real _GPT, measured on the CPU: bfloat16 weights and gradients, AdamW on
    float32 master weights (its state float32), the loss on float32 logits; the update one parameter at a time.

    num_params, and the keys of training_peak_bytes: params and optimizer_state from their storages; activations alive
    after the forward pass and grads after the backward pass (grader.course.memtrack); peak = params + optimizer_state
    + the larger of the backward pass's peak and the gradients (the loss's two scalars left out). For device="cuda",
    the LayerNorm statistics alive after the forward pass are repriced in the dtype CUDA keeps them in (STATS_DTYPE)."""
    _manual_seed(0)
    model = _GPT(n_layers, d_model, n_heads, d_ff, vocab_size, seq, checkpointing)
    params = list(model.parameters())
    masters = [p.detach().float().requires_grad_() for p in params]
    opts = [_AdamW([master], lr=1e-3, foreach=False) for master in masters]  # one at a time, as below
    idx, targets = _randint(vocab_size, (batch, seq)), _randint(vocab_size, (batch, seq))

    def step(mem=None, stats=None) -> tuple[int, int, int, int]:
        with stats if stats is not None else _nullcontext():
            loss = _cross_entropy(model(idx).float().flatten(0, 1), targets.flatten())
        forward = (mem.current, sum(stats.alive.values())) if mem else (0, 0)
        loss.backward()
        del loss
        backward = (mem.peak, mem.current) if mem else (0, 0)
        for p, master, opt in zip(params, masters, opts):  # AdamW on the float32 copy, one parameter at a time
            master.grad = p.grad.float()
            p.grad = None
            opt.step()
            master.grad = None
            with _no_grad():
                p.copy_(master)
        return forward + backward

    with _one_thread():
        step()  # the warm-up step: AdamW makes its state
        state = [t for opt in opts for s in opt.state.values() for t in s.values() if _is_tensor(t) and t.dim()]
        with _track_memory("cpu") as mem:
            alive, stats_values, backward_peak, grads = step(mem, _LayerNormStats())
    activations = alive - LOSS_SCALARS
    extra = stats_values * (ELEMENT_BYTES[STATS_DTYPE[device][torch.bfloat16]] - ELEMENT_BYTES[torch.bfloat16])
    out = {"num_params": sum(p.numel() for p in params), "params": _storage_bytes(params),
           "grads": grads, "optimizer_state": _storage_bytes(masters) + _storage_bytes(state),
           "activations": activations + extra, "backward": backward_peak - LOSS_SCALARS + extra}
    out["peak"] = out["params"] + out["optimizer_state"] + max(out["backward"], grads)
    return out


def peak_call(args: tuple, checkpointing: bool, device: str) -> str:
    return f"training_peak_bytes({', '.join(map(str, args))}, checkpointing={checkpointing}, device={device!r})"


def _peak_hint(key: str, got: int, want: dict[str, int], args: tuple, checkpointing: bool) -> str:
    """The named mistake a wrong part matches."""
    n, layers, b, s, d, h, f, v = args
    tokens, total = b * s, want[key]
    if key in ("params", "grads") and got == 2 * total:
        return f" (4 bytes per parameter is float32; the model's {key} are bfloat16, 2 bytes)"
    if key == "optimizer_state" and got == 8 * n:
        return (" (8 bytes per parameter is AdamW's two moments alone: the float32 master copy of the weights, 4 more, "
                "is optimizer state too: 12 in all)")
    if key == "optimizer_state" and got == 16 * n:
        return (" (16 bytes per parameter is the whole step's: the optimizer's part is 12, master weights and two "
                "moments)")
    if key in ("activations", "peak"):
        if got == total - 4 * tokens * v:
            return (" (the loss's log-probabilities are missing: cross_entropy saves its float32 log-softmax output, "
                    "batch x seq x vocab_size x 4 bytes, the largest single activation)")
        if got == total - 2 * tokens * v:
            return (" (the log-probabilities counted in bfloat16: the logits are cast to float32 for the loss, and "
                    "cross_entropy saves its float32 log-softmax output, 4 bytes per value)")
        if checkpointing and got == total - layers * tokens * d * 2:
            return " (with checkpointing each block still keeps its input, batch x seq x d_model bfloat16 values)"
    if key == "activations" and got == total - 2 * tokens * d * 2 - want["head_stats"]:
        return (" (the final LayerNorm and the unembedding are missing: LayerNorm keeps its input and statistics, the "
                "unembedding its input, the normalized output)")
    if key == "peak":
        if got == total - 8 * tokens * v:
            return (" (the loss's backward is missing: it makes the gradients of the log-probabilities and of the "
                    "float32 logits, batch x seq x vocab_size x 4 bytes each, while everything the forward saved is "
                    "still alive)")
        if got == want["params"] + want["grads"] + want["optimizer_state"] + want["activations"]:
            return (" (that is every part added up, but gradients and activations are never all alive at once: count "
                    "the two moments, when backward begins, with the loss's two float32 gradients and no parameter "
                    "gradient yet, and when it ends, with no activation left)")
        if got == want["params"] + want["grads"] + want["optimizer_state"] + want["activations"] + 8 * tokens * v:
            return (" (that adds the gradients to the moment backward begins: no gradient exists yet then, and by the "
                    "end of backward the activations are gone: count the larger of the two moments)")
        if got == want["params"] + want["optimizer_state"] + want["activations"] + 8 * tokens * v:
            return (" (that is the moment backward begins; after backward the gradients, weights and optimizer state "
                    "are alive, 16 bytes per parameter, and here that is larger: the peak is the larger of the two)")
    return factor_hint(got, total)


def expect_peak(training_peak_bytes, args: tuple, want: dict[str, int], checkpointing: bool = False,
                device: str = "cpu", what_counts: str = "a measured step holds") -> None:
    """training_peak_bytes(*args, checkpointing=..., device=...) returns `want`'s five parts, exactly."""
    what = peak_call(args, checkpointing, device)
    got = training_peak_bytes(*args, checkpointing=checkpointing, device=device)
    expect_type(got, dict, what)
    expect_equal(sorted(got), sorted(PEAK_KEYS), f"{what}'s keys")
    for key in PEAK_KEYS:
        value = expect_int(got[key], f"{what}[{key!r}]")
        if value != want[key]:
            fail(f"{what}[{key!r}] is {value:,}; {what_counts} {want[key]:,} bytes"
                 + _peak_hint(key, value, want, args, checkpointing))


def measured_case(n_layers: int, batch: int, seq: int, d_model: int, n_heads: int, d_ff: int, vocab_size: int,
                  checkpointing: bool = False, device: str = "cpu") -> tuple[tuple, dict[str, int]]:
    """The arguments of training_peak_bytes for a real _GPT, and what its measured step holds."""
    got = measured_step(n_layers, batch, seq, d_model, n_heads, d_ff, vocab_size, checkpointing, device)
    stats_size = ELEMENT_BYTES[STATS_DTYPE[device][torch.bfloat16]]
    got["head_stats"] = 2 * batch * seq * stats_size  # the final LayerNorm's statistics, for a hint
    return (got["num_params"], n_layers, batch, seq, d_model, n_heads, d_ff, vocab_size), got


@TRAINING_PEAK_BYTES.check
def small_gpt_by_hand(training_peak_bytes):
    """a GPT of 1,000 parameters, 2 layers, batch 2 x 4 tokens, vocabulary 64 on the CPU: peak 24,944 bytes by hand

    d_model 8, 2 heads, d_ff 32: params 2,000, grads 2,000, optimizer state 12,000, activations 6,848 bytes. Per
    block 2,256 bytes (activation_bytes in bfloat16); the final LayerNorm's input and statistics and the
    unembedding's input, 288; the float32 log-probabilities, 2,048; at the start of backward the loss's two float32
    gradients add 4,096 to the weights' and the optimizer's 14,000."""
    expect_peak(training_peak_bytes, (1000, 2, 2, 4, 8, 2, 32, 64),
                {"params": 2000, "grads": 2000, "optimizer_state": 12000, "activations": 6848, "peak": 24944,
                 "head_stats": 32}, what_counts="by hand it is")


@TRAINING_PEAK_BYTES.check
def checkpointing_and_the_larger_moment(training_peak_bytes):
    """with checkpointing (activations 2,592 bytes), with 10**6 parameters (peak 16,000,000 bytes), and on CUDA

    Checkpointed, each block keeps only its input. With 10**6 parameters the 16 bytes per parameter after backward
    outweigh the moment backward begins. And on CUDA, without checkpointing: the five LayerNorms keep 80 float32
    statistics, 160 bytes more."""
    expect_peak(training_peak_bytes, (1000, 2, 2, 4, 8, 2, 32, 64),
                {"params": 2000, "grads": 2000, "optimizer_state": 12000, "activations": 2592, "peak": 20688,
                 "head_stats": 32}, checkpointing=True, what_counts="by hand it is")
    expect_peak(training_peak_bytes, (10**6, 2, 2, 4, 8, 2, 32, 64),
                {"params": 2 * 10**6, "grads": 2 * 10**6, "optimizer_state": 12 * 10**6, "activations": 2592,
                 "peak": 16 * 10**6, "head_stats": 32}, checkpointing=True, what_counts="by hand it is")
    expect_peak(training_peak_bytes, (1000, 2, 2, 4, 8, 2, 32, 64),
                {"params": 2000, "grads": 2000, "optimizer_state": 12000, "activations": 7008, "peak": 25104,
                 "head_stats": 64}, device="cuda", what_counts="by hand it is")


@TRAINING_PEAK_BYTES.check
def agrees_with_a_measured_step(training_peak_bytes):
    """a real bfloat16 GPT trained with AdamW on float32 master weights: each part and the peak, as measured

    With and without checkpointing: parameters, gradients, optimizer state and activations each where they are
    alive, and the peak of the step."""
    for checkpointing in (False, True):
        args, want = measured_case(2, 2, 8, 16, 2, 48, 320, checkpointing)
        expect_peak(training_peak_bytes, args, want, checkpointing)
    checkpointing = randint(0, 1) == 1
    args, want = measured_case(1, randint(1, 3), randint(4, 10), 12, 3, randint(8, 40), randint(400, 600),
                               checkpointing)
    expect_peak(training_peak_bytes, args, want, checkpointing)


@TRAINING_PEAK_BYTES.check
def shapes_no_tensor_can_hold(training_peak_bytes):
    """2**40 parameters, a batch of 2**20 sequences of 2**20 tokens: exact ints past 2**63 bytes, checkpointed or not"""
    training_peak_bytes = at_sizes_no_tensor_can_hold(training_peak_bytes, "training_peak_bytes")
    args = (2**40, 2**10, 2**20, 2**20, 2**16, 2**6, 2**18, 2**17)
    weights = {"params": 2**41, "grads": 2**41, "optimizer_state": 12 * 2**40, "head_stats": 2**42}
    expect_peak(training_peak_bytes, args, {**weights, "activations": 153_477_785_521_889_132_675_072,
                                            "peak": 153_478_938_458_786_902_310_912}, what_counts="the count is")
    expect_peak(training_peak_bytes, args, {**weights, "activations": 148_438_648_116_178_059_264,
                                            "peak": 149_591_585_013_947_695_104}, checkpointing=True,
                what_counts="the count is")


# ---------------------------------------------------------------- kv_cache_bytes

_sdpa, _cat = F.scaled_dot_product_attention, torch.cat


class _CachedDecoder(_Module):
    """A decoder of attention layers with grouped-query attention (n_heads query heads share n_kv_heads key and value
    heads of head_dim values) that generates one token at a time, keeping each layer's keys and values of every
    token so far: the cache, which torch's scaled_dot_product_attention reads (enable_gqa)."""

    def __init__(self, n_layers: int, n_heads: int, n_kv_heads: int, head_dim: int, vocab_size: int,
                 dtype: torch.dtype) -> None:
        super().__init__()
        d_model, kv = n_heads * head_dim, n_kv_heads * head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.embed = _Embedding(vocab_size, d_model, dtype=dtype)
        self.q = _ModuleList(_Linear(d_model, d_model, bias=False, dtype=dtype) for _ in range(n_layers))
        self.kv = _ModuleList(_Linear(d_model, 2 * kv, bias=False, dtype=dtype) for _ in range(n_layers))
        self.o = _ModuleList(_Linear(d_model, d_model, bias=False, dtype=dtype) for _ in range(n_layers))
        self.unembed = _Linear(d_model, vocab_size, bias=False, dtype=dtype)

    def forward(self, tokens: torch.Tensor, cache: list) -> torch.Tensor:
        """Logits after `tokens` (batch, new): attends to the cache and the new tokens, appending these to the cache
        (every position sees itself and the past: causal)."""
        b, new = tokens.shape
        x = self.embed(tokens)
        for i, (q_proj, kv_proj, o_proj) in enumerate(zip(self.q, self.kv, self.o)):
            q = q_proj(x).view(b, new, self.n_heads, self.head_dim).transpose(1, 2)
            k, v = (t.transpose(1, 2) for t in kv_proj(x).view(b, new, 2, self.n_kv_heads, self.head_dim).unbind(2))
            if i < len(cache):
                k, v = _cat([cache[i][0], k], dim=2), _cat([cache[i][1], v], dim=2)
                cache[i] = (k, v)
            else:
                cache.append((k, v))
            attended = _sdpa(q, k, v, is_causal=cache[i][0].shape[2] == new and new > 1, enable_gqa=True)
            x = x + o_proj(attended.transpose(1, 2).reshape(b, new, -1))
        return self.unembed(x)


@once_per_process
def measured_cache(n_layers: int, n_heads: int, n_kv_heads: int, head_dim: int, context: int, batch: int,
                   dtype: torch.dtype) -> int:
    """Bytes a real _CachedDecoder holds after generating `context` tokens one at a time (grader.course.memtrack: the
    tensor bytes still alive once the last logits are dropped)."""
    _manual_seed(0)
    vocab = 16
    model = _CachedDecoder(n_layers, n_heads, n_kv_heads, head_dim, vocab, dtype)
    tokens = _randint(vocab, (batch, 1))
    with _one_thread(), _no_grad(), _track_memory("cpu") as mem:
        cache: list = []
        for _ in range(context):
            tokens = model(tokens, cache)[:, -1].argmax(-1, keepdim=True)
        del tokens
        held = mem.current
    return held


def kv_call(args: tuple) -> str:
    layers, kv_heads, head_dim, context, batch, dtype = args
    return f"kv_cache_bytes({layers}, {kv_heads}, {head_dim}, {context}, {batch}, {dtype})"


def _kv_hint(got: int, want: int, args: tuple) -> str:
    layers, kv_heads, head_dim, context, batch, dtype = args
    size, name = ELEMENT_BYTES[dtype], str(dtype).removeprefix("torch.")
    if size == 2 and got * 2 == want:
        return (f" (half of it: every layer caches a key and a value per token, two tensors, and each {name} value "
                "takes 2 bytes)")
    if size > 1 and got * size == want:
        return f" (that counts values: multiply by the {size} bytes of a {name} value)"
    if got * 2 == want:
        return " (keys or values alone: every layer caches both, two tensors)"
    if size != 4 and got * size == want * 4:
        return f" (that counts 4 bytes per value; a {name} value takes {size})"
    if context > 1 and got == want // context * (context - 1):
        return f" (the cache after {context} tokens holds all {context} of them: each token's key and value are kept)"
    return factor_hint(got, want)


def expect_kv(kv_cache_bytes, args: tuple, want: int, what_counts: str = "a real cache holds") -> None:
    what = kv_call(args)
    got = expect_int(kv_cache_bytes(*args), what)
    if got != want:
        fail(f"{what} returned {got:,}; {what_counts} {want:,} bytes" + _kv_hint(got, want, args))


@KV_CACHE_BYTES.check
def published_shapes_by_hand(kv_cache_bytes):
    """Llama 2 7B caches 2 GiB per 4,096-token sequence in float16; Llama 3 8B (GQA) 1 GiB per 8,192 in bfloat16

    Llama 2 7B: 32 layers, 32 KV heads of 128. Llama 3 8B: 32 layers, 8 KV heads of 128 (grouped-query attention); a
    batch of 16 sequences holds 16 times that."""
    expect_kv(kv_cache_bytes, (32, 32, 128, 4096, 1, torch.float16), 2 * 2**30, "by hand it is")
    expect_kv(kv_cache_bytes, (32, 8, 128, 8192, 1, torch.bfloat16), 2**30, "by hand it is")
    expect_kv(kv_cache_bytes, (32, 8, 128, 8192, 16, torch.bfloat16), 16 * 2**30, "by hand it is")


@KV_CACHE_BYTES.check
def agrees_with_a_real_cache(kv_cache_bytes):
    """real decoders generating token by token, with and without GQA: the cache they hold, measured

    One layer or several, as many KV heads as query heads or fewer, float32 and bfloat16, after one token or many."""
    cases = [(1, 2, 2, 4, 3, 1, torch.float32), (2, 4, 1, 8, 5, 2, torch.bfloat16), (3, 6, 2, 2, 1, 3, torch.float32)]
    for _ in range(2):
        kv_heads = randint(1, 3)
        cases.append((randint(1, 3), kv_heads * randint(1, 3), kv_heads, randint(1, 8), randint(1, 12), randint(1, 3),
                      (torch.float32, torch.bfloat16)[randint(0, 1)]))
    for layers, heads, kv_heads, head_dim, context, batch, dtype in cases:
        expect_kv(kv_cache_bytes, (layers, kv_heads, head_dim, context, batch, dtype),
                  measured_cache(layers, heads, kv_heads, head_dim, context, batch, dtype))


@KV_CACHE_BYTES.check
def shapes_no_tensor_can_hold(kv_cache_bytes):
    """1,024 layers of 1,024 KV heads of 1,024 values, 2**30 tokens, a batch of 2**14, bfloat16: 2**76 bytes, exactly

    One layer's keys alone would be a tensor of 2**64 values: none can exist, not even on the meta device."""
    kv_cache_bytes = at_sizes_no_tensor_can_hold(kv_cache_bytes, "kv_cache_bytes")
    expect_kv(kv_cache_bytes, (2**10, 2**10, 2**10, 2**30, 2**14, torch.bfloat16), 2**76, "the count is")
    expect_kv(kv_cache_bytes, (80, 8, 128, 10**15, 3, torch.float8_e4m3fn), 491_520 * 10**15, "the count is")
