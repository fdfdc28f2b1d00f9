"""Chapter 03 (memory): hidden checks, run only at grading."""
from __future__ import annotations

import math

import torch

from grader.exercises.memory import (ACTIVATION_BYTES, COMPACT, ELEMENT_BYTES, GET_BATCH, GET_MEMORY_USAGE,
                                     KV_CACHE_BYTES, MAX_PARAMS, STATES, STATS_DTYPE, TENSOR_NBYTES,
                                     TRAINING_MEMORY, TRAINING_PEAK_BYTES, at_sizes_no_tensor_can_hold,
                                     expect_activation, expect_batches, expect_compact, expect_input_unchanged,
                                     expect_kv, expect_max, expect_nbytes, expect_on_device, expect_own_starts,
                                     expect_peak, expect_reads_little, expect_training, expect_uniform_starts,
                                     expect_usage, measured_cache, measured_case, saved_bytes, token_ids)
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


@TENSOR_NBYTES.hidden
def random_shapes_past_int64(tensor_nbytes):
    """random shapes of 3 to 5 dimensions of 2**21 to 2**40 each, past 2**63 elements: exact Python ints"""
    tensor_nbytes = at_sizes_no_tensor_can_hold(tensor_nbytes, "tensor_nbytes")
    dtypes = list(ELEMENT_BYTES)
    for _ in range(10):
        shape = tuple(2 ** randint(21, 40) + randint(0, 999) for _ in range(randint(3, 5)))
        dtype = dtypes[randint(0, len(dtypes) - 1)]
        expect_nbytes(tensor_nbytes, shape, dtype, math.prod(shape) * ELEMENT_BYTES[dtype])


@TRAINING_MEMORY.hidden
def random_sizes(training_memory):
    """random sizes, optimizers and dtypes"""
    dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
    for _ in range(20):
        expect_training(training_memory, randint(0, 10**9), randint(0, 10**9),
                        list(STATES)[randint(0, 3)], dtypes[randint(0, 3)])


@TRAINING_MEMORY.hidden
def counts_past_int64(training_memory):
    """10**20 parameters and 10**21 activations (past int64's 9.2 * 10**18): exact Python ints, no wrap-around"""
    for optimizer in ("adam", "momentum"):
        expect_training(training_memory, 10**20 + randint(0, 10**6), 10**21 + randint(0, 10**6), optimizer,
                        torch.float32)


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


@MAX_PARAMS.hidden
def budgets_past_2_to_the_53(max_params):
    """int budgets past 2**53 (where floats stop holding every integer) and past 2**63: exact Python ints"""
    expect_max(max_params, 10**18 - 1, 3, 333333333333333333)  # int((10**18 - 1) / 3) is 333333333333333312
    for _ in range(10):
        memory, per = randint(2**53, 10**18), randint(3, 40)
        expect_max(max_params, memory, per, memory // per)
    memory = 2**70 + randint(0, 10**9)  # past int64 too: no NumPy or torch integer holds it
    expect_max(max_params, memory, 24, memory // 24)


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
        tokens = token_ids(length)
        # 30 * starts rows: a correct answer misses the last start with probability about e^-30 (1e-13).
        draws = math.ceil(30 * (length - ctx) / batch)
        out = run_scenario(scenarios.batches, get_batch, tokens, batch, ctx, draws, seed)
        starts = expect_batches(out, tokens, batch, ctx, f"get_batch(memmap of {length} tokens, {batch}, {ctx})")
        expect(max(starts) == length - ctx - 1, f"get_batch(memmap of {length} tokens, {batch}, {ctx}) never used "
                                                "the last window")


@GET_BATCH.hidden
def exactly_one_window(get_batch):
    """data of exactly context_length + 1 tokens has one window, always start 0"""
    out = run_scenario(scenarios.batches, get_batch, token_ids(9), 3, 8, 3, 0)
    starts = expect_batches(out, token_ids(9), 3, 8, "get_batch(memmap of 9 tokens, 3, 8)")
    expect(starts == {0}, "get_batch(memmap of 9 tokens, 3, 8)")


@GET_BATCH.hidden
def random_draws_differ(get_batch):
    """two calls do not return the same windows every time"""
    out = run_scenario(scenarios.batches, get_batch, token_ids(1000), 4, 8, 6, 3)
    expect_batches(out, token_ids(1000), 4, 8, "get_batch(memmap of 1000 tokens, 4, 8)")
    firsts = {tuple(x[:, 0].tolist()) for x, _ in out}
    expect(len(firsts) > 1, "get_batch returned the same windows on every call")


@GET_BATCH.hidden
def device_argument(get_batch):
    """device given as torch.device("cpu") works too"""
    out = run_scenario(scenarios.batches, get_batch, token_ids(50), 2, 5, 2, 4, torch.device("cpu"))
    expect_batches(out, token_ids(50), 2, 5, "get_batch(memmap, 2, 5, torch.device('cpu'))")


@GET_BATCH.hidden
def one_token_short(get_batch):
    """exactly context_length tokens is one too few: ValueError"""
    expect_raises(ValueError, lambda: run_scenario(scenarios.batches, get_batch, token_ids(5), 1, 5, 1, 0),
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
def starts_uniform_at_any_seed(get_batch):
    """every start equally likely, at a seed drawn for this grading run"""
    expect_uniform_starts(get_batch, randint(0, 2**31 - 1))


@GET_BATCH.hidden
def large_batches_read_little(get_batch):
    """64 windows of 16 tokens from a 16 MiB memmap still touch a small part of it"""
    expect_reads_little(get_batch, 64, 16, 9)


# ---------------------------------------------------------------- activation_bytes

def activation_parts(block: str, batch: int, seq: int, d_model: int, n_heads: int, d_ff: int, dtype: torch.dtype,
                     device: str = "cpu") -> dict[str, int]:
    """What each layer saves, in closed form: an oracle written apart from the hooks the public checks use."""
    size, tokens = ELEMENT_BYTES[dtype], batch * seq
    mlp = tokens * (d_model + d_ff + d_ff) * size         # Linear 1's input, GELU's input, Linear 2's input
    if block == "mlp":
        return {"total": mlp, "mask": 0, "softmax": 0, "stats": 0, "stats_values": 0}
    # the block's input, LN1's output (read by Q, K, V), q, k, v, the attention output (O's input), the
    # residual sum (LN2's input), LN2's output (the MLP's input, counted in `mlp`)
    widths = tokens * 7 * d_model * size
    stats_values = 2 * 2 * tokens                          # a mean and 1/std per token, two LayerNorms
    stats = stats_values * ELEMENT_BYTES[STATS_DTYPE[device][dtype]]   # float32 on CUDA for 16-bit inputs
    softmax = batch * n_heads * seq * seq * size           # kept by softmax, read by the weighted sum: one tensor
    mask = seq * seq                                       # bool
    return {"total": mlp + widths + stats + softmax + mask, "mask": mask, "softmax": softmax, "stats": stats,
            "stats_values": stats_values}


def _devices() -> str:
    return ("cpu", "cuda")[randint(0, 1)]


@ACTIVATION_BYTES.hidden
def random_blocks_and_dtypes(activation_bytes_):
    """random shapes in float32, bfloat16, float16 and float64, for the CPU and CUDA, against saved_tensors_hooks and a
    closed form"""
    dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
    cases = [("transformer", 1, 1, 1, 1, 1, torch.float32, "cpu"), ("mlp", 1, 1, 1, 1, 1, torch.float64, "cuda"),
             ("transformer", 4, 3, 6, 6, 2, torch.float16, "cuda"),
             ("transformer", 2, 3, 4, 2, 5, torch.float16, "cpu")]
    for _ in range(10):
        heads = randint(1, 4)
        cases.append((("mlp", "transformer")[randint(0, 1)], randint(1, 4), randint(1, 10), heads * randint(1, 5),
                      heads, randint(1, 30), dtypes[randint(0, 3)], _devices()))
    for args in cases:
        want = saved_bytes(*args, fused=randint(0, 1) == 1)
        assert want["total"] == activation_parts(*args)["total"], f"the grader's two references disagree on {args}"
        expect_activation(activation_bytes_, args, want)


@ACTIVATION_BYTES.hidden
def real_sizes_exactly(activation_bytes_):
    """GPT-2 small's sizes and 70B-sized widths at long contexts, and random huge shapes: exact ints, by arithmetic"""
    cases = [("transformer", 8, 1024, 768, 12, 3072, torch.float32, "cpu"),
             ("mlp", 8, 1024, 768, 12, 3072, torch.bfloat16, "cuda"),
             ("transformer", 1, 8192, 8192, 64, 28672, torch.bfloat16, "cuda")]
    for _ in range(10):
        heads = 2 ** randint(0, 7)
        cases.append((("mlp", "transformer")[randint(0, 1)], randint(1, 4096), randint(1, 10**6),
                      heads * randint(1, 256), heads, randint(1, 131072),
                      (torch.float32, torch.bfloat16, torch.float64, torch.float16)[randint(0, 3)], _devices()))
    for args in cases:
        expect_activation(activation_bytes_, args, activation_parts(*args), "the count is")


@ACTIVATION_BYTES.hidden
def the_mlp_has_no_heads(activation_bytes_):
    """the MLP's count does not depend on n_heads or the device; a block's grows by batch x seq^2 x bytes per head"""
    for heads in (1, 2, 4):
        for device in ("cpu", "cuda"):
            expect_activation(activation_bytes_, ("mlp", 3, 4, 8, heads, 10, torch.bfloat16, device),
                              activation_parts("mlp", 3, 4, 8, 1, 10, torch.bfloat16), "the count is")


# ---------------------------------------------------------------- training_peak_bytes

def peak_parts(num_params: int, n_layers: int, batch: int, seq: int, d_model: int, n_heads: int, d_ff: int,
               vocab_size: int, checkpointing: bool = False, device: str = "cpu") -> dict[str, int]:
    """The step's parts in closed form, from activation_parts: the reference the measured step is compared with."""
    tokens, stats = batch * seq, ELEMENT_BYTES[STATS_DTYPE[device][torch.bfloat16]]
    if checkpointing:
        blocks = n_layers * tokens * d_model * 2                         # each block keeps its bfloat16 input
    else:
        blocks = n_layers * activation_parts("transformer", batch, seq, d_model, n_heads, d_ff, torch.bfloat16,
                                             device)["total"]
    head = tokens * (2 * d_model * 2 + 2 * stats + 4 * vocab_size)  # final LN's input and stats, its output, log-probs
    out = {"params": 2 * num_params, "grads": 2 * num_params, "optimizer_state": 12 * num_params,
           "activations": blocks + head, "head_stats": 2 * tokens * stats}
    out["peak"] = out["params"] + out["optimizer_state"] + max(out["activations"] + 8 * tokens * vocab_size,
                                                               out["grads"])
    return out


@TRAINING_PEAK_BYTES.hidden
def random_measured_steps(training_peak_bytes):
    """random GPTs trained one step and measured, with and without checkpointing, for the CPU's rule and CUDA's"""
    for _ in range(3):
        args, want, checkpointing, device = agreeing_measured_case()
        expect_peak(training_peak_bytes, args, want, checkpointing, device)


def agreeing_measured_case(tries: int = 20) -> tuple[tuple, dict[str, int], bool, str]:
    """A random small GPT whose measured step peaks at one of the exercise's two moments. In about one small GPT in
    seventy (d_model 15, 4 tokens, say) the backward pass peaks in between, gradients of the vocabulary-sized
    weights made while most activations still live, above both moments: the exercise's rule does not describe
    that step, so it cannot judge an answer, and another size is drawn."""
    for _ in range(tries):
        heads = randint(1, 3)
        size = (randint(1, 3), randint(2, 3), randint(4, 10), heads * randint(2, 5), heads, randint(8, 40))
        checkpointing = randint(0, 1) == 1
        device = _devices()
        args, want = measured_case(*size, randint(400, 700), checkpointing, device)
        reference = peak_parts(*args, checkpointing, device)
        disagree = [k for k in reference if want[k] != reference[k]]
        if not disagree:
            return args, want, checkpointing, device
        if disagree != ["peak"]:
            raise AssertionError(f"the grader's references disagree on {args}: {want} measured, {reference} counted")
    raise AssertionError(f"{tries} random GPTs in a row peaked between the exercise's two moments")


@TRAINING_PEAK_BYTES.hidden
def real_and_huge_sizes(training_peak_bytes):
    """GPT-2 XL's sizes at batch 1 and 16, and random sizes up to 2**40 parameters and contexts of 2**20: exact ints"""
    cases = [((1_557_611_200, 48, 1, 1024, 1600, 25, 6400, 50257), False, "cuda"),
             ((1_557_611_200, 48, 16, 1024, 1600, 25, 6400, 50257), True, "cpu")]
    for _ in range(6):
        heads = 2 ** randint(0, 6)
        cases.append(((randint(1, 2**40), randint(1, 128), randint(1, 4096), randint(1, 2**20), heads * randint(1, 128),
                       heads, randint(1, 65536), randint(2, 2**18)), randint(0, 1) == 1, _devices()))
    for args, checkpointing, device in cases:
        expect_peak(training_peak_bytes, args, peak_parts(*args, checkpointing, device), checkpointing, device,
                    "the count is")


# ---------------------------------------------------------------- kv_cache_bytes

@KV_CACHE_BYTES.hidden
def random_real_caches(kv_cache_bytes):
    """random decoders, measured after generating, and the closed form 2 x layers x kv_heads x head_dim x context x
    batch x bytes"""
    for _ in range(4):
        kv_heads = randint(1, 4)
        layers, heads, head_dim, context, batch = randint(1, 3), kv_heads * randint(1, 3), randint(1, 8), \
            randint(1, 16), randint(1, 4)
        dtype = (torch.float32, torch.bfloat16, torch.float16)[randint(0, 2)]
        want = measured_cache(layers, heads, kv_heads, head_dim, context, batch, dtype)
        assert want == 2 * layers * kv_heads * head_dim * context * batch * ELEMENT_BYTES[dtype], "references disagree"
        expect_kv(kv_cache_bytes, (layers, kv_heads, head_dim, context, batch, dtype), want)


@KV_CACHE_BYTES.hidden
def every_cache_dtype_and_huge_sizes(kv_cache_bytes):
    """float8, float16, float32 and float64 caches, sizes up to 2**30 each: exact ints"""
    dtypes = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float16, torch.bfloat16, torch.float32, torch.float64)
    for dtype in dtypes:
        args = tuple(randint(1, 2**30) for _ in range(5)) + (dtype,)
        layers, kv_heads, head_dim, context, batch, _ = args
        expect_kv(kv_cache_bytes, args, 2 * layers * kv_heads * head_dim * context * batch * ELEMENT_BYTES[dtype],
                  "the count is")
