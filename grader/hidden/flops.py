"""Chapter 04 (flops): hidden checks, run only at grading."""
from __future__ import annotations

import torch
from torch import nn

from grader.exercises.flops import (ARITHMETIC_INTENSITY, MATMUL_FLOPS, MFU, MLP_FLOPS, ROOFLINE, TRAINING_DAYS,
                                    TRANSFORMER_FLOPS, _Counter, counted_transformer, expect, expect_days,
                                    expect_int, expect_intensity, expect_matmul, expect_mfu, expect_mlp, expect_number,
                                    expect_roofline, expect_transformer)
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


def transformer_parts(n_layers: int, d_model: int, n_heads: int, d_ff: int, vocab_size: int,
                      seq_len: int) -> dict[str, int]:
    """The forward matmuls of one sequence, part by part, in closed form (n_heads splits d_model; it adds nothing)."""
    s, d = seq_len, d_model
    parts = {"projections": n_layers * 4 * (2 * s * d * d),       # Q, K, V, O: (s, d) @ (d, d) each
             "attention": n_layers * 2 * (2 * s * s * d),         # (s, d/h) @ (d/h, s) and (s, s) @ (s, d/h), h heads
             "mlp": n_layers * 2 * (2 * s * d * d_ff),            # (s, d) @ (d, d_ff) and (s, d_ff) @ (d_ff, d)
             "unembedding": 2 * s * d * vocab_size}               # (s, d) @ (d, vocab)
    return {"total": sum(parts.values()), **parts}


def transformer_flops(n_layers: int, d_model: int, n_heads: int, d_ff: int, vocab_size: int, seq_len: int) -> int:
    return transformer_parts(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len)["total"]


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
