"""Chapter 03 (memory): hidden checks, run only at grading."""
from __future__ import annotations

import math

import torch

from grader.exercises.memory import (ACTIVATION_BYTES, COMPACT, ELEMENT_BYTES, GET_BATCH, GET_MEMORY_USAGE,
                                     MAX_PARAMS, STATES, TENSOR_NBYTES, TRAINING_MEMORY, expect_activation,
                                     expect_batches, expect_compact, expect_input_unchanged, expect_max, expect_nbytes,
                                     expect_on_device, expect_own_starts, expect_reads_little, expect_training,
                                     expect_usage, saved_bytes)
from grader.expect import expect, expect_raises, fail
from grader.inputs import layouts, randint, random_shape
from grader.scenario import run_scenario
from grader.scenarios import memory as scenarios


@GET_MEMORY_USAGE.hidden
def every_dtype_and_layout(get_memory_usage):
    """every dtype, random shapes, views of bigger storages, expanded tensors"""
    for dtype, size in ELEMENT_BYTES.items():
        shape = random_shape(0, 3, 0, 5)
        x = torch.zeros(shape, dtype=torch.float32).to(dtype)
        expect_usage(get_memory_usage, x, math.prod(shape) * size, f"a {dtype} tensor of shape {shape}")
    base = torch.zeros(6, 7, dtype=torch.float64)
    for name, view in layouts(base):
        expect_usage(get_memory_usage, view, 42 * 8, f"a (6, 7) float64 {name}")
    expect_usage(get_memory_usage, torch.zeros(3).expand(1000, 3), 12000, "torch.zeros(3).expand(1000, 3)")


@TENSOR_NBYTES.hidden
def every_dtype(tensor_nbytes):
    """every dtype, random shapes as tuples, lists and torch.Size"""
    for dtype, size in ELEMENT_BYTES.items():
        shape = random_shape(0, 4, 0, 9)
        kind = randint(0, 2)
        given = shape if kind == 0 else list(shape) if kind == 1 else torch.Size(shape)
        expect_nbytes(tensor_nbytes, given, dtype, math.prod(shape) * size)


@TENSOR_NBYTES.hidden
def far_too_big_to_allocate(tensor_nbytes):
    """16 petabytes (no machine has them) is still an ordinary number of bytes"""
    expect_nbytes(tensor_nbytes, (2 * 10**6, 10**6, 1000), torch.complex128, 32 * 10**15)


@TRAINING_MEMORY.hidden
def random_sizes(training_memory):
    """random sizes, optimizers and dtypes"""
    dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
    for _ in range(20):
        expect_training(training_memory, randint(0, 10**9), randint(0, 10**9),
                        list(STATES)[randint(0, 3)], dtypes[randint(0, 3)])


@TRAINING_MEMORY.hidden
def more_dtypes_and_unknown_names(training_memory):
    """float8 and float64 sizes; 'adamw', 'rmsprop' and '' are unknown optimizers"""
    expect_training(training_memory, 12345, 678, "adam", torch.float8_e4m3fn)
    expect_training(training_memory, 12345, 678, "adagrad", torch.float64)
    for name in ("adamw", "rmsprop", ""):
        expect_raises(ValueError, lambda: training_memory(10, 10, name), f"training_memory(10, 10, {name!r})")


@MAX_PARAMS.hidden
def random_budgets(max_params):
    """random budgets and bytes per parameter, floats included"""
    for _ in range(30):
        memory, per = randint(0, 10**13), randint(1, 40)
        expect_max(max_params, memory, per, memory // per)
    expect_max(max_params, 80e9, 16, 5 * 10**9)
    expect_max(max_params, 80e9, 18.5, int(80e9 // 18.5))


@COMPACT.hidden
def random_views(compact):
    """random slices, transposes and dtypes of bigger tensors, and tensors that are already compact"""
    for _ in range(10):
        big = torch.randn(random_shape(2, 3, 3, 9)).to([torch.float32, torch.float16, torch.int64][randint(0, 2)])
        i = randint(0, big.shape[0] - 1)
        expect_compact(compact, big[i:i + 1], f"a one-row slice of a {tuple(big.shape)} tensor")
        expect_compact(compact, big.transpose(0, 1)[:2], f"two rows of a transposed {tuple(big.shape)} tensor")
    expect_compact(compact, torch.randn(4, 5), "a tensor that is already compact")
    expect_compact(compact, torch.tensor(3.0), "a 0-dim tensor")
    expect_compact(compact, torch.randn(40)[7:7], "an empty slice of a bigger tensor")


@COMPACT.hidden
def other_dtypes(compact):
    """bool, int8, complex64 and float8 slices"""
    base = torch.randn(64, 16)
    for dtype in (torch.bool, torch.int8, torch.complex64, torch.float8_e4m3fn):
        big = (base > 0) if dtype == torch.bool else base.to(dtype)
        expect_compact(compact, big[3:5], f"a (2, 16) {dtype} slice of a (64, 16) tensor")


@COMPACT.hidden
def leaves_the_input_alone(compact):
    """the input still views the big storage afterwards (compact makes a new tensor)"""
    expect_input_unchanged(compact, 300, 10, 20)


@GET_BATCH.hidden
def random_lengths_and_windows(get_batch):
    """random data lengths, batch sizes and context lengths; windows right up to the end"""
    for seed in range(5):
        length, ctx, batch = randint(10, 60), randint(1, 8), randint(1, 6)
        tokens = list(range(length))
        # 30 * starts rows: a correct answer misses the last start with probability about e^-30 (1e-13).
        draws = math.ceil(30 * (length - ctx) / batch)
        out = run_scenario(scenarios.batches, get_batch, tokens, batch, ctx, draws, seed)
        starts = expect_batches(out, tokens, batch, ctx, f"get_batch(memmap of {length} tokens, {batch}, {ctx})")
        expect(max(starts) == length - ctx - 1, f"get_batch(memmap of {length} tokens, {batch}, {ctx}) never used "
                                                "the last window")


@GET_BATCH.hidden
def exactly_one_window(get_batch):
    """data of exactly context_length + 1 tokens has one window, always start 0"""
    out = run_scenario(scenarios.batches, get_batch, list(range(9)), 3, 8, 3, 0)
    starts = expect_batches(out, list(range(9)), 3, 8, "get_batch(memmap of 9 tokens, 3, 8)")
    expect(starts == {0}, "get_batch(memmap of 9 tokens, 3, 8)")


@GET_BATCH.hidden
def random_draws_differ(get_batch):
    """two calls do not return the same windows every time"""
    out = run_scenario(scenarios.batches, get_batch, list(range(1000)), 4, 8, 6, 3)
    expect_batches(out, list(range(1000)), 4, 8, "get_batch(memmap of 1000 tokens, 4, 8)")
    firsts = {tuple(x[:, 0].tolist()) for x, _ in out}
    expect(len(firsts) > 1, "get_batch returned the same windows on every call")


@GET_BATCH.hidden
def device_argument(get_batch):
    """device given as torch.device("cpu") works too"""
    out = run_scenario(scenarios.batches, get_batch, list(range(50)), 2, 5, 2, 4, torch.device("cpu"))
    expect_batches(out, list(range(50)), 2, 5, "get_batch(memmap, 2, 5, torch.device('cpu'))")


@GET_BATCH.hidden
def one_token_short(get_batch):
    """exactly context_length tokens is one too few: ValueError"""
    expect_raises(ValueError, lambda: run_scenario(scenarios.batches, get_batch, list(range(5)), 1, 5, 1, 0),
                  "get_batch(memmap of 5 tokens, 1, 5)")


@GET_BATCH.hidden
def on_the_device_asked_for_as_a_device(get_batch):
    """x and y are made on `device`, given as torch.device("meta")"""
    expect_on_device(get_batch, 40, 3, 6, torch.device("meta"), 5)


@GET_BATCH.hidden
def rows_start_at_their_own_positions(get_batch):
    """each row of a batch has its own random start, not one start for the whole batch"""
    expect_own_starts(get_batch, 5000, 8, 4, 5, 6)


@GET_BATCH.hidden
def large_batches_read_little(get_batch):
    """64 windows of 16 tokens from a 16 MiB memmap still touch a small part of it"""
    expect_reads_little(get_batch, 64, 16, 9)


# ---------------------------------------------------------------- activation_bytes

def activation_parts(block: str, batch: int, seq: int, d_model: int, n_heads: int, d_ff: int,
                     dtype: torch.dtype) -> dict[str, int]:
    """What each layer saves, in closed form: an oracle written apart from the hooks the public checks use."""
    size, tokens = ELEMENT_BYTES[dtype], batch * seq
    mlp = tokens * (d_model + d_ff + d_ff) * size         # Linear 1's input, GELU's input, Linear 2's input
    if block == "mlp":
        return {"total": mlp, "mask": 0, "softmax": 0, "stats": 0}
    # the block's input, LN1's output (read by Q, K, V), q, k, v, the attention output (O's input), the
    # residual sum (LN2's input), LN2's output (the MLP's input, counted in `mlp`)
    widths = tokens * 7 * d_model * size
    stats = 2 * 2 * tokens * size                          # a mean and 1/std per token, two LayerNorms
    softmax = batch * n_heads * seq * seq * size           # kept by softmax, read by the weighted sum: one tensor
    mask = seq * seq                                       # bool
    return {"total": mlp + widths + stats + softmax + mask, "mask": mask, "softmax": softmax, "stats": stats}


@ACTIVATION_BYTES.hidden
def random_blocks_and_dtypes(activation_bytes_):
    """random shapes in float32, bfloat16, float16 and float64, against saved_tensors_hooks and a closed form"""
    dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
    cases = [("transformer", 1, 1, 1, 1, 1, torch.float32), ("mlp", 1, 1, 1, 1, 1, torch.float64),
             ("transformer", 4, 3, 6, 6, 2, torch.float16)]
    for _ in range(10):
        heads = randint(1, 4)
        cases.append((("mlp", "transformer")[randint(0, 1)], randint(1, 4), randint(1, 10), heads * randint(1, 5),
                      heads, randint(1, 30), dtypes[randint(0, 3)]))
    for args in cases:
        want = saved_bytes(*args, fused=randint(0, 1) == 1)
        assert want["total"] == activation_parts(*args)["total"], f"the grader's two references disagree on {args}"
        expect_activation(activation_bytes_, args, want)


@ACTIVATION_BYTES.hidden
def real_sizes_exactly(activation_bytes_):
    """GPT-2 small's sizes and 70B-sized widths at long contexts, and random huge shapes: exact ints, by arithmetic"""
    cases = [("transformer", 8, 1024, 768, 12, 3072, torch.float32), ("mlp", 8, 1024, 768, 12, 3072, torch.bfloat16),
             ("transformer", 1, 8192, 8192, 64, 28672, torch.bfloat16)]
    for _ in range(10):
        heads = 2 ** randint(0, 7)
        cases.append((("mlp", "transformer")[randint(0, 1)], randint(1, 4096), randint(1, 10**6),
                      heads * randint(1, 256), heads, randint(1, 131072),
                      (torch.float32, torch.bfloat16, torch.float64)[randint(0, 2)]))
    for args in cases:
        expect_activation(activation_bytes_, args, activation_parts(*args), "the count is")


@ACTIVATION_BYTES.hidden
def the_mlp_has_no_heads(activation_bytes_):
    """the MLP's count does not depend on n_heads; a block's grows by batch x seq^2 x bytes with each head"""
    for heads in (1, 2, 4):
        expect_activation(activation_bytes_, ("mlp", 3, 4, 8, heads, 10, torch.float32),
                          activation_parts("mlp", 3, 4, 8, 1, 10, torch.float32), "the count is")
