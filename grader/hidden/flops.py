"""Chapter 04 (flops): hidden checks, run only at grading."""
from __future__ import annotations

import torch
from torch import nn

from grader.exercises.flops import (ARITHMETIC_INTENSITY, MATMUL_FLOPS, MFU, MLP_FLOPS, ROOFLINE, TRAINING_DAYS,
                                    _Counter, expect, expect_days, expect_intensity, expect_matmul, expect_mfu,
                                    expect_mlp, expect_number, expect_roofline)
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
