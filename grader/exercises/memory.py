"""Chapter 03 (memory): public checks. Hidden checks for the same exercises live in grader/hidden/memory.py.

activation_bytes is checked against torch's own record of what autograd saves (`saved_tensors_hooks`, bound at
import) on real blocks built here (`_MLP`, `_Block`), whose saved tensors are also sorted into parts, so a wrong
count can be told which part went wrong.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from grader.expect import (call, describe, expect, expect_equal, expect_raises, expect_tensor, expect_tensor_like,
                           expect_type, factor_hint, fail)
from grader.inputs import randint
from grader.registry import exercise
from grader.scenario import run_scenario
from grader.scenarios import memory as scenarios

GET_MEMORY_USAGE = exercise("memory.get_memory_usage", points=1)
TENSOR_NBYTES = exercise("memory.tensor_nbytes", points=1)
COMPACT = exercise("memory.compact", points=2)
TRAINING_MEMORY = exercise("memory.training_memory", points=2)
MAX_PARAMS = exercise("memory.max_params", points=1)
# Recording the saved tensors of a real block is the shortcut (and cannot reach the sizes of the hidden checks):
# refused while the student's function runs, under any name.
ACTIVATION_BYTES = exercise("memory.activation_bytes", points=3,
                            forbid=("torch.autograd.graph.saved_tensors_hooks.__enter__",
                                    "torch.autograd.graph.saved_tensors_hooks"))
GET_BATCH = exercise("memory.get_batch", points=3)

# Bytes per element of every dtype, from the formats' definitions (literals: the check computes nothing the
# exercise asks for).
ELEMENT_BYTES = {torch.float64: 8, torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.int64: 8,
                 torch.int32: 4, torch.int16: 2, torch.int8: 1, torch.uint8: 1, torch.bool: 1, torch.complex64: 8,
                 torch.complex128: 16, torch.float8_e4m3fn: 1, torch.float8_e5m2: 1}
STATES = {"sgd": 0, "momentum": 1, "adagrad": 1, "adam": 2}
KEYS = ("params", "grads", "optimizer_state", "activations", "total")


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
    expect(got == want, f"{what} returned {got}; expected {want}{factor_hint(got, want)}")


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
    expect(got == want, f"{what} returned {got}; expected {want}{factor_hint(got, want)}")


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

def expect_batches(out, tokens: list[int], batch_size: int, context_length: int, what: str) -> set[int]:
    """Every (x, y) has the right shapes, dtype and device, is a real window with targets shifted by one;
    returns the start positions seen."""
    data = torch.tensor(tokens, dtype=torch.int64)
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
        for row in range(batch_size):
            start = int(x[row, 0])  # tokens are 0, 1, 2, ...: a token's value is its position
            window = data[start:start + context_length + 1]
            if window.numel() != context_length + 1 or not torch.equal(x[row], window[:-1]) or \
                    not torch.equal(y[row], window[1:]):
                fail(f"{what}: row {row} is not a window of the data: x = {x[row].tolist()}, y = {y[row].tolist()}")
            starts.add(start)
    return starts


@GET_BATCH.check
def windows_and_targets(get_batch):
    """x and y are (batch_size, context_length) int64 windows of the data, y shifted by one"""
    tokens = list(range(100))
    out = run_scenario(scenarios.batches, get_batch, tokens, 4, 8, 5, 0)
    expect_batches(out, tokens, 4, 8, "get_batch(memmap of 100 tokens, 4, 8, 'cpu')")


@GET_BATCH.check
def every_start_is_reachable(get_batch):
    """on 12 tokens with context 4, all 8 start positions 0..7 turn up, the last one included"""
    tokens = list(range(12))
    out = run_scenario(scenarios.batches, get_batch, tokens, 8, 4, 40, 1)
    starts = expect_batches(out, tokens, 8, 4, "get_batch(memmap of 12 tokens, 8, 4, 'cpu')")
    # 320 draws from 8 starts: a correct answer misses a start with probability below 1e-17.
    missing = sorted(set(range(8)) - starts)
    expect(not missing, f"get_batch(memmap of 12 tokens, 8, 4, 'cpu') never started a window at {missing} in 320 "
                        "rows; the last valid start is len(data) - context_length - 1 = 7")


@GET_BATCH.check
def too_short(get_batch):
    """data shorter than one window plus its target raises ValueError"""
    expect_raises(ValueError, lambda: run_scenario(scenarios.batches, get_batch, list(range(8)), 2, 8, 1, 0),
                  "get_batch(memmap of 8 tokens, 2, 8, 'cpu')")


@GET_BATCH.check
def reads_only_what_it_needs(get_batch):
    """on a memmap of 2**23 tokens (16 MiB), one batch touches a few pages, not the whole file"""
    expect_reads_little(get_batch, 8, 32, 2)


def expect_on_device(get_batch, length: int, batch_size: int, context_length: int, device, seed: int) -> None:
    """x and y are int64 (batch_size, context_length) tensors on the meta device when asked for it."""
    what = f"get_batch(memmap of {length} tokens, {batch_size}, {context_length}, device={device!r})"
    out = run_scenario(scenarios.layout, get_batch, list(range(length)), batch_size, context_length, device, seed)
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
    tokens = list(range(length))
    what = f"get_batch(memmap of {length} tokens, {batch_size}, {context_length}, 'cpu')"
    out = run_scenario(scenarios.batches, get_batch, tokens, batch_size, context_length, draws, seed)
    starts = expect_batches(out, tokens, batch_size, context_length, what)
    per_batch = [len(set(x[:, 0].tolist())) for x, _ in out]
    expect(min(per_batch) > 1, f"{what} gave every row of a batch the same start: draw one start per row")
    expect(len(starts) > draws * batch_size // 2,
           f"{what}: {draws * batch_size} rows started at only {len(starts)} positions; starts must be independent "
           "and uniform")


@GET_BATCH.check
def each_row_its_own_start(get_batch):
    """each row of a batch starts at its own random position, not one start for the whole batch"""
    expect_own_starts(get_batch, 3000, 6, 4, 4, 8)


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
_sqrt = math.sqrt


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


def saved_bytes(block: str, batch: int, seq: int, d_model: int, n_heads: int, d_ff: int, dtype: torch.dtype, *,
                fused: bool = False) -> dict[str, int]:
    """What autograd saves for backward in one forward pass of the real block on a (batch, seq, d_model) input that
    requires grad: bytes of every distinct storage saved, parameters left out (they are in memory anyway). Also
    sorted into parts for the hints: the 1-byte bool mask, the softmax outputs (the only (.., seq, seq) float
    tensors), the LayerNorms' per-token statistics (last dimension 1), and the rest."""
    _manual_seed(0)
    model = _MLP(d_model, d_ff, dtype) if block == "mlp" else _Block(d_model, n_heads, d_ff, dtype, fused)
    x = _randn(batch, seq, d_model).to(dtype).requires_grad_()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, tuple[int, tuple[int, ...], torch.dtype]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = (storage.nbytes(), tuple(t.shape), t.dtype)
        return t

    with _SavedHooks(pack, lambda t: t):
        model(x)
    parts = {"total": 0, "mask": 0, "softmax": 0, "stats": 0}
    for nbytes, shape, kind in saved.values():
        parts["total"] += nbytes
        if kind == _bool:
            parts["mask"] += nbytes
        elif block != "mlp" and shape[-2:] == (seq, seq) and \
                nbytes == batch * n_heads * seq * seq * ELEMENT_BYTES[dtype]:
            parts["softmax"] += nbytes
        elif block != "mlp" and shape == (batch, seq, 1) and d_model > 1:
            parts["stats"] += nbytes
    return parts


def _activation_hint(got: int, want: dict[str, int], args: tuple) -> str:
    """The named mistake a wrong count matches (several shapes are checked, so each mistake shows in one)."""
    block, b, s, d, h, f, dtype = args
    size, total = ELEMENT_BYTES[dtype], want["total"]
    tokens = b * s
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
        return " (the LayerNorms' statistics are missing: each keeps a mean and 1/std per token, in the dtype)"
    weights = 2 * d * f if block == "mlp" else 2 * d * f + 4 * d * d
    everything = weights + d + f if block == "mlp" else weights + d + f + 4 * d + 4 * d
    if got in (total + weights * size, total + everything * size):
        return (" (that counts the parameters: they are in memory whatever the step does; activations are what "
                "the forward pass adds)")
    if block != "mlp" and got == total - 3 * tokens * d * size:
        return " (q, k and v are missing: the scores matmul saves q and k, the weighted sum saves v)"
    return factor_hint(got, total)


def expect_activation(activation_bytes, args: tuple, want: dict[str, int] | None = None,
                      what_counts: str = "autograd saves") -> None:
    block, b, s, d, h, f, dtype = args
    want = want or saved_bytes(*args)
    what = f"activation_bytes({block!r}, {b}, {s}, {d}, {h}, {f}, {dtype})"
    got = activation_bytes(*args)
    if type(got) is not int:
        fail(f"{what} should return a Python int, got {describe(got)}")
    if got != want["total"]:
        fail(f"{what} returned {got:,}; {what_counts} {want['total']:,} bytes" + _activation_hint(got, want, args))


@ACTIVATION_BYTES.check
def tiny_blocks_by_hand(activation_bytes):
    """batch 2, seq 5, d_model 6, 3 heads, d_ff 7 in float32: the MLP saves 800 bytes, the block 3,265

    The block's 3,265: 2,640 bytes of per-token tensors, 600 of softmax weights and 25 of the bool mask."""
    expect_activation(activation_bytes, ("mlp", 2, 5, 6, 3, 7, torch.float32),
                      {"total": 800, "mask": 0, "softmax": 0, "stats": 0}, "by hand it is")
    expect_activation(activation_bytes, ("transformer", 2, 5, 6, 3, 7, torch.float32),
                      {"total": 3265, "mask": 25, "softmax": 600, "stats": 160}, "by hand it is")


@ACTIVATION_BYTES.check
def agrees_with_saved_tensors_hooks(activation_bytes):
    """real blocks built here, float32 and bfloat16, against what saved_tensors_hooks records

    Fused or separate Q, K, V projections; one head or several; a batch of one, a sequence of one."""
    cases = [("mlp", 3, 5, 8, 1, 20, torch.bfloat16), ("transformer", 2, 5, 12, 3, 20, torch.float32),
             ("transformer", 1, 7, 8, 4, 16, torch.bfloat16), ("transformer", 3, 1, 6, 2, 5, torch.float32),
             ("transformer", 2, 4, 6, 1, 9, torch.bfloat16)]
    for _ in range(2):
        heads = randint(1, 4)
        cases.append(("transformer", randint(1, 3), randint(1, 9), heads * randint(1, 4), heads, randint(1, 24),
                      (torch.float32, torch.bfloat16)[randint(0, 1)]))
    for i, args in enumerate(cases):
        expect_activation(activation_bytes, args, saved_bytes(*args, fused=i % 2 == 0))


@ACTIVATION_BYTES.check
def dtype_and_mask(activation_bytes):
    """the same block in float32 and bfloat16: every saved value halves, except the 1-byte causal mask"""
    for dtype in (torch.float32, torch.bfloat16):
        args = ("transformer", 2, 6, 8, 2, 12, dtype)
        expect_activation(activation_bytes, args, saved_bytes(*args))
