"""Chapter 04 (flops): hidden checks, run only at grading."""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import torch
from torch import nn

from grader.exercises.flops import (ADAMW_STEP_FLOPS, ARITHMETIC_INTENSITY, DECODE_INTENSITY, MATMUL_FLOPS, MFU,
                                    MLP_FLOPS, RIDGE_BATCH, ROOFLINE, TRAINING_DAYS, TRANSFORMER_FLOPS, _Counter,
                                    at_sizes_no_tensor_can_hold, counted_adamw, counted_transformer, expect,
                                    expect_adamw, expect_days, expect_decode, expect_int, expect_intensity,
                                    expect_matmul, expect_mfu, expect_mlp, expect_number, expect_ridge_batch,
                                    expect_roofline, expect_transformer, measured_intensity, ridge)
from grader.inputs import randint

_Linear, _Sequential, _empty = nn.Linear, nn.Sequential, torch.empty
SECONDS_PER_DAY = 24 * 60 * 60


# ---------------------------------------------------------------- references (never shipped to students)

def matmul_flops(m: int, k: int, n: int) -> int:
    return 2 * m * k * n


def mlp_flops(batch: int, dims: list[int]) -> dict[str, int]:
    layers = [2 * batch * a * b for a, b in zip(dims, dims[1:])]
    forward = sum(layers)
    backward = 2 * forward - layers[0]  # weight gradients everywhere, input gradients except the first layer
    return {"forward": forward, "backward": backward, "total": forward + backward}


def mfu(flops: float, seconds: float, peak_flop_per_sec: float) -> float:
    return flops / seconds / peak_flop_per_sec


def training_days(num_params: float, num_tokens: float, num_gpus: int, peak_flop_per_sec: float,
                  mfu: float) -> float:
    return 6 * num_params * num_tokens / (num_gpus * peak_flop_per_sec * mfu) / SECONDS_PER_DAY


def transformer_parts(n_layers: int, d_model: int, n_heads: int, d_ff: int, vocab_size: int, seq_len: int, *,
                      n_kv_heads: int | None = None, swiglu: bool = False, count_masked: bool = True,
                      logits: bool = True) -> dict[str, int]:
    """The forward matmuls of one sequence, part by part, in closed form (n_heads splits d_model; it adds nothing)."""
    s, d = seq_len, d_model
    kv_width = (n_kv_heads or n_heads) * (d // n_heads)        # K and V: n_kv_heads heads of head_dim each
    pairs = s * s if count_masked else s * (s + 1) // 2        # (query, key) pairs scored per head
    kv = n_layers * 2 * (2 * s * d * kv_width)                 # K, V: (s, d) @ (d, kv_width) each
    parts = {"projections": n_layers * 2 * (2 * s * d * d) + kv,  # Q, O: (s, d) @ (d, d) each
             "attention": n_layers * 2 * (2 * pairs * d),      # scores and weighted sum: 2 x head_dim per pair, h heads
             "mlp": n_layers * (3 if swiglu else 2) * (2 * s * d * d_ff),  # up and down (and SwiGLU's gate)
             "unembedding": 2 * s * d * vocab_size if logits else 0}       # (s, d) @ (d, vocab)
    return {"total": sum(parts.values()), **parts, "kv": kv, "left_out": 0 if logits else 2 * s * d * vocab_size}


def transformer_flops(n_layers: int, d_model: int, n_heads: int, d_ff: int, vocab_size: int, seq_len: int,
                      **options: Any) -> int:
    return transformer_parts(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, **options)["total"]


ADAMW_FLOPS_PER_PARAM = {True: 14, False: 13}  # decay 1, first moment 3, second moment 4, update 6 (sqrt, /, +, /, x, +)


def adamw_step_flops(num_params: int, weight_decay: bool = True) -> int:
    return ADAMW_FLOPS_PER_PARAM[weight_decay] * num_params


def decode_intensity(batch: int, d_model: int, bytes_per_element: int) -> float:
    return 2 * batch * d_model * d_model / (bytes_per_element * (d_model * d_model + 2 * batch * d_model))


def ridge_batch_exact(d_model: int, bytes_per_element: int, peak: float,
                      bandwidth: float) -> tuple[int | None, Fraction]:
    """The smallest batch whose intensity reaches the ridge, exactly, and how far the real-valued crossing sits from
    the integer below it (checks draw only cases where float arithmetic cannot land on the other side)."""
    r, d, b = ridge(peak, bandwidth), d_model, bytes_per_element
    if Fraction(d, b) <= r:
        return None, Fraction(1)
    crossing = r * b * d / (2 * (d - r * b))      # 2 B d^2 = r b (d^2 + 2 B d), solved for B
    batch = max(1, math.ceil(crossing))
    return batch, min(crossing - math.floor(crossing), math.ceil(crossing) - crossing) / crossing


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    return flops / nbytes


def roofline(intensity: float, peak_flop_per_sec: float, bandwidth_bytes_per_sec: float) -> float:
    return min(peak_flop_per_sec, intensity * bandwidth_bytes_per_sec)


def counted_on_meta(batch: int, dims: list[int]) -> dict[str, int]:
    """FlopCounterMode on a model and input on the meta device: shapes only, so huge sizes cost nothing."""
    model = _Sequential(*[_Linear(a, b, bias=False, device="meta") for a, b in zip(dims, dims[1:])])
    x = _empty(batch, dims[0], device="meta")
    with _Counter(display=False) as fwd:
        out = model(x)
    with _Counter(display=False) as bwd:
        out.sum().backward()
    f, b = fwd.get_total_flops(), bwd.get_total_flops()
    return {"forward": f, "backward": b, "total": f + b}


# ---------------------------------------------------------------- matmul_flops

@MATMUL_FLOPS.hidden
def random_sizes(matmul_flops_):
    """random non-square sizes up to 10^5"""
    for _ in range(30):
        m, k, n = randint(1, 10**5), randint(1, 10**5), randint(1, 10**5)
        expect_matmul(matmul_flops_, m, k, n, matmul_flops(m, k, n))


@MATMUL_FLOPS.hidden
def exact_beyond_float_precision(matmul_flops_):
    """sizes up to 10^7, where the count passes 2**53: exact integers, no detour through floats"""
    for _ in range(10):
        m, k, n = randint(10**6, 10**7), randint(10**6, 10**7), randint(10**6, 10**7)
        expect_matmul(matmul_flops_, m, k, n, matmul_flops(m, k, n))


@MATMUL_FLOPS.hidden
def beyond_any_tensor(matmul_flops_):
    """random sizes up to 2**62 each, where m x k passes 2**63: exact ints from the sizes alone"""
    matmul_flops_ = at_sizes_no_tensor_can_hold(matmul_flops_, "matmul_flops")
    for _ in range(10):
        m, k, n = (2 ** randint(32, 62) + randint(0, 999) for _ in range(3))
        expect_matmul(matmul_flops_, m, k, n, matmul_flops(m, k, n))


# ---------------------------------------------------------------- mlp_flops

@MLP_FLOPS.hidden
def random_stacks(mlp_flops_):
    """random depths (one layer too), widths and batch sizes, against FlopCounterMode"""
    for _ in range(8):
        dims = [randint(1, 24) for _ in range(randint(2, 6))]
        expect_mlp(mlp_flops_, randint(1, 9), dims)


@MLP_FLOPS.hidden
def large_sizes(mlp_flops_):
    """wide and deep stacks at real sizes (FlopCounterMode on the meta device): exact integers"""
    for batch, dims in ((4096, [12288, 49152, 12288]), (2048, [8192] * 9), (1, [50000, 3, 50000])):
        want = counted_on_meta(batch, dims)
        assert want == mlp_flops(batch, dims), "the grader's two references disagree"
        expect_mlp(mlp_flops_, batch, dims, want)


@MLP_FLOPS.hidden
def beyond_any_tensor(mlp_flops_):
    """random stacks with widths up to 2**40, whose weights pass 2**63 elements: exact ints from the sizes alone"""
    mlp_flops_ = at_sizes_no_tensor_can_hold(mlp_flops_, "mlp_flops")
    for _ in range(6):
        dims = [2 ** randint(20, 40) + randint(0, 99) for _ in range(randint(2, 5))]
        batch = 2 ** randint(0, 40)
        expect_mlp(mlp_flops_, batch, dims, mlp_flops(batch, dims))


# ---------------------------------------------------------------- mfu

@MFU.hidden
def random_runs(mfu_):
    """random FLOPs, times and peaks, ints among them"""
    for _ in range(20):
        flops, seconds, peak = 10.0 ** randint(9, 20), 10.0 ** randint(-4, 3), 10.0 ** randint(11, 16)
        expect_mfu(mfu_, flops, seconds, peak, mfu(flops, seconds, peak))
    expect_mfu(mfu_, 3 * 10**15, 4, 10**15, 0.75)


# ---------------------------------------------------------------- training_days

@TRAINING_DAYS.hidden
def random_runs_in_days(training_days_):
    """random model sizes, tokens, GPU counts, peaks and MFUs"""
    for _ in range(20):
        n, d = 10.0 ** randint(8, 12), 10.0 ** randint(10, 14)
        gpus, peak, m = randint(1, 16384), 10.0 ** randint(13, 16), randint(10, 70) / 100
        expect_days(training_days_, n, d, gpus, peak, m, training_days(n, d, gpus, peak, m))


@TRAINING_DAYS.hidden
def scales_as_it_should(training_days_):
    """twice the GPUs or twice the MFU halve the days; twice the tokens or parameters double them"""
    base = expect_number(training_days_(8e9, 1e12, 64, 989.5e12, 0.4), "training_days(8e9, 1e12, 64, 9.895e14, 0.4)")
    for args, factor in (((8e9, 1e12, 128, 989.5e12, 0.4), 0.5), ((8e9, 1e12, 64, 989.5e12, 0.8), 0.5),
                         ((8e9, 2e12, 64, 989.5e12, 0.4), 2.0), ((16e9, 1e12, 64, 989.5e12, 0.4), 2.0)):
        got = expect_number(training_days_(*args), f"training_days{args}")
        expect(abs(got - factor * base) <= 1e-6 * factor * base,
               f"training_days{args} returned {got:.5g}, expected {factor} x {base:.5g}")


# ---------------------------------------------------------------- transformer_flops

def _random_small_shape() -> tuple[int, int, int, int, int, int]:
    heads = randint(1, 5)
    return randint(1, 4), heads * randint(1, 5), heads, randint(1, 48), randint(1, 64), randint(1, 20)


@TRANSFORMER_FLOPS.hidden
def random_small_models(transformer_flops_):
    """random small models, one head to one dimension per head, 1 to 20 tokens, against FlopCounterMode

    Fused or separate Q, K, V; biases or none; tied or untied unembedding."""
    shapes = [(1, 5, 5, 3, 7, 4), (2, 6, 1, 6, 6, 6), (3, 10, 2, 4, 3, 1), (1, 1, 1, 1, 1, 1)]
    shapes += [_random_small_shape() for _ in range(8)]
    for shape in shapes:
        want = counted_transformer(*shape, fused=randint(0, 1) == 1, bias=randint(0, 1) == 1, tied=randint(0, 1) == 1)
        assert want == transformer_parts(*shape), "the grader's two references disagree"
        expect_transformer(transformer_flops_, shape, want)


@TRANSFORMER_FLOPS.hidden
def one_token(transformer_flops_):
    """a single token: the attention matmuls are (1, d/h) @ (d/h, 1) and (1, 1) @ (1, d/h) per head, still counted"""
    for shape in ((1, 8, 2, 16, 11, 1), (4, 12, 3, 30, 50, 1)):
        expect_transformer(transformer_flops_, shape, counted_transformer(*shape))


@TRANSFORMER_FLOPS.hidden
def real_shapes_on_meta(transformer_flops_):
    """GPT-2 small and wider models at long contexts, counted by FlopCounterMode on the meta device"""
    for shape in ((12, 768, 12, 3072, 50257, 1024), (2, 4096, 32, 11008, 32000, 4096),
                  (1, 1600, 25, 6400, 50257, 16384)):
        want = counted_transformer(*shape, device="meta")
        assert want == transformer_parts(*shape), "the grader's two references disagree"
        expect_transformer(transformer_flops_, shape, want)


@TRANSFORMER_FLOPS.hidden
def huge_shapes_exactly(transformer_flops_):
    """random shapes up to 200 layers, d_model 32768, vocab 10^6 and 10^6 tokens: exact ints past 2**53"""
    for _ in range(20):
        heads = 2 ** randint(0, 7)
        shape = (randint(1, 200), heads * randint(1, 256), heads, randint(1, 131072), randint(1, 10**6),
                 randint(1, 10**6))
        expect_transformer(transformer_flops_, shape, transformer_parts(*shape), "the count is")


@TRANSFORMER_FLOPS.hidden
def heads_split_the_width(transformer_flops_):
    """the number of heads does not change the count: 1, 2, 3, 4, 6, 8, 12, 24 or 48 heads of a 48-wide model"""
    counts = {h: expect_int(transformer_flops_(3, 48, h, 100, 70, 33), f"transformer_flops(3, 48, {h}, 100, 70, 33)")
              for h in (1, 2, 3, 4, 6, 8, 12, 24, 48)}
    expect(len(set(counts.values())) == 1,
           f"transformer_flops(3, 48, heads, 100, 70, 33) changes with the number of heads: {counts}; heads split "
           "d_model into n_heads slices of d_model // n_heads, so the matmuls do the same work")


def _random_options(n_heads: int) -> dict[str, Any]:
    """A random mix of transformer_flops's conventions; n_kv_heads divides n_heads."""
    divisors = [k for k in range(1, n_heads + 1) if n_heads % k == 0]
    return {"n_kv_heads": divisors[randint(0, len(divisors) - 1)], "swiglu": randint(0, 1) == 1,
            "count_masked": randint(0, 1) == 1, "logits": randint(0, 1) == 1}


@TRANSFORMER_FLOPS.hidden
def random_conventions(transformer_flops_):
    """random small models under random mixes of the options, one to 16 tokens, against FlopCounterMode

    Grouped K and V heads (one to as many as the query heads), SwiGLU or GELU, every score or only those the causal
    mask keeps, with or without logits; fused or separate Q, K, V; biases or none."""
    for i in range(10):
        shape = _random_small_shape()
        shape = (*shape[:5], randint(1, 16))
        options = _random_options(shape[2])
        want = counted_transformer(*shape, fused=i % 2 == 1, bias=randint(0, 1) == 1, **options)
        assert want == transformer_parts(*shape, **options), "the grader's two references disagree"
        expect_transformer(transformer_flops_, shape, want, **options)


@TRANSFORMER_FLOPS.hidden
def llama_conventions_on_meta(transformer_flops_):
    """Llama-like shapes with grouped K and V heads and SwiGLU (and the causal half, and no logits), counted by
    FlopCounterMode on the meta device"""
    for shape, options in (((2, 4096, 32, 14336, 128256, 2048), {"n_kv_heads": 8, "swiglu": True}),
                           ((1, 8192, 64, 28672, 128256, 1024), {"n_kv_heads": 8, "swiglu": True, "logits": False}),
                           ((2, 2048, 16, 8192, 32000, 96), {"n_kv_heads": 4, "count_masked": False})):
        want = counted_transformer(*shape, device="meta", **options)
        assert want == transformer_parts(*shape, **options), "the grader's two references disagree"
        expect_transformer(transformer_flops_, shape, want, **options)


@TRANSFORMER_FLOPS.hidden
def beyond_any_tensor_with_conventions(transformer_flops_):
    """random shapes with d_model or the context up to 2**40 under random options: exact ints past 2**63"""
    transformer_flops_ = at_sizes_no_tensor_can_hold(transformer_flops_, "transformer_flops")
    for _ in range(12):
        heads = 2 ** randint(0, 7)
        shape = (randint(1, 200), heads * 2 ** randint(10, 33), heads, randint(1, 2**40), randint(1, 10**6),
                 2 ** randint(20, 40) + randint(0, 999))
        options = _random_options(heads)
        expect_transformer(transformer_flops_, shape, transformer_parts(*shape, **options), "the count is", **options)


@TRANSFORMER_FLOPS.hidden
def kv_heads_shrink_k_and_v_only(transformer_flops_):
    """fewer K and V heads take exactly their share of K and V's projections off, nothing else: 1 to 16 KV heads
    of a 16-head model, 4 layers, d_model 256, 100 tokens"""
    shape = (4, 256, 16, 700, 1000, 100)
    for kv_heads in (1, 2, 4, 8, 16):
        expect_transformer(transformer_flops_, shape, transformer_parts(*shape, n_kv_heads=kv_heads), "the count is",
                           n_kv_heads=kv_heads)


# ---------------------------------------------------------------- arithmetic_intensity and roofline

@ARITHMETIC_INTENSITY.hidden
def random_ratios(arithmetic_intensity_):
    """random FLOPs and bytes, ints and floats, above and below 1 FLOP per byte"""
    for _ in range(20):
        flops, nbytes = randint(1, 10**9), randint(1, 10**9)
        expect_intensity(arithmetic_intensity_, flops, nbytes, arithmetic_intensity(flops, nbytes))
    expect_intensity(arithmetic_intensity_, 3, 4, 0.75)
    expect_intensity(arithmetic_intensity_, 2.0 * 8192**3, 3.0 * 2 * 8192**2, 8192 / 3)


@ROOFLINE.hidden
def random_devices(roofline_):
    """random intensities on both sides of random devices' ridge points"""
    for _ in range(30):
        peak, bw = 10.0 ** randint(11, 16), 10.0 ** randint(10, 13)
        intensity = (peak / bw) * 10.0 ** (randint(-20, 20) / 10)
        expect_roofline(roofline_, intensity, peak, bw, roofline(intensity, peak, bw))


@ROOFLINE.hidden
def near_the_ridge(roofline_):
    """intensities within 5% of random devices' ridge points: memory-bound just below, compute-bound above"""
    for _ in range(20):
        peak, bw = randint(1, 2000) * 1e12, randint(1, 9000) * 1e9
        for factor in (0.95, 0.99, 1.0, 1.01, 1.05):
            intensity = factor * peak / bw
            expect_roofline(roofline_, intensity, peak, bw, roofline(intensity, peak, bw))


@ROOFLINE.hidden
def zero_intensity(roofline_):
    """an operation that moves bytes but computes nothing attains 0 FLOP/s"""
    expect_roofline(roofline_, 0.0, 1e15, 1e12, 0.0)


# ---------------------------------------------------------------- adamw_step_flops

@ADAMW_STEP_FLOPS.hidden
def both_implementations(adamw_step_flops_):
    """torch's AdamW, single-tensor and foreach (one kernel per operation over all parameters), random sizes: the
    same elementwise FLOPs"""
    for foreach in (False, True):
        for _ in range(3):
            sizes = [randint(1, 500) for _ in range(randint(1, 6))]
            weight_decay = randint(0, 1) == 1
            want = counted_adamw(sizes, weight_decay, foreach=foreach)
            assert want == adamw_step_flops(sum(sizes), weight_decay), "the grader's two references disagree"
            expect_adamw(adamw_step_flops_, sum(sizes), weight_decay, want)


@ADAMW_STEP_FLOPS.hidden
def exact_at_real_sizes(adamw_step_flops_):
    """7e9, 70e9 and 405e9 parameters, and random counts up to 10^20: exact ints past 2**53"""
    for n in (7 * 10**9, 70 * 10**9, 405 * 10**9, 1):
        for weight_decay in (True, False):
            expect_adamw(adamw_step_flops_, n, weight_decay, adamw_step_flops(n, weight_decay))
    for _ in range(10):
        n = randint(1, 10**9) * 10**11 + randint(0, 10**9)
        expect_adamw(adamw_step_flops_, n, True, adamw_step_flops(n))


# ---------------------------------------------------------------- decode_intensity and ridge_batch

@DECODE_INTENSITY.hidden
def random_linears(decode_intensity_):
    """random batches and widths, float32, bfloat16 and float64 and 1-byte elements, against a real nn.Linear on the
    meta device (1-byte elements against the formula)"""
    for _ in range(20):
        batch, d, b = randint(1, 10**5), randint(1, 16384), (1, 2, 4, 8)[randint(0, 3)]
        want = decode_intensity(batch, d, b)
        if b > 1:
            assert math.isclose(float(measured_intensity(batch, d, b)), want, rel_tol=1e-12), \
                "the grader's two references disagree"
        expect_decode(decode_intensity_, batch, d, b, want)


@DECODE_INTENSITY.hidden
def grows_toward_d_over_bytes(decode_intensity_):
    """batch 1 to 2**30 on d_model 4096 in bfloat16: the intensity grows with the batch, and stays below 2048"""
    previous = 0.0
    for batch in [2**i for i in range(31)]:
        got = expect_number(decode_intensity_(batch, 4096, 2), f"decode_intensity({batch}, 4096, 2)")
        expect(previous < got < 2048, f"decode_intensity({batch}, 4096, 2) returned {got:g}: it should grow with "
                                      f"the batch (it was {previous:g} at half the batch) and stay below "
                                      "d_model / bytes = 2048")
        previous = got


@DECODE_INTENSITY.hidden
def beyond_any_tensor(decode_intensity_):
    """random widths up to 2**40 and batches up to 2**50: against the formula, to 1e-9"""
    decode_intensity_ = at_sizes_no_tensor_can_hold(decode_intensity_, "decode_intensity")
    for _ in range(10):
        batch, d, b = 2 ** randint(0, 50) + randint(0, 9), 2 ** randint(32, 40) + randint(0, 9), (1, 2, 4)[randint(0, 2)]
        expect_decode(decode_intensity_, batch, d, b, decode_intensity(batch, d, b))


def _random_device() -> tuple[float, float]:
    return randint(1, 4000) * 1e12 / 2 ** randint(0, 3), randint(100, 8000) * 1e9


@RIDGE_BATCH.hidden
def random_devices_exactly(ridge_batch_):
    """random devices, widths and element sizes, with crossings well away from a whole batch: the exact batch, or None"""
    done = 0
    while done < 20:
        peak, bandwidth = _random_device()
        b = (1, 2, 4, 8)[randint(0, 3)]
        d = int(float(ridge(peak, bandwidth)) * b * randint(50, 2000) / 100) + randint(0, 3)
        want, margin = ridge_batch_exact(d, b, peak, bandwidth)
        if d < 1 or margin < 1e-9 or (want or 0) > 10**6:  # a scan from batch 1 up is slow, not wrong: keep it quick
            continue
        expect_ridge_batch(ridge_batch_, d, b, peak, bandwidth, want)
        done += 1


@RIDGE_BATCH.hidden
def the_datasheet_devices(ridge_batch_):
    """an A100 (312 TFLOP/s, 2.039 TB/s), an H100 SXM and an H200 (4.8 TB/s) in bf16, from d_model 512 to 16384"""
    for peak, bandwidth in ((312e12, 2.039e12), (989.5e12, 3.35e12), (989.5e12, 4.8e12)):
        for d in (512, 1024, 2048, 4096, 5120, 8192, 12288, 16384):
            want, margin = ridge_batch_exact(d, 2, peak, bandwidth)
            assert want is None or margin > 1e-9, "a borderline case: float arithmetic could land on either side"
            expect_ridge_batch(ridge_batch_, d, 2, peak, bandwidth, want)
